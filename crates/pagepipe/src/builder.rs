//! Making pipes: [`pipe`] with Linux's defaults, [`Builder`] for the rest, and
//! [`NotificationBuilder`] for notification pipes.

use crate::pipe::create::create;
use crate::pipe::notify::{NotificationReader, Notifier};
use crate::pipe::reader::Reader;
use crate::pipe::writer::Writer;
use crate::pool::policy::PoolPolicy;
use crate::region::{self, check_slot_size, ring_size_for, Config, DEFAULT_MAX_CAPACITY};
use crate::sys;
use std::io;

/// The capacity of a new pipe: 64 KiB, as on Linux.
pub const DEFAULT_CAPACITY: usize = 64 * 1024;

/// Creates a pipe with Linux's defaults: 64 KiB capacity in 4 KiB slots, blocking, not packet
/// mode, the default pool policy.
///
/// Returns **(writer, reader)**: the reverse of `std::io::pipe()`'s and `os_pipe::pipe()`'s
/// (reader, writer) order; the types keep a swap from compiling where an end is used.
///
/// # Examples
///
/// ```
/// use std::io::{Read, Write};
/// let (mut w, mut r) = pagepipe::pipe()?;
/// w.write_all(b"hi")?;
/// drop(w); // the last writer: end of file after the queued bytes
/// let mut s = String::new();
/// r.read_to_string(&mut s)?;
/// assert_eq!(s, "hi");
/// # Ok::<(), std::io::Error>(())
/// ```
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
    max_capacity: usize,
    policy: PoolPolicy,
    slot_size: usize,
    packet: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// Linux's defaults (see [`pipe`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use pagepipe::{Builder, PoolPolicy};
    /// let (w, r) = Builder::new()
    ///     .capacity(1 << 20)                        // F_SETPIPE_SZ rounding
    ///     .pool(PoolPolicy::Adaptive { keep: 4 })
    ///     .packet_mode(true)                        // O_DIRECT pipes: one write, one packet
    ///     .build()?;
    /// (&w).write_all(b"one")?;
    /// (&w).write_all(b"two")?;
    /// let mut buf = [0u8; 16];
    /// assert_eq!((&r).read(&mut buf)?, 3);          // a read returns one packet
    /// assert_eq!(w.capacity(), 1 << 20);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> Builder {
        Builder {
            capacity: DEFAULT_CAPACITY,
            max_capacity: DEFAULT_MAX_CAPACITY,
            policy: PoolPolicy::default(),
            slot_size: sys::mm::PAGE_SIZE,
            packet: false,
        }
    }

    /// The capacity in bytes; rounded up as `F_SETPIPE_SZ` rounds (a power-of-two number of
    /// pages), then to whole slots. Must be from 1 byte to [`crate::MAX_CAPACITY`].
    ///
    /// # Examples
    /// See [`Builder::new`].
    pub fn capacity(mut self, bytes: usize) -> Builder {
        self.capacity = bytes;
        self
    }

    /// The most the pipe may grow to with `set_capacity` (rounded as [`Builder::capacity`]
    /// rounds; at least the capacity): from 1 byte to [`crate::MAX_CAPACITY`], default
    /// [`crate::DEFAULT_MAX_CAPACITY`] (1 MiB, Linux's default `pipe-max-size`). The pipe
    /// reserves address space for twice this (room to grow and to stage a resize), never
    /// memory: pages are allocated as data arrives. A process that makes many pipes lowers it;
    /// one that grows a pipe past 1 MiB raises it.
    ///
    /// ```
    /// let (w, _r) = pagepipe::Builder::new().max_capacity(1 << 30).build()?;
    /// assert_eq!(w.set_capacity(256 << 20)?, 256 << 20);
    /// let (w, _r) = pagepipe::Builder::new().max_capacity(64 << 10).build()?;
    /// let e = w.set_capacity(128 << 10).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn max_capacity(mut self, bytes: usize) -> Builder {
        self.max_capacity = bytes;
        self
    }

    /// How the pipe recycles its pages; see [`PoolPolicy`].
    ///
    /// # Examples
    /// See [`Builder::new`].
    pub fn pool(mut self, policy: PoolPolicy) -> Builder {
        self.policy = policy;
        self
    }

    /// Bytes per slot: a power of two from 4 KiB to 1 GiB (default 4 KiB). Larger slots
    /// reproduce the "fat pipe" Linux tried in 2000 (pipe buffers larger than a page for big
    /// writes; dropped because bandwidth fell: `pagepipe-bench bw --slot-size` measures it).
    /// Linux semantics hold byte for byte only with 4 KiB slots (merging and atomicity then
    /// work in slot units).
    ///
    /// ```
    /// let (w, _r) = pagepipe::Builder::new().slot_size(16 << 10).capacity(1 << 20).build()?;
    /// assert_eq!(w.capacity(), 1 << 20);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn slot_size(mut self, bytes: usize) -> Builder {
        self.slot_size = bytes;
        self
    }

    /// Packet mode, like a Linux `O_DIRECT` pipe: each write of up to one slot is a packet, never
    /// merged; a read returns at most one packet and discards what of it did not fit.
    ///
    /// # Examples
    /// See [`Builder::new`].
    pub fn packet_mode(mut self, packet: bool) -> Builder {
        self.packet = packet;
        self
    }

    /// Turns this builder into one for a notification pipe of `records` records (Linux: 1 to
    /// 512, rounded up to a power of two, as `IOC_WATCH_QUEUE_SET_SIZE` sizes the ring), keeping
    /// its pool policy. Every slot of its ring is reserved for records: the pipe takes no data,
    /// so capacity, slot size and packet mode do not apply.
    ///
    /// ```
    /// use pagepipe::{Builder, Notification};
    /// let (notifier, mut reader) = Builder::new().notifications(64).build()?;
    /// notifier.post(&Notification { kind: 7, subtype: 1, ..Default::default() })?;
    /// assert_eq!(reader.read_notification()?.kind, 7);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn notifications(self, records: usize) -> NotificationBuilder {
        NotificationBuilder {
            records,
            policy: self.policy,
        }
    }

    /// Creates the pipe.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a capacity or maximum capacity of 0 or above
    /// [`crate::MAX_CAPACITY`], or
    /// a slot size that is not a power of two from 4 KiB to 1 GiB; [`io::ErrorKind::Unsupported`] on a
    /// system whose page size is not 4 KiB; the OS's error if it refuses the ring's mapping.
    ///
    /// # Examples
    /// See [`Builder::new`].
    pub fn build(self) -> io::Result<(Writer, Reader)> {
        check_slot_size(self.slot_size)?;
        let ring_size = ring_size_for(self.capacity, self.slot_size)?;
        let reach = ring_size_for(self.max_capacity, self.slot_size)?.max(ring_size);
        check_page_size()?;
        let config = Config {
            policy: self.policy,
            packet: self.packet,
            slot_size: self.slot_size,
            notes: 0,
        };
        let (w, r) = create(ring_size, config, reach)?;
        Ok((Writer { end: w }, Reader { end: r }))
    }
}

/// Configures a notification pipe (Linux's watch queue: `pipe2(O_NOTIFICATION_PIPE)`, see
/// `Documentation/core-api/watch_queue.rst`) before creating it; made by
/// [`Builder::notifications`].
#[derive(Clone, Debug)]
pub struct NotificationBuilder {
    records: usize,
    policy: PoolPolicy,
}

impl NotificationBuilder {
    /// How the pipe recycles its pages; see [`PoolPolicy`].
    ///
    /// # Examples
    ///
    /// ```
    /// use pagepipe::{Builder, Notification, PoolPolicy};
    /// let (notifier, mut reader) = Builder::new()
    ///     .notifications(16)
    ///     .pool(PoolPolicy::default())
    ///     .build()?;
    /// assert_eq!(notifier.capacity(), 16);
    /// notifier.post(&Notification { kind: 1, ..Default::default() })?;
    /// assert_eq!(reader.read_notification()?.kind, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pool(mut self, policy: PoolPolicy) -> NotificationBuilder {
        self.policy = policy;
        self
    }

    /// Creates the notification pipe: a [`Notifier`] that posts records without ever blocking,
    /// and the [`NotificationReader`] that reads them whole.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for 0 or more than [`crate::MAX_RECORDS`] records;
    /// [`io::ErrorKind::Unsupported`] on a system whose page size is not 4 KiB; the OS's error
    /// if it refuses the mapping.
    ///
    /// # Examples
    /// See [`NotificationBuilder::pool`].
    pub fn build(self) -> io::Result<(Notifier, NotificationReader)> {
        let ring = region::notes_ring_for(self.records)?;
        check_page_size()?;
        let config = Config {
            policy: self.policy,
            packet: false,
            slot_size: sys::mm::PAGE_SIZE,
            notes: ring,
        };
        let (w, r) = create(ring, config, ring)?;
        Ok((Notifier { end: w }, NotificationReader { end: r }))
    }
}

/// `Unsupported` unless the OS page size is the 4 KiB pagepipe assumes.
fn check_page_size() -> io::Result<()> {
    if !sys::mm::page_size_ok() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "pagepipe needs 4 KiB pages",
        ));
    }
    Ok(())
}
