//! A peer's games with what every holder of an end shares besides the region: the file-status
//! flags of the signal pipes' open file descriptions. Any holder may clear `O_NONBLOCK` on them
//! (`fcntl(F_SETFL)`) and read or write their bytes itself; a call that must not block must not
//! block anyway.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it has not returned within 10 s (it would hang
/// forever: the thread is left behind, the test fails).
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} hung"))
}

/// Clears `O_NONBLOCK` on the open file description behind `fd`, as any holder may.
fn clear_nonblock(fd: impl AsFd) {
    let fd = fd.as_fd().as_raw_fd();
    // SAFETY: fcntl on a live descriptor touches no user memory.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert!(fl >= 0);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK), 0);
    }
}

/// The readable signal pipe made blocking and drained behind the pipe's back: the reader that
/// empties the ring next must not block removing the byte that is no longer there.
#[test]
fn a_reader_does_not_block_on_a_signal_pipe_a_peer_made_blocking() {
    let (mut w, r) = pagepipe::pipe().unwrap();
    r.set_nonblocking(true).unwrap();
    let fd = r.as_fd().try_clone_to_owned().unwrap(); // polling on: the descriptor is exact
    w.write_all(b"data").unwrap(); // the readable pipe now holds its byte
    clear_nonblock(&fd);
    let mut byte = [0u8; 1];
    // SAFETY: reads one byte into a live local from a descriptor we own.
    assert_eq!(
        unsafe { libc::read(fd.as_raw_fd(), byte.as_mut_ptr().cast(), 1) },
        1
    );
    let got = returns("a non-blocking read that empties the ring", move || {
        let mut buf = [0u8; 16];
        let n = (&r).read(&mut buf);
        (n.map(|n| buf[..n].to_vec()), r)
    });
    assert_eq!(got.0.unwrap(), b"data");
}

/// The full signal pipe made blocking and filled behind the pipe's back: the writer that fills
/// the ring must not block adding the byte that no longer fits.
#[test]
fn a_writer_does_not_block_on_a_signal_pipe_a_peer_made_blocking() {
    let (w, r) = pagepipe::pipe().unwrap();
    w.set_nonblocking(true).unwrap();
    let fd = w.as_fd().try_clone_to_owned().unwrap(); // polling on
    clear_nonblock(&fd);
    // Fill the full pipe (one page) ourselves, so the writer's own byte cannot go in.
    let page = [0u8; 4096];
    // SAFETY: writes from a live local to a descriptor we own; the pipe holds one page.
    let n = unsafe { libc::write(fd.as_raw_fd(), page.as_ptr().cast(), page.len()) };
    assert_eq!(n, 4096);
    let n = returns("a non-blocking write that fills the ring", move || {
        let n = (&w).write(&[7u8; 64 * 1024]);
        (n, w)
    });
    assert_eq!(n.0.unwrap(), 64 * 1024);
    drop(r);
}
