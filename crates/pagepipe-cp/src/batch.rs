//! Small files made durable in batches: written through the page cache, then one `syncfs(2)`
//! per filesystem for the whole batch, their pages dropped, and only then renamed into place.
//!
//! A copy of a tree of small files that synced each file (`fdatasync`, a journal commit each)
//! took 4.7-6.7 times as long as `cp -r` followed by one `sync`. A batch keeps the guarantee
//! per file: no copy gets its name before its bytes are on disk (the `syncfs` returned 0, and
//! it reports any writeback error of its filesystem since the batch began: `syncfs(2)`, Linux
//! 5.8 and later), and the command reports success only once the renames are durable (the
//! directories are synced at the end, as before). What the batch holds in the page cache is
//! bounded ([`MAX_BYTES`]) and dropped after its sync (`POSIX_FADV_DONTNEED` on each file).

use crate::cleanup::Temp;
use pagepipe_dontcache::Writer;
use pagepipe_sys as sys;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Files up to this size go through a batch; larger ones are written through the dontcache
/// writer and synced on their own (their sync is a small part of their time).
pub const SMALL: u64 = 1 << 20;
/// Bytes a batch may hold before it is synced: its dirty pages in the page cache.
pub const MAX_BYTES: u64 = 64 << 20;
/// Files a batch may hold before it is synced (each keeps a descriptor open: within the usual
/// limit of 1024 per process).
pub const MAX_FILES: usize = 768;
// A full batch's temporaries, and the one being written, fit in the signal handler's table.
const _: () = assert!(MAX_FILES + 64 <= crate::cleanup::MAX_TEMPS);

/// Where a copy's bytes go: the dontcache writer, or (a small file in a batch) the temporary's
/// own descriptor, written through the page cache and dropped after the batch's sync.
pub enum Sink<'a> {
    /// The dontcache writer, synced when the file is done.
    Dontcache(Writer),
    /// Writes at `pos` for a batch: plain buffered writes, written back by the batch's
    /// `syncfs` and dropped after it; or, with `uncached` (`--mode kernel`), `RWF_DONTCACHE`
    /// (writeback starts at once, one file at a time, and the pages go when it completes).
    Plain {
        /// The temporary's own descriptor ([`Temp::file`]).
        file: &'a File,
        /// Where the next write goes.
        pos: u64,
        /// Whether `RWF_DONTCACHE` is to be tried: false once a file refused it.
        uncached: bool,
    },
}

impl Sink<'_> {
    /// Writes all of `buf` at the cursor.
    ///
    /// # Errors
    /// The write's error.
    pub fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Dontcache(w) => io::Write::write_all(w, buf),
            Sink::Plain {
                file,
                pos,
                uncached,
            } => {
                let mut buf = buf;
                while !buf.is_empty() {
                    let n = if *uncached {
                        match sys::fs::pwritev2(*file, buf, *pos, sys::fs::RWF_DONTCACHE) {
                            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                                *uncached = false;
                                continue;
                            }
                            other => other,
                        }
                    } else {
                        file.write_at(buf, *pos)
                    };
                    match n {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => {
                            buf = &buf[n..];
                            *pos += n as u64;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }

    /// Moves the cursor to `offset` (past a hole).
    ///
    /// # Errors
    /// The writer's seek error.
    pub fn seek_to(&mut self, offset: u64) -> io::Result<()> {
        match self {
            Sink::Dontcache(w) => io::Seek::seek(w, io::SeekFrom::Start(offset)).map(drop),
            Sink::Plain { pos, .. } => {
                *pos = offset;
                Ok(())
            }
        }
    }

    /// The temporary file.
    pub fn file(&self) -> &File {
        match self {
            Sink::Dontcache(w) => w.file(),
            Sink::Plain { file, .. } => file,
        }
    }
}

/// A small copy written to its temporary, waiting for its batch's sync.
pub struct Pending {
    /// The temporary, renamed to `dst` after the sync; its pages are dropped through its
    /// descriptor ([`Temp::file`]) after the sync.
    pub temp: Temp,
    /// The device of its filesystem (from [`Batch::watch`]).
    pub dev: Option<u64>,
    /// Where it goes.
    pub dst: PathBuf,
    /// Its size, and the xxh3-128 of the data read (for `--verify`).
    pub bytes: u64,
    /// See `bytes`.
    pub hash: u128,
}

/// The small copies written and not yet synced, and a descriptor of each filesystem they are
/// on, opened before the first of them was written (`syncfs` reports the writeback errors
/// recorded since the descriptor was opened).
#[derive(Default)]
pub struct Batch {
    pending: Vec<Pending>,
    bytes: u64,
    /// Device number -> a directory on it, opened before its first pending copy was written.
    filesystems: HashMap<u64, File>,
    /// The directories whose filesystem is watched already, and its device.
    watched: HashMap<PathBuf, u64>,
}

impl Batch {
    /// Opens (once per filesystem) a descriptor of `dir`'s filesystem, to be synced with the
    /// batch, and returns its device. Call it before writing a copy into `dir`.
    ///
    /// # Errors
    /// The OS's error opening or inspecting `dir`, naming it.
    pub fn watch(&mut self, dir: &Path) -> io::Result<u64> {
        if let Some(&dev) = self.watched.get(dir) {
            return Ok(dev);
        }
        let d = File::open(dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot open directory '{}': {e}", dir.display()),
            )
        })?;
        let dev = d.metadata()?.dev();
        self.filesystems.entry(dev).or_insert(d);
        self.watched.insert(dir.to_path_buf(), dev);
        Ok(dev)
    }

    /// Adds a written copy; true when the batch is full and must be synced.
    pub fn push(&mut self, copy: Pending) -> bool {
        self.bytes += copy.bytes;
        self.pending.push(copy);
        self.bytes >= MAX_BYTES || self.pending.len() >= MAX_FILES
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Syncs every filesystem the batch wrote to (`syncfs(2)`, one call each) and drops the
    /// batch's pages from the cache. Returns each copy with the outcome of its filesystem's
    /// sync: `Ok` means its bytes are on disk and it may be renamed into place.
    pub fn sync(&mut self) -> Vec<(Pending, io::Result<()>)> {
        let mut synced: HashMap<u64, io::Result<()>> = HashMap::new();
        for (dev, dir) in self.filesystems.drain() {
            synced.insert(dev, rustix::fs::syncfs(&dir).map_err(Into::into));
        }
        self.bytes = 0;
        self.watched.clear();
        std::mem::take(&mut self.pending)
            .into_iter()
            .map(|copy| {
                let file = copy.temp.file();
                let outcome = match copy.dev.map(|dev| synced.get(&dev)) {
                    Some(Some(Ok(()))) => Ok(()),
                    Some(Some(Err(e))) => Err(io::Error::new(
                        e.kind(),
                        format!("syncing its filesystem failed, so its bytes may not be on disk: {e}"),
                    )),
                    _ => Err(io::Error::other(
                        "its filesystem was not synced (a copy onto a filesystem the batch did not watch)",
                    )),
                };
                // Clean after the sync: the pages go. Fails only for a bad descriptor.
                if let Some(file) = file {
                    let _ = sys::fs::fadvise_dontneed(file, 0, 0);
                }
                (copy, outcome)
            })
            .collect()
    }
}
