//! The process-wide idle trimmer: it sleeps while no pipe exists, and neither it nor the
//! registry of pipes breaks a process that forks while other threads create pipes.

use std::io::{Read, Write};
use std::time::Duration;

#[path = "support/children.rs"]
mod children;

/// Voluntary context switches of this process's trimmer thread.
fn trimmer_switches() -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim() == "pagepipe-trim" {
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok());
        }
    }
    None
}

#[test]
fn trimmer_sleeps_while_no_pipe_exists_and_forks_do_not_deadlock() {
    // A pipe starts the trimmer; once it is gone the trimmer parks.
    drop(pagepipe::pipe().unwrap());
    std::thread::sleep(Duration::from_millis(400));
    let before = trimmer_switches().expect("trimmer thread");
    std::thread::sleep(Duration::from_millis(600));
    let after = trimmer_switches().unwrap();
    assert_eq!(before, after, "the trimmer woke up with no pipe to trim");

    // Fork while another thread keeps taking the registry lock (every pipe registers).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                drop(pagepipe::pipe().unwrap());
            }
        })
    };
    for _ in 0..50 {
        let pid = children::fork(|| {
            let (mut w, mut r) = pagepipe::pipe().unwrap();
            w.write_all(b"child").unwrap();
            drop(w);
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            i32::from(s != "child")
        });
        // A child that deadlocked is killed, and fails the test, after this bound.
        assert_eq!(children::reap_within(pid, Duration::from_secs(10)), 0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
}
