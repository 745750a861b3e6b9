//! The process key taken only when a pipe leaves its process (issue 23, idle memory per pipe):
//! a pipe confined to its process has a provisional key (no second description of its memory
//! file, no byte locked); sending an end or forking makes it real first, and a child whose
//! parent could not make it real fails closed on that pipe.
//!
//! Every test forks or holds extra descriptors of memory files: each takes
//! [`children::serial`], and checks what it counts of this process's descriptors in a forked
//! child, whose table holds only what it inherited and made.

#[path = "support/children.rs"]
mod children;

use pagepipe::{Reader, Writer};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// Where the process keys' bytes start in a memory file (`KEY_BASE` in `pipe/shared.rs`).
const KEY_BASE: i64 = 1 << 40;

/// The memory-file descriptors of this process, as (number, inode).
fn memfds() -> Vec<(i32, u64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(link) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !link.to_string_lossy().starts_with("/memfd:") {
            continue;
        }
        // SAFETY: zeroed stat, fstat on a descriptor number (a closed one fails).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } == 0 {
            found.push((fd, st.st_ino));
        }
    }
    found
}

/// A new pipe and its memory file's descriptor number (the one descriptor of an inode no
/// descriptor named before).
fn pipe_and_memfd() -> (Writer, Reader, i32) {
    let before = memfds();
    let (w, r): (Writer, Reader) = pagepipe::pipe().unwrap();
    let new: Vec<(i32, u64)> = memfds()
        .into_iter()
        .filter(|(_, ino)| !before.iter().any(|(_, i)| i == ino))
        .collect();
    assert_eq!(new.len(), 1, "one new memory file: {new:?}");
    (w, r, new[0].0)
}

/// Whether an open file description holds this process's provisional key byte (`pid`) on the
/// memory file `fd` names: asked through a description of our own (`F_OFD_GETLK`), as a peer
/// asks.
fn key_byte_locked(fd: i32) -> bool {
    let path = format!("/proc/self/fd/{fd}\0");
    // SAFETY: a NUL-terminated path.
    let own = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(own >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: zeroed flock completed below; fcntl writes into it; `own` is ours to close.
    unsafe {
        let mut fl: libc::flock = std::mem::zeroed();
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = KEY_BASE + i64::from(libc::getpid());
        fl.l_len = 1;
        assert_eq!(libc::fcntl(own, libc::F_OFD_GETLK, &mut fl), 0);
        libc::close(own);
        fl.l_type != libc::F_UNLCK as libc::c_short
    }
}

/// The file offset of descriptor `fd`'s open file description.
fn offset(fd: i32) -> i64 {
    // SAFETY: lseek on a descriptor number; changes only its description's offset.
    unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) }
}

/// A pipe that data went through (both side locks taken, so the key too) keeps the one
/// description its memory file was made with: no reopening through `/proc/self/fd` (the
/// offset set on the made description is still there), no second descriptor, no key byte
/// locked. Failed before the change: the first lock reopened the file in place (offset 0) and
/// locked the key byte.
#[test]
fn a_confined_pipe_opens_no_second_description_of_its_memory_file() {
    let _serial = children::serial();
    let pid = children::fork(|| {
        let (mut w, mut r, fd) = pipe_and_memfd();
        // SAFETY: lseek on the pipe's memory file: the offset is used by nothing of pagepipe's.
        if unsafe { libc::lseek(fd, 4242, libc::SEEK_SET) } != 4242 {
            return 9;
        }
        w.write_all(b"confined").unwrap();
        let mut buf = [0u8; 8];
        r.read_exact(&mut buf).unwrap();
        if offset(fd) != 4242 {
            return 3; // a description of its own replaced the made one
        }
        let ino = memfds().into_iter().find(|(f, _)| *f == fd).unwrap().1;
        if memfds().iter().filter(|(_, i)| *i == ino).count() != 1 {
            return 4;
        }
        if key_byte_locked(fd) {
            return 5;
        }
        0
    });
    assert_eq!(
        children::reap_within(pid, Duration::from_secs(20)),
        0,
        "3: the memory file was opened again; 4: a second descriptor; 5: the key byte is locked"
    );
}

/// Handing an end out (`to_fds`, as `send_to` and `pass_to` do) makes the key real before
/// the descriptors exist: the byte is locked, through a description other than the mapped
/// one, while a chunk's lock word names the key. Failed before the change at 3 (the byte was
/// locked at the first lock); without the upgrade in `expose`, at 4.
#[test]
fn handing_an_end_out_locks_the_key_first() {
    let _serial = children::serial();
    let pid = children::fork(|| {
        let (mut w, r, fd) = pipe_and_memfd();
        // SAFETY: as in the test above.
        unsafe { libc::lseek(fd, 4242, libc::SEEK_SET) };
        w.write_all(b"abc").unwrap();
        let chunk = r.read_chunk().unwrap(); // a lock word naming our provisional key
        if key_byte_locked(fd) {
            return 3;
        }
        let _fds: [OwnedFd; 2] = w.to_fds().unwrap();
        if !key_byte_locked(fd) {
            return 4;
        }
        if offset(fd) == 4242 {
            return 5; // locked through the mapped description: a child would keep it
        }
        drop(chunk);
        0
    });
    assert_eq!(
        children::reap_within(pid, Duration::from_secs(20)),
        0,
        "3: locked while confined; 4: not locked after to_fds; 5: locked on the mapped \
         description"
    );
}

/// A forked child finds a side that a parent thread holds (a read chunk kept across the fork)
/// held by a live process: the prepare handler made the parent's provisional key real. Failed
/// without that upgrade: the child saw the parent's key unlocked, took the side over and read
/// the data under the parent's chunk.
#[test]
fn a_side_held_across_a_fork_stays_held_in_the_child() {
    let _serial = children::serial();
    let (mut w, r): (Writer, Reader) = pagepipe::pipe().unwrap();
    w.write_all(b"held").unwrap();
    let chunk = r.read_chunk().unwrap();
    let pid = children::fork(|| {
        r.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 8];
        match (&r).read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Ok(_) => 3,
            Err(_) => 4,
        }
    });
    let code = children::reap_within(pid, Duration::from_secs(20));
    let bytes: Vec<u8> = chunk.slices().flatten().copied().collect();
    drop(chunk);
    assert_eq!(
        code, 0,
        "3: the child took over the side the parent's chunk holds; 4: another error"
    );
    assert_eq!(bytes, b"held");
}

/// Fills this process's descriptor table with descriptors of /dev/null; returns them.
fn fill_fd_table(fd: BorrowedFd<'_>) -> Vec<OwnedFd> {
    let mut fillers = Vec::new();
    while let Ok(d) = fd.try_clone_to_owned() {
        fillers.push(d);
    }
    fillers
}

/// A fork with no descriptor to spare cannot make the parent's provisional key real: the
/// child then fails closed on that pipe (`BrokenPipe`), even once it has descriptors to
/// spare, rather than take a side from a live parent thread; the parent goes on. Failed
/// without the fail-closed mark: the child took the key of its own and the side over.
#[test]
fn a_child_whose_parent_could_not_make_its_key_real_fails_closed() {
    let _serial = children::serial();
    // All in a child of the test: a full descriptor table here would fail the tests beside.
    let outer = children::fork(|| {
        let (mut w, mut r): (Writer, Reader) = pagepipe::pipe().unwrap();
        w.write_all(b"held").unwrap();
        let chunk = r.read_chunk().unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let mut fillers = fill_fd_table(null.as_fd());
        let inner = children::fork(|| {
            fillers.truncate(fillers.len().saturating_sub(16)); // descriptors to spare now
            r.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 8];
            match (&r).read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Ok(_) => return 3,
                Err(_) => return 4,
            }
            match (&w).write(b"c") {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
                _ => 5,
            }
        });
        drop(fillers);
        let code = children::reap_within(inner, Duration::from_secs(20));
        if code != 0 {
            return code;
        }
        let bytes: Vec<u8> = chunk.slices().flatten().copied().collect();
        drop(chunk);
        if bytes != b"held" {
            return 6;
        }
        // The parent's pipe works on, and its key becomes real at the next way out.
        w.write_all(b"on").unwrap();
        let mut buf = [0u8; 6];
        r.read_exact(&mut buf).unwrap();
        if &buf != b"heldon" {
            return 7;
        }
        match w.to_fds() {
            Ok(_) => 0,
            Err(_) => 8,
        }
    });
    assert_eq!(
        children::reap_within(outer, Duration::from_secs(30)),
        0,
        "3: the child took the side from the parent's chunk; 4, 5: not BrokenPipe; 6, 7: the \
         parent's data changed; 8: the parent could not hand out an end afterwards"
    );
}
