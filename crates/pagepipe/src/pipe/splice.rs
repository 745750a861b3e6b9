//! The splice family: moving bytes between a pipe and a descriptor, or between two pipes,
//! without a user buffer (Linux `splice(2)`, `tee(2)`).
//!
//! Each call is built on the chunk API: [`Reader::read_chunk`] lends the queued bytes in place
//! and [`Writer::write_chunk`] the free slots, so bytes go from a descriptor straight into ring
//! pages (`readv(2)`), from ring pages straight to a descriptor (`writev(2)`), or from one ring's
//! pages into another's (one copy). Linux moves page references where it can (a file's page
//! cache pages into a pipe, a pipe's buffers into another pipe); pagepipe's pages are its own
//! shared memory, so each call copies once, in the kernel or in `memcpy`.
//!
//! The chunk API is pagepipe's `vmsplice(2)`: a writer fills [`crate::WriteChunk`] in place and
//! commits it, and the reader reads those very bytes. It is safe where `vmsplice` is not:
//! vmsplice hands the kernel references to the caller's pages, and a caller that reuses its
//! buffer before the reader consumed them changes what the reader sees; a chunk's pages belong
//! to the ring until committed (writer) or consumed (reader), and the borrow checker keeps the
//! caller's hands off them after that.

use crate::error::invalid;
use crate::pipe::reader::Reader;
use crate::pipe::writer::Writer;
use crate::sys;
use std::io;
use std::os::fd::AsFd;

/// Buffers per `writev` of [`Reader::splice_to`]: 64 slots, 256 KiB of 4 KiB slots.
const IOVS: usize = 64;

impl Reader {
    /// Writes up to `len` queued bytes to `fd` (a file, socket or kernel pipe) straight from
    /// the ring's pages, and consumes what `fd` took; returns that count, 0 at end of file.
    ///
    /// Waits for data as a read does (a non-blocking reader fails with `WouldBlock` instead,
    /// as `SPLICE_F_NONBLOCK` makes splice); whether the write to `fd` may block is `fd`'s own
    /// mode. The read side stays held during the write.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let (mut w, r) = pagepipe::pipe()?;
    /// w.write_all(b"to a socket")?;
    /// let (a, mut b) = std::os::unix::net::UnixStream::pair()?;
    /// assert_eq!(r.splice_to(&a, 100)?, 11);
    /// let mut got = [0u8; 11];
    /// b.read_exact(&mut got)?;
    /// assert_eq!(&got, b"to a socket");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// `fd`'s error from `writev(2)` (nothing is consumed); `WouldBlock`, `TimedOut` as for a
    /// read.
    pub fn splice_to(&self, fd: impl AsFd, len: usize) -> io::Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        let chunk = self.read_chunk()?;
        let n = {
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; IOVS];
            let (mut used, mut left) = (0, len);
            for (p, l) in chunk.raw_runs().take(IOVS) {
                if left == 0 {
                    break;
                }
                let l = l.min(left);
                left -= l;
                iov[used] = libc::iovec {
                    iov_base: p.cast_mut().cast(),
                    iov_len: l,
                };
                used += 1;
            }
            if used == 0 {
                return Ok(0); // end of file
            }
            // SAFETY: each run lies in a slot page of the region, mapped while `chunk` lives;
            // the kernel only reads it (by address: no reference to memory a peer may write).
            unsafe { sys::io::writev_raw(fd.as_fd(), &iov[..used])? }
        };
        chunk.consume(n);
        Ok(n)
    }
}

impl Writer {
    /// Reads up to `len` bytes from `fd` straight into free ring pages and publishes them;
    /// returns the count, 0 when `fd` is at end of file.
    ///
    /// Waits for room as a write does (a non-blocking writer fails with `WouldBlock`
    /// instead); whether the read from `fd` may block is `fd`'s own mode. The write side
    /// stays held during the read. The bytes form whole new slots, as a committed
    /// [`crate::WriteChunk`] does.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let mut file = std::fs::File::open("Cargo.toml")?;
    /// let (w, mut r) = pagepipe::pipe()?;
    /// let n = w.splice_from(&file, 1000)?;
    /// let mut head = vec![0u8; n];
    /// r.read_exact(&mut head)?;
    /// assert!(head.starts_with(b"[package]"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// `fd`'s error from `readv(2)` (nothing is published); `BrokenPipe`, `WouldBlock`,
    /// `TimedOut` as for a write.
    pub fn splice_from(&self, fd: impl AsFd, len: usize) -> io::Result<usize> {
        if len == 0 {
            return Ok(0);
        }
        let chunk = self.write_chunk()?;
        let n = {
            let [(pa, la), (pb, lb)] = chunk.raw_runs();
            let la = la.min(len);
            let lb = lb.min(len - la);
            let iov = [
                libc::iovec {
                    iov_base: pa.cast(),
                    iov_len: la,
                },
                libc::iovec {
                    iov_base: pb.cast(),
                    iov_len: lb,
                },
            ];
            let used = if lb == 0 { 1 } else { 2 };
            // SAFETY: both runs are free slot pages of the region, mapped while `chunk` lives
            // and used by no pagepipe code while it holds the write side; the kernel writes
            // them by address (no reference to memory a peer may touch).
            unsafe { sys::io::readv_raw(fd.as_fd(), &iov[..used])? }
        };
        Ok(chunk.commit(n))
    }
}

/// Moves up to `len` bytes from one pagepipe to another (Linux `splice(2)` between two
/// pipes): one copy from `from`'s ring pages into `to`'s, consuming them from `from`. Returns
/// the count, 0 at `from`'s end of file.
///
/// Waits for data in `from`, then for room in `to`, each unless that end is non-blocking
/// (then `WouldBlock`, as with `SPLICE_F_NONBLOCK`); `from`'s read side stays held while it
/// waits for room.
///
/// ```
/// use std::io::{Read, Write};
/// let (mut w1, r1) = pagepipe::pipe()?;
/// let (w2, mut r2) = pagepipe::pipe()?;
/// w1.write_all(b"moved")?;
/// assert_eq!(pagepipe::splice(&r1, &w2, 64)?, 5);
/// assert!(r1.is_empty());
/// let mut got = [0u8; 5];
/// r2.read_exact(&mut got)?;
/// assert_eq!(&got, b"moved");
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] when both ends belong to the same pipe; `BrokenPipe` when `to` has no reader; `WouldBlock` and `TimedOut`
/// as for a read of `from` or a write to `to`.
pub fn splice(from: &Reader, to: &Writer, len: usize) -> io::Result<usize> {
    transfer(from, to, len, true)
}

/// Copies up to `len` queued bytes from one pagepipe into another without consuming them
/// (Linux `tee(2)`); returns the count, 0 at `from`'s end of file. Blocking, errors: as
/// [`splice`].
///
/// ```
/// use std::io::Write;
/// let (mut w1, r1) = pagepipe::pipe()?;
/// let (w2, r2) = pagepipe::pipe()?;
/// w1.write_all(b"copied")?;
/// assert_eq!(pagepipe::tee(&r1, &w2, 64)?, 6);
/// assert_eq!((r1.len(), r2.len()), (6, 6));
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// As [`splice`].
pub fn tee(from: &Reader, to: &Writer, len: usize) -> io::Result<usize> {
    transfer(from, to, len, false)
}

fn transfer(from: &Reader, to: &Writer, len: usize, consume: bool) -> io::Result<usize> {
    if same_pipe(from, to)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot splice or tee a pipe into itself",
        ));
    }
    if len == 0 {
        return Ok(0);
    }
    let src = from.read_chunk()?;
    if src.is_empty() {
        return Ok(0); // end of file
    }
    let dst = to.write_chunk()?;
    let n = copy_runs(src.raw_runs(), dst.raw_runs(), len);
    let n = dst.commit(n);
    if consume {
        src.consume(n);
    }
    Ok(n)
}

/// Copies the bytes of the runs `src`, in order, into the runs `dst` (the first, then the
/// second), at most `len` of them; returns the count. By address only: both sides are shared
/// memory another process may touch, to which no reference is formed.
fn copy_runs(
    src: impl Iterator<Item = (*const u8, usize)>,
    dst: [(*mut u8, usize); 2],
    len: usize,
) -> usize {
    let mut dst = dst.into_iter().filter(|d| d.1 != 0);
    let (mut out, mut off, mut n) = (dst.next(), 0, 0);
    for (mut p, mut l) in src {
        while l != 0 && n < len {
            let Some((d, dl)) = out else {
                return n;
            };
            let c = l.min(dl - off).min(len - n);
            // SAFETY: `p..p+c` lies in a source run and `d+off..d+off+c` in a destination run
            // (c <= l and off + c <= dl), runs of two different pipes' regions (checked by the
            // caller), so they do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(p, d.add(off), c) };
            // SAFETY: c <= l: still within (or one past) the source run.
            p = unsafe { p.add(c) };
            (l, off, n) = (l - c, off + c, n + c);
            if off == dl {
                (out, off) = (dst.next(), 0);
            }
        }
    }
    n
}

/// Whether two ends belong to the same pipe: the same mapping, or the same memory file
/// mapped twice (an end received back from another process).
fn same_pipe(from: &Reader, to: &Writer) -> io::Result<bool> {
    let (a, b) = (&from.end.shared, &to.end.shared);
    if std::sync::Arc::ptr_eq(a, b) {
        return Ok(true);
    }
    let ida = a
        .region
        .memfd()
        .and_then(sys::memfd::file_id)
        .map_err(|e| invalid(e.to_string()))?;
    let idb = b
        .region
        .memfd()
        .and_then(sys::memfd::file_id)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(ida == idb)
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_copy_across_both_destinations() {
        let src: [&[u8]; 3] = [b"abc", b"", b"defgh"];
        let runs = || src.iter().map(|s| (s.as_ptr(), s.len()));
        let (mut a, mut b) = ([0u8; 3], [0u8; 4]);
        let dst = [(a.as_mut_ptr(), 3), (b.as_mut_ptr(), 4)];
        assert_eq!(super::copy_runs(runs(), dst, 6), 6);
        assert_eq!((&a, &b[..3]), (b"abc", &b"def"[..]));
        let (mut a, mut b) = ([0u8; 2], [0u8; 0]);
        let dst = [(a.as_mut_ptr(), 2), (b.as_mut_ptr(), 0)];
        assert_eq!(super::copy_runs(runs(), dst, 99), 2);
    }
}
