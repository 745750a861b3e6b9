//! The command line: `pagepipe-cp [OPTIONS] SRC... DST` (clap).

use clap::Parser;
use pagepipe_dontcache::Mode;
use std::path::PathBuf;

/// Copy files without filling the page cache (pagepipe-dontcache).
#[derive(Parser, Debug)]
#[command(
    name = "pagepipe-cp",
    version,
    about,
    long_about = None,
    override_usage = "pagepipe-cp [OPTIONS] SRC... DST"
)]
pub(crate) struct Args {
    /// Copy directories recursively (symlinks inside are copied as symlinks).
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub(crate) recursive: bool,
    /// How to keep data out of the page cache: RWF_DONTCACHE where the filesystem has it
    /// (auto), insist on it (kernel), or pagepipe's userspace flusher (fallback).
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) mode: CliMode,
    /// Bound on dirty data in flight per file in fallback mode (suffix K, M or G).
    #[arg(long, value_parser = parse_size, default_value = "32M")]
    pub(crate) window: u64,
    /// Read each copy back (without caching it) and compare its xxh3-128 checksum with that of
    /// the data read from the source; a mismatch is an error and the copy is removed.
    #[arg(long)]
    pub(crate) verify: bool,
    /// Print each file as it is copied.
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Print nothing but errors (no summary).
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// Sources (`-` is standard input), then the destination.
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CliMode {
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
