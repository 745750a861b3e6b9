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
    /// The `pagepipe.Queue` (for the rare paths; a cycle the GC sees through `__traverse__`).
    queue: Option<Py<PyAny>>,
    data_w: Py<PyWriter>,
    data_r: Py<PyReader>,
    lock_w: Py<PyWriter>,
    lock_r: Py<PyReader>,
    acquire: Py<PyAny>,
    release: Py<PyAny>,
    /// The feeder thread's buffer (a `collections.deque`).
    buffer: Py<PyAny>,
    /// The feeder thread holds messages it took from the buffer and has not written yet.
    feeding: AtomicBool,
    /// `close()` was called.
    closed: AtomicBool,
}

impl QueueOps {
    fn queue<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.queue
            .as_ref()
            .map(|q| q.bind(py).clone())
            .ok_or_else(|| PyValueError::new_err("the queue is gone"))
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        match self.queue(py).and_then(|q| q.repr()) {
            Ok(r) => PyValueError::new_err(format!("Queue {r} is closed")),
            Err(e) => e,
        }
    }

    /// `put` after the place is taken: `Ok(true)` once the message is in the pipe or the
    /// feeder's buffer, `Ok(false)` if it is not (reported: an object that cannot be pickled).
    fn hand_over(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
        // The buffer first, then the flag: the feeder raises the flag before it takes from
        // the buffer, so an empty buffer seen here with the flag down means that nothing of
        // this process's is waiting to be written (a put must not overtake it).
        let direct = !self.buffer.bind(py).is_truthy()? && !self.feeding.load(Ordering::SeqCst);
        let w = self.data_w.get();
        let lock = self.lock_w.get();
        match w.put_obj(py, lock, obj, direct) {
            Ok(None) => Ok(true),
            Ok(Some(data)) => {
                let list = PyList::new(py, [data])?;
                self.queue(py)?.call_method1("_to_feeder", (list,))?;
                Ok(true)
            }
            Err(e) if e.is_instance_of::<PyException>(py) => {
                self.queue(py)?.call_method1("_report", (e.into_value(py), obj))?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

#[pymethods]
impl QueueOps {
    #[new]
    fn new(
        queue: Py<PyAny>,
        data_w: Py<PyWriter>,
        data_r: Py<PyReader>,
        lock_w: Py<PyWriter>,
        lock_r: Py<PyReader>,
        sem: &Bound<'_, PyAny>,
        buffer: Py<PyAny>,
    ) -> PyResult<QueueOps> {
        Ok(QueueOps {
            queue: Some(queue),
            data_w,
            data_r,
            lock_w,
            lock_r,
            acquire: sem.getattr("acquire")?.unbind(),
            release: sem.getattr("release")?.unbind(),
            buffer,
            feeding: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        })
    }

    /// `pagepipe.Queue.put` (see its docstring).
    #[pyo3(signature = (obj, block = None, timeout = None))]
    fn put(
        &self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        block: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
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
        match self.hand_over(py, obj) {
            Ok(true) => Ok(()),
            Ok(false) => self.release.call0(py).map(drop),
            Err(e) => {
                self.release.call0(py)?;
                Err(e)
            }
        }
    }

    /// `pagepipe.Queue.get` (see its docstring).
    #[pyo3(signature = (block = None, timeout = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        block: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
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
        let mut got = r.get_objs(py, self.lock_r.get(), self.lock_w.get(), timeout, release, 1)?;
        Ok(got.pop().expect("get_objs returns at least one object"))
    }

    /// Whether the feeder thread holds messages it has not written yet.
    #[getter]
    fn get_feeding(&self) -> bool {
        self.feeding.load(Ordering::SeqCst)
    }

    #[setter]
    fn set_feeding(&self, v: bool) {
        self.feeding.store(v, Ordering::SeqCst);
    }

    /// Whether `close()` was called.
    #[getter]
    fn get_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    #[setter]
    fn set_closed(&self, v: bool) {
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
