//! Dirty ranges: the pages a fallback writer dirtied, as its flusher state queues them (pending,
//! then in flight) and hands them to the kernel.

use crate::consts::PAGE;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};

/// Pages a writer dirtied: `start..end`, page aligned, and how many bytes of writes they carry.
///
/// Invariant: `start % PAGE == 0`, `end % PAGE == 0`, `start < end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Bytes added to the writer's dirty counter for this range; subtracted when it is dropped.
    pub(crate) charged: u64,
}

impl Range {
    /// The pages touched by a write of `len > 0` bytes at `offset`, charged `len` (callers that
    /// charge pages set `charged` themselves).
    pub(crate) fn of_write(offset: u64, len: u64) -> Range {
        debug_assert!(len > 0);
        let start = offset & !(PAGE - 1);
        let end = (offset + len).div_ceil(PAGE) * PAGE;
        Range {
            start,
            end,
            charged: len,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Cuts the range at the multiples of `piece` (a power of two, at least a page), sharing
    /// `charged` in proportion (the last piece takes the rounding remainder). Cutting at aligned
    /// offsets matters: the page cache keeps large folios (up to 2 MiB on x86-64) naturally
    /// aligned, and `POSIX_FADV_DONTNEED` skips a folio that sticks out of its range, so cuts at
    /// unaligned offsets would leave the folios straddling them cached.
    pub(crate) fn split(self, piece: u64) -> impl Iterator<Item = Range> {
        debug_assert!(piece.is_power_of_two() && piece >= PAGE);
        let len = self.len();
        let mut start = self.start;
        let mut left = self.charged;
        std::iter::from_fn(move || {
            if start >= self.end {
                return None;
            }
            let end = ((start / piece + 1) * piece).min(self.end);
            let charged = if end == self.end {
                left
            } else {
                (self.charged as u128 * (end - start) as u128 / len as u128) as u64
            };
            left -= charged;
            let r = Range {
                start,
                end,
                charged,
            };
            start = end;
            Some(r)
        })
    }

    /// Bytes of pages both ranges cover (page aligned, as both ranges are).
    pub(crate) fn overlap(&self, other: &Range) -> u64 {
        self.end
            .min(other.end)
            .saturating_sub(self.start.max(other.start))
    }

    /// Absorbs `other` if the two touch or overlap; returns false (unchanged) otherwise.
    pub(crate) fn try_merge(&mut self, other: &Range) -> bool {
        if other.start > self.end || other.end < self.start {
            return false;
        }
        self.start = self.start.min(other.start);
        self.end = self.end.max(other.end);
        self.charged += other.charged;
        true
    }
}

/// Sorts ranges by offset and merges those that touch: fewer, larger writeback requests.
pub(crate) fn coalesce(mut ranges: Vec<Range>) -> Vec<Range> {
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range> = Vec::with_capacity(ranges.len());
    for r in ranges {
        if !out.last_mut().is_some_and(|last| last.try_merge(&r)) {
            out.push(r);
        }
    }
    out
}

/// Ranges written but not yet handed to the flusher.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) ranges: Vec<Range>,
    /// Bytes recorded since the flusher was last kicked.
    pub(crate) unkicked: u64,
    /// The pages of the latest run of adjoining writes while they are pending: a write there
    /// is charged only the pages outside it. Not a large folio's range (`crate::folios`),
    /// which is charged the pages measured dirty, not every page it spans.
    pub(crate) last_write: Option<Range>,
}

/// Ranges whose writeback the flusher started, oldest first.
#[derive(Default)]
pub(crate) struct Inflight {
    pub(crate) ranges: VecDeque<Range>,
    /// Set (under this lock) by the writer before it closes its file: from then on `Shared::fd`
    /// must not be used.
    pub(crate) closed: bool,
}

/// A writer's fd as the flusher threads use it: valid only while the guard from which it was
/// made is held, an `inflight` guard with `Inflight::closed` false (see [`Shared::live_fd`]) or a
/// `starting` guard holding false (the writer closes its file only after setting both under
/// their locks). Only a number: a misuse would hit `EBADF` or another file, never memory.
///
/// [`Shared::live_fd`]: crate::flusher::Shared::live_fd
#[derive(Clone, Copy)]
pub(crate) struct LiveFd(pub(crate) RawFd);

impl AsRawFd for LiveFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_round_to_pages_and_merge() {
        let r = Range::of_write(4095, 2);
        assert_eq!((r.start, r.end, r.charged), (0, 8192, 2));
        let mut a = Range::of_write(0, 4096);
        assert!(a.try_merge(&Range::of_write(4096, 10)));
        assert_eq!((a.start, a.end, a.charged), (0, 8192, 4106));
        assert!(!a.try_merge(&Range::of_write(3 * 4096, 1)));
        let merged = coalesce(vec![
            Range::of_write(8192, 4096),
            Range::of_write(0, 4096),
            Range::of_write(1 << 20, 1),
        ]);
        assert_eq!(merged.len(), 3);
        assert_eq!(
            (merged[0].start, merged[0].end, merged[0].charged),
            (0, 4096, 4096)
        );
        assert_eq!(merged[1].start, 8192);
        assert_eq!(merged[2].start, 1 << 20);
        let merged = coalesce(vec![Range::of_write(4096, 4096), Range::of_write(0, 4096)]);
        assert_eq!(
            (merged[0].start, merged[0].end, merged[0].charged),
            (0, 8192, 8192)
        );
    }

    #[test]
    fn split_shares_the_charge() {
        let r = Range {
            start: PAGE,
            end: 10 * PAGE,
            charged: 9 * PAGE - 1,
        };
        let parts: Vec<Range> = r.split(4 * PAGE).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!((parts[0].start, parts[0].end), (PAGE, 4 * PAGE));
        assert_eq!((parts[1].start, parts[1].end), (4 * PAGE, 8 * PAGE));
        assert_eq!((parts[2].start, parts[2].end), (8 * PAGE, 10 * PAGE));
        assert_eq!(parts.iter().map(|p| p.charged).sum::<u64>(), r.charged);
        assert_eq!(Range::of_write(0, 1).split(4 * PAGE).count(), 1);
    }
}
