//! Resolving `SRC... DST` as cp does, walking trees, and copying one file through a temporary.
//!
//! [`run`] (here) sets a [`copier::Copier`] to work on the plan. Bottom to top: `summary.rs`
//! (what a run did, as printed), `plan.rs` (`SRC... DST` paired as cp pairs them, and the
//! error and path helpers every step uses), `copier.rs` (the state of a run), `attrs.rs`
//! (modes, and what `--preserve` keeps), `dest.rs` (where a copy goes, and the destinations
//! refused before a copy), `commit.rs` (a finished copy verified, renamed into place, its
//! directory synced), `temp.rs` (a copy written to its temporary), `file.rs` (a regular file
//! or standard input), `tree.rs` (the walk: directories, links, special files).

mod attrs;
mod commit;
mod copier;
mod dest;
mod file;
mod plan;
mod summary;
mod temp;
mod tree;

pub use crate::copy::summary::Summary;

use crate::batch::Batch;
use crate::cli::Args;
use crate::copy::copier::Copier;
use crate::copy::plan::{invalid, is_stdin, plan, total_size};
use crate::copy::temp::CHUNK;
use indicatif::{ProgressBar, ProgressStyle};
use pagepipe_dontcache::Mode;
use std::collections::{BTreeMap, BTreeSet};
use std::collections::{HashMap, HashSet};
use std::io::{self, IsTerminal};
use std::time::Instant;

fn progress_bar(total: Option<u64>) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total {
        Some(len) => {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg:30!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} (eta {eta})",
                )
                .expect("a valid progress template")
                .progress_chars("=> "),
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg:30!} {bytes} {bytes_per_sec}")
                    .expect("a valid progress template"),
            );
            bar
        }
    }
}

/// Copies `args.paths` (`SRC... DST`). As cp does, an error with one file (a missing source, a
/// full disk, a directory without `-r`, a special file) is reported on stderr and the copy goes
/// on with the next, and [`Summary::failed`] is then true (exit status 1). Whatever failed,
/// every directory that got a new entry is synced before this returns, so a copy renamed into
/// place is durable when the command exits.
///
/// # Errors
/// Only a bad command line, or a directory that cannot be synced: no copy is then known durable.
pub fn run(args: &Args) -> io::Result<Summary> {
    let (dst, srcs) = args
        .paths
        .split_last()
        .ok_or_else(|| invalid("missing SRC and DST".into()))?;
    let opts = args.resolve().map_err(invalid)?;
    let jobs = plan(srcs, dst)?;
    let total = if srcs.iter().any(|s| is_stdin(s)) {
        None
    } else {
        Some(srcs.iter().map(|s| total_size(s, opts.recursive)).sum())
    };
    let mut copier = Copier {
        args,
        opts,
        links: HashMap::new(),
        batch: Batch::default(),
        uncached_small: Mode::from(args.mode) == Mode::Kernel,
        dir_finishes: Vec::new(),
        umask: umask(),
        mode: args.mode.into(),
        bar: progress_bar(total),
        buf: vec![0; CHUNK],
        dirs: BTreeMap::new(),
        created: HashSet::new(),
        made_dirs: HashSet::new(),
        seen: BTreeSet::new(),
        summary: Summary::default(),
    };
    let t0 = Instant::now();
    for (src, dst) in &jobs {
        if let Err(e) = copier.copy_top(src, dst) {
            copier.skip(e.to_string());
        }
    }
    copier.flush_batch();
    let synced = copier.sync_dirs();
    copier.bar.finish_and_clear();
    synced?;
    copier.summary.elapsed = t0.elapsed();
    Ok(copier.summary)
}

/// The process's umask (read by setting it and putting it back, while pagepipe-cp has one
/// thread: `run` calls this before the first writer starts the flusher threads).
fn umask() -> u32 {
    // SAFETY: umask(2) cannot fail and touches no memory; set back at once.
    let old = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    old as u32
}
