//! The sizes a pipe may take: the capacity rules (`F_SETPIPE_SZ`'s rounding), slot sizes,
//! notification pipes' record counts, and how many positions a region reserves for them.

use crate::error::invalid_input;
use crate::sys::mm::PAGE_SIZE;
use std::io;

/// Slot positions a region reserves for a data pipe whose ring may grow to `reach` slots: twice
/// as many, so that a resize always finds room to stage every queued slot past both rings (see
/// `pipe/capacity.rs`). Only address space: the memory file is sparse.
pub(crate) fn positions_for(reach: usize) -> usize {
    2 * reach
}

/// The largest capacity a pipe may have: 1 GiB.
pub const MAX_CAPACITY: usize = 1 << 30;

/// The capacity a pipe may grow to with `set_capacity` unless its builder says otherwise
/// ([`Builder::max_capacity`](crate::Builder::max_capacity)): 1 MiB, as far as Linux lets an
/// unprivileged process grow a pipe by default (`/proc/sys/fs/pipe-max-size`). A pipe reserves
/// address space for twice its maximum, and memory only for what it holds; the smaller the
/// maximum, the closer its slot table and its first pages lie (one page-table page and one
/// page-cache index node fewer per pipe than with 16 MiB).
pub const DEFAULT_MAX_CAPACITY: usize = 1 << 20;

/// The slot count for a requested capacity: `F_SETPIPE_SZ`'s rounding (up to a power-of-two
/// number of pages, at least one page), then divided into `slot_size` slots (at least one).
pub(crate) fn ring_size_for(bytes: usize, slot_size: usize) -> io::Result<usize> {
    if bytes == 0 || bytes > MAX_CAPACITY {
        return Err(invalid_input(format!(
            "pipe capacity {bytes} is outside 1..={MAX_CAPACITY} bytes"
        )));
    }
    let rounded = bytes.div_ceil(PAGE_SIZE).next_power_of_two() * PAGE_SIZE;
    Ok((rounded / slot_size).max(1))
}

/// Checks a slot size: a power of two from 4 KiB to 1 GiB.
pub(crate) fn check_slot_size(slot_size: usize) -> io::Result<()> {
    if !slot_size.is_power_of_two() || !(PAGE_SIZE..=MAX_CAPACITY).contains(&slot_size) {
        return Err(invalid_input(format!(
            "slot size {slot_size} is not a power of two from {PAGE_SIZE} to {MAX_CAPACITY}"
        )));
    }
    Ok(())
}

/// The most records a notification pipe holds (Linux: 512).
pub const MAX_RECORDS: usize = 512;

/// The ring size of a notification pipe of `records` records (Linux: 1..=512, rounded up to a
/// power of two, as `IOC_WATCH_QUEUE_SET_SIZE` sizes the ring).
pub(crate) fn notes_ring_for(records: usize) -> io::Result<usize> {
    if !(1..=MAX_RECORDS).contains(&records) {
        return Err(invalid_input(format!(
            "a notification pipe holds 1..={MAX_RECORDS} records, not {records}"
        )));
    }
    Ok(records.next_power_of_two())
}

/// Whether a record count fits a notification pipe as stored in its region: a power of two of at
/// most [`MAX_RECORDS`], in 4 KiB slots.
pub(crate) fn notes_ok(notes: usize, slot_size: usize) -> bool {
    notes.is_power_of_two() && notes <= MAX_RECORDS && slot_size == PAGE_SIZE
}
