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
