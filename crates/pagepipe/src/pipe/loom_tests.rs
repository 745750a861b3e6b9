//! loom models of the ring and the wait protocol: every interleaving (within loom's bounds) of a
//! writer and a reader, including the writer's merge racing the reader's release of the last
//! slot and a side going to sleep while the other side publishes or closes.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p pagepipe --lib loom`

use crate::{Builder, PoolPolicy};
use loom::thread;
use std::io::{Read, Write};

fn one_slot_pipe() -> (crate::Writer, crate::Reader) {
    Builder::new()
        .capacity(1)
        .pool(PoolPolicy::Adaptive { keep: 0 })
        .build()
        .unwrap()
}

/// Reads until end of file, returning everything read.
fn drain(mut r: crate::Reader) -> Vec<u8> {
    let mut out = Vec::new();
    r.read_to_end(&mut out).unwrap();
    out
}

#[test]
fn loom_blocking_transfer_loses_no_wakeup() {
    loom::model(|| {
        // Two full-slot writes through a one-slot ring: the writer must sleep until the reader
        // frees the slot, and the reader must sleep until each slot is published.
        let (mut w, r) = one_slot_pipe();
        let t = thread::spawn(move || {
            w.write_all(&[1u8; 4096]).unwrap();
            w.write_all(&[2u8; 4096]).unwrap();
        });
        let got = drain(r);
        t.join().unwrap();
        assert_eq!(got.len(), 8192);
        assert!(got[..4096].iter().all(|&b| b == 1) && got[4096..].iter().all(|&b| b == 2));
    });
}

#[test]
fn loom_merge_races_release_without_loss() {
    loom::model(|| {
        // Small writes merge into the last slot while the reader may be draining and releasing
        // it: every byte arrives once, in order.
        let (mut w, r) = one_slot_pipe();
        let t = thread::spawn(move || {
            w.write_all(b"ab").unwrap();
            w.write_all(b"cd").unwrap();
        });
        let got = drain(r);
        t.join().unwrap();
        assert_eq!(got, b"abcd");
    });
}

#[test]
fn loom_close_wakes_sleepers() {
    loom::model(|| {
        let (w, r) = one_slot_pipe();
        let (w2, r2) = one_slot_pipe();
        // A reader asleep on an empty pipe sees end of file when the last writer goes...
        let t = thread::spawn(move || drop(w));
        assert!(drain(r).is_empty());
        t.join().unwrap();
        // ...and a writer asleep on a full pipe sees BrokenPipe when the last reader goes.
        let mut w2 = w2;
        w2.write_all(&[0u8; 4096]).unwrap();
        let t = thread::spawn(move || drop(r2));
        let err = w2.write_all(&[0u8; 1]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
        t.join().unwrap();
    });
}

#[test]
fn loom_page_never_handed_out_twice() {
    loom::model(|| {
        // Two writers and a two-slot ring: each slot position holds one write at a time, so
        // the reader sees each 4 KiB record whole, never a mix of two writers' bytes.
        let (w, r) = Builder::new().capacity(8192).build().unwrap();
        let mut w2 = w.clone();
        let mut w1 = w;
        let a = thread::spawn(move || w1.write_all(&[1u8; 4096]).unwrap());
        let b = thread::spawn(move || w2.write_all(&[2u8; 4096]).unwrap());
        let got = drain(r);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(got.len(), 8192);
        for rec in got.chunks(4096) {
            assert!(rec.iter().all(|&x| x == rec[0]), "torn record");
        }
        assert_ne!(got[0], got[4096]);
    });
}

/// Two reader clones, each reading one byte (both may sleep), while `write` writes "xy": each
/// must get one of the bytes.
fn two_readers_get_one_byte_each(write: impl FnOnce(&mut crate::Writer)) {
    let (mut w, r) = one_slot_pipe();
    let readers = [r.clone(), r].map(|r| {
        thread::spawn(move || {
            let mut b = [0u8; 1];
            (&r).read_exact(&mut b).unwrap();
            b[0]
        })
    });
    write(&mut w);
    let mut got = readers.map(|t| t.join().unwrap());
    got.sort();
    assert_eq!(&got, b"xy");
}

#[test]
fn loom_two_sleeping_readers_both_wake() {
    // Two publications: the first clears the flag both registered in and wakes one, which must
    // put the flag back for the other.
    loom::model(|| {
        two_readers_get_one_byte_each(|w| {
            w.write_all(b"x").unwrap();
            w.write_all(b"y").unwrap();
        })
    });
}

#[test]
fn loom_a_wake_up_left_unused_is_passed_on() {
    // One publication of two bytes wakes one reader, which reads one byte and must hand the
    // wake-up to the other.
    loom::model(|| two_readers_get_one_byte_each(|w| w.write_all(b"xy").unwrap()));
}

#[test]
fn loom_two_sleeping_writers_both_get_room() {
    // Three threads: two preemptions bound the model to minutes (three took over six).
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        // A full one-slot ring and two writer clones waiting for room: each freed slot wakes
        // one of them, and neither is left asleep.
        let (mut w, mut r) = one_slot_pipe();
        w.write_all(&[0u8; 4096]).unwrap();
        let mut w2 = w.clone();
        let a = thread::spawn(move || w.write_all(b"a").unwrap());
        let b = thread::spawn(move || w2.write_all(b"b").unwrap());
        let mut got = vec![0u8; 4098];
        r.read_exact(&mut got).unwrap();
        a.join().unwrap();
        b.join().unwrap();
        let mut tail = [got[4096], got[4097]];
        tail.sort();
        assert_eq!(&tail, b"ab");
    });
}

/// A notification pipe of one record with a non-blocking reader.
fn one_record_pipe() -> (crate::Notifier, crate::NotificationReader) {
    let (n, r) = Builder::new().notifications(1).build().unwrap();
    r.set_nonblocking(true).unwrap();
    (n, r)
}

/// One record: its poster in `id`, its number in `subtype`.
fn record(id: u8, seq: u8) -> crate::Notification {
    crate::Notification {
        kind: 1,
        subtype: seq,
        id,
        info_flags: 0,
        payload: vec![id; 2],
    }
}

/// Reads what is queued (non-blocking, or until end of file) as (id, seq) pairs, `None` for a
/// LOSS record.
fn read_queued(r: &mut crate::NotificationReader, out: &mut Vec<Option<(u8, u8)>>) {
    loop {
        match r.read_notification() {
            Ok(n) if n.is_loss() => out.push(None),
            Ok(n) => {
                assert_eq!(n.payload, [n.id; 2], "torn record");
                out.push(Some((n.id, n.subtype)));
            }
            Err(e) => {
                use std::io::ErrorKind::{UnexpectedEof, WouldBlock};
                assert!(matches!(e.kind(), WouldBlock | UnexpectedEof), "{e}");
                return;
            }
        }
    }
}

#[test]
fn loom_posters_race_a_reader_on_a_one_record_ring() {
    loom::model(|| {
        // Two posters and a reader on a ring of one record: no record torn or duplicated, and
        // a post refused for lack of room is reported by one LOSS record after a real one.
        let (n, mut r) = one_record_pipe();
        let n2 = n.clone();
        let a = thread::spawn(move || n.post(&record(0, 0)).unwrap());
        let b = thread::spawn(move || n2.post(&record(1, 0)).unwrap());
        let mut got = Vec::new();
        read_queued(&mut r, &mut got);
        let posted = [a.join().unwrap(), b.join().unwrap()];
        read_queued(&mut r, &mut got);
        let records: Vec<_> = got.iter().flatten().collect();
        for (id, ok) in posted.iter().enumerate() {
            let seen = records.iter().filter(|x| x.0 == id as u8).count();
            assert_eq!(seen, usize::from(*ok), "poster {id}: {got:?}");
        }
        let losses = got.iter().filter(|x| x.is_none()).count();
        assert_eq!(losses, usize::from(posted.contains(&false)), "{got:?}");
        assert_ne!(got.first(), Some(&None), "LOSS before any record: {got:?}");
    });
}

#[test]
fn loom_loss_flag_races_the_release_of_the_last_record() {
    loom::model(|| {
        // One poster fills a one-record ring and posts again while the reader releases the
        // record: either the second post finds room, or it flags the first record and the
        // reader, releasing it, hands out the LOSS record; never both, never neither.
        let (n, mut r) = one_record_pipe();
        assert!(n.post(&record(0, 0)).unwrap());
        let p = thread::spawn(move || n.post(&record(0, 1)).unwrap());
        let mut got = Vec::new();
        read_queued(&mut r, &mut got);
        let second = p.join().unwrap();
        read_queued(&mut r, &mut got);
        let expect = if second {
            vec![Some((0, 0)), Some((0, 1))]
        } else {
            vec![Some((0, 0)), None]
        };
        assert_eq!(got, expect);
    });
}

/// A waker that records that it was woken (a loom atomic, so the model sees the store).
struct Flag(loom::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        // SeqCst: pairs with the test's load after joining the writer (which orders it anyway).
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn loom_async_waiter_is_woken_or_sees_the_data() {
    loom::model(|| {
        // The adapters' in-process wait: a task that found the ring empty registers its waker,
        // rechecks, and parks only if still empty; the writer publishes, then wakes. A task
        // that parks must be woken.
        let (mut w, r) = one_slot_pipe();
        let flag = std::sync::Arc::new(Flag(loom::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(flag.clone());
        let t = thread::spawn(move || {
            w.write_all(b"x").unwrap();
            w
        });
        let parked = r.is_empty() && {
            r.end.waiters().register(&waker);
            r.is_empty()
        };
        let w = t.join().unwrap();
        if parked {
            assert!(
                flag.0.load(std::sync::atomic::Ordering::SeqCst),
                "a parked task was not woken"
            );
        }
        drop((w, r));
    });
}

#[test]
fn loom_task_waiting_for_a_held_side_is_woken_or_gets_it() {
    loom::model(|| {
        // The adapters' wait for a side another holder of this process has: a task whose read
        // found data queued but the side held registers with the release wakers, tries again,
        // and parks only if the side is still held; a holder's release wakes it. A task that
        // parks must be woken.
        let (mut w, r) = one_slot_pipe();
        w.write_all(b"x").unwrap();
        r.set_nonblocking(true).unwrap();
        let r2 = r.clone();
        let flag = std::sync::Arc::new(Flag(loom::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(flag.clone());
        let t = thread::spawn(move || {
            if let Ok(chunk) = r2.read_chunk() {
                drop(chunk); // consumes nothing: the byte stays queued
            }
            r2
        });
        let mut b = [0u8; 1];
        let held = |r: &crate::Reader, b: &mut [u8]| matches!(r.try_read(b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        let parked = held(&r, &mut b) && {
            r.end.release_waiters().register(&waker);
            held(&r, &mut b)
        };
        let r2 = t.join().unwrap();
        if parked {
            assert!(
                flag.0.load(std::sync::atomic::Ordering::SeqCst),
                "a parked task was not woken"
            );
        }
        drop((w, r, r2));
    });
}
