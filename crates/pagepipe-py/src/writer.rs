//! `pagepipe.Writer`: the write end.

use crate::buffer::Buffer;
use crate::error::to_py;
use crate::held::{from_fds, Held};
use crate::wait::interruptible;
use pagepipe::Writer;
use pyo3::prelude::*;
use std::os::fd::RawFd;

/// The write end of a pagepipe. `write(b)` blocks until all of `b` is in the pipe (a
/// non-blocking end writes what fits); writes of at most `PIPE_BUF` bytes are atomic.
/// `BrokenPipeError` once no reader is left in any process; `ValueError` once closed.
#[pyclass(module = "pagepipe._native", name = "Writer", frozen)]
pub(crate) struct PyWriter {
    held: Held<Writer>,
}

impl PyWriter {
    pub(crate) fn new(w: Writer) -> PyWriter {
        PyWriter { held: Held::new(w) }
    }
}

/// One `write`: all of `bytes` on a blocking end (the count so far if an error cuts it
/// short, as `write(2)` returns), what fits on a non-blocking one. Waits in slices that
/// Ctrl-C can end (see `wait::interruptible`): an exception a signal handler raises is
/// raised whatever was written before it, as `socket.sendall` does.
fn write(py: Python<'_>, w: &Writer, bytes: &[u8]) -> PyResult<usize> {
    let timeout = w.write_timeout().map_err(to_py)?;
    let mut done = 0;
    loop {
        match interruptible(py, timeout, |limit| w.write_deadline(&bytes[done..], limit))? {
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
    /// released while it copies and waits.
    fn write(&self, py: Python<'_>, b: &Bound<'_, PyAny>) -> PyResult<usize> {
        let end = self.held.end()?;
        let buf = Buffer::get(b, false)?;
        let raw = buf.raw();
        // SAFETY: `buf` stays held (and its memory pinned) until after this returns.
        let bytes = unsafe { raw.bytes() };
        let result = write(py, &end, bytes);
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
}
