//! Blocking calls that Ctrl-C interrupts, as a blocked `os.read` is: a call waits in slices
//! of [`SLICE`] with the GIL released, and between slices runs Python's signal handlers
//! (`PyErr_CheckSignals`), so a `KeyboardInterrupt` (or any exception a handler raises)
//! ends the call within a slice.

use pyo3::prelude::*;
use std::io;
use std::time::{Duration, Instant};

/// How long a blocking call waits before it looks at Python's signal handlers.
const SLICE: Duration = Duration::from_millis(50);

/// Runs `op(limit)` with the GIL released until it returns anything but an expired slice,
/// and returns that: `limit` is the end of the current slice (or of the end's own `timeout`,
/// if that comes first; its expiry is returned as `TimedOut`). Between slices, and after an
/// `Interrupted`, the signal handlers run; an exception one raises is the outer `Err`.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    timeout: Option<Duration>,
    mut op: impl FnMut(Instant) -> io::Result<T> + Send,
) -> PyResult<io::Result<T>> {
    let until = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        let slice = Instant::now() + SLICE;
        let limit = until.map_or(slice, |u| u.min(slice));
        match py.detach(|| op(limit)) {
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                if until.is_some_and(|u| Instant::now() >= u) {
                    return Ok(Err(e));
                }
                py.check_signals()?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => py.check_signals()?,
            other => return Ok(other),
        }
    }
}
