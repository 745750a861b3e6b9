//! The quick suite (no subcommand): every benchmark briefly, every transport side by side, in
//! about 90 s on this 2-core machine, as one table with the ratios to the kernel.

use crate::harness::{Case, Column, Harness, Run, RunArgs, MIN_RUNS};
use crate::lmbench::{arms, bw_case, bw_once, idle_once, lat_case, lat_once};
use crate::pipe_bench::{self, variants, Workload};
use crate::transport::{PipeConfig, Transport};
use pagepipe::PoolPolicy;
use std::io;
use std::time::Duration;

/// How long a blocked reader waits in the idle case.
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// `pagepipe-bench` with no subcommand.
///
/// # Errors
/// A transport cannot be opened or fails mid-run.
pub fn run(opts: &RunArgs) -> io::Result<()> {
    let kp = [Transport::Kernel, Transport::Pagepipe];
    let all = [Transport::Kernel, Transport::Unix, Transport::Pagepipe];
    let second = Duration::from_secs(1);
    // The fewest runs with a 95% interval, so the suite fits in about 90 s. It finds a 10%
    // difference with 82% power (`stats`' tests); the subcommands' 12 runs find 5%.
    let mut harness = Harness::new(opts, "quick", MIN_RUNS)?;
    let vs = variants(&kp, &[PoolPolicy::default()]);
    for (w, r) in [(1, 1), (5, 5)] {
        let wl = Workload {
            writers: w,
            readers: r,
            msgsize: 64 * 1024,
            duration: second,
            pipe: PipeConfig {
                pipe_size: 1 << 20,
                ..PipeConfig::default()
            },
        };
        let columns = [
            pipe_bench::COLUMNS[0],
            pipe_bench::COLUMNS[1],
            pipe_bench::COLUMNS[3],
        ];
        let case = pipe_bench::case(&vs, w, r, &columns);
        harness.run(case, |i| pipe_bench::measure(vs[i], &wl))?;
    }
    let cfg = PipeConfig::default();
    harness.run(bw_case(&all, "bw 64 KiB"), |i| {
        bw_once(all[i], &cfg, 64 * 1024, second).map(Run::from)
    })?;
    let mut lat = lat_case(&all, "lat 1 B");
    lat.columns.truncate(1);
    harness.run(lat, |i| lat_once(all[i], second / 2))?;
    harness.run(idle_case(&kp), |i| {
        idle_once(kp[i], IDLE_WAIT).map(Run::from)
    })?;
    harness.finish("pagepipe-bench quick suite: kernel pipe, AF_UNIX socketpair and pagepipe")
}

/// CPU of a reader blocked on an empty pipe.
fn idle_case(transports: &[Transport]) -> Case {
    Case {
        bench: "idle",
        title: format!("idle reader {} s", IDLE_WAIT.as_secs_f64()),
        arms: arms(transports),
        columns: vec![Column::new("cpu_pct", "% of a core", 1.0, 3)],
    }
}
