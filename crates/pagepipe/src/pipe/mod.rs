//! The pipe: a ring of page slots in a shared region, a writing side and a reading side.
//!
//! Concurrency shape (one code path for threads and processes):
//! - Writers take the write side (a `crate::lock::SideLock` in the region, one writer at a time), readers
//!   the read side; the two sides run at the same time and meet only through the `head` and
//!   `tail` words and the slot states, as a single-producer single-consumer ring.
//! - A side reads the other side's index only when its own view says full (or empty).
//! - A side that must wait spins briefly, then registers in the other side's index word (see
//!   `crate::ring`) and sleeps on its futex, at most `lock::TICK` at a time. The advancing side
//!   sees the registration in the result of the very read-modify-write that publishes, so an
//!   uncontended read or write makes no syscall and a live sleeper is never missed; a peer that
//!   died cannot wake anyone, so every tick a sleeper asks the kernel whether the other end
//!   still has a holder.
//! - Which processes hold an end is counted by the kernel, through one small kernel pipe per
//!   pagepipe, its *signal pipe*. Every process holding a [`Writer`](crate::Writer) keeps its
//!   write end open, every process holding a [`Reader`](crate::Reader) its read end;
//!   descriptors follow `fork`, `SCM_RIGHTS` and exec like the ends they stand for, and the
//!   kernel closes them when a process exits or is killed. So the read end polls `POLLHUP`
//!   exactly when no process holds a writer, and the write end `POLLERR` when none holds a
//!   reader. A process that closes its last handle of an end bumps a counter in the region, so
//!   the other side knows when to ask the kernel.
//! - The same descriptors are what [`Reader`](crate::Reader) and [`Writer`](crate::Writer)
//!   hand out as `AsFd`. The signal pipe is in packet mode with two slots; once some process
//!   polls an end, it holds one one-byte packet while the ring holds data and two while the
//!   ring is full, so `poll(2)` and `epoll(7)` see what they would see on a kernel pipe (see
//!   `End::sync` in `end.rs`; a resize changes the slot count instead, which either end can).
//! - With the memory file (one description per process, which also holds the process key's
//!   lock once the pipe leaves the process, see [`crate::lock`]), a pipe costs a process
//!   three descriptors with both ends, two with one.
//! - The ring's geometry changes only in `set_capacity`, which holds both sides, in place.
//!
//! Files, bottom to top (each uses only those above it):
//! `cache` (regions of dropped pipes, ready for new ones), `shared` (the mapping, the side
//! guards, publish and consume), `hint` (prefetch hints), `end` (the signal pipe, liveness,
//! readiness, blocking), `create` (a new pipe's region and ends), `capacity` (resizing), then
//! the handles: `writer`, `reader`, `notify/` (notification pipes), `splice`, `ready`
//! (`AsFd`), `pass` (ends across processes).

#[cfg(not(loom))]
pub(crate) mod cache;
pub(crate) mod capacity;
mod copy;
pub(crate) mod create;
pub(crate) mod end;
pub(crate) mod hint;
pub(crate) mod keys;
#[cfg(all(test, loom))]
mod loom_tests;
pub(crate) mod notify;
#[cfg(not(loom))]
mod pass;
pub(crate) mod reader;
#[cfg(not(loom))]
mod ready;
pub(crate) mod shared;
#[cfg(not(loom))]
pub(crate) mod splice;
pub(crate) mod writer;

/// Writes `rounds` buffers of the sizes in `sizes` (in turn, each with a pattern of its round)
/// into a new pipe of `capacity` bytes, calling `before` ahead of each write, while a thread
/// reads it to the end; asserts every byte arrived in order.
#[cfg(all(test, not(loom)))]
pub(crate) fn pump_and_check(
    capacity: usize,
    rounds: u32,
    sizes: &[usize],
    mut before: impl FnMut(),
) {
    use std::io::{Read, Write};
    let (mut w, mut r) = crate::Builder::new().capacity(capacity).build().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        r.read_to_end(&mut all).unwrap();
        all
    });
    let mut expect = Vec::new();
    for round in 0..rounds {
        before();
        let n = sizes[round as usize % sizes.len()];
        let buf: Vec<u8> = (0..n as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 ^ round as u8)
            .collect();
        w.write_all(&buf).unwrap();
        expect.extend_from_slice(&buf);
    }
    drop(w);
    let all = reader.join().unwrap();
    assert_eq!(all.len(), expect.len());
    assert!(all == expect, "bytes differ");
}
