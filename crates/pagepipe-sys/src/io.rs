//! Vectored I/O on descriptors (`readv(2)`, `writev(2)`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Linux's `UIO_MAXIOV`: the most buffers one `readv`/`writev` takes.
pub const IOV_MAX: usize = 1024;

/// Writes the buffers `bufs` to `fd` in one call (`writev(2)`), retrying on `EINTR`; returns
/// the bytes written (possibly fewer than offered).
pub fn writev(fd: BorrowedFd<'_>, bufs: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
    let cnt = bufs.len().min(IOV_MAX) as libc::c_int;
    loop {
        // SAFETY: IoSlice is ABI-compatible with `struct iovec` (std guarantees it on Unix);
        // the kernel only reads the `cnt` live buffers they describe.
        let rc = unsafe { libc::writev(fd.as_raw_fd(), bufs.as_ptr().cast(), cnt) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads from `fd` into the buffers `bufs` in one call (`readv(2)`), retrying on `EINTR`;
/// returns the bytes read (0 at end of file).
pub fn readv(fd: BorrowedFd<'_>, bufs: &mut [std::io::IoSliceMut<'_>]) -> io::Result<usize> {
    let cnt = bufs.len().min(IOV_MAX) as libc::c_int;
    loop {
        // SAFETY: IoSliceMut is ABI-compatible with `struct iovec`; the kernel writes only
        // within the `cnt` live, exclusively borrowed buffers they describe.
        let rc = unsafe { libc::readv(fd.as_raw_fd(), bufs.as_mut_ptr().cast(), cnt) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A buffer the kernel reads or writes by address: `(start, len)`.
pub type RawBuf = (*mut u8, usize);

/// [`writev`] of buffers given by address (memory another process may write at the same time,
/// to which no Rust reference may be formed).
///
/// # Safety
/// Each `(start, len)` must be readable memory for the duration of the call.
pub unsafe fn writev_raw(fd: BorrowedFd<'_>, bufs: &[RawBuf]) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = bufs
        .iter()
        .take(IOV_MAX)
        .map(|&(p, l)| libc::iovec {
            iov_base: p.cast(),
            iov_len: l,
        })
        .collect();
    loop {
        // SAFETY: `iov` is a live array of iovecs describing memory the caller vouches for.
        let rc = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// [`readv`] into buffers given by address (see [`writev_raw`]).
///
/// # Safety
/// Each `(start, len)` must be writable memory that nothing else in this process uses for the
/// duration of the call.
pub unsafe fn readv_raw(fd: BorrowedFd<'_>, bufs: &[RawBuf]) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = bufs
        .iter()
        .take(IOV_MAX)
        .map(|&(p, l)| libc::iovec {
            iov_base: p.cast(),
            iov_len: l,
        })
        .collect();
    loop {
        // SAFETY: `iov` is a live array of iovecs describing memory the caller vouches for.
        let rc = unsafe { libc::readv(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
