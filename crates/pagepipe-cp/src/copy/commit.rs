//! A finished copy put in place: verified (`--verify`), renamed over its destination now or
//! with its batch after one sync, and every directory that got a new name synced at the end.

use crate::batch::Pending;
use crate::cleanup::Temp;
use crate::copy::copier::Copier;
use crate::copy::plan::{ctx, parent_of};
use pagepipe_dontcache::{self as dontcache, Mode, Reader};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

/// A copy written to its temporary and synced, not yet renamed into place.
pub(super) struct Written {
    pub(super) temp: Temp,
    pub(super) bytes: u64,
    pub(super) hash: u128,
    /// The writer's mode; None for a small file of a batch, written through the page cache.
    pub(super) mode: Option<Mode>,
    /// A batch's copy, not yet synced (see `batch.rs`).
    pub(super) unsynced: bool,
    /// A batch's copy: the device of the filesystem it is on.
    pub(super) dev: Option<u64>,
}

/// Drops what a synced copy still has in the page cache, and returns what is left then.
///
/// The writes drop their own pages as they go (or the batch drops them after its sync), but not
/// on every filesystem: on ext4 mounted `data=journal`, `RWF_DONTCACHE` writes left the whole
/// copy cached (100%, 3 of 3). The copy is synced, so its pages are clean: they are dropped
/// (`POSIX_FADV_DONTNEED` on the whole file) and looked at again; any still there (dirtied
/// again, as by a journal's checkpoint) are written back (`fdatasync`) and dropped once more.
///
/// # Errors
/// That `fdatasync`'s: a copy whose writeback failed is not a copy.
fn drop_left(file: &File) -> io::Result<u64> {
    let cached = dontcache::cached_bytes(file).unwrap_or(0);
    if cached == 0 {
        return Ok(0);
    }
    // Fails only for a bad descriptor or a non-regular file.
    let _ = dontcache::drop_cache(file);
    if dontcache::cached_bytes(file).unwrap_or(0) == 0 {
        return Ok(0);
    }
    file.sync_data()?;
    let _ = dontcache::drop_cache(file);
    Ok(dontcache::cached_bytes(file).unwrap_or(0))
}

impl Copier<'_> {
    /// Syncs the batch of small copies, renames each into place (or reports why not), then
    /// finishes the directories that were waiting for them.
    pub(super) fn flush_batch(&mut self) {
        for (copy, synced) in self.batch.sync() {
            let Pending {
                temp,
                dev: _,
                dst,
                bytes,
                hash,
            } = copy;
            let written = Written {
                temp,
                bytes,
                hash,
                mode: None,
                unsynced: false,
                dev: None,
            };
            let done = synced.and_then(|()| self.commit(written, &dst));
            if let Err(e) = done {
                self.skip(format!("cannot copy to '{}': {e}", dst.display()));
            }
        }
        for finish in std::mem::take(&mut self.dir_finishes) {
            let dst = finish.dst.clone();
            if let Err(e) = self.finish_dir(finish) {
                self.skip(
                    ctx(format_args!("finishing directory '{}'", dst.display()))(e).to_string(),
                );
            }
        }
    }

    /// Renames a synced copy into place now, or adds a batch's copy to the batch (synced and
    /// renamed with it, see `batch.rs`).
    pub(super) fn commit_or_defer(&mut self, written: Written, dst: &Path) -> io::Result<()> {
        if !written.unsynced {
            return self.commit(written, dst);
        }
        self.created.insert(dst.to_path_buf());
        let full = self.batch.push(Pending {
            temp: written.temp,
            dev: written.dev,
            dst: dst.to_path_buf(),
            bytes: written.bytes,
            hash: written.hash,
        });
        if full {
            self.flush_batch();
        }
        Ok(())
    }

    /// Verifies (with `--verify`), measures the cache the copy left, and renames it into place.
    pub(super) fn commit(&mut self, written: Written, dst: &Path) -> io::Result<()> {
        if self.args.verify {
            let got = self.hash_back(written.temp.path(), dst)?;
            if got != written.hash {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "verification failed: the copy for '{}' reads back with xxh3-128 {got:032x}, \
                         the data read had {:032x}; the copy was removed",
                        dst.display(),
                        written.hash
                    ),
                ));
            }
            self.summary.verified += 1;
        }
        let syncing = format_args!("syncing the copy for '{}'", dst.display()).to_string();
        let cached = match written.temp.file() {
            Some(file) => drop_left(file).map_err(ctx(&syncing))?,
            None => {
                let copy = File::open(written.temp.path()).map_err(ctx(&syncing))?;
                drop_left(&copy).map_err(ctx(&syncing))?
            }
        };
        let mode = match written.mode {
            _ if written.bytes == 0 => "none".to_string(),
            Some(mode) => format!("{mode:?}").to_lowercase(),
            None => "batched".to_string(),
        };
        let bytes = written.bytes;
        written.temp.commit(dst)?;
        self.named_in(dst);
        self.created.insert(dst.to_path_buf());
        // Counted once it has its name: a copy whose rename failed is not a copy.
        self.summary.dst_cached += cached;
        self.summary.dst_bytes += bytes;
        self.summary.files += 1;
        self.summary.bytes += bytes;
        self.summary.write_modes.insert(mode);
        Ok(())
    }

    /// The xxh3-128 of a file read through a dontcache Reader (so reading it back caches
    /// nothing either).
    fn hash_back(&mut self, path: &Path, dst: &Path) -> io::Result<u128> {
        let what = format!("verifying the copy for '{}'", dst.display());
        let file = File::open(path).map_err(ctx(&what))?;
        let mut reader = Reader::with_mode(file, self.mode).map_err(ctx(&what))?;
        let mut hasher = Xxh3::new();
        loop {
            match reader.read(&mut self.buf) {
                Ok(0) => return Ok(hasher.digest128()),
                Ok(n) => hasher.update(&self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ctx(&what)(e)),
            }
        }
    }

    /// fsyncs every directory that got a new entry, so the renames survive a crash.
    /// Each is tried, whatever the others did; the first failure is returned.
    ///
    /// Every failure is reported with every name this run put in that directory (a file, link
    /// or directory copied there), since each of them may be lost in a crash; the error
    /// returned counts them.
    pub(super) fn sync_dirs(&mut self) -> io::Result<()> {
        let (mut failed_dirs, mut at_risk) = (0, 0);
        for (dir, names) in std::mem::take(&mut self.dirs) {
            let synced = File::open(&dir).and_then(|d| d.sync_all());
            let Err(e) = synced else { continue };
            failed_dirs += 1;
            at_risk += names.len();
            let list: Vec<String> = names
                .iter()
                .map(|n| format!("\n  '{}'", n.display()))
                .collect();
            self.skip(format!(
                "syncing directory '{}' failed: {e}; these {} name(s) in it may be lost in a \
                 crash (copy them again):{}",
                dir.display(),
                names.len(),
                list.concat()
            ));
        }
        if failed_dirs == 0 {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "{failed_dirs} directory sync(s) failed: {at_risk} copied name(s) listed above are \
             not known to be durable"
        )))
    }

    /// Records that `dst` got its name in its directory, which is synced at the end.
    pub(super) fn named_in(&mut self, dst: &Path) {
        self.dirs
            .entry(parent_of(dst))
            .or_default()
            .push(dst.to_path_buf());
    }
}
