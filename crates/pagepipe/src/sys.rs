//! Every syscall wrapper pagepipe uses; the only home of syscall `unsafe`.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

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
        assert!(len > 0 && len % PAGE_SIZE == 0, "mapping length {len} is not a positive page multiple");
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
        assert!(offset % PAGE_SIZE == 0 && offset + len <= self.len, "advice range out of the mapping");
        if len == 0 {
            return;
        }
        // SAFETY: the range lies inside our mapping (asserted above); DONTNEED only discards
        // contents the caller gave up, never the mapping itself.
        let rc = unsafe { libc::madvise(self.as_ptr().add(offset).cast(), len, libc::MADV_DONTNEED) };
        // DONTNEED on our own private anonymous mapping cannot fail short of a kernel bug; if it
        // did, the pages would only stay resident longer.
        debug_assert_eq!(rc, 0, "madvise(MADV_DONTNEED) failed: {}", io::Error::last_os_error());
    }

    /// How many pages of `offset..offset + len` are resident (`mincore(2)`).
    pub(crate) fn resident_pages(&self, offset: usize, len: usize) -> io::Result<usize> {
        assert!(offset % PAGE_SIZE == 0 && offset + len <= self.len, "mincore range out of the mapping");
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

/// Sleeps while `*word == expected`, at most `timeout` (`futex(2)`, `FUTEX_WAIT_PRIVATE`).
/// Returns false when the timeout expired; spurious returns are possible.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
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

/// Wakes every thread sleeping on `word` (`futex(2)`, `FUTEX_WAKE_PRIVATE`).
pub(crate) fn futex_wake_all(word: &AtomicU32) {
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

/// Opens a pressure-stall trigger (`Documentation/accounting/psi.rst`): opens `path` (for
/// example `/proc/pressure/memory`) read-write and non-blocking, and writes `trigger` (such as
/// `some 150000 2000000`: 150 ms of stall within a 2 s window), NUL-terminated. The returned file
/// then reports `POLLPRI` each time the threshold is crossed.
///
/// Errors: `Unsupported` when the file is missing or PSI is disabled (`psi=0`), `InvalidInput`
/// when the kernel rejects the trigger, otherwise the OS's error; each names the path.
pub(crate) fn psi_trigger(path: &std::path::Path, trigger: &str) -> io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => io::Error::new(
                io::ErrorKind::Unsupported,
                format!("pressure stall information is not available at {}: {e}", path.display()),
            ),
            _ => io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())),
        })?;
    let mut bytes = trigger.as_bytes().to_vec();
    bytes.push(0);
    file.write_all(&bytes).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} rejected the trigger {trigger:?} (the window must be 0.5 to 10 s, and a \
                 multiple of 2 s without CAP_SYS_RESOURCE; the stall at most the window)",
                path.display()
            ),
        ),
        Some(libc::EOPNOTSUPP) => io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{} does not support triggers: {e}", path.display()),
        ),
        _ => io::Error::new(e.kind(), format!("cannot set the trigger {trigger:?} on {}: {e}", path.display())),
    })?;
    Ok(file)
}

/// A non-blocking eventfd (`eventfd(2)`), used to wake a thread sleeping in [`poll_two`].
pub(crate) fn eventfd() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd's counter (`eventfd(2)`), waking pollers.
pub(crate) fn eventfd_signal(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to a descriptor we borrow.
    let rc = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    // Only fails when the counter is about to overflow: a wakeup is pending anyway.
    let _ = rc;
}

/// Waits (`poll(2)`) until `pri` reports `POLLPRI` (or an error) or `wake` becomes readable, at
/// most `timeout`. Returns `(revents of pri, wake fired)`; an interrupted wait returns `(0, false)`.
pub(crate) fn poll_two(
    pri: std::os::fd::BorrowedFd<'_>,
    wake: std::os::fd::BorrowedFd<'_>,
    timeout: Duration,
) -> io::Result<(libc::c_short, bool)> {
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd { fd: pri.as_raw_fd(), events: libc::POLLPRI, revents: 0 },
        libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
    ];
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a live array of two pollfd structures for the duration of the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok((0, false)) } else { Err(e) };
    }
    Ok((fds[0].revents, fds[1].revents != 0))
}
