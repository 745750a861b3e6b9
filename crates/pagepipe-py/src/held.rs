//! One Python object's hold on a pipe end: the end (shared with the calls using it, so a
//! `close()` from another thread never frees it under them), the descriptors it exported for
//! a child (closed with it), and closing.

use crate::error::{closed, to_py};
use pagepipe_c::fds::{self, PipeEnd};
use pyo3::prelude::*;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// What a `Writer` or `Reader` object holds until it is closed.
struct Open<E> {
    end: Arc<E>,
    /// Descriptors handed to `multiprocessing` for a child it starts, which must stay open
    /// until the child is started; closed with the end.
    exported: Vec<OwnedFd>,
}

/// A Python end's state: open, or closed (`None`).
pub(crate) struct Held<E> {
    state: Mutex<Option<Open<E>>>,
}

impl<E: PipeEnd> Held<E> {
    pub(crate) fn new(end: E) -> Held<E> {
        Held {
            state: Mutex::new(Some(Open {
                end: Arc::new(end),
                exported: Vec::new(),
            })),
        }
    }

    /// The end, for one call (`ValueError` if closed). The call keeps it alive through a
    /// concurrent `close()`, which then takes effect when the call returns.
    pub(crate) fn end(&self) -> PyResult<Arc<E>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.as_ref().map(|o| o.end.clone()).ok_or_else(closed)
    }

    /// Closes this object's hold on the end; closing twice is a no-op (as for files).
    pub(crate) fn close(&self) {
        let open = self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(open);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    pub(crate) fn fileno(&self) -> PyResult<RawFd> {
        Ok(self.end()?.as_raw_fd())
    }

    pub(crate) fn set_blocking(&self, blocking: bool) -> PyResult<()> {
        self.end()?.set_nonblocking(!blocking).map_err(to_py)
    }

    pub(crate) fn get_blocking(&self) -> PyResult<bool> {
        Ok(!self.end()?.is_nonblocking())
    }

    /// New descriptors of the end (memory file, signal pipe). With `keep`, this
    /// object keeps them open until it is closed (for a child being started, which receives
    /// them by number); without, the caller owns them.
    pub(crate) fn export_fds(&self, keep: bool) -> PyResult<(RawFd, RawFd)> {
        let end = self.end()?;
        let fds = fds::export(&*end).map_err(to_py)?;
        let [m, signal] = fds.each_ref().map(AsRawFd::as_raw_fd);
        if keep {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let open = state.as_mut().ok_or_else(closed)?;
            open.exported.extend(fds);
        } else {
            // The caller owns them now (it closes them).
            let _ = fds.map(IntoRawFd::into_raw_fd);
        }
        Ok((m, signal))
    }
}

/// The end whose descriptors `export_fds` gave, taking ownership of them (`ValueError` for a
/// negative number; `OSError` if they are not a pagepipe end of this kind).
pub(crate) fn from_fds<E: PipeEnd>(m: RawFd, signal: RawFd) -> PyResult<E> {
    if [m, signal].iter().any(|&fd| fd < 0) {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "negative file descriptor",
        ));
    }
    // SAFETY: the caller hands us these descriptors (multiprocessing's DupFd.detach() gives
    // the receiving process ownership); `import` validates them before use.
    let fds = [m, signal].map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    fds::import(fds).map_err(to_py)
}
