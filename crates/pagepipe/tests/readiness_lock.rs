//! A live peer that keeps the readiness lock (`sig_lock`) cannot stall our calls (issue 39,
//! break 2): a sync waits for it at most 100 ms, or to its call's deadline, then leaves the
//! sync to a thread of its process, so `try_write`, `write_deadline(10 ms)` and
//! `Notifier::post` keep their documented bounds, not the second they used to wait.

#[path = "support/children.rs"]
mod children;
#[path = "support/peer.rs"]
#[allow(dead_code)] // uses `Mapped` only
mod peer;

use children::{fork, kill_and_reap, serial};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// The readiness lock's word in the header (`region/layout.rs` pins it at 1024).
const SIG_LOCK: usize = 1024;

/// A child holding a writer of the pipe (so a key of its own), alive until killed; it writes
/// one byte (taking its key) before it reports ready.
fn live_peer(w: &pagepipe::Writer) -> libc::pid_t {
    let (mut ready_r, ready_w) = std::os::unix::net::UnixStream::pair().unwrap();
    let w2 = w.clone();
    let pid = fork(move || {
        let mut w2 = w2;
        let mut ready_w = ready_w;
        w2.write_all(b"k").unwrap();
        ready_w.write_all(b"r").unwrap();
        loop {
            // SAFETY: pause(2) has no preconditions; the parent kills us.
            unsafe { libc::pause() };
        }
    });
    let mut b = [0u8; 1];
    ready_r.read_exact(&mut b).unwrap();
    pid
}

#[test]
fn a_live_holder_of_the_readiness_lock_stalls_no_call() {
    let _serial = serial();
    let (w, mut r) = pagepipe::pipe().unwrap();
    let _poller = r.as_fd(); // someone polls: every transition syncs under the readiness lock
    let _wpoller = w.as_fd();
    let pid = live_peer(&w);
    let mut b = [0u8; 1];
    r.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"k");
    let region = peer::Mapped::of(&w);
    // The child's key is its pid (the first key a process tries), its main thread's id too:
    // a live process, holding a key on this pipe, named as the lock's holder.
    let child = pid as u64;
    region.poke(SIG_LOCK, child << 32 | child);
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(w.try_write(b"x").unwrap(), 1);
        slowest = slowest.max(t.elapsed());
        r.read_exact(&mut b).unwrap();
    }
    let t = Instant::now();
    let n = w
        .write_deadline(b"y", Instant::now() + Duration::from_millis(10))
        .unwrap();
    assert_eq!(n, 1);
    let deadline_write = t.elapsed();
    r.read_exact(&mut b).unwrap();
    region.poke(SIG_LOCK, 0);
    assert_eq!(
        kill_and_reap(pid, Duration::from_secs(10)),
        128 + libc::SIGKILL
    );
    // The documented bounds: 100 ms for a call without a deadline, its deadline otherwise
    // (with room for a loaded machine's scheduling).
    assert!(
        slowest < Duration::from_millis(250),
        "a try_write took {slowest:?} beside a live holder of the readiness lock"
    );
    assert!(
        deadline_write < Duration::from_millis(60),
        "write_deadline(10 ms) took {deadline_write:?}"
    );
}

#[test]
fn a_post_is_not_held_up_by_a_live_holder_of_the_readiness_lock() {
    let _serial = serial();
    let (notifier, mut reader) = pagepipe::Builder::new().notifications(8).build().unwrap();
    let _poller = reader.as_fd();
    // A writer-side peer: a child holding a clone of the notifier.
    let (mut ready_r, ready_w) = std::os::unix::net::UnixStream::pair().unwrap();
    let n2 = notifier.clone();
    let pid = fork(move || {
        let n = n2;
        let mut ready_w = ready_w;
        // A post takes the child's key on the pipe: it is a live holder from now on.
        n.post(&pagepipe::Notification {
            kind: 2,
            ..Default::default()
        })
        .unwrap();
        ready_w.write_all(b"r").unwrap();
        loop {
            // SAFETY: pause(2) has no preconditions; the parent kills us.
            unsafe { libc::pause() };
        }
    });
    let mut b = [0u8; 1];
    ready_r.read_exact(&mut b).unwrap();
    assert_eq!(reader.read_notification().unwrap().kind, 2);
    let region = peer::Mapped::sent(|sock| notifier.send_to(sock).unwrap());
    let child = pid as u64;
    region.poke(SIG_LOCK, child << 32 | child);
    let t = Instant::now();
    let posted = notifier.post(&pagepipe::Notification {
        kind: 1,
        ..Default::default()
    });
    let took = t.elapsed();
    region.poke(SIG_LOCK, 0);
    kill_and_reap(pid, Duration::from_secs(10));
    assert!(posted.unwrap());
    assert!(
        took < Duration::from_millis(250),
        "a post took {took:?} beside a live holder of the readiness lock"
    );
    assert_eq!(reader.read_notification().unwrap().kind, 1);
}

/// `poll(2)` on one descriptor for `events`, waiting up to `ms`: the returned events.
fn poll_one(fd: std::os::fd::BorrowedFd<'_>, events: i16, ms: i32) -> i16 {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    p.revents
}

/// A holder keeps the readiness lock past a writer's patience (descheduled, stopped, or on
/// purpose), then lets go: the writer's transition still reaches the reader's poller (a thread
/// of the writer's process finishes the sync once the lock is free). Before, the writer left
/// a flag that only a later holder of its own side would look at, and a reader polling for
/// that data waited forever.
#[test]
fn a_transition_made_while_the_readiness_lock_was_held_reaches_the_poller() {
    let _serial = serial();
    let (w, r) = pagepipe::pipe().unwrap();
    let rfd = r.as_fd(); // polled: the empty ring leaves the descriptor not readable
    assert_eq!(poll_one(rfd, libc::POLLIN, 0) & libc::POLLIN, 0);
    let pid = live_peer(&w);
    let mut b = [0u8; 1];
    (&r).read_exact(&mut b).unwrap(); // the peer's byte
    assert_eq!(poll_one(rfd, libc::POLLIN, 0) & libc::POLLIN, 0);
    let region = peer::Mapped::of(&w);
    let child = pid as u64;
    region.poke(SIG_LOCK, child << 32 | child);
    let t = Instant::now();
    assert_eq!((&w).write(b"d").unwrap(), 1);
    let took = t.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    region.poke(SIG_LOCK, 0); // the holder lets go (without a wake: its tick finds it free)
    let ready = poll_one(rfd, libc::POLLIN, 5000) & libc::POLLIN != 0;
    assert_eq!(
        kill_and_reap(pid, Duration::from_secs(10)),
        128 + libc::SIGKILL
    );
    assert!(ready, "the reader's descriptor never became readable");
    assert!(took < Duration::from_millis(250), "the write took {took:?}");
    (&r).read_exact(&mut b).unwrap();
    assert_eq!(&b, b"d");
}
