//! Page-cache inspection: how much of a file is cached, dropping a file's clean pages, and
//! reserving a file's blocks and giving them back.

use crate::consts::PAGE;
use pagepipe_sys as sys;
use std::fs::File;
use std::io;

/// How many bytes of `file` are in the page cache now: `cachestat(2)` where the kernel has it
/// (Linux 6.5), else `mincore(2)` on a read-only mapping of the file.
///
/// ```
/// let path = std::env::temp_dir().join(format!("dontcache-cached-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![1u8; 1 << 20])?;
/// let file = std::fs::File::open(&path)?;
/// file.sync_all()?;
/// pagepipe_dontcache::drop_cache(&file)?;
/// assert!(pagepipe_dontcache::cached_bytes(&file)? < 1 << 20);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// The OS's error from `cachestat` (other than `ENOSYS`), `fstat`, `mmap` or `mincore`.
pub fn cached_bytes(file: &File) -> io::Result<u64> {
    cached_bytes_in(file, 0..u64::MAX)
}

/// How many bytes of the pages of `range` of `file` are in the page cache now (see
/// [`cached_bytes`]). The range is clipped to the file's size where `mincore` is used.
///
/// # Errors
/// As [`cached_bytes`].
pub fn cached_bytes_in(file: &File, range: std::ops::Range<u64>) -> io::Result<u64> {
    let start = range.start & !(PAGE - 1);
    let len = if range.end == u64::MAX {
        0
    } else {
        range.end.saturating_sub(start)
    };
    match sys::fs::cachestat(file, start, len) {
        Ok(cs) => Ok(cs.nr_cache * PAGE),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let size = file.metadata()?.len();
            let end = range.end.min(size);
            let total = sys::fs::file_resident_pages(file, end)?;
            let before = sys::fs::file_resident_pages(file, start.min(end))?;
            Ok((total - before) * PAGE)
        }
        Err(e) => Err(e),
    }
}

/// Drops `file`'s clean pages from the page cache (`posix_fadvise(2)`, `POSIX_FADV_DONTNEED` on
/// the whole file). Dirty pages stay: sync first. Meant for files you own (benchmarks drop their
/// own files between runs this way, never the whole machine's cache).
///
/// # Errors
/// The OS's error, e.g. `ESPIPE` for a pipe.
pub fn drop_cache(file: &File) -> io::Result<()> {
    sys::fs::fadvise_dontneed(file, 0, 0)
}

/// Reserves disk blocks for `file`'s first `len` bytes without changing its size (`fallocate(2)`
/// with `FALLOC_FL_KEEP_SIZE`); `Ok(false)` where the filesystem cannot (`EOPNOTSUPP`). What
/// [`Writer::preallocate`] does, for files written some other way (benchmarks reserve every
/// mode's file alike with it). The reserved blocks past the end stay until the file is truncated
/// or they are given back with [`release`].
///
/// # Errors
/// The OS's error: [`io::ErrorKind::StorageFull`] when the filesystem cannot hold `len` bytes,
/// [`io::ErrorKind::FileTooLarge`] past its largest file.
///
/// [`Writer::preallocate`]: crate::Writer::preallocate
pub fn reserve(file: &File, len: u64) -> io::Result<bool> {
    sys::fs::fallocate_keep_size(file, len)
}

/// Gives back every block reserved past `file`'s end (by [`reserve`],
/// [`Writer::preallocate`], `fallocate --keep-size`, by anyone) without touching a byte inside
/// the file, even while another writer appends to it.
///
/// A truncation to the file's size frees such blocks, but the size is a moving target while
/// another writer appends: a size read and then set cuts off what was appended in between. On
/// ext4 this asks the kernel to cut the file at its size of the moment instead: a write that
/// would extend the file (an append, direct where the file takes direct I/O), made to fail
/// before any data moves (from an unreadable page), after which ext4 truncates the file at its
/// size under the lock every write holds. An append made before is inside the size and kept;
/// one made after comes after; the size does not move. What a write does to the file's
/// metadata happens, though the write fails: the modification time moves, and the setuid and
/// setgid bits and file capabilities go. Like any truncation on ext4, the cut records the
/// current size on disk ahead of the writeback of bytes appended and not yet synced: after a
/// crash before that writeback, those bytes read as zeros where the file would otherwise have
/// been shorter. A file that takes no direct I/O on a mount with delayed allocation (ext4's
/// default; encryption without inline crypto) gets no cut: the error says the blocks stay.
///
/// ```
/// use pagepipe_dontcache::{release, reserve};
///
/// let path = std::env::temp_dir().join(format!("dontcache-release-{}", std::process::id()));
/// let file = std::fs::File::create(&path)?;
/// reserve(&file, 1 << 20)?;
/// match release(&file) {
///     Ok(()) => {} // nothing is reserved past the end now
///     Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {} // not ext4
///     Err(e) => return Err(e),
/// }
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// [`io::ErrorKind::Unsupported`] where the filesystem is not ext4 or does not say where a
/// file's blocks lie (`FS_IOC_FIEMAP`: tmpfs); [`io::ErrorKind::PermissionDenied`] for a file
/// not open for writing; [`io::ErrorKind::ResourceBusy`] for a file whose description holds a
/// lease (opening it again would break the lease); [`io::ErrorKind::FileTooLarge`] where the
/// size has reached the process's file size limit (`RLIMIT_FSIZE`); the reopen's errors (a description of the file
/// is opened through `/proc/thread-self/fd`: `EACCES` where the file's permissions forbid
/// writing it); the write's other than the `EFAULT` or `EINVAL` it is made to fail with; an
/// error saying blocks remain past the end after the cut (no cut on this file, or another
/// writer reserved more meanwhile).
///
/// [`Writer::preallocate`]: crate::Writer::preallocate
pub fn release(file: &File) -> io::Result<()> {
    let unsupported = || {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "this filesystem does not say where a file's blocks lie",
        )
    };
    match blocks_past_end(file)? {
        None => return Err(unsupported()),
        Some(false) => return Ok(()),
        Some(true) => sys::fs::ext4_free_blocks_past_end(file)?,
    }
    // Blocks seen past the end after the cut may be another writer's extending direct write in
    // flight (it allocates before it moves the size): looked at again after short pauses.
    // Beside a thread appending 4 KiB direct writes without a break, 2,000 calls each: 33 and
    // 912 such errors looked at once, 2 and 0 with the pauses.
    for pause_us in [0, 100, 1_000, 10_000] {
        std::thread::sleep(std::time::Duration::from_micros(pause_us));
        match blocks_past_end(file)? {
            None => return Err(unsupported()),
            Some(false) => return Ok(()),
            Some(true) => {}
        }
    }
    Err(io::Error::other(
        "blocks stay past the file's end after the cut: ext4 cuts a file that takes no direct \
         I/O only without delayed allocation, or another writer reserved blocks or was writing \
         past the end meanwhile",
    ))
}

/// Whether `file` holds blocks past its end, as far as its filesystem says (`None`: it does not,
/// as tmpfs). Blocks found past an end that moved meanwhile (another writer appending: its new
/// bytes lie past the old end) are looked for again past the new one.
///
/// # Errors
/// The OS's error from `fstat` or `FS_IOC_FIEMAP`.
pub(crate) fn blocks_past_end(file: &File) -> io::Result<Option<bool>> {
    use std::os::unix::fs::MetadataExt;
    let mut m = file.metadata()?;
    for _ in 0..8 {
        let found = sys::fs::has_blocks_from(file, m.len().next_multiple_of(m.blksize().max(1)))?;
        let now = file.metadata()?;
        if found != Some(true) || now.len() == m.len() {
            return Ok(found);
        }
        m = now;
    }
    Ok(Some(true))
}

/// Refuses to reserve `0..len` of `file` (whose metadata is `meta`) when it may not fit: the
/// bytes the file does not hold yet (`len` in whole blocks, less every block it holds) exceed
/// the free space for unprivileged use ([`sys::fs::free_bytes`]). One refused here reserved
/// nothing, where a failing `fallocate` keeps what it allocated before it ran out (issue 27:
/// 488 MiB of a 512 MiB filesystem, for a 10 GiB request). Passes where the free space is
/// unknown.
///
/// # Errors
/// [`io::ErrorKind::StorageFull`], naming the sizes.
pub(crate) fn check_room(file: &File, meta: &std::fs::Metadata, len: u64) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let held = meta.blocks().saturating_mul(512);
    let missing = len
        .next_multiple_of(meta.blksize().max(1))
        .saturating_sub(held);
    if missing == 0 {
        return Ok(());
    }
    let Ok(free) = sys::fs::free_bytes(file) else {
        return Ok(());
    };
    if missing > free {
        let enospc = io::Error::from_raw_os_error(libc::ENOSPC);
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "cannot preallocate bytes 0..{len}: {enospc}: the file needs {missing} more \
                 bytes of disk and its filesystem has {free} free; nothing was reserved"
            ),
        ));
    }
    Ok(())
}
