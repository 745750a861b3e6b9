//! File I/O with per-call flags and page-cache control, for uncached writers (`pwritev2(2)`, `preadv2(2)`, `sync_file_range(2)`, `posix_fadvise(2)`, `fallocate(2)`, `FS_IOC_FIEMAP`, `cachestat(2)`, `mincore(2)`).

use crate::mm::PAGE_SIZE;
use std::fs::File;
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
/// The OS's error from `sync_file_range(2)` (`EIO` for a failed writeback); `EINTR` is retried.
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
    loop {
        // SAFETY: sync_file_range touches no user memory; the fd is borrowed from a live file.
        let rc = unsafe { libc::sync_file_range(fd.as_raw_fd(), off, len, flags) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        // A signal (FUSE and NFS waits can be interrupted) is no writeback error: again.
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
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

/// `FS_IOC_FIEMAP` (`include/uapi/linux/fs.h`): `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;

/// `struct fiemap` (`include/uapi/linux/fiemap.h`) without the extent array that follows it:
/// asked for no extents, the kernel only counts them.
#[repr(C)]
#[derive(Default)]
struct Fiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
}
const _: () = assert!(std::mem::size_of::<Fiemap>() == 32);

/// Whether the file holds any block at or past byte `offset`, blocks reserved past its end
/// (`fallocate` with `FALLOC_FL_KEEP_SIZE`) included (`FS_IOC_FIEMAP`, counting extents only).
/// `Ok(None)` where the filesystem cannot say (`EOPNOTSUPP`: tmpfs).
///
/// # Errors
/// The OS's error from `ioctl(2)`.
pub fn has_blocks_from(fd: &impl AsRawFd, offset: u64) -> io::Result<Option<bool>> {
    let mut map = Fiemap {
        start: offset,
        length: u64::MAX - offset,
        ..Fiemap::default()
    };
    // SAFETY: FS_IOC_FIEMAP reads and writes a `struct fiemap` at the pointer, valid and of the
    // kernel's layout for the call; with `extent_count` 0 it writes no extents after it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_FIEMAP as _, &mut map as *mut Fiemap) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::ENOTTY) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(map.mapped_extents > 0))
}

/// Whether the file lies on ext4 (`fstatfs(2)`'s `f_type`; ext2 and ext3 run by the ext4
/// driver report the same).
///
/// # Errors
/// The OS's error from `fstatfs(2)`.
pub fn on_ext4(fd: &impl AsRawFd) -> io::Result<bool> {
    // SAFETY: statfs is plain data, for which all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes a statfs to the pointer we pass, valid for the call; the fd is
    // borrowed from a live file.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Both casts: the field's and the constant's types differ between C libraries.
    #[allow(clippy::unnecessary_cast)]
    let ext4 = st.f_type as i64 == libc::EXT4_SUPER_MAGIC as i64;
    Ok(ext4)
}

/// On ext4, frees every block of `file` past its end, the end as it is at that instant, without
/// touching a byte inside it: what `fallocate(FALLOC_FL_KEEP_SIZE)` reserved there, by anyone.
///
/// ext4 cleans up after a write that would have extended the file and failed by cutting the
/// file at its size, under the inode lock, which frees whatever lies past the size: a direct
/// write (Linux 5.5 to 6.6 in `ext4_handle_inode_extension`, 6.7 on in
/// `ext4_inode_extension_cleanup`), and a buffered one where blocks are allocated as it writes
/// (`nodelalloc`, `data=journal`). Such a write is made here: one page from an address mapped
/// `PROT_NONE`, through a description of the file opened for the purpose with `O_APPEND` (and
/// `O_DIRECT` where the file takes it). It fails before any data moves (`EFAULT`; `EINVAL` from
/// a direct write at an unaligned size). `O_APPEND` makes the kernel write at the size it reads
/// under the inode lock, which every write holds: what another writer appended before is
/// inside the size and kept, what it appends after comes after, and a write that moves no byte
/// leaves the size where it was (a buffered write at an offset past the end would move the
/// size there on recent kernels, even failing). (A truncation to a size read beforehand, the
/// only other way to free blocks past the end on ext4, which clamps a hole punch to the size,
/// cuts off whatever another writer appended in between.) A buffered write with delayed
/// allocation (ext4's default, where a file takes no direct I/O: encryption without inline
/// crypto) frees nothing; the caller finds out with [`has_blocks_from`].
///
/// What a write does to the file's metadata happens, though the write fails: the modification
/// time moves, and the setuid and setgid bits and file capabilities go. Checked on Linux 6.18
/// with ext4's default mount, `nodelalloc` and `data=journal`, files of 0, 5, 8,192 and 10,000
/// bytes: size and bytes unchanged, every block past the end freed.
///
/// # Errors
/// [`io::ErrorKind::Unsupported`] off ext4; [`io::ErrorKind::PermissionDenied`] for a
/// description not open for writing; [`io::ErrorKind::ResourceBusy`] for a file with a lease
/// ([`refuse_leased`]); [`io::ErrorKind::FileTooLarge`] where the size has reached
/// `RLIMIT_FSIZE` (the kernel would raise `SIGXFSZ`; another process growing the file to this
/// process's limit during the call still could); the reopen's errors (`EACCES` where the
/// file's permissions forbid writing it); the write's, other than the `EFAULT` or `EINVAL` it
/// is made to fail with.
pub fn ext4_free_blocks_past_end(file: &File) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if !on_ext4(file)? {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "freeing blocks past the end by a failed write is known of ext4 only",
        ));
    }
    // SAFETY: F_GETFL reads the status flags of a descriptor borrowed from a live File.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_ACCMODE == libc::O_RDONLY {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "giving back a file's blocks needs a description of it open for writing",
        ));
    }
    refuse_leased(file)?;
    let size = file.metadata()?.len();
    // SAFETY: rlimit is plain data, for which all zeroes is a valid value.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes an rlimit to the pointer we pass, valid for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } == 0
        && limit.rlim_cur != libc::RLIM_INFINITY
        && size >= limit.rlim_cur
    {
        // Below the limit the kernel shortens the write instead; at it, it raises SIGXFSZ.
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("a write at byte {size} would reach the file size limit (RLIMIT_FSIZE)"),
        ));
    }
    // thread-self: this thread's descriptor table, also where it unshared it from the process.
    let path = format!("/proc/thread-self/fd/{}", file.as_raw_fd());
    let open = |more: libc::c_int| {
        std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(more)
            .open(&path)
    };
    let appender = match open(libc::O_DIRECT) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(0)?,
        opened => opened?,
    };
    same_file(file, &appender)?;
    let guard = crate::mm::reserve_aligned(PAGE_SIZE, PAGE_SIZE)?;
    // SAFETY: the source is our own reservation, mapped PROT_NONE: the kernel cannot read it and
    // fails the write (no Rust memory is read); the fd is borrowed from a live file. The offset
    // is ignored: the description appends.
    let rc = unsafe { libc::pwrite(appender.as_raw_fd(), guard.as_ptr().cast(), PAGE_SIZE, 0) };
    let e = io::Error::last_os_error();
    // SAFETY: the reservation made above, which nothing else knows of.
    unsafe { crate::mm::unmap(guard, PAGE_SIZE) };
    match rc {
        // Nothing can be read from a PROT_NONE page: a kernel that says otherwise is not one
        // this was checked on.
        n if n >= 0 => Err(io::Error::other(format!(
            "a write from an unreadable page reported {n} bytes written"
        ))),
        _ if matches!(e.raw_os_error(), Some(libc::EFAULT | libc::EINVAL)) => Ok(()),
        _ => Err(e),
    }
}

/// Refuses a file whose description holds a lease (`F_GETLEASE`): reopening it, as this module's
/// callers do through `/proc`, would break the lease (the holder is signalled, the open waits up
/// to `lease-break-time`, 45 s by default). Only a write lease can be held on a file open for
/// writing, and only by its one writable description.
///
/// # Errors
/// [`io::ErrorKind::ResourceBusy`] for a leased file; `fcntl`'s.
pub fn refuse_leased(file: &File) -> io::Result<()> {
    // SAFETY: F_GETLEASE reads the lease of a descriptor borrowed from a live File.
    let lease = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLEASE) };
    if lease < 0 {
        return Err(io::Error::last_os_error());
    }
    if lease != libc::F_UNLCK {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            "the file holds a lease, which opening it again would break",
        ));
    }
    Ok(())
}

/// Checks that `again`, opened through `/proc/.../fd`, is the file `file` is: a `/proc` that is
/// not procfs (a chroot's directory) could name another.
///
/// # Errors
/// [`io::ErrorKind::InvalidData`] when they differ; `fstat`'s.
pub fn same_file(file: &File, again: &File) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (file.metadata()?, again.metadata()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "reopening the file through /proc gave another file (is /proc procfs?)",
        ));
    }
    Ok(())
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
