//! `pagepipe-bench pipe`: the workload of Linux's tools/testing/selftests/pipe/pipe_bench.c.
//!
//! N writers and M readers share one pipe (1 MiB by default); writers send fixed-size messages
//! (64 KiB) for a fixed time and time every write; readers drain. Writers and readers are
//! threads, or (`--between processes`) each a forked process of its own. Reports writes/s, MB/s,
//! per-write latency and the page faults and CPU the run cost (between processes: the sum of
//! what every child spent over the measured window).

use crate::child::{spawn, Between, Flags, Meter, CHILD_GRACE};
use crate::common::{Histogram, MemoryHog, Record, Usage};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use crate::transport::{self, parse_pool, pool_name, PipeConfig, Transport, R, W};
use pagepipe::PoolPolicy;
use std::io;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Transports to compare, alternating in one run.
    #[arg(long, value_delimiter = ',', default_value = "kernel,pagepipe")]
    pub transport: Vec<Transport>,
    /// Writers (with --readers; without both, sweeps {1,2,5} x {1,5,10} as pipe_bench does).
    #[arg(short = 'w', long)]
    pub writers: Option<usize>,
    /// Readers.
    #[arg(short = 'r', long)]
    pub readers: Option<usize>,
    /// Where writers and readers run, comma separated: threads of this process, or forked
    /// processes (each writer and each reader a process of its own).
    #[arg(long, value_delimiter = ',', default_value = "threads")]
    pub between: Vec<Between>,
    /// Bytes per write.
    #[arg(long, default_value_t = 64 * 1024)]
    pub msgsize: usize,
    /// Seconds measured per run (after a warm-up of a quarter of it, at most 0.5 s).
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Pipe capacity in bytes (kernel: F_SETPIPE_SZ).
    #[arg(long, default_value_t = 1 << 20)]
    pub pipe_size: usize,
    /// pagepipe pool policies, comma separated: adaptive, adaptive:KEEP, unified, unified:KEEP:BURST, tmppage, none.
    #[arg(long, value_delimiter = ',', default_value = "adaptive", value_parser = parse_pool)]
    pub pool: Vec<PoolPolicy>,
    /// pagepipe slot size in bytes (a power of two >= 4096; larger = seed 001's fatpipe).
    #[arg(long, default_value_t = 4096)]
    pub slot_size: usize,
    /// Run beside a memory hog (stress-ng --vm 2 --vm-bytes 80%), as pipe_bench does.
    #[arg(long)]
    pub memory_pressure: bool,
}

/// One variant measured: a transport, and for pagepipe a pool policy.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    /// The transport.
    pub transport: Transport,
    /// The pool policy (pagepipe only).
    pub pool: Option<PoolPolicy>,
}

impl Variant {
    /// `kernel`, `unix`, or `pagepipe/POOL`.
    pub fn label(&self) -> String {
        match self.pool {
            Some(p) if self.transport == Transport::Pagepipe => {
                format!("pagepipe/{}", pool_name(p))
            }
            _ => self.transport.name().to_string(),
        }
    }
}

/// The variants of a run: each transport, pagepipe once per pool policy.
pub fn variants(transports: &[Transport], pools: &[PoolPolicy]) -> Vec<Variant> {
    let mut v = Vec::new();
    for &t in transports {
        if t == Transport::Pagepipe {
            v.extend(pools.iter().map(|&p| Variant {
                transport: t,
                pool: Some(p),
            }));
        } else {
            v.push(Variant {
                transport: t,
                pool: None,
            });
        }
    }
    v
}

/// What one pipe_bench run measures.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Writers.
    pub writers: usize,
    /// Readers.
    pub readers: usize,
    /// Bytes per write.
    pub msgsize: usize,
    /// Time measured (after a warm-up).
    pub duration: Duration,
    /// How to build the pipe.
    pub pipe: PipeConfig,
    /// Writers and readers on threads or in forked processes.
    pub between: Between,
}

impl Variant {
    /// The harness arm: the transport's name in JSON, the label in tables.
    pub fn arm(&self) -> Arm {
        Arm::labelled(self.transport.name(), self.label())
    }
}

/// Runs the workload once on `v` and returns its metrics and write latencies.
pub fn measure(v: Variant, wl: &Workload) -> io::Result<Run> {
    let mut cfg = wl.pipe;
    if let Some(p) = v.pool {
        cfg.pool = p;
    }
    // The machine's core-to-core round trip just before the run: streaming between the two
    // vCPUs is bound by their distance, which the host changes every few seconds.
    let core_rtt = crate::probe::core_rtt_ns(Duration::from_millis(20));
    let (mut ws, mut rs) = transport::open(v.transport, &cfg, wl.writers, wl.readers)?;
    let flags = Flags::new()?;
    let size = wl.msgsize;
    let mut readers = Vec::new();
    while let Some(r) = rs.pop() {
        let flags = flags.clone();
        let f = move || read_all(r, &flags, size);
        readers.push(spawn(wl.between, f, || {
            ws.clear();
            rs.clear();
        })?);
    }
    let mut writers = Vec::new();
    while let Some(w) = ws.pop() {
        let flags = flags.clone();
        let f = move || write_until_stopped(w, &flags, size);
        writers.push(spawn(wl.between, f, || ws.clear())?);
    }
    std::thread::sleep((wl.duration / 4).min(Duration::from_millis(500)));
    let (u0, t0) = (Usage::now(), Instant::now());
    flags.set_measuring(true);
    std::thread::sleep(wl.duration);
    flags.set_measuring(false);
    let (mut usage, secs) = (Usage::now().since(u0), t0.elapsed().as_secs_f64());
    flags.stop();
    let mut hist = Histogram::default();
    let limit = wl.duration + CHILD_GRACE;
    for w in writers {
        let (h, u) = w.join(limit)?;
        hist.merge(&h);
        if wl.between == Between::Processes {
            usage = usage.plus(u);
        }
    }
    for r in readers {
        let u = r.join(limit)?;
        if wl.between == Between::Processes {
            usage = usage.plus(u);
        }
    }
    let mut rec = Record::new("pipe", v.transport.name())
        .config("between", wl.between.name())
        .config("writers", wl.writers)
        .config("readers", wl.readers)
        .config("msgsize", wl.msgsize)
        .config("pipe_size", wl.pipe.pipe_size)
        .config("duration_s", wl.duration.as_secs_f64());
    if v.transport == Transport::Pagepipe {
        rec = rec
            .config("pool", pool_name(cfg.pool))
            .config("slot_size", cfg.slot_size);
    }
    let writes = hist.count() as f64;
    rec.metric("mbps", writes * wl.msgsize as f64 / secs / 1e6);
    rec.metric("writes_per_s", writes / secs);
    hist.put_metrics(&mut rec);
    rec.metric("minor_faults", usage.minor_faults as f64);
    rec.metric("cpu_s", usage.cpu_s);
    rec.metric("core_rtt_ns", core_rtt);
    Ok(Run {
        record: rec,
        latency: Some(hist),
    })
}

/// A writer: `size`-byte writes, each timed while the window is open, until told to stop.
/// Returns the latencies and (for a process) its usage over the window.
fn write_until_stopped(mut w: W, flags: &Flags, size: usize) -> io::Result<(Histogram, Usage)> {
    let msg = vec![0xa5u8; size];
    let mut hist = Histogram::default();
    let mut meter = Meter::default();
    while !flags.stopped() {
        let t0 = Instant::now();
        w.write_all(&msg)?;
        if flags.measuring() {
            hist.record(t0.elapsed());
        }
        meter.tick(flags);
    }
    Ok((hist, meter.spent()))
}

/// A reader: drains until end of file; returns (for a process) its usage over the window.
fn read_all(mut r: R, flags: &Flags, size: usize) -> io::Result<Usage> {
    let mut buf = vec![0u8; size];
    let mut meter = Meter::default();
    while r.read(&mut buf)? > 0 {
        meter.tick(flags);
    }
    Ok(meter.spent())
}

/// The table rows of a pipe_bench case (the first is what charts and `--runs auto` use).
pub const COLUMNS: [Column; 4] = [
    Column::new("mbps", "MB/s", 1.0, 0),
    Column::new("lat_avg_ns", "write avg µs", 1e3, 2),
    Column::new("lat_p99_ns", "write p99 µs", 1e3, 1),
    Column::new("minor_faults", "page faults", 1.0, 0),
];

/// The case of `writers` x `readers` on every variant, on threads or processes.
pub fn case(
    vs: &[Variant],
    writers: usize,
    readers: usize,
    between: Between,
    columns: &[Column],
) -> Case {
    Case {
        bench: "pipe",
        title: between.title(&format!("pipe {writers}w/{readers}r")),
        arms: vs.iter().map(Variant::arm).collect(),
        columns: columns.to_vec(),
    }
}

/// `pagepipe-bench pipe`: every writer/reader configuration asked for, on every variant.
///
/// # Errors
/// A transport cannot be opened or fails mid-run; `--memory-pressure` without stress-ng.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    let configs: Vec<(usize, usize)> = match (a.writers, a.readers) {
        (None, None) => [1, 2, 5]
            .iter()
            .flat_map(|&w| [1, 5, 10].map(move |r| (w, r)))
            .collect(),
        (w, r) => vec![(w.unwrap_or(1), r.unwrap_or(1))],
    };
    let vs = variants(&a.transport, &a.pool);
    let pipe = PipeConfig {
        pipe_size: a.pipe_size,
        pool: a.pool[0],
        slot_size: a.slot_size,
    };
    let _hog = MemoryHog::start(a.memory_pressure)?;
    let mut harness = Harness::new(opts, "pipe", RECOMMENDED_RUNS)?;
    for ((writers, readers), &between) in configs
        .iter()
        .flat_map(|c| a.between.iter().map(move |b| (*c, b)))
    {
        let wl = Workload {
            writers,
            readers,
            msgsize: a.msgsize,
            duration: Duration::from_secs_f64(a.duration),
            pipe,
            between,
        };
        harness.run(case(&vs, writers, readers, between, &COLUMNS), |i| {
            let mut run = measure(vs[i], &wl)?;
            run.record
                .config
                .insert("memory_pressure".into(), a.memory_pressure.into());
            Ok(run)
        })?;
    }
    let pressure = if a.memory_pressure {
        ", under memory pressure"
    } else {
        ""
    };
    harness.finish(&format!(
        "pipe_bench: {} B messages, {} B pipe, {} s per run{pressure}",
        a.msgsize, a.pipe_size, a.duration
    ))
}
