//! `pagepipe.Writer`: the write end.

use crate::buffer::Buffer;
use crate::error::to_py;
use crate::held::{from_fds, Held};
use crate::message;
use crate::packets::{self, Put};
use crate::pickle;
use crate::wait::{deadline, duration, interruptible_until, DefaultTimeout};
use pagepipe::Writer;
use pyo3::prelude::*;
use std::os::fd::RawFd;
use std::time::Duration;

/// The most messages, and bytes (once reached), the feeder writes holding the write side once.
const BATCH: usize = 256;
const BATCH_BYTES: usize = 1 << 20;

/// The write end of a pagepipe. `write(b)` blocks until all of `b` is in the pipe (a
/// non-blocking end writes what fits); writes of at most `PIPE_BUF` bytes are atomic.
/// `BrokenPipeError` once no reader is left in any process; `ValueError` once closed.
#[pyclass(module = "pagepipe._native", name = "Writer", frozen)]
pub(crate) struct PyWriter {
    held: Held<Writer>,
    /// `settimeout`'s default for this object's calls.
    timeout: DefaultTimeout,
}

impl PyWriter {
    pub(crate) fn new(w: Writer) -> PyWriter {
        PyWriter {
            held: Held::new(w),
            timeout: DefaultTimeout::default(),
        }
    }

    /// The end, for the queue's calls.
    pub(crate) fn end(&self) -> PyResult<std::sync::Arc<Writer>> {
        self.held.end()
    }
}

/// One `write`: all of `bytes` on a blocking end (the count so far if an error cuts it
/// short, as `write(2)` returns), what fits on a non-blocking one. Waits in slices that
/// Ctrl-C can end (see `wait::interruptible`): an exception a signal handler raises is
/// raised whatever was written before it, as `socket.sendall` does. `timeout` bounds the
/// whole call (its deadline is set once, not after each part placed), as `socket.sendall`'s.
fn write(py: Python<'_>, w: &Writer, bytes: &[u8], timeout: Option<Duration>) -> PyResult<usize> {
    let until = deadline(timeout);
    let mut done = 0;
    loop {
        match interruptible_until(py, until, |limit| w.write_deadline(&bytes[done..], limit))? {
            Ok(n) => done += n,
            Err(_) if done > 0 => return Ok(done),
            Err(e) => return Err(to_py(e)),
        }
        if done == bytes.len() || w.is_nonblocking() {
            return Ok(done);
        }
        // Progress, but not all of it: a slow reader must not keep Ctrl-C waiting for the
        // rest (a slice that placed something returns its count, not a timeout).
        py.check_signals()?;
    }
}

#[pymethods]
impl PyWriter {
    /// Writes the bytes of any buffer-protocol object `b`; returns the count. The GIL is
    /// released while it copies and waits. `timeout` (seconds) bounds the whole call, as
    /// `socket.sendall`'s does (not each part placed): `TimeoutError` if it passes with
    /// nothing written, else the count written so far;
    /// without it, the object's `settimeout` applies, else the call waits as the end's mode
    /// says.
    ///
    /// >>> w, r = pagepipe.pipe(4096)
    /// >>> w.write(bytes(10000), timeout=0.01)
    /// 4096
    #[pyo3(signature = (b, *, timeout = None))]
    fn write(&self, py: Python<'_>, b: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<usize> {
        let end = self.held.end()?;
        let timeout = self.timeout.for_call(timeout, || end.write_timeout())?;
        let buf = Buffer::get(b, false)?;
        let raw = buf.raw();
        // SAFETY: `buf` stays held (and its memory pinned) until after this returns.
        let bytes = unsafe { raw.bytes() };
        let result = write(py, &end, bytes, timeout);
        drop(buf);
        result
    }

    /// Closes this object's hold on the write end (readers see end of file once no process
    /// holds one). Closing a closed end does nothing.
    fn close(&self) {
        self.held.close();
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.held.is_closed()
    }

    /// A descriptor for `select`, `selectors` and asyncio's `add_writer`: writable when a
    /// write would not block. Owned by the end: do not close, read or write it.
    fn fileno(&self) -> PyResult<RawFd> {
        self.held.fileno()
    }

    /// Blocking (True) or non-blocking mode, for every holder of this end in every process.
    fn set_blocking(&self, blocking: bool) -> PyResult<()> {
        self.held.set_blocking(blocking)
    }

    /// Whether writes block.
    fn get_blocking(&self) -> PyResult<bool> {
        self.held.get_blocking()
    }

    /// The pipe's capacity in bytes.
    #[getter]
    fn capacity(&self) -> PyResult<usize> {
        Ok(self.held.end()?.capacity())
    }

    /// The default timeout of this object's writes, in seconds (`None`: wait as the end's
    /// mode says), as `socket.settimeout` sets one per socket object.
    ///
    /// >>> w, r = pagepipe.pipe()
    /// >>> w.settimeout(1.5); w.gettimeout()
    /// 1.5
    fn settimeout(&self, timeout: Option<f64>) -> PyResult<()> {
        self.timeout.set(duration(timeout)?);
        Ok(())
    }

    /// The default timeout set by `settimeout`.
    fn gettimeout(&self) -> Option<f64> {
        self.timeout.get().map(|d| d.as_secs_f64())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.held.close();
        false
    }

    fn __repr__(&self) -> String {
        match self.held.end() {
            Ok(w) => format!("<pagepipe.Writer capacity={}>", w.capacity()),
            Err(_) => "<pagepipe.Writer closed>".to_string(),
        }
    }

    /// New descriptors of this end for another process, owned by the caller (see
    /// `pagepipe.__init__`).
    fn _export_fds(&self) -> PyResult<(RawFd, RawFd)> {
        self.held.export_fds()
    }

    /// The end whose descriptors `_export_fds` gave; takes them.
    #[staticmethod]
    fn _from_fds(m: RawFd, signal: RawFd) -> PyResult<PyWriter> {
        Ok(PyWriter::new(from_fds(m, signal)?))
    }

    /// One whole message, its length first (`pagepipe.Connection.send_bytes`).
    fn _send_message(&self, py: Python<'_>, b: &Bound<'_, PyAny>) -> PyResult<()> {
        let end = self.held.end()?;
        let buf = Buffer::get(b, false)?;
        let raw = buf.raw();
        // SAFETY: `buf` stays held (and its memory pinned) until after this returns.
        let result = message::send(py, &end, unsafe { raw.bytes() });
        drop(buf);
        result
    }

    /// `pagepipe.Queue.put_many`'s one native call: pickles each of `objs` (as `put_obj`);
    /// then, if `direct`, writes what fits now of what it pickled, in order, holding the
    /// queue's lock pipe's write side once. Returns how many were written, every pickled
    /// message (those written first: the rest are for the feeder), and `(index, exception)`
    /// for each object that an `Exception` stopped pickling; any other exception
    /// (`KeyboardInterrupt`) is raised, and nothing is written.
    #[allow(clippy::type_complexity)]
    fn _put_objs<'py>(
        &self,
        py: Python<'py>,
        lock: PyRef<'_, PyWriter>,
        objs: Vec<Bound<'py, PyAny>>,
        direct: bool,
    ) -> PyResult<(usize, Vec<Bound<'py, PyAny>>, Vec<(usize, PyErr)>)> {
        let mut pickled = Vec::with_capacity(objs.len());
        let mut errors = Vec::new();
        for (i, obj) in objs.iter().enumerate() {
            match pickle::dumps(py, obj) {
                Ok(p) => pickled.push(p),
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyException>(py) => {
                    errors.push((i, e));
                }
                Err(e) => return Err(e),
            }
        }
        if !direct || pickled.is_empty() {
            return Ok((0, pickled, errors));
        }
        let (Ok(data), Ok(lock)) = (self.held.end(), lock.end()) else {
            return Ok((0, pickled, errors));
        };
        let bufs = pickled
            .iter()
            .map(message_buffers)
            .collect::<PyResult<Vec<_>>>()?;
        let raws = raws_of(&bufs);
        let ids: Vec<u64> = raws.iter().map(|_| pickle::message_id()).collect();
        let (done, _err) = py.detach(move || {
            // SAFETY: every buffer in `bufs` stays held (its memory pinned) until after this
            // returns.
            let parts = unsafe { slices_of(&raws) };
            let messages = parts.iter().map(Vec::as_slice).zip(ids);
            packets::put_many(&data, &lock, messages, Put::Now)
        });
        drop(bufs);
        // An error: the feeder meets it again with the rest, and reports it.
        Ok((done, pickled, errors))
    }

    /// `pagepipe.Queue`'s feeder and `put_many`: writes `messages` (bytes-like objects) in
    /// order, each with a new message id, holding the queue's lock pipe's write side once for
    /// all of them; with `wait`, as long as it takes, without, only what fits now. Returns how
    /// many went in whole; an error that stops it is raised if none did (else the count is
    /// returned, and the next call meets the error).
    fn _put_messages(
        &self,
        py: Python<'_>,
        lock: PyRef<'_, PyWriter>,
        messages: Vec<Bound<'_, PyAny>>,
        wait: bool,
    ) -> PyResult<usize> {
        let ids: Vec<u64> = messages.iter().map(|_| pickle::message_id()).collect();
        let (data, lock) = (self.held.end()?, lock.end()?);
        let bufs = messages
            .iter()
            .map(message_buffers)
            .collect::<PyResult<Vec<_>>>()?;
        let raws = raws_of(&bufs);
        let how = if wait { Put::Wait } else { Put::Now };
        let (done, err) = py.detach(move || {
            // SAFETY: every buffer in `bufs` stays held (its memory pinned) until after this
            // returns.
            let parts = unsafe { slices_of(&raws) };
            let mut messages = parts.iter().map(Vec::as_slice).zip(ids).peekable();
            if !wait {
                return packets::put_many(&data, &lock, messages, how);
            }
            // The feeder hands over all it holds (one trip for the GIL per backlog, not per
            // batch); the write side is taken once per BATCH messages or BATCH_BYTES, so
            // other processes' writers get their turn between.
            let mut done = 0;
            while messages.peek().is_some() {
                let mut bytes = 0;
                let mut n = 0;
                let batch = std::iter::from_fn(|| {
                    if n >= BATCH || bytes >= BATCH_BYTES {
                        return None;
                    }
                    let m = messages.next()?;
                    n += 1;
                    bytes += m.0.iter().map(|p| p.len()).sum::<usize>();
                    Some(m)
                });
                let (d, err) = packets::put_many(&data, &lock, batch, how);
                done += d;
                if err.is_some() {
                    return (done, err);
                }
            }
            (done, None)
        });
        drop(bufs);
        match err {
            Some(e) if done == 0 => Err(to_py(e)),
            _ => Ok(done),
        }
    }
}

impl PyWriter {
    /// `pagepipe._native._QueueOps.put`'s write: pickles `obj` (as `ForkingPickler.dumps`; its
    /// errors are raised), then, if `direct` (nothing of this process's is waiting for the
    /// feeder thread), writes it if the write side is free within `packets::LOCK_TRY` and
    /// all of it fits now (`packets::Put::Now`), with a new message id. `None` once it is in the pipe; else the pickled message, for the feeder (also when
    /// the write failed: the feeder meets the error again and reports it, as
    /// multiprocessing's feeder reports what it cannot write).
    pub(crate) fn put_obj<'py>(
        &self,
        py: Python<'py>,
        lock: &PyWriter,
        obj: &Bound<'py, PyAny>,
        direct: bool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let pickled = pickle::dumps(py, obj)?;
        if !direct {
            return Ok(Some(pickled));
        }
        let (Ok(data), Ok(lock)) = (self.held.end(), lock.end()) else {
            return Ok(Some(pickled));
        };
        let id = pickle::message_id();
        let done = if pickled.is_exact_instance_of::<pyo3::types::PyBytes>() {
            // The usual small message: one buffer, nothing allocated.
            let buf = Buffer::get(&pickled, false)?;
            let raw = buf.raw();
            let done = py.detach(move || {
                // SAFETY: `buf` stays held (its memory pinned) until after this returns.
                let bytes = unsafe { raw.bytes() };
                packets::put(&data, &lock, &[bytes], id, Put::Now)
            });
            drop(buf);
            done
        } else {
            let bufs = [message_buffers(&pickled)?];
            let raws = raws_of(&bufs);
            let done = py.detach(move || {
                // SAFETY: `bufs` stays held (its memory pinned) until after this returns.
                let parts = unsafe { slices_of(&raws) };
                packets::put(&data, &lock, &parts[0], id, Put::Now)
            });
            drop(bufs);
            done
        };
        match done {
            Ok(true) => Ok(None),
            _ => Ok(Some(pickled)),
        }
    }
}

/// A queue message's buffers: a tuple's items (a large pickle's parts, see `pickle::dumps`),
/// or the object itself.
fn message_buffers(m: &Bound<'_, PyAny>) -> PyResult<Vec<Buffer>> {
    match m.cast::<pyo3::types::PyTuple>() {
        Ok(t) => t.iter().map(|p| Buffer::get(&p, false)).collect(),
        Err(_) => Ok(vec![Buffer::get(m, false)?]),
    }
}

/// The raw memory of each message's buffers (to use without the GIL).
fn raws_of(bufs: &[Vec<Buffer>]) -> Vec<Vec<crate::buffer::Raw>> {
    bufs.iter()
        .map(|b| b.iter().map(Buffer::raw).collect())
        .collect()
}

/// Each message's parts as slices.
///
/// # Safety
/// The buffers `raws` came from must stay held until the slices are no longer used.
unsafe fn slices_of<'a>(raws: &[Vec<crate::buffer::Raw>]) -> Vec<Vec<&'a [u8]>> {
    raws.iter()
        // SAFETY: the caller keeps each buffer held, so its memory stays pinned.
        .map(|r| r.iter().map(|x| unsafe { x.bytes() }).collect())
        .collect()
}
