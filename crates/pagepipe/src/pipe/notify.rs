//! Notification pipes (seed 002, Linux's watch_queue): records of 8 to 127 bytes posted by a
//! [`Notifier`] that never sleeps, into a ring whose slots are all reserved for them.
//!
//! Shape. A notification pipe is a pipe whose ring holds one record per slot (at the start of
//! the slot's page) and refuses data: there is no [`super::Writer`], only notifiers, and a
//! [`Reader`] that reads whole records. The ring has `records.next_power_of_two()` slots, as
//! Linux sizes a watch queue's pipe ring (its notes bitmap always has at least as many notes).
//!
//! The post protocol. Posters serialize among themselves on the write side's lock, taken with
//! [`lock::Wait::Spin`]: they spin (and yield), never sleep, and hold it only to copy one record
//! and publish it; a poster that died holding it is taken over from, as a writer would be. They
//! never take the read side's lock. The reader runs concurrently, as with any pipe:
//! - room (`head - tail < ring_size`): the poster copies the record into slot `head`, sets the
//!   slot's state to the record's length and publishes it with the head RMW.
//! - full: the poster flags the last record, `head - 1`, with [`LOSS`] by a CAS on its state
//!   that fails if the reader released the slot meanwhile (the reader's release is a CAS on the
//!   same word, so exactly one of the two happens first). The reader sees the flag when it
//!   releases the record and hands out one LOSS record after it (Linux's `note_loss`).
//! - full, but the last record already released (the reader is between its release CAS and
//!   its tail update): the poster waits for the tail, spinning; if no live thread holds the
//!   read side (its holder died there, or a peer wrote the flag) it flags the released slot,
//!   and the next reader, taking the side over, finds the flag on the slots it skips (see
//!   `Shared::lock_read`). A tail that stays stuck for a second is `InvalidData`: nothing waits
//!   forever on a peer's word.
//!
//! Filters are a small table in the region under a sequence lock (`Header::filter_seq`) that
//! the reader rewrites under its side lock and posters read optimistically, without a lock.

use super::writer::broken_pipe;
use super::{End, Reader, Shared, WriteGuard};
use crate::lock;
use crate::region::{invalid, Header, LOSS, R, RELEASED};
use crate::ring;
use crate::sync::{fence, Arc, Ordering};
use crate::sys::mm::PAGE_SIZE;
use std::io;
use std::time::{Duration, Instant};

/// The most records a notification pipe holds (Linux: 512).
pub const MAX_RECORDS: usize = 512;
/// The most filters a reader may set (Linux: 16).
pub const MAX_FILTERS: usize = 16;
/// The most payload bytes a record carries: 127 bytes at most, less the 8-byte header.
pub const MAX_PAYLOAD: usize = RECORD_MAX - HEADER;
/// The `kind` of meta records (Linux `WATCH_TYPE_META`).
pub const META_KIND: u32 = 0;
/// The `subtype` of the LOSS meta record (Linux `WATCH_META_LOSS_NOTIFICATION`).
pub const LOSS_SUBTYPE: u8 = 1;

const HEADER: usize = 8;
const RECORD_MAX: usize = 127;
/// The record length's bits in `info` (Linux `WATCH_INFO_LENGTH`).
const INFO_LENGTH: u32 = 0x7f;
/// `info` bit 7: between the length and the id, unused by Linux's layout.
const INFO_RESERVED: u32 = 0x80;
const KIND_MAX: u32 = (1 << 24) - 1;
/// Times a poster rereads a filter table that is being rewritten before it gives up and
/// delivers the record (a reader that died mid-rewrite must not silence every poster).
const FILTER_TRIES: u32 = 64;
/// Turns a poster spins waiting for a reader between its release and its tail update before it
/// asks the OS whether that reader is alive.
const RELEASE_CHECK: u32 = 1 << 12;
/// How long a poster waits for a reader to move tail past a record it released before it
/// calls the region corrupt (a live reader takes nanoseconds, or a scheduler tick).
const RELEASE_PATIENCE: Duration = Duration::from_secs(1);
/// That wait yields the CPU every this many turns (every turn under loom, which needs a yield
/// to make progress in a spin loop).
#[cfg(not(loom))]
const YIELD_EVERY: u32 = 64;
#[cfg(loom)]
const YIELD_EVERY: u32 = 1;

/// One notification record, in Linux's watch_queue layout: a 32-bit word with `kind` in its
/// low 24 bits and `subtype` in its high 8, then a 32-bit `info` word (the record's length in
/// bits 0..=6, `id` in bits 8..=15, `info_flags` in bits 16..=31), then the payload. Both words
/// little-endian, as on every Linux target pagepipe runs on.
///
/// ```
/// use pagepipe::Notification;
/// let n = Notification { kind: 1, subtype: 2, id: 3, info_flags: 0x10, payload: b"key".to_vec() };
/// let bytes = n.to_bytes();
/// assert_eq!(bytes.len(), 11);
/// assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 0x0010_030b);
/// assert_eq!(Notification::parse(&bytes)?, (n, 11));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Notification {
    /// The record's type: 24 bits (0 is [`META_KIND`]).
    pub kind: u32,
    /// Its subtype.
    pub subtype: u8,
    /// The watch id it came through (Linux: `info` bits 8..=15).
    pub id: u8,
    /// Type-specific flags (Linux: `info` bits 16..=31).
    pub info_flags: u16,
    /// At most [`MAX_PAYLOAD`] (119) bytes.
    pub payload: Vec<u8>,
}

impl Notification {
    /// The LOSS meta record a reader gets after records were lost: kind 0, subtype 1, 8 bytes.
    pub fn loss() -> Notification {
        Notification {
            kind: META_KIND,
            subtype: LOSS_SUBTYPE,
            ..Notification::default()
        }
    }

    /// True for the LOSS meta record.
    pub fn is_loss(&self) -> bool {
        self.kind == META_KIND && self.subtype == LOSS_SUBTYPE
    }

    /// The record's `info` word: length, id and flags.
    pub fn info(&self) -> u32 {
        let len = (HEADER + self.payload.len()) as u32 & INFO_LENGTH;
        len | u32::from(self.id) << 8 | u32::from(self.info_flags) << 16
    }

    /// The record in Linux's byte layout (see the type's docs).
    ///
    /// # Panics
    /// If `kind` does not fit 24 bits or the payload is longer than [`MAX_PAYLOAD`]
    /// ([`Notifier::post`] reports those as `InvalidInput` instead).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut buf = [0u8; RECORD_MAX];
        let n = self
            .encode(&mut buf)
            .expect("a notification that fits a record");
        buf[..n].to_vec()
    }

    /// Writes the record into `buf`, returning its length; `InvalidInput` if it is not one.
    fn encode(&self, buf: &mut [u8; RECORD_MAX]) -> io::Result<usize> {
        if self.kind > KIND_MAX || self.payload.len() > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a notification of kind {:#x} with {} payload bytes (at most 24 bits and {} bytes)",
                    self.kind,
                    self.payload.len(),
                    MAX_PAYLOAD
                ),
            ));
        }
        let len = HEADER + self.payload.len();
        let word = self.kind | u32::from(self.subtype) << 24;
        buf[..4].copy_from_slice(&word.to_le_bytes());
        buf[4..8].copy_from_slice(&self.info().to_le_bytes());
        buf[HEADER..len].copy_from_slice(&self.payload);
        Ok(len)
    }

    /// Parses the record at the start of `buf`: the record and its length (from `info`).
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidData`] when `buf` is shorter than 8 bytes or than the length the
    /// record gives, the length is below 8, or `info` bit 7 (unused by the layout) is set.
    pub fn parse(buf: &[u8]) -> io::Result<(Notification, usize)> {
        if buf.len() < HEADER {
            return Err(invalid(format!(
                "{} bytes cannot hold a notification record",
                buf.len()
            )));
        }
        let word = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let info = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let len = (info & INFO_LENGTH) as usize;
        if len < HEADER || len > buf.len() || info & INFO_RESERVED != 0 {
            return Err(invalid(format!(
                "a notification record with info {info:#x} in {} bytes",
                buf.len()
            )));
        }
        let n = Notification {
            kind: word & KIND_MAX,
            subtype: (word >> 24) as u8,
            id: (info >> 8) as u8,
            info_flags: (info >> 16) as u16,
            payload: buf[HEADER..len].to_vec(),
        };
        Ok((n, len))
    }
}

/// A filter of a notification reader (Linux `watch_notification_type_filter`): a record passes
/// when some filter has its `kind`, has bit `subtype` set in `subtypes` (subtypes 32 and above
/// never pass) and `info & info_mask == info_filter`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// The record kind this filter applies to (24 bits).
    pub kind: u32,
    /// The `info` bits wanted, under `info_mask`.
    pub info_filter: u32,
    /// The `info` bits compared; must not include the length bits (0x7f).
    pub info_mask: u32,
    /// Bit n set: subtype n passes.
    pub subtypes: u32,
}

impl Filter {
    fn passes(&self, kind: u32, subtype: u8, info: u32) -> bool {
        self.kind == kind
            && u32::from(subtype) < 32
            && self.subtypes >> subtype & 1 == 1
            && info & self.info_mask == self.info_filter
    }

    fn check(&self) -> io::Result<()> {
        if self.kind > KIND_MAX
            || self.info_filter & !self.info_mask != 0
            || self.info_mask & INFO_LENGTH != 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "bad filter {self:?}: kind above 24 bits, info_filter bits outside \
                     info_mask, or a mask on the length bits"
                ),
            ));
        }
        Ok(())
    }
}

/// The posting end of a notification pipe (see [`crate::Builder::notifications`]).
///
/// Any number of threads and processes may post at once (clone it, or pass it like a pipe end
/// with [`Notifier::send_to`], [`Notifier::pass_to`]); the reader sees end of file once every
/// notifier is gone. A post never sleeps and never waits for the reader.
///
/// ```
/// use pagepipe::{Builder, Notification};
/// let (notifier, mut reader) = Builder::new().notifications(4).build_notifications()?;
/// let n = Notification { kind: 1, subtype: 0, id: 7, info_flags: 0, payload: b"hi".to_vec() };
/// for _ in 0..5 {
///     notifier.post(&n)?; // the fifth finds the ring full: Ok(false)
/// }
/// for _ in 0..4 {
///     assert_eq!(reader.read_notification()?, n);
/// }
/// assert!(reader.read_notification()?.is_loss());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Notifier {
    pub(crate) end: Arc<End>,
}

impl Notifier {
    /// Posts one record. Never blocks: `Ok(false)` when the ring is full, in which case the
    /// record is dropped and the last queued record is flagged, so the reader gets a LOSS
    /// record after it. `Ok(true)` when the record was queued, or rejected by the reader's
    /// filters (which is not a loss).
    ///
    /// While some process polls the reader's descriptor, a post also takes the pipe's short
    /// readiness lock to keep that descriptor exact.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a kind above 24 bits or a payload longer than
    /// [`MAX_PAYLOAD`]; [`io::ErrorKind::BrokenPipe`] when no reader is left;
    /// [`io::ErrorKind::InvalidData`] if the shared region is corrupt.
    pub fn post(&self, n: &Notification) -> io::Result<bool> {
        let mut rec = [0u8; RECORD_MAX];
        let len = n.encode(&mut rec)?;
        if self.end.peer_gone(false) {
            return Err(broken_pipe());
        }
        let sh = &*self.end.shared;
        let word = n.kind | u32::from(n.subtype) << 24;
        if !filters_pass(sh.header(), word, n.info()) {
            return Ok(true);
        }
        let mut ws = sh.lock_write(lock::Wait::Spin)?;
        let posted = post_locked(sh, &mut ws, &rec[..len]);
        drop(ws);
        if posted? {
            self.end.sync();
            return Ok(true);
        }
        Ok(false)
    }

    /// Records the pipe holds (a power of two).
    pub fn capacity(&self) -> usize {
        self.end.shared.config().notes
    }
}

/// With the write side held: queues `rec` or flags the loss (see the module docs).
fn post_locked(sh: &Shared, ws: &mut WriteGuard<'_>, rec: &[u8]) -> io::Result<bool> {
    let h = sh.header();
    // Borrows the region, not the guard, whose indices we move below.
    let ring = super::Ring {
        region: &sh.region,
        size: ws.ring_size,
    };
    let (mut turns, mut started) = (0u32, None);
    loop {
        // (The Acquire load pairs with the reader's Release tail RMW, so its copy out of a freed
        // record happens before we overwrite the slot.)
        let tail = sh.load_tail(ws.head, ring.size)?;
        ws.cached_tail = tail; // the next holder's `lock_write` checks head against it
        if ring::occupancy(ws.head, tail) < ring.size as u64 {
            break;
        }
        let (_, last) = ring.slot(ws.head - 1);
        let st = last.state.load(Ordering::Relaxed);
        if st & LOSS != 0 {
            return Ok(false); // already flagged at this point of the stream
        }
        turns = turns.wrapping_add(1);
        let check = turns % RELEASE_CHECK == 0;
        if check && started.get_or_insert_with(Instant::now).elapsed() > RELEASE_PATIENCE {
            return Err(invalid(format!(
                "record {} released but tail stuck at {tail} for {RELEASE_PATIENCE:?}",
                ws.head - 1
            )));
        }
        // No live reader in the middle of a release: a dead one's successor, or a peer that
        // wrote the flag, owes the LOSS record (see `Shared::lock_read`).
        let no_live_reader = check && !h.read_side.lock.held_by_live();
        if st & RELEASED == 0 || no_live_reader {
            // Relaxed: decides only between us and the reader's release CAS on this word.
            if last
                .state
                .compare_exchange(st, st | LOSS, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(false);
            }
            continue;
        }
        // The reader released the last record and is about to move tail: wait for it.
        if turns % YIELD_EVERY == 0 {
            crate::sync::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    let (pos, slot) = ring.slot(ws.head);
    sh.claim(slot);
    // SAFETY: the position is free (head - tail < ring_size) and we hold the write side, so
    // nobody reads or writes its page; rec.len() <= 127 < PAGE_SIZE; `rec` is our own buffer.
    unsafe { std::ptr::copy_nonoverlapping(rec.as_ptr(), ring.page(pos), rec.len()) };
    slot.start.store(0, Ordering::Relaxed);
    // No flag: records never merge.
    slot.state.store(rec.len() as u64, Ordering::Relaxed);
    // Published as data slots are (the reader's Acquire load of head in `read_records` pairs
    // with it).
    let published = super::writer::publish(sh, ws.head, 1, rec.len());
    ws.head += 1;
    published.map(|()| true)
}

/// Whether a record with this first word and `info` passes the reader's filters (all pass
/// when none are set).
fn filters_pass(h: &Header, word: u32, info: u32) -> bool {
    let (kind, subtype) = (word & KIND_MAX, (word >> 24) as u8);
    for _ in 0..FILTER_TRIES {
        // Acquire: pairs with the Release store that ends a rewrite in `set_filters`.
        let s1 = h.filter_seq.load(Ordering::Acquire);
        if s1 & 1 == 0 {
            let count = (h.nr_filters.load(Ordering::Relaxed) as usize).min(MAX_FILTERS);
            let pass = count == 0
                || h.filters[..count].iter().any(|f| {
                    let f = f.each_ref().map(|w| w.load(Ordering::Relaxed));
                    Filter {
                        kind: f[0],
                        info_filter: f[1],
                        info_mask: f[2],
                        subtypes: f[3],
                    }
                    .passes(kind, subtype, info)
                });
            // Acquire: pairs with the Release fence in `set_filters`: if we read any word of
            // a rewrite, the reload below sees its odd sequence (or later).
            fence(Ordering::Acquire);
            if h.filter_seq.load(Ordering::Relaxed) == s1 {
                return pass;
            }
        }
        std::hint::spin_loop();
    }
    true
}

/// Rewrites the filter table (the read side held).
fn set_filters(h: &Header, filters: &[Filter]) {
    let odd = h.filter_seq.load(Ordering::Relaxed) | 1;
    h.filter_seq.store(odd, Ordering::Relaxed);
    // Release: pairs with the Acquire fence in `filters_pass`, ordering the odd sequence
    // before the table words below.
    fence(Ordering::Release);
    for (slot, f) in h.filters.iter().zip(filters) {
        for (w, v) in slot
            .iter()
            .zip([f.kind, f.info_filter, f.info_mask, f.subtypes])
        {
            w.store(v, Ordering::Relaxed);
        }
    }
    h.nr_filters.store(filters.len() as u32, Ordering::Relaxed);
    // Release: pairs with the Acquire load of the sequence in `filters_pass`.
    h.filter_seq.store(odd.wrapping_add(1), Ordering::Release);
}

/// `EXDEV`, Linux's answer to a write or splice on a notification pipe.
pub(crate) fn exdev() -> io::Error {
    io::Error::from_raw_os_error(libc::EXDEV)
}

/// `EBUSY`, Linux's answer to resizing a notification pipe.
pub(crate) fn ebusy() -> io::Error {
    io::Error::from_raw_os_error(libc::EBUSY)
}

/// `ENOBUFS`: the reader's buffer cannot hold the next record.
fn enobufs() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOBUFS)
}

/// A record count for a notification pipe as stored in its region: a power of two of at most
/// [`MAX_RECORDS`], in 4 KiB slots.
pub(crate) fn notes_ok(notes: usize, slot_size: usize) -> bool {
    notes.is_power_of_two() && notes <= MAX_RECORDS && slot_size == PAGE_SIZE
}

/// The ring size for `records` (Linux: 1..=512, rounded up to a power of two).
pub(crate) fn ring_for(records: usize) -> io::Result<usize> {
    if !(1..=MAX_RECORDS).contains(&records) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a notification pipe holds 1..={MAX_RECORDS} records, not {records}"),
        ));
    }
    Ok(records.next_power_of_two())
}

/// Reads whole records into `buf` (at most `max_records` of them), as `read(2)` on a Linux
/// notification pipe: the LOSS record after a flagged one, `ENOBUFS` if the next record does
/// not fit an empty buffer, end of file once no notifier is left.
pub(crate) fn read(
    r: &Reader,
    buf: &mut [u8],
    nonblocking: bool,
    max_records: usize,
) -> io::Result<usize> {
    let sh = &*r.end.shared;
    let deadline = sh.deadline(R);
    loop {
        let eof = r.end.peer_gone(nonblocking);
        let mut rs = sh.lock_read(sh.lock_wait(nonblocking, deadline))?;
        let n = read_records(sh, &mut rs, buf, max_records)?;
        drop(rs);
        if n > 0 {
            r.end.sync();
            return Ok(n);
        }
        if eof {
            return Ok(0); // seeing no notifier meant seeing every record they posted
        }
        if nonblocking {
            return Err(super::writer::would_block());
        }
        r.end.wait_readable(deadline)?;
    }
}

/// The body of [`read`], with the read side held.
fn read_records(
    sh: &Shared,
    rs: &mut super::ReadGuard<'_>,
    buf: &mut [u8],
    max_records: usize,
) -> io::Result<usize> {
    let h = sh.header();
    // Borrows the region, not the guard, whose indices we move below.
    let ring = super::Ring {
        region: &sh.region,
        size: rs.ring_size,
    };
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
                return if n == 0 { Err(enobufs()) } else { Ok(n) };
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
        let len = (st & crate::region::END_MASK) as usize;
        if st & (RELEASED | crate::region::DROPPED) != 0 || !(HEADER..=RECORD_MAX).contains(&len) {
            return Err(invalid(format!(
                "notification slot {} has state {st:#x}",
                rs.tail
            )));
        }
        if len > buf.len() - n {
            return if n == 0 { Err(enobufs()) } else { Ok(n) };
        }
        // SAFETY: len <= 127 bytes at the start of a published slot's page (inside it), copied
        // raw from shared memory into `buf[n..n + len]` (checked to fit), which cannot overlap
        // the region's mapping.
        unsafe { std::ptr::copy_nonoverlapping(ring.page(pos), buf[n..].as_mut_ptr(), len) };
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

impl Reader {
    /// Reads one record of a notification pipe: the next queued one, or the LOSS record
    /// ([`Notification::is_loss`]) where records were lost. Blocks while the pipe is empty
    /// (non-blocking: `WouldBlock`).
    ///
    /// # Errors
    /// [`io::ErrorKind::UnexpectedEof`] once the pipe is empty and no notifier is left;
    /// [`io::ErrorKind::InvalidInput`] on a data pipe; `WouldBlock`, `TimedOut` as for `read`;
    /// `InvalidData` if the shared region is corrupt.
    pub fn read_notification(&mut self) -> io::Result<Notification> {
        self.check_notifications()?;
        let mut buf = [0u8; RECORD_MAX];
        let n = read(self, &mut buf, self.is_nonblocking(), 1)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the notification pipe has no notifier left",
            ));
        }
        Ok(Notification::parse(&buf[..n])?.0)
    }

    /// Sets the filters of a notification pipe: from then on, posts that match none of them
    /// are dropped (not a loss). An empty slice removes them. Takes the read side.
    ///
    /// ```
    /// use pagepipe::{Builder, Filter, Notification};
    /// let (notifier, mut reader) = Builder::new().notifications(8).build_notifications()?;
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
    /// length bits, and on a data pipe.
    pub fn set_filter(&self, filters: &[Filter]) -> io::Result<()> {
        self.check_notifications()?;
        if filters.len() > MAX_FILTERS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} filters, at most {MAX_FILTERS}", filters.len()),
            ));
        }
        filters.iter().try_for_each(Filter::check)?;
        let sh = &*self.end.shared;
        let rs = sh.lock_read(lock::Wait::Until(sh.deadline(R)))?;
        set_filters(sh.header(), filters);
        drop(rs);
        Ok(())
    }

    /// True for the reader of a notification pipe.
    pub fn is_notification_pipe(&self) -> bool {
        self.end.shared.config().notes != 0
    }

    fn check_notifications(&self) -> io::Result<()> {
        if !self.is_notification_pipe() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a notification pipe",
            ));
        }
        Ok(())
    }
}

impl Clone for Notifier {
    fn clone(&self) -> Notifier {
        Notifier {
            end: self.end.clone(),
        }
    }
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_malformed_bytes() {
        let n = Notification {
            kind: 0xabcdef,
            subtype: 9,
            id: 0x42,
            info_flags: 0xbeef,
            payload: vec![7; MAX_PAYLOAD],
        };
        let b = n.to_bytes();
        assert_eq!(b.len(), 127);
        assert_eq!(&b[..4], &[0xef, 0xcd, 0xab, 9]);
        assert_eq!(Notification::parse(&b).unwrap(), (n.clone(), 127));
        assert_eq!(Notification::loss().to_bytes(), [0, 0, 0, 1, 8, 0, 0, 0]);
        for bad in [
            &b[..7],
            &b[..100],
            &[0, 0, 0, 0, 7, 0, 0, 0][..],
            &[0, 0, 0, 0, 0x88, 0, 0, 0],
        ] {
            assert_eq!(
                Notification::parse(bad).unwrap_err().kind(),
                io::ErrorKind::InvalidData
            );
        }
        let mut too_big = n;
        too_big.payload.push(0);
        assert!(too_big.encode(&mut [0; RECORD_MAX]).is_err());
    }

    #[test]
    fn filters_match_kind_subtype_and_masked_info() {
        let f = Filter {
            kind: 1,
            info_filter: 0x0100,
            info_mask: 0xff00,
            subtypes: 0b101,
        };
        assert!(f.check().is_ok());
        assert!(f.passes(1, 0, 0x0108));
        assert!(f.passes(1, 2, 0x0108));
        assert!(!f.passes(1, 1, 0x0108));
        assert!(!f.passes(2, 0, 0x0108));
        assert!(!f.passes(1, 0, 0x0208));
        assert!(!f.passes(1, 40, 0x0108));
        for bad in [
            Filter { kind: 1 << 24, ..f },
            Filter {
                info_filter: 0x1_0000,
                ..f
            },
            Filter {
                info_mask: 0xff7f,
                ..f
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        assert_eq!(ring_for(1).unwrap(), 1);
        assert_eq!(ring_for(33).unwrap(), 64);
        assert_eq!(ring_for(512).unwrap(), 512);
        assert!(ring_for(0).is_err() && ring_for(513).is_err());
    }
}
