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

#[test]
fn loom_two_sleeping_readers_both_wake() {
    loom::model(|| {
        // Two reader clones may both register as sleepers; one publication clears the flag for
        // both, so waking must wake all of them: each still gets its byte.
        let (mut w, r) = one_slot_pipe();
        let r2 = r.clone();
        let a = thread::spawn(move || {
            let mut b = [0u8; 1];
            (&r).read_exact(&mut b).unwrap();
            b[0]
        });
        let b = thread::spawn(move || {
            let mut b = [0u8; 1];
            (&r2).read_exact(&mut b).unwrap();
            b[0]
        });
        w.write_all(b"x").unwrap();
        w.write_all(b"y").unwrap();
        let mut got = [a.join().unwrap(), b.join().unwrap()];
        got.sort();
        assert_eq!(&got, b"xy");
    });
}
