//! The reference for `pagepipe-bench bw --transport rtrb`: rtrb's own `io::Write` / `io::Read`
//! in a plain loop, nothing of the harness around it. A writer thread copies 64 KiB buffers in,
//! the main thread copies them out, through a 1 MiB ring; both spin while the ring is full or
//! empty. Prints GB/s per 1 s round, and where the ring and the buffers were within a 4 KiB
//! page.
//!
//! `cargo run --release -p pagepipe-bench --example rtrb_plain -- [rounds] [ring bytes]
//! [reader offset] [writer offset]` (docs/benchmarks.md says how it compares with the
//! harness's arm). The offsets are the buffers' bytes past the ring's own offset within a 4 KiB
//! page (default 0), as the harness's `--read-offset` / `--write-offset`: the heap puts the
//! ring anywhere (a fresh `mmap` 16 bytes past a page boundary, then wherever a freed ring
//! was), and a buffer 1-255 bytes ahead of the copy's source modulo 4 KiB stalls it.

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("rounds"));
    let ring: usize = args
        .next()
        .map_or(1 << 20, |a| a.parse().expect("ring bytes"));
    // Offsets of the reader's and the writer's buffers from the ring's place in its page: how
    // the copies' relative alignment moves the numbers.
    let read_off: usize = args.next().map_or(0, |a| a.parse().expect("reader offset"));
    let write_off: usize = args.next().map_or(0, |a| a.parse().expect("writer offset"));
    for round in 0..rounds {
        let (mut tx, mut rx) = rtrb::RingBuffer::<u8>::new(ring);
        // The empty ring's first free slot is its first byte (dropped uncommitted: no write).
        let ring_at = tx
            .write_chunk_uninit(1)
            .expect("a ring of 1 byte or more")
            .as_mut_slices()
            .0
            .as_ptr() as usize
            % 4096;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let writer = std::thread::spawn(move || {
            let space = vec![0x5au8; (64 << 10) + 8192];
            let at = (4096 - space.as_ptr() as usize % 4096) % 4096 + (ring_at + write_off) % 4096;
            let buf = &space[at..at + (64 << 10)];
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                let mut off = 0;
                while off < buf.len() {
                    match tx.write(&buf[off..]) {
                        Ok(n) => off += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
        let mut space = vec![0u8; (64 << 10) + 8192];
        let at = (4096 - space.as_ptr() as usize % 4096) % 4096 + (ring_at + read_off) % 4096;
        let buf = &mut space[at..at + (64 << 10)];
        let (start, mut bytes) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(1) {
            match rx.read(buf) {
                Ok(n) => bytes += n as u64,
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("{e}"),
            }
        }
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Drain so the writer can finish its last buffer.
        while !writer.is_finished() {
            let _ = rx.read(buf);
        }
        writer.join().unwrap();
        println!(
            "round {round}: {:.1} GB/s (ring {ring_at}, reader {}, writer {})",
            bytes as f64 / secs / 1e9,
            buf.as_ptr() as usize % 4096,
            (ring_at + write_off) % 4096
        );
    }
}
