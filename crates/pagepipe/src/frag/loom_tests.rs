//! Loom models of the fragment cache: cross-thread drops racing block reuse.

use super::cache::FragCache;

/// A fragment dropped on another thread races the cache's reuse of its block, in place or
/// through the spare list; loom checks the reuse is ordered after the drop (the probe) and
/// that no block is lost or freed twice.
#[test]
fn cross_thread_drop_races_block_reuse() {
    loom::model(|| {
        let mut cache = FragCache::with_block_size(4096);
        let a = cache.alloc(3000);
        let t = loom::thread::spawn(move || {
            a.loom_write_probe(1);
            drop(a);
        });
        // Does not fit: lets go of the block, reuses it in place if `a` is already gone.
        let b = cache.alloc(2000);
        b.loom_write_probe(2);
        // Lets go of b's block; may take a's block from the spare list.
        let c = cache.alloc(4096);
        c.loom_write_probe(3);
        // A shrink races the release: it may free a's block, parked or not yet parked.
        cache.shared.trim(true);
        t.join().unwrap();
        drop((b, c));
        assert_eq!(cache.stats().bytes_outstanding, 0);
    });
}

/// The two halves of a split fragment are dropped on two threads while the cache lets go of
/// the block and reuses it: the split's reference keeps the block until both are gone.
#[test]
fn split_halves_dropped_on_two_threads() {
    loom::model(|| {
        let mut cache = FragCache::with_block_size(4096);
        let mut a = cache.alloc(3000);
        let b = a.split_to(1000);
        let t = loom::thread::spawn(move || {
            b.loom_write_probe(1);
            drop(b);
        });
        // (Only one half writes the probe: it stands for the whole block's bytes, and the
        // halves' bytes are disjoint, which the probe cannot express.)
        drop(a);
        // Does not fit: lets go of the block, reuses it in place if `b` is already gone.
        let c = cache.alloc(2000);
        c.loom_write_probe(3);
        t.join().unwrap();
        drop(c);
        assert_eq!(cache.stats().bytes_outstanding, 0);
    });
}

/// The cache is dropped while a fragment lives on another thread: the last one out frees.
#[test]
fn cache_dropped_before_fragment() {
    loom::model(|| {
        let mut cache = FragCache::with_block_size(4096);
        let a = cache.alloc(100);
        let t = loom::thread::spawn(move || drop(a));
        drop(cache);
        t.join().unwrap();
    });
}
