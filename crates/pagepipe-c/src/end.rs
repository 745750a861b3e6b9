//! What the functions of both ends share: a handle's value ([`Held`]), turning C pointers into
//! slots, and the bodies of the functions that `writer` and `reader` export for each end.

use crate::errno::einval;
use crate::fds::{self, PipeEnd};
use crate::handle::{Pool, Slot};
use std::ffi::{c_char, c_int, CStr};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

/// What a handle holds: the end, and the descriptors `pp_*_to_env` handed out for a child to
/// inherit (kept open, like the end itself, until the handle is closed).
pub(crate) struct Held<E> {
    pub(crate) end: E,
    exported: Mutex<Vec<OwnedFd>>,
}

/// The slot behind a C handle pointer `p` (an opaque `pp_writer *` or `pp_reader *`).
fn slot<E: PipeEnd, P>(p: *const P) -> io::Result<&'static Slot<Held<E>>> {
    // SAFETY: every non-null handle pointer the C API hands out is a `&'static Slot<Held<E>>`
    // of its type (slots are never freed); a C caller that passes anything else breaks the
    // header's contract, as with a bad `FILE *`.
    unsafe { p.cast::<Slot<Held<E>>>().as_ref() }.ok_or_else(|| einval("null pagepipe handle"))
}

/// Runs `f` on the end behind `p`: `EINVAL` for a null or closed handle.
pub(crate) fn with<E: PipeEnd, P, R>(
    p: *const P,
    f: impl FnOnce(&E) -> io::Result<R>,
) -> io::Result<R> {
    slot::<E, P>(p)?.with(|held| f(&held.end))
}

/// Puts `end` in a new handle and stores it in `*out` (`EINVAL` if `out` is null).
pub(crate) fn open<E: PipeEnd, P>(
    pool: &'static Pool<Held<E>>,
    end: E,
    out: *mut *mut P,
) -> io::Result<()> {
    check_out(out)?;
    let held = Held {
        end,
        exported: Mutex::new(Vec::new()),
    };
    let slot: *const Slot<Held<E>> = pool.open(held);
    // SAFETY: `out` is non-null (checked) and the caller's to write, per the header.
    unsafe { out.write(slot.cast_mut().cast()) };
    Ok(())
}

/// `EINVAL` for a null output pointer.
pub(crate) fn check_out<P>(out: *mut *mut P) -> io::Result<()> {
    if out.is_null() {
        return Err(einval("null output pointer"));
    }
    Ok(())
}

pub(crate) fn close<E: PipeEnd, P>(p: *const P) -> io::Result<()> {
    slot::<E, P>(p)?.close()
}

pub(crate) fn fd<E: PipeEnd, P>(p: *const P) -> io::Result<c_int> {
    with::<E, P, _>(p, |e| Ok(e.as_raw_fd()))
}

pub(crate) fn set_nonblocking<E: PipeEnd, P>(p: *const P, on: c_int) -> io::Result<()> {
    with::<E, P, _>(p, |e| e.set_nonblocking(on != 0))
}

pub(crate) fn dup<E: PipeEnd, P>(
    pool: &'static Pool<Held<E>>,
    p: *const P,
    out: *mut *mut P,
) -> io::Result<()> {
    check_out(out)?;
    let end = with::<E, P, _>(p, |e| Ok(e.clone()))?;
    open(pool, end, out)
}

/// The Unix socket `sock` names, borrowed (`EBADF` for a negative number).
fn socket(sock: c_int) -> io::Result<ManuallyDrop<UnixStream>> {
    if sock < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: the caller lends us `sock` for the call; ManuallyDrop never closes it. A number
    // that is not an open socket makes the socket calls fail (EBADF, ENOTSOCK), nothing else.
    Ok(ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(sock) }))
}

pub(crate) fn send<E: PipeEnd, P>(p: *const P, sock: c_int) -> io::Result<()> {
    let sock = socket(sock)?;
    with::<E, P, _>(p, |e| e.send_to(&sock))
}

pub(crate) fn recv<E: PipeEnd, P>(
    pool: &'static Pool<Held<E>>,
    sock: c_int,
    out: *mut *mut P,
) -> io::Result<()> {
    check_out(out)?;
    let sock = socket(sock)?;
    open(pool, E::recv_from(&sock)?, out)
}

/// The environment variable name `var` points to: `EINVAL` for null, non-UTF-8, empty or
/// holding `=`.
fn var_name<'a>(var: *const c_char) -> io::Result<&'a str> {
    if var.is_null() {
        return Err(einval("null environment variable name"));
    }
    // SAFETY: non-null, and a NUL-terminated string per the header.
    let name = unsafe { CStr::from_ptr(var) }
        .to_str()
        .map_err(|_| einval("the environment variable name is not UTF-8"))?;
    if name.is_empty() || name.contains('=') {
        return Err(einval("not a valid environment variable name"));
    }
    Ok(name)
}

/// Sets `var` in this process's environment to name new, inheritable descriptors of the end,
/// for a program this process (or a child it forks) execs to take with `pp_*_from_env`.
pub(crate) fn to_env<E: PipeEnd, P>(p: *const P, var: *const c_char) -> io::Result<()> {
    let name = var_name(var)?;
    slot::<E, P>(p)?.with(|held| {
        let fds = fds::export(&held.end)?;
        for fd in &fds {
            pagepipe_sys::fd::clear_cloexec(fd.as_raw_fd())?;
        }
        let [m, signal] = fds.each_ref().map(AsRawFd::as_raw_fd);
        // The format `from_env` reads.
        std::env::set_var(name, format!("pagepipe:{}:{m}:{signal}", E::NAME));
        held.exported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(fds);
        Ok(())
    })
}

pub(crate) fn from_env<E: PipeEnd, P>(
    pool: &'static Pool<Held<E>>,
    var: *const c_char,
    out: *mut *mut P,
) -> io::Result<()> {
    check_out(out)?;
    let name = var_name(var)?;
    open(pool, E::from_env(name)?, out)
}
