//! The pool's policies: which freed pages stay resident, whether a writer faults pages in
//! before taking the write side, and when spare pages are trimmed.
//!
//! Every slot position of a pipe owns one page-sized buffer in the pipe's arena. A position that
//! holds no data is *free*; its page is either *resident* (a spare page in the pool: the next write
//! there costs no page fault) or given back to the OS with `MADV_DONTNEED` (the next write there
//! faults in a zeroed page: the userspace price of the kernel's `alloc_page()`). A policy decides
//! which freed pages stay resident, whether a writer faults pages in before taking the write side,
//! and when spare pages are trimmed.

/// How a pipe recycles the pages its data passes through.
///
/// The variants reproduce Linux's designs, plus pagepipe's default: `TmpPage` is the pipe's
/// two-page cache (`pipe_inode_info.tmp_page`, filled and used by `pipe_write()` in
/// `fs/pipe.c`), `Unified` the per-pipe page pool proposed in 2026 to replace it. What each
/// costs is measured by `pagepipe-bench pipe --pool` (docs/benchmarks.md).
///
/// ```
/// use pagepipe::{Builder, PoolPolicy};
/// let (_w, _r) = Builder::new().pool(PoolPolicy::Unified { keep: 2, burst: 8 }).build()?;
/// assert_eq!(PoolPolicy::default(), PoolPolicy::Adaptive { keep: 2 });
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPolicy {
    /// The 2026 kernel's unified per-pipe pool: before taking the write side a writer faults in
    /// up to `min(pages needed, burst)` pages; after the write the pool is trimmed back to `keep`
    /// spare pages. Reads keep freed pages only while fewer than `keep` are spare.
    Unified {
        /// Spare pages kept between writes (the kernel keeps 2).
        keep: usize,
        /// Most pages faulted in ahead of one write (the kernel's burst is 8).
        burst: usize,
    },
    /// The pre-2026 kernel: two cached pages (`tmp_page[2]`); every other page is faulted in while
    /// holding the write side and given back as soon as it is read.
    TmpPage,
    /// No pool: every page goes back to the OS when read and is faulted in again when written.
    None,
    /// pagepipe's default: freed pages stay resident while the pipe is busy, so steady streaming
    /// takes no page faults; a pipe idle for about 100 ms (or [`crate::shrink`]) trims
    /// them back to `keep` spare pages.
    Adaptive {
        /// Spare pages an idle pipe keeps.
        keep: usize,
    },
}

impl Default for PoolPolicy {
    /// `Adaptive { keep: 2 }`, chosen by measurement (docs/benchmarks.md, the pool experiment).
    fn default() -> Self {
        PoolPolicy::Adaptive { keep: 2 }
    }
}

impl PoolPolicy {
    /// Whether a page freed by a read stays resident, given the spare pages already resident
    /// (computed only by the policies that need it: it reads shared counters).
    pub(crate) fn keep_on_release(self, spare: impl FnOnce() -> usize) -> bool {
        match self {
            PoolPolicy::Unified { keep, .. } => spare() < keep,
            PoolPolicy::TmpPage => spare() < 2,
            PoolPolicy::None => false,
            PoolPolicy::Adaptive { .. } => true,
        }
    }

    /// How many pages a writer of `len` bytes faults in before taking the write side.
    pub(crate) fn prefill(self, len: usize, slot_size: usize) -> usize {
        match self {
            PoolPolicy::Unified { burst, .. } => len.div_ceil(slot_size).min(burst),
            _ => 0,
        }
    }

    /// Spare pages to keep after every write, if this policy trims after writes.
    pub(crate) fn trim_after_write(self) -> Option<usize> {
        match self {
            PoolPolicy::Unified { keep, .. } => Some(keep),
            _ => None,
        }
    }

    /// Spare pages an idle pipe keeps.
    #[cfg(not(loom))]
    pub(crate) fn idle_keep(self) -> usize {
        match self {
            PoolPolicy::Unified { keep, .. } | PoolPolicy::Adaptive { keep } => keep,
            PoolPolicy::TmpPage => 2,
            PoolPolicy::None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_decide_as_documented() {
        let unified = PoolPolicy::Unified { keep: 2, burst: 8 };
        assert!(unified.keep_on_release(|| 1));
        assert!(!unified.keep_on_release(|| 2));
        assert_eq!(unified.prefill(64 * 1024, 4096), 8);
        assert_eq!(unified.prefill(5000, 4096), 2);
        assert_eq!(unified.trim_after_write(), Some(2));
        assert!(PoolPolicy::TmpPage.keep_on_release(|| 1));
        assert!(!PoolPolicy::TmpPage.keep_on_release(|| 2));
        assert!(!PoolPolicy::None.keep_on_release(|| 0));
        assert!(PoolPolicy::default().keep_on_release(|| unreachable!("adaptive keeps every page")));
        assert_eq!(PoolPolicy::None.prefill(1 << 20, 4096), 0);
    }
}
