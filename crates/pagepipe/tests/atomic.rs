//! Writes of at most PIPE_BUF bytes are atomic with many concurrent writers: records carrying
//! their length and a checksum arrive whole, never torn or interleaved.

use pagepipe::{Builder, PIPE_BUF};
use std::io::{Read, Write};

const WRITERS: u8 = 4;
const RECORDS: u32 = 3000;

fn checksum(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// A record: len (u16) | writer (u8) | seq (u32) | payload | checksum of all before (u32).
fn record(writer: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(len);
    r.extend_from_slice(&(len as u16).to_le_bytes());
    r.push(writer);
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend((0..len - 11).map(|i| (i as u32 ^ seq) as u8 ^ writer));
    let c = checksum(&r);
    r.extend_from_slice(&c.to_le_bytes());
    r
}

fn run(capacity: usize, packet: bool) {
    let (w, mut r) = Builder::new()
        .capacity(capacity)
        .packet_mode(packet)
        .build()
        .unwrap();
    let threads: Vec<_> = (0..WRITERS)
        .map(|id| {
            let mut w = w.clone();
            std::thread::spawn(move || {
                let mut x = id as u64 * 7919 + 1;
                for seq in 0..RECORDS {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let len = 11 + (x >> 33) as usize % (PIPE_BUF - 10);
                    let rec = record(id, seq, len);
                    // One write call per record: atomic, so never partial.
                    assert_eq!(w.write(&rec).unwrap(), rec.len());
                }
            })
        })
        .collect();
    drop(w);
    let mut stream = Vec::new();
    if packet {
        // A packet read returns exactly one packet (a shorter buffer would discard its rest).
        let mut buf = [0u8; PIPE_BUF];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            assert_eq!(
                n,
                u16::from_le_bytes([buf[0], buf[1]]) as usize,
                "a read is not one packet"
            );
            stream.extend_from_slice(&buf[..n]);
        }
    } else {
        r.read_to_end(&mut stream).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    let mut next = [0u32; WRITERS as usize];
    let mut off = 0;
    while off < stream.len() {
        let len = u16::from_le_bytes([stream[off], stream[off + 1]]) as usize;
        assert!(
            (11..=PIPE_BUF).contains(&len),
            "torn record header at {off}: len {len}"
        );
        let rec = &stream[off..off + len];
        let (body, sum) = rec.split_at(len - 4);
        assert_eq!(
            checksum(body),
            u32::from_le_bytes(sum.try_into().unwrap()),
            "torn record at {off}"
        );
        let (id, seq) = (
            rec[2] as usize,
            u32::from_le_bytes(rec[3..7].try_into().unwrap()),
        );
        assert_eq!(seq, next[id], "writer {id}'s records out of order");
        next[id] += 1;
        off += len;
    }
    assert_eq!(next, [RECORDS; WRITERS as usize]);
}

#[test]
fn small_writes_are_atomic_with_many_writers() {
    run(8192, false);
}

#[test]
fn small_writes_are_atomic_in_a_roomy_pipe() {
    run(1 << 20, false);
}

#[test]
fn packets_are_atomic_with_many_writers() {
    run(16384, true);
}
