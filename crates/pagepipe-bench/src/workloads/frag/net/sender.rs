//! The forked sender process of `udp` and `tcp`, and the errors that name the call that failed.

use std::io;

pub(super) fn named(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The sender process.
pub(super) struct Sender {
    pid: libc::pid_t,
    /// Set once `waitpid` reaped it.
    status: Option<libc::c_int>,
}

impl Sender {
    /// Forks a child that runs `body` and exits with its status. `body` must keep to what is
    /// safe in the child of a multithreaded process: syscalls, no allocation, no locks.
    pub(super) fn fork(body: impl FnOnce() -> i32) -> io::Result<Sender> {
        // SAFETY: fork(2); the child only runs `body` (syscalls on memory prepared before the
        // fork, by the caller's contract) and leaves with _exit, running no destructors.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => Err(named("fork the sender", io::Error::last_os_error())),
            0 => {
                let status = body();
                // SAFETY: _exit(2) ends the child without running the parent's destructors.
                unsafe { libc::_exit(status) }
            }
            pid => Ok(Sender { pid, status: None }),
        }
    }

    /// Whether the sender has exited (reaping it if so).
    pub(super) fn exited(&mut self) -> io::Result<bool> {
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r < 0 {
            return Err(named("waitpid the sender", io::Error::last_os_error()));
        }
        if r == self.pid {
            self.status = Some(status); // reaped: `wait` reads it from here
        }
        Ok(self.status.is_some())
    }

    /// Waits until the sender has exited (reaping it).
    pub(super) fn join(&mut self) -> io::Result<()> {
        if self.status.is_none() {
            let mut s = 0;
            // SAFETY: waitpid(2) on our own child with a valid status pointer.
            if unsafe { libc::waitpid(self.pid, &mut s, 0) } < 0 {
                return Err(named("waitpid the sender", io::Error::last_os_error()));
            }
            self.status = Some(s);
        }
        Ok(())
    }

    /// Waits for the sender; `Other` when it did not exit with status 0.
    pub(super) fn wait(mut self) -> io::Result<()> {
        self.join()?;
        let status = self.status.expect("join reaped it");
        self.pid = 0;
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "the sender process failed (wait status {status:#x})"
            )))
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.pid > 0 && self.status.is_none() {
            // An error path: do not leave the child running or unreaped.
            // SAFETY: kill(2) and waitpid(2) on our own child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}
