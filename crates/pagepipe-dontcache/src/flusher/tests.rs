//! The flusher's unit tests (kept beside it, out of its file for length).

use super::gauges::meminfo_kib;
use super::*;
use crate::cache::{cached_bytes, cached_bytes_in};
use crate::consts::OVERDRAFT_WINDOWS;
use std::os::unix::fs::FileExt;

#[test]
fn completed_ranges_are_dropped_behind_a_busy_one() {
    let (path, file) = crate::test_support::temp_rw("reap");
    if let Err(e) = sys::fs::cachestat(&file, 0, 0) {
        // Without cachestat the reaper waits for the oldest range, in order.
        eprintln!("SKIPPED completed_ranges_are_dropped_behind_a_busy_one: no cachestat: {e}");
        std::fs::remove_file(&path).unwrap();
        return;
    }
    // Not registered with the flusher: only this test looks at these ranges.
    let shared = Shared::new(file.as_raw_fd());
    let (a, b) = (0, 1 << 20);
    for off in [a, b] {
        file.write_all_at(&[5u8; 8192], off).unwrap();
        shared.record(off, 8192);
    }
    // The newer range is written back; the older one is still dirty and not started.
    sys::fs::sync_file_range(&file, b, 8192, RangeSync::Start).unwrap();
    sys::fs::sync_file_range(&file, b, 8192, RangeSync::Wait).unwrap();
    let taken = shared.take_pending();
    assert_eq!(taken.len(), 2);
    lock(&shared.inflight).ranges.extend(taken);
    assert_eq!(shared.complete_some(), Completion::Dropped);
    let left: Vec<u64> = lock(&shared.inflight)
        .ranges
        .iter()
        .map(|r| r.start)
        .collect();
    assert_eq!(
        left,
        vec![a],
        "the older, busy range stays; the newer one is dropped"
    );
    assert_eq!(shared.dirty.load(Ordering::Relaxed), 8192);
    assert_eq!(cached_bytes_in(&file, b..b + 8192).unwrap(), 0);
    // The reaper started the dirty range's writeback; draining drops it too.
    shared.drain(&file, false).unwrap();
    assert_eq!(shared.dirty.load(Ordering::Relaxed), 0);
    assert_eq!(cached_bytes(&file).unwrap(), 0);
    drop(file);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn flusher_threads_ask_for_a_long_slice() {
    // On a thread of its own: the slice stays with the thread.
    std::thread::spawn(|| {
        // SAFETY: as in lengthen_slice: reads the calling thread's nice value.
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let before = nice();
        if let Err(e) = lengthen_slice() {
            eprintln!("SKIPPED flusher_threads_ask_for_a_long_slice: {e}");
            return;
        }
        assert_eq!(nice(), before, "the nice value is kept");
        // /proc/PID/sched exists with CONFIG_SCHED_DEBUG; `se.slice` since Linux 6.6.
        let sched = std::fs::read_to_string("/proc/thread-self/sched").unwrap_or_default();
        let Some(slice) = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.trim().parse::<u64>().ok())
        else {
            eprintln!("SKIPPED flusher_threads_ask_for_a_long_slice: no se.slice to read");
            return;
        };
        assert_eq!(slice, FLUSHER_SLICE.as_nanos() as u64);
    })
    .join()
    .unwrap();
}

#[test]
fn bandwidth_counts_busy_time_only() {
    let t0 = std::time::Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let mib = 1u64 << 20;
    let mut b = Bandwidth::new(t0);
    // The pattern of a writer paced by a low estimate: 4 MiB written back in 3 ms, then
    // nothing in flight for 17 ms, over and over. Never busy at both ends of a 10 ms
    // interval, yet 4 MiB per 3 ms of busy time is what the disk does.
    let mut dropped = 0;
    let mut rates = Vec::new();
    for round in 0..8 {
        let start = 20 * round;
        rates.extend(b.observe(ms(start), dropped, true));
        for step in 1..=3 {
            dropped += 4 * mib / 3;
            let busy = step < 3;
            rates.extend(b.observe(ms(start + step), dropped, busy));
        }
        rates.extend(b.observe(ms(start + 19), dropped, false));
    }
    assert!(rates.len() >= 2, "busy time adds up to samples: {rates:?}");
    for r in &rates {
        let gbps = *r as f64 / 1e9;
        assert!(
            (1.3..1.5).contains(&gbps),
            "4 MiB per 3 ms is 1.4 GB/s, got {gbps}"
        );
    }
    // Idle stretches alone never make a sample.
    let mut b = Bandwidth::new(t0);
    for i in 0..100 {
        assert_eq!(b.observe(ms(i * 10), 0, false), None);
    }
    // A stalled disk (busy, nothing dropped) measures 0, and the estimate recovers from a
    // low value in a few samples.
    assert_eq!(smooth(0, 0), 1);
    let mut est = 7 << 20;
    for _ in 0..8 {
        est = smooth(est, 1400 << 20);
    }
    assert!(est > 1200 << 20, "{est}");
}

#[test]
fn meminfo_values_are_read_by_key() {
    let text = b"MemTotal:       24660920 kB\nDirty:              9284 kB\n\
                 Writeback:         91136 kB\nWritebackTmp:          7 kB\n";
    assert_eq!(meminfo_kib(text, b"Writeback:"), Some(91136));
    assert_eq!(meminfo_kib(text, b"WritebackTmp:"), Some(7));
    assert_eq!(meminfo_kib(text, b"Dirty:"), Some(9284));
    assert_eq!(meminfo_kib(text, b"Missing:"), None);
    assert_eq!(meminfo_kib(b"Writeback: x kB\n", b"Writeback:"), None);
    // The real file has the line (Linux 2.6+).
    let real = std::fs::read("/proc/meminfo").unwrap();
    assert!(meminfo_kib(&real, b"Writeback:").is_some());
}

#[test]
fn overdraft_is_bounded_by_the_budget() {
    let max = MAX_OVERDRAFT as u64;
    let want = OVERDRAFT_WINDOWS * DEFAULT_WINDOW as u64;
    assert_eq!(grant_from(0, want), want.min(max));
    assert_eq!(grant_from(max - 10 * MAX_FOLIO, want), 10 * MAX_FOLIO);
    assert_eq!(
        grant_from(max - MAX_FOLIO / 2, want),
        0,
        "less than a piece left"
    );
    assert_eq!(grant_from(max, want), 0);
    assert_eq!(grant_from(2 * max, want), 0);
    // Writers taking turns never hold more than the budget together.
    let mut used = 0;
    let mut grants = Vec::new();
    for window in [32u64 << 20, 8 << 20, 64 << 20, 1 << 20, 32 << 20] {
        let g = grant_from(used, OVERDRAFT_WINDOWS * window);
        assert!(g <= OVERDRAFT_WINDOWS * window);
        used += g;
        grants.push(g);
    }
    assert!(used <= max, "{grants:?}");
    assert_eq!(grants[0], max, "the default window takes the whole budget");
    assert!(grants[1..].iter().all(|&g| g == 0), "{grants:?}");
}

#[test]
fn a_backlog_starts_half_a_window_at_a_time() {
    let path =
        std::env::temp_dir().join(format!("pagepipe-dontcache-backlog-{}", std::process::id()));
    let file = File::create(&path).unwrap();
    // Not registered with the flusher: only this test looks at these ranges.
    let shared = Shared::new(file.as_raw_fd());
    let window = 4u64 << 20;
    shared.window.store(window, Ordering::Relaxed);
    let mib = 1u64 << 20;
    shared.record(0, 9 * mib);
    let mut fresh = shared.take_pending();
    assert_eq!(fresh.len(), 5, "cut at 2 MiB");
    // No overdraft held: everything starts.
    assert!(!shared.hold_back(&mut fresh.clone()));
    // Paying back an overdraft (it is not yielding in this test: nothing floods the
    // system's writeback by 64 MiB): half a window, 2 MiB, may be in flight.
    shared.grant.store(3 * window, Ordering::Relaxed);
    if FLUSHER.yielding.load(Ordering::Relaxed) {
        eprintln!("SKIPPED a_backlog_starts_half_a_window_at_a_time: the system is flooded");
        std::fs::remove_file(&path).unwrap();
        return;
    }
    assert!(shared.hold_back(&mut fresh));
    assert_eq!(fresh.len(), 1);
    assert_eq!((fresh[0].start, fresh[0].end), (0, 2 * mib));
    let back = shared.take_pending();
    assert_eq!(
        back.first().map(|r| r.start),
        Some(2 * mib),
        "put back in order"
    );
    assert_eq!(back.iter().map(Range::len).sum::<u64>(), 7 * mib);
    // With 1 MiB already in flight there is room for one more piece; with 2 MiB, none.
    shared.started.store(mib, Ordering::Relaxed);
    let mut again = back.clone();
    shared.hold_back(&mut again);
    assert_eq!(again.len(), 1);
    shared.take_pending();
    shared.started.store(2 * mib, Ordering::Relaxed);
    let mut none = back;
    assert!(shared.hold_back(&mut none));
    assert!(none.is_empty());
    // The charge never moved: hold_back only reorders the queue.
    assert_eq!(shared.dirty.load(Ordering::Relaxed), 9 * mib);
    drop(file);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn deferred_only_while_yielding_and_overdraft_is_left() {
    let shared = Shared::new(-1);
    let window = DEFAULT_WINDOW as u64;
    assert!(!shared.deferred(false));
    // No overdraft yet (the budget has some unless a test elsewhere holds it all): deferred
    // while well within the window, started near it (a writer waiting there takes none).
    if overdraft_left() >= MAX_FOLIO {
        assert!(shared.deferred(true));
    }
    shared.dirty.store(window - window / 8, Ordering::Relaxed);
    assert!(!shared.deferred(true));
    shared.dirty.store(0, Ordering::Relaxed);
    shared.grant.store(3 * window, Ordering::Relaxed);
    assert!(!shared.deferred(false));
    assert!(shared.deferred(true));
    // Within a quarter window of its limit: its writeback starts (it would soon wait).
    shared
        .dirty
        .store(4 * window - window / 8, Ordering::Relaxed);
    assert!(!shared.deferred(true));
}

#[test]
fn kick_batch_is_clamped() {
    assert_eq!(kick_batch(32 << 20), 2 << 20);
    assert_eq!(kick_batch(1 << 30), 2 << 20);
    assert_eq!(kick_batch(256 << 10), 64 << 10);
    assert_eq!(kick_batch(3 << 20), 128 << 10);
}
