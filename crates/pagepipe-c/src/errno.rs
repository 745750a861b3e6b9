//! From Rust results to C's convention: a value, or a failure value with `errno` set; and the
//! guard that keeps a panic from crossing into C.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(code: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = code };
}

/// The errno for `e`: its OS code if it has one, else the code for its kind.
pub(crate) fn errno_of(e: &io::Error) -> i32 {
    use io::ErrorKind as K;
    if let Some(code) = e.raw_os_error() {
        return code;
    }
    match e.kind() {
        K::WouldBlock => libc::EAGAIN,
        K::BrokenPipe => libc::EPIPE,
        K::InvalidInput => libc::EINVAL,
        K::InvalidData => libc::EBADMSG,
        K::TimedOut => libc::ETIMEDOUT,
        K::Interrupted => libc::EINTR,
        K::NotFound => libc::ENOENT,
        K::AlreadyExists => libc::EEXIST,
        K::UnexpectedEof => libc::ECONNRESET,
        K::Unsupported => libc::ENOTSUP,
        K::OutOfMemory => libc::ENOMEM,
        K::ResourceBusy => libc::EBUSY,
        K::Deadlock => libc::EDEADLK,
        _ => libc::EIO,
    }
}

/// `EINVAL` as an io::Error, with what was wrong.
pub(crate) fn einval(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

/// Runs `f`: its value, or `fail` with `errno` set from its error. A panic inside is caught
/// (its message goes to stderr through the panic hook) and reported as `EIO`.
pub(crate) fn guard<R>(fail: R, f: impl FnOnce() -> io::Result<R>) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(errno_of(&e));
            fail
        }
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

/// [`guard`] for functions that return 0 or -1.
pub(crate) fn guard0(f: impl FnOnce() -> io::Result<()>) -> libc::c_int {
    guard(-1, || f().map(|()| 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_eio() {
        let r: i32 = guard(-1, || panic!("inside"));
        assert_eq!(r, -1);
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn kinds_map_to_pipe_errnos() {
        assert_eq!(errno_of(&io::ErrorKind::WouldBlock.into()), libc::EAGAIN);
        assert_eq!(errno_of(&io::ErrorKind::BrokenPipe.into()), libc::EPIPE);
        assert_eq!(errno_of(&einval("x")), libc::EINVAL);
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EBADF)),
            libc::EBADF
        );
    }
}
