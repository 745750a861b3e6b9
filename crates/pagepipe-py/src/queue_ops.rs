//! `pagepipe.Queue`'s `put` and `get` as native methods (`_QueueOps`): a queue binds them as
//! its instance's `put` and `get` (unless a subclass overrides them), so that a small
//! object's `put` or `get` runs no Python-level frame at all. They do what
//! `Queue.put`/`Queue.get` in `python/pagepipe/queues.py` do, step for step (the semaphore,
//! the closed check, the hand-off to the feeder thread, the report of an object that cannot be
//! pickled); the rare paths call back into the queue (`_to_feeder`, `_report`, `repr`).

use crate::reader::{full_error, PyReader};
use crate::writer::PyWriter;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::{PyTraverseError, PyVisit};
use std::sync::atomic::{AtomicBool, Ordering};

/// One queue's hot paths, and the two flags they read.
#[pyclass(module = "pagepipe._native", name = "_QueueOps")]
pub(crate) struct QueueOps {
    /// A `weakref.ref` to the `pagepipe.Queue`, for the rare paths. Weak: the queue holds
    /// us (and our bound put and get), and a strong reference back would make a cycle that
    /// only the collector frees, keeping a dropped queue's descriptors open until it runs.
    queue: Option<Py<PyAny>>,
    data_w: Py<PyWriter>,
    data_r: Py<PyReader>,
    lock_w: Py<PyWriter>,
    lock_r: Py<PyReader>,
    acquire: Py<PyAny>,
    release: Py<PyAny>,
    /// The feeder thread's buffer (a `collections.deque`), and its bound `append`.
    buffer: Py<PyAny>,
    append: Py<PyAny>,
    /// The queue's `threading.Lock` (bound `acquire` and `release`), and the bound `notify` of
    /// the condition over it that the feeder thread waits on.
    lock_acquire: Py<PyAny>,
    lock_release: Py<PyAny>,
    notify: Py<PyAny>,
    // The flags below are read and written with the GIL held (our methods, and the feeder's
    // Python code through their setters), which already orders them; SeqCst keeps them
    // ordered by themselves too, at no cost on the paths that read them (x86 loads).
    /// The feeder thread holds messages it took from the buffer and has not written yet.
    feeding: AtomicBool,
    /// The feeder thread is started (the queue's `_start_thread` ran).
    feeder_started: AtomicBool,
    /// The feeder thread waits on the condition (set and cleared under the lock).
    feeder_waiting: AtomicBool,
    /// `close()` was called.
    closed: AtomicBool,
}

impl QueueOps {
    fn queue<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let gone = || PyValueError::new_err("the queue is gone");
        let queue = self.queue.as_ref().ok_or_else(gone)?.bind(py).call0()?;
        if queue.is_none() {
            return Err(gone());
        }
        Ok(queue)
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        match self.queue(py).and_then(|q| q.repr()) {
            Ok(r) => PyValueError::new_err(format!("Queue {r} is closed")),
            Err(e) => e,
        }
    }

    /// `put` after the place is taken: whether the message is now in the pipe or the
    /// feeder's buffer, and the error to raise, if any.
    fn hand_over(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> (bool, Option<PyErr>) {
        // The buffer first, then the flag: the feeder raises the flag before it takes from
        // the buffer, so an empty buffer seen here with the flag down means that nothing of
        // this process's is waiting to be written (a put must not overtake it).
        let direct = match self.buffer.bind(py).is_truthy() {
            // SeqCst: see the flags' note on `QueueOps`.
            Ok(b) => !b && !self.feeding.load(Ordering::SeqCst),
            Err(e) => return (false, Some(e)),
        };
        let w = self.data_w.get();
        let lock = self.lock_w.get();
        match w.put_obj(py, lock, obj, direct) {
            Ok(None) => (true, None),
            Ok(Some(data)) => self.to_feeder(py, data),
            Err(e) if e.is_instance_of::<PyException>(py) => {
                // As multiprocessing's feeder reports an object it cannot pickle.
                let reported = self
                    .queue(py)
                    .and_then(|q| q.call_method1("_report", (e.into_value(py), obj)));
                (false, reported.err())
            }
            Err(e) => (false, Some(e)),
        }
    }
}

impl QueueOps {
    /// Hands `data` to the feeder thread, as the queue's `_to_feeder` does, without a
    /// Python-level frame once the thread runs: under the queue's lock, appended to the
    /// buffer, and the feeder notified if it waits. Whether it was appended, and the error
    /// to raise, if any (a signal handler's in the lock's `acquire`, or in `notify` once
    /// appended).
    fn to_feeder(&self, py: Python<'_>, data: Bound<'_, PyAny>) -> (bool, Option<PyErr>) {
        // SeqCst: see the flags' note on `QueueOps`.
        if !self.feeder_started.load(Ordering::SeqCst) {
            let handed = PyList::new(py, [data])
                .and_then(|list| self.queue(py)?.call_method1("_to_feeder", (list,)));
            return match handed {
                Ok(_) => (true, None),
                Err(e) => (false, Some(e)),
            };
        }
        if let Err(e) = self.lock_acquire.call0(py) {
            return (false, Some(e));
        }
        let appended = self.append.call1(py, (data,)).map(drop);
        let notified = match appended {
            // SeqCst: see the flags' note on `QueueOps`.
            Ok(()) if self.feeder_waiting.load(Ordering::SeqCst) => self.notify.call0(py).map(drop),
            _ => Ok(()),
        };
        let released = self.lock_release.call0(py).map(drop);
        let ok = appended.is_ok();
        (ok, appended.and(notified).and(released).err())
    }
}

#[pymethods]
impl QueueOps {
    /// The queue's parts, as `pagepipe.Queue._reset` hands them over.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        queue: Py<PyAny>,
        data_w: Py<PyWriter>,
        data_r: Py<PyReader>,
        lock_w: Py<PyWriter>,
        lock_r: Py<PyReader>,
        sem: &Bound<'_, PyAny>,
        buffer: &Bound<'_, PyAny>,
        lock: &Bound<'_, PyAny>,
        notempty: &Bound<'_, PyAny>,
    ) -> PyResult<QueueOps> {
        let weak = sem
            .py()
            .import("weakref")?
            .getattr("ref")?
            .call1((queue,))?;
        Ok(QueueOps {
            queue: Some(weak.unbind()),
            data_w,
            data_r,
            lock_w,
            lock_r,
            acquire: sem.getattr("acquire")?.unbind(),
            release: sem.getattr("release")?.unbind(),
            buffer: buffer.clone().unbind(),
            append: buffer.getattr("append")?.unbind(),
            lock_acquire: lock.getattr("acquire")?.unbind(),
            lock_release: lock.getattr("release")?.unbind(),
            notify: notempty.getattr("notify")?.unbind(),
            feeding: AtomicBool::new(false),
            feeder_started: AtomicBool::new(false),
            feeder_waiting: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        })
    }

    /// `pagepipe.Queue.put` (see its docstring).
    #[pyo3(signature = (obj, block = None, timeout = None),
           text_signature = "($self, obj, block=True, timeout=None)")]
    fn put(
        &self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        block: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        // SeqCst: see the flags' note on `QueueOps`.
        if self.closed.load(Ordering::SeqCst) {
            return Err(self.closed_error(py));
        }
        let got = match (block, timeout) {
            (None, None) => self.acquire.call0(py)?,
            (b, t) => {
                let b = match b {
                    Some(b) => b.clone(),
                    None => pyo3::types::PyBool::new(py, true).to_owned().into_any(),
                };
                self.acquire.call1(py, (b, t))?
            }
        };
        if !got.is_truthy(py)? {
            return Err(full_error(py));
        }
        // The place taken is given back unless the message is in the pipe or the feeder's
        // buffer, whatever the error (KeyboardInterrupt included).
        let (queued, err) = self.hand_over(py, obj);
        if !queued {
            self.release.call0(py)?;
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `pagepipe.Queue.get` (see its docstring).
    #[pyo3(signature = (block = None, timeout = None),
           text_signature = "($self, block=True, timeout=None)")]
    fn get<'py>(
        &self,
        py: Python<'py>,
        block: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // SeqCst: see the flags' note on `QueueOps`.
        if self.closed.load(Ordering::SeqCst) {
            return Err(self.closed_error(py));
        }
        let timeout = match (block, timeout) {
            (Some(b), _) if !b.is_truthy()? => Some(0.0),
            (_, None) => None,
            (_, Some(t)) => Some(t.extract::<f64>()?).map(|t| if t < 0.0 { 0.0 } else { t }),
        };
        let release = self.release.bind(py);
        let r = self.data_r.get();
        let mut got = r.get_objs(
            py,
            self.lock_r.get(),
            self.lock_w.get(),
            timeout,
            release,
            1,
        )?;
        Ok(got.pop().expect("get_objs returns at least one object"))
    }

    /// Whether the feeder thread holds messages it has not written yet.
    #[getter]
    fn get_feeding(&self) -> bool {
        // SeqCst: see the flags' note on `QueueOps`.
        self.feeding.load(Ordering::SeqCst)
    }

    #[setter]
    fn set_feeding(&self, v: bool) {
        // SeqCst: see the flags' note on `QueueOps`.
        self.feeding.store(v, Ordering::SeqCst);
    }

    /// Whether the feeder thread is started.
    #[getter]
    fn get_feeder_started(&self) -> bool {
        // SeqCst: see the flags' note on `QueueOps`.
        self.feeder_started.load(Ordering::SeqCst)
    }

    #[setter]
    fn set_feeder_started(&self, v: bool) {
        // SeqCst: see the flags' note on `QueueOps`.
        self.feeder_started.store(v, Ordering::SeqCst);
    }

    /// Whether the feeder thread waits on the condition (set and cleared under the lock).
    #[getter]
    fn get_feeder_waiting(&self) -> bool {
        // SeqCst: see the flags' note on `QueueOps`.
        self.feeder_waiting.load(Ordering::SeqCst)
    }

    #[setter]
    fn set_feeder_waiting(&self, v: bool) {
        // SeqCst: see the flags' note on `QueueOps`.
        self.feeder_waiting.store(v, Ordering::SeqCst);
    }

    /// Whether `close()` was called.
    #[getter]
    fn get_closed(&self) -> bool {
        // SeqCst: see the flags' note on `QueueOps`.
        self.closed.load(Ordering::SeqCst)
    }

    #[setter]
    fn set_closed(&self, v: bool) {
        // SeqCst: see the flags' note on `QueueOps`.
        self.closed.store(v, Ordering::SeqCst);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(q) = &self.queue {
            visit.call(q)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.queue = None;
    }
}
