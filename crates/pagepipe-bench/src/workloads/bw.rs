//! `bw`: lmbench's bw_pipe / bw_unix, 64 KiB writes between two threads or two processes, for
//! every transport side by side.

use crate::buffer::{Offsets, PageBuf};
use crate::child::{spawn, until_hangup, Between, Flags, CHILD_GRACE};
use crate::common::{Record, Usage};
use crate::harness::{Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use crate::probe::{core_rtt_ns, steal_ms};
use crate::transport::{self, parse_pool, Channel, PipeConfig, Transport, W};
use crate::workloads::lmbench::{arms, check_between};
use pagepipe::PoolPolicy;
use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Options of `pagepipe-bench bw`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Transports to compare, alternating in one run (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "kernel,unix,pagepipe")]
    pub transport: Vec<Transport>,
    /// Bytes per write (lmbench: 64 KiB).
    #[arg(long, default_value_t = 64 * 1024)]
    pub size: usize,
    /// Pipe capacity (lmbench uses the default 64 KiB pipe).
    #[arg(long, default_value_t = 64 * 1024)]
    pub pipe_size: usize,
    /// pagepipe slot size (seed 001: larger slots = "fatpipe").
    #[arg(long, default_value_t = 4096)]
    pub slot_size: usize,
    /// pagepipe pool policy: adaptive, adaptive:KEEP, unified, unified:KEEP:BURST, tmppage, none.
    #[arg(long, default_value = "adaptive", value_parser = parse_pool)]
    pub pool: PoolPolicy,
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Where the two sides run, comma separated: threads of this process, or this process and
    /// a forked child.
    #[arg(long, value_delimiter = ',', default_value = "threads")]
    pub between: Vec<Between>,
    /// Where the reader's buffer starts: bytes past the ring's own offset within a 4 KiB page
    /// (the same for every transport; 1-255 puts the copy out of the ring on 4 KiB aliasing).
    #[arg(long, default_value_t = 0)]
    pub read_offset: usize,
    /// Where the writer's buffer starts, as `--read-offset` (3841-4095, the ring 1-255 bytes
    /// ahead, puts the copy into the ring on 4 KiB aliasing).
    #[arg(long, default_value_t = 0)]
    pub write_offset: usize,
}

/// One bw run: a writer (thread or child process) writes `size`-byte chunks; this thread
/// reads and counts. Both buffers start `offsets` bytes past the ring's offset within a
/// 4 KiB page, so every transport copies between the same addresses modulo 4 KiB; the record
/// says where they and the ring were (`ring_offset_bytes`, `read_buf_offset_bytes`,
/// `write_buf_offset_bytes`: offsets within a 4 KiB page).
pub fn bw_once(
    t: Transport,
    cfg: &PipeConfig,
    size: usize,
    offsets: Offsets,
    duration: Duration,
    between: Between,
) -> io::Result<Record> {
    check_between(t, between)?;
    let core_rtt = core_rtt_ns(Duration::from_millis(20));
    let Channel { w, r, ring_offset } = transport::open_one(t, cfg)?;
    let ring_at = ring_offset.unwrap_or(0);
    let mut buf = PageBuf::new(size, ring_at + offsets.read, 0);
    let wbuf = PageBuf::new(size, ring_at + offsets.write, 0x5a);
    let buffers_at = (ring_offset, buf.offset(), wbuf.offset());
    let flags = Flags::new()?;
    let f = flags.clone();
    let mut r = Some(r);
    let writer = spawn(
        between,
        move || write_until_hangup(w, &f, &wbuf),
        || r = None,
    )?;
    let mut r = r.expect("the parent keeps the reader");
    let warm = Instant::now() + duration / 5;
    while Instant::now() < warm {
        let _warm_up_bytes = r.read(&mut buf)?;
    }
    let (u0, steal0, t0) = (Usage::now(), steal_ms(), Instant::now());
    flags.set_measuring(true);
    let mut bytes = 0u64;
    while t0.elapsed() < duration {
        bytes += r.read(&mut buf)? as u64;
    }
    flags.set_measuring(false);
    let (mut usage, secs) = (Usage::now().since(u0), t0.elapsed().as_secs_f64());
    let steal = steal_ms().zip(steal0).map(|(s1, s0)| s1 - s0);
    flags.stop();
    drop(r); // the writer gets BrokenPipe (or ConnectionReset) if it is blocked
    let spent = writer.join(duration + CHILD_GRACE)?;
    if between == Between::Processes {
        usage = usage.plus(spent);
    }
    let mut rec = Record::new("bw", t.name())
        .config("between", between.name())
        .config("size", size)
        .config("pipe_size", cfg.pipe_size)
        .config("read_offset", offsets.read)
        .config("write_offset", offsets.write);
    if t.is_pagepipe() {
        rec = rec.config("slot_size", cfg.slot_size);
    }
    rec.metric("mbps", bytes as f64 / secs / 1e6);
    rec.metric("minor_faults", usage.minor_faults as f64);
    rec.metric("cpu_s", usage.cpu_s);
    // Both sides' user + system time per GiB moved (issue 38: no more than the kernel's).
    rec.metric("cpu_s_per_gib", usage.cpu_s / (bytes.max(1) as f64 / GIB));
    rec.metric("core_rtt_ns", core_rtt);
    if let Some(ms) = steal {
        rec.metric("steal_ms", ms);
    }
    if let Some(ring) = buffers_at.0 {
        rec.metric("ring_offset_bytes", ring as f64);
    }
    rec.metric("read_buf_offset_bytes", buffers_at.1 as f64);
    rec.metric("write_buf_offset_bytes", buffers_at.2 as f64);
    Ok(rec)
}

/// bw's writer: writes until told to stop or the reader hangs up; returns its usage over the
/// measured window.
fn write_until_hangup(mut w: W, flags: &Flags, buf: &[u8]) -> io::Result<Usage> {
    until_hangup(flags, || w.write_all(buf))
}

/// Where a bw record's ring and buffers were, as `ring R, reader A, writer B` (offsets within
/// a 4 KiB page; the ring's is left out where it is not known).
pub fn buffers_at(rec: &Record) -> String {
    let at = |k: &str| rec.get(k).map_or("?".to_string(), |v| format!("{v:.0}"));
    let ring = rec
        .get("ring_offset_bytes")
        .map_or(String::new(), |v| format!("ring {v:.0}, "));
    format!(
        "{ring}reader {}, writer {}",
        at("read_buf_offset_bytes"),
        at("write_buf_offset_bytes")
    )
}

/// Collects, per arm, the distinct places of the ring and buffers its runs used, for a note
/// under the table.
#[derive(Default)]
pub struct Placements(Vec<(String, BTreeSet<String>)>);

impl Placements {
    /// Notes where `rec`'s ring and buffers were.
    pub fn add(&mut self, rec: &Record) {
        let at = buffers_at(rec);
        match self.0.iter_mut().find(|(t, _)| *t == rec.transport) {
            Some((_, seen)) => {
                seen.insert(at);
            }
            None => self.0.push((rec.transport.clone(), BTreeSet::from([at]))),
        }
    }

    /// The note: `TITLE: bytes past a 4 KiB boundary: ARM (PLACES); ...`; empties the list.
    pub fn note(&mut self, title: &str) -> String {
        let arms: Vec<String> = self
            .0
            .drain(..)
            .map(|(t, seen)| format!("{t} ({})", Vec::from_iter(seen).join("; ")))
            .collect();
        format!(
            "{title}: buffers and ring, bytes past a 4 KiB boundary: {}",
            arms.join("; ")
        )
    }
}

/// The bw case on `transports`.
pub fn bw_case(transports: &[Transport], title: &str) -> Case {
    Case {
        bench: "bw",
        title: title.into(),
        arms: arms(transports),
        columns: vec![
            Column::new("mbps", "MB/s", 1.0, 0),
            Column::new("cpu_s_per_gib", "CPU s / GiB", 1.0, 3),
        ],
    }
}

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// `pagepipe-bench bw`.
///
/// # Errors
/// A transport cannot be opened or fails mid-run.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    let cfg = PipeConfig {
        pipe_size: a.pipe_size,
        pool: a.pool,
        slot_size: a.slot_size,
    };
    let offsets = Offsets {
        read: a.read_offset,
        write: a.write_offset,
    };
    let d = Duration::from_secs_f64(a.duration);
    let mut harness = Harness::new(opts, "bw", RECOMMENDED_RUNS)?;
    let title = format!("bw {} KiB", a.size / 1024);
    let mut placements = Placements::default();
    for &between in &a.between {
        let ts = transport::usable(&a.transport, between);
        let title = between.title(&title);
        harness.run(bw_case(&ts, &title), |i| {
            let rec = bw_once(ts[i], &cfg, a.size, offsets, d, between)?;
            placements.add(&rec);
            Ok(Run::from(rec))
        })?;
        harness.note(placements.note(&title));
    }
    harness.finish(&format!(
        "bw: {} B writes, {} B pipe, {} s per run",
        a.size, a.pipe_size, a.duration
    ))
}
