//! Modes and what `--preserve` keeps: the permission bits cp leaves out of a new file or
//! directory until it is ready and gives back after, and the attributes given to a copy.

use crate::cli::Preserve;
use crate::copy::copier::Copier;
use crate::copy::plan::ctx;
use crate::meta::{self, Kind};
use std::fs::{self, Metadata, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

impl Copier<'_> {
    /// A new file made without group and other bits because its owner was to change
    /// (`--preserve=ownership` without `mode`) gets them back once it has its owner, as far as
    /// the umask allows, as cp gives them back.
    pub(super) fn give_back_omitted(&self, meta: &Metadata, at: &Path) -> io::Result<()> {
        let keep = &self.opts.preserve;
        if keep.mode || !keep.ownership {
            return Ok(());
        }
        let omitted = meta.mode() & omitted_bits(keep, false) & !self.umask;
        let now = mode_of(at)?;
        if omitted & !now != 0 {
            set_mode(at, now | omitted)?;
        }
        Ok(())
    }

    /// Gives the copy at `at` (`named` for the user) what `--preserve` keeps of `src`.
    pub(super) fn preserve(
        &self,
        src: &Path,
        meta: &Metadata,
        at: &Path,
        named: &Path,
        kind: Kind,
    ) -> io::Result<()> {
        let keep = &self.opts.preserve;
        if !keep.any_metadata() {
            return Ok(());
        }
        meta::preserve(src, meta, at, named, kind, keep)
    }
}

/// The permission bits cp leaves out when it makes a file or directory, until it is ready:
/// group and other write of a directory; all of group and other's when the owner is to be
/// changed (`--preserve=ownership`), so that the old owner's group never gets a window.
pub(super) fn omitted_bits(keep: &Preserve, dir: bool) -> u32 {
    if keep.ownership {
        0o077
    } else if dir {
        0o022
    } else {
        0
    }
}

/// The permission bits (and set-id and sticky bits) of `path`, not following a final symlink.
///
/// # Errors
/// `lstat(2)`'s error, naming the path.
pub(super) fn mode_of(path: &Path) -> io::Result<u32> {
    fs::symlink_metadata(path)
        .map(|m| m.mode() & 0o7777)
        .map_err(ctx(format_args!("cannot stat '{}'", path.display())))
}

/// `chmod(2)`, naming the path and the mode in its error.
///
/// # Errors
/// The OS's error.
pub(super) fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, Permissions::from_mode(mode)).map_err(ctx(format_args!(
        "cannot set the mode of '{}' to {mode:04o}",
        path.display()
    )))
}
