//! The reference for `pagepipe-bench bw --transport rtrb`: rtrb's own `io::Write` / `io::Read`
//! in a plain loop, nothing of the harness around it. A writer thread copies 64 KiB buffers in,
//! the main thread copies them out, through a 1 MiB ring; both spin while the ring is full or
//! empty. Prints GB/s per 1 s round.
//!
//! `cargo run --release -p pagepipe-bench --example rtrb_plain -- [rounds] [ring bytes]
//! [reader offset] [writer offset]` (the buffers' offsets from a page boundary, default 0)
//! (docs/benchmarks.md says how it compares with the harness's arm).

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("rounds"));
    let ring: usize = args
        .next()
        .map_or(1 << 20, |a| a.parse().expect("ring bytes"));
    // Offsets of the reader's and the writer's buffers from a page boundary: how the copies'
    // alignment moves the numbers.
    let read_off: usize = args.next().map_or(0, |a| a.parse().expect("reader offset"));
    let write_off: usize = args.next().map_or(0, |a| a.parse().expect("writer offset"));
    for round in 0..rounds {
        let (mut tx, mut rx) = rtrb::RingBuffer::<u8>::new(ring);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let writer = std::thread::spawn(move || {
            let space = vec![0x5au8; (64 << 10) + 8192];
            let at = (4096 - space.as_ptr() as usize % 4096) % 4096 + write_off;
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
        let at = (4096 - space.as_ptr() as usize % 4096) % 4096 + read_off;
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
        println!("round {round}: {:.1} GB/s", bytes as f64 / secs / 1e9);
    }
}
