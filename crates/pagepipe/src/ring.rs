//! Ring index helpers.
//!
//! `head` and `tail` are free-running counts of slots ever published and ever consumed; they never
//! wrap in practice (2^63 slots). Each is stored shifted left by one, with bit 0 meaning "the other
//! side has a sleeper registered": the reader sets [`WAITING`] in the head word, the writer in the
//! tail word. Because the side that advances an index does so with a read-modify-write on the same
//! word a sleeper registers in, the two are totally ordered: either the sleeper sees the new index
//! or the advancer sees the flag and wakes it.

use crate::error::invalid;
use std::io;

/// The "a sleeper is registered" flag in a head or tail word.
pub(crate) const WAITING: u64 = 1;
/// The amount one slot adds to a head or tail word.
pub(crate) const ONE: u64 = 2;

/// The slot index held in a head or tail word.
#[inline]
pub(crate) fn index(word: u64) -> u64 {
    word >> 1
}

/// Slots holding data between `tail` and `head` (indices, not words). Wrapping: indices read
/// from a shared region are checked by the callers that size accesses with them
/// ([`check_indices`]); elsewhere a corrupt pair only reads as full.
#[inline]
pub(crate) fn occupancy(head: u64, tail: u64) -> u64 {
    head.wrapping_sub(tail)
}

/// True when `limit` slots are in use.
#[inline]
pub(crate) fn is_full(head: u64, tail: u64, limit: u64) -> bool {
    occupancy(head, tail) >= limit
}

/// The position in a ring of `ring_size` slots (a power of two) of slot index `i`.
#[inline]
pub(crate) fn slot(i: u64, ring_size: usize) -> usize {
    debug_assert!(ring_size.is_power_of_two());
    (i as usize) & (ring_size - 1)
}

/// Checks that `head` and `tail` (indices) describe at most `ring` queued slots: `tail <= head
/// <= tail + ring`, both below 2^62 (an index word holds 63 bits, and 2^62 slots are never
/// reached), so index arithmetic on them cannot overflow.
#[inline]
pub(crate) fn check_indices(head: u64, tail: u64, ring: usize) -> io::Result<()> {
    const MAX_INDEX: u64 = 1 << 62;
    if head >= MAX_INDEX || tail > head || head - tail > ring as u64 {
        return Err(bad_indices(head, tail, ring));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_indices(head: u64, tail: u64, ring: usize) -> io::Error {
    invalid(format!(
        "ring indices head {head} tail {tail} do not fit a ring of {ring} slots"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_pack_index_and_flag() {
        let w = (5 * ONE) | WAITING;
        assert_eq!(index(w), 5);
        assert_eq!(index(w + ONE), 6);
        assert_eq!((w + ONE) & WAITING, WAITING);
    }

    #[test]
    fn occupancy_and_full() {
        assert_eq!(occupancy(10, 7), 3);
        assert!(is_full(23, 7, 16));
        assert!(!is_full(22, 7, 16));
        assert_eq!(slot(17, 16), 1);
    }

    #[test]
    fn indices_fit_the_ring() {
        assert!(check_indices(10, 2, 8).is_ok());
        assert!(check_indices(11, 2, 8).is_err());
        assert!(check_indices(2, 3, 8).is_err());
    }
}
