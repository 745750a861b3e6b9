//! The public [`Mode`] of a writer or reader, and the [`Stats`] of a writer.

/// How a [`Writer`] or [`Reader`] keeps its data out of the page cache.
///
/// [`Writer`]: crate::Writer
/// [`Reader`]: crate::Reader
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Use `RWF_DONTCACHE` if the file supports it, found out with the first non-empty write or
    /// read; fall back to [`Mode::Fallback`] where the kernel answers `EOPNOTSUPP` or `EINVAL`.
    /// [`Writer::mode`] reports `Auto` only until that first write.
    ///
    /// [`Writer::mode`]: crate::Writer::mode
    #[default]
    Auto,
    /// Insist on `RWF_DONTCACHE`: the first write or read fails with
    /// [`io::ErrorKind::Unsupported`] where the file (or kernel) does not support it.
    ///
    /// [`io::ErrorKind::Unsupported`]: std::io::ErrorKind::Unsupported
    Kernel,
    /// Never use `RWF_DONTCACHE`: buffered writes drained by pagepipe's flusher threads, buffered
    /// reads followed by `POSIX_FADV_DONTNEED`.
    Fallback,
}

/// What a [`Writer`] did, from [`Writer::stats`] or [`Writer::finish`]. A writer a forked child
/// inherited counts from the child's first use of it: what the parent wrote is the parent's.
///
/// [`Writer`]: crate::Writer
/// [`Writer::stats`]: crate::Writer::stats
/// [`Writer::finish`]: crate::Writer::finish
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes accepted by writes (rewrites of the same bytes count again).
    pub bytes_written: u64,
    /// The mode in use: [`Mode::Kernel`] or [`Mode::Fallback`]; [`Mode::Auto`] if nothing was
    /// written yet.
    pub mode: Mode,
    /// The most dirty bytes this writer had in flight at once. Fallback: the peak of the writer's
    /// own counter, which counts whole pages dirtied and not yet written back and dropped (a
    /// one-byte write counts the page it dirties, and a write that starts past a partly written
    /// last page also counts that page, which the kernel dirties again to zero its tail), and
    /// the pages of a large folio around a write's first or last page that the write dirtied
    /// too, where that folio could not be dropped before the write (dirty, under writeback or
    /// mapped), as measured with `cachestat(2)` (another writer's pages dirtied meanwhile in
    /// the same 2 MiB region count too). Kernel: the dirty pages of the file between
    /// the lowest and the highest offset this writer wrote, sampled with `cachestat(2)` once
    /// per window of writes (0 where `cachestat` is missing); another writer's dirty pages
    /// within that span count too (the kernel does not tell whose they are).
    pub peak_dirty_bytes: u64,
    /// How many times a write found the writer over its window (plus any overdraft) and waited
    /// for the flusher (always 0 in kernel mode, where the kernel throttles).
    pub writeback_waits: u64,
    /// How many times pacing slept before a write returned, slowing a writer that outran
    /// writeback before its window filled (always 0 in kernel mode).
    pub pauses: u64,
    /// The largest overdraft the writer held: bytes it was allowed beyond its window while
    /// another process's writeback flooded the system (see [`MAX_OVERDRAFT`]); 0 if it never
    /// yielded (always 0 in kernel mode). [`Stats::peak_dirty_bytes`] is at most the window plus
    /// this, plus one write and the large folios around it.
    ///
    /// [`MAX_OVERDRAFT`]: crate::MAX_OVERDRAFT
    pub peak_overdraft_bytes: u64,
}
