//! Who holds a side lock is asked, never read from the word alone: a live thread that holds a
//! side keeps it whatever the descriptor table looks like, and a word a peer wrote (naming the
//! caller, a stranger, or a thread of ours that holds nothing) is taken over.

#[path = "support/children.rs"]
mod children;

use children::{child, fork_raw, reap_within, serial};
use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;

/// Lowers this process's descriptor limit to `soft` and opens `/dev/null` until the table is
/// full; returns what it opened (closing them frees the table again).
fn fill_descriptor_table(soft: u64) -> Vec<std::fs::File> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = soft.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    let mut open = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => open.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => return open,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_side_held_by_a_live_thread_is_kept_under_a_full_descriptor_table() {
    let _serial = serial();
    let pid = fork_raw();
    if pid == 0 {
        child(|| {
            let (mut w, r) = pagepipe::pipe().unwrap();
            w.write_all(b"hello").unwrap();
            let r2 = r.clone();
            let (held_tx, held_rx) = mpsc::channel();
            let (done_tx, done_rx) = mpsc::channel::<()>();
            let holder = std::thread::spawn(move || {
                let chunk = r.read_chunk().unwrap();
                held_tx.send(()).unwrap();
                done_rx.recv().unwrap();
                let bytes: Vec<u8> = chunk.slices().flatten().copied().collect();
                chunk.consume(bytes.len());
                bytes
            });
            held_rx.recv().unwrap();
            let open = fill_descriptor_table(256);
            let mut buf = [0u8; 16];
            let got = r2.try_read(&mut buf);
            r2.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let blocking = (&r2).read(&mut buf); // a blocking read checks the holder too
            drop(open);
            // The holder is a thread of ours that says it holds the side: no descriptor needed
            // to ask it, and nothing is taken from it.
            let e = got.expect_err("a non-blocking read took the side from a live holder");
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
            let e = blocking.expect_err("a blocking read took the side from a live holder");
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
            done_tx.send(()).unwrap();
            assert_eq!(holder.join().unwrap(), b"hello");
            0
        });
    }
    assert_eq!(reap_within(pid, Duration::from_secs(30)), 0);
}

#[path = "support/peer.rs"]
#[allow(dead_code)] // this file uses a part of it
mod peer;

/// Offsets that region.rs pins in the header.
const WRITE_SIDE_LOCK: usize = 640;
const SIG_LOCK: usize = 1024;

/// A thread's lock identity as the lock module writes it: its id, and its process's key on
/// the pipe in the high half (the process id, unless another pid namespace's process has it).
fn identity(pid: u32, tid: u32) -> u64 {
    u64::from(pid) << 32 | u64::from(tid)
}

/// A peer writes the victim's own identity into its write side's lock: the victim holds
/// nothing, so it takes the side over (and recovers its state) instead of reporting a
/// `Deadlock` it could never leave.
#[test]
fn a_lock_word_naming_the_caller_is_taken_over_not_a_deadlock() {
    let (mut w, mut r) = pagepipe::pipe().unwrap();
    w.write_all(b"one").unwrap();
    let region = peer::Mapped::of(&w);
    // SAFETY: gettid(2) has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    region.poke(WRITE_SIDE_LOCK, identity(std::process::id(), tid));
    w.write_all(b"two").unwrap();
    drop(w);
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"onetwo");
}

/// A peer gives the readiness lock to a live stranger (init) while some process polls: a
/// non-blocking write still returns (the readiness lock is waited for a bounded time, then
/// left), where it used to wait for ever.
#[test]
fn a_readiness_lock_given_to_a_live_stranger_does_not_hang_a_write() {
    use std::os::fd::AsFd;
    let (w, r) = pagepipe::pipe().unwrap();
    let _polled = r.as_fd(); // someone polls the reader: writes keep its descriptor exact
    let region = peer::Mapped::of(&w);
    region.poke(SIG_LOCK, identity(1, 1));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(w.try_write(b"x").map_err(|e| e.kind()));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a non-blocking write waited for ever for the readiness lock");
    assert_eq!(got, Ok(1));
    let mut buf = [0; 1];
    assert_eq!((&r).read(&mut buf).unwrap(), 1);
}

/// Offset of the read side's lock (region.rs pins it).
const READ_SIDE_LOCK: usize = 768;

/// A peer names a live, unrelated thread (init's) in the read side's lock and goes away: the
/// stranger holds no key on the pipe, so a blocking read takes the side over, reads what was
/// published and sees end of file, where it used to wait for ever.
#[test]
fn a_read_lock_given_to_a_live_stranger_does_not_hide_end_of_file() {
    // Init as key 1, and init as the old layout named it (its real start time in the high
    // half): neither names a process that holds this pipe.
    let start = std::fs::read_to_string("/proc/1/stat")
        .ok()
        .and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_ascii_whitespace().nth(19)?.parse::<u64>().ok()
        });
    let mut strangers = vec![identity(1, 1)];
    strangers.extend(start.map(|s| (s & 0xffff_ffff) << 32 | 1));
    for stranger in strangers {
        read_to_end_past(stranger);
    }
}

fn read_to_end_past(stranger: u64) {
    let (w, mut r) = pagepipe::pipe().unwrap();
    (&w).write_all(b"published").unwrap();
    let region = peer::Mapped::of(&w);
    region.poke(READ_SIDE_LOCK, stranger);
    drop(w);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let _ = tx.send(r.read_to_end(&mut got).map(|_| got).map_err(|e| e.kind()));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a blocking read waited for ever on a stranger's name");
    assert_eq!(got.unwrap(), b"published");
}

/// A peer names a live thread of the victim's own process, one that holds nothing, in the
/// write side's lock: that thread says it holds nothing, so the lock is taken over.
#[test]
fn a_write_lock_given_to_an_idle_thread_of_ours_is_taken_over() {
    let (w, mut r) = pagepipe::pipe().unwrap();
    (&w).write_all(b"a").unwrap();
    let (tid_tx, tid_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let idle = std::thread::spawn(move || {
        // SAFETY: gettid(2) has no preconditions.
        tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
        stop_rx.recv().unwrap();
    });
    let region = peer::Mapped::of(&w);
    region.poke(
        WRITE_SIDE_LOCK,
        identity(std::process::id(), tid_rx.recv().unwrap()),
    );
    assert_eq!(w.try_write(b"b").unwrap(), 1);
    stop_tx.send(()).unwrap();
    idle.join().unwrap();
    drop(w);
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"ab");
}
