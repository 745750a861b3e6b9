//! `pagepipe.Queue`'s pickling and unpickling, called from native code so that a `put` or a
//! `get` of a small object is one call from Python, not several (each Python-level step of
//! the old `put` — a pickling helper, its `BytesIO`, a condition, a message id — cost more
//! than the native write of the message).
//!
//! - [`dumps`]: pickles as `multiprocessing.reduction.ForkingPickler.dumps` does (its
//!   reducers for connections, sockets, pagepipe ends), with one pickler per thread, kept
//!   between calls: `pagepipe._pickle._new_sink_pickler()` makes it, a `pickle.Pickler`
//!   subclass whose file's `write` is a list's `append`, so a small object's pickle is the
//!   one `bytes` the pickler hands to it, taken as is, and a large one's is a tuple of parts
//!   (its payloads not copied), which the queue writes as one message.
//! - Message ids: unique among live writers, this process's id and a counter.
//! - [`loads`]: `pickle.loads`, as `ForkingPickler.loads` is.

use crate::buffer::Buffer;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A thread's pickler: its bound `dump` and `clear_memo`, and the list its file appends to.
struct Sink {
    dump: Py<PyAny>,
    clear_memo: Py<PyAny>,
    out: Py<PyList>,
}

thread_local! {
    /// This thread's pickler, taken out while in use (a `__reduce__` that pickles again on
    /// this thread finds none and makes its own).
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

fn new_sink(py: Python<'_>) -> PyResult<Sink> {
    let made = py
        .import("pagepipe._pickle")?
        .call_method0("_new_sink_pickler")?;
    let (pickler, out): (Bound<'_, PyAny>, Bound<'_, PyList>) = made.extract()?;
    Ok(Sink {
        dump: pickler.getattr("dump")?.unbind(),
        clear_memo: pickler.getattr("clear_memo")?.unbind(),
        out: out.unbind(),
    })
}

/// `obj` pickled as `ForkingPickler.dumps(obj)` pickles it: a `bytes`, or a tuple of `bytes`
/// parts (see [`joined`]) that are the pickle one after another.
pub(crate) fn dumps<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let sink = match SINK.with(|s| s.borrow_mut().take()) {
        Some(s) => s,
        None => new_sink(py)?,
    };
    let out = sink.out.bind(py);
    let dumped = sink.dump.call1(py, (obj,));
    let data = dumped.and_then(|_| joined(py, out));
    // Whatever happened: an empty list and memo (the memo would keep the objects alive).
    let cleared = out
        .del_slice(0, usize::MAX)
        .and_then(|()| sink.clear_memo.call0(py).map(drop));
    SINK.with(|s| *s.borrow_mut() = Some(sink));
    let data = data?;
    cleared?;
    Ok(data)
}

/// What the pickler wrote: its one `bytes` as is; a large object's parts (its frames, and
/// the large payloads the pickler writes on their own, not copied) as a tuple when all are
/// `bytes` (immutable: the message may wait in the feeder thread's buffer); else joined.
fn joined<'py>(py: Python<'py>, out: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyAny>> {
    if out.len() == 1 {
        let one = out.get_item(0)?;
        if one.is_exact_instance_of::<PyBytes>() {
            return Ok(one);
        }
    } else if out.iter().all(|p| p.is_exact_instance_of::<PyBytes>()) {
        return Ok(out.to_tuple().into_any());
    }
    let parts = out
        .iter()
        .map(|p| Buffer::get(&p, false))
        .collect::<PyResult<Vec<_>>>()?;
    let total = parts.iter().map(|b| b.raw().len).sum();
    let whole = PyBytes::new_with(py, total, |dst| {
        let mut at = 0;
        for p in &parts {
            // SAFETY: `parts` holds each buffer (its memory pinned) until after this returns.
            let src = unsafe { p.raw().bytes() };
            dst[at..at + src.len()].copy_from_slice(src);
            at += src.len();
        }
        Ok(())
    })?;
    Ok(whole.into_any())
}

/// This process's id once read (0: not yet, or forked since).
static PID: AtomicU32 = AtomicU32::new(0);
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Called in a forked child (`os.register_at_fork`): its id is its own.
pub(crate) fn forked() {
    PID.store(0, Ordering::Relaxed);
}

/// A message id unique among live writers: this process's id and a counter.
pub(crate) fn message_id() -> u64 {
    let mut pid = PID.load(Ordering::Relaxed);
    if pid == 0 {
        pid = std::process::id();
        PID.store(pid, Ordering::Relaxed);
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) & 0xFFFF_FFFF;
    (u64::from(pid) << 32) | n
}

/// `pickle.loads` (what `ForkingPickler.loads` is).
pub(crate) fn loads<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = LOADS.get_or_try_init(py, || {
        py.import("multiprocessing.reduction")?
            .getattr("ForkingPickler")?
            .getattr("loads")
            .map(Bound::unbind)
    })?;
    if data.len() < VIEW_FROM {
        return f
            .call1(py, (PyBytes::new(py, data),))
            .map(|o| o.into_bound(py));
    }
    // A large message is unpickled from a memoryview of `data` (no copy into a new bytes,
    // whose fresh pages fault in on every call), released before `data` can change: the
    // unpickler keeps no reference to its input once it returns, and a released view
    // refuses any access, so nothing can see `data` afterwards.
    let len = pyo3::ffi::Py_ssize_t::try_from(data.len())
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("message too long"))?;
    // SAFETY: a read-only view of `data`, which outlives it: released below before returning.
    let view = unsafe {
        let p = pyo3::ffi::PyMemoryView_FromMemory(
            data.as_ptr().cast_mut().cast(),
            len,
            pyo3::ffi::PyBUF_READ,
        );
        Bound::from_owned_ptr_or_err(py, p)?
    };
    let obj = f.call1(py, (&view,)).map(|o| o.into_bound(py));
    view.call_method0("release")?;
    obj
}

/// Messages from this size are unpickled from a view, not a copy.
const VIEW_FROM: usize = 64 << 10;
