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

/// Copies `len` bytes from `src` into ring pages at `dst`: a run of whole slots that a reader
/// on another core will copy out. As [`copy`], but with streaming stores while this thread's
/// readers run on a core that shares no cache with it (see [`Placement`]).
///
/// # Safety
/// As [`copy`].
#[inline]
pub(crate) unsafe fn copy_to_ring(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if len >= MIN_STREAM && (dst as usize) % 16 == 0 && PLACEMENT.with(Placement::far) {
        // SAFETY: the caller's contract; dst is 16-byte aligned.
        unsafe { copy_streaming(src, dst, len) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { copy(src, dst, len) }
}

/// Runs shorter than this are always copied as [`copy`] does.
#[cfg(all(target_arch = "x86_64", not(loom)))]
const MIN_STREAM: usize = 16 * 1024;

/// A timed publication slower than this (nanoseconds) took its line from a core that shares no
/// cache with ours.
#[cfg(all(target_arch = "x86_64", not(loom)))]
const FAR_NS: u32 = 150;

/// The share of recent timed publications that must be slow (in 1/65536) for the reader's core
/// to count as far.
#[cfg(all(target_arch = "x86_64", not(loom)))]
const FAR_SHARE: u32 = 65_536 * 15 / 100;

/// One publication in this many is timed.
#[cfg(all(target_arch = "x86_64", not(loom)))]
const TIME_EVERY: u32 = 4;

#[cfg(all(target_arch = "x86_64", not(loom)))]
thread_local! {
    static PLACEMENT: Placement = const { Placement::new() };
}

/// Where this thread's readers run, as far as copies care, learned from its publications.
///
/// A plain store needs its line in this core's cache first. The ring's pages were last read by
/// the reader, so when the reader's core shares no cache with ours, every line of a write
/// comes over the fabric before it is written. On the development VM the host puts the two
/// vCPUs on such cores from time to time (`scripts/core-rtt.c`: a cache-line round trip of
/// 400-530 ns instead of 95-130). There a pipe moved 5.7-6.9 GB/s idle and 1.8-2.3 GB/s beside
/// two busy loops with plain stores, and 14.9 (one run) and 6.3-7.3 GB/s with streaming
/// stores, which write whole lines to memory without fetching them. Where the cores share a
/// cache, plain stores are faster (23-31 GB/s against 13-15 idle): the reader finds the data
/// there.
///
/// The placement changes from minute to minute, and timing the copies cannot tell it (the
/// method chosen changes what the next copy costs). The publication's index RMW can: when the
/// reader has read the head line since our last publication, the RMW takes it back over one
/// transfer. Timed on the development VM (a clock read included), at most 0.14% of them took
/// over 150 ns in near placements, idle and beside two busy loops; 34-39% did in far ones
/// beside two busy loops (most of the rest found the line still here: a reader that had not
/// looked yet). So the share of slow ones, as a moving average ([`FAR_SHARE`]), tells the two
/// apart, and a publication the scheduler interrupted weighs no more than any other. A reader
/// on this very CPU costs no transfer, and plain stores are right there too. It is a hint: a
/// peer that keeps the line bouncing only changes which stores we use.
#[cfg(all(target_arch = "x86_64", not(loom)))]
struct Placement {
    /// Moving average of "this timed publication was slower than [`FAR_NS`]", in 1/65536.
    slow_share: std::cell::Cell<u32>,
    /// Publications seen, for [`TIME_EVERY`].
    count: std::cell::Cell<u32>,
}

#[cfg(all(target_arch = "x86_64", not(loom)))]
impl Placement {
    const fn new() -> Placement {
        Placement {
            slow_share: std::cell::Cell::new(0),
            count: std::cell::Cell::new(0),
        }
    }

    /// Whether the readers' core looks far (see the type's docs).
    fn far(&self) -> bool {
        self.slow_share.get() > FAR_SHARE
    }

    /// Adds a timed publication: 1/32 of the new weight, 31/32 of the old.
    fn note(&self, ns: u32) {
        let share = self.slow_share.get();
        let slow = if ns > FAR_NS { 65_536 / 32 } else { 0 };
        self.slow_share.set(share - share / 32 + slow);
    }
}

/// Runs `publish` (the publication's index RMW), timing one call in [`TIME_EVERY`] of those
/// with `sample`.
#[inline]
pub(crate) fn timed<T>(sample: bool, publish: impl FnOnce() -> T) -> T {
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = sample;
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if sample
        && PLACEMENT.with(|p| {
            let n = p.count.get().wrapping_add(1);
            p.count.set(n);
            n % TIME_EVERY == 0
        })
    {
        let t0 = std::time::Instant::now();
        let out = publish();
        let ns = t0.elapsed().as_nanos().min(u32::MAX.into()) as u32;
        PLACEMENT.with(|p| p.note(ns));
        return out;
    }
    publish()
}

/// Copies with streaming (non-temporal) stores, 64 bytes at a time, then fences them.
///
/// # Safety
/// As [`copy`]; `dst` 16-byte aligned.
#[cfg(all(target_arch = "x86_64", not(loom)))]
unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let mut i = 0;
    while i + 64 <= len {
        // SAFETY: i + 64 <= len, so every access lies within the caller's ranges; dst + i is
        // 16-byte aligned (dst is, and i is a multiple of 64); SSE2 is part of x86_64.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        i += 64;
    }
    if i < len {
        // SAFETY: the rest of the caller's ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i) };
    }
    // Streaming stores are weakly ordered, and outside the language's memory model: this fence
    // is what orders them before the stores that follow, among them the publication of these
    // slots (the Release RMW alone would not; see `_mm_sfence`'s documentation).
    // SAFETY: sfence has no preconditions.
    unsafe { _mm_sfence() };
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
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    fn ring_copies_are_exact_near_and_far_and_a_slow_transfer_means_far() {
        use super::{Placement, FAR_NS, PLACEMENT};
        let src: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; 80 * 1024];
        let at = dst.as_ptr().align_offset(64);
        for (far, ns) in [(false, FAR_NS / 2), (true, FAR_NS * 2)] {
            PLACEMENT.with(|p| {
                p.slow_share.set(0);
                (0..64).for_each(|_| p.note(ns));
                assert_eq!(p.far(), far, "{ns} ns");
            });
            for len in [100, 16 * 1024, 64 * 1024, 65_000, 16 * 1024 + 63] {
                for off in 0..3 {
                    dst.fill(0);
                    // SAFETY: both ranges lie inside their vectors, which are distinct.
                    unsafe {
                        super::copy_to_ring(src.as_ptr().add(off), dst.as_mut_ptr().add(at), len)
                    };
                    assert_eq!(&dst[at..at + len], &src[off..off + len], "len {len}");
                    assert!(dst[at + len..].iter().all(|&b| b == 0));
                }
            }
        }
        let p = Placement::new();
        assert!(!p.far(), "near until measured");
        for i in 0..1000 {
            // One interrupted publication in 100 (more than near placements showed).
            p.note(if i % 100 == 0 { 1_000_000 } else { FAR_NS / 2 });
            assert!(!p.far(), "outliers do not make it far");
        }
        for i in 0..200 {
            // Far, with the reader not having looked yet in more than half of them.
            p.note(if i % 5 < 2 { FAR_NS * 2 } else { FAR_NS / 3 });
        }
        assert!(p.far(), "two slow ones in five make it far");
        assert_eq!(super::timed(true, || 7), 7);
        assert_eq!(super::timed(false, || 8), 8);
    }

    /// A whole pipe with this thread's writes streamed: every byte arrives, across runs, the
    /// ring's wrap and writes of every size.
    #[test]
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    fn a_pipe_written_with_streaming_stores_keeps_every_byte() {
        let far = super::FAR_NS * 4;
        let sizes = [16 << 10, 64 << 10, 100_000, 3, 20_003];
        crate::pipe::pump_and_check(256 << 10, 300, &sizes, || {
            // Keep this thread's placement far, whatever its publications measure.
            super::PLACEMENT.with(|p| (0..64).for_each(|_| p.note(far)));
        });
        assert!(super::PLACEMENT.with(|p| p.far()));
    }

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
