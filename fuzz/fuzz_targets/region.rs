//! A hostile peer against a live pipe: the input is a program of pipe operations interleaved
//! with writes of arbitrary values at arbitrary offsets of the pipe's shared region (through a
//! second mapping of its memory file, as another process would have), plus a list of writes a
//! second thread repeats *concurrently* with the operations for as long as they run. Every
//! operation must return; a panic, a fault, an AddressSanitizer report or a hang is a bug.
#![no_main]

#[path = "../../crates/pagepipe/tests/support/peer.rs"]
#[allow(dead_code)]
mod peer;

use libfuzzer_sys::fuzz_target;
use pagepipe::{Builder, PoolPolicy};
use peer::{header_word, Mapped};
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The region's words a poke may hit: the header's page (the header and the first 32 slots),
/// the first 64 KiB of the arena (a default pipe's whole ring) and the page after.
const WORDS: usize = (4096 + 64 * 1024 + 4096) / 8;

/// The offset of poke target `word` (see header_word for the shared mode words left alone).
fn offset(word: usize) -> usize {
    let word = word % WORDS;
    if word < 512 {
        header_word(word)
    } else {
        word * 8
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
    // The concurrent peer's writes: up to 15 of (word: u16, value: u64), from the input's end.
    let concurrent = usize::from(it.next().unwrap_or(0) % 16);
    let tail = input.len().saturating_sub(concurrent * 10).max(input.len().min(2));
    let pokes: Vec<(usize, u64)> = input[tail..]
        .chunks_exact(10)
        .map(|c| {
            let word = u16::from_le_bytes([c[0], c[1]]) as usize;
            (offset(word), u64::from_le_bytes(c[2..10].try_into().unwrap()))
        })
        .collect();
    let mut it = input[tail.min(2)..tail].iter().copied();
    let (w, r) = Builder::new().capacity(65536).pool(policy).build().unwrap();
    w.set_nonblocking(true).unwrap();
    r.set_nonblocking(true).unwrap();
    let map = Arc::new(Mapped::of(&w));
    let stop = Arc::new(AtomicBool::new(false));
    let peer = (!pokes.is_empty()).then(|| {
        let (map, stop) = (map.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for &(off, v) in &pokes {
                    if off + 8 <= map.len() {
                        map.poke(off, v);
                    }
                    std::thread::yield_now();
                }
            }
        })
    });
    let data = [0x5au8; 20_000];
    let mut buf = [0u8; 20_000];
    let arg = |it: &mut std::iter::Copied<std::slice::Iter<'_, u8>>| {
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
                let off = offset(arg(&mut it));
                let mut v = [0u8; 8];
                for b in &mut v {
                    *b = it.next().unwrap_or(0);
                }
                if off + 8 <= map.len() {
                    map.poke(off, u64::from_le_bytes(v));
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(peer) = peer {
        peer.join().unwrap();
    }
});
