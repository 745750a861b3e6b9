//! [`Copier`]: the state of a run (the options, the batch, what it made and saw, the
//! directories to sync, the summary), the directories waiting to be finished, and the errors
//! reported and gone on from.

use crate::batch::Batch;
use crate::cli::{Args, Resolved};
use crate::copy::summary::Summary;
use indicatif::ProgressBar;
use pagepipe_dontcache::Mode;
use std::collections::{BTreeMap, BTreeSet};
use std::collections::{HashMap, HashSet};
use std::fs::Metadata;
use std::path::PathBuf;

/// What is left to do to a directory once its entries have their names: give it back its
/// mode (or the group and other bits left out when it was made) and what `--preserve` keeps.
/// Done when its last entry is renamed into it: a rename into it later would move its times,
/// and a mode without write permission would refuse the rename.
pub(super) struct DirFinish {
    pub(super) src: PathBuf,
    pub(super) meta: Metadata,
    pub(super) dst: PathBuf,
    pub(super) created: bool,
    pub(super) restore: Option<u32>,
}

pub(super) struct Copier<'a> {
    pub(super) args: &'a Args,
    /// The options as cp reads them together.
    pub(super) opts: Resolved,
    /// With `--preserve=links`: each source with more than one link this run copied, by
    /// device and inode, and where its copy is; the next name of it is linked to that copy.
    pub(super) links: HashMap<(u64, u64), PathBuf>,
    /// Small copies written, waiting for their batch's sync to be renamed into place.
    pub(super) batch: Batch,
    /// Whether a batch's copies are written with `RWF_DONTCACHE` (`--mode kernel` only, until
    /// a file refuses it). Otherwise they are written buffered and written back together by
    /// the batch's `syncfs` (one writeback for the batch, not one started per file: see the
    /// README's Timing), then dropped.
    pub(super) uncached_small: bool,
    /// Directories whose entries are all copied, waiting for the batch's renames (in the order
    /// they were finished: a directory's after its subdirectories').
    pub(super) dir_finishes: Vec<DirFinish>,
    /// The process's umask: new files and directories get the source's permission bits less
    /// these, as cp gives them without `-p`.
    pub(super) umask: u32,
    pub(super) mode: Mode,
    pub(super) bar: ProgressBar,
    pub(super) buf: Vec<u8>,
    /// Directories that received a new entry: synced at the end so the renames are durable.
    pub(super) dirs: BTreeMap<PathBuf, Vec<PathBuf>>,
    /// Every destination this run put a copy at, as named and as followed: a second source for
    /// one of them (`a/x b/x DIR`) is refused, as cp refuses it, rather than replacing the first
    /// one's copy.
    pub(super) created: HashSet<PathBuf>,
    /// The directories this run made: a name in one that this run did not put there is new
    /// (cp's own shortcut), so its destination needs no look before the copy.
    pub(super) made_dirs: HashSet<PathBuf>,
    /// Every file named on the command line, as cp remembers them: its directory's device and
    /// inode, its name there, its own device and inode. The same one again (`x x DIR`, `x ./x
    /// DIR`) is a warning, as in cp; a hard link of it under another name is another source.
    pub(super) seen: BTreeSet<(u64, u64, std::ffi::OsString, u64, u64)>,
    pub(super) summary: Summary,
}

impl Copier<'_> {
    /// Reports an error that cp reports and goes on from (the exit status will be 1).
    pub(super) fn skip(&mut self, msg: String) {
        self.bar.suspend(|| eprintln!("pagepipe-cp: {msg}"));
        self.summary.skipped += 1;
    }
}
