//! Blocking mode, end of file and BrokenPipe for sleeping sides, resizing, clones, bad input.

use pagepipe::{pipe, Builder};
use std::io::{ErrorKind, Read, Write};
use std::thread;
use std::time::Duration;

/// Long enough that a thread that should block has had every chance to run and finish.
const SETTLE: Duration = Duration::from_millis(50);

#[test]
fn reader_blocks_until_data_arrives() {
    let (mut w, mut r) = pipe().unwrap();
    let t = thread::spawn(move || {
        let mut buf = [0u8; 16];
        let n = r.read(&mut buf).unwrap();
        buf[..n].to_vec()
    });
    thread::sleep(SETTLE);
    assert!(!t.is_finished(), "read of an empty pipe returned");
    w.write_all(b"wake").unwrap();
    assert_eq!(t.join().unwrap(), b"wake");
}

#[test]
fn writer_blocks_on_full_pipe_until_read() {
    let (mut w, mut r) = pipe().unwrap();
    w.write_all(&[7u8; 65536]).unwrap();
    let t = thread::spawn(move || w.write(&[8u8; 1]).unwrap());
    thread::sleep(SETTLE);
    assert!(!t.is_finished(), "write to a full pipe returned");
    let mut buf = vec![0u8; 4096];
    assert_eq!(r.read(&mut buf).unwrap(), 4096);
    assert_eq!(t.join().unwrap(), 1);
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap(); // the writer was dropped with its thread: end of file
    assert_eq!(rest.len(), 61441);
    assert_eq!(*rest.last().unwrap(), 8);
}

#[test]
fn last_writer_drop_wakes_sleeping_reader_with_eof() {
    let (w, mut r) = pipe().unwrap();
    let w2 = w.clone();
    let t = thread::spawn(move || r.read(&mut [0u8; 8]).unwrap());
    thread::sleep(SETTLE);
    drop(w);
    thread::sleep(SETTLE);
    assert!(
        !t.is_finished(),
        "end of file while a writer clone is alive"
    );
    drop(w2);
    assert_eq!(t.join().unwrap(), 0);
}

#[test]
fn data_before_last_writer_drop_is_read_before_eof() {
    let (mut w, mut r) = pipe().unwrap();
    w.write_all(b"last words").unwrap();
    drop(w);
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "last words");
    assert_eq!(r.read(&mut [0u8; 4]).unwrap(), 0);
}

#[test]
fn last_reader_drop_wakes_sleeping_writer_with_broken_pipe() {
    let (mut w, r) = pipe().unwrap();
    w.write_all(&[0u8; 65536]).unwrap();
    let t = thread::spawn(move || w.write(&[1u8; 100]));
    thread::sleep(SETTLE);
    drop(r);
    assert_eq!(t.join().unwrap().unwrap_err().kind(), ErrorKind::BrokenPipe);
}

#[test]
fn blocking_large_write_returns_partial_count_when_reader_leaves() {
    let (mut w, mut r) = pipe().unwrap();
    let t = thread::spawn(move || w.write(&vec![3u8; 1 << 20]));
    let mut buf = vec![0u8; 65536];
    let mut got = 0;
    while got < 100_000 {
        got += r.read(&mut buf).unwrap();
    }
    drop(r);
    let n = t.join().unwrap().unwrap();
    assert!(n >= got && n < 1 << 20, "wrote {n} after {got} were read");
}

#[test]
fn blocking_stream_of_a_mebibyte_arrives_intact() {
    let (mut w, mut r) = pipe().unwrap();
    let data: Vec<u8> = (0..(1u32 << 20) + 12345)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let expect = data.clone();
    let t = thread::spawn(move || assert_eq!(w.write(&data).unwrap(), data.len()));
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    t.join().unwrap();
    assert!(got == expect);
}

#[test]
fn growing_the_pipe_unblocks_a_writer() {
    let (mut w, r) = pipe().unwrap();
    w.write_all(&[0u8; 65536]).unwrap();
    let w2 = w.clone();
    let t = thread::spawn(move || w.write(&[1u8; 4096]).unwrap());
    thread::sleep(SETTLE);
    assert!(!t.is_finished());
    assert_eq!(w2.set_capacity(131072).unwrap(), 131072);
    assert_eq!(t.join().unwrap(), 4096);
    drop(r);
}

#[test]
fn nonblocking_mode_is_shared_by_clones_and_reversible() {
    let (w, r) = pipe().unwrap();
    let (mut w2, mut r2) = (w.clone(), r.clone());
    r.set_nonblocking(true).unwrap();
    assert!(r2.is_nonblocking());
    assert_eq!(
        r2.read(&mut [0u8; 1]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    w.set_nonblocking(true).unwrap();
    w2.write_all(&[0u8; 65536]).unwrap();
    assert_eq!(
        w2.write(&[0u8; 1]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    w.set_nonblocking(false).unwrap();
    assert!(!w2.is_nonblocking());
}

#[test]
fn shrinking_below_queued_slots_is_busy() {
    let (mut w, _r) = pipe().unwrap();
    w.write_all(&[0u8; 3 * 4096]).unwrap();
    assert_eq!(
        w.set_capacity(8192).unwrap_err().kind(),
        ErrorKind::ResourceBusy
    );
    assert_eq!(w.set_capacity(16384).unwrap(), 16384);
    assert_eq!(w.capacity(), 16384);
}

/// A pipe grows up to its maximum, full or not (the region reserved room to stage a full ring
/// of the largest size), and no further: `PermissionDenied`, as Linux above `pipe-max-size`.
#[test]
fn a_full_pipe_grows_to_its_maximum_and_no_further() {
    let (mut w, mut r) = Builder::new()
        .capacity(32 << 10)
        .max_capacity(64 << 10)
        .build()
        .unwrap();
    let data: Vec<u8> = (0..32 << 10).map(|i| (i * 7 % 251) as u8).collect();
    w.write_all(&data).unwrap();
    assert_eq!(w.set_capacity(64 << 10).unwrap(), 64 << 10);
    let e = w.set_capacity(128 << 10).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("max_capacity"), "{e}");
    w.write_all(&data).unwrap(); // full again, at the maximum
    assert_eq!(r.set_capacity(64 << 10).unwrap(), 64 << 10);
    let mut back = vec![0u8; 64 << 10];
    r.read_exact(&mut back).unwrap();
    assert!(back[..32 << 10] == data[..] && back[32 << 10..] == data[..]);
    // A capacity above the default maximum raises the maximum with it.
    let (w, _r) = Builder::new().capacity(32 << 20).build().unwrap();
    assert_eq!(w.capacity(), 32 << 20);
}

#[test]
fn bad_input_is_a_clear_invalid_input_error() {
    for b in [
        Builder::new().capacity(0),
        Builder::new().capacity(pagepipe::MAX_CAPACITY + 1),
        Builder::new().max_capacity(0),
        Builder::new().max_capacity(pagepipe::MAX_CAPACITY + 1),
        Builder::new().slot_size(6000),
        Builder::new().slot_size(2048),
        Builder::new().slot_size(0),
    ] {
        let err = b.build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(
            err.to_string().chars().any(|c| c.is_ascii_digit()),
            "message names the value: {err}"
        );
    }
    let (w, _r) = pipe().unwrap();
    assert_eq!(
        w.set_capacity(0).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        w.set_capacity(usize::MAX).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn fat_slots_hold_packets_of_a_whole_slot() {
    let (mut w, mut r) = Builder::new()
        .slot_size(16384)
        .capacity(65536)
        .packet_mode(true)
        .build()
        .unwrap();
    assert_eq!(w.capacity(), 65536);
    assert_eq!(w.write(&[1u8; 20000]).unwrap(), 20000);
    let mut buf = vec![0u8; 65536];
    assert_eq!(r.read(&mut buf).unwrap(), 16384);
    assert_eq!(r.read(&mut buf).unwrap(), 20000 - 16384);
}

#[test]
fn fat_slots_merge_in_slot_units() {
    let (mut w, mut r) = Builder::new()
        .slot_size(16384)
        .capacity(32768)
        .build()
        .unwrap();
    w.set_nonblocking(true).unwrap();
    assert_eq!(w.write(&[1u8; 10000]).unwrap(), 10000);
    assert_eq!(w.write(&[2u8; 6000]).unwrap(), 6000); // merged into the first slot
    assert_eq!(w.write(&[3u8; 16384]).unwrap(), 16384); // fills the second
    assert_eq!(
        w.write(&[4u8; 1]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    let mut all = Vec::new();
    drop(w);
    r.read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), 32384);
}

#[test]
fn write_chunk_fills_in_place_across_the_wrap() {
    let (mut w, mut r) = Builder::new().capacity(16384).build().unwrap();
    w.write_all(&[0u8; 12288]).unwrap();
    r.read_exact(&mut [0u8; 12288]).unwrap();
    // head is now at position 3 of 4: the free space wraps.
    let mut chunk = w.write_chunk().unwrap();
    assert_eq!(chunk.len(), 16384);
    let (a, b) = chunk.as_mut_slices();
    assert_eq!((a.len(), b.len()), (4096, 12288));
    a.fill(b'a');
    b[..100].fill(b'b');
    assert_eq!(chunk.commit(4196), 4196);
    let mut got = vec![0u8; 8192];
    r.read_exact(&mut got[..4196]).unwrap();
    assert!(got[..4096].iter().all(|&x| x == b'a') && got[4096..4196].iter().all(|&x| x == b'b'));
    w.set_nonblocking(true).unwrap();
    w.write_all(&[0u8; 16384]).unwrap();
    assert_eq!(
        w.write_chunk().err().map(|e| e.kind()),
        Some(ErrorKind::WouldBlock)
    );
    drop(r);
    assert_eq!(
        w.write_chunk().err().map(|e| e.kind()),
        Some(ErrorKind::BrokenPipe)
    );
}

#[test]
fn read_chunk_borrows_and_consumes_in_place() {
    let (mut w, r) = pipe().unwrap();
    w.write_all(&[5u8; 5000]).unwrap();
    w.write_all(b"tail").unwrap(); // merged into the second slot
    let chunk = r.read_chunk().unwrap();
    let sizes: Vec<usize> = chunk.slices().map(<[u8]>::len).collect();
    assert_eq!(sizes, vec![4096, 908]);
    assert_eq!(chunk.len(), 5004);
    chunk.consume(4100);
    let chunk = r.read_chunk().unwrap();
    let rest: Vec<u8> = chunk.slices().flatten().copied().collect();
    assert_eq!(rest.len(), 904);
    assert_eq!(&rest[900..], b"tail");
    chunk.consume(904);
    drop(w);
    assert!(
        r.read_chunk().unwrap().is_empty(),
        "end of file is an empty chunk"
    );
}

#[test]
fn resizing_while_streaming_keeps_every_byte_in_order() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Arc;
    let policy = pagepipe::PoolPolicy::Unified { keep: 2, burst: 8 };
    let (mut w, mut r) = Builder::new().pool(policy).build().unwrap();
    let resizer = w.clone();
    let total: u32 = 4 << 20;
    let writer = thread::spawn(move || {
        let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        for chunk in data.chunks(10_000) {
            w.write_all(chunk).unwrap();
        }
    });
    let reader = thread::spawn(move || {
        let mut got = Vec::with_capacity(total as usize);
        r.read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("read failed: {e}"));
        got
    });
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let resizes = thread::spawn(move || {
        let resizer = resizer; // a writer clone: end of file comes only once this thread ends
        let mut ok = 0;
        for i in 0.. {
            if stop2.load(Relaxed) {
                break;
            }
            // Shrinks below the queued slots fail with EBUSY; everything else must succeed.
            match resizer.set_capacity([4096, 65536, 16384, 1 << 20][i % 4]) {
                Ok(_) => ok += 1,
                Err(e) => assert_eq!(e.kind(), ErrorKind::ResourceBusy),
            }
            thread::yield_now();
        }
        ok
    });
    writer.join().unwrap();
    stop.store(true, Relaxed);
    assert!(resizes.join().unwrap() > 0, "no resize succeeded");
    let got = reader.join().unwrap();
    assert_eq!(got.len(), total as usize);
    assert!(
        got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "bytes lost or reordered"
    );
}

#[test]
fn timeouts_expire_as_timed_out() {
    let (w, r) = pipe().unwrap();
    assert_eq!(
        r.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    r.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
    assert_eq!(r.read_timeout().unwrap(), Some(Duration::from_millis(30)));
    let t = std::time::Instant::now();
    assert_eq!(
        (&r).read(&mut [0u8; 4]).unwrap_err().kind(),
        ErrorKind::TimedOut
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    // A write that fills the pipe and then times out returns the partial count.
    w.set_write_timeout(Some(Duration::from_millis(30)))
        .unwrap();
    assert_eq!((&w).write(&[1u8; 70000]).unwrap(), 65536);
    assert_eq!(
        (&w).write(&[1u8; 10]).unwrap_err().kind(),
        ErrorKind::TimedOut
    );
    w.set_write_timeout(None).unwrap();
    assert_eq!(w.write_timeout().unwrap(), None);
}

#[test]
fn non_blocking_ends_do_not_wait_for_a_held_side() {
    let (w, r) = pipe().unwrap();
    w.set_nonblocking(true).unwrap();
    r.set_nonblocking(true).unwrap();
    let chunk = w.write_chunk().unwrap();
    let w2 = w.clone();
    let err = thread::spawn(move || (&w2).write(b"x").unwrap_err().kind())
        .join()
        .unwrap();
    assert_eq!(err, ErrorKind::WouldBlock);
    // The same thread writing while holding its chunk is a deadlock, reported.
    w.set_nonblocking(false).unwrap();
    assert_eq!((&w).write(b"x").unwrap_err().kind(), ErrorKind::Deadlock);
    drop(chunk);
    (&w).write_all(b"abc").unwrap();
    let chunk = r.read_chunk().unwrap();
    let r2 = r.clone();
    let err = thread::spawn(move || (&r2).read(&mut [0u8; 4]).unwrap_err().kind())
        .join()
        .unwrap();
    assert_eq!(err, ErrorKind::WouldBlock);
    drop(chunk);
}

#[test]
fn len_and_free_need_no_lock() {
    let (w, r) = pipe().unwrap();
    assert_eq!((r.len(), w.free()), (0, 65536));
    (&w).write_all(&[0u8; 5000]).unwrap();
    assert_eq!((r.len(), w.free()), (5000, 65536 - 2 * 4096));
    let chunk = r.read_chunk().unwrap(); // holds the read side: len still answers
    assert_eq!(r.len(), 5000);
    chunk.consume(100);
    assert_eq!(r.len(), 4900);
    assert!(!r.is_empty());
}

#[test]
fn write_vectored_is_one_atomic_write() {
    use std::io::IoSlice;
    let (w, r) = pipe().unwrap();
    assert!(w.is_write_vectored());
    let writers: Vec<_> = (0..4u8)
        .map(|id| {
            let w = w.clone();
            thread::spawn(move || {
                for _ in 0..500 {
                    let head = [id; 1000];
                    let body = [id; 2000];
                    let tail = [id; 1096]; // 4096 bytes in all: PIPE_BUF
                    let bufs = [
                        IoSlice::new(&head),
                        IoSlice::new(&body),
                        IoSlice::new(&tail),
                    ];
                    assert_eq!((&w).write_vectored(&bufs).unwrap(), 4096);
                }
            })
        })
        .collect();
    drop(w);
    let reader = thread::spawn(move || {
        let mut all = Vec::new();
        (&r).read_to_end(&mut all).unwrap();
        all
    });
    for t in writers {
        t.join().unwrap();
    }
    let all = reader.join().unwrap();
    assert_eq!(all.len(), 4 * 500 * 4096);
    for rec in all.chunks(4096) {
        assert!(
            rec.iter().all(|&b| b == rec[0]),
            "interleaved vectored write"
        );
    }
    // Over PIPE_BUF, the buffers still form one write with Linux's merge rule.
    let (w, r) = pipe().unwrap();
    (&w).write_all(b"ab").unwrap();
    let bufs = [IoSlice::new(b"cd"), IoSlice::new(&[7u8; 4096])];
    assert_eq!((&w).write_vectored(&bufs).unwrap(), 4098);
    let mut buf = vec![0u8; 8];
    assert_eq!((&r).read(&mut buf).unwrap(), 8);
    assert_eq!(&buf, b"abcd\x07\x07\x07\x07"); // "ab" + the merged remainder "cd", then the page
}

#[test]
fn a_call_deadline_bounds_one_wait_and_the_ends_timeout_still_holds() {
    use std::time::Instant;
    let (w, r) = pipe().unwrap();
    let mut buf = [0u8; 8];
    // Data that comes before the deadline is read.
    let t = thread::spawn(move || {
        thread::sleep(SETTLE);
        (&w).write_all(b"soon").unwrap();
        w
    });
    let far = Instant::now() + Duration::from_secs(10);
    assert_eq!(r.read_deadline(&mut buf, far).unwrap(), 4);
    let w = t.join().unwrap();
    // The end's own timeout comes first: it bounds the call, and the deadline is not shared.
    r.set_read_timeout(Some(SETTLE)).unwrap();
    let start = Instant::now();
    let err = r.read_deadline(&mut buf, far).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    assert!(start.elapsed() < Duration::from_secs(5));
    r.set_read_timeout(None).unwrap();
    // A full pipe: the writer's deadline ends its wait; a passed deadline still places what
    // fits.
    let cap = w.capacity();
    let past = Instant::now();
    assert_eq!(w.write_deadline(&vec![1u8; cap + 10], past).unwrap(), cap);
    let err = w.write_deadline(b"x", Instant::now() + SETTLE).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    // Non-blocking mode wins over a deadline: no wait at all.
    w.set_nonblocking(true).unwrap();
    let err = w.write_deadline(b"x", far).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    drop(w);
    let mut all = Vec::new();
    (&r).read_to_end(&mut all).unwrap();
    assert_eq!(all.len(), cap);
}

/// A write's whole pages go into runs of consecutive slots with one copy each (`fill`): runs
/// that start mid-ring, stop at its end and go on from position 0, from buffers that split
/// pages anywhere, keep every byte in order.
#[test]
fn vectored_writes_across_runs_and_the_wrap_keep_every_byte() {
    use std::io::IoSlice;
    let (w, r) = Builder::new().capacity(256 << 10).build().unwrap();
    let reader = thread::spawn(move || {
        let mut all = Vec::new();
        (&r).read_to_end(&mut all).unwrap();
        all
    });
    let mut expect = Vec::new();
    let mut next = 0u32;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                next = next.wrapping_add(1);
                (next.wrapping_mul(2_654_435_761) >> 24) as u8
            })
            .collect()
    };
    for round in 0..200usize {
        // Sizes around page multiples, so runs end at every offset of the ring.
        let sizes = [1 + round % 7, 4095, 8193 + round, 70_000 - round * 13, 3];
        let bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| bytes(n)).collect();
        let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        let total: usize = sizes.iter().sum();
        let mut done = 0;
        while done < total {
            // write_vectored may take part: send the rest as one buffer.
            done += if done == 0 {
                (&w).write_vectored(&slices).unwrap()
            } else {
                let rest: Vec<u8> = bufs.concat()[done..].to_vec();
                (&w).write(&rest).unwrap()
            };
        }
        bufs.iter().for_each(|b| expect.extend_from_slice(b));
    }
    drop(w);
    let all = reader.join().unwrap();
    assert_eq!(all.len(), expect.len());
    assert!(all == expect, "bytes differ");
}
