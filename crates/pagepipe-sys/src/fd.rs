//! Descriptor flags (`fcntl(2)`: `FD_CLOEXEC`, `O_NONBLOCK`).

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// Clears `FD_CLOEXEC` on `fd` so an exec'd program inherits it. Only async-signal-safe calls:
/// usable between fork and exec.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor number touches no user memory.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(drop)
}

/// Whether `fd` is an open descriptor of this process (`F_GETFD`).
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: fcntl on a descriptor number touches no user memory.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Sets `FD_CLOEXEC` on `fd`.
pub fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// Sets `O_NONBLOCK` on the open file description of `fd`.
pub fn set_fd_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(drop)
}
