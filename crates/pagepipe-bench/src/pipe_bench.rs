//! `pagepipe-bench pipe`: the workload of Linux's tools/testing/selftests/pipe/pipe_bench.c.
//!
//! N writer threads and M reader threads share one pipe (1 MiB by default); writers send
//! fixed-size messages (64 KiB) for a fixed time and time every write; readers drain. Reports
//! writes/s, MB/s, per-write latency and the page faults and CPU the run cost.

use crate::common::{
    fmt_summary, print_json, print_table, progress, Histogram, MemoryHog, Record, Summary, Usage,
};
use crate::transport::{self, PipeConfig, Transport};
use pagepipe::PoolPolicy;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Transports to compare, alternating in one run.
    #[arg(long, value_delimiter = ',', default_value = "kernel,pagepipe")]
    pub transport: Vec<Transport>,
    /// Writer threads (with --readers; without both, sweeps {1,2,5} x {1,5,10} as pipe_bench does).
    #[arg(short = 'w', long)]
    pub writers: Option<usize>,
    /// Reader threads.
    #[arg(short = 'r', long)]
    pub readers: Option<usize>,
    /// Bytes per write.
    #[arg(long, default_value_t = 64 * 1024)]
    pub msgsize: usize,
    /// Seconds measured per run (after a warm-up of a quarter of it, at most 0.5 s).
    #[arg(long, default_value_t = 2.0)]
    pub duration: f64,
    /// Pipe capacity in bytes (kernel: F_SETPIPE_SZ).
    #[arg(long, default_value_t = 1 << 20)]
    pub pipe_size: usize,
    /// pagepipe pool policies, comma separated: adaptive[:keep], unified[:keep:burst], tmppage, none.
    #[arg(long, value_delimiter = ',', default_value = "adaptive", value_parser = parse_pool)]
    pub pool: Vec<PoolPolicy>,
    /// pagepipe slot size in bytes (a power of two >= 4096; larger = seed 001's fatpipe).
    #[arg(long, default_value_t = 4096)]
    pub slot_size: usize,
    /// Run beside a memory hog (stress-ng --vm 2 --vm-bytes 80%), as pipe_bench does.
    #[arg(long)]
    pub memory_pressure: bool,
    /// Repeated runs per configuration (median and 95% confidence interval).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

/// Parses a pool policy: `adaptive[:keep]`, `unified[:keep:burst]`, `tmppage`, `none`.
pub fn parse_pool(s: &str) -> Result<PoolPolicy, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize, default: usize| -> Result<usize, String> {
        parts.get(i).map_or(Ok(default), |p| {
            p.parse()
                .map_err(|e| format!("bad number {p:?} in pool {s:?}: {e}"))
        })
    };
    match parts[0] {
        "adaptive" => Ok(PoolPolicy::Adaptive { keep: num(1, 2)? }),
        "unified" => Ok(PoolPolicy::Unified {
            keep: num(1, 2)?,
            burst: num(2, 8)?,
        }),
        "tmppage" => Ok(PoolPolicy::TmpPage),
        "none" => Ok(PoolPolicy::None),
        other => Err(format!(
            "unknown pool policy {other:?} (adaptive, unified, tmppage, none)"
        )),
    }
}

pub fn pool_name(p: PoolPolicy) -> String {
    match p {
        PoolPolicy::Adaptive { keep } => format!("adaptive:{keep}"),
        PoolPolicy::Unified { keep, burst } => format!("unified:{keep}:{burst}"),
        PoolPolicy::TmpPage => "tmppage".into(),
        PoolPolicy::None => "none".into(),
    }
}

/// One variant measured: a transport, and for pagepipe a pool policy.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub transport: Transport,
    pub pool: Option<PoolPolicy>,
}

impl Variant {
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
    pub writers: usize,
    pub readers: usize,
    pub msgsize: usize,
    pub duration: Duration,
    pub pipe: PipeConfig,
}

/// Runs the workload once on `v` and returns its metrics.
pub fn measure(v: Variant, wl: &Workload) -> io::Result<Record> {
    let mut cfg = wl.pipe;
    if let Some(p) = v.pool {
        cfg.pool = p;
    }
    let (ws, rs) = transport::open(v.transport, &cfg, wl.writers, wl.readers)?;
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = rs
        .into_iter()
        .map(|mut r| {
            let size = wl.msgsize;
            std::thread::spawn(move || -> io::Result<()> {
                let mut buf = vec![0u8; size];
                while r.read(&mut buf)? > 0 {}
                Ok(())
            })
        })
        .collect();
    let writers: Vec<_> = ws
        .into_iter()
        .map(|mut w| {
            let (stop, measuring, size) = (stop.clone(), measuring.clone(), wl.msgsize);
            std::thread::spawn(move || -> io::Result<Histogram> {
                let msg = vec![0xa5u8; size];
                let mut hist = Histogram::default();
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    w.write_all(&msg)?;
                    if measuring.load(Ordering::Relaxed) {
                        hist.record(t0.elapsed());
                    }
                }
                Ok(hist)
            })
        })
        .collect();
    std::thread::sleep((wl.duration / 4).min(Duration::from_millis(500)));
    let (u0, t0) = (Usage::now(), Instant::now());
    measuring.store(true, Ordering::Relaxed);
    std::thread::sleep(wl.duration);
    measuring.store(false, Ordering::Relaxed);
    let (usage, secs) = (Usage::now().since(u0), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    let mut hist = Histogram::default();
    for w in writers {
        hist.merge(&w.join().expect("writer thread panicked")?);
    }
    for r in readers {
        r.join().expect("reader thread panicked")?;
    }
    let mut rec = Record::new("pipe", v.transport.name())
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
    rec.metric("writes_per_s", writes / secs);
    rec.metric("mbps", writes * wl.msgsize as f64 / secs / 1e6);
    rec.metric("lat_avg_ns", hist.mean_ns());
    rec.metric("lat_p50_ns", hist.quantile_ns(0.50));
    rec.metric("lat_p99_ns", hist.quantile_ns(0.99));
    rec.metric("lat_max_ns", hist.max_ns());
    rec.metric("minor_faults", usage.minor_faults as f64);
    rec.metric("cpu_s", usage.cpu_s);
    Ok(rec)
}

/// Runs every variant `runs` times, alternating (run 1 of each, then run 2 of each, ...), and
/// returns the records grouped per variant in `variants` order.
pub fn alternate(
    vs: &[Variant],
    runs: usize,
    bar: &indicatif::ProgressBar,
    mut one: impl FnMut(Variant) -> io::Result<Record>,
) -> io::Result<Vec<Vec<Record>>> {
    let mut out = vec![Vec::new(); vs.len()];
    for _ in 0..runs.max(1) {
        for (i, &v) in vs.iter().enumerate() {
            out[i].push(one(v)?);
            bar.inc(1);
        }
    }
    Ok(out)
}

/// Folds repeated runs into one record of medians, with 95% CI bounds for `ci_keys`.
pub fn summarise(runs: &[Record], ci_keys: &[&str]) -> (Record, Vec<(String, Summary)>) {
    let mut rec = runs[0].clone().config("runs", runs.len());
    let mut sums = Vec::new();
    for (key, _) in &runs[0].metrics {
        let samples: Vec<f64> = runs.iter().filter_map(|r| r.get(key)).collect();
        let s = Summary::of(&samples);
        rec.metric(key, s.median);
        if ci_keys.contains(&key.as_str()) {
            rec.metric(&format!("{key}_ci_lo"), s.lo);
            rec.metric(&format!("{key}_ci_hi"), s.hi);
        }
        sums.push((key.clone(), s));
    }
    (rec, sums)
}

pub fn summary_of<'a>(sums: &'a [(String, Summary)], key: &str) -> &'a Summary {
    &sums
        .iter()
        .find(|(k, _)| k == key)
        .expect("metric present")
        .1
}

/// "2.41x" plus a mark when the two intervals overlap (not distinguishable from noise);
/// "1.00x" for the baseline itself, "-" when the baseline is zero.
pub fn ratio_cell(ours: &Summary, base: &Summary) -> String {
    if std::ptr::eq(ours, base) {
        return "1.00x".into();
    }
    if base.median == 0.0 || ours.median == 0.0 {
        return "-".into();
    }
    let noise = if ours.distinct_from(base) {
        ""
    } else {
        " (noise)"
    };
    format!("{:.2}x{noise}", ours.median / base.median)
}

pub fn run(a: &Args, json: bool) -> io::Result<()> {
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
    let bar = progress(
        (configs.len() * vs.len() * a.runs.max(1)) as u64,
        "pipe_bench",
        json,
    );
    let mut rows = Vec::new();
    for (writers, readers) in configs {
        let wl = Workload {
            writers,
            readers,
            msgsize: a.msgsize,
            duration: Duration::from_secs_f64(a.duration),
            pipe,
        };
        let results = alternate(&vs, a.runs, &bar, |v| measure(v, &wl))?;
        let mut kernel: Option<Summary> = None;
        for (v, runs) in vs.iter().zip(&results) {
            let (mut rec, sums) = summarise(runs, &["mbps", "writes_per_s", "lat_avg_ns"]);
            rec.config
                .insert("memory_pressure".into(), a.memory_pressure.into());
            let mbps = *summary_of(&sums, "mbps");
            if v.transport == Transport::Kernel {
                kernel = Some(mbps);
            }
            let vs_kernel = match &kernel {
                _ if v.transport == Transport::Kernel => "1.00x".into(),
                Some(k) => ratio_cell(&mbps, k),
                None => "-".into(),
            };
            if json {
                print_json(&rec);
            }
            rows.push(vec![
                format!("{writers}w/{readers}r"),
                v.label(),
                fmt_summary(summary_of(&sums, "writes_per_s"), 0),
                fmt_summary(&mbps, 0),
                format!("{:.1}", rec.get("lat_avg_ns").unwrap() / 1e3),
                format!("{:.1}", rec.get("lat_p99_ns").unwrap() / 1e3),
                format!("{:.0}", rec.get("minor_faults").unwrap()),
                format!("{:.2}", rec.get("cpu_s").unwrap()),
                vs_kernel,
            ]);
        }
    }
    bar.finish_and_clear();
    if !json {
        println!(
            "pipe_bench: {} B messages, {} B pipe, {} s x {} runs{} (median [95% CI])",
            a.msgsize,
            a.pipe_size,
            a.duration,
            a.runs,
            if a.memory_pressure {
                ", under memory pressure"
            } else {
                ""
            }
        );
        print_table(
            &[
                "config",
                "transport",
                "writes/s",
                "MB/s",
                "avg µs",
                "p99 µs",
                "faults",
                "cpu s",
                "vs kernel",
            ],
            &rows,
        );
    }
    Ok(())
}
