//! Tokio adapters (feature `tokio`): [`AsyncReader`] and [`AsyncWriter`] implement
//! [`AsyncRead`] and [`AsyncWrite`] over a pipe end's readiness descriptor (see [`Reader`]'s
//! `AsFd`), registered with tokio's reactor through [`AsyncFd`].
//!
//! A waiting task is woken directly by the side of this process that makes the transition it
//! waits for (no system call, no trip through the reactor), and by the reactor when that side
//! is in another process. While a pipe is confined to the process that made it (no fork since,
//! no end sent, passed or received) the adapters leave its descriptors alone, so transitions
//! cost no system call; a fork, a send or a pass switches them to exact descriptors first (see
//! docs/design.md, "Readiness and async").
//!
//! Before an adapter returns `Pending` it spins a little, adaptively, watching the ring (no
//! syscall): a peer that answers within microseconds (a ping-pong, a stream whose other side
//! is running) is seen without the reactor's round trip through `epoll_wait` and a sleeping
//! core's wake-up. The budget grows while spins succeed and collapses when they fail, so an
//! idle pipe, or a peer that needs this very worker to run, costs (almost) no spinning; see
//! [`AsyncReader::set_spin`].
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

use crate::error::broken_pipe;
use crate::pipe::end::End;
use crate::pipe::reader::Reader;
use crate::pipe::writer::Writer;
use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

/// Default ceiling of an adapter's spin before `Pending` (see [`AsyncReader::set_spin`]):
/// a few wake-ups of an idle core on a VM, where a kernel pipe's round trip costs ~50 µs.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);

/// An adapter's adaptive spin: how long to watch the ring before giving up and waiting in
/// the reactor. Doubles (from a floor) after a spin that saw the ring become ready, quarters
/// after one that did not; at zero, every 16th wait still probes for the whole ceiling, so a
/// pattern that changes is found again. Atomics (all Relaxed: advisory numbers, ordering
/// nothing) only to keep the adapters `Sync`.
struct Spin {
    /// Ceiling in nanoseconds; 0 disables spinning.
    max_ns: AtomicU64,
    /// The current budget in nanoseconds, at most `max_ns`.
    budget_ns: AtomicU64,
    /// Waits since the budget reached zero.
    idle: AtomicU32,
}

/// Whether the other side of `end`'s pipe is held only by other processes: the only case
/// where the adapters spin. A peer in this process is usually a task of the same runtime, which
/// may need this very worker to run (spinning there measurably cost bandwidth and tail latency);
/// a peer process has its own scheduler, and parks in its own reactor when idle.
fn peer_elsewhere(end: &End) -> bool {
    !end.shared.holds(end.side.other())
}

/// The smallest spin, and the probe at zero budget.
const SPIN_FLOOR_NS: u64 = 2_000;

impl Spin {
    fn new(max: Option<Duration>) -> Spin {
        let s = Spin {
            max_ns: AtomicU64::new(0),
            budget_ns: AtomicU64::new(0),
            idle: AtomicU32::new(0),
        };
        s.set_max(max);
        s
    }

    fn set_max(&self, max: Option<Duration>) {
        let ns = max.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.max_ns.store(ns, Relaxed);
        self.budget_ns.store(ns, Relaxed);
        self.idle.store(0, Relaxed);
    }

    fn max(&self) -> Option<Duration> {
        match self.max_ns.load(Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Spins while `ready` is false, within the budget; whether it became true. Adapts the
    /// budget to the outcome. `eligible` (asked only when a spin is due) can veto it.
    fn until(&self, eligible: impl FnOnce() -> bool, ready: impl Fn() -> bool) -> bool {
        let max = self.max_ns.load(Relaxed);
        if max == 0 {
            return false;
        }
        let mut budget = self.budget_ns.load(Relaxed);
        if budget == 0 {
            let idle = self.idle.load(Relaxed) + 1;
            self.idle.store(idle % 16, Relaxed);
            if idle < 16 {
                return false;
            }
            // The probe spans the whole ceiling: a peer parked in its reactor answers only
            // after its own wake-up, so a short probe could never see two parked sides that
            // would both spin again find each other.
            budget = max;
        }
        if !eligible() {
            return false;
        }
        let t0 = Instant::now();
        let won = 'spin: loop {
            for _ in 0..32 {
                if ready() {
                    break 'spin true;
                }
                std::hint::spin_loop();
            }
            if t0.elapsed().as_nanos() as u64 >= budget {
                break false;
            }
        };
        let next = if won {
            (budget * 2).clamp(SPIN_FLOOR_NS, max)
        } else if budget / 4 < SPIN_FLOOR_NS {
            0
        } else {
            budget / 4
        };
        self.budget_ns.store(next, Relaxed);
        won
    }
}

/// Polls in a row that found the adapter's side held by another holder (a chunk, a resize, a
/// concurrent call) with the ring ready: how long the next wait for it is.
///
/// A holder of this process wakes the task when it releases (`End::release_waiters`); nothing
/// wakes it for a holder in another process, or for a thread of ours that leaked a chunk and
/// exited (a call that asks finds it dead and takes the side over). So the task also asks
/// again: at once the first [`HELD_YIELDS`] times (a concurrent call holds the side for
/// microseconds), then after a delay that doubles from [`HELD_FIRST`] to [`HELD_MOST`] (see
/// `timer.rs`): a side held for long costs a few hundred polls a second, not a core.
struct Held(AtomicU32);

/// Polls that find the side held and ask again at once.
const HELD_YIELDS: u32 = 4;
/// The first delay after those.
const HELD_FIRST: Duration = Duration::from_micros(50);
/// The longest delay: how late a task may see a side released in another process.
const HELD_MOST: Duration = Duration::from_millis(5);

impl Held {
    /// Arranges the task's next poll after one more that found the side held.
    fn wait(&self, cx: &Context<'_>) {
        let n = self.0.load(Relaxed);
        self.0.store(n.saturating_add(1), Relaxed);
        match n.checked_sub(HELD_YIELDS) {
            None => cx.waker().wake_by_ref(),
            Some(k) => {
                let delay = HELD_FIRST.saturating_mul(1 << k.min(16)).min(HELD_MOST);
                crate::timer::wake_after(delay, cx.waker());
            }
        }
    }

    /// The side was had, or is no longer what the task waits for: the next wait for a held
    /// side starts again at once.
    fn reset(&self) {
        if self.0.load(Relaxed) != 0 {
            self.0.store(0, Relaxed);
        }
    }
}

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

fn register<T>(
    end: T,
    pipe_end: &Arc<End>,
    interest: Interest,
) -> io::Result<AsyncFd<Registered<T>>> {
    End::adapt(pipe_end);
    // A duplicate: one process's handles of an end share one descriptor, and epoll registers
    // a descriptor once per instance; a duplicate (the same open pipe) is a registration of its
    // own, and it stays open exactly as long as `end` does. The end's signal descriptor, not
    // `as_fd`: that would make every transition pay for an exact descriptor even while the
    // pipe is confined to this process (see `End::adapt`).
    let fd = pipe_end.signal_now()?.try_clone_to_owned()?;
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
    spin: Spin,
    held: Held,
}

impl AsyncReader {
    /// Registers `reader` with the current runtime's reactor.
    ///
    /// # Errors
    /// The OS's error if the descriptor cannot be duplicated or registered; panics outside a
    /// tokio runtime with IO enabled, as [`AsyncFd::new`] does.
    ///
    /// # Examples
    /// The module's example; and to get the plain end back:
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    /// # rt.block_on(async {
    /// let (w, r) = pagepipe::pipe()?;
    /// let (w, r) = (pagepipe::tokio::AsyncWriter::new(w)?, pagepipe::tokio::AsyncReader::new(r)?);
    /// assert_eq!(r.get_ref().capacity(), w.get_ref().capacity());
    /// assert!(w.spin().is_some()); // spins up to DEFAULT_SPIN unless set_spin(None)
    /// let (_w, _r): (pagepipe::Writer, pagepipe::Reader) = (w.into_inner(), r.into_inner());
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn new(reader: Reader) -> io::Result<AsyncReader> {
        Ok(AsyncReader {
            inner: {
                let end = reader.end.clone();
                register(reader, &end, Interest::READABLE)?
            },
            spin: Spin::new(Some(DEFAULT_SPIN)),
            held: Held(AtomicU32::new(0)),
        })
    }

    /// Sets the ceiling of the adaptive spin before `Pending` ([`DEFAULT_SPIN`] unless set);
    /// `None` never spins: every wait goes through the reactor. The spin holds this task's
    /// worker thread for at most the ceiling, and only while recent spins paid off.
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    /// # rt.block_on(async {
    /// let (_w, r) = pagepipe::pipe()?;
    /// let mut r = pagepipe::tokio::AsyncReader::new(r)?;
    /// r.set_spin(None); // a pipe that is usually idle: never spin
    /// assert_eq!(r.spin(), None);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn set_spin(&mut self, max: Option<Duration>) {
        self.spin.set_max(max);
    }

    /// The spin ceiling set by [`AsyncReader::set_spin`].
    ///
    /// # Examples
    /// See [`AsyncReader::new`].
    pub fn spin(&self) -> Option<Duration> {
        self.spin.max()
    }

    /// The reader, for use outside the runtime (its registration is dropped).
    ///
    /// # Examples
    /// See [`AsyncReader::new`].
    pub fn into_inner(self) -> Reader {
        self.inner.into_inner().end
    }

    /// The reader (for `len`, `capacity` and the like).
    ///
    /// # Examples
    /// See [`AsyncReader::new`].
    pub fn get_ref(&self) -> &Reader {
        &self.inner.get_ref().end
    }
}

impl std::fmt::Debug for AsyncReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncReader")
            .field("reader", self.get_ref())
            .field("spin", &self.spin())
            .finish_non_exhaustive()
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
        let this = &*self;
        let reader = &this.inner.get_ref().end;
        // Registered with the release waiters since the last try: that try was the recheck.
        let mut rechecked = false;
        loop {
            match reader.try_read_polled(buf.initialize_unfilled()) {
                Ok(n) => {
                    this.held.reset();
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if reader.slots_queued() {
                // Data is queued but another holder has the read side (a chunk, a resize, a
                // concurrent read). One of this process wakes us when it releases; then the
                // recheck of the wakers' protocol (the try above, once more).
                if !rechecked {
                    reader.end.release_waiters().register(cx.waker());
                    rechecked = true;
                    continue;
                }
                this.held.wait(cx); // for a holder elsewhere, or one that leaked its chunk
                return Poll::Pending;
            }
            if rechecked {
                this.held.reset(); // the side is no longer what we wait for
                rechecked = false;
            }
            let eligible = || peer_elsewhere(&reader.end);
            if this.spin.until(eligible, || reader.slots_queued()) {
                continue; // data came while we watched: no trip through the reactor
            }
            // A writer of this process wakes us directly; one elsewhere through the reactor.
            reader.end.waiters().register(cx.waker());
            if reader.slots_queued() {
                continue; // the recheck of the wakers' protocol
            }
            let mut guard = ready!(this.inner.poll_read_ready(cx))?;
            if guard.ready().is_read_closed() && !reader.slots_queued() {
                // The kernel reported POLLHUP: no writer is left in any process (one that was
                // killed bumped nothing that try_read looks at), and the ring is empty: end of
                // file.
                return Poll::Ready(Ok(()));
            }
            // Clears only what this guard saw: an edge that came meanwhile stays.
            guard.clear_ready();
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
    spin: Spin,
    held: Held,
}

impl AsyncWriter {
    /// Registers `writer` with the current runtime's reactor.
    ///
    /// # Errors
    /// As [`AsyncReader::new`].
    ///
    /// # Examples
    /// See [`AsyncReader::new`].
    pub fn new(writer: Writer) -> io::Result<AsyncWriter> {
        Ok(AsyncWriter {
            inner: {
                let end = writer.end.clone();
                register(writer, &end, Interest::WRITABLE)?
            },
            spin: Spin::new(Some(DEFAULT_SPIN)),
            held: Held(AtomicU32::new(0)),
        })
    }

    /// Sets the ceiling of the adaptive spin before `Pending`; see [`AsyncReader::set_spin`].
    ///
    /// # Examples
    /// See [`AsyncReader::set_spin`].
    pub fn set_spin(&mut self, max: Option<Duration>) {
        self.spin.set_max(max);
    }

    /// The spin ceiling set by [`AsyncWriter::set_spin`].
    ///
    /// # Examples
    /// See [`AsyncReader::new`].
    pub fn spin(&self) -> Option<Duration> {
        self.spin.max()
    }

    /// The writer, for use outside the runtime (its registration is dropped).
    ///
    /// # Examples
    /// See [`AsyncReader::new`].
    pub fn into_inner(self) -> Writer {
        self.inner.into_inner().end
    }

    /// The writer (for `free`, `capacity` and the like).
    ///
    /// # Examples
    /// See [`AsyncReader::new`].
    pub fn get_ref(&self) -> &Writer {
        &self.inner.get_ref().end
    }

    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&Writer) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let writer = &self.inner.get_ref().end;
        let mut rechecked = false; // as in `poll_read`
        loop {
            // A reader killed in another process bumps no close counter, so `write` would take
            // bytes until the ring is full; the reactor knows at once (POLLERR). Only a look at
            // readiness it already has: if none is there, this registers the waker (at worst a
            // spurious wake-up later) and the write goes on.
            if let Poll::Ready(Ok(guard)) = self.inner.poll_write_ready(cx) {
                if guard.ready().is_write_closed() {
                    return Poll::Ready(Err(broken_pipe()));
                }
            }
            match write(writer) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                result => {
                    self.held.reset();
                    return Poll::Ready(result);
                }
            }
            if writer.free() > 0 {
                // Room, but another holder has the write side: as in `poll_read`.
                if !rechecked {
                    writer.end.release_waiters().register(cx.waker());
                    rechecked = true;
                    continue;
                }
                self.held.wait(cx);
                return Poll::Pending;
            }
            if rechecked {
                self.held.reset();
                rechecked = false;
            }
            let eligible = || peer_elsewhere(&writer.end);
            if self.spin.until(eligible, || writer.free() > 0) {
                continue; // room came while we watched: no trip through the reactor
            }
            // A reader of this process wakes us directly; one elsewhere through the reactor.
            writer.end.waiters().register(cx.waker());
            if writer.free() > 0 {
                continue; // the recheck of the wakers' protocol
            }
            let mut guard = ready!(self.inner.poll_write_ready(cx))?;
            if guard.ready().is_write_closed() {
                // The kernel reported POLLERR: no reader is left in any process.
                return Poll::Ready(Err(broken_pipe()));
            }
            guard.clear_ready();
        }
    }
}

impl std::fmt::Debug for AsyncWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncWriter")
            .field("writer", self.get_ref())
            .field("spin", &self.spin())
            .finish_non_exhaustive()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adapters_debug_their_end_and_spin() {
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            let (w, r) = crate::pipe().unwrap();
            let (w, mut r) = (AsyncWriter::new(w).unwrap(), AsyncReader::new(r).unwrap());
            r.set_spin(None);
            let (dw, dr) = (format!("{w:?}"), format!("{r:?}"));
            assert!(dw.starts_with("AsyncWriter { writer: Writer"), "{dw}");
            assert!(dr.contains("spin: None"), "{dr}");
        });
    }

    #[test]
    fn the_spin_budget_grows_on_success_collapses_on_failure_and_probes_at_zero() {
        let s = Spin::new(Some(Duration::from_micros(100)));
        assert!(s.until(|| true, || true));
        assert_eq!(s.budget_ns.load(Relaxed), 100_000, "capped at the ceiling");
        assert!(!s.until(|| true, || false));
        assert_eq!(s.budget_ns.load(Relaxed), 25_000);
        assert!(!s.until(|| true, || false));
        assert_eq!(s.budget_ns.load(Relaxed), 6_250);
        assert!(!s.until(|| true, || false));
        assert_eq!(s.budget_ns.load(Relaxed), 0, "below the floor: off");
        // Off: 15 waits do not even look, the 16th probes (for the whole ceiling).
        let looked = std::sync::atomic::AtomicU32::new(0);
        let probe = || {
            looked.fetch_add(1, Relaxed);
            true
        };
        for _ in 0..15 {
            assert!(!s.until(|| true, probe));
        }
        assert_eq!(looked.load(Relaxed), 0);
        assert!(s.until(|| true, probe));
        assert_eq!(
            s.budget_ns.load(Relaxed),
            100_000,
            "a won probe restores the ceiling"
        );
        s.set_max(None);
        assert!(!s.until(|| true, || true), "no ceiling: never spins");
        assert_eq!(s.max(), None);
    }

    #[test]
    fn a_confined_pipe_leaves_its_descriptors_alone_until_an_end_leaves() {
        use ::tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _no_fork = crate::fork::tests_that_fork(); // a fork would end the confinement
        let rt = ::tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_io()
            .build()
            .unwrap();
        let (w, r) = crate::pipe().unwrap();
        let shared = w.end.shared.clone();
        let polled = || shared.header().polled.each_ref().map(|p| p.load(Relaxed));
        rt.block_on(async {
            let (mut w, mut r) = (AsyncWriter::new(w).unwrap(), AsyncReader::new(r).unwrap());
            let echo = ::tokio::spawn(async move {
                let mut b = [0u8; 1];
                for _ in 0..1000 {
                    r.read_exact(&mut b).await.unwrap();
                }
                r
            });
            for _ in 0..1000 {
                w.write_all(b"x").await.unwrap();
            }
            let r = echo.await.unwrap();
            assert_eq!(polled(), [0, 0], "no descriptor kept exact while confined");
            assert!(shared.confined());
            crate::pipe::end::expose(&shared).unwrap(); // as a send does
            assert!(!shared.confined());
            assert_eq!(polled(), [1, 1], "both adapted ends now exact");
            drop((w, r));
        });
    }
}
