//! The Python package's native module, `pagepipe._native` (re-exported by `pagepipe`):
//! `pipe(capacity=65536) -> (Writer, Reader)`, ends that behave like `os.pipe()`'s file
//! objects (counts, `b""` at end of file, `BrokenPipeError`, `BlockingIOError`, `ValueError`
//! on a closed end), release the GIL while they wait or copy, and give `fileno()` to
//! `select`, `selectors` and asyncio.
//!
//! Files: `error` (Rust errors to Python's), `buffer` (the buffer protocol, borrowed without a
//! copy), `held` (one Python object's hold on an end, and closing it), then the classes:
//! `writer`, `reader`; `wait` makes their blocking calls interruptible (Ctrl-C). Pickling
//! for `multiprocessing` is in `python/pagepipe/__init__.py`, over the classes' `_export_fds`
//! and `_from_fds`.
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod buffer;
mod error;
mod held;
mod message;
mod packets;
mod pickle;
mod queue_ops;
mod reader;
mod wait;
mod writer;

use pyo3::prelude::*;
use reader::PyReader;
use writer::PyWriter;

/// Creates a pipe of `capacity` bytes (rounded up as `F_SETPIPE_SZ` rounds); both ends
/// blocking.
#[pyfunction]
#[pyo3(signature = (capacity = pagepipe::DEFAULT_CAPACITY))]
fn pipe(capacity: usize) -> PyResult<(PyWriter, PyReader)> {
    let (w, r) = pagepipe::Builder::new()
        .capacity(capacity)
        .build()
        .map_err(error::to_py)?;
    Ok((PyWriter::new(w), PyReader::new(r)))
}

/// A queue's two pipes (`pagepipe.Queue`): `(data_writer, data_reader, lock_writer,
/// lock_reader)`, the data pipe in packet mode with `capacity` bytes.
#[pyfunction]
fn _queue_pipes(capacity: usize) -> PyResult<(PyWriter, PyReader, PyWriter, PyReader)> {
    let ((w, r), (lw, lr)) = packets::make(capacity).map_err(error::to_py)?;
    Ok((
        PyWriter::new(w),
        PyReader::new(r),
        PyWriter::new(lw),
        PyReader::new(lr),
    ))
}

/// Whether `fd` is a pagepipe end's readiness descriptor (one its `fileno()` handed out, or
/// a duplicate of one): it carries wake-ups, not the data.
#[pyfunction]
fn _is_readiness_fd(fd: std::os::fd::RawFd) -> bool {
    held::readiness::is_readiness(fd)
}

/// Called in a forked child (`pagepipe.queues` registers it): message ids carry the child's
/// own process id.
#[pyfunction]
fn _after_fork_in_child() {
    pickle::forked();
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pipe, m)?)?;
    m.add_function(wrap_pyfunction!(_queue_pipes, m)?)?;
    m.add_function(wrap_pyfunction!(_is_readiness_fd, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    m.add_class::<PyWriter>()?;
    m.add_class::<PyReader>()?;
    m.add_class::<queue_ops::QueueOps>()?;
    m.add("DEFAULT_CAPACITY", pagepipe::DEFAULT_CAPACITY)?;
    m.add("PIPE_BUF", pagepipe::PIPE_BUF)?;
    Ok(())
}
