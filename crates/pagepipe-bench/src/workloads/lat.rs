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
    /// pagepipe slot size (seed 001: larger slots = "fatpipe"; lmbench's lat_pipe is the
    /// seed's second benchmark).
    #[arg(long, default_value_t = 4096)]
    pub slot_size: usize,
}

/// One lat run: 1-byte ping-pong between this thread and an echo thread or child process over
/// two channels made with `cfg`.
pub fn lat_once(
    t: Transport,
    cfg: &PipeConfig,
    duration: Duration,
    between: Between,
) -> io::Result<Run> {
    check_between(t, between)?;
    let (mut w1, mut r1) = transport::open(t, cfg, 1, 1)?;
    let (mut w2, mut r2) = transport::open(t, cfg, 1, 1)?;
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
    let mut round = || -> io::Result<()> {
        ping.write_all(&b)?;
        pong_in.read_exact(&mut b)
    };
    let warm = Instant::now() + duration / 5;
    while Instant::now() < warm {
        round()?;
    }
    // One clock read per round trip, as the plain loop (examples/rtrb_pingpong.rs) has: each
    // round trip is timed from the end of the one before. Two reads per round (start and end)
    // cost 30 ns each here, a third of rtrb's whole round trip.
    let mut tally = Tally::default();
    let t0 = Instant::now();
    let mut last = t0;
    while last - t0 < duration {
        round()?;
        let now = Instant::now();
        tally.record(now - last, &mut hist);
        last = now;
    }
    tally.fold_into(&mut hist);
    drop(ping); // end of file for the echo side
    echo.join(duration + CHILD_GRACE)?;
    let mut rec = Record::new("lat", t.name()).config("between", between.name());
    if t.is_pagepipe() {
        rec = rec.config("slot_size", cfg.slot_size);
    }
    hist.put_metrics(&mut rec);
    rec.metric("round_trips", hist.count() as f64);
    Ok(Run {
        record: rec,
        latency: Some(hist),
    })
}

/// Round trips shorter than this many ns are counted in [`Tally`]'s own array.
const TALLY_NS: usize = 4096;

/// Counts round trips in a plain array, one counter per ns below [`TALLY_NS`] (exact), and
/// hands them to the histogram once at the end: one increment per round trip, where recording
/// each in the histogram took about 20 ns of rtrb's ~0.2 µs round trip (measured here).
/// Longer round trips go to the histogram at once.
struct Tally(Vec<u64>);

impl Default for Tally {
    fn default() -> Self {
        Tally(vec![0; TALLY_NS])
    }
}

impl Tally {
    fn record(&mut self, d: Duration, hist: &mut Histogram) {
        match usize::try_from(d.as_nanos())
            .ok()
            .and_then(|ns| self.0.get_mut(ns))
        {
            Some(count) => *count += 1,
            None => hist.record(d),
        }
    }

    fn fold_into(self, hist: &mut Histogram) {
        for (ns, &count) in self.0.iter().enumerate().filter(|(_, &c)| c > 0) {
            hist.record_n(ns as u64, count);
        }
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

/// `pagepipe-bench lat`.
///
/// # Errors
/// A transport cannot be opened or fails mid-run.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    let d = Duration::from_secs_f64(a.duration);
    let cfg = PipeConfig {
        slot_size: a.slot_size,
        ..PipeConfig::default()
    };
    let mut harness = Harness::new(opts, "lat", RECOMMENDED_RUNS)?;
    for &between in &a.between {
        let ts = transport::usable(&a.transport, between);
        harness.run(lat_case(&ts, &between.title("lat 1 B")), |i| {
            lat_once(ts[i], &cfg, d, between)
        })?;
    }
    harness.finish(&format!("lat: 1-byte round trip, {} s per run", a.duration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_hands_every_round_trip_to_the_histogram() {
        let mut hist = Histogram::default();
        let mut tally = Tally::default();
        for ns in [0, 180, 180, 4095, 4096, 1_000_000] {
            tally.record(Duration::from_nanos(ns), &mut hist);
        }
        assert_eq!(hist.count(), 2, "the long ones at once");
        tally.fold_into(&mut hist);
        assert_eq!(hist.count(), 6);
        assert!((hist.quantile_ns(0.5) - 180.0).abs() <= 1.0);
        assert!(hist.max_ns() >= 999_000.0);
    }
}
