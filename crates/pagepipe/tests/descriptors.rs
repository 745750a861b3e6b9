//! What a pipe costs in descriptors: at most three with both ends in one process (the memory
//! file, through a description that also holds the process key's lock, and the two ends of one
//! signal pipe), two with one end, however many operations ran, and none left after the drop.
//! One test in this binary: the count is of the whole process.

use std::io::{Read, Write};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn three_descriptors_per_pipe_with_both_ends_two_with_one() {
    // The death watcher's epoll instance is per process: start it before counting.
    let (w0, r0) = pagepipe::pipe().unwrap();
    drop((w0, r0));
    const N: usize = 64;
    let before = open_fds();
    let mut pipes = Vec::new();
    for i in 0..N {
        let (mut w, mut r) = pagepipe::pipe().unwrap();
        w.write_all(&[i as u8; 100]).unwrap(); // takes the write side's lock (and the key)
        let mut buf = [0u8; 100];
        r.read_exact(&mut buf).unwrap();
        let _ = std::os::fd::AsRawFd::as_raw_fd(&r); // polling costs no descriptor either
        pipes.push((w, r));
    }
    let both = open_fds() - before;
    assert!(
        both <= 3 * N,
        "{both} descriptors for {N} pipes with both ends"
    );
    let readers: Vec<_> = pipes.into_iter().map(|(_, r)| r).collect();
    let one = open_fds() - before;
    assert!(
        one <= 2 * N,
        "{one} descriptors for {N} pipes with only the reader"
    );
    drop(readers);
    assert_eq!(open_fds(), before, "descriptors left after the drops");
}
