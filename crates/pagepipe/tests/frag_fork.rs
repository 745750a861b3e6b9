//! A fragment cache survives `fork(2)`: a child forked while other threads hold the caches'
//! spare-list locks (two threads calling `shrink()`, one dropping the last fragments of blocks)
//! can use every inherited cache. Before the fork handlers took those locks, 17 to 29 of 300
//! such children hung on their first `stats()`, refill or drop.

use pagepipe::{Frag, FragCache};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[path = "support/children.rs"]
mod children;

/// Caches the shrinking threads lock one after the other (more caches, more locks held).
const CACHES: usize = 8;
const CHILDREN: usize = 300;

#[test]
fn children_forked_under_shrink_can_use_inherited_caches() {
    let mut caches: Vec<FragCache> = (0..CACHES)
        .map(|_| FragCache::with_block_size(4096))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let shrinkers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    pagepipe::shrink();
                }
            })
        })
        .collect();
    // Drops last fragments of blocks the caches let go of: `release` parks them under the lock.
    let (tx, rx) = mpsc::sync_channel::<Vec<Frag>>(4);
    let dropper = std::thread::spawn(move || rx.into_iter().for_each(drop));
    let mut hung = 0;
    for round in 0..CHILDREN {
        // Whole-block fragments: each makes its cache let go of the block before.
        let frags: Vec<Frag> = caches.iter_mut().map(|c| c.alloc(4096)).collect();
        tx.send(frags).unwrap();
        let pid = children::fork(|| {
            for cache in caches.iter_mut() {
                let _ = cache.stats();
                let a = cache.alloc(4096);
                let b = cache.alloc(4096); // a refill that looks at the spare list
                drop((a, b)); // the last fragment of a let-go block: parks it under the lock
                let _ = cache.stats();
            }
            0
        });
        // A child that deadlocked is killed after this bound and counted.
        match std::panic::catch_unwind(|| children::reap_within(pid, Duration::from_secs(5))) {
            Ok(code) => assert_eq!(code, 0, "child of round {round} failed"),
            Err(_) => hung += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(tx);
    shrinkers.into_iter().for_each(|t| t.join().unwrap());
    dropper.join().unwrap();
    assert_eq!(hung, 0, "{hung} of {CHILDREN} forked children hung");
}
