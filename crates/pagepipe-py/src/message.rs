//! Whole messages over a byte-stream pipe, for `pagepipe.Connection`: a length header, then
//! the bytes, as `multiprocessing.connection.Connection` frames them (its header is 4 bytes,
//! big-endian; ours is 4 bytes little-endian, or `u32::MAX` and 8 more bytes for a message of
//! 4 GiB or more). One process (or thread) at a time per end, as for multiprocessing's: two
//! concurrent writers of messages larger than `PIPE_BUF` interleave.

use crate::wait::{deadline, interruptible, interruptible_until};
use pagepipe::{Reader, Writer};
use pyo3::exceptions::{PyEOFError, PyOSError};
use pyo3::prelude::*;

/// The 4-byte length that says "an 8-byte length follows".
const LONG: u32 = u32::MAX;
/// A message up to this size is sent with its header in one write (one copy more, one
/// wake-up less; atomic up to `PIPE_BUF` in all).
const JOIN_BELOW: usize = 64 * 1024;

/// The header of a message of `len` bytes, and how many of its 12 bytes are used.
fn header(len: usize) -> ([u8; 12], usize) {
    let mut h = [0u8; 12];
    match u32::try_from(len) {
        Ok(n) if n != LONG => {
            h[..4].copy_from_slice(&n.to_le_bytes());
            (h, 4)
        }
        _ => {
            h[..4].copy_from_slice(&LONG.to_le_bytes());
            h[4..].copy_from_slice(&(len as u64).to_le_bytes());
            (h, 12)
        }
    }
}

/// Writes one whole message (`bytes` after its header); raises what `write` raises.
pub(crate) fn send(py: Python<'_>, w: &Writer, bytes: &[u8]) -> PyResult<()> {
    let (h, hlen) = header(bytes.len());
    if bytes.len() < JOIN_BELOW {
        let mut joined = Vec::with_capacity(hlen + bytes.len());
        joined.extend_from_slice(&h[..hlen]);
        joined.extend_from_slice(bytes);
        return write_all(py, w, &joined);
    }
    write_all(py, w, &h[..hlen])?;
    write_all(py, w, bytes)
}

/// All of `bytes`, or the error that stopped it (a blocking end only returns short on one).
fn write_all(py: Python<'_>, w: &Writer, bytes: &[u8]) -> PyResult<()> {
    let mut done = 0;
    // The end's write timeout bounds the whole message, as the deadline of one `write` does.
    let until = deadline(w.write_timeout().map_err(crate::error::to_py)?);
    while done < bytes.len() {
        match interruptible_until(py, until, |limit| w.write_deadline(&bytes[done..], limit))? {
            Ok(n) => done += n,
            Err(e) => return Err(crate::error::to_py(e)),
        }
        if done < bytes.len() {
            py.check_signals()?;
        }
    }
    Ok(())
}

/// Reads into all of `buf`, or until end of file; returns the count read.
pub(crate) fn read_exact(py: Python<'_>, r: &Reader, buf: &mut [u8]) -> PyResult<usize> {
    let mut got = 0;
    let timeout = r.read_timeout().map_err(crate::error::to_py)?;
    while got < buf.len() {
        let rest = crate::buffer::Raw {
            ptr: buf[got..].as_mut_ptr(),
            len: buf.len() - got,
        };
        let n = interruptible(py, timeout, move |limit| {
            // SAFETY: `rest` is the unread tail of `buf`, borrowed mutably by this call for
            // as long as the closure runs (it returns before `interruptible` does).
            let dst = unsafe { rest.bytes_mut() };
            r.read_deadline(dst, limit)
        })?
        .map_err(crate::error::to_py)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// The next message's length: `None` at end of file before it (multiprocessing raises
/// `EOFError` then); `OSError` if the file ends inside the header.
pub(crate) fn recv_len(py: Python<'_>, r: &Reader) -> PyResult<Option<usize>> {
    let mut h = [0u8; 4];
    match read_exact(py, r, &mut h)? {
        0 => return Ok(None),
        4 => {}
        _ => return Err(eof_inside()),
    }
    let n = u32::from_le_bytes(h);
    if n != LONG {
        return Ok(Some(n as usize));
    }
    let mut l = [0u8; 8];
    if read_exact(py, r, &mut l)? != 8 {
        return Err(eof_inside());
    }
    usize::try_from(u64::from_le_bytes(l))
        .map(Some)
        .map_err(|_| PyOSError::new_err("bad message length"))
}

/// `OSError`, as multiprocessing raises when the file ends inside a message.
pub(crate) fn eof_inside() -> PyErr {
    PyOSError::new_err("got end of file during message")
}

/// `EOFError`, at end of file between messages.
pub(crate) fn eof() -> PyErr {
    PyEOFError::new_err("end of file: no writer is left")
}

/// `n` bytes of a message into `dst` (all of it must come: `OSError` otherwise).
pub(crate) fn recv_body(py: Python<'_>, r: &Reader, dst: &mut [u8]) -> PyResult<()> {
    if read_exact(py, r, dst)? != dst.len() {
        return Err(eof_inside());
    }
    Ok(())
}
