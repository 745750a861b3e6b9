//! Forks at the edges the system sets (issue 39, breaks 1 and 5): a fork with too few
//! descriptors to give every pipe its liveness pipe, and a process without `/proc`. Each must
//! end in an error at the call that cannot be served, never in lost bytes or a false end of
//! file. (A fork while another thread holds one of a pipe's own locks, break 6, is a unit test
//! in `pipe/shared.rs`: it needs those locks.)

#[path = "support/children.rs"]
mod children;

use children::{fill_fd_table, fork, reap_within, serial};
use pagepipe::{Reader, Writer};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;

/// Pipes that never left this process (no liveness pipe yet), then a fork with one descriptor
/// to spare: at most one of them can get its liveness pipe (two descriptors). The parent drops
/// its writers and the child is to write: a pipe the child may use must not look ended to the
/// parent's reader (the child is a live writer), and every byte the child's write returned Ok
/// for must reach it; a pipe it may not use fails its write with `BrokenPipe`.
#[test]
fn a_fork_short_of_descriptors_loses_no_byte_and_fakes_no_end_of_file() {
    let _serial = serial();
    let mut pipes: Vec<(Option<Writer>, Reader)> = (0..8)
        .map(|_| {
            let (w, r) = pagepipe::pipe().unwrap();
            (Some(w), r)
        })
        .collect();
    let (mut report_r, report_w) = std::os::unix::net::UnixStream::pair().unwrap();
    let (go_r, mut go_w) = std::os::unix::net::UnixStream::pair().unwrap();
    let fillers = fill_fd_table(pipes[0].1.as_fd(), 1);
    let writers: Vec<Writer> = pipes.iter().map(|(w, _)| w.clone().unwrap()).collect();
    let pid = fork(move || {
        let mut go = [0u8; 1];
        (&go_r).read_exact(&mut go).unwrap();
        let outcome: Vec<u8> = writers
            .iter()
            .map(|w| match (&*w).write(b"c") {
                Ok(1) => b'w',
                Err(e) if e.kind() == ErrorKind::BrokenPipe => b'x',
                _ => b'?',
            })
            .collect();
        (&report_w).write_all(&outcome).unwrap_or(());
        0
    });
    drop(fillers);
    // The child holds a writer of every pipe and has not written yet: no end of file here.
    let mut early_eof = Vec::new();
    for (i, (w, r)) in pipes.iter_mut().enumerate() {
        drop(w.take());
        r.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        if matches!((&*r).read(&mut b), Ok(0)) {
            early_eof.push(i);
        }
    }
    go_w.write_all(b"g").unwrap();
    let mut outcome = vec![0u8; pipes.len()];
    report_r.read_exact(&mut outcome).unwrap();
    assert_eq!(reap_within(pid, Duration::from_secs(20)), 0);
    assert!(!outcome.contains(&b'?'), "child outcomes {outcome:?}");
    for (i, (_, r)) in pipes.iter().enumerate() {
        if outcome[i] != b'w' {
            continue;
        }
        assert!(
            !early_eof.contains(&i),
            "pipe {i}: end of file while the child, a live writer, had yet to write"
        );
        let mut b = [0u8; 1];
        assert_eq!(
            (&*r).read(&mut b).unwrap(),
            1,
            "pipe {i}: the child's Ok write was lost"
        );
        assert_eq!(b[0], b'c');
    }
}

/// Unshares the mount namespace and detaches `/proc` (root only): false when that cannot be
/// done here (then the test says so and passes vacuously).
fn without_proc() -> bool {
    // SAFETY: unshare/mount/umount2 with valid NUL-terminated strings; this runs in a forked
    // child of the test, whose namespace changes affect nothing else.
    unsafe {
        libc::unshare(libc::CLONE_NEWNS) == 0
            && libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) == 0
            && libc::umount2(c"/proc".as_ptr(), libc::MNT_DETACH) == 0
            && !std::path::Path::new("/proc/self").exists()
    }
}

/// Without `/proc`: a pipe confined to its process works at any capacity (large at creation,
/// grown later); a fork gives the child a clear error on the ends it cannot use, and the
/// parent keeps working; sending an end fails with `Unsupported`, naming `/proc`.
#[test]
fn without_proc_confined_pipes_of_any_size_work_and_forks_fail_closed() {
    let _serial = serial();
    let pid = fork(|| {
        if !without_proc() {
            eprintln!("SKIPPED: cannot detach /proc here (needs root)");
            return 0;
        }
        let (w, r) = pagepipe::Builder::new().capacity(1 << 20).build().unwrap();
        let data = vec![7u8; 1 << 20];
        let t = std::thread::spawn(move || {
            (&w).write_all(&data).unwrap();
            w
        });
        let mut got = vec![0u8; 1 << 20];
        (&r).read_exact(&mut got).unwrap();
        let w = t.join().unwrap();
        if got.iter().any(|&b| b != 7) {
            return 2;
        }
        let (w2, r2) = pagepipe::pipe().unwrap();
        if w2.set_capacity(1 << 20).unwrap_or(0) < 1 << 20 {
            return 3;
        }
        (&w2).write_all(&[1u8; 200_000]).unwrap_or(());
        // A fork: the child cannot take a key of its own without /proc.
        let grandchild = fork(|| match (&w2).write(b"c") {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => 0,
            Ok(_) => 4,
            Err(_) => 5,
        });
        if reap_within(grandchild, Duration::from_secs(10)) != 0 {
            return 6;
        }
        let mut buf = vec![0u8; 200_000];
        if (&r2).read_exact(&mut buf).is_err() || buf.iter().any(|&b| b != 1) {
            return 7;
        }
        r2.set_nonblocking(true).unwrap();
        match (&r2).read(&mut buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            _ => return 8, // a false end of file, or a byte from the child
        }
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        match w.send_to(&a) {
            Err(e) if e.kind() == ErrorKind::Unsupported && e.to_string().contains("/proc") => {}
            Err(e) => {
                eprintln!("send_to without /proc: {e} ({:?})", e.kind());
                return 9;
            }
            Ok(()) => return 10,
        }
        0
    });
    assert_eq!(reap_within(pid, Duration::from_secs(60)), 0);
}
