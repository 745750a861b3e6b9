//! The real workloads of `pagepipe-bench frag` (issue 11): where page fragments live in the
//! kernel, receiving packets. A sender process (forked) sends over loopback; a receiver thread
//! takes the data into buffers from the allocator under test and hands every message through a
//! bounded queue to a worker thread, which checksums it and drops it there.
//!
//! - `udp`: datagrams of a size mix, received with `recvmmsg` in batches (32 by default). Every
//!   allocator fills each of the batch's receive slots with a 2 KiB buffer, the way a network
//!   driver refills its receive ring, and the datagram's buffer is then cut to its real length
//!   (`Frag::truncate`, `BytesMut::advance_mut`, a length field). A [`FragCache::prepare`]
//!   builder cannot serve here: it borrows the cache until it is committed, and a batch needs 32
//!   buffers at once.
//! - `tcp`: a stream of length-prefixed frames. `fragcache` reads into one large
//!   [`FragCache::prepare`]d buffer, commits what was read and splits every frame off it without
//!   copying ([`Frag::split_to`]); `bytesmut` does the same with `BytesMut::split_to`; `system`
//!   and `mimalloc` read into one reused buffer and copy every frame into a buffer of its own
//!   (what a plain allocator offers). A frame cut by the end of a read is copied to the front of
//!   the next buffer, by every allocator.
//!
//! Fairness: the same sender, the same message count and sizes for every allocator, alternating
//! within one run. On 2 shared cores a live sender is the slowest of the three parties, so by
//! default (`--udp-mode preload`) the sender sends every datagram into a socket buffer large
//! enough to hold them all (`SO_RCVBUFFORCE`, 1 GiB) and exits before the receiver starts: the
//! receiver then drains it with the worker beside it and nothing else, and datagrams/s is the
//! receiver's own capacity. `--udp-mode live` receives while the sender sends. Either way the
//! kernel drops datagrams when the socket buffer is full: only delivered datagrams count, over
//! the time from the first to the last one, and the drop share is reported beside them
//! (`drop_pct`); `--udp-rate` paces a live sender. TCP loses nothing: its sender blocks.

mod config;
mod outcome;
mod queue;
mod sender;
mod tcp;
mod udp;

pub use config::NetConfig;

use super::alloc::{MIMALLOC, SYSTEM};
use crate::common::{Record, Usage};
use crate::harness::{Arm, Case, Column, Run};
use bytes::BytesMut;
use config::{MAX_MSG, READ_MAX};
#[cfg(doc)]
use pagepipe::Frag;
use pagepipe::FragCache;
use std::io;
use tcp::{frame_stream, tcp, BytesFramer, CopyFramer, FragFramer};
use udp::{udp, BytesRx, FragRx, RawRx};

/// The allocators compared, in table order; the first is the baseline.
pub const TRANSPORTS: [&str; 4] = ["system", "fragcache", "mimalloc", "bytesmut"];

/// Parses a size mix `SIZE[:WEIGHT],...` into a send schedule of 1024 sizes, shuffled with a
/// fixed seed so every run and allocator sees the same sequence.
///
/// # Errors
/// `InvalidInput` naming the bad entry: a size outside 1..=2048 or a zero or missing weight.
pub fn parse_mix(mix: &str) -> io::Result<Vec<usize>> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let mut weighted = Vec::new();
    for part in mix.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (size, weight) = part.split_once(':').unwrap_or((part, "1"));
        let size: usize = size
            .parse()
            .ok()
            .filter(|s| (1..=MAX_MSG).contains(s))
            .ok_or_else(|| {
                bad(format!(
                    "--mix entry {part:?}: the size must be from 1 to {MAX_MSG}"
                ))
            })?;
        let weight: usize = weight
            .parse()
            .ok()
            .filter(|w| (1..=1000).contains(w))
            .ok_or_else(|| {
                bad(format!(
                    "--mix entry {part:?}: the weight must be from 1 to 1000"
                ))
            })?;
        weighted.push((size, weight));
    }
    if weighted.is_empty() {
        return Err(bad(format!("--mix {mix:?} names no size")));
    }
    let total: usize = weighted.iter().map(|(_, w)| w).sum();
    let mut schedule: Vec<usize> = weighted
        .iter()
        .flat_map(|&(s, w)| std::iter::repeat_n(s, (w * 1024).div_ceil(total)))
        .collect();
    // Fisher-Yates with xorshift64: a fixed, reproducible order.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..schedule.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        schedule.swap(i, (x % (i as u64 + 1)) as usize);
    }
    Ok(schedule)
}

/// The allocators `--alloc` names (all of [`TRANSPORTS`] without it), in table order.
///
/// # Errors
/// `InvalidInput` naming an unknown allocator.
pub fn parse_allocs(list: Option<&str>) -> io::Result<Vec<&'static str>> {
    let Some(list) = list else {
        return Ok(TRANSPORTS.to_vec());
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim) {
        let t = TRANSPORTS.iter().find(|t| **t == name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("--alloc {name:?} is not one of {}", TRANSPORTS.join(", ")),
            )
        })?;
        out.push(*t);
    }
    Ok(out)
}

/// The case of one workload: the allocators `allocs`, the metrics of issue 11.
pub fn case(cfg: &NetConfig, allocs: &[&'static str]) -> Case {
    let mean = cfg.schedule.iter().sum::<usize>() / cfg.schedule.len();
    let mut columns = vec![
        Column::new("msgs_per_s", "kmsg/s", 1e3, 1),
        Column::new("mbps", "MB/s", 1.0, 0),
        Column::new("cpu_ns_per_msg", "receiver CPU ns/msg", 1.0, 0),
        Column::new("worker_cpu_ns_per_msg", "worker CPU ns/msg", 1.0, 0),
        Column::new("minor_faults", "minor faults", 1.0, 0),
        Column::new("peak_rss_bytes", "peak RSS MiB", (1 << 20) as f64, 1),
    ];
    if cfg.workload == "udp" {
        columns.push(Column::new("drop_pct", "dropped %", 1.0, 1));
    }
    Case {
        bench: "frag",
        title: format!("{} mix {} (mean {mean} B)", cfg.workload, cfg.mix),
        arms: allocs.iter().map(|t| Arm::new(*t)).collect(),
        columns,
    }
}

/// One run of `cfg.workload` with `transport`.
///
/// # Errors
/// A socket, fork or receive fails (with the call named).
pub fn measure(cfg: &NetConfig, transport: &str) -> io::Result<Run> {
    reset_peak_rss();
    let stream = match cfg.workload {
        "tcp" => frame_stream(&cfg.schedule),
        _ => Vec::new(),
    };
    let before = Usage::now();
    let out = match (cfg.workload, transport) {
        ("udp", "fragcache") => udp(cfg, FragRx(FragCache::with_block_size(cfg.block_size))),
        ("udp", "system") => udp(cfg, RawRx(&SYSTEM)),
        ("udp", "mimalloc") => udp(cfg, RawRx(&MIMALLOC)),
        ("udp", "bytesmut") => udp(cfg, BytesRx(BytesMut::new())),
        ("tcp", "fragcache") => tcp(cfg, &stream, FragFramer::new(tcp_block(cfg))),
        ("tcp", "system") => tcp(cfg, &stream, CopyFramer::new(&SYSTEM)),
        ("tcp", "mimalloc") => tcp(cfg, &stream, CopyFramer::new(&MIMALLOC)),
        ("tcp", "bytesmut") => tcp(cfg, &stream, BytesFramer(BytesMut::new())),
        (w, t) => unreachable!("unknown workload {w} or transport {t}"),
    }?;
    let usage = Usage::now().since(before);
    let mut rec = Record::new("frag", transport)
        .config("workload", cfg.workload)
        .config("mix", cfg.mix.as_str())
        .config("msgs", cfg.msgs)
        .config("queue", cfg.queue);
    rec = match cfg.workload {
        "tcp" => rec.config("block_size", tcp_block(cfg)),
        _ => rec.config("block_size", cfg.block_size),
    };
    let sent = match cfg.workload {
        "tcp" => cfg.msgs.div_ceil(cfg.schedule.len()) * cfg.schedule.len(),
        _ => cfg.msgs,
    };
    rec = rec.config("sent", sent);
    if cfg.workload == "udp" {
        rec = rec
            .config("batch", cfg.batch)
            .config("mode", if cfg.preload { "preload" } else { "live" })
            .config("rate", cfg.rate)
            .config("rcvbuf", out.rcvbuf);
    }
    let n = out.delivered.max(1) as f64;
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    rec.metric("msgs_per_s", out.delivered as f64 / secs);
    rec.metric("mbps", out.bytes as f64 / secs / 1e6);
    rec.metric("cpu_ns_per_msg", out.rx_cpu.total() * 1e9 / n);
    rec.metric("worker_cpu_ns_per_msg", out.worker_cpu_s * 1e9 / n);
    rec.metric("minor_faults", usage.minor_faults as f64);
    rec.metric("peak_rss_bytes", peak_rss_bytes() as f64);
    if cfg.workload == "udp" {
        let sent = cfg.msgs as f64;
        rec.metric(
            "drop_pct",
            100.0 * (sent - out.delivered as f64).max(0.0) / sent,
        );
    }
    Ok(rec.into())
}

/// FragCache's block size for `tcp`: at least two reads' worth (`2 * READ_MAX`), so a read gets
/// the 64 KiB that `bytesmut` reserves rather than the rest of a 32 KiB block.
fn tcp_block(cfg: &NetConfig) -> usize {
    cfg.block_size.max(2 * READ_MAX)
}

/// Resets the process's peak RSS (`/proc/self/clear_refs`, value 5: see proc(5)), so that
/// `peak_rss_bytes` is this run's. Where that is refused the peak is the process's so far.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `VmHWM` of /proc/self/status in bytes (0 where it cannot be read).
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(workload: &'static str) -> NetConfig {
        NetConfig {
            workload,
            mix: "64:2,1500:1,2048".into(),
            schedule: parse_mix("64:2,1500:1,2048").unwrap(),
            msgs: 3000,
            batch: 32,
            rate: 0,
            preload: false,
            block_size: 32768,
            queue: 64,
        }
    }

    #[test]
    fn mix_parses_and_shuffles_reproducibly() {
        let s = parse_mix("64:3, 1500:1").unwrap();
        assert!(s.len() >= 1024);
        let small = s.iter().filter(|&&n| n == 64).count();
        assert!((small as f64 / s.len() as f64 - 0.75).abs() < 0.01);
        assert_eq!(s, parse_mix("64:3,1500:1").unwrap());
        // Unshuffled, the last quarter would be all 1500s.
        assert!(s[s.len() - 256..].contains(&64), "not shuffled");
        for bad in ["", "0", "4000", "64:0", "x:1"] {
            let e = parse_mix(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn every_allocator_receives_tcp_frames_whole() {
        for t in TRANSPORTS {
            let run = measure(&cfg("tcp"), t).unwrap();
            let r = &run.record;
            assert!(r.get("msgs_per_s").unwrap() > 0.0, "{t}");
            assert!(r.get("peak_rss_bytes").unwrap() > 0.0, "{t}");
        }
    }

    #[test]
    fn every_allocator_receives_udp_datagrams() {
        for t in TRANSPORTS {
            let mut c = cfg("udp");
            c.rate = 200_000; // gentle: no drops expected, but they would not fail the test
            for preload in [false, true] {
                c.preload = preload;
                let run = measure(&c, t).unwrap();
                let r = &run.record;
                assert!(r.get("msgs_per_s").unwrap() > 0.0, "{t}");
                let drops = r.get("drop_pct").unwrap();
                assert!((0.0..100.0).contains(&drops), "{t}: {drops}% dropped");
            }
        }
    }
}
