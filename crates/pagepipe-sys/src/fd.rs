//! Descriptor flags (`fcntl(2)`: `FD_CLOEXEC`, `O_NONBLOCK`).

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// Clears `FD_CLOEXEC` on `fd` so an exec'd program inherits it. Only async-signal-safe calls:
/// usable between fork and exec.
///
/// # Errors
/// The OS's error from `fcntl(2)` (`EBADF` for a closed descriptor).
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
///
/// # Errors
/// The OS's error from `fcntl(2)`.
pub fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// Sets `O_NONBLOCK` on the open file description of `fd`.
///
/// # Errors
/// The OS's error from `fcntl(2)`.
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
///
/// # Errors
/// The OS's error from `fcntl(2)` other than a conflicting lock (which is `Ok(false)`).
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
///
/// # Errors
/// The OS's error from `fcntl(2)` (`F_OFD_GETLK`).
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
///
/// # Errors
/// The OS's error from `open(2)`: `ENOENT` without `/proc`, `EMFILE` with a full descriptor table.
pub fn reopen(fd: BorrowedFd<'_>) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let raw = open_again(fd.as_raw_fd())?;
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// `/proc/self/fd/<fd>` as a NUL-terminated path, formatted without allocating (async-signal
/// safe: for fork handlers and forked children). `None` for a negative `fd`.
pub fn proc_fd_path(fd: RawFd) -> Option<[u8; 26]> {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut n = u32::try_from(fd).ok()?;
    let mut digits = [0u8; 10]; // u32::MAX has 10
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut path = [0u8; 26]; // the prefix, 10 digits at most, a NUL
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    for i in 0..len {
        path[PREFIX.len() + i] = digits[len - 1 - i];
    }
    Some(path)
}

/// A new open file description of descriptor `fd`'s file, opened through `/proc/self/fd`:
/// its raw number. Allocation-free.
fn open_again(fd: RawFd) -> io::Result<RawFd> {
    let path = proc_fd_path(fd).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: `path` is NUL-terminated (see `proc_fd_path`) and alive for the call.
    cvt(unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) })
}

/// Gives descriptor number `fd` an open file description of its own: opens its file again
/// through `/proc/self/fd/<fd>` and puts the new description at the same number (`dup3(2)`),
/// so nothing that holds the number notices, while the description it had (shared with
/// whoever `fd` was inherited from) is no longer referenced from here. Async-signal-safe and
/// allocation-free: for a forked child's fork handler.
///
/// # Errors
/// The OS's error from `open(2)` or `dup3(2)` (see [`reopen`]); the descriptor is then unchanged.
pub fn reopen_in_place(fd: RawFd) -> io::Result<()> {
    let new = open_again(fd)?;
    // SAFETY: dup3 on two descriptor numbers we own touches no user memory.
    let rc = cvt(unsafe { libc::dup3(new, fd, libc::O_CLOEXEC) });
    close_raw(new);
    rc.map(drop)
}

/// Closes descriptor `fd` (`close(2)`; async-signal-safe: for fork handlers).
pub fn close_raw(fd: RawFd) {
    // SAFETY: closing a descriptor number touches no user memory; the caller owns `fd`.
    unsafe { libc::close(fd) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd};

    /// After `reopen_in_place`, the number no longer shares the description it was a copy of:
    /// a lock that description holds now conflicts with a lock through the number.
    #[test]
    fn reopen_in_place_leaves_the_shared_description() {
        let file = crate::memfd::sealed_memfd(4096).unwrap();
        let copy = file.try_clone().unwrap(); // dup: the same description
        assert!(lock_byte(file.as_fd(), 1 << 40).unwrap());
        assert!(
            lock_byte(copy.as_fd(), 1 << 40).unwrap(),
            "same description, same lock"
        );
        reopen_in_place(copy.as_raw_fd()).unwrap();
        assert!(
            !lock_byte(copy.as_fd(), 1 << 40).unwrap(),
            "a description of its own"
        );
        assert!(byte_locked(copy.as_fd(), 1 << 40).unwrap());
        drop(file);
        assert!(
            !byte_locked(copy.as_fd(), 1 << 40).unwrap(),
            "the lock went with its holder"
        );
    }
}
