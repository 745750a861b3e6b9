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

/// Takes a write lock on the one byte at `offset` of `fd`'s file for `fd`'s open file
/// description (`fcntl(2)` `F_OFD_SETLK`: owned by the description, so closing other
/// descriptors of the file keeps it, and the kernel drops it when the last descriptor of the
/// description closes, as at the owner's exit). `Ok(false)` when another description holds it.
pub fn lock_byte(fd: BorrowedFd<'_>, offset: u64) -> io::Result<bool> {
    let mut fl = byte_lock(offset)?;
    // SAFETY: `fl` is a live flock for the call.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Whether an open file description other than `fd`'s holds a lock on the byte at `offset` of
/// `fd`'s file (`fcntl(2)` `F_OFD_GETLK`).
pub fn byte_locked(fd: BorrowedFd<'_>, offset: u64) -> io::Result<bool> {
    let mut fl = byte_lock(offset)?;
    // SAFETY: `fl` is a live flock for the call, which writes into it.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) })?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

fn byte_lock(offset: u64) -> io::Result<libc::flock> {
    let start =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: flock is plain data; all zeros is a valid value (l_pid must be 0 for the OFD
    // commands), completed below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = 1;
    Ok(fl)
}

/// A new open file description of `fd`'s file, read-write and close-on-exec, opened through
/// `/proc/self/fd` (a `dup` would share `fd`'s description).
pub fn reopen(fd: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `path` is a NUL-terminated string alive for the call.
    let raw = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// Closes descriptor `fd` (`close(2)`; async-signal-safe: for fork handlers).
pub fn close_raw(fd: RawFd) {
    // SAFETY: closing a descriptor number touches no user memory; the caller owns `fd`.
    unsafe { libc::close(fd) };
}
