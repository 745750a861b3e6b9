//! The messages a receiver takes in and the queue that hands them to the worker thread, which
//! checksums and drops them.

use super::outcome::ThreadCpu;
use crate::workloads::frag::alloc::RawBuf;
use bytes::BytesMut;
use pagepipe::Frag;
use std::alloc::{GlobalAlloc, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// A message on its way to the worker: the bytes it checksums.
pub(super) trait Message: Send + 'static {
    fn payload(&self) -> &[u8];
}

impl Message for Frag {
    fn payload(&self) -> &[u8] {
        self
    }
}

impl Message for BytesMut {
    fn payload(&self) -> &[u8] {
        self
    }
}

impl Message for bytes::Bytes {
    fn payload(&self) -> &[u8] {
        self
    }
}

/// A buffer from a `GlobalAlloc` with the length of the message it holds.
pub(super) struct LenBuf<A: GlobalAlloc + 'static> {
    pub(super) raw: RawBuf<A>,
    /// Invariant: the first `len` bytes are initialized, `len <= raw.layout.size()`.
    pub(super) len: usize,
}

impl<A: GlobalAlloc + Sync + 'static> Message for LenBuf<A> {
    fn payload(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are initialized and inside the allocation (type
        // invariant); the buffer is owned, so no one writes them meanwhile.
        unsafe { std::slice::from_raw_parts(self.raw.ptr.as_ptr(), self.len) }
    }
}

/// The receiver's end of the queue to the worker. Messages travel in batches (one per
/// `recvmmsg` call or TCP read) inside recycled `Vec`s, so a hand-off allocates nothing and a
/// sleeping worker is woken once per batch, not per message; both ends sleep rather than spin,
/// leaving the CPU to the other threads and the sender on this 2-core machine.
pub(super) struct Queue<M> {
    full: SyncSender<Vec<M>>,
    empty: Receiver<Vec<M>>,
    cur: Vec<M>,
}

impl<M: Message> Queue<M> {
    /// A queue holding up to `entries` messages in batches of `batch`, and its worker thread.
    pub(super) fn start(
        entries: usize,
        batch: usize,
    ) -> (Queue<M>, std::thread::JoinHandle<(u64, u64, f64)>) {
        let batches = (entries / batch).max(2);
        let (full, full_rx) = sync_channel::<Vec<M>>(batches);
        let (empty_tx, empty) = sync_channel::<Vec<M>>(batches + 1);
        for _ in 0..batches {
            empty_tx
                .send(Vec::with_capacity(batch))
                .expect("the queue holds every batch");
        }
        let w = std::thread::spawn(move || worker(full_rx, empty_tx));
        let q = Queue {
            full,
            empty,
            cur: Vec::with_capacity(batch),
        };
        (q, w)
    }

    pub(super) fn push(&mut self, m: M) {
        self.cur.push(m);
    }

    /// Hands the messages pushed so far to the worker.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if self.cur.is_empty() {
            return Ok(());
        }
        let gone = || io::Error::other("the worker thread is gone");
        let next = self.empty.recv().map_err(|_| gone())?;
        let batch = std::mem::replace(&mut self.cur, next);
        self.full.send(batch).map_err(|_| gone())
    }
}

/// The worker: takes batches off the queue until the receiver hangs up, checksums each message
/// and drops it there, and sends the empty batch back. Returns (messages, checksum, CPU
/// seconds of the worker thread).
fn worker<M: Message>(full: Receiver<Vec<M>>, empty: SyncSender<Vec<M>>) -> (u64, u64, f64) {
    let cpu0 = ThreadCpu::now();
    let (mut n, mut sum) = (0u64, 0u64);
    while let Ok(mut batch) = full.recv() {
        for m in batch.drain(..) {
            sum = sum.wrapping_add(checksum(m.payload()));
            n += 1;
            release(m);
        }
        let _ = empty.send(batch); // fails only once the receiver is done
    }
    (n, sum, ThreadCpu::now().since(cpu0).total())
}

/// Sum of the bytes: reads every byte once (vectorized).
fn checksum(b: &[u8]) -> u64 {
    b.iter().map(|&x| u64::from(x)).sum()
}

/// Drops a message; a function of its own so a profile (callgrind) shows what freeing costs.
#[inline(never)]
fn release<M>(m: M) {
    drop(m);
}

/// An uninitialized buffer of `size` (> 0) bytes from `alloc`, freed on drop.
pub(super) fn raw_buf<A: GlobalAlloc + 'static>(alloc: &'static A, size: usize) -> RawBuf<A> {
    let layout = Layout::from_size_align(size, 1).expect("a message size fits isize");
    // SAFETY: `layout` has a non-zero size (callers pass at least 1).
    let ptr = unsafe { alloc.alloc(layout) };
    RawBuf {
        ptr: NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout)),
        layout,
        alloc,
    }
}
