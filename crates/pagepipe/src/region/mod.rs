//! A pipe's shared region: header and first slots | page arena | rest of the slot table, in one
//! sealed memory file.
//!
//! Every process holding an end maps the same memory file, at an address of its own: the region
//! holds offsets and indices, never pointers, and only fixed-width integers. The geometry is
//! reserved when the pipe is made: positions for twice the largest ring the pipe may have
//! ([`DEFAULT_MAX_CAPACITY`] unless its builder said otherwise; see [`positions_for`]), so
//! resizing never changes the file (a sparse memory file costs nothing until touched).
//!
//! A process maps a region in two parts. The *near* part, the header's page and the first
//! [`NEAR_BYTES`] of the arena (all of a default pipe's ring), lives in a cell of a shared
//! area (`crate::cells`), so idle pipes share page-table pages. The *far* part is the whole
//! file mapped once more, made the first time this process sees a ring larger than the near
//! part, or resizes (the staging positions lie past both rings; [`Region::ensure_far`]), and
//! kept until the region goes.
//! Once it exists every page is addressed through it, so the ring's positions are always
//! contiguous in the address space whichever part is used; the two map the same pages.
//!
//! Trust: a peer may write anything anywhere in the region at any time. The immutable words
//! (magic, version, slot size, reserved slot count, configuration) are loaded once when a process
//! attaches, validated, and kept in [`Region`]'s own fields; they are never read from the region
//! again. Every mutable word is loaded once per use into a local and checked before it sizes or
//! places any access (see `pipe::shared::Shared`); a bad one is `InvalidData`. Bytes of data are copied
//! with raw-pointer copies only.
//!
//! Under `cfg(loom)` the same header lives on the heap with loom's atomics, so the ring, wait and
//! lock protocols stay model-checked.

mod backing;
mod geometry;
mod layout;
mod map;

#[cfg(not(loom))]
pub(crate) use backing::{after_forgets, ready_fd};
pub(crate) use geometry::{check_slot_size, notes_ring_for, ring_size_for};
pub use geometry::{DEFAULT_MAX_CAPACITY, MAX_CAPACITY, MAX_RECORDS};
pub(crate) use layout::{
    Header, Side, SideLine, Slot, CAN_MERGE, DROPPED, END_MASK, FULL, LOSS, PACKET, READABLE,
    RELEASED, SIGNAL_SLOTS, STAGED,
};
pub(crate) use map::{Config, Region};
