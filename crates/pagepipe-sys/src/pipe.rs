//! Kernel pipes: making them, telling their ends apart, one-byte signals (`pipe2(2)`,
//! `preadv2(2)`/`pwritev2(2)` with `RWF_NOWAIT`, `FIONREAD`, `F_SETPIPE_SZ`).

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A kernel pipe (`pipe2(2)`, close-on-exec): `(read end, write end)`.
///
/// # Errors
/// The OS's error from `pipe2(2)` (`EMFILE`, `ENFILE`).
pub fn os_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A kernel pipe in packet mode (`pipe2(2)` with `O_DIRECT`, close-on-exec, non-blocking):
/// every write is a buffer of its own, never merged into the previous one, and every read
/// takes one whole buffer. So the number of one-byte writes queued is the number of the
/// pipe's slots in use, which is what `poll(2)` compares with its capacity. `(read end, write
/// end)`.
///
/// # Errors
/// The OS's error from `pipe2(2)` (`EMFILE`, `ENFILE`).
pub fn packet_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    cvt(unsafe {
        libc::pipe2(
            fds.as_mut_ptr(),
            libc::O_CLOEXEC | libc::O_DIRECT | libc::O_NONBLOCK,
        )
    })?;
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Which end of a kernel pipe `fd` is: `Some(false)` for a read end, `Some(true)` for a write
/// end, `None` if it is not a pipe made by `pipe(2)` (a named FIFO is not one) (`fstat(2)`,
/// `fstatfs(2)`, `F_GETFL`).
///
/// # Errors
/// The OS's error from `fstat(2)`, `fstatfs(2)` or `fcntl(2)`.
pub fn pipe_end_kind(fd: BorrowedFd<'_>) -> io::Result<Option<bool>> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable for the call.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Ok(None);
    }
    // A named FIFO is S_IFIFO too, but lives on a filesystem of its own (and takes no
    // RWF_NOWAIT): only pipes made by pipe(2) live on pipefs.
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fs` is writable for the call.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) })?;
    if fs.f_type != PIPEFS_MAGIC {
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

/// Writes one byte to a pipe without blocking, whatever the descriptor's `O_NONBLOCK` says
/// (`pwritev2(2)` at the current position with `RWF_NOWAIT`); a full pipe is `WouldBlock`.
///
/// `O_NONBLOCK` belongs to the open file description, which every process holding a copy of
/// the descriptor shares, and any of them may clear it with `fcntl(F_SETFL)`: a call that must
/// not block cannot rely on it. `RWF_NOWAIT` is this call's own. Kernels that do not take
/// `RWF_NOWAIT` on pipes (before Linux 5.8: `EOPNOTSUPP`) get a plain `write(2)`, which then
/// relies on the flag. `RWF_NOWAIT` does not cover the pipe's own mutex: a holder blocked
/// inside the kernel on the same pipe (a `splice` from an idle socket) can still make this
/// call wait.
///
/// # Errors
/// `WouldBlock` for a full pipe (or, on a kernel that has `RWF_NOWAIT`, a pipe end that lost
/// it), `BrokenPipe` with no reader, the OS's other errors.
pub fn write_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let b = 1u8;
    let iov = libc::iovec {
        iov_base: (&b as *const u8).cast_mut().cast(),
        iov_len: 1,
    };
    one_byte(|nowait| {
        if nowait {
            // SAFETY: the kernel reads one byte from `iov`, which points at a live local.
            unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, -1, libc::RWF_NOWAIT) }
        } else {
            // SAFETY: writes one byte from a live local.
            unsafe { libc::write(fd.as_raw_fd(), (&b as *const u8).cast(), 1) }
        }
    })
}

/// Reads one byte from a pipe without blocking, whatever the descriptor's `O_NONBLOCK` says
/// (`preadv2(2)` at the current position with `RWF_NOWAIT`; see [`write_byte`]); an empty pipe
/// is `WouldBlock`, one with no writer left `UnexpectedEof`.
///
/// # Errors
/// `WouldBlock` for an empty pipe, `UnexpectedEof` with no writer left, the OS's other errors.
pub fn read_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut b = 0u8;
    let iov = libc::iovec {
        iov_base: (&mut b as *mut u8).cast(),
        iov_len: 1,
    };
    one_byte(|nowait| {
        if nowait {
            // SAFETY: the kernel writes at most one byte through `iov`, into a live local.
            unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, -1, libc::RWF_NOWAIT) }
        } else {
            // SAFETY: reads at most one byte into a live local (the same one `iov` names).
            unsafe { libc::read(fd.as_raw_fd(), iov.iov_base, 1) }
        }
    })
}

/// `statfs.f_type` of pipefs, where the pipes `pipe(2)` makes live (`include/uapi/linux/magic.h`).
const PIPEFS_MAGIC: libc::__fsword_t = 0x5049_5045;

/// Runs a one-byte transfer (`io(nowait)` returns the syscall's result) until it moves the
/// byte or fails with something other than `EINTR`; 0 bytes is `UnexpectedEof`.
///
/// A descriptor that refuses `RWF_NOWAIT` (`EOPNOTSUPP`) gets the plain call only on a kernel
/// that refuses it for every pipe (before 5.8: [`nowait_works`]), where the descriptors'
/// `O_NONBLOCK` is all there is. On a newer kernel one pipe end can lose `RWF_NOWAIT` (after a
/// `splice(2)` on it, which any holder of its description may do) while another holder cleared
/// its `O_NONBLOCK`: the plain call could then block for good, so this one fails with
/// `WouldBlock` instead.
fn one_byte(io: impl Fn(bool) -> isize) -> io::Result<()> {
    let mut nowait = true;
    loop {
        let rc = io(nowait);
        if rc == 1 {
            return Ok(());
        }
        if rc == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) if nowait && !nowait_works() => nowait = false,
            Some(libc::EOPNOTSUPP) => return Err(io::Error::from(io::ErrorKind::WouldBlock)),
            _ => return Err(e),
        }
    }
}

/// Whether this kernel takes `RWF_NOWAIT` on pipes (Linux 5.8 and later), asked once with a
/// pipe of our own.
fn nowait_works() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        let Ok((r, w)) = os_pipe() else {
            return true; // cannot ask: never block
        };
        let b = 1u8;
        let iov = libc::iovec {
            iov_base: (&b as *const u8).cast_mut().cast(),
            iov_len: 1,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: the kernel reads one byte from `iov`, which points at a live local.
        let rc = unsafe { libc::pwritev2(w.as_raw_fd(), &iov, 1, -1, libc::RWF_NOWAIT) };
        let works = rc == 1 || io::Error::last_os_error().raw_os_error() != Some(libc::EOPNOTSUPP);
        drop((r, w));
        works
    })
}

/// Bytes queued in a kernel pipe, asked through either end (`ioctl(2)`, `FIONREAD`).
///
/// # Errors
/// The OS's error from `ioctl(2)`.
pub fn fionread(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer we pass.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n as usize)
}

/// Sets a kernel pipe's capacity (`fcntl(2)`, `F_SETPIPE_SZ`).
///
/// # Errors
/// The OS's error from `fcntl(2)`: `EBUSY` below the bytes queued, `EPERM` above the limits for an
/// unprivileged process.
pub fn set_pipe_size(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) }).map(drop)
}

/// A kernel pipe's capacity in bytes (`fcntl(2)`, `F_GETPIPE_SZ`).
///
/// # Errors
/// The OS's error from `fcntl(2)`.
pub fn pipe_size(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // SAFETY: fcntl on a borrowed descriptor touches no user memory.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) }).map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_named_fifo_is_not_a_pipe() {
        let path = std::env::temp_dir().join(format!("pagepipe-fifo-{}", std::process::id()));
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true) // O_RDWR: opening does not wait for the other side
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(pipe_end_kind(fifo.as_fd()).unwrap(), None);
        let (r, w) = os_pipe().unwrap();
        assert_eq!(pipe_end_kind(r.as_fd()).unwrap(), Some(false));
        assert_eq!(pipe_end_kind(w.as_fd()).unwrap(), Some(true));
    }

    /// Each one-byte write of a packet pipe takes a slot of its own: two fill a two-page pipe
    /// (no `POLLOUT`), growing it brings `POLLOUT` back, and one read takes one packet.
    #[test]
    fn packets_count_slots() {
        use crate::poll::poll_now;
        let (r, w) = packet_pipe().unwrap();
        set_pipe_size(w.as_fd(), 2 * 4096).unwrap();
        assert_eq!(pipe_size(r.as_fd()).unwrap(), 2 * 4096);
        write_byte(w.as_fd()).unwrap();
        assert_ne!(poll_now(w.as_fd(), libc::POLLOUT) & libc::POLLOUT, 0);
        write_byte(w.as_fd()).unwrap();
        assert_eq!(poll_now(w.as_fd(), libc::POLLOUT) & libc::POLLOUT, 0);
        assert_eq!(
            write_byte(w.as_fd()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        set_pipe_size(r.as_fd(), 4 * 4096).unwrap(); // either end may resize
        assert_ne!(poll_now(w.as_fd(), libc::POLLOUT) & libc::POLLOUT, 0);
        set_pipe_size(r.as_fd(), 2 * 4096).unwrap();
        read_byte(r.as_fd()).unwrap();
        assert_eq!(fionread(r.as_fd()).unwrap(), 1);
        assert_ne!(poll_now(r.as_fd(), libc::POLLIN) & libc::POLLIN, 0);
        drop(r);
        assert_ne!(poll_now(w.as_fd(), 0) & libc::POLLERR, 0);
    }

    /// A byte moves without blocking even when someone cleared `O_NONBLOCK` on the shared
    /// open file description.
    #[test]
    fn one_byte_moves_never_block_whatever_o_nonblock_says() {
        let (r, w) = os_pipe().unwrap(); // blocking descriptors, as a peer could leave them
        assert_eq!(
            read_byte(r.as_fd()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        set_pipe_size(w.as_fd(), 4096).unwrap();
        let mut written = 0;
        loop {
            match write_byte(w.as_fd()) {
                Ok(()) => written += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(written, 4096);
        assert_eq!(fionread(r.as_fd()).unwrap(), 4096);
        read_byte(r.as_fd()).unwrap();
        drop(w);
        for _ in 1..4096 {
            read_byte(r.as_fd()).unwrap();
        }
        assert_eq!(
            read_byte(r.as_fd()).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
