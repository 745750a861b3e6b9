//! The writer: [`Writer`], in kernel mode (`RWF_DONTCACHE`) or in fallback mode (buffered writes
//! recorded for the flusher, paced, bounded by a window).

use crate::cache::{blocks_past_end, check_room, release, reserve};
use crate::consts::{
    INITIAL_BANDWIDTH, MAX_PAUSE, MIN_PAUSE, MIN_WINDOW, OVERDRAFT_WINDOWS, PAGE, SHARED_WINDOW,
    WINDOW_RECHECK,
};
use crate::description::{refuse_append, reopen};
use crate::error::{check_regular, errno_name, is_unsupported, unsupported};
use crate::flusher::{give_back_overdraft, lock, take_overdraft, Shared, FLUSHER};
use crate::folios::Folios;
use crate::fork;
use crate::mode::{Mode, Stats};
use crate::pacing::{cpus, overdraft_rate, room, settle, take_pause};
use crate::reader::{seek_target, Reader};
use pagepipe_sys as sys;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A file writer that leaves no page cache behind: [`io::Write`] + [`io::Seek`] and positional
/// [`Writer::write_at`]. See the [crate docs](crate) for how.
///
/// ```
/// use std::io::{Seek, SeekFrom, Write};
/// use pagepipe_dontcache::{Mode, Writer};
///
/// let path = std::env::temp_dir().join(format!("dontcache-writer-doc-{}", std::process::id()));
/// let file = std::fs::File::create(&path)?;
/// let mut w = Writer::with_mode(file, Mode::Fallback)?.with_window(4 << 20);
/// w.write_at(b"world", 6)?;
/// w.write_all(b"hello ")?; // at the cursor, 0
/// w.seek(SeekFrom::End(0))?;
/// w.write_all(b"!")?;
/// let stats = w.finish()?;
/// assert_eq!(std::fs::read(&path)?, b"hello world!");
/// assert_eq!(stats.mode, Mode::Fallback);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Writer {
    /// The caller's file, as given ([`Writer::file`]).
    file: File,
    /// The writer's own open file description of the same file (see `crate::description`):
    /// every write, sync and flusher call goes through it, so that no other descriptor of the
    /// caller's description (a `dup`, a forked child) can consume the writeback errors the
    /// writer has to report. The caller's description itself where a new one cannot be opened
    /// (`private` false). Owned here, not in `Shared`, so that it is closed in the writer's
    /// thread when the writer goes (see `Inflight::closed`).
    io: File,
    /// Whether `io` is a description of the writer's own.
    private: bool,
    /// The fork generation in which `io` and `shared` were made: an older one means the writer
    /// was inherited by a forked child and must take its own before it does anything
    /// ([`Writer::adopt`]).
    generation: u64,
    shared: Arc<Shared>,
    /// Auto until the first non-empty write, then Kernel or Fallback.
    mode: Mode,
    pos: u64,
    /// The file's size as this writer knows it: its size when the writer was made, raised by
    /// each of its writes (other writers may have grown it further: what matters here is only
    /// whether a write starts past a partly written last page, see `write_fallback`).
    end: u64,
    bytes_written: u64,
    peak_dirty: u64,
    /// The largest overdraft held (see [`Stats::peak_overdraft_bytes`]).
    peak_overdraft: u64,
    waits: u64,
    /// Pause owed by [`Writer::pace`] and not yet taken, in nanoseconds; negative when the last
    /// pause took longer than owed (a credit, at most [`MAX_CREDIT`]).
    ///
    /// [`MAX_CREDIT`]: crate::consts::MAX_CREDIT
    pace_debt_ns: i64,
    pauses: u64,
    /// Kernel mode: bytes_written at which to sample the file's dirty pages next.
    next_sample: u64,
    /// Kernel mode: the pages this writer's writes span, `start..end` (empty: none yet). Its
    /// dirty pages are sampled there only, so that another writer filling another part of the
    /// file does not count as this one's.
    span: std::ops::Range<u64>,
    /// Fallback: the stream of sequential writes, for measuring what large folios around a
    /// write add to what it dirtied (`crate::folios`).
    folios: Folios,
    registered: bool,
    /// Set by finish: Drop has nothing left to do.
    finished: bool,
}

// A writer may move to another thread (its flusher state is shared through an Arc).
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Writer>();
    assert_send::<Reader>();
};

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("mode", &self.mode)
            .field("pos", &self.pos)
            .field("own_description", &self.private)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Writer {
    /// Creates (or truncates) the file at `path` and writes it in [`Mode::Auto`].
    ///
    /// # Errors
    /// Those of [`File::create`].
    pub fn create(path: impl AsRef<Path>) -> io::Result<Writer> {
        Writer::with_mode(File::create(path)?, Mode::Auto)
    }

    /// Writes `file` (opened for writing, not `O_DIRECT`, not append-only) in `mode`, starting at
    /// offset 0. [`Mode::Kernel`] learns whether the file supports `RWF_DONTCACHE` only with the
    /// first write, which then fails with [`io::ErrorKind::Unsupported`].
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if `file` is not a regular file, or is open for appending
    /// (Linux would write every write at the end, not where the writer says); the OS's error if
    /// the flusher threads cannot be started.
    pub fn with_mode(file: File, mode: Mode) -> io::Result<Writer> {
        check_regular(&file)?;
        refuse_append(&file)?;
        fork::install();
        let end = file.metadata()?.len();
        let (io, private) = match reopen(&file) {
            Ok(io) => (io, true),
            Err(_) => (file.try_clone()?, false),
        };
        let mut w = Writer {
            shared: Arc::new(Shared::new(io.as_raw_fd())),
            file,
            io,
            private,
            generation: fork::generation(),
            mode,
            pos: 0,
            end,
            bytes_written: 0,
            peak_dirty: 0,
            peak_overdraft: 0,
            waits: 0,
            pace_debt_ns: 0,
            pauses: 0,
            next_sample: 0,
            span: 0..0,
            folios: Folios::new(),
            registered: false,
            finished: false,
        };
        if mode == Mode::Fallback {
            w.register()?;
        }
        Ok(w)
    }

    /// Sets the bound on dirty data in flight (fallback mode; in kernel mode it only sets how
    /// often dirty pages are sampled for [`Stats::peak_dirty_bytes`]). Values below
    /// [`MIN_WINDOW`] are raised to it. Default [`DEFAULT_WINDOW`]. While another process's
    /// writeback floods the system the writer may hold up to three more windows, as far as the
    /// process-wide [`MAX_OVERDRAFT`] allows (see the [crate docs](crate)).
    ///
    /// [`DEFAULT_WINDOW`]: crate::DEFAULT_WINDOW
    /// [`MAX_OVERDRAFT`]: crate::MAX_OVERDRAFT
    pub fn with_window(self, bytes: usize) -> Writer {
        let window = bytes.max(MIN_WINDOW) as u64;
        self.shared.window.store(window, Ordering::Relaxed);
        self
    }

    /// The window in bytes (see [`Writer::with_window`]).
    pub fn window(&self) -> usize {
        self.shared.window.load(Ordering::Relaxed) as usize
    }

    /// The mode in use: [`Mode::Auto`] until the first non-empty write has probed the file.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The file as given to [`Writer::with_mode`]. The writer itself writes and syncs through a
    /// description of its own of the same file (see [`Writer::finish`]), so what the caller
    /// does with this one (a sync, a `dup` in another process) cannot take the writer's errors.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// What the writer did so far.
    pub fn stats(&self) -> Stats {
        Stats {
            bytes_written: self.bytes_written,
            mode: self.mode,
            peak_dirty_bytes: self.peak_dirty,
            peak_overdraft_bytes: self.peak_overdraft,
            writeback_waits: self.waits,
            pauses: self.pauses,
        }
    }

    /// Reserves disk blocks for the file's first `len` bytes (`fallocate(2)` with
    /// `FALLOC_FL_KEEP_SIZE`: the file's size does not change). Call it before writing when the
    /// final size is known, as a copy knows its source's.
    ///
    /// Writeback then allocates nothing. On ext4 that keeps the writer's writes from waiting for
    /// the inode's block-map lock (`i_data_sem`), which the writeback of freshly written data
    /// holds while it allocates blocks, reading block bitmaps, behind whatever else the disk is
    /// busy with: with another process's `fsync` flooding the disk, the fallback writer's
    /// slowest write fell from tens of milliseconds to a few (see docs/dontcache.md). It also
    /// reports a full disk before anything is written. In [`Mode::Kernel`] it does not help, and
    /// on the development VM's ext4 it made the slowest of 1024 sequential 1 MiB
    /// `RWF_DONTCACHE` writes 45 ms instead of 15-25 (throughput unchanged).
    ///
    /// The reservation is the caller's: [`Writer::finish`] and drop never give back blocks
    /// reserved past the file's end, as `fallocate --keep-size` leaves them. Giving them back
    /// means cutting the file at its end, and the end is a moving target while another writer
    /// extends the file: a length read and then set back (what this writer did before issue 27)
    /// cut off what the other wrote in between, and two writers filling one file in parallel
    /// got zeroed blocks back in 2-7 of 10 runs per mode. The caller gives the rest back: on
    /// ext4 with [`release`]`(w.file())`, which has the kernel cut the file at its size of the
    /// moment and so never cuts another writer's append (it frees another writer's reservation
    /// past the end too); on any filesystem, if it knows it is the file's only writer, with
    /// `file().set_len(final_len)`. A filesystem that cannot preallocate (`EOPNOTSUPP`) is left
    /// alone: the call does nothing.
    ///
    /// A request that may not fit is refused before anything is reserved: what the file does
    /// not hold yet is compared with the filesystem's free space for unprivileged use
    /// (`fstatvfs`'s `f_bavail`: not the blocks reserved for root, even for root, nor ext4's
    /// own reserve, which `fallocate` may not take either). A failing `fallocate` keeps what it
    /// allocated before it ran out (a 10 GiB request on a 512 MiB filesystem kept 488 MiB, and
    /// a request of all of `f_bfree` on a 16 MiB ext4 kept 13.4 MiB), so this check is what
    /// keeps a refused request from holding the disk. Where `fallocate` fails anyway (the space
    /// taken meanwhile by someone else), the writer gives back what the call left reserved past
    /// the file's end without touching a byte inside it: on ext4 with an append that fails
    /// before any data moves, after which the kernel cuts the file at its size of that
    /// instant, under the inode lock, so that no other writer's append is ever cut; tmpfs
    /// undoes a failed call itself. That frees whatever was reserved past the end, another
    /// writer's reservation too. The error says what is left: blocks the call allocated in the
    /// file's holes stay (they read as zeros, and freeing them could zero what another writer
    /// writes there meanwhile), and so does what it reserved past the end on a filesystem where
    /// neither way works.
    ///
    /// ```
    /// use std::io::Write;
    /// use pagepipe_dontcache::Writer;
    ///
    /// let path = std::env::temp_dir().join(format!("dontcache-prealloc-{}", std::process::id()));
    /// let mut w = Writer::create(&path)?;
    /// w.preallocate(1 << 20)?; // reserved, still 0 bytes long
    /// assert_eq!(w.file().metadata()?.len(), 0);
    /// w.write_all(&[7u8; 4096])?;
    /// w.file().set_len(4096)?; // the only writer: what was reserved past 4 KiB is given back
    /// w.finish()?;
    /// assert_eq!(std::fs::metadata(&path)?.len(), 4096);
    /// std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`io::ErrorKind::StorageFull`] when the filesystem cannot hold `len` bytes (nothing is
    /// then reserved), [`io::ErrorKind::FileTooLarge`] past its largest file, and `fallocate`'s
    /// other errors; a kept writeback error.
    pub fn preallocate(&mut self, len: u64) -> io::Result<()> {
        self.adopt()?;
        self.shared.check_error()?;
        if len == 0 {
            return Ok(());
        }
        let before = self.io.metadata()?;
        check_room(&self.io, &before, len)?;
        match reserve(&self.io, len) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.unreserve(e, &before, len)),
        }
    }

    /// After a failed `fallocate(0..len)` (the file's metadata before it: `before`): gives back
    /// what the call left reserved past the file's end, where that touches no one's data, and
    /// returns the error to report, saying what is left.
    ///
    /// A failing `fallocate` keeps the blocks it allocated before it ran out. Those in the
    /// file's holes stay: they read as zeros as before, and a hole punch there could zero what
    /// another writer wrote meanwhile. Past the end, only a cut at the size frees them on ext4
    /// (a hole punch is clamped to the size), and the kernel makes that cut, at the size of the
    /// moment, when a write that would extend the file fails ([`release`]). A punch or a
    /// truncation at a size read beforehand (what this writer did before) zeroes or cuts off
    /// whatever another writer appended in between.
    fn unreserve(&self, e: io::Error, before: &std::fs::Metadata, len: u64) -> io::Error {
        use std::os::unix::fs::MetadataExt;
        let left = match blocks_past_end(&self.io) {
            Ok(Some(false)) => "no block is left reserved past the file's end".to_string(),
            Ok(Some(true)) => match release(&self.io) {
                Ok(()) => {
                    "the blocks it left reserved past the file's end were given back".to_string()
                }
                Err(why) => format!(
                    "blocks stay reserved past the file's end ({why}): truncating the file to \
                     its size frees them, if no one else writes it"
                ),
            },
            Ok(None) => match self.io.metadata() {
                Ok(m) if m.blocks() <= before.blocks() => {
                    "the file holds no more blocks than before the call".to_string()
                }
                _ => "blocks may stay reserved past the file's end (this filesystem does not \
                      say where a file's blocks lie)"
                    .to_string(),
            },
            Err(why) => format!("what it left reserved cannot be seen ({why})"),
        };
        io::Error::new(
            e.kind(),
            format!(
                "fallocate of bytes 0..{len} reported {} ({e}); {left}",
                errno_name(&e)
            ),
        )
    }

    /// In a forked child, before an inherited writer does anything: takes an open file
    /// description and flusher state of its own (the window and any kept error carry over;
    /// what the parent had in flight stays the parent's). Through the parent's description,
    /// the child's syncs would consume the writeback errors the parent's [`Writer::finish`]
    /// must report (see `crate::fork`). The parent's reservation stays the parent's too.
    ///
    /// # Errors
    /// The reopen's ([`crate::description`]): an inherited writer that cannot have a description
    /// of its own refuses to work in the child rather than take the parent's errors.
    fn adopt(&mut self) -> io::Result<()> {
        let now = fork::generation();
        if self.generation == now {
            return Ok(());
        }
        let io = reopen(&self.file).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "a dontcache writer inherited across fork cannot open a file description of \
                     its own, and will not sync through its parent's: {e}"
                ),
            )
        })?;
        let shared = Arc::new(Shared::new(io.as_raw_fd()));
        // Relaxed: the writer's own setting.
        let window = self.shared.window.load(Ordering::Relaxed);
        shared.window.store(window, Ordering::Relaxed);
        shared.inherit_error(&self.shared);
        // The parent's state (its locks may be held by threads the child does not have) is
        // never touched again; the child's flusher has forgotten it.
        self.shared = shared;
        self.io = io;
        self.private = true;
        self.generation = now;
        self.registered = false;
        // The child's figures start here: its finish() cannot vouch for the parent's bytes
        // (their errors were the parent's to see), so its Stats do not count them either.
        self.bytes_written = 0;
        self.peak_dirty = 0;
        self.peak_overdraft = 0;
        self.waits = 0;
        self.pace_debt_ns = 0;
        self.pauses = 0;
        self.next_sample = 0;
        self.span = 0..0;
        if self.mode == Mode::Fallback {
            self.register()?;
        }
        Ok(())
    }

    fn register(&mut self) -> io::Result<()> {
        if !self.registered {
            FLUSHER.register(&self.shared)?;
            self.registered = true;
        }
        Ok(())
    }

    /// Writes `buf` at `offset`, leaving the cursor alone, like `pwrite(2)`: returns how many
    /// bytes were written, possibly fewer than `buf.len()`.
    ///
    /// # Errors
    /// The write's own error (for example [`io::ErrorKind::StorageFull`]); a kept error of earlier
    /// writeback; [`io::ErrorKind::Unsupported`] for the first write in [`Mode::Kernel`] on a file
    /// without `RWF_DONTCACHE`.
    pub fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.adopt()?;
        self.shared.check_error()?;
        if buf.is_empty() {
            return Ok(0);
        }
        let n = match self.mode {
            Mode::Kernel => self.write_kernel(buf, offset)?,
            Mode::Fallback => self.write_fallback(buf, offset)?,
            Mode::Auto => self.write_probe(buf, offset)?,
        };
        self.bytes_written += n as u64;
        Ok(n)
    }

    /// Writes all of `buf` at `offset` (repeating short writes).
    ///
    /// # Errors
    /// As [`Writer::write_at`]; [`io::ErrorKind::WriteZero`] if a write makes no progress.
    pub fn write_all_at(&mut self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "dontcache write made no progress",
                    ))
                }
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The first non-empty write in Auto mode: try the flag, settle the mode.
    fn write_probe(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        match sys::fs::pwritev2(&self.io, buf, offset, sys::fs::RWF_DONTCACHE) {
            Ok(n) => {
                self.mode = Mode::Kernel;
                self.after_kernel_write(offset, n);
                Ok(n)
            }
            Err(e) if is_unsupported(&e) => {
                self.register()?;
                self.mode = Mode::Fallback;
                self.write_fallback(buf, offset)
            }
            Err(e) => Err(e),
        }
    }

    fn write_kernel(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let n = match sys::fs::pwritev2(&self.io, buf, offset, sys::fs::RWF_DONTCACHE) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Err(unsupported(e)),
            Err(e) if self.bytes_written == 0 && is_unsupported(&e) => return Err(unsupported(e)),
            Err(e) => return Err(e),
        };
        self.after_kernel_write(offset, n);
        Ok(n)
    }

    /// Kernel mode: samples the dirty pages of the span of this writer's writes once per window
    /// of writes.
    fn after_kernel_write(&mut self, offset: u64, n: usize) {
        let (start, end) = (offset & !(PAGE - 1), offset + n as u64);
        self.span = if self.span.is_empty() {
            start..end
        } else {
            self.span.start.min(start)..self.span.end.max(end)
        };
        let written = self.bytes_written + n as u64;
        if written < self.next_sample {
            return;
        }
        self.next_sample = written + self.shared.window.load(Ordering::Relaxed);
        let len = self.span.end - self.span.start;
        if let Ok(cs) = sys::fs::cachestat(&self.io, self.span.start, len) {
            self.peak_dirty = self.peak_dirty.max(cs.nr_dirty * PAGE);
        }
    }

    fn write_fallback(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        // Registered at creation, on Auto's switch and on adoption in a forked child; again here
        // if that failed (no thread could be started), so that no write waits for room a
        // flusher that is not there would make.
        self.register()?;
        let edges = self.folios.before(&self.io, offset, buf.len());
        let n = self.io.write_at(buf, offset)?;
        if n == 0 {
            return Ok(0);
        }
        let old_end = self.end;
        self.end = old_end.max(offset + n as u64);
        // A write that starts past a partly written last page makes the kernel dirty that page
        // again (it zeroes the bytes past the old end): a page no write of ours touched, counted
        // and written back as if we had (a clean or uncached one costs a page of the window).
        let mut kick = false;
        if offset / PAGE > old_end / PAGE && old_end % PAGE != 0 {
            kick = self.shared.record(old_end, 1).1;
        }
        self.folios.after(offset, n);
        let (mut dirty, kick_now) = self.shared.record(offset, n as u64);
        kick |= kick_now;
        for folio in edges.excess(&self.io, offset, n) {
            let (now, kick_folio) = self.shared.record_folio(folio);
            dirty = now;
            kick |= kick_folio;
        }
        self.peak_dirty = self.peak_dirty.max(dirty);
        if kick {
            FLUSHER.kick();
        }
        self.update_grant(dirty);
        if self.shared.over_limit() {
            self.wait_for_room();
        } else {
            self.pace(n as u64, dirty);
        }
        Ok(n)
    }

    /// Slows a writer that outruns writeback down to its share of the measured bandwidth
    /// before its window fills, so that it waits a little on every write rather than for a whole
    /// piece's writeback now and then (the tail latency of a full window), as the kernel's
    /// `balance_dirty_pages` pauses writers in proportion to their dirtying rate. Below a quarter
    /// of its window a writer runs free; above, each write of `n` bytes owes `n / (share * room)`
    /// seconds, where `share` is the measured bandwidth (or [`INITIAL_BANDWIDTH`] before the
    /// first measurement) over the writers with data in flight and `room` is
    /// `(window - dirty) / (window/2)`: at half the window it writes exactly as fast as
    /// writeback drains it, and the pause grows gently (2x at three quarters) and then without
    /// bound (up to [`MAX_PAUSE`]) as the window fills. The set point leaves half the window to
    /// absorb a stall of writeback (the block layer's throttling held the flusher's submissions
    /// for up to 70 ms) with short pauses before the window's hard limit is reached; a set point
    /// at a quarter (tried) kept too little in flight: the writer lost throughput on random
    /// writes and its share of the disk against a competing writer. The same rule applies to
    /// all fallback writers' data against [`SHARED_WINDOW`] for a writer holding more than half
    /// its fair share of it (the smaller room wins), so that many writers cannot pile up a
    /// window each. Pauses shorter than
    /// [`MIN_PAUSE`] accumulate. A pause is counted at what it really took (see [`settle`]): an
    /// overrun is a credit against the next pauses, so a writer is slowed to its share, not
    /// below it, however late the scheduler wakes it. Pauses up to [`SPIN_PAUSE`] are spun
    /// while fewer writers are paced than there are CPUs (see [`take_pause`]): a 64 KiB write
    /// keeping pace with a 1 GB/s disk owes ~60 µs, less than a sleep's wake-up takes on a busy
    /// machine.
    ///
    /// [`SPIN_PAUSE`]: crate::consts::SPIN_PAUSE
    fn pace(&mut self, n: u64, dirty: u64) {
        // Relaxed: tuning values and statistics; stale reads only shift a pause.
        let measured = FLUSHER.bandwidth.load(Ordering::Relaxed);
        let bandwidth = if measured == 0 {
            INITIAL_BANDWIDTH
        } else {
            measured
        };
        let active = FLUSHER.active.load(Ordering::Relaxed).max(1);
        let window = self.shared.window.load(Ordering::Relaxed);
        let grant = self.shared.grant.load(Ordering::Relaxed);
        let share = (bandwidth / active).max(1);
        // Relaxed: a heuristic.
        let yielding = FLUSHER.yielding.load(Ordering::Relaxed);
        if let Some(rate) = overdraft_rate(grant, yielding, dirty, window, share) {
            self.owe(n as f64 / rate as f64, active);
            return;
        }
        let shared = (SHARED_WINDOW as u64).max(window);
        let total = FLUSHER.total_dirty.load(Ordering::Relaxed);
        // The rate allowed, as a fraction of the share: 3/2 at a quarter of the window, 1 at
        // half, falling to 0 at the window (the pause grows without bound, up to MAX_PAUSE).
        let own = (dirty > window / 4).then(|| room(dirty, window));
        // The same against all writers' data and SHARED_WINDOW, for a writer holding more
        // than half its fair share of it (a writer with little in flight runs free).
        let all = (total > shared / 2 && dirty > shared / active / 2).then(|| room(total, shared));
        let Some(room) = own.into_iter().chain(all).reduce(f64::min) else {
            self.pace_debt_ns = 0;
            return;
        };
        self.owe(n as f64 / (share as f64 * room), active);
    }

    /// Adds a pause of `secs` to what the writer owes and takes it once it reaches
    /// [`MIN_PAUSE`] (see [`Writer::pace`]); `active` writers share the disk.
    fn owe(&mut self, secs: f64, active: u64) {
        let max = MAX_PAUSE.as_nanos() as i64;
        let pause = (secs * 1e9).min(max as f64) as i64;
        let debt = (self.pace_debt_ns + pause).min(max);
        if debt < MIN_PAUSE.as_nanos() as i64 {
            self.pace_debt_ns = debt;
            return;
        }
        let spin = active < cpus();
        let took = take_pause(Duration::from_nanos(debt as u64), spin);
        self.pace_debt_ns = settle(debt, took);
        self.pauses += 1;
    }

    /// Takes an overdraft when the submitter starts yielding to another process's writeback,
    /// and gives it back once the writer has no use for it: writeback runs again and its dirty
    /// data is back at the pacing set point (half its window).
    fn update_grant(&mut self, dirty: u64) {
        let s = &*self.shared;
        // Relaxed: this writer's own values, and a heuristic flag.
        let window = s.window.load(Ordering::Relaxed);
        let grant = s.grant.load(Ordering::Relaxed);
        let yielding = FLUSHER.yielding.load(Ordering::Relaxed);
        if grant == 0 && yielding {
            let taken = take_overdraft(OVERDRAFT_WINDOWS * window);
            s.grant.store(taken, Ordering::Relaxed);
            self.peak_overdraft = self.peak_overdraft.max(taken);
        } else if grant > 0 && !yielding && dirty <= window / 2 {
            s.grant.store(0, Ordering::Relaxed);
            give_back_overdraft(grant);
        }
    }

    /// Sleeps until the flusher has brought this writer's dirty data back within its window, or
    /// failed. Never writes anything back itself.
    fn wait_for_room(&mut self) {
        self.waits += 1;
        FLUSHER.kick();
        let s = &*self.shared;
        loop {
            // Acquire: pairs with the Release increment in Shared::drop_range.
            let seen = FLUSHER.progress.load(Ordering::Acquire);
            // SeqCst: store-load handshake with Shared::drop_range (see there); the load of the
            // count in over_limit is the other half.
            FLUSHER.waiters.fetch_add(1, Ordering::SeqCst);
            // Acquire: pairs with the Release store in Shared::set_error.
            let done = !s.over_limit() || s.failed.load(Ordering::Acquire);
            if !done {
                sys::futex::wait(&FLUSHER.progress, seen, Some(WINDOW_RECHECK));
            }
            // Relaxed: only the increment above takes part in the handshake.
            FLUSHER.waiters.fetch_sub(1, Ordering::Relaxed);
            if done {
                break;
            }
        }
    }

    /// Makes everything written so far durable (`fdatasync(2)`) and, in fallback mode, drops it
    /// from the page cache. Waits on the caller's thread.
    ///
    /// # Errors
    /// A kept error of earlier writeback, or `fdatasync`'s error (which is then kept too).
    pub fn sync(&mut self) -> io::Result<()> {
        self.adopt()?;
        self.shared.check_error()?;
        if self.mode == Mode::Fallback {
            // Its error is kept, and reported below.
            let _ = self.shared.drain(&self.io, true);
        } else if let Err(e) = self.io.sync_data() {
            self.shared.set_error(&e, "fdatasync".to_string());
        }
        self.shared.check_error()
    }

    /// [`Writer::sync`]s, closes the file and returns what the writer did.
    ///
    /// `Ok` means, in both modes: every byte this writer's writes accepted is on disk (its
    /// `fdatasync` returned 0), and no writeback error of the file was recorded since the
    /// writer was made. The kernel records writeback errors per file, not per range, and the
    /// writer checks them through an open file description of its own: it reports every error
    /// of the file recorded after it was made (or not yet reported to anyone when it was),
    /// another writer's included, so two writers of one file each see the other's losses;
    /// nothing else (another writer, a `dup` of the caller's file, a forked child, with or
    /// without its own writer) can consume them. It cannot say which bytes were lost: the error
    /// names the call and what the kernel reported (`fdatasync reported ENOSPC ...`). It does
    /// not cover the file's name (sync the directory for that) nor bytes written through other
    /// descriptors. Where `/proc` is missing the writer shares the caller's description, and a
    /// sync through another descriptor of it can take the error first. See docs/dontcache.md.
    ///
    /// # Errors
    /// As [`Writer::sync`]: a kept writeback error, or `fdatasync`'s.
    pub fn finish(mut self) -> io::Result<Stats> {
        let synced = self.sync();
        // After an error, leave the best-effort drain to Drop so the writer's pages still leave
        // the cache.
        self.finished = synced.is_ok();
        synced.map(|()| self.stats())
    }
}

impl Write for Writer {
    /// Writes at the cursor and advances it; see [`Writer::write_at`].
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Reports a kept writeback error and, in fallback mode, asks the flusher to start writing
    /// back now. Not a durability point: that is [`Writer::sync`].
    fn flush(&mut self) -> io::Result<()> {
        self.adopt()?;
        if self.mode == Mode::Fallback {
            FLUSHER.kick();
        }
        self.shared.check_error()
    }
}

impl Seek for Writer {
    /// Moves the cursor for [`Write::write`]; `SeekFrom::End` is relative to the file's current
    /// size.
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.pos = seek_target(&self.file, self.pos, pos)?;
        Ok(self.pos)
    }
}

impl Drop for Writer {
    /// Writes back and drops what this writer left dirty, ignoring errors (best effort, as
    /// dropping a [`File`] is); call [`Writer::finish`] to see them.
    fn drop(&mut self) {
        if self.generation != fork::generation() {
            // Inherited by a forked child that never used it (using it would have adopted it):
            // nothing of the child's own to write back, and the parent's state (its ranges, its
            // locks, which threads the child does not have may hold) is the parent's. Only the
            // descriptors close.
            return;
        }
        if !self.finished && self.mode == Mode::Fallback {
            let _ = self.shared.drain(&self.io, false);
        }
        // From here on the flusher threads leave the fd alone; the File closes when this
        // returns. Same lock order as `drain`: `starting`, then `inflight`.
        let mut starting = lock(&self.shared.starting);
        *starting = true;
        lock(&self.shared.inflight).closed = true;
        drop(starting);
        // Relaxed: the writer's own value (see Shared::grant).
        give_back_overdraft(self.shared.grant.swap(0, Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writeback_error_is_kept_and_reported_everywhere() {
        let path =
            std::env::temp_dir().join(format!("pagepipe-dontcache-sticky-{}", std::process::id()));
        let mut w = Writer::with_mode(File::create(&path).unwrap(), Mode::Fallback).unwrap();
        w.write_all(b"before").unwrap();
        let eio = io::Error::from_raw_os_error(libc::EIO);
        w.shared
            .set_error(&eio, "writeback of bytes 0..4096".to_string());
        w.shared.set_error(
            &io::Error::from_raw_os_error(libc::ENOSPC),
            "later".to_string(),
        );
        let e = w.write(b"after").unwrap_err();
        assert_eq!(e.raw_os_error(), None);
        assert!(e.to_string().contains("writeback of bytes 0..4096"), "{e}");
        assert_eq!(e.kind(), eio.kind());
        assert_eq!(w.flush().unwrap_err().kind(), eio.kind());
        assert_eq!(w.sync().unwrap_err().kind(), eio.kind());
        assert_eq!(w.finish().unwrap_err().kind(), eio.kind());
        std::fs::remove_file(&path).unwrap();
    }
}
