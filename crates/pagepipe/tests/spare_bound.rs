//! Parked blocks are bounded in bytes whatever the block size: a cache of 8 MiB blocks whose
//! fragments are all gone keeps none of them resident (before, it parked four: 32 MiB). One
//! test per binary: resident-set sizes are process-wide.

use pagepipe::FragCache;

/// Resident bytes of this process (`/proc/self/statm`, second field, in pages).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn big_blocks_are_not_kept_resident_once_their_fragments_are_gone() {
    const BLOCK: usize = 8 << 20;
    const N: usize = 4;
    let mut cache = FragCache::with_block_size(BLOCK);
    let frags: Vec<_> = (0..N)
        .map(|i| {
            let mut f = cache.alloc(BLOCK);
            f.fill(i as u8 + 1); // resident
            f
        })
        .collect();
    let _next = cache.alloc(1); // lets go of the last of them
    let with_all = rss();
    drop(frags);
    let after = rss();
    let s = cache.stats();
    eprintln!("resident: {with_all} bytes with the fragments, {after} after dropping them; {s:?}");
    assert_eq!(s.spare_blocks, 0, "{s:?}");
    assert_eq!(s.bytes_mapped, BLOCK, "only the block being carved: {s:?}");
    assert!(
        with_all.saturating_sub(after) >= (N * BLOCK) * 9 / 10,
        "resident set went from {with_all} to {after} bytes; expected a drop of {} bytes",
        N * BLOCK
    );
}
