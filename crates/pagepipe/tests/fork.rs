//! A fallback dontcache writer in a forked child: fork copies only the calling thread, so the
//! child must start a flusher of its own instead of waiting forever for its window to drain.

use pagepipe::dontcache::{Mode, Writer, MIN_WINDOW};
use std::fs::File;
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn a_forked_child_gets_its_own_flusher() {
    let dir = std::env::temp_dir().join(format!("pagepipe-fork-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The parent starts the process-wide flusher.
    let mut parent =
        Writer::with_mode(File::create(dir.join("parent")).unwrap(), Mode::Fallback).unwrap();
    parent.write_all(b"started").unwrap();
    // SAFETY: the child only runs this test's code and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| {
            let file = File::create(dir.join("child")).unwrap();
            let mut w = Writer::with_mode(file, Mode::Fallback)
                .unwrap()
                .with_window(MIN_WINDOW);
            for _ in 0..64 {
                w.write_all(&[1u8; 65536]).unwrap(); // 4 MiB: 16 windows
            }
            w.finish().unwrap();
        })
        .is_ok();
        // SAFETY: leaves the child at once, running no destructors of the parent's state.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child with a valid status pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child's writer hung waiting for its window");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    parent.finish().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: status {status}"
    );
}
