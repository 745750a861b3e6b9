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
    op: impl FnMut(Instant) -> io::Result<T> + Send,
) -> PyResult<io::Result<T>> {
    interruptible_until(py, deadline(timeout), op)
}

/// The deadline `timeout` from now (`None`: none, also for a timeout too far away to name as
/// an `Instant`, which no wait outlives).
pub(crate) fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// [`interruptible`] with the deadline given: a call made of several steps (a `write` that
/// places its bytes in parts) computes it once, so that its timeout bounds the whole call, as
/// `socket.sendall`'s does (since Python 3.5), not each step.
pub(crate) fn interruptible_until<T: Send>(
    py: Python<'_>,
    until: Option<Instant>,
    mut op: impl FnMut(Instant) -> io::Result<T> + Send,
) -> PyResult<io::Result<T>> {
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

/// The largest timeout accepted, in seconds: what CPython's own clock type holds (`_PyTime_t`,
/// nanoseconds in 64 bits), past which `socket.settimeout` raises `OverflowError`.
const MAX_SECONDS: f64 = i64::MAX as f64 / 1e9;

/// A Python timeout in seconds as a `Duration`: `None` stays `None` (wait forever). As
/// `socket.settimeout`: `ValueError` for NaN or a negative number, `OverflowError` for one too
/// large for CPython's clock (infinity included). Zero is "do not wait" (the call's deadline
/// is now).
pub(crate) fn duration(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if s.is_nan() => Err(pyo3::exceptions::PyValueError::new_err(
            "Invalid value NaN (not a number)",
        )),
        Some(s) if s < 0.0 => Err(pyo3::exceptions::PyValueError::new_err(
            "Timeout value out of range",
        )),
        Some(s) if s >= MAX_SECONDS => Err(pyo3::exceptions::PyOverflowError::new_err(
            "timeout too large",
        )),
        // In range: a finite number of seconds below 2^63 ns, which `Duration` holds.
        Some(s) => Ok(Some(Duration::from_secs_f64(s))),
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
