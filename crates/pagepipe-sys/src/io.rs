//! Vectored I/O on descriptors (`readv(2)`, `writev(2)`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Linux's `UIO_MAXIOV`: the most buffers one `readv`/`writev` takes.
pub const IOV_MAX: usize = 1024;

/// Writes the buffers `bufs` to `fd` in one call (`writev(2)`), retrying on `EINTR`; returns
/// the bytes written (possibly fewer than offered).
///
/// # Errors
/// The OS's error from `writev(2)` (`WouldBlock` for a full non-blocking descriptor).
pub fn writev(fd: BorrowedFd<'_>, bufs: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: IoSlice is ABI-compatible with `struct iovec` (std guarantees it on Unix), and
    // each describes a live buffer we borrow: readable for the call.
    unsafe {
        writev_raw(
            fd,
            std::slice::from_raw_parts(bufs.as_ptr().cast(), bufs.len()),
        )
    }
}

/// Reads from `fd` into the buffers `bufs` in one call (`readv(2)`), retrying on `EINTR`;
/// returns the bytes read (0 at end of file).
///
/// # Errors
/// The OS's error from `readv(2)` (`WouldBlock` for an empty non-blocking descriptor).
pub fn readv(fd: BorrowedFd<'_>, bufs: &mut [std::io::IoSliceMut<'_>]) -> io::Result<usize> {
    // SAFETY: IoSliceMut is ABI-compatible with `struct iovec`, and each describes a live
    // buffer we borrow exclusively: writable, and used by nothing else, for the call.
    unsafe {
        readv_raw(
            fd,
            std::slice::from_raw_parts(bufs.as_ptr().cast(), bufs.len()),
        )
    }
}

/// [`writev`] of buffers given by address (memory another process may write at the same time,
/// to which no Rust reference may be formed).
///
/// # Safety
/// Each iovec must describe memory readable for the duration of the call.
///
/// # Errors
/// As [`writev`].
pub unsafe fn writev_raw(fd: BorrowedFd<'_>, iov: &[libc::iovec]) -> io::Result<usize> {
    let cnt = iov.len().min(IOV_MAX) as libc::c_int;
    // SAFETY: `iov` is a live array of at least `cnt` iovecs; the caller vouches for the memory
    // they describe, which the kernel only reads.
    retry_eintr(|| unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), cnt) })
}

/// [`readv`] into buffers given by address (see [`writev_raw`]).
///
/// # Safety
/// Each iovec must describe memory writable, and used by nothing else in this process, for the
/// duration of the call.
///
/// # Errors
/// As [`readv`].
pub unsafe fn readv_raw(fd: BorrowedFd<'_>, iov: &[libc::iovec]) -> io::Result<usize> {
    let cnt = iov.len().min(IOV_MAX) as libc::c_int;
    // SAFETY: `iov` is a live array of at least `cnt` iovecs; the caller vouches for the memory
    // they describe, which the kernel writes.
    retry_eintr(|| unsafe { libc::readv(fd.as_raw_fd(), iov.as_ptr(), cnt) })
}

/// Runs one vectored call until it is not interrupted; its count, or its error.
fn retry_eintr(call: impl Fn() -> isize) -> io::Result<usize> {
    loop {
        let rc = call();
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
