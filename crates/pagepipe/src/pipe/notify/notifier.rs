//! The posting end of a notification pipe: [`Notifier::post`] never sleeps (see the protocol in
//! the module docs of `pipe::notify`).

use super::record::{filters_pass, Notification, META_KIND, RECORD_MAX};
use crate::error::{broken_pipe, release_stuck};
use crate::lock;
use crate::pipe::end::End;
use crate::pipe::shared::{publish, Ring, Shared, WriteGuard};
use crate::region::{LOSS, RELEASED};
use crate::ring;
use crate::sync::{Arc, Ordering};
use std::io;
use std::time::Instant;

/// Turns a poster spins waiting for a reader between its release and its tail update before it
/// asks the OS whether that reader is alive.
const RELEASE_CHECK: u32 = 1 << 12;
/// That wait yields the CPU every this many turns (every turn under loom, which needs a yield
/// to make progress in a spin loop).
#[cfg(not(loom))]
const YIELD_EVERY: u32 = 64;
#[cfg(loom)]
const YIELD_EVERY: u32 = 1;

/// The posting end of a notification pipe (see [`crate::Builder::notifications`]).
///
/// Any number of threads and processes may post at once (clone it, or pass it like a pipe end
/// with [`Notifier::send_to`], [`Notifier::pass_to`]); the reader sees end of file once every
/// notifier is gone. A post never sleeps and never waits for the reader.
///
/// ```
/// use pagepipe::{Builder, Notification};
/// let (notifier, mut reader) = Builder::new().notifications(4).build()?;
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
    /// readiness lock to keep that descriptor exact, waiting for it at most 100 ms (past that, a
    /// thread of this process brings the descriptor up to date once the lock is free).
    ///
    /// ```
    /// use pagepipe::{Builder, Notification};
    /// let (notifier, mut reader) = Builder::new().notifications(8).build()?;
    /// assert!(notifier.post(&Notification { kind: 1, subtype: 2, ..Default::default() })?);
    /// assert_eq!(reader.read_notification()?.subtype, 2);
    /// // Meta records (kind 0, such as LOSS) are the pipe's own: a notifier cannot forge them.
    /// let forged = notifier.post(&Notification::loss()).unwrap_err();
    /// assert_eq!(forged.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a kind above 24 bits, a payload longer than
    /// [`crate::MAX_PAYLOAD`], or kind [`crate::META_KIND`] (0: meta records such as LOSS
    /// are made by the pipe, as on Linux, where only the kernel posts them);
    /// [`io::ErrorKind::BrokenPipe`] when no reader is left;
    /// [`io::ErrorKind::InvalidData`] if the shared region is corrupt; [`io::ErrorKind::TimedOut`]
    /// if the write side stayed held for 100 ms (a poster holds it for microseconds: a peer
    /// wrote a live thread's identity into the lock), or if the ring is full and a reader in
    /// the middle of a release did not move on for 100 ms: a post spins for at most 100 ms for
    /// the side, then 100 ms for the reader.
    pub fn post(&self, n: &Notification) -> io::Result<bool> {
        let mut rec = [0u8; RECORD_MAX];
        if n.kind == META_KIND {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "kind 0 is for meta records (LOSS), which only the pipe makes; post kinds 1 and up",
            ));
        }
        let len = n.encode(&mut rec)?;
        if self.end.peer_gone(false) {
            return Err(broken_pipe());
        }
        let sh = &*self.end.shared;
        let word = n.kind | u32::from(n.subtype) << 24;
        if !filters_pass(sh.header(), word, n.info()) {
            return Ok(true);
        }
        let mut ws = sh.lock_write(lock::Wait::spin())?;
        let posted = post_locked(sh, &mut ws, &rec[..len]);
        drop(ws);
        if posted? {
            self.end.sync();
            return Ok(true);
        }
        Ok(false)
    }

    /// Records the pipe holds (a power of two).
    ///
    /// # Examples
    /// See [`crate::NotificationBuilder::pool`].
    pub fn capacity(&self) -> usize {
        self.end.shared.config().notes
    }
}

/// With the write side held: queues `rec` or flags the loss (see the module docs).
fn post_locked(sh: &Shared, ws: &mut WriteGuard<'_>, rec: &[u8]) -> io::Result<bool> {
    let h = sh.header();
    // Borrows the region, not the guard, whose indices we move below.
    let ring = Ring::new(&sh.region, ws.ring_size);
    let (mut turns, started) = (0u32, Instant::now());
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
        if check && started.elapsed() > lock::SPIN_PATIENCE {
            // A reader preempted between its release and its tail update, or a peer that
            // set the flag: either way, not worth more than this.
            return Err(release_stuck(ws.head - 1, tail, lock::SPIN_PATIENCE));
        }
        // No live reader in the middle of a release: a dead one's successor, or a peer that
        // wrote the flag, owes the LOSS record (see `Shared::lock_read`).
        let no_live_reader = check && !h.read_side.lock.held_by_live(sh);
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
    let published = publish(sh, ws.head, 1, rec.len());
    ws.head += 1;
    published.map(|()| true)
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
