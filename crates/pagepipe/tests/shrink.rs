//! `pagepipe::shrink()` gives spare memory back to the OS (the process's resident set shrinks)
//! and frees nothing in use. One test per binary: resident-set sizes are process-wide.

use pagepipe::FragCache;
use std::io::{Read, Write};

/// Resident bytes of this process (`/proc/self/statm`, second field, in pages).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn shrink_returns_spare_memory_and_keeps_what_is_in_use() {
    const BLOCK: usize = 32 * 1024;
    const N: usize = 48;
    let mut cache = FragCache::new();
    // Whole-block fragments, all touched: N resident blocks.
    let mut frags: Vec<_> = (0..N)
        .map(|i| {
            let mut f = cache.alloc(BLOCK);
            f.fill(i as u8);
            f
        })
        .collect();
    let kept = frags.swap_remove(N / 2);
    let mut small = cache.alloc(100); // a fragment on the block being carved
    small.fill(0xAB);
    let with_all = rss();
    drop(frags); // N - 1 blocks lose their last fragment: they become spare blocks
    let s = cache.stats();
    assert_eq!(s.large_allocations, 0);
    assert!(s.spare_blocks < N, "{s:?}");

    // A pipe with spare pages: the default pool keeps the pages data went through.
    let (mut w, mut r) = pagepipe::pipe().unwrap();
    w.write_all(&[7u8; 32 * 1024]).unwrap();
    let mut buf = vec![0u8; 32 * 1024];
    r.read_exact(&mut buf).unwrap();

    let released = pagepipe::shrink();
    let after = rss();
    let s = cache.stats();
    assert_eq!(s.spare_blocks, 0, "{s:?}");
    // Left: the kept fragment's block and the block being carved.
    assert_eq!(s.bytes_mapped, 2 * BLOCK, "{s:?}");
    // The background trimmer may have given back some spare blocks first; together with
    // shrink() all N - 1 went, and the resident set shows it.
    assert!(released > 0, "shrink() released nothing");
    assert!(
        with_all.saturating_sub(after) >= (N - 4) * BLOCK,
        "resident set went from {with_all} to {after} bytes; expected a drop of about {} bytes",
        (N - 1) * BLOCK
    );
    // Nothing in use was touched.
    assert!(kept.iter().all(|b| *b == (N / 2) as u8));
    assert!(small.iter().all(|b| *b == 0xAB));
    let next = cache.alloc(100); // the carved block still works
    assert_ne!(next.as_ptr(), small.as_ptr());
    w.write_all(b"still works").unwrap();
    let mut got = [0u8; 11];
    r.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still works");
    drop((kept, small, next));
    assert_eq!(cache.stats().bytes_outstanding, 0);
}
