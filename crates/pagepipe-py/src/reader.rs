//! `pagepipe.Reader`: the read end.

use crate::buffer::Buffer;
use crate::error::to_py;
use crate::held::{from_fds, Held};
use crate::message;
use crate::packets::{self, Got};
use crate::pickle;
use crate::wait::{duration, interruptible, DefaultTimeout};
use crate::writer::PyWriter;
use pagepipe::Reader;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

/// The read end of a pagepipe. `read(n)` returns what is queued, up to `n` bytes, waiting
/// only while the pipe is empty; `b""` at end of file (no writer left in any process).
/// `BlockingIOError` on an empty non-blocking end; `ValueError` once closed.
#[pyclass(module = "pagepipe._native", name = "Reader", frozen)]
pub(crate) struct PyReader {
    held: Held<Reader>,
    /// `settimeout`'s default for this object's calls.
    timeout: DefaultTimeout,
    /// Queue messages read whole by a call that a signal handler (or an error) interrupted,
    /// kept for this process's next calls (with the id of the process that read them: a
    /// forked child's copy is not its own, and must not be delivered twice).
    stash: std::sync::Mutex<Option<(u32, std::collections::VecDeque<Vec<u8>>)>>,
}

impl PyReader {
    pub(crate) fn new(r: Reader) -> PyReader {
        PyReader {
            held: Held::new(r),
            timeout: DefaultTimeout::default(),
            stash: std::sync::Mutex::new(None),
        }
    }

    /// The end, for the queue's calls.
    pub(crate) fn end(&self) -> PyResult<std::sync::Arc<Reader>> {
        self.held.end()
    }

    /// The timeout of one call (see `DefaultTimeout::for_call`).
    fn call_timeout(&self, r: &Reader, call: Option<f64>) -> PyResult<Option<std::time::Duration>> {
        self.timeout.for_call(call, || r.read_timeout())
    }
}

/// One read, waiting for data at most until `limit` (see `wait::interruptible`).
fn read_once(r: &Reader, buf: &mut [u8], limit: Instant) -> io::Result<usize> {
    r.read_deadline(buf, limit)
}

/// Everything until end of file (a non-blocking end: until the pipe is empty; an error with
/// nothing read is raised). Interruptible while it waits and between reads; what was read is
/// then dropped, as `FileIO.readall` drops it.
fn read_all(py: Python<'_>, r: &Reader, timeout: Option<std::time::Duration>) -> PyResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match interruptible(py, timeout, |limit| read_once(r, &mut chunk, limit))? {
            Ok(0) => return Ok(out),
            Ok(n) => {
                out.extend_from_slice(&chunk[..n]);
                // A writer that keeps sending must not keep Ctrl-C waiting for its end.
                py.check_signals()?;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !out.is_empty() => return Ok(out),
            Err(e) => return Err(to_py(e)),
        }
    }
}

/// The raw pointer of a new `bytes` object, to fill without the GIL (nothing else sees the
/// object until we return it).
#[derive(Clone, Copy)]
struct Fill(*mut u8);
// SAFETY: the object is referenced by this call alone until it returns it; the pointer is
// used only in the closure that runs while this thread waits for it.
unsafe impl Send for Fill {}

thread_local! {
    /// The buffer a thread's queue reads assemble messages in, kept between calls: a fresh one
    /// of a large message's size would fault in its pages on every call.
    /// With the ends of the messages in it.
    static SCRATCH: std::cell::RefCell<packets::Messages> =
        std::cell::RefCell::new(packets::Messages::default());
}

/// The largest `SCRATCH` kept between calls.
const SCRATCH_KEPT: usize = 64 << 20;

/// A new `bytes` of `len` bytes filled by `fill` (with the GIL held; `fill` releases it to
/// wait).
fn new_bytes<'py>(
    py: Python<'py>,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> PyResult<()>,
) -> PyResult<Bound<'py, PyBytes>> {
    if len == 0 {
        return Ok(PyBytes::new(py, b""));
    }
    let n = ffi::Py_ssize_t::try_from(len)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("message too long"))?;
    // SAFETY: a NULL source asks CPython for an uninitialized bytes object of `len` bytes.
    let obj = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), n) };
    if obj.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `obj` is a new (owned) reference to a bytes object, referenced by nobody else.
    let bytes: Bound<'py, PyBytes> =
        unsafe { Bound::from_owned_ptr(py, obj).cast_into_unchecked() };
    // SAFETY: the new object's `len` bytes; no other code sees it until we return it.
    let dst =
        unsafe { std::slice::from_raw_parts_mut(ffi::PyBytes_AsString(obj).cast::<u8>(), len) };
    fill(dst)?;
    Ok(bytes)
}

#[pymethods]
impl PyReader {
    /// Reads up to `n` bytes (all until end of file if `n` is negative) into a new `bytes`.
    /// The GIL is released while it waits and copies. `timeout` (seconds) bounds the wait
    /// for this call (`TimeoutError` when it passes with nothing read); without it, the
    /// object's `settimeout` applies, else the call waits as the end's mode says.
    ///
    /// >>> w, r = pagepipe.pipe()
    /// >>> r.read(10, timeout=0.01)
    /// Traceback (most recent call last):
    /// TimeoutError: ...
    #[pyo3(signature = (n = -1, *, timeout = None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        n: isize,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let end = self.held.end()?;
        let timeout = self.call_timeout(&end, timeout)?;
        if n < 0 {
            let all = read_all(py, &end, timeout)?;
            return Ok(PyBytes::new(py, &all));
        }
        if n == 0 {
            return Ok(PyBytes::new(py, b""));
        }
        // SAFETY: a NULL source asks CPython for an uninitialized bytes object of n bytes.
        let mut obj = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), n) };
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `obj` is a new bytes object of n bytes; its buffer is ours to fill.
        let fill = Fill(unsafe { ffi::PyBytes_AsString(obj) }.cast());
        let len = n as usize;
        let got = interruptible(py, timeout, move |limit| {
            let f = fill;
            // SAFETY: the new object's n bytes, referenced by nobody else (see `Fill`).
            let buf = unsafe { std::slice::from_raw_parts_mut(f.0, len) };
            read_once(&end, buf, limit)
        })
        .and_then(|r| r.map_err(to_py));
        let got = match got {
            Ok(g) => g,
            Err(e) => {
                // SAFETY: we own the only reference.
                unsafe { ffi::Py_DecRef(obj) };
                return Err(e);
            }
        };
        if got < len {
            // SAFETY: `obj` is a bytes object we alone reference, as _PyBytes_Resize needs;
            // on failure it frees it and sets `obj` to NULL.
            if unsafe { ffi::_PyBytes_Resize(&mut obj, got as ffi::Py_ssize_t) } != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        // SAFETY: `obj` is a new (owned) reference to a bytes object.
        Ok(unsafe { Bound::from_owned_ptr(py, obj).cast_into_unchecked() })
    }

    /// Reads up to `len(buf)` bytes straight into the writable buffer-protocol object `buf`
    /// (no intermediate copy); returns the count, 0 at end of file. The GIL is released
    /// while it waits and copies. `timeout` as for `read`.
    #[pyo3(signature = (buf, *, timeout = None))]
    fn readinto(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<usize> {
        let end = self.held.end()?;
        let timeout = self.call_timeout(&end, timeout)?;
        let view = Buffer::get(buf, true)?;
        let raw = view.raw();
        let result = interruptible(py, timeout, move |limit| {
            // SAFETY: `view` is held, writable, until after this returns.
            let bytes = unsafe { raw.bytes_mut() };
            read_once(&end, bytes, limit)
        });
        drop(view);
        result?.map_err(to_py)
    }

    /// Closes this object's hold on the read end (writers get `BrokenPipeError` once no
    /// process holds one). Closing a closed end does nothing.
    fn close(&self) {
        self.held.close();
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.held.is_closed()
    }

    /// A descriptor for `select`, `selectors` and asyncio's `add_reader`: readable when the
    /// pipe holds data or no writer is left. Owned by the end: do not close, read or write it.
    fn fileno(&self) -> PyResult<RawFd> {
        self.held.fileno()
    }

    /// Blocking (True) or non-blocking mode, for every holder of this end in every process.
    fn set_blocking(&self, blocking: bool) -> PyResult<()> {
        self.held.set_blocking(blocking)
    }

    /// Whether reads block.
    fn get_blocking(&self) -> PyResult<bool> {
        self.held.get_blocking()
    }

    /// The default timeout of this object's reads, in seconds (`None`: wait as the end's
    /// mode says), as `socket.settimeout` sets one per socket object. Other holders of the
    /// end, here or in other processes, keep their own.
    ///
    /// >>> w, r = pagepipe.pipe()
    /// >>> r.settimeout(0.05); r.gettimeout()
    /// 0.05
    fn settimeout(&self, timeout: Option<f64>) -> PyResult<()> {
        self.timeout.set(duration(timeout)?);
        Ok(())
    }

    /// The default timeout set by `settimeout`.
    fn gettimeout(&self) -> Option<f64> {
        self.timeout.get().map(|d| d.as_secs_f64())
    }

    /// Bytes queued now, without waiting (`FIONREAD`): a snapshot.
    #[getter]
    fn queued(&self) -> PyResult<usize> {
        Ok(self.held.end()?.len())
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
        if self.held.is_closed() {
            "<pagepipe.Reader closed>".to_string()
        } else {
            "<pagepipe.Reader>".to_string()
        }
    }

    /// New descriptors of this end for another process, owned by the caller (see
    /// `pagepipe.__init__`).
    fn _export_fds(&self) -> PyResult<(RawFd, RawFd)> {
        self.held.export_fds()
    }

    /// The end whose descriptors `_export_fds` gave; takes them.
    #[staticmethod]
    fn _from_fds(m: RawFd, signal: RawFd) -> PyResult<PyReader> {
        Ok(PyReader::new(from_fds(m, signal)?))
    }

    /// One whole message (`pagepipe.Connection.recv_bytes`): `EOFError` at end of file before
    /// it, `OSError` inside it; `None` (nothing of it read) when longer than `maxlength`.
    #[pyo3(signature = (maxlength = None))]
    fn _recv_message<'py>(
        &self,
        py: Python<'py>,
        maxlength: Option<usize>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let end = self.held.end()?;
        let Some(len) = message::recv_len(py, &end)? else {
            return Err(message::eof());
        };
        if maxlength.is_some_and(|m| len > m) {
            return Ok(None);
        }
        new_bytes(py, len, |dst| message::recv_body(py, &end, dst)).map(Some)
    }

    /// One whole message into `buf` at byte `offset` (`Connection.recv_bytes_into`): its
    /// length and `None`, or, when it does not fit, its length and the message as `bytes`
    /// (for `BufferTooShort`).
    fn _recv_message_into<'py>(
        &self,
        py: Python<'py>,
        buf: &Bound<'_, PyAny>,
        offset: usize,
    ) -> PyResult<(usize, Option<Bound<'py, PyBytes>>)> {
        let end = self.held.end()?;
        let view = Buffer::get(buf, true)?;
        let raw = view.raw();
        let Some(len) = message::recv_len(py, &end)? else {
            return Err(message::eof());
        };
        if offset.checked_add(len).is_none_or(|e| e > raw.len) {
            drop(view);
            let whole = new_bytes(py, len, |dst| message::recv_body(py, &end, dst))?;
            return Ok((len, Some(whole)));
        }
        // SAFETY: `view` is held, writable, until after this returns; offset + len fits.
        let dst = unsafe { &mut raw.bytes_mut()[offset..offset + len] };
        let got = message::recv_body(py, &end, dst);
        drop(view);
        got.map(|()| (len, None))
    }

    /// `pagepipe.Queue.get_many`: the next whole messages of this packet pipe, unpickled, at
    /// most `max`: the first waits at most `timeout` (seconds; `None`: forever) to start
    /// (`queue.Empty` then), the next ones are those that have started already. Holds the
    /// queue's lock pipe's read side (`lock_r`; `lock_w` is its write side, to tell a dead
    /// writer's partial message) throughout. `release()` (the queue's semaphore) is called
    /// once per message taken. Messages that a signal handler's exception (or an error)
    /// interrupted are kept, and returned by this process's next calls, before the pipe's; so
    /// are those after one that cannot be unpickled (its error is raised by the next call).
    #[pyo3(signature = (lock_r, lock_w, timeout, release, max))]
    fn _get_objs<'py>(
        &self,
        py: Python<'py>,
        lock_r: PyRef<'_, PyReader>,
        lock_w: PyRef<'_, PyWriter>,
        timeout: Option<f64>,
        release: &Bound<'py, PyAny>,
        max: usize,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.get_objs(py, &lock_r, &lock_w, timeout, release, max)
    }
}

/// `queue.Empty`.
fn empty_error(py: Python<'_>) -> PyErr {
    static EMPTY: pyo3::sync::PyOnceLock<Py<pyo3::types::PyType>> = pyo3::sync::PyOnceLock::new();
    match EMPTY.import(py, "queue", "Empty") {
        Ok(t) => PyErr::from_type(t.clone(), ()),
        Err(e) => e,
    }
}

/// `queue.Full`.
pub(crate) fn full_error(py: Python<'_>) -> PyErr {
    static FULL: pyo3::sync::PyOnceLock<Py<pyo3::types::PyType>> = pyo3::sync::PyOnceLock::new();
    match FULL.import(py, "queue", "Full") {
        Ok(t) => PyErr::from_type(t.clone(), ()),
        Err(e) => e,
    }
}

impl PyReader {
    /// Messages kept by an interrupted call, for this process's next ones (at most `max`).
    fn take_stash(&self, max: usize) -> Vec<Vec<u8>> {
        let mut stash = self.stash.lock().unwrap_or_else(|e| e.into_inner());
        match stash.as_mut() {
            Some((pid, kept)) if *pid == std::process::id() => {
                let n = kept.len().min(max.max(1));
                let out: Vec<Vec<u8>> = kept.drain(..n).collect();
                if kept.is_empty() {
                    *stash = None;
                }
                out
            }
            Some(_) => {
                *stash = None; // a parent's (forked): not ours to deliver
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Keeps `msgs` for this process's next calls, before any kept already.
    fn stash_front(&self, msgs: Vec<Vec<u8>>) {
        if msgs.is_empty() {
            return;
        }
        let mut stash = self.stash.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let mut kept: std::collections::VecDeque<Vec<u8>> = msgs.into();
        if let Some((p, old)) = stash.take() {
            if p == pid {
                kept.extend(old);
            }
        }
        *stash = Some((pid, kept));
    }

    /// Unpickles `msgs` in order, calling `release` for each taken. The first one's error is
    /// raised (it is taken; the rest are kept); a later one's ends the list, and it and the
    /// rest are kept, for the next calls (see `_get_objs`).
    fn deliver<'py>(
        &self,
        py: Python<'py>,
        msgs: &[&[u8]],
        release: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut objs = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.iter().enumerate() {
            match pickle::loads(py, m) {
                Ok(o) => {
                    release.call0()?;
                    objs.push(o);
                }
                Err(e) if i == 0 => {
                    // Taken (as get's would be); those after it are kept.
                    self.stash_front(msgs[1..].iter().map(|m| m.to_vec()).collect());
                    release.call0()?;
                    return Err(e);
                }
                Err(_) => {
                    self.stash_front(msgs[i..].iter().map(|m| m.to_vec()).collect());
                    break;
                }
            }
        }
        Ok(objs)
    }

    /// `_get_objs` (also `pagepipe._native._QueueOps.get`'s).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_objs<'py>(
        &self,
        py: Python<'py>,
        lock_r: &PyReader,
        lock_w: &PyWriter,
        timeout: Option<f64>,
        release: &Bound<'py, PyAny>,
        max: usize,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let (data, lr, lw) = (self.held.end()?, lock_r.end()?, lock_w.end()?);
        let deadline = crate::wait::deadline(duration(timeout)?);
        let kept = self.take_stash(max);
        if !kept.is_empty() {
            let views: Vec<&[u8]> = kept.iter().map(Vec::as_slice).collect();
            return self.deliver(py, &views, release);
        }
        let signals = || Python::attach(|py| py.check_signals());
        let mut read = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        let got = py.detach(|| packets::get(&data, &lr, &lw, deadline, &signals, max, &mut read));
        let mut starts = std::iter::once(0).chain(read.ends.iter().copied());
        let msgs: Vec<&[u8]> = read
            .ends
            .iter()
            .map(|&e| &read.bytes[starts.next().unwrap_or(0)..e])
            .collect();
        let result = match got {
            Ok(Got::Message) => self.deliver(py, &msgs, release),
            Ok(Got::Empty) => Err(empty_error(py)),
            Ok(Got::Interrupted(e)) | Err(e) => {
                self.stash_front(msgs.iter().map(|m| m.to_vec()).collect());
                Err(e)
            }
        };
        drop(msgs);
        if read.bytes.capacity() <= SCRATCH_KEPT {
            SCRATCH.with(|s| *s.borrow_mut() = read);
        }
        result
    }
}
