//! `bw` and `lat`: lmbench's bw_pipe / bw_unix (64 KiB writes between two threads) and
//! lat_pipe / lat_unix (a 1-byte ping-pong round trip), for every transport side by side.

use crate::common::{
    fmt_summary, print_json, print_table, progress, Histogram, Record, Summary, Usage,
};
use crate::pipe_bench::{alternate, parse_pool, ratio_cell, summarise, summary_of};
use crate::transport::{self, PipeConfig, Transport};
use pagepipe::PoolPolicy;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, Debug)]
pub struct BwArgs {
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
    #[arg(long, default_value = "adaptive", value_parser = parse_pool)]
    pub pool: PoolPolicy,
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

#[derive(clap::Args, Clone, Debug)]
pub struct LatArgs {
    #[arg(long, value_delimiter = ',', default_value = "kernel,unix,pagepipe")]
    pub transport: Vec<Transport>,
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

/// One bw run: a writer thread writes `size`-byte chunks, the caller's thread reads and counts.
pub fn bw_once(
    t: Transport,
    cfg: &PipeConfig,
    size: usize,
    duration: Duration,
) -> io::Result<Record> {
    let (mut ws, mut rs) = transport::open(t, cfg, 1, 1)?;
    let (mut w, mut r) = (ws.pop().unwrap(), rs.pop().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || -> io::Result<()> {
        let buf = vec![0x5au8; size];
        while !stop2.load(Ordering::Relaxed) {
            if let Err(e) = w.write_all(&buf) {
                return if e.kind() == io::ErrorKind::BrokenPipe {
                    Ok(())
                } else {
                    Err(e)
                };
            }
        }
        Ok(())
    });
    let mut buf = vec![0u8; size];
    let warm = Instant::now() + duration / 5;
    while Instant::now() < warm {
        let _warm_up_bytes = r.read(&mut buf)?;
    }
    let (u0, t0) = (Usage::now(), Instant::now());
    let mut bytes = 0u64;
    while t0.elapsed() < duration {
        bytes += r.read(&mut buf)? as u64;
    }
    let (usage, secs) = (Usage::now().since(u0), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    drop(r); // the writer gets BrokenPipe if it is blocked
    writer.join().expect("writer thread panicked")?;
    let mut rec = Record::new("bw", t.name())
        .config("size", size)
        .config("pipe_size", cfg.pipe_size);
    if t == Transport::Pagepipe {
        rec = rec.config("slot_size", cfg.slot_size);
    }
    rec.metric("mbps", bytes as f64 / secs / 1e6);
    rec.metric("minor_faults", usage.minor_faults as f64);
    rec.metric("cpu_s", usage.cpu_s);
    Ok(rec)
}

/// One lat run: 1-byte ping-pong between this thread and an echo thread over two channels.
pub fn lat_once(t: Transport, duration: Duration) -> io::Result<Record> {
    let cfg = PipeConfig::default();
    let (mut w1, mut r1) = transport::open(t, &cfg, 1, 1)?;
    let (mut w2, mut r2) = transport::open(t, &cfg, 1, 1)?;
    let (mut ping, mut pong_in) = (w1.pop().unwrap(), r2.pop().unwrap());
    let (mut echo_in, mut echo_out) = (r1.pop().unwrap(), w2.pop().unwrap());
    let echo = std::thread::spawn(move || -> io::Result<()> {
        let mut b = [0u8; 1];
        while echo_in.read(&mut b)? == 1 {
            echo_out.write_all(&b)?;
        }
        Ok(())
    });
    let mut hist = Histogram::default();
    let mut b = [7u8; 1];
    let warm = Instant::now() + duration / 5;
    let mut round = |hist: Option<&mut Histogram>| -> io::Result<()> {
        let t0 = Instant::now();
        ping.write_all(&b)?;
        pong_in.read_exact(&mut b)?;
        if let Some(h) = hist {
            h.record(t0.elapsed());
        }
        Ok(())
    };
    while Instant::now() < warm {
        round(None)?;
    }
    let t0 = Instant::now();
    while t0.elapsed() < duration {
        round(Some(&mut hist))?;
    }
    drop(ping); // end of file for the echo thread
    echo.join().expect("echo thread panicked")?;
    let mut rec = Record::new("lat", t.name());
    rec.metric("lat_avg_ns", hist.mean_ns());
    rec.metric("lat_p50_ns", hist.quantile_ns(0.50));
    rec.metric("lat_p99_ns", hist.quantile_ns(0.99));
    rec.metric("lat_max_ns", hist.max_ns());
    rec.metric("round_trips", hist.count() as f64);
    Ok(rec)
}

/// CPU used by a reader blocked on an empty pipe for `wait`, as a percentage of one core
/// (the reader thread's own `RUSAGE_THREAD`).
pub fn idle_once(t: Transport, wait: Duration) -> io::Result<Record> {
    let (mut ws, mut rs) = transport::open(t, &PipeConfig::default(), 1, 1)?;
    let (mut w, mut r) = (ws.pop().unwrap(), rs.pop().unwrap());
    let reader = std::thread::spawn(move || -> io::Result<f64> {
        let u0 = Usage::thread();
        let mut b = [0u8; 1];
        r.read_exact(&mut b)?;
        Ok(Usage::thread().since(u0).cpu_s)
    });
    std::thread::sleep(wait);
    w.write_all(b"x")?;
    let cpu = reader.join().expect("reader thread panicked")?;
    let mut rec = Record::new("idle", t.name()).config("wait_s", wait.as_secs_f64());
    rec.metric("cpu_pct", cpu / wait.as_secs_f64() * 100.0);
    Ok(rec)
}

fn table_for(
    bench: &str,
    vs: &[Transport],
    results: &[Vec<Record>],
    key: &str,
    scale: f64,
    lower_is_better: bool,
    json: bool,
) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut kernel: Option<Summary> = None;
    for (&t, runs) in vs.iter().zip(results) {
        let (rec, sums) = summarise(runs, &[key]);
        if json {
            print_json(&rec);
        }
        let s = *summary_of(&sums, key);
        if t == Transport::Kernel {
            kernel = Some(s);
        }
        let scaled = s.scaled(scale);
        let vs_kernel = match (&kernel, lower_is_better) {
            _ if t == Transport::Kernel => "1.00x".into(),
            (Some(k), false) => ratio_cell(&s, k),
            (Some(k), true) => ratio_cell(k, &s), // kernel latency / ours: > 1 means faster
            (None, _) => "-".into(),
        };
        rows.push(vec![
            bench.to_string(),
            t.name().to_string(),
            fmt_summary(&scaled, 2),
            vs_kernel,
        ]);
    }
    rows
}

pub fn run_bw(a: &BwArgs, json: bool) -> io::Result<()> {
    let cfg = PipeConfig {
        pipe_size: a.pipe_size,
        pool: a.pool,
        slot_size: a.slot_size,
    };
    let d = Duration::from_secs_f64(a.duration);
    let vs = crate::pipe_bench::variants(&a.transport, &[a.pool]);
    let bar = progress((vs.len() * a.runs) as u64, "bw", json);
    let results = alternate(&vs, a.runs, &bar, |v| bw_once(v.transport, &cfg, a.size, d))?;
    bar.finish_and_clear();
    let rows = table_for("bw", &a.transport, &results, "mbps", 1.0, false, json);
    if !json {
        println!(
            "bw: {} B writes, {} B pipe, {} s x {} runs (median [95% CI])",
            a.size, a.pipe_size, a.duration, a.runs
        );
        print_table(&["bench", "transport", "MB/s", "vs kernel"], &rows);
    }
    Ok(())
}

pub fn run_lat(a: &LatArgs, json: bool) -> io::Result<()> {
    let d = Duration::from_secs_f64(a.duration);
    let vs = crate::pipe_bench::variants(&a.transport, &[PoolPolicy::default()]);
    let bar = progress((vs.len() * a.runs) as u64, "lat", json);
    let results = alternate(&vs, a.runs, &bar, |v| lat_once(v.transport, d))?;
    bar.finish_and_clear();
    let rows = table_for("lat", &a.transport, &results, "lat_avg_ns", 1e3, true, json);
    if !json {
        println!("lat: 1-byte round trip, {} s x {} runs (median [95% CI]); 'vs kernel' = kernel time / this", a.duration, a.runs);
        print_table(&["bench", "transport", "avg µs", "vs kernel"], &rows);
    }
    Ok(())
}
