//! `pagepipe::tokio` with real tokio clients: codecs, `tokio::io::copy` to and from sockets,
//! many concurrent pipes on a multi-thread runtime, end of file and `BrokenPipe` (also after a
//! peer process was killed). Every test is bounded by a generous timeout: a hang fails, a slow
//! machine does not.

use futures_util::StreamExt;
use pagepipe::tokio::{AsyncReader, AsyncWriter};
use std::io::{self, Write};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{FramedRead, LinesCodec};

#[path = "support/children.rs"]
mod children;

const LIMIT: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("hung")
}

/// A deterministic byte stream: `len` bytes from `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn lines_codec_over_async_reader() {
    runtime().block_on(bounded(async {
        let (mut w, r) = pagepipe::pipe().unwrap();
        // A blocking writer thread: readiness must cross from plain writes to the reactor.
        let writer = std::thread::spawn(move || {
            for i in 0..5000 {
                writeln!(w, "line {i} {}", "x".repeat(i % 97)).unwrap();
            }
        });
        let mut lines = FramedRead::new(AsyncReader::new(r).unwrap(), LinesCodec::new());
        let mut n = 0;
        while let Some(line) = lines.next().await {
            assert_eq!(line.unwrap(), format!("line {n} {}", "x".repeat(n % 97)));
            n += 1;
        }
        assert_eq!(n, 5000);
        writer.join().unwrap();
    }));
}

#[test]
fn copy_between_pagepipe_and_socket() {
    runtime().block_on(bounded(async {
        let data = pattern(7, 3 << 20);
        // pagepipe -> socket
        let (w, r) = pagepipe::pipe().unwrap();
        let (mut w, mut r) = (AsyncWriter::new(w).unwrap(), AsyncReader::new(r).unwrap());
        let (mut s1, mut s2) = tokio::net::UnixStream::pair().unwrap();
        let feed = data.clone();
        let producer = tokio::spawn(async move { w.write_all(&feed).await });
        let pump = tokio::spawn(async move {
            let n = tokio::io::copy(&mut r, &mut s1).await?;
            s1.shutdown().await?;
            io::Result::Ok(n)
        });
        let mut got = Vec::new();
        s2.read_to_end(&mut got).await.unwrap();
        producer.await.unwrap().unwrap();
        assert_eq!(pump.await.unwrap().unwrap(), data.len() as u64);
        assert!(got == data, "pagepipe -> socket corrupted the stream");

        // socket -> pagepipe
        let (w, r) = pagepipe::pipe().unwrap();
        let (mut w, mut r) = (AsyncWriter::new(w).unwrap(), AsyncReader::new(r).unwrap());
        let (mut s1, mut s2) = tokio::net::UnixStream::pair().unwrap();
        let feed = data.clone();
        let producer = tokio::spawn(async move {
            s1.write_all(&feed).await?;
            s1.shutdown().await
        });
        let pump = tokio::spawn(async move {
            let n = tokio::io::copy(&mut s2, &mut w).await?;
            w.shutdown().await?;
            drop(w); // end of file for the reader
            io::Result::Ok(n)
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        producer.await.unwrap().unwrap();
        assert_eq!(pump.await.unwrap().unwrap(), data.len() as u64);
        assert!(got == data, "socket -> pagepipe corrupted the stream");
    }));
}

#[test]
fn many_concurrent_pipes_multi_thread() {
    const PIPES: u64 = 64;
    runtime().block_on(bounded(async {
        let mut tasks = Vec::new();
        for p in 0..PIPES {
            // Small pipes for some, so writers fill them and wait in the reactor too.
            let cap = if p % 2 == 0 { 4096 } else { 64 * 1024 };
            let (w, r) = pagepipe::Builder::new().capacity(cap).build().unwrap();
            let (mut w, mut r) = (AsyncWriter::new(w).unwrap(), AsyncReader::new(r).unwrap());
            let data = pattern(p, 64 * 1024 + (p as usize) * 997);
            let sum = checksum(&data);
            let len = data.len();
            tasks.push(tokio::spawn(async move {
                let mut off = 0;
                let mut step = 1 + (p as usize) * 131;
                while off < data.len() {
                    let end = (off + step).min(data.len());
                    w.write_all(&data[off..end]).await.unwrap();
                    off = end;
                    step = step * 7 % 20_000 + 1;
                }
            }));
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 1 + (p as usize) * 61 % 9000];
                loop {
                    let n = r.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert_eq!(got.len(), len, "pipe {p}");
                assert_eq!(checksum(&got), sum, "pipe {p}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }));
}

#[test]
fn end_of_file_and_broken_pipe() {
    runtime().block_on(bounded(async {
        // End of file after the queued data, once the last writer is gone.
        let (w, r) = pagepipe::pipe().unwrap();
        let mut r = AsyncReader::new(r).unwrap();
        let mut w = AsyncWriter::new(w).unwrap();
        w.write_all(b"tail").await.unwrap();
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(w);
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"tail");
        assert_eq!(r.read(&mut [0u8; 4]).await.unwrap(), 0);
        late.await.unwrap();

        // BrokenPipe: a writer blocked on a full pipe wakes when the reader goes.
        let (w, r) = pagepipe::Builder::new().capacity(4096).build().unwrap();
        let mut w = AsyncWriter::new(w).unwrap();
        let r = AsyncReader::new(r).unwrap();
        let closer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(r);
        });
        let err = w.write_all(&[1u8; 64 * 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(
            w.write(b"x").await.unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(w.write(b"").await.unwrap(), 0); // a null write succeeds, as in Linux
        closer.await.unwrap();

        // Back to a blocking end.
        let (w, r) = pagepipe::pipe().unwrap();
        let mut aw = AsyncWriter::new(w).unwrap();
        aw.write_all(b"abc").await.unwrap();
        let w = aw.into_inner();
        assert!(!w.is_nonblocking());
        let r = AsyncReader::new(r).unwrap().into_inner();
        let mut buf = [0u8; 8];
        assert_eq!(r.try_read(&mut buf).unwrap(), 3);
    }));
}

#[test]
fn clones_of_one_end_each_get_an_adapter() {
    runtime().block_on(bounded(async {
        let (w, r) = pagepipe::pipe().unwrap();
        let (w2, r2) = (w.clone(), r.clone());
        let writers = [AsyncWriter::new(w).unwrap(), AsyncWriter::new(w2).unwrap()];
        let readers = [AsyncReader::new(r).unwrap(), AsyncReader::new(r2).unwrap()];
        let mut tasks = Vec::new();
        for (i, mut w) in writers.into_iter().enumerate() {
            tasks.push(tokio::spawn(async move {
                for _ in 0..20_000 {
                    // PIPE_BUF atomic records of one byte value each.
                    w.write_all(&[i as u8 + 1; 100]).await.unwrap();
                }
                0usize
            }));
        }
        for mut r in readers {
            tasks.push(tokio::spawn(async move {
                let mut total = 0;
                let mut buf = [0u8; 1000];
                loop {
                    let n = r.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return total;
                    }
                    total += n;
                }
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        assert_eq!(total, 2 * 20_000 * 100);
    }));
}

#[test]
fn killed_writer_process_is_end_of_file() {
    let (w, r) = pagepipe::pipe().unwrap();
    let pid = children::holding(w); // the parent's copy is dropped
    runtime().block_on(bounded(async {
        let mut r = AsyncReader::new(r).unwrap();
        // The reader first sees a live writer, then the writer is killed (no close counted).
        let first = tokio::time::timeout(Duration::from_millis(50), r.read(&mut [0u8; 8])).await;
        assert!(first.is_err(), "read before the kill must wait");
        assert_eq!(children::kill_and_reap(pid, LIMIT), 128 + libc::SIGKILL);
        assert_eq!(r.read(&mut [0u8; 8]).await.unwrap(), 0);
    }));
}

#[test]
fn killed_reader_process_is_broken_pipe() {
    let (w, r) = pagepipe::Builder::new().capacity(4096).build().unwrap();
    let pid = children::holding(r);
    runtime().block_on(bounded(async {
        let mut w = AsyncWriter::new(w).unwrap();
        w.write_all(&[0u8; 4096]).await.unwrap();
        let full = tokio::time::timeout(Duration::from_millis(50), w.write_all(b"x")).await;
        assert!(full.is_err(), "a full pipe must wait");
        assert_eq!(children::kill_and_reap(pid, LIMIT), 128 + libc::SIGKILL);
        let err = w.write_all(b"y").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }));
}

/// A reader killed while the ring has room: the kernel pipe would fail the next write with
/// EPIPE; the adapter must not go on taking bytes until the ring is full.
#[test]
fn killed_reader_process_with_room_left_is_broken_pipe() {
    let (w, r) = pagepipe::Builder::new().capacity(16384).build().unwrap();
    let pid = children::holding(r);
    runtime().block_on(bounded(async {
        let mut w = AsyncWriter::new(w).unwrap();
        w.write_all(b"before").await.unwrap();
        assert_eq!(children::kill_and_reap(pid, LIMIT), 128 + libc::SIGKILL);
        // The reactor learns of the death asynchronously: a few writes may still land, but
        // far fewer than the 16 KiB of room.
        let mut accepted = 0;
        let err = loop {
            match w.write_all(b"y").await {
                Ok(()) => accepted += 1,
                Err(e) => break e,
            }
            assert!(
                accepted < 100,
                "{accepted} bytes taken after the reader died"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }));
}

/// Within one process the adapters wake each other directly and leave the descriptors alone;
/// a fork while a task waits must switch them to the descriptors before the child can make
/// the transition the task waits for: a reader waiting for data, a writer waiting for room.
#[test]
fn a_fork_while_tasks_wait_reaches_them_through_their_descriptors() {
    let (w, r) = pagepipe::pipe().unwrap();
    let (w2, r2) = pagepipe::Builder::new().capacity(4096).build().unwrap();
    runtime().block_on(bounded(async {
        let mut r = AsyncReader::new(r).unwrap();
        let reading = tokio::spawn(async move {
            let mut got = [0u8; 4];
            r.read_exact(&mut got).await.map(|_| got)
        });
        let mut w2 = AsyncWriter::new(w2).unwrap();
        w2.write_all(&[7u8; 4096]).await.unwrap();
        let writing = tokio::spawn(async move { w2.write_all(b"room").await });
        tokio::time::sleep(Duration::from_millis(50)).await; // both tasks now wait
        assert!(!reading.is_finished() && !writing.is_finished());
        // The parent keeps its own writer and reader: no close wakes the tasks.
        let w_child = w.clone();
        let r_child = r2.clone();
        let pid = children::fork(move || {
            let mut w = w_child;
            let mut r = r_child;
            let mut buf = [0u8; 4096];
            let ok =
                w.write_all(b"fork").is_ok() && std::io::Read::read_exact(&mut r, &mut buf).is_ok();
            i32::from(!ok)
        });
        assert_eq!(reading.await.unwrap().unwrap(), *b"fork");
        writing.await.unwrap().unwrap();
        assert_eq!(children::reap_within(pid, LIMIT), 0);
        drop((w, r2));
    }));
}

/// The same for an end sent over a socket to a process forked before the pipe existed: the
/// send switches the waiting task to its descriptor.
#[test]
fn an_end_sent_while_a_task_waits_reaches_it_through_its_descriptor() {
    let (here, there) = std::os::unix::net::UnixStream::pair().unwrap();
    let child_end = there.try_clone().unwrap();
    let pid = children::fork(move || match pagepipe::Writer::recv_from(&child_end) {
        Ok(mut w) => i32::from(w.write_all(b"sent").is_err()),
        Err(_) => 2,
    });
    drop(there);
    let (w, r) = pagepipe::pipe().unwrap(); // made after the fork: confined until the send
    runtime().block_on(bounded(async {
        let mut r = AsyncReader::new(r).unwrap();
        let reading = tokio::spawn(async move {
            let mut got = [0u8; 4];
            r.read_exact(&mut got).await.map(|_| got)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!reading.is_finished());
        w.send_to(&here).unwrap(); // the parent keeps `w`: no close wakes the task
        assert_eq!(reading.await.unwrap().unwrap(), *b"sent");
        assert_eq!(children::reap_within(pid, LIMIT), 0);
        drop(w);
    }));
}

#[path = "support/peer.rs"]
#[allow(dead_code)] // this file uses a part of it
mod peer;

/// CPU time the calling thread has used (user + system).
fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value; getrusage writes one into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A peer raises the published byte counter without publishing a slot: an async read waits
/// (for the data it will never see) instead of spinning on a count nothing backs.
#[test]
fn a_byte_count_a_peer_raised_does_not_spin_a_reader() {
    const HEAD_BYTES: usize = 136; // region.rs pins the header: head's line, second word
                                   // One thread runs the task and the reactor: its CPU time is the reader's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (w, r) = pagepipe::pipe().unwrap();
    let region = peer::Mapped::of(&w);
    region.poke(HEAD_BYTES, 1 << 40);
    let before = cpu_time();
    let waited = rt.block_on(async move {
        let mut r = AsyncReader::new(r).unwrap();
        let mut buf = [0u8; 16];
        tokio::time::timeout(Duration::from_millis(500), r.read(&mut buf))
            .await
            .is_err()
    });
    let used = cpu_time() - before;
    assert!(waited, "a read returned with nothing published");
    // A spinning reader burns the whole half second.
    assert!(
        used < Duration::from_millis(250),
        "the reader spun: {used:?} of CPU in 500 ms"
    );
    drop(w);
}

/// How much CPU the calling thread spends in `f` (a current-thread runtime runs its task and
/// reactor there) and what `f` returned.
fn with_cpu<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let before = cpu_time();
    let out = f();
    (out, cpu_time() - before)
}

/// How long the holders below keep a side.
const HOLD: Duration = Duration::from_millis(600);

/// Runs `hold` on another thread (it takes a side, says so on the channel, keeps it for
/// [`HOLD`]) and meanwhile `task` on a current-thread runtime here: what the task returned, and
/// the CPU time it took (its polls and its reactor run on this thread).
fn while_another_thread_holds<T>(
    hold: impl FnOnce(std::sync::mpsc::Sender<()>) + Send + 'static,
    task: impl std::future::Future<Output = T>,
) -> (T, Duration) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || hold(tx));
    rx.recv().unwrap();
    let out = with_cpu(|| rt.block_on(bounded(task)));
    holder.join().unwrap();
    out
}

/// A thread of this process keeps a read chunk for a while: the task waiting for the read side
/// sleeps (it used to yield in a loop at 100% of a core) and is woken when the chunk goes.
#[test]
fn a_read_side_held_by_another_thread_does_not_spin_a_reader() {
    let (w, r) = pagepipe::pipe().unwrap();
    (&w).write_all(b"queued").unwrap();
    let r2 = r.clone();
    let (got, used) = while_another_thread_holds(
        move |held| {
            let chunk = r2.read_chunk().unwrap();
            held.send(()).unwrap();
            std::thread::sleep(HOLD);
            drop(chunk); // consumes nothing
        },
        async move {
            let mut r = AsyncReader::new(r).unwrap();
            let mut buf = [0u8; 16];
            let n = r.read(&mut buf).await.unwrap();
            buf[..n].to_vec()
        },
    );
    assert_eq!(got, b"queued");
    assert!(
        used < HOLD / 2,
        "the reader spun: {used:?} of CPU while a chunk was held for {HOLD:?}"
    );
}

/// The same for the write side: a write chunk kept by another thread.
#[test]
fn a_write_side_held_by_another_thread_does_not_spin_a_writer() {
    let (w, r) = pagepipe::pipe().unwrap();
    let w2 = w.clone();
    let ((), used) = while_another_thread_holds(
        move |held| {
            let chunk = w2.write_chunk().unwrap();
            held.send(()).unwrap();
            std::thread::sleep(HOLD);
            drop(chunk); // publishes nothing
        },
        async move {
            let mut w = AsyncWriter::new(w).unwrap();
            w.write_all(b"after the chunk").await.unwrap();
        },
    );
    let mut got = [0u8; 15];
    std::io::Read::read_exact(&mut &r, &mut got).unwrap();
    assert_eq!(&got, b"after the chunk");
    assert!(
        used < HOLD / 2,
        "the writer spun: {used:?} of CPU while a chunk was held for {HOLD:?}"
    );
}

/// A thread that leaked its chunk and exited holds the side forever: nothing releases it, so
/// no release wakes the task; its own asks find the holder gone and take the side over.
#[test]
fn a_chunk_leaked_by_an_exited_thread_does_not_hang_a_reader() {
    let (w, r) = pagepipe::pipe().unwrap();
    (&w).write_all(b"queued").unwrap();
    let r2 = r.clone();
    std::thread::spawn(move || std::mem::forget(r2.read_chunk().unwrap()))
        .join()
        .unwrap();
    let got = runtime().block_on(bounded(async move {
        let mut r = AsyncReader::new(r).unwrap();
        let mut buf = [0u8; 16];
        let n = r.read(&mut buf).await.unwrap();
        buf[..n].to_vec()
    }));
    assert_eq!(got, b"queued");
}

/// A holder in another process: its release wakes nothing here, so the task asks again after
/// growing delays (see `timer.rs`): it sleeps meanwhile and reads soon after the release.
#[test]
fn a_read_side_held_in_another_process_does_not_spin_a_reader() {
    let _serial = children::serial();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (w, r) = pagepipe::pipe().unwrap();
    (&w).write_all(b"queued").unwrap();
    let (mut ready_r, mut ready_w) = std::io::pipe().unwrap();
    let child = children::fork({
        let r = r.clone();
        move || {
            let chunk = r.read_chunk().unwrap();
            ready_w.write_all(b"!").unwrap();
            std::thread::sleep(HOLD);
            drop(chunk);
            0
        }
    });
    let mut one = [0u8];
    std::io::Read::read_exact(&mut ready_r, &mut one).unwrap();
    let (got, used) = with_cpu(|| {
        rt.block_on(bounded(async move {
            let mut r = AsyncReader::new(r).unwrap();
            let mut buf = [0u8; 16];
            let n = r.read(&mut buf).await.unwrap();
            buf[..n].to_vec()
        }))
    });
    assert_eq!(children::reap_within(child, LIMIT), 0);
    assert_eq!(got, b"queued");
    assert!(
        used < HOLD / 2,
        "the reader spun: {used:?} of CPU while another process held the side for {HOLD:?}"
    );
    drop(w);
}

/// Was a deadlock: a fork while an adapted pipe had not taken this process's key yet. The
/// prepare handler makes every adapted end's descriptor exact, which takes the key, whose
/// reopening waited for the fork gate the handler itself held. In a child of the test, so a
/// hang is killed rather than hanging the suite.
#[test]
fn a_fork_before_an_adapted_pipe_took_its_key_does_not_deadlock() {
    let _serial = children::serial();
    let outer = children::fork(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (w, r) = pagepipe::pipe().unwrap();
            let (_w, _r) = (AsyncWriter::new(w).unwrap(), AsyncReader::new(r).unwrap());
            let inner = children::fork(|| 0); // the prepare handler hung here
            children::reap_within(inner, LIMIT)
        })
    });
    assert_eq!(
        children::reap_within(outer, Duration::from_secs(30)),
        0,
        "the fork deadlocked (or its child failed)"
    );
}
