//! The splice family: `splice_to` / `splice_from` a descriptor, `splice` and `tee` between two
//! pagepipes; Linux's rules for self-splicing, non-blocking ends and end of file.

use pagepipe::{pipe, Builder};
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::unix::net::UnixStream;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn splice_to_and_from_descriptors_move_every_byte() {
    let data = pattern(300_000);
    let mut file = tempfile();
    file.write_all(&data).unwrap();
    file.rewind().unwrap();
    // File -> pagepipe -> kernel pipe -> Vec, through a pipe smaller than the data.
    let (w, r) = Builder::new().capacity(64 * 1024).build().unwrap();
    let (mut kr, kw) = kernel_pipe();
    let sink = std::thread::spawn(move || {
        let mut out = Vec::new();
        kr.read_to_end(&mut out).unwrap();
        out
    });
    let writer = std::thread::spawn(move || {
        let mut total = 0;
        loop {
            let n = w.splice_from(&file, 100_000).unwrap();
            if n == 0 {
                return total;
            }
            total += n;
        }
    });
    let mut moved = 0;
    loop {
        let n = r.splice_to(&kw, 50_000).unwrap();
        if n == 0 {
            break;
        }
        moved += n;
    }
    drop(kw);
    assert_eq!(writer.join().unwrap(), data.len());
    assert_eq!(moved, data.len());
    assert_eq!(sink.join().unwrap(), data);
}

#[test]
fn splice_to_consumes_only_what_the_descriptor_took() {
    let (mut w, r) = pipe().unwrap();
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    w.write_all(&pattern(60_000)).unwrap();
    // Fill the socket until it refuses: what it did not take stays queued in the pipe.
    let mut sent = 0;
    loop {
        match r.splice_to(&a, 60_000) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
        if r.is_empty() {
            break;
        }
    }
    assert_eq!(r.len() + sent, 60_000);
    drop(a);
    let mut got = Vec::new();
    b.read_to_end(&mut got).unwrap();
    assert_eq!(got, pattern(60_000)[..sent]);
}

#[test]
fn splice_and_tee_between_pagepipes() {
    let (mut w1, r1) = pipe().unwrap();
    let (w2, mut r2) = pipe().unwrap();
    let (w3, mut r3) = pipe().unwrap();
    let data = pattern(40_000);
    w1.write_all(&data).unwrap();
    assert_eq!(pagepipe::tee(&r1, &w3, 100_000).unwrap(), 40_000);
    assert_eq!(r1.len(), 40_000, "tee consumes nothing");
    let mut moved = 0;
    while moved < 40_000 {
        moved += pagepipe::splice(&r1, &w2, 7_000).unwrap();
    }
    assert!(r1.is_empty());
    drop((w2, w3));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    r2.read_to_end(&mut a).unwrap();
    r3.read_to_end(&mut b).unwrap();
    assert_eq!((a == data, b == data), (true, true));
    drop(w1);
    let (w4, _r4) = pipe().unwrap();
    assert_eq!(pagepipe::splice(&r1, &w4, 10).unwrap(), 0, "end of file");
    assert_eq!(pagepipe::tee(&r1, &w4, 10).unwrap(), 0, "end of file");
}

#[test]
fn self_splice_is_invalid_even_through_a_received_end() {
    let (w, r) = pipe().unwrap();
    assert_eq!(
        pagepipe::splice(&r, &w, 1).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        pagepipe::tee(&r, &w, 1).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let (a, b) = UnixStream::pair().unwrap();
    w.send_to(&a).unwrap();
    let w2 = pagepipe::Writer::recv_from(&b).unwrap();
    assert_eq!(
        pagepipe::splice(&r, &w2, 1).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn non_blocking_ends_make_the_calls_non_blocking() {
    let (w1, r1) = pipe().unwrap();
    let (w2, r2) = Builder::new().capacity(4096).build().unwrap();
    r1.set_nonblocking(true).unwrap();
    let would_block =
        |res: std::io::Result<usize>| res.unwrap_err().kind() == ErrorKind::WouldBlock;
    assert!(would_block(pagepipe::splice(&r1, &w2, 10)));
    assert!(would_block(r1.splice_to(dev_null(), 10)));
    (&w1).write_all(b"x").unwrap();
    (&w2).write_all(&[0; 4096]).unwrap();
    w2.set_nonblocking(true).unwrap();
    assert!(would_block(pagepipe::splice(&r1, &w2, 10)));
    assert!(would_block(pagepipe::tee(&r1, &w2, 10)));
    assert_eq!(r1.len(), 1, "nothing consumed");
    let file = tempfile();
    assert!(would_block(w2.splice_from(&file, 10)));
    drop(r2);
    w2.set_nonblocking(false).unwrap();
    assert_eq!(
        pagepipe::splice(&r1, &w2, 10).unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

/// /dev/null, for writes that must go somewhere.
fn dev_null() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap()
}

fn tempfile() -> std::fs::File {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "pagepipe-splice-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

fn kernel_pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    use std::os::fd::FromRawFd;
    // SAFETY: both descriptors are fresh and ours.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}
