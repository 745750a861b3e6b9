//! A hostile peer's view of a live pipe: its own mapping of the pipe's shared region, received
//! the way any process receives an end. Shared by `tests/corrupt.rs` and the fuzz target
//! (`#[path]`-included: not a test of its own).

use pagepipe::Writer;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// This process's own mapping of a pipe's region, obtained the way a peer would: receive the
/// end over a socket and map the memory file that came with it.
pub struct Mapped {
    base: *mut u8,
    len: usize,
}

impl Mapped {
    /// Maps the region of `w`'s pipe.
    pub fn of(w: &Writer) -> Mapped {
        Mapped::sent(|sock| w.send_to(sock).unwrap())
    }

    /// Maps the region of the end `send` sends over the socket it is given.
    pub fn sent(send: impl FnOnce(&UnixStream)) -> Mapped {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a);
        let fds = recv_fds(&b);
        let memfd = &fds[0];
        // SAFETY: fstat into a zeroed stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::fstat(memfd.as_raw_fd(), &mut st) }, 0);
        let len = st.st_size as usize;
        // SAFETY: a fresh shared mapping of the memory file; we only write through raw pointers.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        Mapped {
            base: base.cast(),
            len,
        }
    }

    /// Overwrites the aligned u64 at `offset` (volatile: the pipe's process reads it).
    pub fn poke(&self, offset: usize, value: u64) {
        assert!(offset + 8 <= self.len && offset % 8 == 0);
        // SAFETY: in bounds and aligned; the region is shared memory meant to be written.
        unsafe { std::ptr::write_volatile(self.base.add(offset).cast::<u64>(), value) };
    }
}

// SAFETY: the mapping is shared memory written only through `poke`'s volatile writes; a peer
// writing it from another thread, concurrently with the pipe's own accesses, is the point.
unsafe impl Send for Mapped {}
// SAFETY: as for Send.
unsafe impl Sync for Mapped {}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly our mapping.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn recv_fds(sock: &UnixStream) -> Vec<OwnedFd> {
    let mut buf = [0u8; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr, filled with live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg into our buffers.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    assert!(n > 0);
    let mut fds = Vec::new();
    // SAFETY: walks the control headers the kernel wrote; SCM_RIGHTS data are descriptors now ours.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
        let data = libc::CMSG_DATA(cmsg).cast::<i32>();
        for i in 0..count {
            fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
        }
    }
    fds
}

impl Mapped {
    /// The region's length in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len
    }
}

/// The header's `nonblocking` and `timeout_ns` words (bytes 912..936) are left alone: they are
/// shared by design, as `O_NONBLOCK` is shared by every holder of a file description, so a peer
/// that clears them makes our calls blocking, exactly as `fcntl` on a shared pipe descriptor
/// would. Everything else a peer may scribble on.
pub fn header_word(w: usize) -> usize {
    let off = w * 8;
    if (912..936).contains(&off) {
        off + 24
    } else {
        off
    }
}
