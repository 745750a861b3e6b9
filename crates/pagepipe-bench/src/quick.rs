//! The quick suite (no subcommand): every benchmark briefly, every transport side by side,
//! between threads and between processes, then bandwidth and round trip again with 1 and 2 busy
//! loops sharing the cores, in about two minutes on this 2-core machine, as one table with the
//! ratios to the kernel.

use crate::buffer::Offsets;
use crate::child::Between;
use crate::harness::{Harness, Run, RunArgs, MIN_RUNS};
use crate::transport::{PipeConfig, Transport};
use crate::workloads::bw::{bw_case, bw_once, Placements};
use crate::workloads::idle::{idle_case, idle_once};
use crate::workloads::lat::{lat_case, lat_once};
use crate::workloads::pipe::{self, variants, Workload};
use crate::workloads::scale;
use pagepipe::PoolPolicy;
use std::io;
use std::time::Duration;

/// Options of the quick suite.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Quick suite only: seconds the idle reader in another process blocks on an empty pipe
    /// (the target, < 1% of a core, is stated for 10 s; 6 runs per transport each wait this
    /// long).
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub idle_wait: f64,
}

/// How long a blocked reader thread waits in the idle case between threads.
const IDLE_THREAD_WAIT: Duration = Duration::from_millis(500);
/// Seconds measured per run of pipe and bw (a run also warms up for a quarter or fifth of it).
const STREAM_S: f64 = 0.4;
/// Seconds measured per lat run.
const LAT_S: f64 = 0.25;
const BOTH: [Between; 2] = [Between::Threads, Between::Processes];

/// `pagepipe-bench` with no subcommand.
///
/// # Errors
/// A transport cannot be opened or fails mid-run; `InvalidInput` for a bad `--idle-wait`.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    if !(a.idle_wait > 0.0 && a.idle_wait.is_finite()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--idle-wait {} must be a positive number of seconds",
                a.idle_wait
            ),
        ));
    }
    let kp = [Transport::Kernel, Transport::Pagepipe];
    let all = [Transport::Kernel, Transport::Unix, Transport::Pagepipe];
    let stream = Duration::from_secs_f64(STREAM_S);
    // The fewest runs with a 95% interval, so the suite fits in about 90 s. It finds a 10%
    // difference with 82% power (`stats`' tests); the subcommands' 12 runs find 5%.
    let mut harness = Harness::new(opts, "quick", MIN_RUNS)?;
    let vs = variants(&kp, &[PoolPolicy::default()]);
    for (w, r) in [(1, 1), (5, 5)] {
        for between in BOTH {
            let wl = Workload {
                writers: w,
                readers: r,
                msgsize: 64 * 1024,
                duration: stream,
                pipe: PipeConfig {
                    pipe_size: 1 << 20,
                    ..PipeConfig::default()
                },
                between,
            };
            let columns = [pipe::COLUMNS[0], pipe::COLUMNS[1], pipe::COLUMNS[3]];
            let case = pipe::case(&vs, w, r, between, &columns);
            harness.run(case, |i| pipe::measure(vs[i], &wl))?;
        }
    }
    let cfg = PipeConfig::default();
    let mut placements = Placements::default();
    for between in BOTH {
        let ts = peers(&all, between);
        let title = between.title("bw 64 KiB");
        harness.run(bw_case(&ts, &title), |i| {
            let rec = bw_once(ts[i], &cfg, 64 * 1024, Offsets::default(), stream, between)?;
            placements.add(&rec);
            Ok(Run::from(rec))
        })?;
        harness.note(placements.note(&title));
    }
    for between in BOTH {
        let ts = peers(&all, between);
        let mut lat = lat_case(&ts, &between.title("lat 1 B"));
        lat.columns.truncate(1);
        harness.run(lat, |i| {
            lat_once(
                ts[i],
                &PipeConfig::default(),
                Duration::from_secs_f64(LAT_S),
                between,
            )
        })?;
    }
    let idle_process_wait = Duration::from_secs_f64(a.idle_wait);
    for (between, wait) in [
        (Between::Threads, IDLE_THREAD_WAIT),
        (Between::Processes, idle_process_wait),
    ] {
        harness.run(idle_case(&kp, between, wait), |i| {
            idle_once(kp[i], wait, between).map(Run::from)
        })?;
    }
    let (case, scale_args) = scale::quick(&kp);
    harness.run(case, |i| scale::measure(kp[i], &scale_args))?;
    if opts.load == 0 {
        for n in LOADED_ROWS {
            loaded_rows(&mut harness, &kp, n)?;
        }
    }
    harness.finish(
        "pagepipe-bench quick suite: kernel pipe, AF_UNIX socketpair and pagepipe, between \
         threads and between processes",
    )
}

/// The busy loops of the suite's loaded rows (run idle, with no `--load`).
const LOADED_ROWS: [usize; 2] = [1, 2];

/// Bandwidth (threads and processes) and the round trip (threads) of the kernel pipe and
/// pagepipe with `n` busy loops sharing the cores, the load named in each row. The round trip
/// also runs the futex floor (`Transport::Futex`): on a busy machine a round trip that sleeps
/// costs about the kernel's, and the row shows that floor beside pagepipe.
fn loaded_rows(harness: &mut Harness, kp: &[Transport], n: usize) -> io::Result<()> {
    let _load = crate::load::Load::start(n)?;
    let label = crate::load::label(n);
    let cfg = PipeConfig::default();
    let stream = Duration::from_secs_f64(STREAM_S);
    for between in BOTH {
        let title = format!("{} · {label}", between.title("bw 64 KiB"));
        harness.run(bw_case(kp, &title), |i| {
            bw_once(kp[i], &cfg, 64 * 1024, Offsets::default(), stream, between).map(Run::from)
        })?;
    }
    let between = Between::Threads;
    let ts = [kp, &[Transport::Futex]].concat();
    let mut lat = lat_case(&ts, &format!("{} · {label}", between.title("lat 1 B")));
    lat.columns.truncate(1);
    harness.run(lat, |i| {
        lat_once(ts[i], &cfg, Duration::from_secs_f64(LAT_S), between)
    })
}

/// `transports`, and between processes iceoryx2 (waiting on its event) where it is built in.
fn peers(transports: &[Transport], between: Between) -> Vec<Transport> {
    let mut ts = transports.to_vec();
    if cfg!(feature = "iceoryx2") && between == Between::Processes {
        ts.push(Transport::Iceoryx2);
    }
    ts
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
        for t in [Transport::Rtrb, Transport::PagepipeChunk, Transport::Futex] {
            let bw = bw_once(
                t,
                &PipeConfig::default(),
                65536,
                Offsets::default(),
                short,
                Between::Threads,
            );
            let bw = bw.unwrap();
            assert!(bw.get("mbps").unwrap() > 0.0, "{t:?}");
            assert!(bw.get("core_rtt_ns").unwrap() > 0.0, "{t:?}");
            let lat = lat_once(t, &PipeConfig::default(), short, Between::Threads).unwrap();
            assert!(lat.record.get("round_trips").unwrap() > 0.0, "{t:?}");
        }
        let e = bw_once(
            Transport::Rtrb,
            &PipeConfig::default(),
            65536,
            Offsets::default(),
            short,
            Between::Processes,
        );
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::Unsupported);
        all.extend([Transport::PagepipeChunk, Transport::Futex]);
        for t in all {
            let bw = bw_once(
                t,
                &PipeConfig::default(),
                65536,
                Offsets::default(),
                short,
                Between::Processes,
            );
            assert!(bw.unwrap().get("mbps").unwrap() > 0.0, "{t:?}");
            let lat = lat_once(t, &PipeConfig::default(), short, Between::Processes).unwrap();
            assert!(lat.record.get("round_trips").unwrap() > 0.0, "{t:?}");
            let idle = idle_once(t, short, Between::Processes).unwrap();
            assert_eq!(idle.config["between"], "processes");
            if matches!(
                t,
                Transport::Iceoryx2
                    | Transport::Iceoryx2Spin
                    | Transport::PagepipeChunk
                    | Transport::Futex
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
