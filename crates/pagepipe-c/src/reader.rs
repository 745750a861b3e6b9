//! The read end's functions: `pp_read` and the `pp_reader_*` family.

use crate::end;
use crate::errno::{einval, guard, guard0};
use libc::ssize_t;
use pagepipe::Reader;
use std::ffi::{c_char, c_int};
use std::io::Read;

/// The read end of a pagepipe (opaque). Made by `pp_pipe`, `pp_reader_dup`,
/// `pp_reader_recv` and `pp_reader_from_env`; closed by `pp_reader_close`.
///
/// A handle is a number, never dereferenced: every function taking one answers `EINVAL` for a
/// closed handle (also once a later open reuses its slot) or a made-up one, and `EBADF` for a
/// `pp_writer *` cast to `pp_reader *`, without touching any end.
pub struct pp_reader {
    _opaque: [u8; 0],
}

/// Reads up to `len` bytes into `buf`, like `read(2)` on a pipe: returns what is queued (up to
/// `len`) without waiting for more; a blocking reader waits only while the pipe is empty.
///
/// Returns the count, 0 at end of file (the pipe is empty and no writer is left in any
/// process), or -1 with `errno`: `EAGAIN` (non-blocking, empty pipe, writers left), `EBADF`
/// for a write end's handle, `EINVAL` for a null or closed handle, a null `buf` with a
/// non-zero `len`, or `len` above `SSIZE_MAX`.
///
/// # Safety
/// `buf` must point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pp_read(r: *mut pp_reader, buf: *mut libc::c_void, len: usize) -> ssize_t {
    guard(-1, || {
        if len > isize::MAX as usize || (buf.is_null() && len != 0) {
            return Err(einval("bad buffer"));
        }
        let bytes: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: non-null and `len` writable bytes, per this function's contract (read
            // only ever writes them).
            unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) }
        };
        end::with::<Reader, _, _>(r, |rd| {
            let mut rd = rd;
            rd.read(bytes).map(|n| n as ssize_t)
        })
    })
}

/// Closes this handle of the read end, like `close(2)`: writers get `EPIPE` once no handle of
/// the read end is open in any process. A call another thread is making on the handle finishes
/// first. Returns 0, or -1 with `EINVAL` for a null or already closed handle.
#[no_mangle]
pub extern "C" fn pp_reader_close(r: *mut pp_reader) -> c_int {
    guard0(|| end::close::<Reader, _>(r))
}

/// A descriptor for `poll(2)`, `select(2)` or `epoll(7)`: `POLLIN` when the pipe holds data,
/// `POLLHUP` once no writer is left. Owned by the handle: do not close it, and do not read or
/// write it. Returns -1 with `EINVAL` for a null or closed handle.
#[no_mangle]
pub extern "C" fn pp_reader_fd(r: *const pp_reader) -> c_int {
    guard(-1, || end::fd::<Reader, _>(r))
}

/// Switches the read end to non-blocking mode (`nonblocking` non-zero) or back, for every
/// handle of it in every process, like `O_NONBLOCK` on an open file description. Returns 0,
/// or -1 with `EINVAL` for a null or closed handle.
#[no_mangle]
pub extern "C" fn pp_reader_set_nonblocking(r: *mut pp_reader, nonblocking: c_int) -> c_int {
    guard0(|| end::set_nonblocking::<Reader, _>(r, nonblocking))
}

/// Stores in `*out` a new handle of the same read end, like `dup(2)`. Returns 0, or -1 with
/// `EINVAL` for a null pointer or a closed handle.
#[no_mangle]
pub extern "C" fn pp_reader_dup(r: *const pp_reader, out: *mut *mut pp_reader) -> c_int {
    guard0(|| end::dup::<Reader, _>(r, out))
}

/// Sends the read end over the connected Unix socket `sock` (`SCM_RIGHTS`); the receiving
/// process takes it with `pp_reader_recv`. This handle stays open. Returns 0, or -1 with
/// `errno`: `EINVAL` for a null or closed handle, the socket's error (`EBADF`, `ENOTSOCK`, ...).
#[no_mangle]
pub extern "C" fn pp_reader_send(r: *const pp_reader, sock: c_int) -> c_int {
    guard0(|| end::send::<Reader, _>(r, sock))
}

/// Receives a read end sent with `pp_reader_send` from the Unix socket `sock` into `*out`.
/// Returns 0, or -1 with `errno`: `EINVAL` for a null `out`, `EBADMSG` for a message that is
/// not a pagepipe read end, `ECONNRESET` if the socket closed first, the socket's error.
#[no_mangle]
pub extern "C" fn pp_reader_recv(sock: c_int, out: *mut *mut pp_reader) -> c_int {
    guard0(|| end::recv::<Reader, _>(sock, out))
}

/// Sets the environment variable `var` of this process to name new, inheritable descriptors
/// of the read end, so that a program this process (or a child it forks) execs takes the end
/// with `pp_reader_from_env(var, ...)`. The descriptors stay open in this process until this
/// handle is closed, and every program it execs meanwhile inherits them (holding the end, as
/// an inherited pipe descriptor would): call it just before the fork and exec, and close the
/// handle after. Like `setenv(3)`, not safe while other threads read the environment.
/// Returns 0, or -1 with `errno`: `EINVAL` for a null or closed handle or a null, empty or
/// non-UTF-8 name or one holding `=`; the OS's error.
#[no_mangle]
pub extern "C" fn pp_reader_to_env(r: *const pp_reader, var: *const c_char) -> c_int {
    guard0(|| end::to_env::<Reader, _>(r, var))
}

/// Takes into `*out` the read end a parent passed with `pp_reader_to_env(var)` before exec.
/// Call it once per variable. Returns 0, or -1 with `errno`: `ENOENT` if `var` is not set,
/// `EBADMSG` if it does not name inherited descriptors of a pagepipe read end, `EEXIST` if
/// this process took it already, `EINVAL` for a null pointer.
#[no_mangle]
pub extern "C" fn pp_reader_from_env(var: *const c_char, out: *mut *mut pp_reader) -> c_int {
    guard0(|| end::from_env::<Reader, _>(var, out))
}
