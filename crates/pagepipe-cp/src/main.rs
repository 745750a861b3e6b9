//! `pagepipe-cp`: copies files, directory trees or stdin like `cp`, through
//! `pagepipe_dontcache`, so that neither the source nor the copy stays in the page cache.
//!
//! ```text
//! pagepipe-cp [OPTIONS] SRC... DST
//! ```
//!
//! cp's conventions: with one SRC, DST is the new name, or an existing directory to copy into;
//! with several, DST must be a directory. A directory SRC needs `-r`. `-` is standard input.
//! `-a`, `-p` and `--preserve` keep what cp keeps. Each file is written to a temporary name
//! beside its destination, synced (small files in batches, `batch.rs`), and renamed over the
//! destination only when complete (and verified, with `--verify`): an error, SIGINT or SIGTERM
//! never leaves a destination that looks complete but is not, and a SIGKILLed copy's
//! temporaries are removed by the next run (`stale.rs`). The options, guarantees and every
//! difference from GNU cp: `crates/pagepipe-cp/README.md`.

#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod batch;
mod cleanup;
mod cli;
mod copy;
mod meta;
mod stale;

use clap::Parser;
use cli::Args;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = cleanup::install_signal_handlers() {
        eprintln!("pagepipe-cp: cannot install signal handlers: {e}");
        return ExitCode::FAILURE;
    }
    match copy::run(&args) {
        Ok(summary) => {
            // A summary that cannot be written (stdout closed or full) fails the command, as
            // it fails cp's kin; never a panic.
            let printed = if args.quiet {
                Ok(())
            } else {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                write!(out, "{summary}").and_then(|()| out.flush())
            };
            if let Err(e) = printed {
                eprintln!("pagepipe-cp: cannot write the summary: {e}");
                return ExitCode::FAILURE;
            }
            if summary.failed() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("pagepipe-cp: {e}");
            ExitCode::FAILURE
        }
    }
}
