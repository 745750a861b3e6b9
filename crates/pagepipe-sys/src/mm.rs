//! Memory mappings and page facts (`mmap(2)`, `madvise(2)`, `mincore(2)`, `sysconf(3)`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;

/// The page size pagepipe assumes (checked against `sysconf` in [`page_size_ok`]).
pub const PAGE_SIZE: usize = 4096;

/// An anonymous private mapping, unmapped on drop.
///
/// Invariant: `ptr` is the start of a live mapping of exactly `len` bytes, readable and writable,
/// page aligned, owned by this value alone.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is plain memory; which thread may touch which bytes is decided by its users

unsafe impl Send for Mapping {}

// SAFETY: as for Send; `&Mapping` only hands out raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of zeroed memory, committed lazily (`mmap(2)` with `MAP_NORESERVE`).
    ///
    /// # Errors
    /// The OS's error from `mmap(2)` (`ENOMEM`).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::map(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        )
    }

    /// Maps `len` bytes of the memory file `fd` shared (`mmap(2)`, `MAP_SHARED`): stores are
    /// seen by every process that maps it. The caller has checked (and sealed) the file's size.
    ///
    /// # Errors
    /// The OS's error from `mmap(2)`.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        Mapping::map(len, libc::MAP_SHARED, fd.as_raw_fd())
    }

    fn map(len: usize, flags: libc::c_int, fd: RawFd) -> io::Result<Mapping> {
        assert!(
            len > 0 && len % PAGE_SIZE == 0,
            "mapping length {len} is not a positive page multiple"
        );
        // SAFETY: a fresh mapping at an address of the kernel's choice aliases no Rust memory.
        let ptr = unsafe { mmap(None, len, libc::PROT_READ | libc::PROT_WRITE, flags, fd) }?;
        Ok(Mapping { ptr, len })
    }

    /// Frees the pages of `offset..offset + len` of a shared mapping ([`advise_raw_remove`]).
    pub fn remove(&self, offset: usize, len: usize) {
        assert!(
            offset % PAGE_SIZE == 0 && offset + len <= self.len,
            "advice range out of the mapping"
        );
        advise_raw_remove(self.as_ptr().wrapping_add(offset), len);
    }

    /// The first byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The memory the mapping takes: its length rounded up to the OS page size ([`page_size`]),
    /// as `mmap(2)` maps whole pages (a 4 KiB mapping takes 16 KiB where pages are 16 KiB).
    pub fn footprint(&self) -> usize {
        self.len.next_multiple_of(page_size())
    }

    /// Always false: a mapping has at least one page (see [`Mapping::anonymous`]).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// How many pages of `offset..offset + len` are resident ([`resident_raw`]).
    ///
    /// # Errors
    /// The OS's error from `mincore(2)`.
    pub fn resident_pages(&self, offset: usize, len: usize) -> io::Result<usize> {
        assert!(
            offset % PAGE_SIZE == 0 && offset + len <= self.len,
            "mincore range out of the mapping"
        );
        resident_raw(self.as_ptr().wrapping_add(offset), len)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours alone (type invariant) and nothing borrows it past drop.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `mmap(2)` of `len` bytes from offset 0 of `fd` (-1: anonymous), at `at` exactly
/// (`MAP_FIXED` is then added) or where the kernel chooses.
///
/// # Safety
/// With `at`, the caller owns `at..at + len` and nothing points into it: it is replaced.
unsafe fn mmap(
    at: Option<NonNull<u8>>,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: RawFd,
) -> io::Result<NonNull<u8>> {
    let (addr, flags) = match at {
        Some(a) => (a.as_ptr().cast(), flags | libc::MAP_FIXED),
        None => (std::ptr::null_mut(), flags),
    };
    // SAFETY: without `at` the kernel picks a range that aliases nothing; with it, the caller
    // owns the range (above).
    let ptr = unsafe { libc::mmap(addr, len, prot, flags, fd, 0) };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(NonNull::new(ptr.cast::<u8>()).expect("mmap returned a null mapping"))
}

/// Frees the pages of `addr..addr + len` of a shared mapping (`madvise(2)`, `MADV_REMOVE`:
/// punches a hole in the memory file, for every process mapping it); the next touch faults in
/// a zeroed page. `addr` is page aligned; the range lies in a shared mapping of the caller's,
/// whose contents there it gave up (free ring positions).
pub fn advise_raw_remove(addr: *mut u8, len: usize) {
    assert!(
        addr as usize % PAGE_SIZE == 0,
        "advice range not page aligned"
    );
    if len == 0 {
        return;
    }
    // SAFETY: madvise validates the range itself (an unmapped range is an error, not UB);
    // REMOVE discards only contents the caller gave up, never the mapping itself.
    let rc = unsafe { libc::madvise(addr.cast(), len, libc::MADV_REMOVE) };
    // Fails only on memory that is not shared memory; the pages would then stay resident.
    debug_assert_eq!(
        rc,
        0,
        "madvise(MADV_REMOVE) failed: {}",
        io::Error::last_os_error()
    );
}

/// How many pages of `addr..addr + len` are resident (`mincore(2)`); `addr` is page aligned.
///
/// # Errors
/// The OS's error from `mincore(2)` (`ENOMEM`: part of the range is not mapped).
pub fn resident_raw(addr: *mut u8, len: usize) -> io::Result<usize> {
    assert!(
        addr as usize % PAGE_SIZE == 0,
        "mincore range not page aligned"
    );
    if len == 0 {
        return Ok(0);
    }
    let mut vec = vec![0u8; len.div_ceil(PAGE_SIZE)];
    // SAFETY: mincore validates the range itself and writes one byte per page of it into
    // `vec`, which has exactly that many.
    let rc = unsafe { libc::mincore(addr.cast(), len, vec.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|b| **b & 1 != 0).count())
}

/// Reserves `len` bytes of address space aligned to `align` (a power of two, a multiple of
/// the page size): mapped `PROT_NONE`, no memory committed, no page-table pages until
/// something is mapped there. Returns its first byte; the caller owns it ([`unmap`]).
///
/// # Errors
/// The OS's error from `mmap(2)` (`ENOMEM`).
pub fn reserve_aligned(len: usize, align: usize) -> io::Result<NonNull<u8>> {
    assert!(align.is_power_of_two() && align % PAGE_SIZE == 0 && len % PAGE_SIZE == 0 && len > 0);
    let span = len + align;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choice aliases nothing.
    let ptr = unsafe { mmap(None, span, libc::PROT_NONE, flags, -1) }?.as_ptr();
    let start = ptr as usize;
    let aligned = start.next_multiple_of(align);
    // SAFETY: both trimmed pieces lie inside the reservation just made, which nothing else
    // knows of.
    unsafe {
        if aligned > start {
            libc::munmap(ptr.cast(), aligned - start);
        }
        let end = aligned + len;
        if start + span > end {
            libc::munmap(end as *mut libc::c_void, start + span - end);
        }
    }
    Ok(NonNull::new(aligned as *mut u8).expect("mmap returned a null reservation"))
}

/// Maps `len` bytes of the file `fd` from offset 0, shared and readable and writable, at
/// exactly `addr` (`mmap(2)` with `MAP_FIXED`), in place of what was there.
///
/// # Safety
/// `addr..addr + len` is page aligned and lies in a reservation ([`reserve_aligned`]) or
/// mapping of the caller's that no Rust reference points into: its contents are replaced.
///
/// # Errors
/// The OS's error from `mmap(2)`. What was mapped there is then unchanged since Linux 6.12;
/// before, the kernel may have unmapped the range first, so the caller must not count on it.
pub unsafe fn map_shared_at(addr: NonNull<u8>, fd: BorrowedFd<'_>, len: usize) -> io::Result<()> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: the caller owns the range (above); MAP_FIXED replaces it atomically.
    unsafe { mmap(Some(addr), len, prot, libc::MAP_SHARED, fd.as_raw_fd()) }.map(drop)
}

/// Turns `addr..addr + len` back into reserved address space (`PROT_NONE`, nothing
/// committed), in place of the mapping there: the range stays the caller's, for a later
/// [`map_shared_at`].
///
/// # Safety
/// As for [`map_shared_at`]; nothing may use the old mapping's memory after the call.
///
/// # Errors
/// The OS's error from `mmap(2)` (the old mapping is then still there since Linux 6.12; see
/// [`map_shared_at`]).
pub unsafe fn re_reserve(addr: NonNull<u8>, len: usize) -> io::Result<()> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: the caller owns the range (above); MAP_FIXED replaces it atomically.
    unsafe { mmap(Some(addr), len, libc::PROT_NONE, flags, -1) }.map(drop)
}

/// Unmaps `addr..addr + len` (`munmap(2)`).
///
/// # Safety
/// The range is the caller's own mapping or reservation, and nothing uses it after the call.
pub unsafe fn unmap(addr: NonNull<u8>, len: usize) {
    // SAFETY: as the caller promises.
    unsafe { libc::munmap(addr.as_ptr().cast(), len) };
}

/// Faults in `len` bytes at `base + offset` without changing them (`madvise(2)`,
/// `MADV_POPULATE_WRITE`); failures are ignored (kernels before 5.14 lack the advice).
///
/// The range must lie in a mapping that stays mapped for the call (the pipe's `set_capacity`
/// waits for prefills in flight before unmapping an arena); populating never changes memory
/// contents, so racing with other users of the memory is harmless.
pub fn advise_raw_populate(base: *mut u8, offset: usize, len: usize) {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    // SAFETY: madvise validates the range itself (an unmapped range is an error, not UB) and
    // POPULATE_WRITE leaves contents unchanged, so no Rust-visible memory is affected.
    let _ = unsafe { libc::madvise(base.wrapping_add(offset).cast(), len, MADV_POPULATE_WRITE) };
}

/// The OS page size in bytes (`sysconf(3)`, `_SC_PAGESIZE`; asked once, then remembered).
pub fn page_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).unwrap_or(PAGE_SIZE).max(1)
    })
}

/// True when the OS page size is the 4 KiB pagepipe assumes (`sysconf(3)`).
pub fn page_size_ok() -> bool {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) == PAGE_SIZE as libc::c_long }
}
