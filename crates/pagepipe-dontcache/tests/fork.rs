//! A fallback dontcache writer in a forked child: fork copies only the calling thread, so the
//! child must start a flusher of its own instead of waiting forever for its window to drain.

use pagepipe_dontcache::{Mode, Writer, MIN_WINDOW};
use std::fs::File;
use std::io::Write;
use std::time::Duration;

#[path = "../../pagepipe/tests/support/children.rs"]
mod children;

#[test]
fn a_forked_child_gets_its_own_flusher() {
    let dir = std::env::temp_dir().join(format!("pagepipe-fork-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The parent starts the process-wide flusher.
    let mut parent =
        Writer::with_mode(File::create(dir.join("parent")).unwrap(), Mode::Fallback).unwrap();
    parent.write_all(b"started").unwrap();
    let pid = children::fork(|| {
        let file = File::create(dir.join("child")).unwrap();
        let mut w = Writer::with_mode(file, Mode::Fallback)
            .unwrap()
            .with_window(MIN_WINDOW);
        for _ in 0..64 {
            w.write_all(&[1u8; 65536]).unwrap(); // 4 MiB: 16 windows
        }
        w.finish().unwrap();
        0
    });
    // A child whose writer waits forever for its window is killed, and the test fails.
    let status = children::reap_within(pid, Duration::from_secs(60));
    parent.finish().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(status, 0, "child failed: status {status}");
}
