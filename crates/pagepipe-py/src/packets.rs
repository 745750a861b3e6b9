//! Whole messages of any size among many writers and readers in many processes, for
//! `pagepipe.Queue`: what a byte stream cannot give (a write larger than `PIPE_BUF` may
//! interleave with another's, a read may take half of one), built from what a pagepipe does
//! give:
//!
//! - The data pipe is in packet mode with 4 KiB slots: each write of at most [`PACKET`] bytes
//!   is one packet, placed whole or not at all even if its writer is killed during it, and each
//!   read takes exactly one packet. A message is a run of packets, each with a [`Header`].
//! - A second pipe, the *lock pipe*, lends its two side locks: a writer holds the lock pipe's
//!   write side (a `WriteChunk`) across all packets of a message, a reader its read side (a
//!   `ReadChunk`; the lock pipe always holds one byte) across reading one. Side locks live in
//!   shared memory and pass on when their holder dies (pagepipe's dead-peer rules), so a
//!   process killed holding one blocks nobody.
//! - A process killed in the middle of a message leaves a partial run: a writer's is followed
//!   by another message's first packet (the reader drops the partial one); a reader's leaves
//!   packets without a first one, which the next reader drops. A reader that waits in the
//!   middle of a message for a while asks whether the lock pipe's write side is free: a
//!   writer holds it until its message is whole, so a free side means its writer is gone.

use crate::wait::SLICE;
use pagepipe::{Reader, Writer, PIPE_BUF};
use pyo3::exceptions::{PyEOFError, PyOSError};
use pyo3::prelude::*;
use std::io;
use std::time::{Duration, Instant};

/// The data pipe's slot size and so its largest packet.
pub(crate) const PACKET: usize = PIPE_BUF;
/// A packet's header: magic, flags, message id, message length, offset of this packet's bytes.
const HEADER: usize = 32;
/// The bytes of a message one packet carries.
const BODY: usize = PACKET - HEADER;
const MAGIC: u32 = u32::from_le_bytes(*b"PPQ1");
/// The packet that starts a message.
const FIRST: u32 = 1;
/// How long a writer that must not wait (a `put` from the caller's thread) waits for the lock
/// pipe's write side: its write timeout.
pub(crate) const LOCK_TRY: Duration = Duration::from_millis(2);
/// How long a reader waits for the lock pipe's read side before it looks at its deadline and
/// at Python's signal handlers: its read timeout.
pub(crate) const LOCK_SLICE: Duration = Duration::from_millis(10);

/// One packet's header, little-endian on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    flags: u32,
    /// Unique per message among live writers (the caller's process id and a counter).
    id: u64,
    total: u64,
    offset: u64,
}

impl Header {
    fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..16].copy_from_slice(&self.id.to_le_bytes());
        out[16..24].copy_from_slice(&self.total.to_le_bytes());
        out[24..32].copy_from_slice(&self.offset.to_le_bytes());
    }

    /// The header of a packet of `n` bytes, if it is one of ours and self-consistent.
    fn decode(p: &[u8]) -> Option<Header> {
        if p.len() < HEADER || p[0..4] != MAGIC.to_le_bytes() {
            return None;
        }
        let word = |r: std::ops::Range<usize>| u64::from_le_bytes(p[r].try_into().unwrap());
        let h = Header {
            flags: u32::from_le_bytes(p[4..8].try_into().unwrap()),
            id: word(8..16),
            total: word(16..24),
            offset: word(24..32),
        };
        let body = (p.len() - HEADER) as u64;
        let fits = h.offset.checked_add(body).is_some_and(|end| end <= h.total);
        fits.then_some(h)
    }
}

/// How a `put` may wait.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// Not for room, and for the lock only [`LOCK_TRY`]: the message goes in whole now or
    /// nothing is written (the caller hands it to its feeder thread).
    Now,
    /// As long as it takes (the feeder thread), for the lock and for room.
    Wait,
}

/// The packets `bytes` travels as: how many.
fn packets_for(len: usize) -> usize {
    len.div_ceil(BODY).max(1)
}

/// Writes message `id` (its `parts`, one after another) to the packet pipe `data` holding `lock`'s write side;
/// `Ok(false)` if [`Put::Now`] could not (nothing written). Runs without the GIL.
pub(crate) fn put(
    data: &Writer,
    lock: &Writer,
    parts: &[&[u8]],
    id: u64,
    how: Put,
) -> io::Result<bool> {
    let (n, err) = put_many(data, lock, [(parts, id)], how);
    match err {
        Some(e) => Err(e),
        None => Ok(n == 1),
    }
}

/// Writes `messages` (parts and id each), in order, to the packet pipe `data` holding `lock`'s
/// write side once for all of them (the feeder thread's batch: one lock and one call for
/// what it holds, not one per message). Returns how many went in whole, and the error that
/// stopped it, if any (the message it stopped in may be partly written: readers drop it as
/// a dead writer's). [`Put::Now`] stops, with no error, at the first message that does not
/// fit now. Each message is written as [`put`] writes one, so readers see no difference:
/// one that fits in the pipe still goes in as one burst. Runs without the GIL.
pub(crate) fn put_many<'a>(
    data: &Writer,
    lock: &Writer,
    messages: impl IntoIterator<Item = (&'a [&'a [u8]], u64)>,
    how: Put,
) -> (usize, Option<io::Error>) {
    let held = loop {
        match lock.write_chunk() {
            Ok(chunk) => break chunk,
            Err(e) if e.kind() == io::ErrorKind::TimedOut && how == Put::Wait => continue,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return (0, None),
            Err(e) => return (0, Some(e)),
        }
    };
    let mut packet = PACKET_BUF
        .with(std::cell::Cell::take)
        .unwrap_or_else(|| Box::new([0u8; PACKET]));
    let mut done = 0;
    let mut err = None;
    for (parts, id) in messages {
        match write_message(data, parts, id, how, &mut packet) {
            Ok(true) => done += 1,
            Ok(false) => break,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    drop(held);
    PACKET_BUF.with(|b| b.set(Some(packet)));
    (done, err)
}

thread_local! {
    /// A thread's packet to assemble writes in, kept between calls (a 4 KiB array zeroed per
    /// call showed in profiles of small messages).
    static PACKET_BUF: std::cell::Cell<Option<Box<[u8; PACKET]>>> = const { std::cell::Cell::new(None) };
}

/// One message's packets, the lock pipe's write side held; `Ok(false)` if [`Put::Now`] finds
/// no room for all of it (nothing written). The message is `parts`, one after another (a
/// large pickle's frames and payloads, not joined): each packet is written from its header
/// and the parts' bytes it carries as one vectored write, straight into the ring (assembled
/// in `packet` only when it has to wait for room).
fn write_message(
    data: &Writer,
    parts: &[&[u8]],
    id: u64,
    how: Put,
    packet: &mut [u8; PACKET],
) -> io::Result<bool> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let n = packets_for(total);
    let need = n * PACKET;
    match how {
        Put::Now if data.free() < need => return Ok(false),
        Put::Now => {}
        Put::Wait if n > 1 && need <= data.capacity() => wait_for_room(data, need)?,
        // A full pipe: wait (polling, see `wait_for_room`) until a quarter of it is free, not
        // for each slot the readers free: a writer asleep on the pipe's futex costs its
        // reader a wake-up call every few messages, and the reader is then what is slowest.
        // (A quarter at most: a message larger than the pipe must not wait for room for all
        // of it, which never comes; it streams.)
        Put::Wait if data.free() < PACKET => {
            wait_for_room(data, (data.capacity() / 4).max(PACKET))?;
        }
        Put::Wait => {}
    }
    let mut cursor = Cursor {
        parts,
        part: 0,
        at: 0,
    };
    let mut pieces: Vec<&[u8]> = Vec::with_capacity(4);
    for i in 0..n {
        let off = i * BODY;
        let len = total.min(off + BODY) - off;
        let mut head = [0u8; HEADER];
        Header {
            flags: if i == 0 { FIRST } else { 0 },
            id,
            total: total as u64,
            offset: off as u64,
        }
        .encode(&mut head);
        pieces.clear();
        cursor.take(len, |b| pieces.push(b));
        if pieces.len() < VECTORED {
            let mut io = [io::IoSlice::new(&[]); VECTORED];
            io[0] = io::IoSlice::new(&head);
            for (slot, p) in io[1..].iter_mut().zip(&pieces) {
                *slot = io::IoSlice::new(p);
            }
            match data.try_write_vectored(&io[..=pieces.len()]) {
                Ok(w) if w == HEADER + len => continue,
                Ok(w) => {
                    return Err(io::Error::other(format!(
                        "a packet of {} bytes was written as {w}: the pipe is not in packet mode",
                        HEADER + len
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        // No room now: the packet assembled, and written as the room comes.
        let mut at = HEADER;
        packet[..HEADER].copy_from_slice(&head);
        for s in &pieces {
            packet[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        write_packet(data, &packet[..at])?;
    }
    Ok(true)
}

/// The most slices of one vectored packet write (its header and the pieces of parts it
/// carries); a packet of more pieces is assembled first.
const VECTORED: usize = 8;

/// Where a message's next byte is, in its parts.
struct Cursor<'a> {
    parts: &'a [&'a [u8]],
    part: usize,
    at: usize,
}

impl<'a> Cursor<'a> {
    /// The next `len` bytes, as pieces of the parts, to `out`.
    fn take(&mut self, mut len: usize, mut out: impl FnMut(&'a [u8])) {
        while len > 0 {
            let p = self.parts[self.part];
            let piece = &p[self.at..p.len().min(self.at + len)];
            if !piece.is_empty() {
                out(piece);
            }
            len -= piece.len();
            self.at += piece.len();
            if self.at == p.len() {
                self.part += 1;
                self.at = 0;
            }
        }
    }
}

/// How often the feeder, waiting for room for a whole message while the room does not grow,
/// asks whether any reader is left (`BrokenPipeError` then, as a write would raise).
const ROOM_STALL: Duration = Duration::from_millis(250);

/// Waits, holding the lock pipe's write side (no other writer takes room meanwhile), until
/// `need` bytes of slots are free: a message that fits in the pipe then goes in as one burst,
/// so that a reader that has its first packet finds the rest there or coming at once, and
/// never waits on a writer that waits for room (a reader's timeout or Ctrl-C could not end
/// that wait without losing the message). `BrokenPipe` once no reader is left.
fn wait_for_room(data: &Writer, need: usize) -> io::Result<()> {
    let mut free = data.free();
    let mut since = Instant::now();
    let mut nap = Duration::from_micros(20);
    while free < need {
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(1));
        let now = data.free();
        if now != free {
            // A reader is draining: look again soon (a nap grown while the pipe stood still
            // would leave room unseen for up to a millisecond per message).
            nap = Duration::from_micros(20);
            free = now;
            since = Instant::now();
        } else if since.elapsed() >= ROOM_STALL {
            // A write chunk, dropped unused: `BrokenPipe` without readers; with a full pipe it
            // waits for a slot, which is what we wait for too.
            drop(data.write_chunk()?);
            free = data.free();
            since = Instant::now();
        }
    }
    Ok(())
}

/// One packet, waiting for room as long as it takes (a `Put::Now` finds room for all of them,
/// so only the feeder waits here).
fn write_packet(data: &Writer, packet: &[u8]) -> io::Result<()> {
    // First without a deadline (no clock read): the room is usually there.
    let mut first = Some(data.try_write(packet));
    loop {
        let wrote = match first.take() {
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Some(w) => w,
            None => data.write_deadline(packet, Instant::now() + SLICE),
        };
        match wrote {
            Ok(n) if n == packet.len() => return Ok(()),
            Ok(n) => {
                return Err(io::Error::other(format!(
                    "a packet of {} bytes was written as {n}: the pipe is not in packet mode",
                    packet.len()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => continue,
            Err(e) => return Err(e),
        }
    }
}

/// What `get` hands back to Python.
pub(crate) enum Got {
    /// Whole messages, in the caller's buffer.
    Message,
    /// The deadline passed before a message started.
    Empty,
    /// A signal handler raised this in the middle of a message, which was then read to its
    /// end (it is in the caller's buffer, to keep for the next `get`): raise it.
    Interrupted(PyErr),
}

/// How long a get that a signal handler interrupted in the middle of a message waits for the
/// message's next packet before it gives the message up (its writer is stopped, or slower
/// than this): a message that fits in the pipe is written in one burst, so its rest is there
/// or comes at once.
const FINISH_GRACE: Duration = Duration::from_secs(1);

/// The message being read: its id (its bytes so far are in the caller's buffer).
struct Partial {
    id: u64,
}

/// Messages read by [`get`]: their bytes one after another, and where each ends.
#[derive(Default)]
pub(crate) struct Messages {
    pub(crate) bytes: Vec<u8>,
    pub(crate) ends: Vec<usize>,
    /// The packet being read (kept with the rest: not a 4 KiB array zeroed per call).
    packet: Vec<u8>,
}

/// Reads the next whole messages from the packet pipe `data`, at most `max` (at least one),
/// one after another into `into.bytes` (cleared first; a buffer the caller reuses, so that a large
/// message does not fault in new memory each time), each message's end in `out` pushed to
/// `into.ends`, holding the lock pipe's read side (`lock_r`) throughout; `deadline` bounds the
/// wait for the first message to start (`None`: forever; passed: only what is there now);
/// the next ones are taken only if they have started already. A message started is read to
/// its end: its first packets cannot be put back, and other readers would drop the rest.
/// That wait is short: a message that fits in the pipe is written in one burst (see
/// [`wait_for_room`]); one larger than the pipe streams as fast as its writer writes. Every
/// [`LOCK_SLICE`] or [`SLICE`] of waiting, `signals` runs (Python's signal handlers): its
/// error ends the call, at once before the first message starts; in the middle of one, once
/// the message is whole ([`Got::Interrupted`], the message in `into`) or after
/// [`FINISH_GRACE`] without a packet of it (the message is then lost, as when a reader is
/// killed). On an error, `into.ends` holds the messages read whole before it. Runs without the GIL.
pub(crate) fn get(
    data: &Reader,
    lock_r: &Reader,
    lock_w: &Writer,
    deadline: Option<Instant>,
    signals: &dyn Fn() -> PyResult<()>,
    max: usize,
    into: &mut Messages,
) -> PyResult<Got> {
    let Messages {
        bytes: out,
        ends,
        packet,
    } = into;
    packet.resize(PACKET, 0);
    out.clear();
    ends.clear();
    let held = loop {
        match lock_r.read_chunk() {
            Ok(chunk) => break chunk,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(Got::Empty);
                }
                signals()?;
            }
            Err(e) => return Err(crate::error::to_py(e)),
        }
    };
    let mut got = read_message(data, lock_w, deadline, signals, out, 0, packet);
    if let Ok(Got::Message | Got::Interrupted(_)) = &got {
        ends.push(out.len());
    }
    while matches!(got, Ok(Got::Message)) && ends.len() < max.max(1) {
        // Only a message that has started: a deadline that has passed.
        let base = out.len();
        got = match read_message(
            data,
            lock_w,
            Some(Instant::now()),
            signals,
            out,
            base,
            packet,
        ) {
            Ok(Got::Empty) => {
                out.truncate(base);
                break;
            }
            Ok(g) => {
                ends.push(out.len());
                Ok(g)
            }
            Err(e) => {
                out.truncate(base);
                Err(e)
            }
        };
    }
    drop(held);
    got
}

/// One message of [`get`], with the read side held, appended to `out` after its first `base`
/// bytes (the messages read before it).
fn read_message(
    data: &Reader,
    lock_w: &Writer,
    deadline: Option<Instant>,
    signals: &dyn Fn() -> PyResult<()>,
    out: &mut Vec<u8>,
    base: usize,
    packet: &mut [u8],
) -> PyResult<Got> {
    let mut partial: Option<Partial> = None;
    // The lock pipe's write side was found free while a message was partly read: its writer
    // is done (it gives the side back only after its last packet), so every packet it will
    // ever write is in the pipe already. The partial message is given up only once the pipe
    // is then found empty: a writer descheduled mid-message that wrote its last packet and let
    // go between our time-out and our look at the lock used to lose its whole message here.
    let mut writer_done = false;
    // An exception a signal handler raised in the middle of a message: the message is read to
    // its end if it keeps coming (then kept for the next get), given up after FINISH_GRACE
    // without a packet; the exception is raised either way.
    let mut interrupted: Option<(PyErr, Instant)> = None;
    loop {
        let slice = Instant::now() + SLICE;
        let limit = match (&partial, deadline) {
            (None, Some(d)) => d.min(slice),
            _ => slice,
        };
        let n = match data.read_deadline(packet, limit) {
            Ok(0) => return Err(PyEOFError::new_err("the queue has no writer left")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                match &partial {
                    None if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(Got::Empty),
                    None => signals()?,
                    Some(_) if writer_done => {
                        // Its writer was done and the pipe is empty: the rest never comes.
                        partial = None;
                        writer_done = false;
                        if let Some((e, _)) = interrupted.take() {
                            return Err(e);
                        }
                    }
                    Some(_) => {
                        writer_done = writer_gone(lock_w)?;
                        match interrupted.take() {
                            // Its writer has stopped: the message is given up (its rest is
                            // dropped by the next reader, as a killed reader's is).
                            Some((e, since)) if since.elapsed() >= FINISH_GRACE => return Err(e),
                            Some(i) => interrupted = Some(i),
                            None => {
                                if let Err(e) = signals() {
                                    interrupted = Some((e, Instant::now()));
                                }
                            }
                        }
                    }
                }
                continue;
            }
            Err(e) => return Err(crate::error::to_py(e)),
        };
        if let Some((_, since)) = interrupted.as_mut() {
            *since = Instant::now(); // the message is still coming
        }
        let Some(h) = Header::decode(&packet[..n]) else {
            return Err(PyOSError::new_err(format!(
                "a packet of {n} bytes in the queue's pipe is not one of a queue's"
            )));
        };
        let body = &packet[HEADER..n];
        if h.flags & FIRST != 0 {
            writer_done = false; // a new message, from a writer that holds the side now
            if h.offset != 0 {
                continue; // malformed: a first packet starts at 0
            }
            let cap = usize::try_from(h.total).unwrap_or(usize::MAX);
            out.truncate(base);
            if out.try_reserve(cap).is_err() {
                return Err(PyOSError::new_err(format!(
                    "a queued message says it has {} bytes; cannot hold that",
                    h.total
                )));
            }
            partial = Some(Partial { id: h.id });
        }
        let Some(p) = partial.as_ref() else {
            continue; // the rest of a message whose reader died: dropped
        };
        if p.id != h.id || (out.len() - base) as u64 != h.offset {
            partial = None; // a torn message (its writer died): dropped
            continue;
        }
        out.extend_from_slice(body);
        if (out.len() - base) as u64 == h.total {
            return Ok(match interrupted {
                Some((e, _)) => Got::Interrupted(e),
                None => Got::Message,
            });
        }
    }
}

/// Whether no writer holds the lock pipe's write side (taken and given back at once). A writer
/// holds it from a message's first packet to its last, so while we wait in the middle of a
/// message, a free side means that message's writer died or gave up.
fn writer_gone(lock_w: &Writer) -> PyResult<bool> {
    match lock_w.write_chunk() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(false),
        Err(e) => Err(crate::error::to_py(e)),
    }
}

/// Makes the queue's two pipes: the packet pipe of `capacity` bytes and the lock pipe (its
/// byte written, its timeouts set).
pub(crate) fn make(capacity: usize) -> io::Result<((Writer, Reader), (Writer, Reader))> {
    let data = pagepipe::Builder::new()
        .packet_mode(true)
        .slot_size(PACKET)
        .capacity(capacity)
        .max_capacity(capacity)
        .build()?;
    // Two slots: a write chunk needs a free one beside the byte.
    let (lw, lr) = pagepipe::Builder::new().capacity(2 * PACKET).build()?;
    if lw.try_write(b"L")? != 1 {
        return Err(io::Error::other("the new lock pipe took no byte"));
    }
    lw.set_write_timeout(Some(LOCK_TRY))?;
    lr.set_read_timeout(Some(LOCK_SLICE))?;
    Ok((data, (lw, lr)))
}
