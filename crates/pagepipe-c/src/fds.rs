//! An end's descriptors out of a [`Writer`] or [`Reader`] and back in: what the C API's
//! `pp_*_to_env` hands to a program it execs (pagepipe-py calls pagepipe's `to_fds` and
//! `from_fds` itself).
//!
//! An end travels as two descriptors (its region's memory file, through a description of their
//! own, and its descriptor of the signal pipe): pagepipe's `to_fds` and `from_fds`.

use pagepipe::{Reader, Writer};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// What the C API needs of either end.
pub trait PipeEnd: Clone + AsRawFd + Send + Sync + Sized + 'static {
    /// `"writer"` or `"reader"`, as in the `from_env` format.
    const NAME: &'static str;
    /// `Writer::set_nonblocking` or `Reader::set_nonblocking`.
    ///
    /// # Errors
    /// Never, as pagepipe's.
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()>;
    /// Whether calls on the end are non-blocking.
    fn is_nonblocking(&self) -> bool;
    /// `send_to`.
    ///
    /// # Errors
    /// The socket's error.
    fn send_to(&self, sock: &UnixStream) -> io::Result<()>;
    /// `recv_from`.
    ///
    /// # Errors
    /// As `Writer::recv_from`.
    fn recv_from(sock: &UnixStream) -> io::Result<Self>;
    /// `from_env`.
    ///
    /// # Errors
    /// As `Writer::from_env`.
    fn from_env(var: &str) -> io::Result<Self>;
    /// `to_fds`.
    ///
    /// # Errors
    /// As `Writer::to_fds`.
    fn to_fds(&self) -> io::Result<[OwnedFd; 2]>;
    /// `from_fds`.
    ///
    /// # Errors
    /// As `Writer::from_fds`.
    fn from_fds(fds: [OwnedFd; 2]) -> io::Result<Self>;
}

macro_rules! pipe_end {
    ($end:ident, $name:literal) => {
        impl PipeEnd for $end {
            const NAME: &'static str = $name;
            fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
                $end::set_nonblocking(self, nonblocking)
            }
            fn is_nonblocking(&self) -> bool {
                $end::is_nonblocking(self)
            }
            fn send_to(&self, sock: &UnixStream) -> io::Result<()> {
                $end::send_to(self, sock)
            }
            fn recv_from(sock: &UnixStream) -> io::Result<Self> {
                $end::recv_from(sock)
            }
            fn from_env(var: &str) -> io::Result<Self> {
                $end::from_env(var)
            }
            fn to_fds(&self) -> io::Result<[OwnedFd; 2]> {
                $end::to_fds(self)
            }
            fn from_fds(fds: [OwnedFd; 2]) -> io::Result<Self> {
                $end::from_fds(fds)
            }
        }
    };
}

pipe_end!(Writer, "writer");
pipe_end!(Reader, "reader");

/// New descriptors of `end` (memory file, signal pipe), close-on-exec. While they
/// are open they hold the end as a clone does: the other side sees it closed only once they
/// are closed too.
///
/// # Errors
/// The OS's error if the descriptors cannot be made (see `pagepipe::Writer::to_fds`).
///
/// # Examples
/// ```
/// let (w, mut r) = pagepipe::pipe()?;
/// let fds = pagepipe_c::fds::export(&w)?;
/// drop(w);
/// let w2: pagepipe::Writer = pagepipe_c::fds::import(fds)?;
/// std::io::Write::write_all(&mut &w2, b"back")?;
/// drop(w2);
/// let mut s = String::new();
/// std::io::Read::read_to_string(&mut r, &mut s)?;
/// assert_eq!(s, "back");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn export<E: PipeEnd>(end: &E) -> io::Result<[OwnedFd; 2]> {
    end.to_fds()
}

/// The end whose descriptors [`export`] returned (in this process or, inherited or passed,
/// in another one); consumes them.
///
/// # Errors
/// [`io::ErrorKind::InvalidData`] if they are not the descriptors of a pagepipe end of this
/// kind; the OS's error.
///
/// # Examples
/// See [`export`].
pub fn import<E: PipeEnd>(fds: [OwnedFd; 2]) -> io::Result<E> {
    E::from_fds(fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_does_not_import_as_a_writer() {
        let (_w, r) = pagepipe::pipe().unwrap();
        let fds = export(&r).unwrap();
        let e = import::<Writer>(fds).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
