//! The library's own threads never take the application's signals (issue 39, break 3): a
//! program that blocks a signal and waits for it with `sigtimedwait(2)` gets it there, after its
//! pipes have started every helper thread the library has (the death watcher, the idle trimmer,
//! the adapters' timer).

#[path = "support/children.rs"]
mod children;

use children::{fork, reap_within, serial};
use std::io::{Read, Write};
use std::time::Duration;

/// A set holding only SIGTERM.
fn sigterm_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset write only the local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// The names of this process's threads whose signal mask leaves SIGTERM unblocked.
fn threads_taking_sigterm() -> Vec<String> {
    let mut open = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let name = status.lines().next().unwrap_or("").to_string();
        let blocked = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        if blocked & (1 << (libc::SIGTERM - 1)) == 0 {
            open.push(name);
        }
    }
    open
}

#[test]
fn a_blocked_signal_reaches_sigtimedwait_after_a_pipe_crossed_a_fork() {
    let _serial = serial();
    let pid = fork(|| {
        let (mut w, mut r) = pagepipe::pipe().unwrap();
        // A pipe that crosses a fork starts the death watcher; one that moves data and goes
        // idle, the trimmer. Both start before the application blocks its signal, as they
        // would in a program that sets its mask once its set-up is done.
        let grandchild = fork(|| 0);
        assert_eq!(reap_within(grandchild, Duration::from_secs(10)), 0);
        w.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        r.read_exact(&mut b).unwrap();
        let set = sigterm_set();
        // SAFETY: blocks SIGTERM on this thread (the application's only one).
        assert_eq!(
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) },
            0
        );
        std::thread::sleep(Duration::from_millis(100));
        let open = threads_taking_sigterm();
        if !open.is_empty() {
            eprintln!("threads with SIGTERM unblocked: {open:?}");
            return 2;
        }
        // SAFETY: signals this process; SIGTERM is blocked in every thread, so it stays pending.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        let timeout = libc::timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        // SAFETY: valid pointers to locals.
        let got = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if got == libc::SIGTERM {
            0
        } else {
            3
        }
    });
    assert_eq!(
        reap_within(pid, Duration::from_secs(30)),
        0,
        "the child must take its own SIGTERM in sigtimedwait (2: a library thread has it \
         unblocked; 3: not delivered; 128+15: killed by it)"
    );
}
