//! Readiness: a pipe end as a descriptor that `poll(2)`, `epoll(7)`, mio and tokio understand.

use crate::pipe::notify::NotificationReader;
use crate::pipe::reader::Reader;
use crate::pipe::writer::Writer;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

/// The reader's descriptor polls like a kernel pipe's read end: `POLLIN` while data is queued,
/// `POLLHUP` once no writer is left in any process (also when the last one was killed: the
/// kernel reports it at once). Level-triggered results match the kernel pipe's after every
/// operation; edge-triggered users (mio, tokio) get an edge whenever data arrives in an empty
/// pipe.
///
/// The first call makes the pipe keep the descriptor exact from then on, in every process: a
/// write that makes the pipe non-empty (or full), or a read that empties it (or frees room),
/// then costs one more system call. A pipe nobody polls makes none.
///
/// **The descriptor signals readiness; it does not carry the pipe's data.** Reading from it or
/// writing to it desynchronizes it, and handing it to another program (as its stdin, say)
/// gives that program wake-up bytes, not your stream. To give a child the pipe itself use
/// [`Reader::pass_to`]; a program that can only take a plain descriptor needs a kernel pipe.
///
/// With mio, nothing more than the raw descriptor is needed:
///
/// ```
/// use mio::{unix::SourceFd, Events, Interest, Poll, Token};
/// use std::io::{Read, Write};
/// use std::os::fd::AsRawFd;
///
/// let (mut w, mut r) = pagepipe::pipe()?;
/// r.set_nonblocking(true)?;
/// let mut poll = Poll::new()?;
/// poll.registry()
///     .register(&mut SourceFd(&r.as_raw_fd()), Token(0), Interest::READABLE)?;
/// let writer = std::thread::spawn(move || w.write_all(b"ready"));
/// let mut events = Events::with_capacity(4);
/// let mut got = Vec::new();
/// while got.len() < 5 {
///     poll.poll(&mut events, None)?;
///     let mut buf = [0u8; 16];
///     loop {
///         match r.read(&mut buf) {
///             Ok(0) => break, // end of file: the writer is gone
///             Ok(n) => got.extend_from_slice(&buf[..n]),
///             Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
///             Err(e) => return Err(e),
///         }
///     }
/// }
/// writer.join().unwrap()?;
/// assert_eq!(got, b"ready");
/// # Ok::<(), std::io::Error>(())
/// ```
impl AsFd for Reader {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.end.poll_fd()
    }
}

/// The writer's descriptor polls like a kernel pipe's write end: `POLLOUT` while the ring has a
/// free slot, `POLLERR` once no reader is left in any process. See [`Reader`'s](Reader)
/// `AsFd` for what the first call starts and costs, and why the descriptor is no substitute for
/// the pipe (it carries readiness, not data).
impl AsFd for Writer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.end.poll_fd()
    }
}

impl AsRawFd for Reader {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl AsRawFd for Writer {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// A notification reader's descriptor polls as a [`Reader`]'s does: `POLLIN` while a record is
/// queued, `POLLHUP` once no notifier is left.
impl AsFd for NotificationReader {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.end.poll_fd()
    }
}

impl AsRawFd for NotificationReader {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
