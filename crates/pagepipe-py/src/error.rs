//! Rust's `io::Error` to the exception Python raises for the same error on `os.pipe()`'s
//! descriptors: `BrokenPipeError` (EPIPE), `BlockingIOError` (EAGAIN), `TimeoutError`, and
//! `ValueError` for bad arguments and closed ends.

use pyo3::exceptions::PyValueError;
use pyo3::PyErr;
use std::io;

/// The Python exception for `e`: `ValueError` for invalid input, else the `OSError`
/// subclass PyO3 picks for its kind (as CPython does for its errno).
pub(crate) fn to_py(e: io::Error) -> PyErr {
    if e.kind() == io::ErrorKind::InvalidInput {
        return PyValueError::new_err(e.to_string());
    }
    PyErr::from(e)
}

/// `ValueError: I/O operation on closed pipe end`, as a closed file object raises.
pub(crate) fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on closed pipe end")
}
