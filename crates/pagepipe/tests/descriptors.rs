//! What a pipe costs in descriptors. With both ends in one process: one (the memory file) while
//! the pipe never left the process and nobody polls it, three once it has its signal pipe (the
//! memory file, through a description that also holds the process key's lock, and the two ends
//! of the signal pipe); two with one end; none left after the drops (once the cache of ready
//! regions is trimmed). One test in this binary: the count is of the whole process.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn descriptors_per_pipe() {
    // The death watcher's epoll instance is per process: start it before counting.
    let (w0, r0) = pagepipe::pipe().unwrap();
    let _ = w0.to_fds().unwrap();
    drop((w0, r0));
    pagepipe::shrink();
    const N: usize = 64;
    let before = open_fds();
    let mut pipes = Vec::new();
    for i in 0..N {
        let (mut w, mut r) = pagepipe::pipe().unwrap();
        w.write_all(&[i as u8; 100]).unwrap(); // takes the write side's lock (and the key)
        let mut buf = [0u8; 100];
        r.read_exact(&mut buf).unwrap();
        pipes.push((w, r));
    }
    let confined = open_fds() - before;
    assert!(
        confined <= N,
        "{confined} descriptors for {N} confined pipes"
    );
    for (_, r) in &pipes {
        let _ = r.as_raw_fd(); // polling: the pipe gets its signal pipe
    }
    let both = open_fds() - before;
    assert!(
        both <= 3 * N,
        "{both} descriptors for {N} polled pipes with both ends"
    );
    let readers: Vec<_> = pipes.into_iter().map(|(_, r)| r).collect();
    let one = open_fds() - before;
    assert!(
        one <= 2 * N,
        "{one} descriptors for {N} pipes with only the reader"
    );
    drop(readers);
    pagepipe::shrink(); // closes the regions the cache keeps for new pipes
    assert_eq!(open_fds(), before, "descriptors left after the drops");
}
