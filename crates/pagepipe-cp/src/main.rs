//! `pagepipe-cp`: copies files, directory trees or stdin like `cp`, through
//! `pagepipe_dontcache`, so that neither the source nor the copy stays in the page cache.
//!
//! ```text
//! pagepipe-cp [OPTIONS] SRC... DST
//! ```
//!
//! cp's conventions: with one SRC, DST is the new name, or an existing directory to copy into;
//! with several, DST must be a directory. A directory SRC needs `-r`. `-` is standard input.
//! Each file is written to a temporary name beside its destination, synced, and renamed over the
//! destination only when complete (and verified, with `--verify`): an error, SIGINT or SIGTERM
//! never leaves a destination that looks complete but is not.

#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod cleanup;
mod copy;

use clap::Parser;
use pagepipe_dontcache::Mode;
use std::path::PathBuf;
use std::process::ExitCode;

/// Copy files without filling the page cache (pagepipe-dontcache).
#[derive(Parser, Debug)]
#[command(name = "pagepipe-cp", version, about, long_about = None)]
pub struct Args {
    /// Copy directories recursively (symlinks inside are copied as symlinks).
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    recursive: bool,
    /// How to keep data out of the page cache: RWF_DONTCACHE where the filesystem has it
    /// (auto), insist on it (kernel), or pagepipe's userspace flusher (fallback).
    #[arg(long, value_enum, default_value = "auto")]
    mode: CliMode,
    /// Bound on dirty data in flight per file in fallback mode (suffix K, M or G).
    #[arg(long, value_parser = parse_size, default_value = "32M")]
    window: u64,
    /// Read each copy back (without caching it) and compare its xxh3-128 checksum with that of
    /// the data read from the source; a mismatch is an error and the copy is removed.
    #[arg(long)]
    verify: bool,
    /// Print each file as it is copied.
    #[arg(short, long)]
    verbose: bool,
    /// Print nothing but errors (no summary).
    #[arg(short, long)]
    quiet: bool,
    /// Sources (`-` is standard input), then the destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    paths: Vec<PathBuf>,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CliMode {
    /// RWF_DONTCACHE where the file supports it, else the fallback.
    Auto,
    /// RWF_DONTCACHE only; a file without it is an error.
    Kernel,
    /// pagepipe's flusher thread and POSIX_FADV_DONTNEED, never RWF_DONTCACHE.
    Fallback,
}

impl From<CliMode> for Mode {
    fn from(m: CliMode) -> Mode {
        match m {
            CliMode::Auto => Mode::Auto,
            CliMode::Kernel => Mode::Kernel,
            CliMode::Fallback => Mode::Fallback,
        }
    }
}

/// Parses `123`, `64K`, `32M`, `1G`.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = num
        .parse()
        .map_err(|e| format!("bad size {s:?}: {e} (use e.g. 8M)"))?;
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = cleanup::install_signal_handlers() {
        eprintln!("pagepipe-cp: cannot install signal handlers: {e}");
        return ExitCode::FAILURE;
    }
    match copy::run(&args) {
        Ok(summary) => {
            if !args.quiet {
                print!("{summary}");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("32M"), Ok(32 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn arguments_parse_like_cp() {
        let a = Args::try_parse_from(["pagepipe-cp", "-r", "--verify", "a", "b", "dst"]).unwrap();
        assert!(a.recursive && a.verify);
        assert_eq!(a.paths.len(), 3);
        assert!(
            Args::try_parse_from(["pagepipe-cp", "-R", "a", "b"])
                .unwrap()
                .recursive
        );
        assert!(Args::try_parse_from(["pagepipe-cp", "only-one"]).is_err());
        let a = Args::try_parse_from(["pagepipe-cp", "--mode", "fallback", "-", "out"]).unwrap();
        assert_eq!(Mode::from(a.mode), Mode::Fallback);
    }
}
