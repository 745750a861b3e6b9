//! pagepipe in the same plain loop as `rtrb_plain`: a writer thread copies 64 KiB buffers in
//! through `write_all`, the main thread copies them out with `read`, through a 1 MiB pipe.
//! Prints GB/s per 1 s round. The buffers' offsets from a page boundary are arguments: the
//! copies between them and the ring's page-aligned slots slow down several times when the two
//! sit at nearly the same offset within a page (4 KiB aliasing; docs/results.md).
//!
//! `cargo run --release -p pagepipe-bench --example pagepipe_plain -- [rounds] [capacity]
//! [reader offset] [writer offset]`

use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("rounds"));
    let capacity: usize = args
        .next()
        .map_or(1 << 20, |a| a.parse().expect("capacity"));
    let read_off: usize = args.next().map_or(0, |a| a.parse().expect("reader offset"));
    let write_off: usize = args.next().map_or(0, |a| a.parse().expect("writer offset"));
    for round in 0..rounds {
        let (w, mut r) = pagepipe::Builder::new().capacity(capacity).build()?;
        let writer = std::thread::spawn(move || {
            let space = vec![0x5au8; (64 << 10) + 8192];
            let at = (4096 - space.as_ptr() as usize % 4096) % 4096 + write_off;
            let buf = &space[at..at + (64 << 10)];
            while (&w).write_all(buf).is_ok() {}
        });
        let mut space = vec![0u8; (64 << 10) + 8192];
        let at = (4096 - space.as_ptr() as usize % 4096) % 4096 + read_off;
        let buf = &mut space[at..at + (64 << 10)];
        let (start, mut bytes) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(1) {
            bytes += r.read(buf)? as u64;
        }
        let secs = start.elapsed().as_secs_f64();
        drop(r); // the writer gets BrokenPipe
        writer.join().unwrap();
        println!("round {round}: {:.1} GB/s", bytes as f64 / secs / 1e9);
    }
    Ok(())
}
