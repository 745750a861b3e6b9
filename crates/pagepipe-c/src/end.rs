//! What the functions of both ends share: a handle's value ([`Held`]), the two handle tables
//! ([`WRITERS`], [`READERS`]) and their fork handler, and the bodies of the functions that
//! `writer` and `reader` export for each end.

use crate::errno::einval;
use crate::fds::{self, PipeEnd};
use crate::handle::{self, Kind, Pool};
use pagepipe::{Reader, Writer};
use std::ffi::{c_char, c_int, CStr};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicPtr, Ordering};

/// What a handle holds: the end, and the descriptors `pp_*_to_env` handed out for a child to
/// inherit (kept open, like the end itself, until the handle is closed).
pub(crate) struct Held<E> {
    pub(crate) end: E,
    exported: Exported,
}

/// The descriptors `pp_*_to_env` handed out, a list that only grows until the handle's value
/// is dropped. Lock-free: a child forked while another thread was adding to it (a lock held
/// at the fork stays held in the child forever) can still export and close.
struct Exported {
    head: AtomicPtr<Export>,
}

/// One `pp_*_to_env` call's descriptors.
struct Export {
    fds: [OwnedFd; 2],
    next: *mut Export,
}

impl Exported {
    const fn new() -> Exported {
        Exported {
            head: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Keeps `fds` open until the list is dropped.
    fn push(&self, fds: [OwnedFd; 2]) {
        let node = Box::into_raw(Box::new(Export {
            fds,
            next: std::ptr::null_mut(),
        }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the CAS below publishes it.
            unsafe { (*node).next = head };
            // Release: the node's contents happen before whoever walks the list (Drop, with
            // `&mut self`, after the handle's last call).
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        let mut p = *self.head.get_mut();
        while !p.is_null() {
            // SAFETY: every node was made by `Box::into_raw` in `push` and is reachable only
            // from this list, which `&mut self` owns now.
            let node = unsafe { Box::from_raw(p) };
            p = node.next;
            drop(node.fds); // closes the descriptors
        }
    }
}

// SAFETY: the raw pointers are owned Boxes of `Export` (descriptors: Send and Sync); the list
// is only pushed to through the atomic head and walked with `&mut self`.
unsafe impl Send for Exported {}
// SAFETY: as above.
unsafe impl Sync for Exported {}

/// The handles of every write end.
pub(crate) static WRITERS: Pool<Held<Writer>> = Pool::new(Kind::Writer);
/// The handles of every read end.
pub(crate) static READERS: Pool<Held<Reader>> = Pool::new(Kind::Reader);

/// An end kind with its handle table.
pub(crate) trait Table: PipeEnd {
    /// [`WRITERS`] or [`READERS`].
    fn table() -> &'static Pool<Held<Self>>;
}

impl Table for Writer {
    fn table() -> &'static Pool<Held<Writer>> {
        &WRITERS
    }
}

impl Table for Reader {
    fn table() -> &'static Pool<Held<Reader>> {
        &READERS
    }
}

/// The `pthread_atfork` child handler: both tables forget the calls in flight (threads the
/// child does not have).
unsafe extern "C" fn after_fork_child() {
    WRITERS.after_fork_child();
    READERS.after_fork_child();
}

/// The handle number behind a C handle pointer: never dereferenced, only decoded by the table.
fn number<P>(p: *const P) -> usize {
    p as usize
}

/// Runs `f` on the end behind `p`: `EINVAL` for a null, closed or made-up handle, `EBADF` for
/// a handle of the other kind.
pub(crate) fn with<E: Table, P, R>(
    p: *const P,
    f: impl FnOnce(&E) -> io::Result<R>,
) -> io::Result<R> {
    E::table().with(number(p), |held| f(&held.end))
}

/// Puts `end` in a new handle and stores it in `*out` (`EINVAL` if `out` is null).
pub(crate) fn open<E: Table, P>(end: E, out: *mut *mut P) -> io::Result<()> {
    check_out(out)?;
    let h = new_handle(end)?;
    store(out, h);
    Ok(())
}

/// A new handle number holding `end` (`EMFILE` when the table is full).
pub(crate) fn new_handle<E: Table>(end: E) -> io::Result<usize> {
    handle::install_fork_handler(after_fork_child);
    E::table().open(Held {
        end,
        exported: Exported::new(),
    })
}

/// Stores handle number `h` in `*out`, as the C pointer type; `out` was checked non-null.
pub(crate) fn store<P>(out: *mut *mut P, h: usize) {
    debug_assert!(!out.is_null());
    // SAFETY: `out` is non-null (checked by the caller) and the caller's to write, per the
    // header. The pointer is a handle number, never dereferenced (see `handle`).
    unsafe { out.write(h as *mut P) };
}

/// `EINVAL` for a null output pointer.
pub(crate) fn check_out<P>(out: *mut *mut P) -> io::Result<()> {
    if out.is_null() {
        return Err(einval("null output pointer"));
    }
    Ok(())
}

pub(crate) fn close<E: Table, P>(p: *const P) -> io::Result<()> {
    E::table().close(number(p))
}

/// Closes handle number `h` (a handle just made, when its pair could not be).
pub(crate) fn close_number<E: Table>(h: usize) -> io::Result<()> {
    E::table().close(h)
}

pub(crate) fn fd<E: Table, P>(p: *const P) -> io::Result<c_int> {
    with::<E, P, _>(p, |e| Ok(e.as_raw_fd()))
}

pub(crate) fn set_nonblocking<E: Table, P>(p: *const P, on: c_int) -> io::Result<()> {
    with::<E, P, _>(p, |e| e.set_nonblocking(on != 0))
}

pub(crate) fn dup<E: Table, P>(p: *const P, out: *mut *mut P) -> io::Result<()> {
    check_out(out)?;
    let end = with::<E, P, _>(p, |e| Ok(e.clone()))?;
    open(end, out)
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

pub(crate) fn send<E: Table, P>(p: *const P, sock: c_int) -> io::Result<()> {
    let sock = socket(sock)?;
    with::<E, P, _>(p, |e| e.send_to(&sock))
}

pub(crate) fn recv<E: Table, P>(sock: c_int, out: *mut *mut P) -> io::Result<()> {
    check_out(out)?;
    let sock = socket(sock)?;
    open(E::recv_from(&sock)?, out)
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
pub(crate) fn to_env<E: Table, P>(p: *const P, var: *const c_char) -> io::Result<()> {
    let name = var_name(var)?;
    E::table().with(number(p), |held| {
        let fds = fds::export(&held.end)?;
        for fd in &fds {
            clear_cloexec(fd.as_fd())?;
        }
        let [m, signal] = fds.each_ref().map(AsRawFd::as_raw_fd);
        // The format `from_env` reads.
        std::env::set_var(name, format!("pagepipe:{}:{m}:{signal}", E::NAME));
        held.exported.push(fds);
        Ok(())
    })
}

pub(crate) fn from_env<E: Table, P>(var: *const c_char, out: *mut *mut P) -> io::Result<()> {
    check_out(out)?;
    let name = var_name(var)?;
    open(E::from_env(name)?, out)
}

/// Lets `fd` survive `execve(2)` (clears `FD_CLOEXEC`; fcntl(2) `F_GETFD`, `F_SETFD`).
fn clear_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl(2) with F_GETFD on a descriptor we borrow; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl(2) with F_SETFD on the same descriptor; no memory is passed.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
