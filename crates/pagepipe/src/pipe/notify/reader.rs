//! The reading end of a notification pipe: whole records, Linux's `read(2)` on a watch queue.

use super::record::{set_filters, Filter, Notification, HEADER, MAX_FILTERS, RECORD_MAX};
use crate::error::{buffer_too_small, invalid, would_block};
use crate::lock;
use crate::pipe::end::End;
use crate::pipe::shared::{ReadGuard, Ring, Shared};
use crate::region::{Side, DROPPED, END_MASK, LOSS, RELEASED};
use crate::sync::{Arc, Ordering};
use std::io;
use std::time::Duration;

/// Reads whole records into `buf` (at most `max_records` of them), as `read(2)` on a Linux
/// notification pipe: the LOSS record after a flagged one, [`buffer_too_small`] (Linux:
/// `ENOBUFS`) if the next record does not fit an empty buffer, end of file once no notifier is
/// left.
fn read(r: &End, buf: &mut [u8], nonblocking: bool, max_records: usize) -> io::Result<usize> {
    let sh = &*r.shared;
    let deadline = sh.deadline(Side::Read);
    loop {
        let eof = r.peer_gone(nonblocking);
        let mut rs = sh.lock_read(sh.lock_wait(nonblocking, deadline))?;
        let n = read_records(sh, &mut rs, buf, max_records)?;
        drop(rs);
        if n > 0 {
            r.sync();
            return Ok(n);
        }
        if eof {
            return Ok(0); // seeing no notifier meant seeing every record they posted
        }
        if nonblocking {
            return Err(would_block());
        }
        r.wait_readable(deadline)?;
    }
}

/// The body of [`read`], with the read side held.
fn read_records(
    sh: &Shared,
    rs: &mut ReadGuard<'_>,
    buf: &mut [u8],
    max_records: usize,
) -> io::Result<usize> {
    let h = sh.header();
    // Borrows the region, not the guard, whose indices we move below.
    let ring = Ring::new(&sh.region, rs.ring_size);
    if ring.size != sh.config().notes {
        return Err(invalid(format!(
            "a notification ring of {} slots, made with {}",
            ring.size,
            sh.config().notes
        )));
    }
    let (mut n, mut records) = (0, 0);
    while records < max_records {
        if h.note_loss.load(Ordering::Relaxed) != 0 {
            if buf.len() - n < HEADER {
                return if n == 0 {
                    Err(buffer_too_small(buf.len(), HEADER))
                } else {
                    Ok(n)
                };
            }
            buf[n..n + HEADER].copy_from_slice(&Notification::loss().to_bytes());
            h.note_loss.store(0, Ordering::Relaxed);
            (n, records) = (n + HEADER, records + 1);
            continue;
        }
        // (The Acquire load pairs with the poster's Release head RMW, publishing the record.)
        let head = sh.load_head(rs.tail, ring.size)?;
        rs.cached_head = head;
        if head == rs.tail {
            break;
        }
        let (pos, slot) = ring.slot(rs.tail);
        // Relaxed: the head Acquire above ordered the poster's state store before us.
        let mut st = slot.state.load(Ordering::Relaxed);
        let len = (st & END_MASK) as usize;
        if st & (RELEASED | DROPPED) != 0 || !(HEADER..=RECORD_MAX).contains(&len) {
            return Err(invalid(format!(
                "notification slot {} has state {st:#x}",
                rs.tail
            )));
        }
        if len > buf.len() - n {
            return if n == 0 {
                Err(buffer_too_small(buf.len(), len))
            } else {
                Ok(n)
            };
        }
        // SAFETY: len <= 127 bytes at the start of a published slot's page (inside it), copied
        // raw from shared memory into `buf[n..n + len]` (checked to fit), which cannot overlap
        // the region's mapping.
        unsafe { std::ptr::copy_nonoverlapping(ring.page(pos), buf[n..].as_mut_ptr(), len) };
        // Only the reader makes LOSS records: `post` refuses meta records, so one in a slot was
        // written there by a peer, and passing it on would report a loss that never happened.
        // The records already copied out this call are consumed: return them first, and the
        // error at the next read (which finds this record again).
        if Notification::is_meta_word(&buf[n..n + len]) {
            return if n == 0 {
                Err(invalid(format!(
                    "notification slot {} holds a meta record no notifier can post",
                    rs.tail
                )))
            } else {
                Ok(n)
            };
        }
        // Relaxed: decides only between us and a poster's LOSS CAS on this word; the poster
        // reuses the slot only after our Release tail RMW below.
        while let Err(now) =
            slot.state
                .compare_exchange(st, st | RELEASED, Ordering::Relaxed, Ordering::Relaxed)
        {
            st = now;
        }
        if st & LOSS != 0 {
            h.note_loss.store(1, Ordering::Relaxed);
        }
        let out = &h.tail.bytes;
        out.store(
            out.load(Ordering::Relaxed).wrapping_add(len as u64),
            Ordering::Relaxed,
        );
        sh.advance_tail(1);
        rs.tail += 1;
        (n, records) = (n + len, records + 1);
    }
    Ok(n)
}

/// The reading end of a notification pipe (see [`crate::Builder::notifications`]).
///
/// As on a Linux notification pipe, `read` returns whole records in Linux's byte layout
/// ([`Notification::to_bytes`]) and fails when the buffer cannot hold the next one (Linux:
/// `ENOBUFS`; here [`io::ErrorKind::InvalidInput`], a kind a caller can match: a 127-byte
/// buffer always fits); a LOSS record (8 bytes, kind 0, subtype 1) follows the records queued
/// when posts were lost; reading returns end of file (`Ok(0)`) once the pipe is empty and no
/// notifier is left ([`NotificationReader::next_notification`] says `Ok(None)`).
/// A notification pipe takes no data: it has no chunk API, no splice family and no resize (what
/// Linux answers with `EXDEV` and `EBUSY` does not compile here):
///
/// ```compile_fail,E0599
/// let (_n, r) = pagepipe::Builder::new().notifications(4).build()?;
/// r.read_chunk()?; // no such method on a notification reader
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// ```compile_fail,E0308
/// let (_n, r) = pagepipe::Builder::new().notifications(4).build()?;
/// let (w, _r) = pagepipe::pipe()?;
/// pagepipe::splice(&r, &w, 10)?; // splice takes a data pipe's Reader
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// ```compile_fail,E0599
/// let (_n, r) = pagepipe::Builder::new().notifications(4).build()?;
/// r.set_capacity(1 << 20)?; // a notification pipe is not resized
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// Cloning it is like `dup(2)`ing the read descriptor; notifiers get `BrokenPipe` once the last
/// clone is dropped in every process.
pub struct NotificationReader {
    pub(crate) end: Arc<End>,
}

impl NotificationReader {
    /// Switches this end to non-blocking mode or back, for every holder of it: a read of an
    /// empty pipe then fails with [`io::ErrorKind::WouldBlock`] while notifiers exist.
    ///
    /// # Errors
    /// None today; the `Result` matches [`crate::Reader::set_nonblocking`].
    ///
    /// # Examples
    ///
    /// ```
    /// let (_n, mut r) = pagepipe::Builder::new().notifications(4).build()?;
    /// r.set_nonblocking(true)?;
    /// assert!(r.is_nonblocking());
    /// assert_eq!(r.next_notification().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.end.set_nonblocking(nonblocking);
        Ok(())
    }

    /// Whether reads are non-blocking.
    ///
    /// # Examples
    /// See [`NotificationReader::set_nonblocking`].
    pub fn is_nonblocking(&self) -> bool {
        self.end.is_nonblocking()
    }

    /// Bounds how long a read waits for a record or for the read side; `None` waits forever.
    /// An expired wait is [`io::ErrorKind::TimedOut`]. Shared by every holder of this end.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for `Some(Duration::ZERO)`, as for sockets.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_n, mut r) = pagepipe::Builder::new().notifications(4).build()?;
    /// r.set_read_timeout(Some(Duration::from_millis(10)))?;
    /// assert_eq!(r.read_timeout()?, Some(Duration::from_millis(10)));
    /// assert_eq!(r.next_notification().unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.end.set_timeout(timeout)
    }

    /// The read timeout set by [`NotificationReader::set_read_timeout`].
    ///
    /// # Errors
    /// None today; the `Result` matches [`crate::Reader::read_timeout`].
    ///
    /// # Examples
    /// See [`NotificationReader::set_read_timeout`].
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.end.timeout())
    }

    /// Records the pipe holds (a power of two), as [`crate::Notifier::capacity`].
    ///
    /// # Examples
    ///
    /// ```
    /// use pagepipe::{Builder, Notification};
    /// let (n, r) = Builder::new().notifications(5).build()?;
    /// assert_eq!(r.capacity(), 8); // rounded up to a power of two
    /// assert!(r.is_empty());
    /// n.post(&Notification { kind: 1, payload: b"abc".to_vec(), ..Default::default() })?;
    /// assert_eq!(r.len(), 11); // one record of 8 + 3 bytes
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.end.shared.config().notes
    }

    /// Bytes of records queued, without taking a lock: a snapshot.
    ///
    /// # Examples
    /// See [`NotificationReader::capacity`].
    pub fn len(&self) -> usize {
        self.end.shared.queued_bytes()
    }

    /// True when no record is queued (see [`NotificationReader::len`]).
    ///
    /// # Examples
    /// See [`NotificationReader::capacity`].
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl NotificationReader {
    /// Reads one record: the next queued one, or the LOSS record ([`Notification::is_loss`])
    /// where records were lost; `Ok(None)` at the end of the stream (the pipe is empty and no
    /// notifier is left in any process). Blocks while the pipe is empty and notifiers exist.
    ///
    /// ```
    /// use pagepipe::{Builder, Notification};
    /// let (notifier, mut reader) = Builder::new().notifications(8).build()?;
    /// notifier.post(&Notification { kind: 1, payload: b"hi".to_vec(), ..Default::default() })?;
    /// drop(notifier);
    /// while let Some(n) = reader.next_notification()? {
    ///     assert_eq!(n.payload, b"hi");
    /// }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`io::ErrorKind::WouldBlock`] on an empty pipe in non-blocking mode;
    /// [`io::ErrorKind::TimedOut`] after the read timeout; [`io::ErrorKind::InvalidData`] if the
    /// shared region is corrupt (a peer wrote it).
    pub fn next_notification(&mut self) -> io::Result<Option<Notification>> {
        let mut buf = [0u8; RECORD_MAX];
        let n = read(&self.end, &mut buf, self.is_nonblocking(), 1)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(Notification::parse(&buf[..n])?.0))
    }

    /// Like [`NotificationReader::next_notification`], with the end of the stream as an error:
    /// for callers that expect more records.
    ///
    /// ```
    /// use pagepipe::{Builder, Notification};
    /// let (notifier, mut reader) = Builder::new().notifications(8).build()?;
    /// notifier.post(&Notification { kind: 7, ..Default::default() })?;
    /// assert_eq!(reader.read_notification()?.kind, 7);
    /// drop(notifier);
    /// let end = reader.read_notification().unwrap_err();
    /// assert_eq!(end.kind(), std::io::ErrorKind::UnexpectedEof);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`io::ErrorKind::UnexpectedEof`] once the pipe is empty and no notifier is left;
    /// otherwise as [`NotificationReader::next_notification`].
    pub fn read_notification(&mut self) -> io::Result<Notification> {
        self.next_notification()?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the notification pipe has no notifier left",
            )
        })
    }

    /// The records, one by one, until the end of the stream: an iterator of
    /// `io::Result<Notification>` over [`NotificationReader::next_notification`]. It ends at the
    /// end of the stream, and after yielding an error (`WouldBlock`, `TimedOut`, `InvalidData`):
    /// call `iter()` again to go on after a `WouldBlock` or a `TimedOut`.
    ///
    /// ```
    /// use pagepipe::{Builder, Notification};
    /// let (notifier, mut reader) = Builder::new().notifications(8).build()?;
    /// for subtype in 0..3 {
    ///     notifier.post(&Notification { kind: 1, subtype, ..Default::default() })?;
    /// }
    /// drop(notifier);
    /// let subtypes: Vec<u8> = reader
    ///     .iter()
    ///     .map(|n| n.map(|n| n.subtype))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(subtypes, [0, 1, 2]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn iter(&mut self) -> Notifications<'_> {
        Notifications {
            reader: self,
            done: false,
        }
    }

    /// Sets the filters of a notification pipe: from then on, posts that match none of them
    /// are dropped (not a loss). An empty slice removes them. Takes the read side.
    ///
    /// ```
    /// use pagepipe::{Builder, Filter, Notification};
    /// let (notifier, mut reader) = Builder::new().notifications(8).build()?;
    /// reader.set_filter(&[Filter { kind: 1, info_filter: 0, info_mask: 0, subtypes: 1 << 2 }])?;
    /// let post = |subtype| notifier.post(&Notification { kind: 1, subtype, ..Default::default() });
    /// post(1)?; // filtered out
    /// post(2)?;
    /// assert_eq!(reader.read_notification()?.subtype, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] (Linux: `EINVAL`) for more than [`MAX_FILTERS`]
    /// filters, a kind above 24 bits, `info_filter` bits outside `info_mask`, or a mask on the
    /// length bits.
    pub fn set_filter(&self, filters: &[Filter]) -> io::Result<()> {
        if filters.len() > MAX_FILTERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} filters, at most {MAX_FILTERS}", filters.len()),
            ));
        }
        filters.iter().try_for_each(Filter::check)?;
        let sh = &*self.end.shared;
        let rs = sh.lock_read(lock::Wait::Until(sh.deadline(Side::Read)))?;
        set_filters(sh.header(), filters);
        drop(rs);
        Ok(())
    }
}

/// The iterator of [`NotificationReader::iter`].
#[derive(Debug)]
pub struct Notifications<'a> {
    reader: &'a mut NotificationReader,
    done: bool,
}

impl Iterator for Notifications<'_> {
    type Item = io::Result<Notification>;

    fn next(&mut self) -> Option<io::Result<Notification>> {
        if self.done {
            return None;
        }
        let next = self.reader.next_notification();
        self.done = !matches!(next, Ok(Some(_)));
        next.transpose()
    }
}

impl io::Read for NotificationReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

/// Reads whole records ([`NotificationReader`]); a null read succeeds, as on Linux.
impl io::Read for &NotificationReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        read(&self.end, buf, self.is_nonblocking(), usize::MAX)
    }
}

impl Clone for NotificationReader {
    fn clone(&self) -> NotificationReader {
        NotificationReader {
            end: self.end.clone(),
        }
    }
}

impl std::fmt::Debug for NotificationReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotificationReader")
            .field("capacity", &self.capacity())
            .field("nonblocking", &self.is_nonblocking())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{Builder, Notification};
    use std::io::ErrorKind;

    /// A peer with a mapping of the region rewrites a queued record into the LOSS record's
    /// shape: the reader reports the corruption instead of a loss that never happened.
    #[test]
    fn a_meta_record_written_into_a_slot_is_invalid_data() {
        let (n, mut r) = Builder::new().notifications(2).build().unwrap();
        n.post(&Notification {
            kind: 1,
            ..Notification::default()
        })
        .unwrap();
        let loss = Notification::loss().to_bytes();
        let page = r.end.shared.region.page(0);
        // SAFETY: position 0's page holds the queued 8-byte record; this stands for a peer's
        // store through its own mapping of the same memory.
        unsafe { std::ptr::copy_nonoverlapping(loss.as_ptr(), page, loss.len()) };
        let e = r.next_notification().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    }

    /// A forged record behind good ones: the good ones are returned (they are consumed), the
    /// error comes with the next read.
    #[test]
    fn records_before_a_forged_one_are_returned_first() {
        let (n, mut r) = Builder::new().notifications(4).build().unwrap();
        for subtype in 0..2 {
            n.post(&Notification {
                kind: 1,
                subtype,
                ..Notification::default()
            })
            .unwrap();
        }
        let loss = Notification::loss().to_bytes();
        let page = r.end.shared.region.page(1);
        // SAFETY: position 1's page holds the second queued 8-byte record; this stands for a
        // peer's store through its own mapping of the same memory.
        unsafe { std::ptr::copy_nonoverlapping(loss.as_ptr(), page, loss.len()) };
        let mut buf = [0u8; 64];
        assert_eq!(std::io::Read::read(&mut r, &mut buf).unwrap(), 8);
        assert_eq!(Notification::parse(&buf).unwrap().0.subtype, 0);
        let e = std::io::Read::read(&mut r, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    }
}
