//! `async`: the pipe inside tokio. tokio's own `tokio::net::unix::pipe` (the kernel pipe through
//! epoll, transport `tokio-pipe`) against `pagepipe::tokio`'s `AsyncReader` / `AsyncWriter`
//! (`pagepipe`): lmbench's bandwidth with 64 KiB writes (`bw`) and 1-byte ping-pong round trip
//! (`lat`), between two tasks of one multi-thread runtime (2 workers), or with `--between
//! processes` between this process and a forked child, each with a runtime of its own.
//!
//! This module is the `async` subcommand (`async` is a keyword, hence its name).

use crate::child::{reader_hung_up, spawn, Between, Flags, CHILD_GRACE};
use crate::common::{Histogram, Record};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use std::future::Future;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What `async` compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AsyncTransport {
    /// `tokio::net::unix::pipe`: a kernel pipe (64 KiB) registered with tokio's epoll reactor.
    TokioPipe,
    /// `pagepipe::tokio::{AsyncReader, AsyncWriter}` on a default pagepipe (64 KiB).
    Pagepipe,
    /// The same with the adapters' adaptive spin turned off (`set_spin(None)`): every wait
    /// goes through the reactor.
    PagepipeNospin,
}

impl AsyncTransport {
    fn name(self) -> &'static str {
        match self {
            AsyncTransport::TokioPipe => "tokio-pipe",
            AsyncTransport::Pagepipe => "pagepipe",
            AsyncTransport::PagepipeNospin => "pagepipe-nospin",
        }
    }
}

/// Which workloads `async` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// Bandwidth of `--size` writes.
    Bw,
    /// 1-byte ping-pong round trip.
    Lat,
}

/// Options of `pagepipe-bench async`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Transports to compare, alternating in one run (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "tokio-pipe,pagepipe")]
    pub transport: Vec<AsyncTransport>,
    /// Workloads, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "bw,lat")]
    pub test: Vec<Test>,
    /// Bytes per write in `bw` (lmbench: 64 KiB).
    #[arg(long, default_value_t = 64 * 1024)]
    pub size: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Where the two sides run, comma separated: tasks of one runtime in this process, or this
    /// process and a forked child, each with its own runtime.
    #[arg(long, value_delimiter = ',', default_value = "threads")]
    pub between: Vec<Between>,
}

/// One end of a channel, before it joins a runtime (it may cross a fork first).
enum End {
    Kernel(OwnedFd),
    /// A pagepipe end, and whether its adapter spins before waiting.
    PageWriter(pagepipe::Writer, bool),
    PageReader(pagepipe::Reader, bool),
}

type AsyncW = Box<dyn AsyncWrite + Unpin + Send>;
type AsyncR = Box<dyn AsyncRead + Unpin + Send>;

impl End {
    /// The write end, registered with the current runtime.
    fn writer(self) -> io::Result<AsyncW> {
        Ok(match self {
            End::Kernel(fd) => Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?),
            End::PageWriter(w, spin) => {
                let mut w = pagepipe::tokio::AsyncWriter::new(w)?;
                w.set_spin(spin.then_some(pagepipe::tokio::DEFAULT_SPIN));
                Box::new(w)
            }
            End::PageReader(..) => unreachable!("a read end as writer"),
        })
    }

    /// The read end, registered with the current runtime.
    fn reader(self) -> io::Result<AsyncR> {
        Ok(match self {
            End::Kernel(fd) => Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?),
            End::PageReader(r, spin) => {
                let mut r = pagepipe::tokio::AsyncReader::new(r)?;
                r.set_spin(spin.then_some(pagepipe::tokio::DEFAULT_SPIN));
                Box::new(r)
            }
            End::PageWriter(..) => unreachable!("a write end as reader"),
        })
    }
}

/// A channel of 64 KiB: `(write end, read end)`.
fn channel(t: AsyncTransport) -> io::Result<(End, End)> {
    match t {
        AsyncTransport::TokioPipe => {
            let mut fds = [0; 2];
            // SAFETY: pipe2 writes two descriptors into `fds`, which has room for them.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: two fresh descriptors that nothing else owns.
            let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            Ok((End::Kernel(w), End::Kernel(r)))
        }
        AsyncTransport::Pagepipe | AsyncTransport::PagepipeNospin => {
            let spin = t == AsyncTransport::Pagepipe;
            let (w, r) = pagepipe::pipe()?;
            Ok((End::PageWriter(w, spin), End::PageReader(r, spin)))
        }
    }
}

/// A multi-thread runtime with 2 workers, as the benchmark specifies.
fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
}

/// Runs `side` (the other side: a task of this runtime, or a forked child with a runtime of
/// its own) against `main` (a task of this process's runtime), and returns `main`'s result.
fn run_pair<T: Send + 'static, S, SF, M, MF>(
    between: Between,
    side: S,
    close_in_child: impl FnOnce(),
    main: M,
    limit: Duration,
) -> io::Result<T>
where
    S: FnOnce() -> SF + Send + 'static,
    SF: Future<Output = io::Result<()>> + Send + 'static,
    M: FnOnce() -> MF + Send + 'static,
    MF: Future<Output = io::Result<T>> + Send + 'static,
{
    match between {
        Between::Threads => {
            let rt = runtime()?;
            rt.block_on(async {
                let side = tokio::spawn(async move { side().await });
                let main = tokio::spawn(async move { main().await });
                let out = main.await.map_err(io::Error::other)?;
                side.await.map_err(io::Error::other)??;
                out
            })
        }
        Between::Processes => {
            // Fork before any runtime exists: the child starts its own.
            let child = spawn(between, move || runtime()?.block_on(side()), close_in_child)?;
            let out = runtime()?.block_on(main());
            child.join(limit)?;
            out
        }
    }
}

/// One bw run: the other side writes `size`-byte chunks until stopped or hung up on; the main
/// side reads, warms up for a fifth of `duration`, then counts for `duration`.
fn bw_once(
    t: AsyncTransport,
    size: usize,
    duration: Duration,
    between: Between,
) -> io::Result<Record> {
    let (w, r) = channel(t)?;
    let flags = Flags::new()?;
    let f = flags.clone();
    let r = Arc::new(std::sync::Mutex::new(Some(r)));
    let r_child = r.clone();
    let writer = move || async move {
        let mut w = w.writer()?;
        let buf = vec![0x5au8; size];
        while !f.stopped() {
            if let Err(e) = w.write_all(&buf).await {
                return if reader_hung_up(&e) { Ok(()) } else { Err(e) };
            }
        }
        Ok(())
    };
    let reader = move || async move {
        let end = r.lock().unwrap().take().expect("the read end");
        let mut r = end.reader()?;
        let mut buf = vec![0u8; size];
        let warm = Instant::now() + duration / 5;
        while Instant::now() < warm {
            let _warm_up_bytes = r.read(&mut buf).await?;
        }
        let t0 = Instant::now();
        let mut bytes = 0u64;
        while t0.elapsed() < duration {
            bytes += r.read(&mut buf).await? as u64;
        }
        let secs = t0.elapsed().as_secs_f64();
        flags.stop();
        drop(r); // a writer blocked on a full pipe gets BrokenPipe
        Ok(bytes as f64 / secs / 1e6)
    };
    let close_in_child = move || drop(r_child.lock().unwrap().take());
    let mbps = run_pair(
        between,
        writer,
        close_in_child,
        reader,
        duration + CHILD_GRACE,
    )?;
    let mut rec = Record::new("async", t.name())
        .config("test", "bw")
        .config("between", between.name())
        .config("size", size)
        .config("pipe_size", 64 * 1024);
    rec.metric("mbps", mbps);
    Ok(rec)
}

/// One lat run: 1-byte ping-pong between the main side and an echo on the other side, over two
/// channels.
fn lat_once(t: AsyncTransport, duration: Duration, between: Between) -> io::Result<Run> {
    let (w1, r1) = channel(t)?;
    let (w2, r2) = channel(t)?;
    // The main side's ends, taken in the child (and dropped there) when it is a process.
    let mine = Arc::new(std::sync::Mutex::new(Some((w1, r2))));
    let mine_child = mine.clone();
    let echo = move || async move {
        let (mut echo_in, mut echo_out) = (r1.reader()?, w2.writer()?);
        let mut b = [0u8; 1];
        while echo_in.read(&mut b).await? == 1 {
            echo_out.write_all(&b).await?;
        }
        Ok(())
    };
    let pinger = move || async move {
        let (w1, r2) = mine.lock().unwrap().take().expect("the main side's ends");
        let (mut ping, mut pong_in) = (w1.writer()?, r2.reader()?);
        let mut hist = Histogram::default();
        let mut b = [7u8; 1];
        let warm = Instant::now() + duration / 5;
        let t0 = Instant::now();
        loop {
            let start = Instant::now();
            ping.write_all(&b).await?;
            pong_in.read_exact(&mut b).await?;
            if start >= warm {
                hist.record(start.elapsed());
            }
            if t0.elapsed() >= duration + duration / 5 {
                break;
            }
        }
        drop(ping); // end of file for the echo side
        Ok(hist)
    };
    let close_in_child = move || drop(mine_child.lock().unwrap().take());
    let hist = run_pair(
        between,
        echo,
        close_in_child,
        pinger,
        duration + CHILD_GRACE,
    )?;
    let mut rec = Record::new("async", t.name())
        .config("test", "lat")
        .config("between", between.name());
    hist.put_metrics(&mut rec);
    rec.metric("round_trips", hist.count() as f64);
    Ok(Run {
        record: rec,
        latency: Some(hist),
    })
}

fn arms(transports: &[AsyncTransport]) -> Vec<Arm> {
    transports.iter().map(|t| Arm::new(t.name())).collect()
}

/// `pagepipe-bench async`.
///
/// # Errors
/// A transport cannot be opened or fails mid-run.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    let d = Duration::from_secs_f64(a.duration);
    let mut harness = Harness::new(opts, "async", RECOMMENDED_RUNS)?;
    for &between in &a.between {
        for &test in &a.test {
            match test {
                Test::Bw => {
                    let case = Case {
                        bench: "async",
                        title: between.title(&format!("async bw {} KiB", a.size / 1024)),
                        arms: arms(&a.transport),
                        columns: vec![Column::new("mbps", "MB/s", 1.0, 0)],
                    };
                    harness.run(case, |i| {
                        bw_once(a.transport[i], a.size, d, between).map(Run::from)
                    })?;
                }
                Test::Lat => {
                    let case = Case {
                        bench: "async",
                        title: between.title("async lat 1 B"),
                        arms: arms(&a.transport),
                        columns: vec![
                            Column::new("lat_avg_ns", "round trip avg µs", 1e3, 2),
                            Column::new("lat_p99_ns", "round trip p99 µs", 1e3, 2),
                        ],
                    };
                    harness.run(case, |i| lat_once(a.transport[i], d, between))?;
                }
            }
        }
    }
    harness.finish(&format!(
        "async: tokio multi-thread runtime, 2 workers; bw {} B writes into 64 KiB pipes, lat \
         1-byte round trip; {} s per run (\"threads\": two tasks of one runtime)",
        a.size, a.duration
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_transports_run_between_tasks_and_processes() {
        let _serial = crate::child::tests::serial();
        let short = Duration::from_millis(30);
        for t in [
            AsyncTransport::TokioPipe,
            AsyncTransport::Pagepipe,
            AsyncTransport::PagepipeNospin,
        ] {
            for between in [Between::Threads, Between::Processes] {
                let bw = bw_once(t, 65536, short, between).unwrap();
                assert!(bw.get("mbps").unwrap() > 0.0, "{t:?} {between:?}");
                let lat = lat_once(t, short, between).unwrap();
                assert!(lat.record.get("round_trips").unwrap() > 0.0, "{t:?}");
            }
        }
    }
}
