//! Blocking calls that Ctrl-C interrupts, as a blocked `os.read` is: a call waits in slices
//! of [`SLICE`] with the GIL released, and between slices runs Python's signal handlers
//! (`PyErr_CheckSignals`), so a `KeyboardInterrupt` (or any exception a handler raises)
//! ends the call within a slice.

use pyo3::prelude::*;
use std::io;
use std::time::{Duration, Instant};

/// How long a blocking call waits before it looks at Python's signal handlers.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

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

/// A Python timeout in seconds as a `Duration`: `None` stays `None` (wait forever);
/// `ValueError` for a negative or non-finite number, as `socket.settimeout` raises. Zero is
/// "do not wait" (the call's deadline is now).
pub(crate) fn duration(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(_) => Err(pyo3::exceptions::PyValueError::new_err(
            "Timeout value out of range",
        )),
    }
}

/// A per-object default timeout (`settimeout`), as `socket` keeps one per socket object.
#[derive(Default)]
pub(crate) struct DefaultTimeout {
    /// Nanoseconds plus one; 0 is "none set".
    ns: std::sync::atomic::AtomicU64,
}

impl DefaultTimeout {
    pub(crate) fn set(&self, t: Option<Duration>) {
        let v = t.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1) + 1
        });
        self.ns.store(v, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<Duration> {
        match self.ns.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            v => Some(Duration::from_nanos(v - 1)),
        }
    }

    /// The timeout of one call: its own `timeout=` if given, else this default, else the
    /// end's own (pagepipe's, shared by every holder).
    pub(crate) fn for_call(
        &self,
        call: Option<f64>,
        end: impl FnOnce() -> io::Result<Option<Duration>>,
    ) -> PyResult<Option<Duration>> {
        if let Some(t) = duration(call)? {
            return Ok(Some(t));
        }
        if let Some(t) = self.get() {
            return Ok(Some(t));
        }
        end().map_err(crate::error::to_py)
    }
}
