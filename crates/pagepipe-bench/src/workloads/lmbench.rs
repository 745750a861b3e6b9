//! `bw` and `lat`: lmbench's bw_pipe / bw_unix (64 KiB writes between two threads or two
//! processes) and lat_pipe / lat_unix (a 1-byte ping-pong round trip), for every transport side
//! by side; and the CPU of a reader blocked on an empty pipe (`idle`).

use crate::child::{spawn, until_hangup, Between, Flags, CHILD_GRACE};
use crate::common::{core_rtt_ns, Histogram, Record, Usage};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use crate::transport::{self, parse_pool, PipeConfig, Transport, W};
use pagepipe::PoolPolicy;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Options of `pagepipe-bench bw`.
#[derive(clap::Args, Clone, Debug)]
pub struct BwArgs {
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
    /// pagepipe pool policy: adaptive[:keep], unified[:keep:burst], tmppage, none.
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

/// Options of `pagepipe-bench lat`.
#[derive(clap::Args, Clone, Debug)]
pub struct LatArgs {
    /// Transports to compare, alternating in one run (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "kernel,unix,pagepipe")]
    pub transport: Vec<Transport>,
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

/// Refuses a transport that cannot connect a forked child (it would wait forever).
fn check_between(t: Transport, between: Between) -> io::Result<()> {
    if t.works_between(between) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{} runs between threads only", t.name()),
    ))
}

/// bw's writer: writes until told to stop or the reader hangs up; returns its usage over the
/// measured window.
fn write_until_hangup(mut w: W, flags: &Flags, size: usize) -> io::Result<Usage> {
    let buf = vec![0x5au8; size];
    until_hangup(flags, || w.write_all(&buf))
}

/// One lat run: 1-byte ping-pong between this thread and an echo thread or child process over
/// two channels.
pub fn lat_once(t: Transport, duration: Duration, between: Between) -> io::Result<Run> {
    check_between(t, between)?;
    let cfg = PipeConfig::default();
    let (mut w1, mut r1) = transport::open(t, &cfg, 1, 1)?;
    let (mut w2, mut r2) = transport::open(t, &cfg, 1, 1)?;
    let (mut echo_in, mut echo_out) = (r1.pop().expect("one"), w2.pop().expect("one"));
    let echo = move || -> io::Result<()> {
        let mut b = [0u8; 1];
        while echo_in.read(&mut b)? == 1 {
            echo_out.write_all(&b)?;
        }
        Ok(())
    };
    let echo = spawn(between, echo, || {
        w1.clear();
        r2.clear();
    })?;
    let (mut ping, mut pong_in) = (w1.pop().expect("one"), r2.pop().expect("one"));
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
    drop(ping); // end of file for the echo side
    echo.join(duration + CHILD_GRACE)?;
    let mut rec = Record::new("lat", t.name()).config("between", between.name());
    hist.put_metrics(&mut rec);
    rec.metric("round_trips", hist.count() as f64);
    Ok(Run {
        record: rec,
        latency: Some(hist),
    })
}

/// CPU used by a reader blocked on an empty pipe for `wait`, as a percentage of one core: a
/// reader thread's own `RUSAGE_THREAD`, or a reader process's whole `RUSAGE_SELF`.
pub fn idle_once(t: Transport, wait: Duration, between: Between) -> io::Result<Record> {
    check_between(t, between)?;
    let (mut ws, mut rs) = transport::open(t, &PipeConfig::default(), 1, 1)?;
    let mut r = rs.pop().expect("one reader");
    let reader = move || -> io::Result<f64> {
        let usage = || match between {
            Between::Threads => Usage::thread(),
            Between::Processes => Usage::now(),
        };
        let u0 = usage();
        let mut b = [0u8; 1];
        r.read_exact(&mut b)?;
        Ok(usage().since(u0).cpu_s)
    };
    let reader = spawn(between, reader, || ws.clear())?;
    let mut w = ws.pop().expect("one writer");
    std::thread::sleep(wait);
    w.write_all(b"x")?;
    let cpu = reader.join(wait + CHILD_GRACE)?;
    let mut rec = Record::new("idle", t.name())
        .config("between", between.name())
        .config("wait_s", wait.as_secs_f64());
    rec.metric("cpu_pct", cpu / wait.as_secs_f64() * 100.0);
    Ok(rec)
}

/// The arms of a transport list.
pub fn arms(transports: &[Transport]) -> Vec<Arm> {
    transports.iter().map(|t| Arm::new(t.name())).collect()
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

/// The lat case on `transports`.
pub fn lat_case(transports: &[Transport], title: &str) -> Case {
    Case {
        bench: "lat",
        title: title.into(),
        arms: arms(transports),
        columns: vec![
            Column::new("lat_avg_ns", "round trip avg µs", 1e3, 2),
            Column::new("lat_p99_ns", "round trip p99 µs", 1e3, 2),
        ],
    }
}

/// `pagepipe-bench bw`.
///
/// # Errors
/// A transport cannot be opened or fails mid-run.
pub fn run_bw(a: &BwArgs, opts: &RunArgs) -> io::Result<()> {
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

/// `pagepipe-bench lat`.
///
/// # Errors
/// A transport cannot be opened or fails mid-run.
pub fn run_lat(a: &LatArgs, opts: &RunArgs) -> io::Result<()> {
    let d = Duration::from_secs_f64(a.duration);
    let mut harness = Harness::new(opts, "lat", RECOMMENDED_RUNS)?;
    for &between in &a.between {
        let ts = transport::usable(&a.transport, between);
        harness.run(lat_case(&ts, &between.title("lat 1 B")), |i| {
            lat_once(ts[i], d, between)
        })?;
    }
    harness.finish(&format!("lat: 1-byte round trip, {} s per run", a.duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transport_moves_bytes_between_processes() {
        let _serial = crate::child::tests::serial();
        let short = Duration::from_millis(30);
        let mut all = vec![Transport::Kernel, Transport::Unix, Transport::Pagepipe];
        if cfg!(feature = "iceoryx2") {
            all.extend([Transport::Iceoryx2, Transport::Iceoryx2Spin]);
        }
        for t in [Transport::Rtrb, Transport::PagepipeChunk] {
            let bw = bw_once(t, &PipeConfig::default(), 65536, short, Between::Threads);
            let bw = bw.unwrap();
            assert!(bw.get("mbps").unwrap() > 0.0, "{t:?}");
            assert!(bw.get("core_rtt_ns").unwrap() > 0.0, "{t:?}");
            let lat = lat_once(t, short, Between::Threads).unwrap();
            assert!(lat.record.get("round_trips").unwrap() > 0.0, "{t:?}");
        }
        let e = bw_once(
            Transport::Rtrb,
            &PipeConfig::default(),
            65536,
            short,
            Between::Processes,
        );
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::Unsupported);
        all.push(Transport::PagepipeChunk);
        for t in all {
            let bw = bw_once(t, &PipeConfig::default(), 65536, short, Between::Processes);
            assert!(bw.unwrap().get("mbps").unwrap() > 0.0, "{t:?}");
            let lat = lat_once(t, short, Between::Processes).unwrap();
            assert!(lat.record.get("round_trips").unwrap() > 0.0, "{t:?}");
            let idle = idle_once(t, short, Between::Processes).unwrap();
            assert_eq!(idle.config["between"], "processes");
            if matches!(
                t,
                Transport::Iceoryx2 | Transport::Iceoryx2Spin | Transport::PagepipeChunk
            ) {
                continue; // one writer and one reader only
            }
            let v = crate::workloads::pipe::Variant {
                transport: t,
                pool: None,
            };
            let wl = crate::workloads::pipe::Workload {
                writers: 2,
                readers: 2,
                msgsize: 4096,
                duration: short,
                pipe: PipeConfig::default(),
                between: Between::Processes,
            };
            let run = crate::workloads::pipe::measure(v, &wl).unwrap();
            assert!(run.record.get("writes_per_s").unwrap() > 0.0, "{t:?}");
        }
    }
}
