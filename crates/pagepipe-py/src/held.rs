//! One Python object's hold on a pipe end: the end (shared with the calls using it, so a
//! `close()` from another thread never frees it under them), closing it, and its descriptors
//! out and back in (for pickling; the Python side owns exported descriptors).

use crate::error::{closed, to_py};
use pyo3::prelude::*;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

/// What this module needs of either end: `pagepipe`'s own methods, named once for both.
pub(crate) trait PipeEnd: AsRawFd + Send + Sync + Sized + 'static {
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()>;
    fn is_nonblocking(&self) -> bool;
    /// `Writer::to_fds`: new descriptors (memory file, signal pipe) carrying a clone.
    fn to_fds(&self) -> io::Result<[OwnedFd; 2]>;
    /// `Writer::from_fds`: the end those descriptors carry, validated.
    fn from_fds(fds: [OwnedFd; 2]) -> io::Result<Self>;
}

macro_rules! pipe_end {
    ($end:ty) => {
        impl PipeEnd for $end {
            fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
                <$end>::set_nonblocking(self, nonblocking)
            }
            fn is_nonblocking(&self) -> bool {
                <$end>::is_nonblocking(self)
            }
            fn to_fds(&self) -> io::Result<[OwnedFd; 2]> {
                <$end>::to_fds(self)
            }
            fn from_fds(fds: [OwnedFd; 2]) -> io::Result<Self> {
                <$end>::from_fds(fds)
            }
        }
    };
}

pipe_end!(pagepipe::Writer);
pipe_end!(pagepipe::Reader);

/// A Python end's state: open, or closed (`None`).
pub(crate) struct Held<E> {
    state: Mutex<Option<Arc<E>>>,
}

impl<E: PipeEnd> Held<E> {
    pub(crate) fn new(end: E) -> Held<E> {
        Held {
            state: Mutex::new(Some(Arc::new(end))),
        }
    }

    /// The end, for one call (`ValueError` if closed). The call keeps it alive through a
    /// concurrent `close()`, which then takes effect when the call returns.
    pub(crate) fn end(&self) -> PyResult<Arc<E>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.clone().ok_or_else(closed)
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
        let fd = self.end()?.as_raw_fd();
        readiness::note(fd);
        Ok(fd)
    }

    pub(crate) fn set_blocking(&self, blocking: bool) -> PyResult<()> {
        self.end()?.set_nonblocking(!blocking).map_err(to_py)
    }

    pub(crate) fn get_blocking(&self) -> PyResult<bool> {
        Ok(!self.end()?.is_nonblocking())
    }

    /// New descriptors of the end (memory file, signal pipe), close-on-exec; the caller
    /// owns them (`pagepipe/__init__.py` closes them once a child has them).
    pub(crate) fn export_fds(&self) -> PyResult<(RawFd, RawFd)> {
        let fds = self.end()?.to_fds().map_err(to_py)?;
        let [m, signal] = fds.map(IntoRawFd::into_raw_fd);
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
    E::from_fds(fds).map_err(to_py)
}

/// The descriptors `fileno()` handed out: each end's readiness descriptor (a kernel pipe that
/// carries wake-ups, not the data), known by device and inode so that asyncio's
/// `connect_read_pipe`/`connect_write_pipe` can refuse one (`pagepipe/aio.py`) instead of
/// reading wake-up bytes from it as if they were the data.
pub(crate) mod readiness {
    use std::collections::HashSet;
    use std::os::fd::{FromRawFd, RawFd};
    use std::os::unix::fs::MetadataExt;
    use std::sync::Mutex;

    static SEEN: Mutex<Option<HashSet<(u64, u64)>>> = Mutex::new(None);

    /// The (device, inode) of `fd`, if it is open.
    fn identity(fd: RawFd) -> Option<(u64, u64)> {
        // SAFETY: borrowed for one fstat; ManuallyDrop never closes it.
        let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
        file.metadata().ok().map(|m| (m.dev(), m.ino()))
    }

    /// Notes that `fd` was handed out as an end's readiness descriptor.
    pub(crate) fn note(fd: RawFd) {
        let Some(id) = identity(fd) else { return };
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        seen.get_or_insert_with(HashSet::new).insert(id);
    }

    /// Whether `fd` is (a descriptor of the same pipe as) one `fileno()` handed out.
    pub(crate) fn is_readiness(fd: RawFd) -> bool {
        let Some(id) = identity(fd) else { return false };
        let seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        seen.as_ref().is_some_and(|s| s.contains(&id))
    }
}
