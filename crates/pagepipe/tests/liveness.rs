//! Liveness fails closed: a side lock held by a live thread is never taken over because its
//! holder's liveness could not be told (here: a full descriptor table, so `/proc/<tid>/stat`
//! cannot be opened). The caller gets an error instead, and the holder keeps its side.

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
fn a_side_held_by_a_live_thread_is_not_taken_over_when_liveness_cannot_be_told() {
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
            let blocking = (&r2).read(&mut buf); // a blocking read checks the holder too
            drop(open);
            let e = got.expect_err("a non-blocking read took the side from a live holder");
            assert!(e.to_string().contains("cannot tell"), "{e}");
            // The blocking read found the holder alive or could not tell: it waited a tick,
            // then gave up with the same error rather than take the side.
            let e = blocking.expect_err("a blocking read took the side from a live holder");
            assert!(e.to_string().contains("cannot tell"), "{e}");
            done_tx.send(()).unwrap();
            assert_eq!(holder.join().unwrap(), b"hello");
            0
        });
    }
    assert_eq!(reap_within(pid, Duration::from_secs(30)), 0);
}
