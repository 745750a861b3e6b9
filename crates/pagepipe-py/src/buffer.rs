//! The buffer protocol, borrowed without a copy: any C-contiguous buffer (`bytes`,
//! `bytearray`, `memoryview`, `array`, numpy arrays, `mmap`), read-only for writes and
//! writable for `readinto`, as `os.write` and `os.readv` accept.

use pyo3::ffi;
use pyo3::prelude::*;

/// A borrowed buffer; released (with the GIL held) when dropped.
pub(crate) struct Buffer {
    view: Box<ffi::Py_buffer>,
}

/// The bytes of a [`Buffer`], to use while the GIL is released. The object keeps the memory
/// alive and in place while the buffer is held (PEP 3118: the exporter may not resize or move
/// it until released), so the pointer may cross into a thread without the GIL.
pub(crate) struct Raw {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: `Raw` is only a pointer and a length into memory pinned by a held buffer (see
// above); the code that uses it without the GIL touches nothing else of Python's.
unsafe impl Send for Raw {}

impl Buffer {
    /// Borrows `obj`'s buffer, writable if `writable` (`TypeError` if it has none, or a
    /// read-only one when writable is asked, or is not contiguous, as CPython raises).
    pub(crate) fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Buffer> {
        // SAFETY: an all-zero Py_buffer is a valid blank for PyObject_GetBuffer to fill.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        let flags = if writable {
            ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_SIMPLE
        };
        // SAFETY: `obj` is a live object (we hold it with the GIL), `view` a writable
        // Py_buffer; on success we own the view until PyBuffer_Release in Drop.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            let err = PyErr::fetch(obj.py());
            if writable && err.is_instance_of::<pyo3::exceptions::PyBufferError>(obj.py()) {
                // What CPython's "w*" argument parsing (FileIO.readinto) raises.
                let kind = obj
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "readinto() argument must be read-write bytes-like object, not {kind}"
                )));
            }
            return Err(err);
        }
        Ok(Buffer { view })
    }

    /// The buffer's bytes.
    pub(crate) fn raw(&self) -> Raw {
        Raw {
            ptr: self.view.buf.cast(),
            len: self.view.len as usize,
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // Buffers are dropped by the methods that took them, with the GIL held.
        // SAFETY: the view was filled by a successful PyObject_GetBuffer and is released once.
        unsafe { ffi::PyBuffer_Release(&mut *self.view) };
    }
}

impl Raw {
    /// The bytes, read-only.
    ///
    /// # Safety
    /// The buffer this came from is still held.
    pub(crate) unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the held buffer's memory, `len` bytes, pinned while held (caller's promise).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable.
    ///
    /// # Safety
    /// The buffer this came from is still held, was taken writable, and nothing else writes
    /// or reads it meanwhile (Python code may race on it, as with `os.readv`, but Rust code
    /// here does not).
    pub(crate) unsafe fn bytes_mut<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the held writable buffer's memory, `len` bytes (caller's promise).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}
