//! Copy buffers placed on purpose: a benchmark's read and write buffers start a chosen number of
//! bytes past where the transport's ring starts within a 4 KiB page, the same for every arm.
//!
//! Why it matters: a copy whose destination sits 1-255 bytes past its source, modulo 4 KiB,
//! stalls on almost every load (the CPU takes the load for one of the stores just issued, as
//! their addresses agree in the low 12 bits: "4 KiB aliasing"), and runs about 10x slower. A
//! buffer from `vec!` lands wherever the allocator puts it: measured in `bw --transport rtrb`,
//! the reader's 64 KiB buffer came right after the 1 MiB ring in glibc's heap, exactly 16 bytes
//! past the ring's offset in its page, in every run but the first (whose ring was a fresh
//! `mmap`), so the arm ran 2.3-2.9 GB/s where those first runs ran 18.7-31.1. Placing the buffers relative to
//! the ring makes the arms copy between the same addresses modulo 4 KiB, and the offsets are
//! recorded with every run.

use std::ops::{Deref, DerefMut};

/// The span of addresses within which loads are compared with pending stores by their low bits
/// alone (4 KiB on x86 and on the common ARM cores): offsets are taken modulo this.
pub const ALIAS_SPAN: usize = 4096;

/// Where a benchmark's buffers start, in bytes past the ring's own offset within a 4 KiB page
/// (taken modulo [`ALIAS_SPAN`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    /// The reader's buffer (the destination of the copy out of the ring).
    pub read: usize,
    /// The writer's buffer (the source of the copy into the ring).
    pub write: usize,
}

/// A byte buffer that starts `offset` bytes past a 4 KiB boundary, whatever the allocator does.
pub struct PageBuf {
    space: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBuf {
    /// `len` bytes of `fill`, starting `offset % ALIAS_SPAN` bytes past a 4 KiB boundary.
    pub fn new(len: usize, offset: usize, fill: u8) -> PageBuf {
        let space = vec![fill; len + 2 * ALIAS_SPAN];
        let to_boundary = (ALIAS_SPAN - space.as_ptr() as usize % ALIAS_SPAN) % ALIAS_SPAN;
        // Invariant: start + len <= space.len(), as both terms of start are below ALIAS_SPAN.
        let start = to_boundary + offset % ALIAS_SPAN;
        PageBuf { space, start, len }
    }

    /// Where the buffer starts within its 4 KiB page.
    pub fn offset(&self) -> usize {
        self.as_ptr() as usize % ALIAS_SPAN
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.space[self.start..self.start + self.len]
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.space[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_where_asked() {
        for offset in [0, 1, 16, 255, 2048, 4095, 4096 + 16] {
            let mut b = PageBuf::new(65536, offset, 7);
            assert_eq!(b.offset(), offset % ALIAS_SPAN);
            assert_eq!(b.len(), 65536);
            assert!(b.iter().all(|&x| x == 7));
            b[65535] = 1;
        }
        assert!(PageBuf::new(0, 100, 0).is_empty());
    }
}
