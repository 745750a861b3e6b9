//! Property test of FragCache: random alloc / alloc_aligned / prepare+commit / prepare+abort /
//! probe+commit / probe+abort / split_to / freeze+clone / drop / cross-thread drop sequences. A probe never
//! refills (the block counters stay put) and never offers a byte of a live fragment. Live fragments never overlap, alignment
//! holds, contents survive, and when everything is dropped every byte is accounted for: the
//! cache's own counters read zero and a counting global allocator is back where it started.
//!
//! This binary holds one test on purpose: the counting allocator is process-wide.

use pagepipe::{Frag, FragCache, FrozenFrag, PreparedFrag};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::mpsc;

/// The global allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to System unchanged; only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Debug)]
enum Op {
    Alloc(usize),
    AllocAligned(usize, u32),
    /// min, max, committed share of the room in 1/8ths (8 = abort)
    Prepare(usize, usize, u8),
    /// min, committed share of the room in 1/8ths (8 = abort)
    Probe(usize, u8),
    /// which live fragment, where in 1/8ths of its length
    Split(usize, u8),
    Freeze(usize),
    Drop(usize),
    DropElsewhere(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..3000).prop_map(Op::Alloc),
        1 => (9000usize..20000).prop_map(Op::Alloc), // larger than a block
        2 => (0usize..2000, 0u32..13).prop_map(|(l, a)| Op::AllocAligned(l, a)),
        2 => (0usize..3000, 0usize..5000, 0u8..9).prop_map(|(a, b, c)| Op::Prepare(a.min(b), a.max(b), c)),
        2 => (0usize..5000, 0u8..9).prop_map(|(m, c)| Op::Probe(m, c)),
        1 => (any::<usize>(), 0u8..9).prop_map(|(k, at)| Op::Split(k, at)),
        1 => any::<usize>().prop_map(Op::Freeze),
        3 => any::<usize>().prop_map(Op::Drop),
        2 => any::<usize>().prop_map(Op::DropElsewhere),
    ]
}

enum Handle {
    Mut(Frag),
    Frozen(FrozenFrag, FrozenFrag),
}

impl Handle {
    fn bytes(&self) -> &[u8] {
        match self {
            Handle::Mut(f) => f,
            Handle::Frozen(f, _) => f,
        }
    }
}

/// A live fragment and the byte it was filled with.
struct Live {
    handle: Handle,
    fill: u8,
}

fn check(live: &[Live]) {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for l in live {
        let b = l.handle.bytes();
        assert!(
            b.iter().all(|x| *x == l.fill),
            "contents of a live fragment changed"
        );
        if let Handle::Frozen(a, c) = &l.handle {
            assert_eq!(a.as_ptr(), c.as_ptr());
        }
        if !b.is_empty() {
            ranges.push((b.as_ptr() as usize, b.len()));
        }
    }
    ranges.sort();
    for w in ranges.windows(2) {
        assert!(
            w[0].0 + w[0].1 <= w[1].0,
            "fragments overlap: {:?} and {:?}",
            w[0],
            w[1]
        );
    }
}

/// Whether `room` shares a byte with a live fragment.
fn overlaps_live(room: &[u8], live: &[Live]) -> bool {
    let (a, n) = (room.as_ptr() as usize, room.len());
    live.iter().any(|l| {
        let b = l.handle.bytes();
        let (c, m) = (b.as_ptr() as usize, b.len());
        m > 0 && a < c + m && c < a + n
    })
}

/// What the test does with a builder, whether from `prepare` or `probe`: checks it offers no
/// live byte, fills it, then commits `share` eighths of it (8: aborts).
fn fill_and_commit(mut b: PreparedFrag<'_>, live: &[Live], fill: u8, share: u8) -> Option<Frag> {
    assert!(!overlaps_live(&b, live), "a builder offered live bytes");
    b.fill(fill);
    if share == 8 {
        b.abort();
        None
    } else {
        let n = b.len() * share as usize / 8;
        Some(b.commit(n))
    }
}

/// The counters a refill or a dedicated allocation moves.
fn refills(cache: &FragCache) -> (u64, u64, u64) {
    let s = cache.stats();
    (s.blocks_allocated, s.blocks_reused, s.large_allocations)
}

fn run_case(ops: &[Op]) {
    let (tx, rx) = mpsc::channel::<Live>();
    let dropper = std::thread::spawn(move || {
        for l in rx {
            assert!(
                l.handle.bytes().iter().all(|x| *x == l.fill),
                "contents changed in flight"
            );
            drop(l);
        }
    });
    let mut cache = FragCache::with_block_size(8192);
    let mut live: Vec<Live> = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let fill = (i % 251) as u8 + 1;
        let new = match *op {
            Op::Alloc(len) => Some(cache.alloc(len)),
            Op::AllocAligned(len, log) => {
                let f = cache.alloc_aligned(len, 1 << log);
                assert_eq!(
                    f.as_ptr() as usize % (1 << log),
                    0,
                    "alignment {} broken",
                    1 << log
                );
                Some(f)
            }
            Op::Prepare(min, max, share) => {
                let b = cache.prepare(min, max);
                assert!(
                    b.len() >= min && b.len() <= max,
                    "prepare({min}, {max}) gave {}",
                    b.len()
                );
                fill_and_commit(b, &live, fill, share)
            }
            Op::Probe(min, share) => {
                let before = refills(&cache);
                let probed = cache.probe(min).map(|b| {
                    assert!(b.len() >= min.max(1), "probe({min}) gave {}", b.len());
                    fill_and_commit(b, &live, fill, share)
                });
                assert_eq!(refills(&cache), before, "probe({min}) refilled");
                probed.flatten()
            }
            Op::Split(k, at) if !live.is_empty() => {
                let k = k % live.len();
                if let Handle::Mut(f) = &mut live[k].handle {
                    let at = f.len() * at as usize / 8;
                    let front = f.split_to(at);
                    assert_eq!(front.len(), at);
                    let fill = live[k].fill;
                    live.push(Live {
                        handle: Handle::Mut(front),
                        fill,
                    });
                }
                None
            }
            Op::Freeze(k) if !live.is_empty() => {
                let k = k % live.len();
                let l = live.swap_remove(k);
                let handle = match l.handle {
                    Handle::Mut(f) => {
                        let a = f.freeze();
                        let b = a.clone();
                        Handle::Frozen(a, b)
                    }
                    h => h,
                };
                live.push(Live {
                    handle,
                    fill: l.fill,
                });
                None
            }
            Op::Drop(k) if !live.is_empty() => {
                let k = k % live.len();
                drop(live.swap_remove(k));
                None
            }
            Op::DropElsewhere(k) if !live.is_empty() => {
                let k = k % live.len();
                tx.send(live.swap_remove(k)).unwrap();
                None
            }
            _ => None,
        };
        if let Some(mut f) = new {
            f.fill(fill);
            live.push(Live {
                handle: Handle::Mut(f),
                fill,
            });
        }
        check(&live);
    }
    // Half of what is left goes to the other thread, the rest is dropped here.
    for (i, l) in live.into_iter().enumerate() {
        if i % 2 == 0 {
            tx.send(l).unwrap();
        } else {
            drop(l);
        }
    }
    drop(tx);
    dropper.join().unwrap();
    let s = cache.stats();
    assert_eq!(s.bytes_outstanding, 0, "{s:?}");
    // Only the block being carved and parked spare blocks remain allocated.
    assert!(s.bytes_mapped <= (s.spare_blocks + 1) * 8192, "{s:?}");
}

/// Waits for the background trimmer's transient allocations to settle, then reads LIVE.
fn settled_live(expect: isize) -> isize {
    let mut now = LIVE.load(Ordering::Relaxed);
    for _ in 0..200 {
        if now == expect {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        now = LIVE.load(Ordering::Relaxed);
    }
    now
}

#[test]
fn random_fragment_sequences() {
    // Warm-up: lazily allocated process state (registry, trimmer thread, thread bookkeeping).
    run_case(&[Op::Alloc(10), Op::DropElsewhere(0)]);
    pagepipe::shrink();
    let start = settled_live(LIVE.load(Ordering::Relaxed));
    let leaked = AtomicIsize::new(0);
    let config = ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..120))| {
        pagepipe::shrink(); // lets the registry drop dead entries before the baseline
        let before = settled_live(LIVE.load(Ordering::Relaxed));
        run_case(&ops);
        pagepipe::shrink();
        let after = settled_live(before);
        // Exact almost always; the process-wide trimmer thread and lazily built runtime state
        // (thread bookkeeping) occasionally hold a few hundred bytes across the measurement.
        // A leaked block header is 128 bytes per block and a leaked large fragment over 9000,
        // so leaks show in the sum over all cases, checked below.
        prop_assert!(after - before <= 1024, "{} bytes not given back to the global allocator", after - before);
        leaked.fetch_add(after - before, Ordering::Relaxed);
    });
    pagepipe::shrink();
    let end = settled_live(start);
    let leaked = leaked.load(Ordering::Relaxed);
    assert!(leaked <= 4096, "{leaked} bytes kept over all cases");
    assert!(
        end - start <= 4096,
        "{} bytes kept over the whole test",
        end - start
    );
}
