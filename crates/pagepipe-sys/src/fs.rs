//! File I/O with per-call flags and page-cache control, for uncached writers (`pwritev2(2)`, `preadv2(2)`, `sync_file_range(2)`, `posix_fadvise(2)`, `fallocate(2)`, `cachestat(2)`, `mincore(2)`).

use crate::mm::PAGE_SIZE;
use std::io;
use std::os::fd::AsRawFd;

/// `RWF_DONTCACHE` (`include/uapi/linux/fs.h`, Linux 6.14): buffered I/O whose pages are
/// dropped from the page cache once written back (writes) or copied out (reads).
pub const RWF_DONTCACHE: libc::c_int = 0x80;

/// `cachestat(2)`'s syscall number: 451 on every Linux architecture (the unified table).
const SYS_CACHESTAT: libc::c_long = 451;

/// Positional write with per-call flags (`pwritev2(2)`). Returns the bytes written (possibly
/// fewer than `buf.len()`).
pub fn pwritev2(
    fd: &impl AsRawFd,
    buf: &[u8],
    offset: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let off = offset_to_off_t(offset)?;
    // SAFETY: `iov` describes `buf`, which is live and readable for the call; the kernel only
    // reads through it; the fd is borrowed from a live file.
    let rc = unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, off, flags) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as usize)
}

/// Positional read with per-call flags (`preadv2(2)`). Returns the bytes read (0 at end of
/// file).
pub fn preadv2(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    offset: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let off = offset_to_off_t(offset)?;
    // SAFETY: `iov` describes `buf`, which we borrow mutably, so the kernel may write all of it.
    let rc = unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, off, flags) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as usize)
}

/// Which part of writeback [`sync_file_range`] does (`sync_file_range(2)` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeSync {
    /// `SYNC_FILE_RANGE_WRITE`: start writeback of dirty pages in the range, do not wait.
    Start,
    /// `SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER`: write the range out and wait until
    /// its writeback has completed (reports writeback errors such as `EIO`).
    Wait,
}

/// Starts or waits for writeback of `offset..offset + len` (`sync_file_range(2)`). Writes no
/// metadata: it is not a substitute for `fdatasync(2)`.
///
/// # Errors
/// The OS's error from `sync_file_range(2)` (`EIO` for a failed writeback).
pub fn sync_file_range(fd: &impl AsRawFd, offset: u64, len: u64, how: RangeSync) -> io::Result<()> {
    let flags = match how {
        RangeSync::Start => libc::SYNC_FILE_RANGE_WRITE,
        RangeSync::Wait => {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER
        }
    };
    let (off, len) = (offset_to_off_t(offset)?, offset_to_off_t(len)?);
    // SAFETY: sync_file_range touches no user memory; the fd is borrowed from a live file.
    let rc = unsafe { libc::sync_file_range(fd.as_raw_fd(), off, len, flags) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Drops the clean, unmapped page-cache pages of `offset..offset + len` (`posix_fadvise(2)`,
/// `POSIX_FADV_DONTNEED`). Dirty pages and pages under writeback stay. A `len` of 0 means "to the
/// end of the file".
///
/// # Errors
/// The OS's error from `posix_fadvise(2)`.
pub fn fadvise_dontneed(fd: &impl AsRawFd, offset: u64, len: u64) -> io::Result<()> {
    let (off, len) = (offset_to_off_t(offset)?, offset_to_off_t(len)?);
    // SAFETY: posix_fadvise touches no user memory; the fd is borrowed from a live file.
    let rc = unsafe { libc::posix_fadvise(fd.as_raw_fd(), off, len, libc::POSIX_FADV_DONTNEED) };
    // posix_fadvise returns the error number instead of setting errno.
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Reserves disk blocks for `0..len` of the file without changing its size (`fallocate(2)`
/// with `FALLOC_FL_KEEP_SIZE`). `Ok(false)` where the filesystem cannot (`EOPNOTSUPP`).
///
/// # Errors
/// The OS's error from `fallocate(2)` (`ENOSPC`, `EOPNOTSUPP` on a filesystem without it).
pub fn fallocate_keep_size(fd: &impl AsRawFd, len: u64) -> io::Result<bool> {
    fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 0, len)
}

/// Frees the blocks of `offset..offset + len` of the file without changing its size
/// (`fallocate(2)` with `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`): reads there return zeros
/// and cached pages there are dropped, dirty or not. `Ok(false)` where the filesystem cannot
/// (`EOPNOTSUPP`).
///
/// # Errors
/// The OS's error from `fallocate(2)` (`EOPNOTSUPP` on a filesystem without hole punching).
pub fn punch_hole_keep_size(fd: &impl AsRawFd, offset: u64, len: u64) -> io::Result<bool> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    fallocate(fd, mode, offset, len)
}

/// `fallocate(2)` of `offset..offset + len` with `mode`; `Ok(false)` where the filesystem
/// cannot (`EOPNOTSUPP`).
fn fallocate(fd: &impl AsRawFd, mode: libc::c_int, offset: u64, len: u64) -> io::Result<bool> {
    let (offset, len) = (offset_to_off_t(offset)?, offset_to_off_t(len)?);
    // SAFETY: fallocate touches no user memory; the fd is borrowed from a live file.
    if unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}

/// The bytes free on the filesystem of `fd` for unprivileged use (`fstatvfs(3)`, `f_bavail`):
/// the blocks neither reserved for root nor kept back by the filesystem itself (ext4 keeps up to
/// 2% of its blocks, at most 4096, out of every allocation's reach, root's included).
///
/// # Errors
/// The OS's error from `fstatfs(2)`.
pub fn free_bytes(fd: &impl AsRawFd) -> io::Result<u64> {
    // SAFETY: statvfs is plain data, for which all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs writes a statvfs to the pointer we pass, valid for the call; the fd is
    // borrowed from a live file.
    let rc = unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Page-cache state of a file range, in pages (`struct cachestat`, `cachestat(2)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CacheStat {
    /// Pages in the page cache.
    pub nr_cache: u64,
    /// Dirty pages.
    pub nr_dirty: u64,
    /// Pages under writeback.
    pub nr_writeback: u64,
    /// Pages evicted (shadow entries).
    pub nr_evicted: u64,
    /// Evicted pages that were recently used.
    pub nr_recently_evicted: u64,
}

/// `struct cachestat_range` of `cachestat(2)`.
#[repr(C)]
struct CacheStatRange {
    off: u64,
    len: u64,
}

/// The page-cache state of `offset..offset + len` (`cachestat(2)`, Linux 6.5; `len` 0 means to
/// the end of the file). `ENOSYS` on older kernels.
///
/// # Errors
/// The OS's error from `cachestat(2)` (`ENOSYS` before Linux 6.5).
pub fn cachestat(fd: &impl AsRawFd, offset: u64, len: u64) -> io::Result<CacheStat> {
    let range = CacheStatRange { off: offset, len };
    let mut cs = CacheStat::default();
    // SAFETY: `range` is readable and `cs` writable for the call, both with the kernel's
    // `#[repr(C)]` layout; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const CacheStatRange,
            &mut cs as *mut CacheStat,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cs)
}

/// How many pages of the first `len` bytes of a file are resident, measured by mapping the file
/// read-only and asking `mincore(2)` (the fallback for kernels without `cachestat(2)`).
///
/// # Errors
/// The OS's error from `mmap(2)` or `mincore(2)`.
pub fn file_resident_pages(fd: &impl AsRawFd, len: u64) -> io::Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    let len = usize::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file of {len} bytes is too large to map"),
        )
    })?;
    // SAFETY: a fresh shared read-only mapping at an address of the kernel's choice aliases no
    // Rust memory; we never read through it.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; len.div_ceil(PAGE_SIZE)];
    // SAFETY: `ptr..ptr + len` is the mapping made above; `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(ptr, len, vec.as_mut_ptr()) };
    let result = if rc != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(vec.iter().filter(|b| **b & 1 != 0).count() as u64)
    };
    // SAFETY: unmaps exactly the mapping made above, which nothing else refers to.
    unsafe { libc::munmap(ptr, len) };
    result
}

/// Converts a file offset or length to `off_t`, refusing values above `i64::MAX`.
fn offset_to_off_t(value: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(value).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file offset {value} exceeds i64::MAX"),
        )
    })
}
