//! A hostile peer against a live pipe: the input is a program of pipe operations interleaved
//! with writes of arbitrary values at arbitrary offsets of the pipe's shared region (through a
//! second mapping of its memory file, as another process would have). Every operation must
//! return; a panic, a fault, an AddressSanitizer report or a hang is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagepipe::{Builder, PoolPolicy, Writer};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Our own mapping of the region: received like a peer receives an end.
fn map_region(w: &Writer) -> (*mut u8, usize) {
    let (a, b) = UnixStream::pair().unwrap();
    w.send_to(&a).unwrap();
    let mut buf = [0u8; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr pointing at live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg into our buffers; the first SCM_RIGHTS descriptor is the memory file.
    let memfd = unsafe {
        assert!(libc::recvmsg(b.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) > 0);
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        let data = libc::CMSG_DATA(cmsg).cast::<i32>();
        let life = OwnedFd::from_raw_fd(data.add(1).read_unaligned());
        drop(life);
        OwnedFd::from_raw_fd(data.read_unaligned())
    };
    // SAFETY: fstat into a zeroed struct, then a fresh shared mapping of the whole file.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(memfd.as_raw_fd(), &mut st), 0);
        let len = st.st_size as usize;
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            memfd.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        (p.cast(), len)
    }
}

fn ok<T>(r: std::io::Result<T>) {
    if let Err(e) = r {
        assert!(
            matches!(
                e.kind(),
                ErrorKind::WouldBlock
                    | ErrorKind::InvalidData
                    | ErrorKind::BrokenPipe
                    | ErrorKind::Deadlock
                    | ErrorKind::ResourceBusy
                    | ErrorKind::TimedOut
            ),
            "unexpected error {e:?}"
        );
    }
}

fuzz_target!(|input: &[u8]| {
    let mut it = input.iter().copied();
    let policy = match it.next().unwrap_or(0) % 3 {
        0 => PoolPolicy::default(),
        1 => PoolPolicy::None,
        _ => PoolPolicy::Unified { keep: 2, burst: 8 },
    };
    let (w, r) = Builder::new().capacity(65536).pool(policy).build().unwrap();
    w.set_nonblocking(true).unwrap();
    r.set_nonblocking(true).unwrap();
    let (base, len) = map_region(&w);
    let data = [0x5au8; 20_000];
    let mut buf = [0u8; 20_000];
    let mut arg = |it: &mut std::iter::Copied<std::slice::Iter<'_, u8>>| {
        u16::from_le_bytes([it.next().unwrap_or(0), it.next().unwrap_or(0)]) as usize
    };
    while let Some(op) = it.next() {
        match op % 8 {
            0 => ok((&w).write(&data[..arg(&mut it) % 20_000])),
            1 => ok((&r).read(&mut buf[..arg(&mut it) % 20_000])),
            2 => ok(w.write_chunk().map(|mut c| {
                let first = c.as_mut_slices().0;
                let n = first.len().min(arg(&mut it));
                first[..n].fill(7);
                c.commit(n)
            })),
            3 => ok(r.read_chunk().map(|c| {
                let n = c.len().min(arg(&mut it));
                let sum: usize = c.slices().flatten().map(|&b| b as usize).sum();
                c.consume(n);
                sum
            })),
            4 => ok(w.set_capacity(1 + arg(&mut it) * 8)),
            5 => {
                let _ = (r.len(), w.free(), w.capacity(), w.spare_pages());
            }
            _ => {
                // Poke: an aligned u64 in the header, the slot table or the first arena pages.
                let mut off = (arg(&mut it) * 8) % (4096 + 64 * 1024 + 4096).min(len);
                if (912..936).contains(&off) {
                    // The shared O_NONBLOCK and timeout words: a peer clearing them makes our
                    // calls blocking by design (as fcntl on a shared descriptor would).
                    off += 24;
                }
                let mut v = [0u8; 8];
                for b in &mut v {
                    *b = it.next().unwrap_or(0);
                }
                // SAFETY: in bounds of our mapping and aligned; shared memory meant to be written.
                unsafe { std::ptr::write_volatile(base.add(off).cast::<u64>(), u64::from_le_bytes(v)) };
            }
        }
    }
    // SAFETY: unmaps exactly the mapping made in map_region.
    unsafe { libc::munmap(base.cast(), len) };
});
