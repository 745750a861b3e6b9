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

/// An inherited writer whose adoption in the child could not start the child's flusher (no
/// thread allowed) reports that on each write, and never waits for a window no flusher drains.
/// Before, the adoption counted as done after the failure, and the next writes waited forever.
/// Needs root (to become a user with a thread limit of its own); skips without.
#[test]
fn an_inherited_writer_whose_flusher_cannot_start_reports_it_on_every_write() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        println!("SKIPPED an_inherited_writer_whose_flusher_cannot_start_reports_it: not root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("pagepipe-fork-nproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("inherited");
    let file = File::create(&path).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let mut w = Writer::with_mode(file, Mode::Fallback)
        .unwrap()
        .with_window(MIN_WINDOW);
    w.write_all(b"parent").unwrap();
    let pid = children::fork(|| {
        // No new thread for this user: the child's flusher cannot start. (Root is exempt from
        // the limit, so become nobody first; a limit of 0 refuses every new thread.)
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain system calls on this process's own credentials and limits.
        let ok = unsafe {
            libc::setrlimit(libc::RLIMIT_NPROC, &none) == 0
                && libc::setgid(65534) == 0
                && libc::setuid(65534) == 0
                // The uid change made /proc/self root's; the writer reopens its file there.
                && libc::prctl(libc::PR_SET_DUMPABLE, 1) == 0
        };
        if !ok {
            return 3;
        }
        let mut refused = 0;
        for _ in 0..16 {
            // 1 MiB in all: four windows, so a write without a flusher would wait.
            match w.write_all(&[1u8; 65536]) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => refused += 1,
                Err(e) => {
                    eprintln!("unexpected: {e}");
                    return 4;
                }
                Ok(()) => {}
            }
        }
        if refused == 16 {
            0
        } else {
            5
        }
    });
    // A child whose writer waits forever is killed, and the test fails.
    let status = children::reap_within(pid, Duration::from_secs(30));
    w.finish().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(status, 0, "child failed: status {status}");
}

/// A child's figures for an inherited writer count only what the child wrote: its `finish()`
/// cannot vouch for the parent's bytes. Before, the child reported 1,048,577 bytes for 1.
#[test]
fn an_inherited_writers_stats_count_only_the_childs_writes() {
    let dir = std::env::temp_dir().join(format!("pagepipe-fork-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for mode in [Mode::Fallback, Mode::Auto] {
        let mut w = Writer::with_mode(File::create(dir.join("stats")).unwrap(), mode).unwrap();
        w.write_all(&vec![7u8; 1 << 20]).unwrap();
        let pid = children::fork(|| {
            w.write_all(b"x").unwrap();
            i32::from(w.stats().bytes_written != 1)
        });
        let status = children::reap_within(pid, Duration::from_secs(30));
        assert_eq!(w.finish().unwrap().bytes_written, 1 << 20);
        assert_eq!(status, 0, "{mode:?}: the child counted the parent's bytes");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
