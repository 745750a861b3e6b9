//! Pipes between processes: ends held across fork, passed over sockets and exec, and peers that
//! are killed with SIGKILL at awkward moments (inside a write, holding a side lock).

use pagepipe::{pipe, Builder, Reader, Writer};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

#[path = "support/children.rs"]
mod children;
use children::{child, fork, fork_raw, kill, reap_within, serial};

/// Bound for "nothing hangs": far above the 100 ms detection the design promises, so a loaded
/// machine does not fail the test; the benchmark measures the real detection times.
const HANG: Duration = Duration::from_secs(10);

/// Waits for `pid` (killing it after HANG) and returns its exit code, or 128 + signal.
fn reap(pid: libc::pid_t) -> i32 {
    reap_within(pid, HANG)
}

/// A kernel pipe used to tell the parent that a child reached a point.
fn signal_pipe() -> (std::fs::File, std::fs::File) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    use std::os::fd::FromRawFd;
    // SAFETY: fresh descriptors owned by nobody else.
    unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    }
}

#[test]
fn a_forked_child_reads_what_the_parent_writes() {
    let _serial = serial();
    let (mut w, mut r) = pipe().unwrap();
    let pid = fork_raw();
    if pid == 0 {
        // The child holds both ends, as with pipe(2) descriptors: it closes its writer.
        child(move || {
            drop(w);
            let mut got = Vec::new();
            r.read_to_end(&mut got).unwrap();
            i32::from(got != b"from the parent")
        });
    }
    drop(r); // the child's reader keeps the end open
    w.write_all(b"from the parent").unwrap();
    drop(w);
    assert_eq!(reap(pid), 0);
}

#[test]
fn end_of_file_waits_for_the_childs_writer() {
    let _serial = serial();
    let (w, mut r) = pipe().unwrap();
    let child = fork(|| {
        std::thread::sleep(Duration::from_millis(200));
        (&w).write_all(b"late").unwrap();
        0
    });
    drop(w); // the child still holds a writer
    let t = Instant::now();
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"late");
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "end of file came early"
    );
    assert_eq!(reap(child), 0);
}

#[test]
fn a_killed_writer_is_end_of_file_after_its_data() {
    let _serial = serial();
    let (w, mut r) = pipe().unwrap();
    let (mut ready_r, mut ready_w) = signal_pipe();
    let child = fork(|| {
        (&w).write_all(b"published").unwrap();
        ready_w.write_all(b"!").unwrap();
        std::thread::sleep(HANG * 2);
        0
    });
    drop(w);
    ready_r.read_exact(&mut [0]).unwrap();
    kill(child);
    let t = Instant::now();
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"published");
    assert!(t.elapsed() < HANG);
    assert_eq!(reap(child), 128 + libc::SIGKILL);
}

#[test]
fn a_killed_reader_is_broken_pipe_for_a_sleeping_writer() {
    let _serial = serial();
    let (w, r) = pipe().unwrap();
    let (mut ready_r, mut ready_w) = signal_pipe();
    let child = fork(|| {
        let mut buf = [0u8; 4];
        (&r).read_exact(&mut buf).unwrap();
        ready_w.write_all(b"!").unwrap();
        std::thread::sleep(HANG * 2);
        0
    });
    drop(r);
    (&w).write_all(b"ping").unwrap();
    ready_r.read_exact(&mut [0]).unwrap();
    (&w).write_all(&[0u8; 65536]).unwrap(); // the pipe is now full
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        kill(child);
    });
    let t = Instant::now();
    let err = (&w).write_all(&[1u8; 4096]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
    assert!(t.elapsed() < HANG);
    killer.join().unwrap();
    assert_eq!(reap(child), 128 + libc::SIGKILL);
}

/// A writer that never blocks (its ring has room) learns of its reader's death from the kernel,
/// not from a full ring or a tick: once the killed reader is reaped (its descriptors closed)
/// and the process's watcher has had a moment, no write returns `Ok` into a pipe nobody can
/// read. The kernel pipe fails the first write after its last reader is gone.
#[test]
fn a_killed_reader_fails_the_next_write_of_a_busy_writer() {
    let _serial = serial();
    let (w, r) = pipe().unwrap();
    let child = fork(|| {
        let _holds = &r;
        std::thread::sleep(HANG * 2);
        0
    });
    drop(r);
    (&w).write_all(b"before").unwrap();
    kill(child);
    assert_eq!(reap(child), 128 + libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(100));
    let err = (&w).write(b"after").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
}

/// The same in a forked child that only inherited its writer: the child starts its own
/// watcher (the parent's thread did not survive the fork) at its first call.
#[test]
fn an_inherited_writer_sees_its_reader_killed() {
    let _serial = serial();
    let (w, r) = pipe().unwrap();
    let reader = fork(|| {
        let _holds = &r;
        std::thread::sleep(HANG * 2);
        0
    });
    drop(r);
    let (mut ready_r, mut ready_w) = signal_pipe();
    let (mut go_r, mut go_w) = signal_pipe();
    let writer = fork(|| {
        (&w).write_all(b"before").unwrap();
        ready_w.write_all(b"!").unwrap();
        go_r.read_exact(&mut [0]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        match (&w).write(b"after") {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => 0,
            Ok(_) => 3,  // accepted into a pipe nobody can read
            Err(_) => 4, // some other error
        }
    });
    drop(w);
    ready_r.read_exact(&mut [0]).unwrap();
    kill(reader);
    assert_eq!(reap(reader), 128 + libc::SIGKILL);
    go_w.write_all(b"!").unwrap();
    assert_eq!(reap(writer), 0);
}

/// A process killed at a random moment while it resizes a pipe with data queued (it does
/// nothing else) loses nothing: the reader gets every byte published before, in order, then end
/// of file. Hundreds of trials, every byte checked.
#[test]
fn a_resizer_killed_at_random_moments_loses_nothing() {
    let _serial = serial();
    let trials = 200;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for trial in 0..trials {
        let (w, mut r) = pipe().unwrap();
        let data: Vec<u8> = (0..48 * 1024u32)
            .map(|i| (i.wrapping_mul(7) ^ trial) as u8)
            .collect();
        let (mut ready_r, mut ready_w) = signal_pipe();
        let sent = data.clone();
        let child = fork(move || {
            for block in sent.chunks(4096) {
                (&w).write_all(block).unwrap();
            }
            ready_w.write_all(b"!").unwrap();
            loop {
                for size in [1 << 20, 64 << 10, 256 << 10, 128 << 10] {
                    w.set_capacity(size).unwrap();
                }
            }
        });
        ready_r.read_exact(&mut [0]).unwrap();
        std::thread::sleep(Duration::from_micros(rng(&mut seed) % 2000));
        kill(child);
        assert_eq!(reap(child), 128 + libc::SIGKILL);
        let mut got = Vec::new();
        r.read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        assert!(
            got == data,
            "trial {trial}: {} bytes back of {}, or changed",
            got.len(),
            data.len()
        );
    }
}

/// A process that took its key on a pipe and then forked: the child closes its copy of the
/// parent's key description, so when the parent dies holding the write side, the child sees
/// the holder dead and takes the side over (a child that kept the copy would keep the dead
/// parent's key alive, and wait for ever).
#[test]
fn a_child_takes_over_from_its_killed_parent() {
    let _serial = serial();
    let (w, mut r) = pipe().unwrap();
    let (mut holding_r, mut holding_w) = signal_pipe();
    let (mut go_r, mut go_w) = signal_pipe();
    let (mut child_r, mut child_w) = signal_pipe();
    let parent = fork(move || {
        (&w).write_all(b"a").unwrap(); // takes this process's key
        let grandchild = fork(|| {
            go_r.read_exact(&mut [0]).unwrap();
            w.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
            i32::from((&w).write_all(b"c").is_err())
        });
        child_w.write_all(&grandchild.to_le_bytes()).unwrap();
        let chunk = w.write_chunk().unwrap(); // holds the write side until killed
        holding_w.write_all(b"!").unwrap();
        std::thread::sleep(HANG * 2);
        drop(chunk);
        0
    });
    let mut pid = [0u8; 4];
    child_r.read_exact(&mut pid).unwrap();
    let grandchild = libc::pid_t::from_le_bytes(pid);
    holding_r.read_exact(&mut [0]).unwrap();
    kill(parent);
    assert_eq!(reap(parent), 128 + libc::SIGKILL);
    go_w.write_all(b"!").unwrap();
    // The grandchild is not our child: wait for its end of the pipe instead.
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"ac", "grandchild {grandchild}");
}

/// The process that made a pipe took its key, forked a child that lives on (with the mapping it
/// inherited) and was killed holding the read side: the key's lock lived on a description of
/// the creator's own that is never mapped, so it died with the creator, and a reader in a third
/// process takes the side over. (With the lock on the description the region is mapped from,
/// the child's inherited mapping kept the dead creator's key alive, and the read timed out.)
#[test]
fn a_killed_creators_side_is_free_while_its_child_lives() {
    let _serial = serial();
    let (a, b) = UnixStream::pair().unwrap();
    let creator = fork(move || {
        let (w, r) = pipe().unwrap();
        (&w).write_all(b"queued").unwrap(); // takes this process's key
        r.send_to(&a).unwrap();
        let keep = (w.clone(), r.clone());
        let grandchild = fork(move || {
            let _held = keep;
            std::thread::sleep(HANG * 2);
            0
        });
        let _chunk = r.read_chunk().unwrap(); // holds the read side until killed
        (&a).write_all(&grandchild.to_le_bytes()).unwrap();
        std::thread::sleep(HANG * 2);
        0
    });
    let r = Reader::recv_from(&b).unwrap();
    let mut pid = [0u8; 4];
    (&b).read_exact(&mut pid).unwrap();
    let grandchild = libc::pid_t::from_le_bytes(pid);
    kill(creator);
    assert_eq!(reap(creator), 128 + libc::SIGKILL);
    r.set_read_timeout(Some(HANG / 2)).unwrap();
    let mut got = [0u8; 6];
    let res = (&r).read_exact(&mut got);
    // SAFETY: kill(2) on the grandchild, which the creator left to init.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    res.unwrap();
    assert_eq!(&got, b"queued");
}

/// Descriptors of pagepipe memory files this process holds.
fn memfds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("/memfd:pagepipe"))
        .count()
}

/// A dropped pipe that never left the process leaves its region in the cache for the next
/// pipe (no new memory file), and a child forked meanwhile closes the cached regions it
/// inherited (their descriptors hold the parent's key descriptions).
#[test]
fn cached_regions_are_reused_and_not_inherited() {
    let _serial = serial();
    pagepipe::shrink();
    let base = memfds();
    let (mut w, mut r) = pipe().unwrap();
    w.write_all(b"key").unwrap(); // takes this process's key on it
    r.read_exact(&mut [0u8; 3]).unwrap();
    drop((w, r));
    assert_eq!(memfds(), base + 1, "the region waits in the cache");
    let (mut w, mut r) = pipe().unwrap();
    assert_eq!(memfds(), base + 1, "the new pipe took it");
    w.write_all(b"again").unwrap();
    let mut got = [0u8; 5];
    r.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"again");
    drop((w, r));
    let child = fork(move || i32::from(memfds() != base));
    assert_eq!(reap(child), 0, "the child closed the cached region");
    pagepipe::shrink();
    assert_eq!(memfds(), base);
}

/// A second mapping of a pipe in the same process (an end received from ourselves, as the C
/// binding does to reach an end's descriptors), dropped while a thread of ours holds the write
/// side: closing its descriptors leaves the process's key alone, so another process still sees
/// the side held by a live process and waits.
#[test]
fn closing_a_second_mapping_keeps_the_process_key() {
    let _serial = serial();
    let (w, r) = pipe().unwrap();
    (&w).write_all(b"a").unwrap();
    let chunk = w.write_chunk().unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    w.send_to(&a).unwrap();
    drop(Writer::recv_from(&b).unwrap());
    let child = fork(|| match w.try_write(b"b") {
        Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
        Ok(_) => 3, // took the side from a live holder
        Err(_) => 4,
    });
    assert_eq!(reap(child), 0);
    drop(chunk);
    drop(r);
}

#[test]
fn a_write_lock_held_by_a_killed_process_is_taken_over() {
    let _serial = serial();
    let (w, r) = pipe().unwrap();
    let (mut ready_r, mut ready_w) = signal_pipe();
    let w2 = w.clone();
    let child = fork(move || {
        let mut chunk = w2.write_chunk().unwrap();
        chunk.as_mut_slices().0[..7].copy_from_slice(b"garbage");
        ready_w.write_all(b"!").unwrap();
        std::thread::sleep(HANG * 2); // dies holding the write side
        0
    });
    ready_r.read_exact(&mut [0]).unwrap();
    kill(child);
    assert_eq!(reap(child), 128 + libc::SIGKILL);
    let t = Instant::now();
    (&w).write_all(b"after").unwrap();
    assert!(t.elapsed() < HANG);
    drop(w);
    let mut got = Vec::new();
    (&r).read_to_end(&mut got).unwrap();
    assert_eq!(
        got, b"after",
        "an uncommitted chunk of a dead writer leaked"
    );
}

#[test]
fn a_read_lock_held_by_a_killed_process_is_taken_over() {
    let _serial = serial();
    let (w, r) = pipe().unwrap();
    (&w).write_all(b"first").unwrap();
    let (mut ready_r, mut ready_w) = signal_pipe();
    let r2 = r.clone();
    let child = fork(move || {
        let chunk = r2.read_chunk().unwrap();
        assert_eq!(chunk.len(), 5);
        ready_w.write_all(b"!").unwrap();
        std::thread::sleep(HANG * 2); // dies holding the read side, consuming nothing
        0
    });
    ready_r.read_exact(&mut [0]).unwrap();
    kill(child);
    assert_eq!(reap(child), 128 + libc::SIGKILL);
    (&w).write_all(b"second").unwrap();
    drop(w);
    let mut got = Vec::new();
    (&r).read_to_end(&mut got).unwrap();
    assert_eq!(got, b"firstsecond");
}

// ----- records: the stream check of the SIGKILL stress test -----

/// A record: `len: u16 | writer: u8 | seq: u32 | payload | fnv32 of everything before`.
fn record(writer: u8, seq: u32, payload_len: usize) -> Vec<u8> {
    let len = 2 + 1 + 4 + payload_len + 4;
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&(len as u16).to_le_bytes());
    v.push(writer);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend((0..payload_len).map(|i| (i as u32 ^ seq) as u8));
    let sum = fnv(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn fnv(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
    })
}

/// Checks a stream of whole records; returns the number of records per writer. Panics on a
/// torn, corrupt, duplicated or missing record.
fn check_stream(mut s: &[u8], writers: usize) -> Vec<u32> {
    let mut next = vec![0u32; writers];
    while !s.is_empty() {
        assert!(s.len() >= 2, "torn record header");
        let len = usize::from(u16::from_le_bytes([s[0], s[1]]));
        assert!(len >= 11 && s.len() >= len, "torn record of {len} bytes");
        let (rec, rest) = s.split_at(len);
        let sum = u32::from_le_bytes(rec[len - 4..].try_into().unwrap());
        assert_eq!(fnv(&rec[..len - 4]), sum, "corrupt record");
        let w = usize::from(rec[2]);
        let seq = u32::from_le_bytes(rec[3..7].try_into().unwrap());
        assert_eq!(
            seq, next[w],
            "writer {w}: record {seq} where {} was due",
            next[w]
        );
        next[w] += 1;
        s = rest;
    }
    next
}

/// xorshift, seeded per iteration.
fn rng(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Two writer processes stream atomic records (up to PIPE_BUF bytes) into one pipe and are
/// killed with SIGKILL at random moments; the reader must see every published record whole,
/// once, in each writer's order, then end of file. Iterations: `PAGEPIPE_KILLS` (default 100,
/// two kills each).
#[test]
fn writers_killed_at_random_moments_lose_and_tear_nothing() {
    let _serial = serial();
    let iterations: u64 = std::env::var("PAGEPIPE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut detect = Vec::new();
    for it in 0..iterations {
        let mut seed = 0x9e37_79b9_7f4a_7c15 ^ (it + 1);
        let (w, r) = Builder::new().capacity(16 * 4096).build().unwrap();
        let pids: Vec<_> = (0..2u8)
            .map(|id| {
                let w = w.clone();
                let mut s = seed ^ u64::from(id) << 32;
                fork(move || {
                    for seq in 0.. {
                        let len = (rng(&mut s) % 4085) as usize; // record <= 4096 bytes
                        (&w).write_all(&record(id, seq, len)).unwrap();
                    }
                    0
                })
            })
            .collect();
        drop(w);
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            (&r).read_to_end(&mut all).unwrap();
            (all, Instant::now())
        });
        let mut killed_at = Instant::now();
        for &pid in &pids {
            std::thread::sleep(Duration::from_micros(rng(&mut seed) % 20_000));
            kill(pid);
            killed_at = Instant::now();
        }
        for &pid in &pids {
            assert_eq!(reap(pid), 128 + libc::SIGKILL);
        }
        let (all, eof_at) = reader.join().unwrap();
        detect.push(eof_at.saturating_duration_since(killed_at));
        check_stream(&all, 2);
    }
    detect.sort();
    let p99 = detect[(detect.len() * 99 / 100).min(detect.len() - 1)];
    eprintln!(
        "{} iterations: end of file after the last kill: median {:?}, p99 {:?}, max {:?}",
        detect.len(),
        detect[detect.len() / 2],
        p99,
        detect.last().unwrap()
    );
    assert!(*detect.last().unwrap() < HANG);
}

// ----- passing ends -----

#[test]
fn ends_travel_over_a_unix_socket_to_another_process() {
    let _serial = serial();
    let (a, b) = UnixStream::pair().unwrap();
    let child = fork(move || {
        let mut w = Writer::recv_from(&b).unwrap();
        w.write_all(b"over the socket").unwrap();
        0
    });
    drop(a.try_clone().unwrap());
    let (w, mut r) = pipe().unwrap();
    w.send_to(&a).unwrap();
    drop(w); // the child now holds the only writer
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"over the socket");
    assert_eq!(reap(child), 0);
}

/// A received end maps only the header's page and the first 64 KiB of ring until it meets a
/// larger ring: a pipe grown to 1 MiB before its end travels, and grown again while the
/// receiver reads, delivers every byte in order, in both directions of the journey.
#[test]
fn a_received_end_of_a_grown_pipe_reads_and_writes_every_byte() {
    let _serial = serial();
    let (a, b) = UnixStream::pair().unwrap();
    let (w, r) = pipe().unwrap();
    assert_eq!(w.set_capacity(1 << 20).unwrap(), 1 << 20);
    let data: Vec<u8> = (0..900_000u32).map(|i| (i % 251) as u8).collect();
    (&w).write_all(&data).unwrap(); // queued past the near part
    r.send_to(&a).unwrap();
    drop(r);
    // Received in this process: a second mapping of its own, not the one that grew.
    let r2 = Reader::recv_from(&b).unwrap();
    let mut got = vec![0u8; data.len()];
    (&r2).read_exact(&mut got).unwrap();
    assert!(got == data, "the received end read other bytes");
    w.send_to(&a).unwrap();
    drop(w);
    let w2 = Writer::recv_from(&b).unwrap();
    assert_eq!(w2.set_capacity(64 << 10).unwrap(), 64 << 10);
    (&w2).write_all(b"after the shrink").unwrap();
    drop(w2);
    let mut tail = Vec::new();
    (&r2).read_to_end(&mut tail).unwrap();
    assert_eq!(tail, b"after the shrink");
}

#[test]
fn receiving_something_else_is_invalid_data() {
    let _serial = serial();
    let (a, b) = UnixStream::pair().unwrap();
    let (w, r) = pipe().unwrap();
    // A reader where a writer is expected.
    r.send_to(&a).unwrap();
    let e = Writer::recv_from(&b).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert!(e.to_string().contains("reader"), "{e}");
    // A message that is not an end.
    (&a).write_all(b"hello").unwrap();
    let e = Reader::recv_from(&b).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    // The right end works, and the peer closing is UnexpectedEof.
    w.send_to(&a).unwrap();
    let w2 = Writer::recv_from(&b).unwrap();
    assert_eq!(w2.capacity(), w.capacity());
    drop(a);
    assert_eq!(
        Writer::recv_from(&b).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
}

/// The child side of `an_exec_child_inherits_an_end`: does nothing unless run by that test.
#[test]
fn exec_child_entry() {
    if std::env::var_os("PAGEPIPE_TEST_EXEC_CHILD").is_none() {
        return;
    }
    let mut w = Writer::from_env("PAGEPIPE_W").unwrap();
    assert_eq!(
        Writer::from_env("PAGEPIPE_W").unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        Reader::from_env("PAGEPIPE_W").unwrap_err().kind(),
        ErrorKind::InvalidData
    );
    w.write_all(b"from an exec'd child").unwrap();
}

#[test]
fn an_exec_child_inherits_an_end() {
    let _serial = serial();
    let (w, mut r) = pipe().unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "exec_child_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("PAGEPIPE_TEST_EXEC_CHILD", "1")
    .stdout(std::process::Stdio::null());
    w.pass_to(&mut cmd, "PAGEPIPE_W").unwrap();
    let mut child = cmd.spawn().unwrap();
    drop(cmd); // drops the Command's clone of the writer
    drop(w);
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(got, b"from an exec'd child");
    assert_eq!(
        Writer::from_env("PAGEPIPE_NOT_SET").unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn a_blocked_reader_in_another_process_notices_a_resize_and_data() {
    let _serial = serial();
    let (w, r) = pipe().unwrap();
    let child = fork(move || {
        let mut buf = vec![0u8; 200_000];
        let mut n = 0;
        while n < 200_000 {
            n += (&r).read(&mut buf[n..]).unwrap();
        }
        i32::from(buf.iter().any(|&b| b != 5))
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(w.set_capacity(1 << 20).unwrap(), 1 << 20);
    (&w).write_all(&[5u8; 200_000]).unwrap();
    assert_eq!(reap(child), 0);
}
