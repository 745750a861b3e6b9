//! Kernel pipes: making them, telling their ends apart, one-byte signals (`pipe2(2)`, `read(2)`, `write(2)`, `FIONREAD`, `F_SETPIPE_SZ`).

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A kernel pipe (`pipe2(2)`, close-on-exec): `(read end, write end)`.
pub fn os_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Which end of a kernel pipe `fd` is: `Some(false)` for a read end, `Some(true)` for a write
/// end, `None` if it is not a pipe (`fstat(2)`, `F_GETFL`).
pub fn pipe_end_kind(fd: BorrowedFd<'_>) -> io::Result<Option<bool>> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable for the call.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Ok(None);
    }
    // SAFETY: F_GETFL touches no user memory.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(match fl & libc::O_ACCMODE {
        libc::O_RDONLY => Some(false),
        libc::O_WRONLY => Some(true),
        _ => None,
    })
}

/// Writes one byte to a non-blocking descriptor (`write(2)`); a full pipe is `WouldBlock`.
pub fn write_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let b = 1u8;
    loop {
        // SAFETY: writes one byte from a live local.
        let rc = unsafe { libc::write(fd.as_raw_fd(), (&b as *const u8).cast(), 1) };
        if rc == 1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if rc < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(e);
    }
}

/// Reads one byte from a non-blocking descriptor (`read(2)`); an empty pipe is `WouldBlock`.
pub fn read_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut b = 0u8;
    loop {
        // SAFETY: reads at most one byte into a live local.
        let rc = unsafe { libc::read(fd.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
        if rc == 1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if rc < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(if rc == 0 {
            io::Error::from(io::ErrorKind::UnexpectedEof)
        } else {
            e
        });
    }
}

/// Bytes queued in a kernel pipe, asked through either end (`ioctl(2)`, `FIONREAD`).
pub fn fionread(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer we pass.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n as usize)
}

/// Sets a kernel pipe's capacity (`fcntl(2)`, `F_SETPIPE_SZ`).
pub fn set_pipe_size(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) }).map(drop)
}
