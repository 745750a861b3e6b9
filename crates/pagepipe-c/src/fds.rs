//! An end's descriptors out of a [`Writer`] or [`Reader`] and back in: what the C API's
//! `pp_*_to_env` hands to a program it execs, and what pagepipe-py pickles for
//! `multiprocessing`.
//!
//! An end travels as three descriptors (its region's memory file and its two signal
//! descriptors, see `pagepipe::Writer::send_to`). pagepipe exposes them only by sending the end
//! over a Unix socket, so [`export`] sends it over a socket pair to this process and keeps what
//! arrives, and [`import`] sends them back in the same message and receives the end with
//! `recv_from`, which validates them. (A direct accessor in pagepipe would save the socket
//! pair; the message format is pagepipe's own `send_to` format.)

use pagepipe::{Reader, Writer};
use pagepipe_sys as sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// The message `send_to` sends with an end's descriptors: a tag, then the side (0 writer,
/// 1 reader).
const TAG: &[u8; 6] = b"PPEND1";

/// What the C API and pagepipe-py need of either end.
pub trait PipeEnd: Clone + AsRawFd + Send + Sync + Sized + 'static {
    /// `"writer"` or `"reader"`, as in the `from_env` format.
    const NAME: &'static str;
    /// The side byte of the `send_to` message.
    const SIDE: u8;
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
}

macro_rules! pipe_end {
    ($end:ident, $name:literal, $side:literal) => {
        impl PipeEnd for $end {
            const NAME: &'static str = $name;
            const SIDE: u8 = $side;
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
        }
    };
}

pipe_end!(Writer, "writer", 0);
pipe_end!(Reader, "reader", 1);

/// New descriptors of `end` (memory file, full pipe, readable pipe), close-on-exec. While they
/// are open they hold the end as a clone does: the other side sees it closed only once they
/// are closed too.
///
/// # Errors
/// The OS's error if the socket pair cannot be made or the descriptors not passed.
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
pub fn export<E: PipeEnd>(end: &E) -> io::Result<[OwnedFd; 3]> {
    let (a, b) = UnixStream::pair()?;
    end.send_to(&a)?;
    let mut msg = [0u8; 16];
    let (n, fds) = sys::net::recv_fds(b.as_fd(), &mut msg, 3)?;
    if n != 7 || &msg[..6] != TAG || msg[6] != E::SIDE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "pagepipe sent an end in a format this pagepipe-c does not know",
        ));
    }
    <[OwnedFd; 3]>::try_from(fds).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "pagepipe sent an end without its three descriptors",
        )
    })
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
pub fn import<E: PipeEnd>(fds: [OwnedFd; 3]) -> io::Result<E> {
    let (a, b) = UnixStream::pair()?;
    let mut msg = [0u8; 7];
    msg[..6].copy_from_slice(TAG);
    msg[6] = E::SIDE;
    sys::net::send_fds(a.as_fd(), &msg, &fds.each_ref().map(AsRawFd::as_raw_fd))?;
    drop(fds); // the message holds them now
    E::recv_from(&b)
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
