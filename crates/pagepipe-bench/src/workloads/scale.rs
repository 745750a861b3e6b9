//! `pagepipe-bench scale`: what one pipe costs and how many a process can hold (issue 23), the
//! kernel pipe and pagepipe side by side.
//!
//! Each run of a transport measures, in this order:
//! 1. per idle pipe: `--pipes` pipes alive in this process, each with both ends and 1 byte
//!    queued; descriptors, address space and memory before and after, divided by the count;
//! 2. create+drop: `--iterations` times, make a pipe (both ends) and drop both ends, each
//!    timed; the median and p99;
//! 3. live pipes: in a forked child whose `RLIMIT_NOFILE` is `--fd-limit`, pipes made and held
//!    until one fails (the parent's limit is untouched); how many, and the error.
//!
//! The harness alternates the transports over `--runs` and gives each metric's median and the
//! paired ratio; [`targets`] sets the medians beside issue 23's targets.

mod footprint;
mod targets;

use crate::child::{spawn, Between, CHILD_GRACE};
use crate::common::{Histogram, Record};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use crate::transport::Transport;
use footprint::Footprint;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Options of `pagepipe-bench scale`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Transports to compare, alternating (the first is the baseline): kernel, pagepipe.
    #[arg(long, value_delimiter = ',', default_value = "kernel,pagepipe")]
    pub transport: Vec<Transport>,
    /// Pipes made and dropped, each timed, per run.
    #[arg(long, default_value_t = 2000)]
    pub iterations: usize,
    /// Idle pipes held at once (1 byte queued in each) to measure what one costs.
    #[arg(long, default_value_t = 1000)]
    pub pipes: usize,
    /// The descriptor limit (`RLIMIT_NOFILE`) of the child that makes pipes until one fails.
    #[arg(long, default_value_t = 1024)]
    pub fd_limit: u64,
    /// Pipe capacity in bytes (the kernel's is set with `F_SETPIPE_SZ` when it is not 64 KiB).
    #[arg(long, default_value_t = pagepipe::DEFAULT_CAPACITY)]
    pub pipe_size: usize,
}

/// Create+drop iterations before the timed ones.
const WARMUP: usize = 20;
/// Pause before the idle pipes are counted, so that descriptors and pages the previous run
/// closed (freed after an RCU grace period) are gone from the memory cgroup's charge.
const SETTLE: Duration = Duration::from_millis(50);

/// Both ends of one pipe (the reader is only held open).
enum Ends {
    Kernel {
        w: io::PipeWriter,
        _r: io::PipeReader,
    },
    Pagepipe {
        w: pagepipe::Writer,
        _r: pagepipe::Reader,
    },
}

impl Ends {
    /// A pipe of `pipe_size` bytes: `pipe2(O_CLOEXEC)` (with `F_SETPIPE_SZ` unless the size
    /// is the kernel's 64 KiB default), or `pagepipe::pipe()` (`Builder` for another size).
    fn new(t: Transport, pipe_size: usize) -> io::Result<Ends> {
        match t {
            Transport::Kernel => {
                let (r, w) = io::pipe()?;
                if pipe_size != pagepipe::DEFAULT_CAPACITY {
                    let size = libc::c_int::try_from(pipe_size)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                    // SAFETY: fcntl on a descriptor `w` owns and keeps open for the call.
                    if unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size) } < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(Ends::Kernel { w, _r: r })
            }
            Transport::Pagepipe => {
                let (w, r) = if pipe_size == pagepipe::DEFAULT_CAPACITY {
                    pagepipe::pipe()?
                } else {
                    pagepipe::Builder::new().capacity(pipe_size).build()?
                };
                Ok(Ends::Pagepipe { w, _r: r })
            }
            other => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("scale compares kernel and pagepipe, not {}", other.name()),
            )),
        }
    }

    /// Queues one byte.
    fn queue_byte(&mut self) -> io::Result<()> {
        match self {
            Ends::Kernel { w, .. } => w.write_all(b"x"),
            Ends::Pagepipe { w, .. } => w.write_all(b"x"),
        }
    }
}

/// What one idle pipe holds: `pipes` of them made, each with a byte queued, with the process's
/// footprint taken before and after.
fn per_idle_pipe(t: Transport, pipes: usize, pipe_size: usize) -> io::Result<Footprint> {
    drop(Ends::new(t, pipe_size)?); // whatever a transport sets up once is not a pipe's cost
    std::thread::sleep(SETTLE);
    let mut held = Vec::with_capacity(pipes);
    let before = Footprint::now()?;
    for _ in 0..pipes {
        let mut ends = Ends::new(t, pipe_size)?;
        ends.queue_byte()?;
        held.push(ends);
    }
    let after = Footprint::now()?;
    drop(held);
    Ok(after.per(before, pipes))
}

/// The time of each of `iterations` create+drops.
fn create_drop(t: Transport, iterations: usize, pipe_size: usize) -> io::Result<Histogram> {
    for _ in 0..WARMUP {
        drop(Ends::new(t, pipe_size)?);
    }
    let mut hist = Histogram::default();
    for _ in 0..iterations {
        let start = Instant::now();
        drop(Ends::new(t, pipe_size)?);
        hist.record(start.elapsed());
    }
    Ok(hist)
}

/// The most pipes a child with `fd_limit` descriptors holds: `(pipes, descriptors open before
/// the first, the error that stopped it)`. It stops without an error at `fd_limit` pipes (no
/// pipe takes less than one descriptor).
fn live_pipes(t: Transport, fd_limit: u64, pipe_size: usize) -> io::Result<(u64, u64, String)> {
    let child = move || -> io::Result<((u64, u64), Vec<u64>)> {
        let limit = libc::rlimit {
            rlim_cur: fd_limit as libc::rlim_t,
            rlim_max: fd_limit as libc::rlim_t,
        };
        // SAFETY: setrlimit with a valid rlimit, in this forked child only.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            let e = io::Error::last_os_error();
            let msg = format!("setrlimit(RLIMIT_NOFILE, {fd_limit}) for --fd-limit: {e}");
            return Err(io::Error::new(e.kind(), msg));
        }
        let open = std::fs::read_dir("/proc/self/fd")?.count() as u64 - 1; // less read_dir's own
        let mut held = Vec::new();
        let stop = loop {
            if held.len() as u64 >= fd_limit {
                break "none: stopped at --fd-limit pipes".to_string();
            }
            match Ends::new(t, pipe_size) {
                Ok(ends) => held.push(ends),
                Err(e) => break describe(&e),
            }
        };
        let words = stop.bytes().map(u64::from).collect();
        Ok(((held.len() as u64, open), words))
        // The child ends with _exit: `held` is never dropped.
    };
    let ((pipes, open), words) = spawn(Between::Processes, child, || {})?.join(CHILD_GRACE)?;
    Ok((
        pipes,
        open,
        words.iter().map(|&b| b as u8 as char).collect(),
    ))
}

/// An error as the table shows it: the errno's name where it is the expected one.
fn describe(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EMFILE) => format!("EMFILE: {e}"),
        Some(libc::ENFILE) => format!("ENFILE: {e}"),
        Some(_) => e.to_string(),
        None => format!("{:?}: {e}", e.kind()),
    }
}

/// One run of `t`: every metric of the module's doc.
///
/// # Errors
/// `Unsupported` for a transport other than kernel and pagepipe; a pipe cannot be made or
/// written where one must be (the idle pipes, create+drop); `/proc/self` cannot be read; the
/// child cannot be forked, cannot set its limit, or fails.
pub fn measure(t: Transport, a: &Args) -> io::Result<Run> {
    let idle = per_idle_pipe(t, a.pipes, a.pipe_size)?;
    let hist = create_drop(t, a.iterations, a.pipe_size)?;
    let (live, open, stop) = live_pipes(t, a.fd_limit, a.pipe_size)?;
    let mut rec = Record::new("scale", t.name())
        .config("iterations", a.iterations)
        .config("pipes", a.pipes)
        .config("fd_limit", a.fd_limit)
        .config("pipe_size", a.pipe_size)
        .config("fds_open_before_live", open)
        .config("live_stopped_by", stop);
    rec.metric("create_drop_p50_ns", hist.quantile_ns(0.5));
    rec.metric("create_drop_p99_ns", hist.quantile_ns(0.99));
    rec.metric("fds_per_pipe", idle.fds);
    rec.metric("vm_kib_per_pipe", idle.vm_kib);
    rec.metric("rss_kib_per_pipe", idle.rss_kib);
    rec.metric("shmem_kib_per_pipe", idle.shmem_kib);
    rec.metric("pss_kib_per_pipe", idle.pss_kib);
    if let (Some(all), Some(kernel)) = (idle.memcg_kib, idle.memcg_kernel_kib) {
        rec.metric("memcg_kib_per_pipe", all);
        rec.metric("memcg_kernel_kib_per_pipe", kernel);
    }
    if let (Some(heap), Some(memory)) = (idle.heap_kib, idle.memory_kib()) {
        rec.metric("heap_kib_per_pipe", heap);
        rec.metric("memory_kib_per_pipe", memory);
    }
    rec.metric("live_pipes", live as f64);
    Ok(Run {
        record: rec,
        latency: Some(hist),
    })
}

/// Every metric, in table order.
pub const COLUMNS: [Column; 12] = [
    Column::new("create_drop_p50_ns", "create+drop p50 µs", 1e3, 2),
    Column::new("create_drop_p99_ns", "create+drop p99 µs", 1e3, 2),
    Column::new("fds_per_pipe", "fds / idle pipe", 1.0, 2),
    Column::new("vm_kib_per_pipe", "address space MiB / pipe", 1024.0, 1),
    Column::new("rss_kib_per_pipe", "RSS KiB / pipe", 1.0, 1),
    Column::new("shmem_kib_per_pipe", "of it shared KiB / pipe", 1.0, 1),
    Column::new("pss_kib_per_pipe", "PSS KiB / pipe", 1.0, 1),
    Column::new("memcg_kib_per_pipe", "memcg KiB / pipe", 1.0, 1),
    Column::new(
        "memcg_kernel_kib_per_pipe",
        "of it kernel KiB / pipe",
        1.0,
        1,
    ),
    Column::new("heap_kib_per_pipe", "heap KiB / pipe", 1.0, 2),
    Column::new(
        "memory_kib_per_pipe",
        "memcg, heap exact, KiB / pipe",
        1.0,
        1,
    ),
    Column::new("live_pipes", "live pipes", 1.0, 0),
];

/// The case of `transports` with `columns`.
pub fn case(transports: &[Transport], title: String, columns: &[Column]) -> Case {
    Case {
        bench: "scale",
        title,
        arms: transports.iter().map(|t| Arm::new(t.name())).collect(),
        columns: columns.to_vec(),
    }
}

/// The quick suite's row: `transports` on 64 KiB pipes, short (300 create+drops, 100 idle pipes,
/// a 1024-descriptor limit), with the headline metrics.
pub fn quick(transports: &[Transport]) -> (Case, Args) {
    let a = Args {
        transport: transports.to_vec(),
        iterations: 300,
        pipes: 100,
        fd_limit: 1024,
        pipe_size: pagepipe::DEFAULT_CAPACITY,
    };
    let headline = [
        "create_drop_p50_ns",
        "fds_per_pipe",
        "vm_kib_per_pipe",
        "live_pipes",
    ];
    let columns: Vec<Column> = COLUMNS
        .into_iter()
        .filter(|c| headline.contains(&c.metric))
        .collect();
    let title = "scale: 64 KiB pipes, 100 idle, 1024 fds".to_string();
    (case(transports, title, &columns), a)
}

/// `pagepipe-bench scale`.
///
/// # Errors
/// `InvalidInput` for no iterations, no pipes or an `--fd-limit` under 8; a pipe cannot be
/// made where one must be (create+drop, the idle pipes); the child fails.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    if a.iterations == 0 || a.pipes == 0 || a.fd_limit < 8 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--iterations {} and --pipes {} must be positive, --fd-limit {} at least 8",
                a.iterations, a.pipes, a.fd_limit
            ),
        ));
    }
    let mut harness = Harness::new(opts, "scale", RECOMMENDED_RUNS)?;
    let title = format!(
        "{} B pipes, {} idle, {} fds",
        a.pipe_size, a.pipes, a.fd_limit
    );
    let mut records: Vec<Vec<Record>> = vec![Vec::new(); a.transport.len()];
    harness.run(case(&a.transport, title, &COLUMNS), |i| {
        let run = measure(a.transport[i], a)?;
        records[i].push(run.record.clone());
        Ok(run)
    })?;
    harness.note(format!(
        "create+drop: make a pipe with both ends and drop both, {} times per run. Per pipe: {} \
         pipes held with 1 byte queued in each, the process's /proc/self/fd entries, VmSize, \
         VmRSS, RssShmem and smaps_rollup Pss, and its memory cgroup's charge (user and kernel \
         pages, each once; other processes of the cgroup add noise), before and after, divided \
         by the count. live pipes: pipes held by a child with RLIMIT_NOFILE {} (no data \
         queued) until one fails.",
        a.iterations, a.pipes, a.fd_limit
    ));
    let stops = a.transport.iter().zip(&records).filter_map(|(t, rs)| {
        let r = rs.first()?;
        Some(format!(
            "live pipes, {}: {} descriptors open before the first; stopped by {}",
            t.name(),
            r.config["fds_open_before_live"],
            r.config["live_stopped_by"].as_str().unwrap_or_default()
        ))
    });
    for line in stops.collect::<Vec<_>>() {
        harness.note(line);
    }
    harness.finish(&format!(
        "scale: what one pipe costs and how many a process holds, {} B pipes",
        a.pipe_size
    ))?;
    let arm = |t: Transport| {
        let i = a.transport.iter().position(|&x| x == t)?;
        Some(records[i].as_slice())
    };
    let (Some(kernel), Some(pagepipe)) = (arm(Transport::Kernel), arm(Transport::Pagepipe)) else {
        return Ok(());
    };
    targets::print(kernel, pagepipe, a, opts.json);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_transports_report_every_metric_with_tiny_counts() {
        let _serial = crate::child::tests::serial();
        let a = Args {
            transport: vec![Transport::Kernel, Transport::Pagepipe],
            iterations: 20,
            pipes: 40,
            fd_limit: 128,
            pipe_size: pagepipe::DEFAULT_CAPACITY,
        };
        for t in [Transport::Kernel, Transport::Pagepipe] {
            let rec = measure(t, &a).unwrap().record;
            let m = |k: &str| rec.get(k).unwrap();
            assert!(m("create_drop_p50_ns") > 0.0, "{t:?}");
            assert!(m("create_drop_p99_ns") >= m("create_drop_p50_ns"), "{t:?}");
            // Other tests' descriptors may come and go meanwhile: 40 pipes leave room.
            assert!(m("fds_per_pipe") >= 0.5, "{t:?} {}", m("fds_per_pipe"));
            let live = m("live_pipes");
            assert!((1.0..=128.0).contains(&live), "{t:?} {live}");
            assert!(live < 128.0, "{t:?}: a pipe takes at least one descriptor");
            let stop = rec.config["live_stopped_by"].as_str().unwrap();
            assert!(!stop.starts_with("none"), "{t:?}: {stop}");
        }
        let rec = measure(Transport::Kernel, &a).unwrap().record;
        let fds = rec.get("fds_per_pipe").unwrap();
        assert!((1.5..=2.5).contains(&fds), "kernel: {fds}");
        let stop = rec.config["live_stopped_by"].as_str().unwrap();
        assert!(stop.starts_with("EMFILE"), "{stop}");
        let e = Ends::new(Transport::Unix, 4096).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }
}
