//! `pagepipe.Reader`: the read end.

use crate::buffer::Buffer;
use crate::error::to_py;
use crate::held::{from_fds, Held};
use pagepipe::Reader;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::io::{self, Read};
use std::os::fd::RawFd;

/// The read end of a pagepipe. `read(n)` returns what is queued, up to `n` bytes, waiting
/// only while the pipe is empty; `b""` at end of file (no writer left in any process).
/// `BlockingIOError` on an empty non-blocking end; `ValueError` once closed.
#[pyclass(module = "pagepipe._native", name = "Reader", frozen)]
pub(crate) struct PyReader {
    held: Held<Reader>,
}

impl PyReader {
    pub(crate) fn new(r: Reader) -> PyReader {
        PyReader { held: Held::new(r) }
    }
}

/// One read, retried on `Interrupted`.
fn read_once(r: &Reader, buf: &mut [u8]) -> io::Result<usize> {
    let mut r = r;
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Everything until end of file (a non-blocking end: until the pipe is empty; an error with
/// nothing read is raised).
fn read_all(r: &Reader) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match read_once(r, &mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !out.is_empty() => return Ok(out),
            Err(e) => return Err(e),
        }
    }
}

/// The raw pointer of a new `bytes` object, to fill without the GIL (nothing else sees the
/// object until we return it).
struct Fill(*mut u8);
// SAFETY: the object is referenced by this call alone until it returns it; the pointer is
// used only in the closure that runs while this thread waits for it.
unsafe impl Send for Fill {}

#[pymethods]
impl PyReader {
    /// Reads up to `n` bytes (all until end of file if `n` is negative) into a new `bytes`.
    /// The GIL is released while it waits and copies.
    #[pyo3(signature = (n = -1))]
    fn read<'py>(&self, py: Python<'py>, n: isize) -> PyResult<Bound<'py, PyBytes>> {
        let end = self.held.end()?;
        if n < 0 {
            let all = py.detach(move || read_all(&end)).map_err(to_py)?;
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
        let got = py.detach(move || {
            let f = fill;
            // SAFETY: the new object's n bytes, referenced by nobody else (see `Fill`).
            let buf = unsafe { std::slice::from_raw_parts_mut(f.0, len) };
            read_once(&end, buf)
        });
        let got = match got {
            Ok(g) => g,
            Err(e) => {
                // SAFETY: we own the only reference.
                unsafe { ffi::Py_DecRef(obj) };
                return Err(to_py(e));
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
    /// while it waits and copies.
    fn readinto(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        let end = self.held.end()?;
        let view = Buffer::get(buf, true)?;
        let raw = view.raw();
        let result = py.detach(move || {
            // SAFETY: `view` is held, writable, until after this returns.
            let bytes = unsafe { raw.bytes_mut() };
            read_once(&end, bytes)
        });
        drop(view);
        result.map_err(to_py)
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

    /// New descriptors of this end for a child process (see `pagepipe.__init__`).
    #[pyo3(signature = (keep = true))]
    fn _export_fds(&self, keep: bool) -> PyResult<(RawFd, RawFd)> {
        self.held.export_fds(keep)
    }

    /// The end whose descriptors `_export_fds` gave; takes them.
    #[staticmethod]
    fn _from_fds(m: RawFd, signal: RawFd) -> PyResult<PyReader> {
        Ok(PyReader::new(from_fds(m, signal)?))
    }
}
