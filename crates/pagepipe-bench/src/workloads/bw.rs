//! `bw`: lmbench's bw_pipe / bw_unix, 64 KiB writes between two threads or two processes, for
//! every transport side by side.

use crate::child::{spawn, until_hangup, Between, Flags, CHILD_GRACE};
use crate::common::{core_rtt_ns, Record, Usage};
use crate::harness::{Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use crate::transport::{self, parse_pool, PipeConfig, Transport, W};
use crate::workloads::lmbench::{arms, check_between};
use pagepipe::PoolPolicy;
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
}

/// One bw run: a writer (thread or child process) writes `size`-byte chunks; this thread
/// reads and counts.
pub fn bw_once(
    t: Transport,
    cfg: &PipeConfig,
    size: usize,
    duration: Duration,
    between: Between,
) -> io::Result<Record> {
    check_between(t, between)?;
    let core_rtt = core_rtt_ns(Duration::from_millis(20));
    let (mut ws, mut rs) = transport::open(t, cfg, 1, 1)?;
    let w = ws.pop().expect("one writer");
    let flags = Flags::new()?;
    let f = flags.clone();
    let writer = spawn(
        between,
        move || write_until_hangup(w, &f, size),
        || rs.clear(),
    )?;
    let mut r = rs.pop().expect("one reader");
    let mut buf = vec![0u8; size];
    let warm = Instant::now() + duration / 5;
    while Instant::now() < warm {
        let _warm_up_bytes = r.read(&mut buf)?;
    }
    let (u0, t0) = (Usage::now(), Instant::now());
    flags.set_measuring(true);
    let mut bytes = 0u64;
    while t0.elapsed() < duration {
        bytes += r.read(&mut buf)? as u64;
    }
    flags.set_measuring(false);
    let (mut usage, secs) = (Usage::now().since(u0), t0.elapsed().as_secs_f64());
    flags.stop();
    drop(r); // the writer gets BrokenPipe (or ConnectionReset) if it is blocked
    let spent = writer.join(duration + CHILD_GRACE)?;
    if between == Between::Processes {
        usage = usage.plus(spent);
    }
    let mut rec = Record::new("bw", t.name())
        .config("between", between.name())
        .config("size", size)
        .config("pipe_size", cfg.pipe_size);
    if t.is_pagepipe() {
        rec = rec.config("slot_size", cfg.slot_size);
    }
    rec.metric("mbps", bytes as f64 / secs / 1e6);
    rec.metric("minor_faults", usage.minor_faults as f64);
    rec.metric("cpu_s", usage.cpu_s);
    rec.metric("core_rtt_ns", core_rtt);
    Ok(rec)
}

/// bw's writer: writes until told to stop or the reader hangs up; returns its usage over the
/// measured window.
fn write_until_hangup(mut w: W, flags: &Flags, size: usize) -> io::Result<Usage> {
    let buf = vec![0x5au8; size];
    until_hangup(flags, || w.write_all(&buf))
}

/// The bw case on `transports`.
pub fn bw_case(transports: &[Transport], title: &str) -> Case {
    Case {
        bench: "bw",
        title: title.into(),
        arms: arms(transports),
        columns: vec![Column::new("mbps", "MB/s", 1.0, 0)],
    }
}

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
    let d = Duration::from_secs_f64(a.duration);
    let mut harness = Harness::new(opts, "bw", RECOMMENDED_RUNS)?;
    let title = format!("bw {} KiB", a.size / 1024);
    for &between in &a.between {
        let ts = transport::usable(&a.transport, between);
        harness.run(bw_case(&ts, &between.title(&title)), |i| {
            bw_once(ts[i], &cfg, a.size, d, between).map(Run::from)
        })?;
    }
    harness.finish(&format!(
        "bw: {} B writes, {} B pipe, {} s per run",
        a.size, a.pipe_size, a.duration
    ))
}
