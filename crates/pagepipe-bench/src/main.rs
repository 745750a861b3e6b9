//! `pagepipe-bench`: reruns each seed's benchmark with the kernel's primitive and pagepipe side by
//! side, alternating in one run, and reports the ratios with distribution-free intervals.
//!
//! With no subcommand it runs the quick suite (about 90 s): one table of every transport,
//! between threads and between processes.
//! `compare OLD.jsonl NEW.jsonl` compares two saved `--json` runs. `--load N` runs N busy loops
//! beside any of them.

#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod buffer;
mod child;
mod common;
mod compare;
mod harness;
mod load;
mod probe;
mod quick;
mod stats;
mod transport;
mod workloads;

use clap::{Parser, Subcommand};
use workloads::{async_pipe, bw, dontcache, frag, lat, notify, peer_death, pipe, scale, splice};

#[derive(Parser)]
#[command(
    name = "pagepipe-bench",
    version,
    about = "pagepipe vs the kernel's primitives, side by side"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: harness::RunArgs,
    #[command(flatten)]
    quick: quick::Args,
}

#[derive(Subcommand)]
enum Cmd {
    /// pipe_bench (tools/testing/selftests/pipe): N writers and M readers on one pipe.
    Pipe(pipe::Args),
    /// lmbench bw_pipe / bw_unix: bandwidth of 64 KiB writes between two threads or processes.
    Bw(bw::Args),
    /// lmbench lat_pipe / lat_unix: 1-byte ping-pong round trip between threads or processes.
    Lat(lat::Args),
    /// tokio: `tokio::net::unix::pipe` against pagepipe's AsyncReader/AsyncWriter, bandwidth of
    /// 64 KiB writes and 1-byte round trip, between tasks or processes.
    Async(async_pipe::Args),
    /// Forked writers (or a reader) killed with SIGKILL at random moments: time until the
    /// other side notices (end of file, BrokenPipe), and every record checked.
    PeerDeath(peer_death::Args),
    /// dontcache-bench: buffered, O_DIRECT, RWF_DONTCACHE and pagepipe's dontcache writer.
    Dontcache(dontcache::Args),
    /// page_frag_test (seed 004): FragCache vs system allocator, mimalloc and BytesMut.
    Frag(frag::Args),
    /// Seed 002's table: pipe (write + read), splice (file to pipe to /dev/null) and vmsplice
    /// (pagepipe: write_chunk + read_chunk), the kernel and pagepipe side by side.
    Splice(splice::Args),
    /// Notification pipes: records posted per second by 1 and 4 posters with a reader
    /// draining, and the loss rate when the reader stalls.
    Notify(notify::Args),
    /// What one pipe costs and how many a process holds (issue 23): create+drop time, and per
    /// idle pipe descriptors, address space and memory, and live pipes under a descriptor limit.
    Scale(scale::Args),
    /// benchstat for two `--json` runs: medians, change with its interval, rank-test p-value.
    Compare(compare::Args),
}

fn main() {
    let cli = Cli::parse();
    let opts = &cli.run;
    let _load = match &cli.cmd {
        Some(Cmd::Compare(_)) => None,
        _ => match load::Load::start(opts.load) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("pagepipe-bench: {e}");
                std::process::exit(1);
            }
        },
    };
    let result = match cli.cmd {
        None => quick::run(&cli.quick, opts),
        Some(Cmd::Pipe(a)) => pipe::run(&a, opts),
        Some(Cmd::Bw(a)) => bw::run(&a, opts),
        Some(Cmd::Lat(a)) => lat::run(&a, opts),
        Some(Cmd::Async(a)) => async_pipe::run(&a, opts),
        Some(Cmd::PeerDeath(a)) => peer_death::run(&a, opts),
        Some(Cmd::Dontcache(a)) => dontcache::run(&a, opts),
        Some(Cmd::Frag(a)) => frag::run(&a, opts),
        Some(Cmd::Splice(a)) => splice::run(&a, opts),
        Some(Cmd::Notify(a)) => notify::run(&a, opts),
        Some(Cmd::Scale(a)) => scale::run(&a, opts),
        Some(Cmd::Compare(a)) => compare::run(&a),
    };
    if let Err(e) = result {
        drop(_load);
        eprintln!("pagepipe-bench: {e}");
        std::process::exit(1);
    }
}
