//! `lat`: lmbench's lat_pipe / lat_unix, a 1-byte ping-pong round trip between two threads or
//! two processes, for every transport side by side.

use crate::child::{spawn, Between, CHILD_GRACE};
use crate::common::{Histogram, Record};
use crate::harness::{Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use crate::transport::{self, PipeConfig, Transport};
use crate::workloads::lmbench::{arms, check_between};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Options of `pagepipe-bench lat`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
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

/// `pagepipe-bench lat`.
///
/// # Errors
/// A transport cannot be opened or fails mid-run.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
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
