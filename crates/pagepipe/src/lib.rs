//! Linux pipes in userspace, over a ring of page slots with a per-pipe page pool.
//!
//! A pagepipe behaves like a Linux pipe, byte for byte, in its default configuration (4 KiB
//! slots, 64 KiB capacity): the same counts, the same `WouldBlock`, end of file and
//! `BrokenPipe`, the same merging of small writes into the last page, the same `F_SETPIPE_SZ`
//! rounding, atomic writes of up to [`PIPE_BUF`] bytes. It moves data without system calls while
//! both sides are busy: an uncontended read or write touches only shared memory, and a side that
//! has to wait spins briefly, then sleeps on a futex until the other side wakes it.
//!
//! ```
//! use std::io::{Read, Write};
//!
//! let (mut writer, mut reader) = pagepipe::pipe()?;
//! let producer = std::thread::spawn(move || -> std::io::Result<()> {
//!     for i in 0..1000u32 {
//!         writer.write_all(&i.to_le_bytes())?;
//!     }
//!     Ok(()) // dropping the writer ends the stream
//! });
//! let mut bytes = Vec::new();
//! reader.read_to_end(&mut bytes)?;
//! producer.join().unwrap()?;
//! assert_eq!(bytes.len(), 4000);
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Under loom only the ring, lock and wait protocols are built for the models: the syscall and
// cross-process halves are unused there.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub mod dontcache;
mod frag;
mod lock;
mod pipe;
mod pool;
mod pressure;
mod region;
mod ring;
mod sync;
use pagepipe_sys as sys;
#[cfg(all(feature = "tokio", not(loom)))]
pub mod tokio;

pub use frag::{
    Frag, FragCache, FragStats, FrozenFrag, PreparedFrag, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE,
};
#[cfg(not(loom))]
pub use pipe::{splice, tee};
pub use pipe::{
    Filter, Notification, Notifier, ReadChunk, Reader, WriteChunk, Writer, LOSS_SUBTYPE,
    MAX_CAPACITY, MAX_FILTERS, MAX_PAYLOAD, MAX_RECORDS, META_KIND,
};
pub use pool::PoolPolicy;
pub use pressure::{shrink, PressureMonitor};

use std::io;

/// Writes of at most this many bytes are atomic: they are never interleaved with other writes.
pub const PIPE_BUF: usize = 4096;

/// The capacity of a new pipe: 64 KiB, as on Linux.
pub const DEFAULT_CAPACITY: usize = 64 * 1024;

/// Creates a pipe with Linux's defaults: 64 KiB capacity in 4 KiB slots, blocking, not packet
/// mode, the default pool policy.
///
/// # Errors
/// Only if the OS refuses the memory mapping for the ring.
pub fn pipe() -> io::Result<(Writer, Reader)> {
    Builder::new().build()
}

/// Configures a pipe before creating it.
///
/// ```
/// use pagepipe::{Builder, PoolPolicy};
/// let (w, _r) = Builder::new()
///     .capacity(1 << 20)
///     .pool(PoolPolicy::Unified { keep: 2, burst: 8 })
///     .build()?;
/// assert_eq!(w.capacity(), 1 << 20);
/// assert!(Builder::new().capacity(0).build().is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    capacity: usize,
    policy: PoolPolicy,
    slot_size: usize,
    packet: bool,
    /// Records of a notification pipe, if [`Builder::notifications`] was called.
    notifications: Option<usize>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// Linux's defaults (see [`pipe`]).
    pub fn new() -> Builder {
        Builder {
            capacity: DEFAULT_CAPACITY,
            policy: PoolPolicy::default(),
            slot_size: sys::mm::PAGE_SIZE,
            packet: false,
            notifications: None,
        }
    }

    /// The capacity in bytes; rounded up as `F_SETPIPE_SZ` rounds (a power-of-two number of
    /// pages), then to whole slots. Must be from 1 byte to [`MAX_CAPACITY`].
    pub fn capacity(mut self, bytes: usize) -> Builder {
        self.capacity = bytes;
        self
    }

    /// How the pipe recycles its pages; see [`PoolPolicy`].
    pub fn pool(mut self, policy: PoolPolicy) -> Builder {
        self.policy = policy;
        self
    }

    /// Bytes per slot: a power of two from 4 KiB to 1 GiB (default 4 KiB). Larger slots
    /// reproduce seed 001's "fatpipe"; Linux semantics hold byte for byte only with 4 KiB slots
    /// (merging and atomicity then work in slot units).
    pub fn slot_size(mut self, bytes: usize) -> Builder {
        self.slot_size = bytes;
        self
    }

    /// Packet mode, like a Linux `O_DIRECT` pipe: each write of up to one slot is a packet, never
    /// merged; a read returns at most one packet and discards what of it did not fit.
    pub fn packet_mode(mut self, packet: bool) -> Builder {
        self.packet = packet;
        self
    }

    /// Makes [`Builder::build_notifications`] build a notification pipe of `records` records
    /// (Linux: 1 to 512, rounded up to a power of two, as `IOC_WATCH_QUEUE_SET_SIZE` sizes the
    /// ring). Every slot of its ring is reserved for records: the pipe takes no data.
    pub fn notifications(mut self, records: usize) -> Builder {
        self.notifications = Some(records);
        self
    }

    /// Creates a notification pipe (seed 002, Linux's watch_queue): a [`Notifier`] that posts
    /// records without ever blocking, and the [`Reader`] that reads them whole (see
    /// [`Reader::read_notification`]). Capacity, slot size and packet mode do not apply; the
    /// pool policy does.
    ///
    /// On the reader, as on a Linux notification pipe: `read` returns whole records in Linux's
    /// byte layout, and fails with `ENOBUFS` when the buffer cannot hold the next one; a LOSS
    /// record (8 bytes, kind 0, subtype 1) follows the records queued when posts were lost;
    /// `read_chunk` and the splice family fail with `EXDEV`, `set_capacity` with `EBUSY`.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if [`Builder::notifications`] was not called or asked
    /// for 0 or more than [`MAX_RECORDS`] records; the OS's error if it refuses the mapping.
    pub fn build_notifications(self) -> io::Result<(Notifier, Reader)> {
        let Some(records) = self.notifications else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "build_notifications needs Builder::notifications(records)",
            ));
        };
        if !sys::mm::page_size_ok() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "pagepipe needs 4 KiB pages",
            ));
        }
        pipe::create_notifications(records, self.policy)
    }

    /// Creates the pipe.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] after [`Builder::notifications`] (use
    /// [`Builder::build_notifications`]), for a capacity of 0 or above [`MAX_CAPACITY`], or a slot
    /// size that is not a power of two from 4 KiB to 1 GiB; [`io::ErrorKind::Unsupported`] on a
    /// system whose page size is not 4 KiB; the OS's error if it refuses the ring's mapping.
    pub fn build(self) -> io::Result<(Writer, Reader)> {
        if self.notifications.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a Builder with notifications() builds with build_notifications()",
            ));
        }
        pipe::check_slot_size(self.slot_size)?;
        let ring_size = pipe::ring_size_for(self.capacity, self.slot_size)?;
        if !sys::mm::page_size_ok() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "pagepipe needs 4 KiB pages",
            ));
        }
        let config = region::Config {
            policy: self.policy,
            packet: self.packet,
            slot_size: self.slot_size,
            notes: 0,
        };
        pipe::create(ring_size, config)
    }
}
