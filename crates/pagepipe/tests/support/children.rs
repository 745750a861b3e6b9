//! Forked children for the tests that need another process (`#[path]`-included: not a test of
//! its own): fork, run a closure in the child, and reap it without ever hanging the suite.
#![allow(dead_code)] // each test file uses what it needs

use std::time::{Duration, Instant};

/// Runs a test binary's forking tests one at a time (a test holds the guard throughout): a
/// child forked by one test inherits, and holds open until it ends, every end of the pipes the
/// other tests have open, as children inherit `pipe(2)` descriptors, which would keep their end
/// of file or `BrokenPipe` from coming. A test that panicked leaves the lock usable.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forks; the child runs `f` and exits with its result (1 on panic) without running the
/// parent's destructors. What `f` captures by move is dropped in the parent when this returns.
pub fn fork(f: impl FnOnce() -> i32) -> libc::pid_t {
    let pid = fork_raw();
    if pid == 0 {
        child(f);
    }
    pid
}

/// `fork(2)`: 0 in the child, which must end with [`child`].
pub fn fork_raw() -> libc::pid_t {
    // SAFETY: the child runs only test code using pagepipe (whose fork handlers make it usable
    // in a child) and leaves with _exit or is killed (`holding`).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    pid
}

/// Forks a child that holds `keep` (as a process that still has those ends open) and sleeps
/// until it is killed, never dropping it. The parent's `keep` is dropped when this returns.
pub fn holding<T>(keep: T) -> libc::pid_t {
    fork(move || {
        let _held = keep;
        loop {
            // SAFETY: pause(2) has no preconditions; the parent kills us.
            unsafe { libc::pause() };
        }
    })
}

/// Runs `f` in a forked child and exits with its result (1 on panic).
pub fn child(f: impl FnOnce() -> i32) -> ! {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(1);
    // SAFETY: leaves the child at once, running no destructors of the parent's state.
    unsafe { libc::_exit(code) }
}

/// Waits for `pid`, killing it (and panicking) after `hang`; returns its exit code, or 128 +
/// the signal that ended it.
pub fn reap_within(pid: libc::pid_t, hang: Duration) -> i32 {
    let deadline = Instant::now() + hang;
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child with a valid status pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            break;
        }
        if Instant::now() > deadline {
            kill(pid);
            panic!("child {pid} hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

/// SIGKILLs our child `pid` and reaps it within `hang`: its exit code, or 128 + the signal
/// that ended it (128 + SIGKILL unless it had already ended).
pub fn kill_and_reap(pid: libc::pid_t, hang: Duration) -> i32 {
    kill(pid);
    reap_within(pid, hang)
}

/// SIGKILLs our child `pid`.
pub fn kill(pid: libc::pid_t) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Fills this process's descriptor table (dups of `fd`) until `spare` numbers are left;
/// returns the fillers (dropping them frees the table again).
pub fn fill_fd_table(fd: std::os::fd::BorrowedFd<'_>, spare: usize) -> Vec<std::os::fd::OwnedFd> {
    let mut fillers = Vec::new();
    while let Ok(d) = fd.try_clone_to_owned() {
        fillers.push(d);
    }
    for _ in 0..spare {
        fillers.pop();
    }
    fillers
}
