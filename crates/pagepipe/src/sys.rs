//! Every syscall wrapper pagepipe uses; the only home of syscall `unsafe`.

use std::io;
use std::ptr::NonNull;

/// The page size pagepipe assumes (checked against `sysconf` in [`page_size_ok`]).
pub(crate) const PAGE_SIZE: usize = 4096;

/// An anonymous private mapping, unmapped on drop.
///
/// Invariant: `ptr` is the start of a live mapping of exactly `len` bytes, readable and writable,
/// page aligned, owned by this value alone.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is plain memory; which thread may touch which bytes is decided by its users
// (the pipe's side locks), not by the mapping itself.
unsafe impl Send for Mapping {}
// SAFETY: as for Send; `&Mapping` only hands out raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of zeroed memory, committed lazily (`mmap(2)` with `MAP_NORESERVE`).
    pub(crate) fn anonymous(len: usize) -> io::Result<Mapping> {
        assert!(
            len > 0 && len % PAGE_SIZE == 0,
            "mapping length {len} is not a positive page multiple"
        );
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choice aliases nothing.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).expect("mmap returned a null mapping");
        Ok(Mapping { ptr, len })
    }

    /// The first byte of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Gives the pages of `offset..offset + len` back to the OS (`madvise(2)`, `MADV_DONTNEED`):
    /// the next touch faults in a zeroed page.
    pub(crate) fn dontneed(&self, offset: usize, len: usize) {
        assert!(
            offset % PAGE_SIZE == 0 && offset + len <= self.len,
            "advice range out of the mapping"
        );
        if len == 0 {
            return;
        }
        // SAFETY: the range lies inside our mapping (asserted above); DONTNEED only discards
        // contents the caller gave up, never the mapping itself.
        let rc =
            unsafe { libc::madvise(self.as_ptr().add(offset).cast(), len, libc::MADV_DONTNEED) };
        // DONTNEED on our own private anonymous mapping cannot fail short of a kernel bug; if it
        // did, the pages would only stay resident longer.
        debug_assert_eq!(
            rc,
            0,
            "madvise(MADV_DONTNEED) failed: {}",
            io::Error::last_os_error()
        );
    }

    /// How many pages of `offset..offset + len` are resident (`mincore(2)`).
    pub(crate) fn resident_pages(&self, offset: usize, len: usize) -> io::Result<usize> {
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
/// `MADV_POPULATE_WRITE`); failures are ignored (old kernels, or a retired arena).
///
/// `base` must be the start of a mapping that stays mapped (the pipe keeps retired arenas mapped
/// for this reason); populating never changes memory contents, so racing with users of the
/// memory is harmless.
pub(crate) fn advise_raw_populate(base: *mut u8, offset: usize, len: usize) {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    // SAFETY: madvise validates the range itself (an unmapped range is an error, not UB) and
    // POPULATE_WRITE leaves contents unchanged, so no Rust-visible memory is affected.
    let _ = unsafe { libc::madvise(base.wrapping_add(offset).cast(), len, MADV_POPULATE_WRITE) };
}

/// True when the OS page size is the 4 KiB pagepipe assumes (`sysconf(3)`).
pub(crate) fn page_size_ok() -> bool {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) == PAGE_SIZE as libc::c_long }
}

#[cfg(not(loom))]
/// Sleeps while `*word == expected`, at most `timeout` (`futex(2)`, `FUTEX_WAIT_PRIVATE`).
/// Returns false when the timeout expired; spurious returns are possible.
pub(crate) fn futex_wait(
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    timeout: Option<std::time::Duration>,
) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 for the duration of the call; `ts_ptr` is null or
    // points to a timespec that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        )
    };
    !(rc == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}

#[cfg(not(loom))]
/// Wakes every thread sleeping on `word` (`futex(2)`, `FUTEX_WAKE_PRIVATE`).
pub(crate) fn futex_wake_all(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE only reads its address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}
