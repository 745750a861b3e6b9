//! A hostile peer against a live pipe: the input is a program of pipe operations interleaved
//! with writes of arbitrary values at arbitrary offsets of the pipe's shared region (through a
//! second mapping of its memory file, as another process would have). Every operation must
//! return; a panic, a fault, an AddressSanitizer report or a hang is a bug.
#![no_main]

#[path = "../../crates/pagepipe/tests/support/peer.rs"]
#[allow(dead_code)]
mod peer;

use libfuzzer_sys::fuzz_target;
use pagepipe::{Builder, PoolPolicy};
use peer::{header_word, Mapped};
use std::io::{ErrorKind, Read, Write};

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
    let map = Mapped::of(&w);
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
                // Poke: an aligned u64 in the header, the slot table or the first arena pages
                // (see header_word for the shared mode words left alone).
                let word = arg(&mut it) % ((4096 + 64 * 1024 + 4096) / 8);
                let off = if word < 512 {
                    header_word(word)
                } else {
                    word * 8
                };
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
});
