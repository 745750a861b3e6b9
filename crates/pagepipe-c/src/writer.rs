//! The write end's functions: `pp_write`, `pp_writev` and the `pp_writer_*` family.

use crate::end;
use crate::errno::{einval, guard, guard0};
use libc::{iovec, ssize_t};
use pagepipe::Writer;
use std::ffi::{c_char, c_int};
use std::io::{IoSlice, Write};

/// The write end of a pagepipe (opaque). Made by `pp_pipe`, `pp_writer_dup`,
/// `pp_writer_recv` and `pp_writer_from_env`; closed by `pp_writer_close`.
///
/// A handle is a number, never dereferenced: every function taking one answers `EINVAL` for a
/// closed handle (also once a later open reuses its slot) or a made-up one, and `EBADF` for a
/// `pp_reader *` cast to `pp_writer *`, without touching any end.
pub struct pp_writer {
    _opaque: [u8; 0],
}

/// The most buffers one `pp_writev` takes (`IOV_MAX` on Linux).
const IOV_MAX: c_int = 1024;

/// Writes up to `len` bytes from `buf`, like `write(2)` on a pipe: a blocking writer returns
/// once all `len` bytes are in the pipe, a non-blocking one places what fits. Writes of at
/// most 4096 bytes (`PIPE_BUF`) are atomic, even among writers in many processes.
///
/// Returns the count, or -1 with `errno`: `EAGAIN` (non-blocking, no room), `EPIPE` when no
/// reader is left in any process (no `SIGPIPE` is raised), `EBADF` for a read end's handle,
/// `EINVAL` for a null or closed handle, a null `buf` with a non-zero `len`, or `len` above
/// `SSIZE_MAX`.
///
/// # Safety
/// `buf` must point to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn pp_write(
    w: *mut pp_writer,
    buf: *const libc::c_void,
    len: usize,
) -> ssize_t {
    guard(-1, || {
        if len > isize::MAX as usize || (buf.is_null() && len != 0) {
            return Err(einval("bad buffer"));
        }
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: non-null and `len` readable bytes, per this function's contract.
            unsafe { std::slice::from_raw_parts(buf.cast(), len) }
        };
        end::with::<Writer, _, _>(w, |wr| {
            let mut wr = wr;
            wr.write(bytes).map(|n| n as ssize_t)
        })
    })
}

/// Writes the `iovcnt` buffers of `iov` as one write, like `writev(2)` on a pipe: if they hold
/// at most 4096 bytes (`PIPE_BUF`) in all, the write is atomic.
///
/// Returns the count, or -1 with `errno` as `pp_write`; `EINVAL` also for a negative
/// `iovcnt` or one above 1024 (`IOV_MAX`), a null `iov` with a non-zero `iovcnt`, a null
/// buffer with a non-zero length, or lengths that sum above `SSIZE_MAX`.
///
/// # Safety
/// `iov` must point to `iovcnt` `struct iovec`s, each naming readable bytes.
#[no_mangle]
pub unsafe extern "C" fn pp_writev(w: *mut pp_writer, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    guard(-1, || {
        if !(0..=IOV_MAX).contains(&iovcnt) || (iov.is_null() && iovcnt != 0) {
            return Err(einval("bad iovec array"));
        }
        let iovs: &[iovec] = if iovcnt == 0 {
            &[]
        } else {
            // SAFETY: non-null and `iovcnt` entries, per this function's contract.
            unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) }
        };
        let mut total = 0usize;
        let mut slices = Vec::with_capacity(iovs.len());
        for v in iovs {
            total = total
                .checked_add(v.iov_len)
                .filter(|&t| t <= isize::MAX as usize)
                .ok_or_else(|| einval("the buffers sum above SSIZE_MAX"))?;
            if v.iov_len == 0 {
                continue;
            }
            if v.iov_base.is_null() {
                return Err(einval("null buffer in iovec"));
            }
            // SAFETY: non-null and `iov_len` readable bytes, per this function's contract.
            slices.push(IoSlice::new(unsafe {
                std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len)
            }));
        }
        end::with::<Writer, _, _>(w, |wr| {
            let mut wr = wr;
            wr.write_vectored(&slices).map(|n| n as ssize_t)
        })
    })
}

/// Closes this handle of the write end, like `close(2)`: readers see end of file once no
/// handle of the write end is open in any process. A call another thread is making on the
/// handle finishes first. Returns 0, or -1 with `EINVAL` for a null or already closed handle.
#[no_mangle]
pub extern "C" fn pp_writer_close(w: *mut pp_writer) -> c_int {
    guard0(|| end::close::<Writer, _>(w))
}

/// A descriptor for `poll(2)`, `select(2)` or `epoll(7)`: `POLLOUT` when a write would not
/// block, `POLLERR` once no reader is left. Owned by the handle: do not close it, and do not
/// read or write it. Returns -1 with `EINVAL` for a null or closed handle.
#[no_mangle]
pub extern "C" fn pp_writer_fd(w: *const pp_writer) -> c_int {
    guard(-1, || end::fd::<Writer, _>(w))
}

/// Switches the write end to non-blocking mode (`nonblocking` non-zero) or back, for every
/// handle of it in every process, like `O_NONBLOCK` on an open file description. Returns 0,
/// or -1 with `EINVAL` for a null or closed handle.
#[no_mangle]
pub extern "C" fn pp_writer_set_nonblocking(w: *mut pp_writer, nonblocking: c_int) -> c_int {
    guard0(|| end::set_nonblocking::<Writer, _>(w, nonblocking))
}

/// Stores in `*out` a new handle of the same write end, like `dup(2)`. Returns 0, or -1 with
/// `EINVAL` for a null pointer or a closed handle.
#[no_mangle]
pub extern "C" fn pp_writer_dup(w: *const pp_writer, out: *mut *mut pp_writer) -> c_int {
    guard0(|| end::dup::<Writer, _>(w, out))
}

/// Sends the write end over the connected Unix socket `sock` (`SCM_RIGHTS`); the receiving
/// process takes it with `pp_writer_recv`. This handle stays open. Returns 0, or -1 with
/// `errno`: `EINVAL` for a null or closed handle, the socket's error (`EBADF`, `ENOTSOCK`, ...).
#[no_mangle]
pub extern "C" fn pp_writer_send(w: *const pp_writer, sock: c_int) -> c_int {
    guard0(|| end::send::<Writer, _>(w, sock))
}

/// Receives a write end sent with `pp_writer_send` from the Unix socket `sock` into `*out`.
/// Returns 0, or -1 with `errno`: `EINVAL` for a null `out`, `EBADMSG` for a message that is
/// not a pagepipe write end, `ECONNRESET` if the socket closed first, the socket's error.
#[no_mangle]
pub extern "C" fn pp_writer_recv(sock: c_int, out: *mut *mut pp_writer) -> c_int {
    guard0(|| end::recv::<Writer, _>(sock, out))
}

/// Sets the environment variable `var` of this process to name new, inheritable descriptors
/// of the write end, so that a program this process (or a child it forks) execs takes the end
/// with `pp_writer_from_env(var, ...)`. The descriptors stay open in this process until this
/// handle is closed, and every program it execs meanwhile inherits them (holding the end, as
/// an inherited pipe descriptor would): call it just before the fork and exec, and close the
/// handle after. Like `setenv(3)`, not safe while other threads read the environment.
/// Returns 0, or -1 with `errno`: `EINVAL` for a null or closed handle or a null, empty or
/// non-UTF-8 name or one holding `=`; the OS's error.
#[no_mangle]
pub extern "C" fn pp_writer_to_env(w: *const pp_writer, var: *const c_char) -> c_int {
    guard0(|| end::to_env::<Writer, _>(w, var))
}

/// Takes into `*out` the write end a parent passed with `pp_writer_to_env(var)` before exec.
/// Call it once per variable. Returns 0, or -1 with `errno`: `ENOENT` if `var` is not set,
/// `EBADMSG` if it does not name inherited descriptors of a pagepipe write end, `EEXIST` if
/// this process took it already, `EINVAL` for a null pointer.
#[no_mangle]
pub extern "C" fn pp_writer_from_env(var: *const c_char, out: *mut *mut pp_writer) -> c_int {
    guard0(|| end::from_env::<Writer, _>(var, out))
}
