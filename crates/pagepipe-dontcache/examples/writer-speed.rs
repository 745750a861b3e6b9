//! The dontcache writer's own speed against a buffered write + `fdatasync`: one file of SIZE
//! written in 1 MiB blocks and made durable, by each of: `std::fs::File` + `sync_data`
//! (buffered), `Writer` in [`Mode::Auto`] (`RWF_DONTCACHE` where the file takes it) and in
//! [`Mode::Fallback`] + `finish`, in an order that rotates from round to round. Prints each
//! write's seconds, MB/s and what it left cached, then per mode the median and range of its time
//! over buffered's in the same round (below 1: faster than buffered).
//!
//! Run (hold the lock on a shared machine):
//! `flock /tmp/pagepipe-cpu.lock cargo run --release -p pagepipe-dontcache --example writer-speed -- [SIZE_MB=500] [ROUNDS=5] [DIR=/var/tmp]`
//!
//! Each file is removed after its write, outside the timing; buffered's cache goes with it.

use pagepipe_dontcache::{cached_bytes, Mode, Writer};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const BLOCK: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum How {
    Buffered,
    Auto,
    Fallback,
}

/// Writes `size` bytes of `block` (repeated) to `path` the way `how` says and makes them
/// durable; returns the seconds it took, the mode the writer used and the bytes left cached.
fn write(how: How, path: &Path, size: u64, block: &[u8]) -> std::io::Result<(f64, String, u64)> {
    let t0 = Instant::now();
    let file = File::create(path)?;
    let mut left = size;
    let (used, cached) = match how {
        How::Buffered => {
            let mut f = &file;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                f.write_all(&block[..n])?;
                left -= n as u64;
            }
            file.sync_data()?;
            ("buffered".to_string(), file)
        }
        How::Auto | How::Fallback => {
            let mode = if how == How::Auto {
                Mode::Auto
            } else {
                Mode::Fallback
            };
            let mut w = Writer::with_mode(file.try_clone()?, mode)?;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                w.write_all(&block[..n])?;
                left -= n as u64;
            }
            let stats = w.finish()?;
            (format!("{:?}", stats.mode).to_lowercase(), file)
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    let left_cached = cached_bytes(&cached)?;
    Ok((secs, used, left_cached))
}

fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size_mb: u64 = args.first().map_or(500, |s| s.parse().expect("SIZE_MB"));
    let rounds: usize = args.get(1).map_or(5, |s| s.parse().expect("ROUNDS"));
    let dir = PathBuf::from(args.get(2).map_or("/var/tmp", String::as_str));
    let size = size_mb * 1_000_000;
    // Bytes that differ from block to block would cost the same: the filesystems here do not
    // compress or deduplicate.
    let block: Vec<u8> = (0..BLOCK)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 12) as u8)
        .collect();
    let order = [How::Buffered, How::Auto, How::Fallback];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); order.len()];
    println!(
        "# {size_mb} MB in 1 MiB writes, then fdatasync; {rounds} rounds; {}",
        dir.display()
    );
    println!("| round | writer | mode used | seconds | MB/s | left cached | time / buffered's |");
    println!("|---|---|---|---|---|---|---|");
    for round in 0..rounds {
        let mut secs = [0.0; 3];
        for i in 0..order.len() {
            let k = (i + round) % order.len();
            let how = order[k];
            let path = dir.join(format!(
                "dontcache-writer-speed-{}-{how:?}",
                std::process::id()
            ));
            let written = write(how, &path, size, &block);
            std::fs::remove_file(&path)?;
            let (s, used, cached) = written?;
            secs[k] = s;
            println!(
                "| {} | {how:?} | {used} | {s:.2} | {:.0} | {} KiB | |",
                round + 1,
                size as f64 / 1e6 / s,
                cached / 1024
            );
        }
        for k in 1..order.len() {
            let r = secs[k] / secs[0];
            ratios[k].push(r);
            println!("| {} | {:?} | | | | | {r:.2} |", round + 1, order[k]);
        }
    }
    for k in 1..order.len() {
        let (m, lo, hi) = median_range(ratios[k].clone());
        println!(
            "{:?} / buffered + fdatasync, time: median {m:.2}, range {lo:.2}-{hi:.2} over {rounds} rounds",
            order[k]
        );
    }
    Ok(())
}
