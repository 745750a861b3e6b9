//! Readiness: `poll(2)` and `eventfd(2)`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `poll(2)` of one descriptor with a zero timeout: its `revents`.
pub fn poll_now(fd: BorrowedFd<'_>, events: libc::c_short) -> libc::c_short {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is a live pollfd for the call.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        if rc >= 0 {
            return p.revents;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return 0;
        }
    }
}

/// A non-blocking eventfd (`eventfd(2)`), used to wake a thread sleeping in [`poll_two`].
///
/// # Errors
/// The OS's error from `eventfd(2)`.
pub fn eventfd() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// An eventfd that polls `POLLIN` and `POLLOUT` for good (`eventfd(2)`): semaphore mode with
/// its counter at 2^63, so a read takes 1 from it and a write of less than 2^63 - 1 fits; no
/// caller can drain it or fill it by accident.
///
/// # Errors
/// The OS's error from `eventfd(2)` or from raising the counter.
pub fn always_ready() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let flags = libc::EFD_CLOEXEC | libc::EFD_NONBLOCK | libc::EFD_SEMAPHORE;
    // SAFETY: eventfd has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let count: u64 = 1 << 63;
    // SAFETY: writes 8 bytes from a live u64 to the descriptor we own.
    if unsafe { libc::write(fd.as_raw_fd(), (&count as *const u64).cast(), 8) } != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Adds 1 to an eventfd's counter (`eventfd(2)`), waking pollers.
pub fn eventfd_signal(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to a descriptor we borrow.
    let rc = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    // Only fails when the counter is about to overflow: a wakeup is pending anyway.
    let _ = rc;
}

/// Waits (`poll(2)`) until `pri` reports `POLLPRI` (or an error) or `wake` becomes readable, at
/// most `timeout`. Returns `(revents of pri, wake fired)`; an interrupted wait returns `(0, false)`.
pub fn poll_two(
    pri: std::os::fd::BorrowedFd<'_>,
    wake: std::os::fd::BorrowedFd<'_>,
    timeout: std::time::Duration,
) -> io::Result<(libc::c_short, bool)> {
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: pri.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a live array of two pollfd structures for the duration of the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok((0, false))
        } else {
            Err(e)
        };
    }
    Ok((fds[0].revents, fds[1].revents != 0))
}

/// A new epoll instance (`epoll_create1(2)`, close-on-exec).
///
/// # Errors
/// The OS's error from `epoll_create1(2)`.
pub fn epoll_create() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: epoll_create1 has no memory-safety preconditions.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Adds `fd` to the epoll instance `ep` (`epoll_ctl(2)`, `EPOLL_CTL_ADD`), reporting `events`
/// (level-triggered; `EPOLLHUP` and `EPOLLERR` are always reported) with `key` as its data.
///
/// # Errors
/// The OS's error from `epoll_ctl(2)` (`EEXIST` if `fd` is registered already).
pub fn epoll_add(ep: BorrowedFd<'_>, fd: BorrowedFd<'_>, events: u32, key: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: key };
    // SAFETY: `ev` is a live epoll_event for the call; both descriptors are borrowed.
    let rc =
        unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes `fd` from the epoll instance `ep` (`epoll_ctl(2)`, `EPOLL_CTL_DEL`).
///
/// # Errors
/// The OS's error from `epoll_ctl(2)` (`ENOENT` if `fd` is not registered).
pub fn epoll_del(ep: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: `ev` is a live epoll_event (ignored by DEL since Linux 2.6.9); both descriptors
    // are borrowed.
    let rc =
        unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_DEL, fd.as_raw_fd(), &mut ev) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits (`epoll_wait(2)`) for events on `ep`, at most `timeout` (`None`: forever), and returns
/// them as `(key, events)` in `out`'s first entries; an interrupted wait returns none.
pub fn epoll_wait(
    ep: BorrowedFd<'_>,
    out: &mut [libc::epoll_event],
    timeout: Option<std::time::Duration>,
) -> io::Result<usize> {
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
    let max = out.len().min(i32::MAX as usize) as libc::c_int;
    // SAFETY: `out` is a live, writable array of `max` epoll_event entries.
    let rc = unsafe { libc::epoll_wait(ep.as_raw_fd(), out.as_mut_ptr(), max, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(rc as usize)
}
