//! The page pool: which pages stay resident (mincore), which writes fault (per-thread
//! getrusage), idle trimming and shrink(). Single-threaded streaming keeps the page-fault
//! counts exact: the thread's own faults only.

use pagepipe::{shrink, Builder, PoolPolicy, Reader, Writer};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// shrink() trims every pipe of the process and the idle trimmer is process-wide: the
/// tests here take turns so one cannot satisfy (or disturb) another's assertions.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn thread_minor_faults() -> u64 {
    // SAFETY: rusage is plain data; getrusage overwrites it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable rusage.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    ru.ru_minflt as u64
}

fn open(policy: PoolPolicy) -> (Writer, Reader) {
    let (w, r) = Builder::new()
        .capacity(1 << 20)
        .pool(policy)
        .build()
        .unwrap();
    w.set_nonblocking(true).unwrap();
    r.set_nonblocking(true).unwrap();
    (w, r)
}

/// Streams `rounds` x 64 KiB through the pipe in this thread; returns the faults it took.
fn stream(w: &mut Writer, r: &mut Reader, rounds: usize) -> u64 {
    let msg = vec![1u8; 65536];
    let mut buf = vec![0u8; 65536];
    let before = thread_minor_faults();
    for _ in 0..rounds {
        w.write_all(&msg).unwrap();
        r.read_exact(&mut buf).unwrap();
    }
    thread_minor_faults() - before
}

#[test]
fn default_pool_streams_without_page_faults_after_warm_up() {
    let _serial = serial();
    let (mut w, mut r) = open(PoolPolicy::default());
    stream(&mut w, &mut r, 64); // warm-up: every ring position touched once
    assert_eq!(stream(&mut w, &mut r, 200), 0);
}

#[test]
fn no_pool_faults_every_page_again() {
    let _serial = serial();
    let (mut w, mut r) = open(PoolPolicy::None);
    stream(&mut w, &mut r, 16);
    let faults = stream(&mut w, &mut r, 50);
    assert!(faults >= 50 * 16, "{faults} faults for 800 pages written");
    assert_eq!(w.resident_spare_pages().unwrap(), 0);
}

#[test]
fn bounded_policies_keep_at_most_their_budget() {
    let _serial = serial();
    for (policy, keep) in [
        (PoolPolicy::TmpPage, 2),
        (PoolPolicy::Unified { keep: 2, burst: 8 }, 2),
    ] {
        let (mut w, mut r) = open(policy);
        let faults = stream(&mut w, &mut r, 50);
        assert!(
            faults >= 50 * 10,
            "{policy:?}: {faults} faults, expected pages to be faulted again"
        );
        let resident = w.resident_spare_pages().unwrap();
        assert!(
            resident <= keep,
            "{policy:?}: {resident} spare pages resident, budget {keep}"
        );
    }
}

#[test]
fn idle_pipe_is_trimmed_to_keep_spare_pages() {
    let _serial = serial();
    let (mut w, mut r) = open(PoolPolicy::Adaptive { keep: 2 });
    stream(&mut w, &mut r, 32);
    w.write_all(&[9u8; 3 * 4096]).unwrap(); // data in flight must survive the trim
    assert!(
        w.resident_spare_pages().unwrap() > 100,
        "a busy pipe keeps its pages"
    );
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(10);
    while w.resident_spare_pages().unwrap() > 2 {
        assert!(
            Instant::now() < deadline,
            "idle pipe still holds {} spare pages",
            w.resident_spare_pages().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(100),
        "trimmed before the pipe was idle for a tick"
    );
    let mut buf = vec![0u8; 3 * 4096];
    r.read_exact(&mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 9), "trim touched queued data");
}

#[test]
fn shrink_gives_spare_pages_back_and_keeps_data() {
    let _serial = serial();
    let (mut w, mut r) = open(PoolPolicy::Adaptive { keep: 2 });
    stream(&mut w, &mut r, 32);
    w.write_all(b"still here").unwrap();
    let spare = w.resident_spare_pages().unwrap();
    assert!(spare > 100);
    let freed = shrink();
    assert!(
        freed >= (spare - 1) * 4096,
        "shrink freed {freed} bytes of {spare} spare pages"
    );
    assert_eq!(w.resident_spare_pages().unwrap(), 0);
    assert_eq!(w.spare_pages(), 0);
    let mut buf = [0u8; 10];
    r.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"still here");
}
