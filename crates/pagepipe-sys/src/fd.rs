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

/// Takes a write lock on the one byte at `offset` of `fd`'s file, for this process
/// (`fcntl(2)` `F_SETLK`, a POSIX record lock: owned by the process, not inherited by `fork`,
/// released when the process exits or closes any descriptor of the file). `Ok(false)` when
/// another process holds it.
pub fn lock_byte(fd: BorrowedFd<'_>, offset: u64) -> io::Result<bool> {
    let mut fl = byte_lock(offset)?;
    // SAFETY: `fl` is a live flock for the call.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLK, &mut fl) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Whether another process holds a lock on the byte at `offset` of `fd`'s file (`fcntl(2)`
/// `F_GETLK`; this process's own locks never count).
pub fn byte_locked(fd: BorrowedFd<'_>, offset: u64) -> io::Result<bool> {
    let mut fl = byte_lock(offset)?;
    // SAFETY: `fl` is a live flock for the call, which writes into it.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETLK, &mut fl) })?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

fn byte_lock(offset: u64) -> io::Result<libc::flock> {
    let start =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: flock is plain data; all zeros is a valid value, completed below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = 1;
    Ok(fl)
}
