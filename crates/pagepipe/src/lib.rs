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
// docs.rs (`--cfg docsrs`, nightly) marks feature-gated items with the feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Under loom only the ring, lock and wait protocols are built for the models: the syscall and
// cross-process halves are unused there.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

// The layers (which module may use which) are in docs/ARCHITECTURE.md;
// scripts/import-graph.py checks that no file imports another in a circle.
mod builder;
#[cfg(not(loom))]
mod cells;
mod error;
mod fork;
#[cfg(not(loom))]
mod fork_gate;
mod frag;
mod lock;
mod pipe;
mod pool;
mod pressure;
mod reclaim;
mod region;
mod ring;
mod spin;
mod sync;
#[cfg(all(feature = "tokio", not(loom)))]
mod timer;
#[cfg(all(feature = "tokio", not(loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;
mod wait;
#[cfg(not(loom))]
mod watch;

use pagepipe_sys as sys;

pub use builder::{pipe, Builder, NotificationBuilder, DEFAULT_CAPACITY};
pub use frag::{
    Frag, FragCache, FragStats, FrozenFrag, PreparedFrag, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE,
};
pub use pipe::notify::{
    Filter, Notification, NotificationReader, Notifications, Notifier, LOSS_SUBTYPE, MAX_FILTERS,
    MAX_PAYLOAD, META_KIND,
};
pub use pipe::reader::{ReadChunk, Reader};
#[cfg(not(loom))]
pub use pipe::splice::{splice, tee};
pub use pipe::writer::{WriteChunk, Writer, PIPE_BUF};
pub use pool::policy::PoolPolicy;
pub use pressure::PressureMonitor;
pub use reclaim::shrink;
pub use region::{DEFAULT_MAX_CAPACITY, MAX_CAPACITY, MAX_RECORDS};
