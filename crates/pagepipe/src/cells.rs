//! Cells: where regions' near parts live, many to a page-table page.
//!
//! An idle pipe touches two pages of its region: the header's and its first data page. Were
//! each region its own mapping, its 2 MiB reservation would put every pipe's two pages under a
//! page-table page of their own (4 KiB of kernel memory per pipe, more than the data page).
//! So every region maps its near part (the header page and its first 64 KiB of ring, see
//! `region::Layout`) into a cell: a fixed slot of [`CELL`] bytes in an *area*, a 2 MiB
//! reservation aligned to 2 MiB, which one page-table page covers. [`PER_AREA`] pipes share it.
//! The rest of a region is mapped only when a ring grows past its near part (`Region::far`).
//!
//! An area is address space reserved `PROT_NONE`: a cell is the memory file mapped over its
//! slot with `MAP_FIXED`, and given back by mapping reserved space over it again, so no other
//! mapping of the process can land in a free cell. A cell whose mapping or re-reservation
//! failed (its range may be a hole then) is never handed out again, and its area never
//! unmapped. An area whose cells are all free is unmapped (its page-table page with it),
//! except one, kept for the next pipe. A default pipe's near part fills its cell, so its cell
//! is one mapping (the process's `vm.max_map_count` counts them); a smaller near part leaves
//! reserved space after it, a second mapping.
//!
//! What is mapped in a cell must never be longer than asked: `Region::attach` refuses a
//! huge-page memory file (its mappings are rounded up to 2 MiB) before mapping anything.
//!
//! The list's lock is a leaf: nothing is called while it is held but `mmap(2)` and `munmap(2)`.
//! The fork handlers take it ([`lock`]), so a child never inherits it held.

use crate::sys::mm::{self, PAGE_SIZE};
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

/// An area: what one page-table page maps.
pub(crate) const AREA: usize = 2 << 20;
/// A cell: a header page and 64 KiB of ring, the largest near part (`region::NEAR_BYTES`).
pub(crate) const CELL: usize = PAGE_SIZE + (64 << 10);
/// Cells per area.
pub(crate) const PER_AREA: usize = AREA / CELL;
const _: () = assert!(PER_AREA >= 1 && PER_AREA <= 32 && CELL % PAGE_SIZE == 0);

/// One area: its first byte and which of its cells are free (bit `i`: cell `i`).
struct Area {
    base: usize,
    free: u32,
}

/// Every area of the process.
pub(crate) struct Areas {
    areas: Vec<Area>,
}

/// Every cell of the process is free.
const ALL_FREE: u32 = if PER_AREA == 32 {
    u32::MAX
} else {
    (1 << PER_AREA) - 1
};

static AREAS: Mutex<Areas> = Mutex::new(Areas { areas: Vec::new() });

/// The areas, locked (also by the fork handlers, around `fork(2)`).
pub(crate) fn lock() -> MutexGuard<'static, Areas> {
    AREAS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A region's near part, mapped in a cell; the cell is free again when this is dropped.
///
/// Invariant: `ptr..ptr + len` is a shared mapping of a memory file from offset 0, in a cell
/// this value alone owns, and `len <= CELL`.
pub(crate) struct Cell {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Cell is a mapping like `sys::mm::Mapping`; which thread touches which bytes is
// decided by its users.
unsafe impl Send for Cell {}
// SAFETY: as for Send; `&Cell` only hands out a raw pointer.
unsafe impl Sync for Cell {}

impl Cell {
    /// Maps the first `len` bytes of the memory file `fd` in a free cell.
    ///
    /// # Errors
    /// The OS's error from `mmap(2)` (`ENOMEM`: no address space, or the process's mapping
    /// count limit).
    pub(crate) fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Cell> {
        assert!(
            len > 0 && len <= CELL && len % PAGE_SIZE == 0,
            "a near part of {len} bytes does not fit a cell"
        );
        let ptr = take()?;
        // SAFETY: the cell is ours alone (`take`), reserved address space nothing points into.
        if let Err(e) = unsafe { mm::map_shared_at(ptr, fd, len) } {
            // Before Linux 6.12 a failed MAP_FIXED may have unmapped the range first: the cell
            // is never handed out again (its area is then never unmapped either).
            give_back(ptr, false);
            return Err(e);
        }
        Ok(Cell { ptr, len })
    }

    /// The first byte of the near part (the region's first byte).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The near part's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        // SAFETY: the cell is ours (type invariant) and nothing uses it past drop.
        let reserved = unsafe { mm::re_reserve(self.ptr, self.len) }.is_ok();
        if !reserved {
            // The file must not stay mapped: unmap it, and never hand the cell out again (its
            // range is no longer reserved, so another mapping may land there).
            // SAFETY: as above.
            unsafe { mm::unmap(self.ptr, self.len) };
        }
        give_back(self.ptr, reserved);
    }
}

/// A free cell, taken: in the area with the fewest free cells (pipes pack into as few
/// page-table pages as they can), or in a new area.
fn take() -> io::Result<NonNull<u8>> {
    let mut list = lock();
    let best = list
        .areas
        .iter_mut()
        .filter(|a| a.free != 0)
        .min_by_key(|a| a.free.count_ones());
    let area = match best {
        Some(area) => area,
        None => {
            let base = mm::reserve_aligned(AREA, AREA)?;
            list.areas.push(Area {
                base: base.as_ptr() as usize,
                free: ALL_FREE,
            });
            list.areas.last_mut().expect("just pushed")
        }
    };
    let i = area.free.trailing_zeros() as usize;
    area.free &= !(1 << i);
    let addr = area.base + i * CELL;
    Ok(NonNull::new(addr as *mut u8).expect("an area is never at address 0"))
}

/// Marks the cell at `ptr` free (`reusable`: its range is reserved again), and unmaps its
/// area if every cell of it is free and another area has a free cell.
fn give_back(ptr: NonNull<u8>, reusable: bool) {
    let addr = ptr.as_ptr() as usize;
    let mut list = lock();
    let Some(at) = list
        .areas
        .iter()
        .position(|a| (a.base..a.base + AREA).contains(&addr))
    else {
        debug_assert!(false, "a cell outside every area");
        return;
    };
    if reusable {
        list.areas[at].free |= 1 << ((addr - list.areas[at].base) / CELL);
    }
    let empty = list.areas[at].free == ALL_FREE;
    let other_free = list
        .areas
        .iter()
        .enumerate()
        .any(|(j, a)| j != at && a.free != 0);
    if empty && other_free {
        let area = list.areas.swap_remove(at);
        // SAFETY: every cell of the area is free: nothing is mapped there but the reservation,
        // and no Cell points into it.
        unsafe { mm::unmap(NonNull::new(area.base as *mut u8).expect("non-null"), AREA) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cells lie in 2 MiB-aligned areas (one page-table page each), every cell maps the file
    /// it was given, and freed cells are handed out again.
    #[test]
    fn cells_pack_into_aligned_areas() {
        let file = crate::sys::memfd::sealed_memfd(CELL as u64).unwrap();
        use std::os::fd::AsFd;
        let cells: Vec<Cell> = (0..PER_AREA)
            .map(|_| Cell::map(file.as_fd(), CELL).unwrap())
            .collect();
        let areas: std::collections::HashSet<usize> =
            cells.iter().map(|c| c.as_ptr() as usize / AREA).collect();
        // Other tests of this binary may hold cells too, so the cells may spread over two areas.
        assert!(areas.len() <= 2, "{} areas", areas.len());
        // SAFETY: the cell maps CELL bytes of `file`.
        unsafe { cells[0].as_ptr().write(7) };
        // SAFETY: as above; every cell maps the same file.
        let seen = unsafe { cells[1].as_ptr().read() };
        assert_eq!(seen, 7, "one file, many cells");
        drop(cells);
        let again = Cell::map(file.as_fd(), PAGE_SIZE).unwrap();
        assert_eq!(again.len(), PAGE_SIZE);
    }
}
