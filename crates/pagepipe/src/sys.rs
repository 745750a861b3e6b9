//! Every syscall wrapper pagepipe uses; the only home of syscall `unsafe`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
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
        Mapping::map(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        )
    }

    /// Maps `len` bytes of the memory file `fd` shared (`mmap(2)`, `MAP_SHARED`): stores are
    /// seen by every process that maps it. The caller has checked (and sealed) the file's size.
    pub(crate) fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
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
    pub(crate) fn remove(&self, offset: usize, len: usize) {
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
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
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
/// `MADV_POPULATE_WRITE`); failures are ignored (kernels before 5.14 lack the advice).
///
/// The range must lie in a mapping that stays mapped for the call (the pipe's `set_capacity`
/// waits for prefills in flight before unmapping an arena); populating never changes memory
/// contents, so racing with other users of the memory is harmless.
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
pub(crate) fn futex_wait(
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    timeout: Option<std::time::Duration>,
) -> bool {
    futex_wait_op(
        word.as_ptr(),
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
        expected,
        timeout,
    )
}

/// Wakes every thread sleeping on `word` (`futex(2)`, `FUTEX_WAKE_PRIVATE`).
pub(crate) fn futex_wake_all(word: &std::sync::atomic::AtomicU32) {
    futex_wake_op(
        word.as_ptr(),
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
        i32::MAX,
    );
}

/// Sleeps while `*word == expected` for another process too (`futex(2)`, shared `FUTEX_WAIT`:
/// keyed by the memory's inode and offset, so processes may map the word at different
/// addresses). Returns false when `timeout` expired; spurious returns are possible.
pub(crate) fn futex_wait_shared(
    word: *const u32,
    expected: u32,
    timeout: Option<std::time::Duration>,
) -> bool {
    futex_wait_op(word, libc::FUTEX_WAIT, expected, timeout)
}

/// Wakes every thread of any process sleeping on `word` (`futex(2)`, shared `FUTEX_WAKE`).
pub(crate) fn futex_wake_shared(word: *const u32) {
    futex_wake_op(word, libc::FUTEX_WAKE, i32::MAX);
}

/// Wakes one thread of any process sleeping on `word` (shared `FUTEX_WAKE` of 1).
pub(crate) fn futex_wake_one_shared(word: *const u32) {
    futex_wake_op(word, libc::FUTEX_WAKE, 1);
}

/// `FUTEX_WAIT` (private or shared, per `op`) with an optional relative timeout.
fn futex_wait_op(
    word: *const u32,
    op: libc::c_int,
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
    // SAFETY: the kernel only reads the u32 at `word` (callers pass a live, aligned word: an
    // atomic they borrow or one of a mapping they hold; a bad address is EFAULT, not undefined
    // behaviour) and `ts_ptr` is null or a timespec that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word, op, expected, ts_ptr) };
    !(rc == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}

/// `FUTEX_WAKE` (private or shared, per `op`) of up to `n` sleepers.
fn futex_wake_op(word: *const u32, op: libc::c_int, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; it reads no memory we own.
    unsafe {
        libc::syscall(libc::SYS_futex, word, op, n);
    }
}

// ---------------------------------------------------------------------------------------------
// Shared memory, descriptors and processes, for cross-process pipes
// ---------------------------------------------------------------------------------------------

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A sealed anonymous memory file of `len` bytes (`memfd_create(2)`, `ftruncate(2)`, then
/// `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` so no holder can change its size: a shrunk file
/// would turn accesses of everyone's mapping into SIGBUS). Close-on-exec; no name in any file
/// system, visible only to processes given the descriptor.
pub(crate) fn sealed_memfd(len: u64) -> io::Result<OwnedFd> {
    const MFD_NOEXEC_SEAL: libc::c_uint = 0x8;
    let name = c"pagepipe";
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `name` is a NUL-terminated string; memfd_create has no other preconditions.
    let mut fd = unsafe { libc::memfd_create(name.as_ptr(), base | MFD_NOEXEC_SEAL) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Kernels before 6.3 do not know MFD_NOEXEC_SEAL.
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(name.as_ptr(), base) };
    }
    cvt(fd)?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
    // SAFETY: ftruncate and fcntl on a descriptor we own touch no user memory.
    unsafe {
        cvt(libc::ftruncate(fd.as_raw_fd(), size))?;
        cvt(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        ))?;
    }
    Ok(fd)
}

/// Size in bytes and seals of a memory file received from elsewhere (`fstat(2)`,
/// `F_GET_SEALS`), for validation before mapping it.
pub(crate) fn memfd_info(fd: BorrowedFd<'_>) -> io::Result<(u64, libc::c_int)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable for the call; the fd is borrowed from a live descriptor.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("descriptor {} is not a memory file", fd.as_raw_fd()),
        ));
    }
    // SAFETY: F_GET_SEALS touches no user memory.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "descriptor {} cannot be sealed (not a memfd): {}",
                fd.as_raw_fd(),
                io::Error::last_os_error()
            ),
        ));
    }
    Ok((st.st_size as u64, seals))
}

/// A kernel pipe (`pipe2(2)`, close-on-exec): `(read end, write end)`.
pub(crate) fn os_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Which end of a kernel pipe `fd` is: `Some(false)` for a read end, `Some(true)` for a write
/// end, `None` if it is not a pipe (`fstat(2)`, `F_GETFL`).
pub(crate) fn pipe_end_kind(fd: BorrowedFd<'_>) -> io::Result<Option<bool>> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable for the call.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Ok(None);
    }
    // SAFETY: F_GETFL touches no user memory.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(match fl & libc::O_ACCMODE {
        libc::O_RDONLY => Some(false),
        libc::O_WRONLY => Some(true),
        _ => None,
    })
}

/// `poll(2)` of one descriptor with a zero timeout: its `revents`.
pub(crate) fn poll_now(fd: BorrowedFd<'_>, events: libc::c_short) -> libc::c_short {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is a live pollfd for the call.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        if rc >= 0 {
            return p.revents;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return 0;
        }
    }
}

/// Clears `FD_CLOEXEC` on `fd` so an exec'd program inherits it. Only async-signal-safe calls:
/// usable between fork and exec.
pub(crate) fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor number touches no user memory.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(drop)
}

/// Whether `fd` is an open descriptor of this process (`F_GETFD`).
pub(crate) fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: fcntl on a descriptor number touches no user memory.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Sets `FD_CLOEXEC` on `fd`.
pub(crate) fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// A zeroed, aligned control buffer with room for one `SCM_RIGHTS` header and `fds`
/// descriptors (`CMSG_SPACE`).
fn control_buffer(fds: usize) -> Vec<u64> {
    // SAFETY: CMSG_SPACE is pure arithmetic.
    let space = unsafe { libc::CMSG_SPACE((fds * std::mem::size_of::<RawFd>()) as u32) } as usize;
    vec![0u64; space.div_ceil(8)]
}

/// A `msghdr` for one buffer (`iov`) and a control buffer; both must outlive its use.
fn msghdr(iov: &mut libc::iovec, control: &mut [u64]) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid value; the pointers are filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(control) as _;
    msg
}

/// Sends `payload` with the descriptors `fds` attached (`sendmsg(2)`, `SCM_RIGHTS`).
pub(crate) fn send_fds(sock: BorrowedFd<'_>, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds);
    let mut control = control_buffer(fds.len());
    let msg = msghdr(&mut iov, &mut control);
    // SAFETY: `msg` describes `control`, which has room for one header and `fds` (CMSG_SPACE);
    // CMSG_FIRSTHDR of such a buffer is non-null and CMSG_DATA points inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
    }
    loop {
        // SAFETY: every pointer in `msg` is live for the call; the kernel only reads them.
        let rc = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if rc >= 0 {
            return if rc as usize == payload.len() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short sendmsg of an end",
                ))
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message of at most `buf.len()` bytes and up to `max_fds` descriptors
/// (`recvmsg(2)`, `SCM_RIGHTS`, close-on-exec). Returns the byte count and the descriptors,
/// owned; a message that was truncated is `InvalidData` (its descriptors are closed).
pub(crate) fn recv_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = control_buffer(max_fds);
    let mut msg = msghdr(&mut iov, &mut control);
    let n = loop {
        // SAFETY: `msg` describes `buf` and `control`, both writable for the call.
        let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if rc >= 0 {
            break rc as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with well-formed headers up to msg_controllen;
    // CMSG_FIRSTHDR/CMSG_NXTHDR walk only those, and each SCM_RIGHTS payload holds
    // (cmsg_len - CMSG_LEN(0)) / 4 descriptors that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the message carrying a pipe end was truncated (not a pagepipe end?)",
        ));
    }
    Ok((n, fds))
}

/// The calling thread's id (`gettid(2)`).
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// What `/proc/<tid>/stat` says of a thread: `None` if it does not exist (or is a zombie or
/// dead), else the low 32 bits of its start time in clock ticks since boot.
pub(crate) fn thread_start_time(tid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?; // field 3
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    // Field 22 (starttime) is the 20th after the state.
    let start: u64 = fields.nth(18)?.parse().ok()?;
    Some(start as u32)
}

/// Writes one byte to a non-blocking descriptor (`write(2)`); a full pipe is `WouldBlock`.
pub(crate) fn write_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let b = 1u8;
    loop {
        // SAFETY: writes one byte from a live local.
        let rc = unsafe { libc::write(fd.as_raw_fd(), (&b as *const u8).cast(), 1) };
        if rc == 1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if rc < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(e);
    }
}

/// Reads one byte from a non-blocking descriptor (`read(2)`); an empty pipe is `WouldBlock`.
pub(crate) fn read_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut b = 0u8;
    loop {
        // SAFETY: reads at most one byte into a live local.
        let rc = unsafe { libc::read(fd.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
        if rc == 1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if rc < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(if rc == 0 {
            io::Error::from(io::ErrorKind::UnexpectedEof)
        } else {
            e
        });
    }
}

/// Bytes queued in a kernel pipe, asked through either end (`ioctl(2)`, `FIONREAD`).
pub(crate) fn fionread(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer we pass.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n as usize)
}

/// Sets a kernel pipe's capacity (`fcntl(2)`, `F_SETPIPE_SZ`).
pub(crate) fn set_pipe_size(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) }).map(drop)
}

/// Sets `O_NONBLOCK` on the open file description of `fd`.
pub(crate) fn set_fd_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(drop)
}

/// Registers fork handlers around `fork(2)` (`pthread_atfork(3)`).
pub(crate) fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registers plain function pointers.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

// ---------------------------------------------------------------------------------------------
// File I/O for the dontcache writer (src/dontcache.rs).
// ---------------------------------------------------------------------------------------------

/// `RWF_DONTCACHE` (`include/uapi/linux/fs.h`, Linux 6.14): buffered I/O whose pages are
/// dropped from the page cache once written back (writes) or copied out (reads).
pub(crate) const RWF_DONTCACHE: libc::c_int = 0x80;

/// `cachestat(2)`'s syscall number: 451 on every Linux architecture (the unified table).
const SYS_CACHESTAT: libc::c_long = 451;

/// Positional write with per-call flags (`pwritev2(2)`). Returns the bytes written (possibly
/// fewer than `buf.len()`).
pub(crate) fn pwritev2(
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
pub(crate) fn preadv2(
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
pub(crate) enum RangeSync {
    /// `SYNC_FILE_RANGE_WRITE`: start writeback of dirty pages in the range, do not wait.
    Start,
    /// `SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER`: write the range out and wait until
    /// its writeback has completed (reports writeback errors such as `EIO`).
    Wait,
}

/// Starts or waits for writeback of `offset..offset + len` (`sync_file_range(2)`). Writes no
/// metadata: it is not a substitute for `fdatasync(2)`.
pub(crate) fn sync_file_range(
    fd: &impl AsRawFd,
    offset: u64,
    len: u64,
    how: RangeSync,
) -> io::Result<()> {
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
pub(crate) fn fadvise_dontneed(fd: &impl AsRawFd, offset: u64, len: u64) -> io::Result<()> {
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
pub(crate) fn fallocate_keep_size(fd: &impl AsRawFd, len: u64) -> io::Result<bool> {
    let len = offset_to_off_t(len)?;
    // SAFETY: fallocate touches no user memory; the fd is borrowed from a live file.
    let rc = unsafe { libc::fallocate(fd.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) => Ok(false),
            _ => Err(e),
        };
    }
    Ok(true)
}

/// Page-cache state of a file range, in pages (`struct cachestat`, `cachestat(2)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct CacheStat {
    /// Pages in the page cache.
    pub(crate) nr_cache: u64,
    /// Dirty pages.
    pub(crate) nr_dirty: u64,
    /// Pages under writeback.
    pub(crate) nr_writeback: u64,
    /// Pages evicted (shadow entries).
    pub(crate) nr_evicted: u64,
    /// Evicted pages that were recently used.
    pub(crate) nr_recently_evicted: u64,
}

/// `struct cachestat_range` of `cachestat(2)`.
#[repr(C)]
struct CacheStatRange {
    off: u64,
    len: u64,
}

/// The page-cache state of `offset..offset + len` (`cachestat(2)`, Linux 6.5; `len` 0 means to
/// the end of the file). `ENOSYS` on older kernels.
pub(crate) fn cachestat(fd: &impl AsRawFd, offset: u64, len: u64) -> io::Result<CacheStat> {
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
pub(crate) fn file_resident_pages(fd: &impl AsRawFd, len: u64) -> io::Result<u64> {
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

// ---------------------------------------------------------------------------------------------
// Pressure-stall information and eventfd, for the memory-pressure monitor
// ---------------------------------------------------------------------------------------------

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
                format!(
                    "pressure stall information is not available at {}: {e}",
                    path.display()
                ),
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
        _ => io::Error::new(
            e.kind(),
            format!(
                "cannot set the trigger {trigger:?} on {}: {e}",
                path.display()
            ),
        ),
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
    timeout: std::time::Duration,
) -> io::Result<(libc::c_short, bool)> {
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: pri.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a live array of two pollfd structures for the duration of the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok((0, false))
        } else {
            Err(e)
        };
    }
    Ok((fds[0].revents, fds[1].revents != 0))
}

/// Linux's `UIO_MAXIOV`: the most buffers one `readv`/`writev` takes.
pub(crate) const IOV_MAX: usize = 1024;

/// Writes the buffers `bufs` to `fd` in one call (`writev(2)`), retrying on `EINTR`; returns
/// the bytes written (possibly fewer than offered).
pub(crate) fn writev(fd: BorrowedFd<'_>, bufs: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
    let cnt = bufs.len().min(IOV_MAX) as libc::c_int;
    loop {
        // SAFETY: IoSlice is ABI-compatible with `struct iovec` (std guarantees it on Unix);
        // the kernel only reads the `cnt` live buffers they describe.
        let rc = unsafe { libc::writev(fd.as_raw_fd(), bufs.as_ptr().cast(), cnt) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads from `fd` into the buffers `bufs` in one call (`readv(2)`), retrying on `EINTR`;
/// returns the bytes read (0 at end of file).
pub(crate) fn readv(fd: BorrowedFd<'_>, bufs: &mut [std::io::IoSliceMut<'_>]) -> io::Result<usize> {
    let cnt = bufs.len().min(IOV_MAX) as libc::c_int;
    loop {
        // SAFETY: IoSliceMut is ABI-compatible with `struct iovec`; the kernel writes only
        // within the `cnt` live, exclusively borrowed buffers they describe.
        let rc = unsafe { libc::readv(fd.as_raw_fd(), bufs.as_mut_ptr().cast(), cnt) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The file `fd` refers to, as `(device, inode)` (`fstat(2)`): equal for two descriptors of
/// the same memory file, in whichever process they were opened.
pub(crate) fn file_id(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` to the pointer we pass.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}
