//! Copies between the ring's page-aligned slots and the caller's buffers that dodge 4 KiB
//! aliasing.
//!
//! A forward copy's loads run a little ahead of its stores. When the destination sits a few
//! bytes *ahead* of the source modulo 4 KiB, each load's address matches a recent store's in
//! its low 12 bits, and the CPU stalls it until the store completes (it cannot tell the two
//! apart). Slots are page-aligned, and allocators often hand out large buffers 16 bytes past a
//! page boundary: reading into such a buffer ran at 2.7 GB/s where the same loop with the
//! buffer half a page further ran at 27-31 GB/s (docs/results.md). In that window the copy
//! goes through a small bounce buffer placed half a page away from both ends, in L1: two
//! copies at full speed instead of one stalled.

/// Distances (destination minus source, modulo 4 KiB) at which a forward copy stalls.
const WINDOW: usize = 256;
/// Copies shorter than this go straight (the stall costs little, the bounce more).
const MIN_LEN: usize = 512;
/// The bounce buffer's size: a few L1 lines' worth per round.
const BOUNCE: usize = 2048;

/// Copies `len` bytes from `src` to `dst`, as `ptr::copy_nonoverlapping`.
///
/// # Safety
/// As `ptr::copy_nonoverlapping`: `src` readable and `dst` writable for `len` bytes, the two
/// ranges disjoint.
#[inline]
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let distance = (dst as usize).wrapping_sub(src as usize) & 4095;
    if len < MIN_LEN || distance == 0 || distance >= WINDOW {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { bounced(src, dst, len) }
}

/// [`copy`] through a bounce buffer half a page away from `src` (so `dst` is about half a page
/// away from it too).
///
/// # Safety
/// As [`copy`].
#[cold]
#[inline(never)]
unsafe fn bounced(src: *const u8, dst: *mut u8, len: usize) {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); 4096 + BOUNCE];
    let base = space.as_mut_ptr().cast::<u8>();
    let want = (src as usize).wrapping_add(2048) & 4095;
    let at = want.wrapping_sub(base as usize) & 4095;
    // SAFETY: at < 4096, so at + BOUNCE <= space's length.
    let bounce = unsafe { base.add(at) };
    let mut done = 0;
    while done < len {
        let n = (len - done).min(BOUNCE);
        // SAFETY: src + done + n and dst + done + n stay within the caller's ranges; the
        // bounce buffer holds BOUNCE >= n bytes and is disjoint from both (it is on our stack).
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(done), bounce, n);
            std::ptr::copy_nonoverlapping(bounce, dst.add(done), n);
        }
        done += n;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_distance_and_length_copies_exactly() {
        let src: Vec<u8> = (0..3 * 4096u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0u8; 4 * 4096];
        for shift in [0usize, 1, 16, 17, 255, 256, 2048, 4095] {
            for len in [0usize, 1, 511, 512, 2047, 2048, 2049, 5000, 8192] {
                dst.fill(0);
                // SAFETY: both ranges lie inside their vectors, which are distinct.
                unsafe { super::copy(src.as_ptr().add(100), dst.as_mut_ptr().add(shift), len) };
                assert_eq!(
                    &dst[shift..shift + len],
                    &src[100..100 + len],
                    "shift {shift} len {len}"
                );
                assert!(dst[..shift].iter().all(|&b| b == 0));
                assert!(dst[shift + len..].iter().all(|&b| b == 0));
            }
        }
    }
}
