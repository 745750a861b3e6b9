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
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap returned a null mapping");
        Ok(Mapping { ptr, len })
    }

    /// Frees the pages of `offset..offset + len` of a shared mapping (`madvise(2)`,
    /// `MADV_REMOVE`: punches a hole in the memory file, for every process mapping it); the next
    /// touch faults in a zeroed page.
    pub fn remove(&self, offset: usize, len: usize) {
        assert!(
            offset % PAGE_SIZE == 0 && offset + len <= self.len,
            "advice range out of the mapping"
        );
        if len == 0 {
            return;
        }
        // SAFETY: the range lies inside our mapping (asserted above); REMOVE discards contents
        // the caller gave up (free ring positions), never the mapping itself.
        let rc = unsafe { libc::madvise(self.as_ptr().add(offset).cast(), len, libc::MADV_REMOVE) };
        // Fails only on memory that is not shared memory; the pages would then stay resident.
        debug_assert_eq!(
            rc,
            0,
            "madvise(MADV_REMOVE) failed: {}",
            io::Error::last_os_error()
        );
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

    /// How many pages of `offset..offset + len` are resident (`mincore(2)`).
    ///
    /// # Errors
    /// The OS's error from `mincore(2)`.
    pub fn resident_pages(&self, offset: usize, len: usize) -> io::Result<usize> {
        assert!(
            offset % PAGE_SIZE == 0 && offset + len <= self.len,
            "mincore range out of the mapping"
        );
        let mut vec = vec![0u8; len.div_ceil(PAGE_SIZE)];
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: the range lies inside our mapping and `vec` has one byte per page of it.
        let rc = unsafe { libc::mincore(self.as_ptr().add(offset).cast(), len, vec.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|b| **b & 1 != 0).count())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours alone (type invariant) and nothing borrows it past drop.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
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
