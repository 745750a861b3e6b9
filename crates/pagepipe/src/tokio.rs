//! Tokio adapters (feature `tokio`): [`AsyncReader`] and [`AsyncWriter`] implement
//! [`AsyncRead`] and [`AsyncWrite`] over a pipe end's readiness descriptor (see [`Reader`]'s
//! `AsFd`), registered with tokio's reactor through [`AsyncFd`].
//!
//! They never change an end's shared non-blocking mode (other holders, in this process or
//! another, may block on the same end): they read and write with [`Reader::try_read`] and
//! [`Writer::try_write`], and wait for readiness in the reactor. Each adapter registers its own
//! duplicate of the end's descriptor, so clones of one end can each have an adapter.
//!
//! ```
//! use pagepipe::tokio::{AsyncReader, AsyncWriter};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # fn main() -> std::io::Result<()> {
//! let rt = tokio::runtime::Builder::new_multi_thread()
//!     .worker_threads(2)
//!     .enable_io()
//!     .build()?;
//! rt.block_on(async {
//!     let (w, r) = pagepipe::pipe()?;
//!     let (mut w, mut r) = (AsyncWriter::new(w)?, AsyncReader::new(r)?);
//!     let producer = tokio::spawn(async move {
//!         w.write_all(b"hello from a task").await
//!         // dropping `w` closes the last writer: the reader sees end of file
//!     });
//!     let mut got = String::new();
//!     r.read_to_string(&mut got).await?;
//!     producer.await.unwrap()?;
//!     assert_eq!(got, "hello from a task");
//!     Ok(())
//! })
//! # }
//! ```

use crate::{Reader, Writer};
use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// An end and the duplicate of its descriptor that the reactor watches.
struct Registered<T> {
    end: T,
    fd: OwnedFd,
}

impl<T> AsRawFd for Registered<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn register<T: AsFd>(end: T, interest: Interest) -> io::Result<AsyncFd<Registered<T>>> {
    // A duplicate: one process's handles of an end share one descriptor, and epoll registers
    // a descriptor once per instance; a duplicate (the same open pipe) is a registration of its
    // own, and it stays open exactly as long as `end` does.
    let fd = end.as_fd().try_clone_to_owned()?;
    // SAFETY: `Registered::as_raw_fd` always returns `fd`, which the `Registered` owns: it is
    // open and refers to the same pipe until the `Registered` is dropped, which happens only
    // after `AsyncFd` deregistered it (on drop, or in `into_inner` before handing it back).
    let registered = unsafe { AsyncFd::register_with_interest(Registered { end, fd }, interest) };
    Ok(registered?)
}

/// A [`Reader`] as a tokio [`AsyncRead`].
///
/// End of file (no writer left in any process, including one that was killed) reads as
/// `Ok(0)` once the queued data is read. Must be created inside a tokio runtime with IO
/// enabled.
pub struct AsyncReader {
    inner: AsyncFd<Registered<Reader>>,
}

impl AsyncReader {
    /// Registers `reader` with the current runtime's reactor.
    ///
    /// # Errors
    /// The OS's error if the descriptor cannot be duplicated or registered; panics outside a
    /// tokio runtime with IO enabled, as [`AsyncFd::new`] does.
    pub fn new(reader: Reader) -> io::Result<AsyncReader> {
        Ok(AsyncReader {
            inner: register(reader, Interest::READABLE)?,
        })
    }

    /// The reader, for use outside the runtime (its registration is dropped).
    pub fn into_inner(self) -> Reader {
        self.inner.into_inner().end
    }

    /// The reader (for `len`, `capacity` and the like).
    pub fn get_ref(&self) -> &Reader {
        &self.inner.get_ref().end
    }
}

impl AsyncRead for AsyncReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            let mut guard = ready!(self.inner.poll_read_ready(cx))?;
            let reader = &guard.get_inner().end;
            match reader.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !reader.is_empty() {
                        // Data is queued but another holder has the read side (a chunk, a
                        // resize, a concurrent read): the descriptor stays readable, so no
                        // edge will come; try again after other tasks ran.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    if guard.ready().is_read_closed() {
                        // The kernel reported POLLHUP: no writer is left in any process (one
                        // that was killed bumped nothing that try_read looks at), and the ring
                        // is empty: end of file.
                        return Poll::Ready(Ok(()));
                    }
                    // Clears only what this guard saw: an edge that came meanwhile stays.
                    guard.clear_ready();
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// A [`Writer`] as a tokio [`AsyncWrite`].
///
/// Writes of up to [`crate::PIPE_BUF`] bytes (also vectored ones, in all) are atomic, as with
/// [`Writer::try_write_vectored`]. With no reader left in any process, writes fail with
/// [`io::ErrorKind::BrokenPipe`]. `poll_flush` and `poll_shutdown` have nothing to do: the
/// reader sees end of file when the last writer is dropped.
pub struct AsyncWriter {
    inner: AsyncFd<Registered<Writer>>,
}

impl AsyncWriter {
    /// Registers `writer` with the current runtime's reactor.
    ///
    /// # Errors
    /// As [`AsyncReader::new`].
    pub fn new(writer: Writer) -> io::Result<AsyncWriter> {
        Ok(AsyncWriter {
            inner: register(writer, Interest::WRITABLE)?,
        })
    }

    /// The writer, for use outside the runtime (its registration is dropped).
    pub fn into_inner(self) -> Writer {
        self.inner.into_inner().end
    }

    /// The writer (for `free`, `capacity` and the like).
    pub fn get_ref(&self) -> &Writer {
        &self.inner.get_ref().end
    }

    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&Writer) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.inner.poll_write_ready(cx))?;
            if guard.ready().is_write_closed() {
                // The kernel reported POLLERR: no reader is left in any process.
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "pipe has no reader left",
                )));
            }
            let writer = &guard.get_inner().end;
            match write(writer) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if writer.free() > 0 {
                        // Room, but another holder has the write side: the descriptor stays
                        // writable, so no edge will come; try again after other tasks ran.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    guard.clear_ready();
                }
                result => return Poll::Ready(result),
            }
        }
    }
}

impl AsyncWrite for AsyncWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.poll_write_with(cx, |w| w.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        self.poll_write_with(cx, |w| w.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
