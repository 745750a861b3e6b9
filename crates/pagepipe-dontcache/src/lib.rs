//! A file writer that leaves no page cache behind, as fast as a buffered write + `fdatasync`
//! or faster (see Speed below).
//!
//! Backup tools, log shippers and bulk loaders write far more data than anyone will read back
//! soon. Written through the page cache as usual, that data evicts everyone else's cache; written
//! with `O_DIRECT`, it obeys alignment rules and loses the kernel's write batching. Linux 6.14's
//! `RWF_DONTCACHE` is the middle road: writes go through the page cache, writeback starts at
//! once, and the pages are dropped when it completes. [`Writer`] uses that flag where the file
//! supports it and otherwise does the same thing from userspace:
//!
//! - writes stay buffered (`pwrite(2)`), and each writer records the byte ranges it dirtied;
//! - one process-wide flusher, shared by every writer as the kernel's per-device flusher is, in
//!   two threads: the submitter (`pagepipe-flush`), kicked through a coalescing flag (many
//!   writes, one wake-up), starts writeback of the recorded ranges with
//!   `sync_file_range(SYNC_FILE_RANGE_WRITE)`, which can block for tens of milliseconds in the
//!   block layer's writeback throttling; the reaper (`pagepipe-reap`) meanwhile drops what
//!   completed;
//! - the reaper never waits for a writeback still running: it asks `cachestat(2)` which of a
//!   writer's oldest ranges in flight are written back (in any order: the elevator completes
//!   them in disk order), and only then reaps each one's error (`sync_file_range` wait) and
//!   drops exactly that range with `posix_fadvise(POSIX_FADV_DONTNEED)`, round robin over the
//!   writers, so one writer's slow range holds up nobody else;
//! - a per-writer dirty counter bounds the data in flight to a window ([`DEFAULT_WINDOW`], see
//!   [`Writer::with_window`]). Past a quarter of its window a writer is paced to its share of
//!   the measured writeback bandwidth (a short pause on every write, spun when it is shorter
//!   than a sleep's wake-up, as the kernel's `balance_dirty_pages` sleeps), holding at half
//!   its window, so it rarely hits the window; a writer over its window waits
//!   for the flusher and never flushes inline (the inline flush is what made the first
//!   `RWF_DONTCACHE` slow);
//! - the window is elastic when another process floods the disk: while the system's pages
//!   under writeback (`/proc/meminfo`) exceed this process's own by 64 MiB, the submitter
//!   yields (starts no new writeback, which would only queue behind the other process's and
//!   hold ext4's `i_data_sem` meanwhile) and each writer may go on writing into an overdraft of
//!   up to three windows from a process-wide budget, [`MAX_OVERDRAFT`] (96 MiB), paced so that
//!   it lasts 400 ms; once the other writeback is done its backlog drains half a window at a
//!   time. The hard bound on the fallback writers' dirty data is the sum of their windows plus
//!   [`MAX_OVERDRAFT`].
//!
//! ```
//! use std::io::Write;
//! use pagepipe_dontcache::{Mode, Writer};
//!
//! let path = std::env::temp_dir().join(format!("dontcache-doc-{}", std::process::id()));
//! let mut w = Writer::create(&path)?;
//! for _ in 0..16 {
//!     w.write_all(&[7u8; 64 * 1024])?;
//! }
//! let stats = w.finish()?; // fdatasync, then drop what is still cached
//! assert_eq!(stats.bytes_written, 1 << 20);
//! assert_ne!(stats.mode, Mode::Auto); // resolved by the first write
//! assert_eq!(std::fs::read(&path)?.len(), 1 << 20);
//! std::fs::remove_file(&path)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Speed: a file written in 1 MiB writes and made durable (`finish`) took, against
//! `std::fs::File` + `sync_data` in the same rounds (`examples/writer-speed.rs`, 5 alternating
//! rounds, ext4 on virtio, a shared 2-core VM, Linux 6.18): for 500 MB, 0.65x buffered's time
//! (range 0.59-0.80) in auto mode (`RWF_DONTCACHE`) and 0.78x (0.69-0.84) in fallback mode; for
//! 2 GiB, 0.33x (0.16-0.39) and 0.38x (0.18-0.45), buffered's own time varying most. Smaller
//! writes cost more: the writer's cost per call is fixed, and 8 KiB writes run several times
//! slower (`examples/copy.rs`).
//!
//! Errors are never lost silently: a write error is returned by that write; an error of the
//! flusher's writeback (`EIO`, `ENOSPC`) is kept and returned by the next write, [`Writer::sync`]
//! and [`Writer::finish`] (it stays: every later call fails too). Each writer writes and syncs
//! through an open file description of its own, where the kernel keeps its cursor into the
//! file's writeback-error record, so no other writer, descriptor or forked child can consume
//! its errors (see [`Writer::finish`] for exactly what `Ok` means). Dropping a writer without
//! [`Writer::finish`] writes its data out and drops it from the cache on a best-effort basis,
//! ignoring errors, like dropping a [`File`].
//!
//! [`File`]: std::fs::File
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

// The modules in layers, each using only modules of the layers before it (lib.rs only declares
// and re-exports): consts, mode, error; description, dirty, cache, pacing; folios; flusher; fork;
// reader; writer.
mod cache; // page-cache inspection
mod consts; // the windows and budgets, the flusher's and the pacing's tuning constants
mod description; // a writer's own open file description
mod dirty; // a writer's dirty ranges
mod error; // the crate's own io::Errors
mod flusher; // the process-wide flusher, and what each writer shares with it
mod folios; // the large folios around a fallback write
mod fork; // the fork handlers and the fork generation
mod mode; // Mode, Stats
mod pacing; // the arithmetic of a writer's pauses
mod reader; // Reader
#[cfg(test)]
mod test_support; // what the unit tests share
mod writer; // Writer

pub use cache::{cached_bytes, cached_bytes_in, drop_cache, release, reserve};
pub use consts::{DEFAULT_WINDOW, MAX_OVERDRAFT, MIN_WINDOW, SHARED_WINDOW};
pub use mode::{Mode, Stats};
pub use reader::Reader;
pub use writer::Writer;
