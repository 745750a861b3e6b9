//! One copy written to a fresh temporary beside its destination: reserved, filled (a sparse
//! source's holes kept), hashed for `--verify`, given its attributes, and synced (or left for
//! its batch's sync).

use crate::batch::Sink;
use crate::cleanup::Temp;
use crate::copy::commit::Written;
use crate::copy::copier::Copier;
use crate::copy::plan::ctx;
use crate::meta::{self, Kind};
use pagepipe_dontcache::Writer;
use std::fs::Metadata;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

/// Bytes per read and write.
pub(super) const CHUNK: usize = 1 << 20;

/// The permissions a copy's temporary gets.
pub(super) enum Perms {
    /// Created with these bits, which the kernel masks with the umask or the directory's default
    /// ACL, as cp's `open(O_CREAT)` of a new destination is.
    Create(u32),
    /// Made like this existing destination (its metadata), which cp would have written into:
    /// its mode, access ACL and owner.
    Existing(Metadata),
}

/// How [`Copier::write_temp`] makes a copy.
pub(super) struct How<'a> {
    /// Its permissions.
    pub(super) perms: Perms,
    /// What is known of the source.
    pub(super) layout: Layout,
    /// The source and its metadata, for `--preserve` (None: standard input).
    pub(super) attrs: Option<(&'a Path, &'a Metadata)>,
    /// Written through the page cache for a batch (not synced, see `batch.rs`), or through
    /// the dontcache writer and synced.
    pub(super) batched: bool,
}

/// What [`Copier::write_temp`] knows of its source.
pub(super) enum Layout {
    /// Standard input: read to its end.
    Stream,
    /// A file of this size, as good as fully allocated. `exact`: its blocks cover its size
    /// (a file on a disk, not a pseudo-file whose size says nothing of its content), so
    /// reading stops at `size` rather than at a read that returns 0 (one system call less per
    /// file; a file that grew meanwhile is caught by the size looked at after the copy).
    Dense { size: u64, exact: bool },
    /// A sparse file of `size` bytes, with data only in `extents` (`start..end`, ascending).
    Sparse { size: u64, extents: Vec<(u64, u64)> },
}

/// A source [`Copier::write_temp`] reads, and seeks over holes in.
pub(super) trait ReadSeek: Read + Seek {}
impl<T: Read + Seek> ReadSeek for T {}

/// Whether `src` really has `size` bytes: its last byte reads. A sparse file's hole at the end
/// does (as zeros); a file whose size is not its content does not (sysfs reports 4096 bytes, and
/// no blocks, for a file of a few bytes, which cp copies as the bytes read).
///
/// # Errors
/// The seek's or the read's error.
fn reaches(src: &mut dyn ReadSeek, size: u64) -> io::Result<bool> {
    src.seek(SeekFrom::Start(size - 1))?;
    let mut byte = [0u8; 1];
    loop {
        match src.read(&mut byte) {
            Ok(n) => return Ok(n == 1),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Feeds `n` zero bytes to `hasher` (the holes of a sparse copy, as they read back).
fn hash_zeros(hasher: &mut Xxh3, mut n: u64) {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        hasher.update(&ZEROS[..k]);
        n -= k as u64;
    }
}

impl Copier<'_> {
    /// Copies `src` to a fresh temporary beside `dst` and syncs it (`Writer::finish`). `perms`:
    /// the permission bits to create it with, or the existing destination to make it like.
    /// `layout`: what is known of the source. A dense source of known size has it reserved on
    /// disk first (`Writer::preallocate`: the writeback of the copy then allocates nothing,
    /// which keeps its writes from stalling behind other writeback); where the reservation is
    /// refused the copy goes on without it, as cp would, and a full disk is met mid-copy. The
    /// temporary is this copy's alone, so nothing is left to give back (a source that shrank is
    /// an error, and the temporary goes). A sparse source has
    /// only its data copied, and its holes stay holes, as cp does: its apparent size is never
    /// reserved (a 10 GiB sparse file with 1 MiB of data fits where its size would not).
    pub(super) fn write_temp(
        &mut self,
        src: &mut dyn ReadSeek,
        reading: &str,
        dst: &Path,
        how: How,
    ) -> io::Result<Written> {
        let How {
            perms,
            layout,
            attrs,
            batched,
        } = how;
        let writing = format!("writing '{}'", dst.display());
        let create_mode = match perms {
            Perms::Create(mode) => mode,
            Perms::Existing(_) => 0o600,
        };
        let temp = Temp::create(dst, create_mode)?;
        let own = temp.file().expect("a regular temporary has its descriptor");
        let mut w = if batched {
            Sink::Plain {
                file: own,
                pos: 0,
                uncached: self.uncached_small,
            }
        } else {
            let file = own.try_clone().map_err(ctx(&writing))?;
            Sink::Dontcache(
                Writer::with_mode(file, self.mode)
                    .map_err(ctx(&writing))?
                    .with_window(self.args.window.min(usize::MAX as u64) as usize),
            )
        };
        if let (Layout::Dense { size, .. }, Sink::Dontcache(w)) = (&layout, &mut w) {
            let size = *size;
            match w.preallocate(size) {
                Ok(()) => {}
                // Refused (it may not fit in what unprivileged users may take) or failed part
                // way: copy without it, as cp would, into root's reserve if we are root, and
                // meet ENOSPC mid-copy if the disk is full after all. The temporary is ours
                // alone, so cutting it frees any partial reservation.
                Err(e) if e.kind() == io::ErrorKind::StorageFull => {
                    w.file().set_len(0).map_err(ctx(&writing))?;
                }
                Err(e) => return Err(ctx(&writing)(e)),
            }
        }
        if self.args.verbose {
            let line = format!("'{}' -> '{}'", reading, dst.display());
            self.bar.suspend(|| eprintln!("{line}"));
        }
        self.bar.set_message(
            dst.file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        );
        let reserved = match layout {
            Layout::Dense { size, .. } => size,
            _ => 0,
        };
        let mut hasher = Xxh3::new();
        let (extents, size) = match layout {
            Layout::Sparse { size, extents } => (extents, Some(size)),
            Layout::Dense { size, exact: true } => (vec![(0, size)], None),
            Layout::Dense { .. } | Layout::Stream => (vec![(0, u64::MAX)], None),
        };
        let mut bytes = 0u64;
        // Whether a read met the end of the source before its size said it would: the source
        // ends there, whatever its size says (a sysfs file says 4096 for a few bytes).
        let mut ended = false;
        'extents: for (start, end) in extents {
            if start > bytes {
                // A hole: nothing to write; it reads back as zeros, which --verify hashes.
                if self.args.verify {
                    hash_zeros(&mut hasher, start - bytes);
                }
                src.seek(SeekFrom::Start(start)).map_err(ctx(reading))?;
                w.seek_to(start).map_err(ctx(&writing))?;
                bytes = start;
            }
            while bytes < end {
                let want = (end - bytes).min(CHUNK as u64) as usize;
                let n = match src.read(&mut self.buf[..want]) {
                    Ok(0) => {
                        ended = true;
                        break 'extents;
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ctx(reading)(e)),
                };
                w.write_all(&self.buf[..n]).map_err(ctx(&writing))?;
                if self.args.verify {
                    hasher.update(&self.buf[..n]);
                }
                bytes += n as u64;
                self.bar.inc(n as u64);
            }
        }
        let tail = size.filter(|&size| size > bytes && !ended);
        let tail = match tail {
            Some(size) => reaches(src, size).map_err(ctx(reading))?.then_some(size),
            None => None,
        };
        if let Some(size) = tail {
            // A hole at the end, read back as the source really has it (its last byte read):
            // the length says how long it is.
            if self.args.verify {
                hash_zeros(&mut hasher, size - bytes);
            }
            w.file().set_len(size).map_err(ctx(&writing))?;
            bytes = size;
        }
        if bytes < reserved {
            // The source ended before its size (a file whose size is not its content, or one
            // cut short, which the caller reports): what was reserved past the copy's end is
            // given back. The temporary is ours alone, so the cut touches nobody's data.
            w.file().set_len(bytes).map_err(ctx(&writing))?;
        }
        if let Perms::Existing(was) = &perms {
            meta::like_existing(w.file(), dst, was, dst)?;
        }
        if let Some((src, meta)) = attrs {
            self.preserve(src, meta, temp.path(), dst, Kind::File)?;
            if let Perms::Create(_) = perms {
                self.give_back_omitted(meta, temp.path())?;
            }
        }
        let hash = hasher.digest128();
        let (mode, unsynced) = match w {
            Sink::Plain { uncached, .. } => {
                self.uncached_small &= uncached;
                (None, true)
            }
            Sink::Dontcache(w) => {
                if attrs.is_some() && self.opts.preserve.any_metadata() {
                    // The attributes are metadata that fdatasync may leave out.
                    w.file().sync_all().map_err(ctx(&writing))?;
                }
                let stats = w.finish().map_err(ctx(&writing))?;
                (Some(stats.mode), false)
            }
        };
        Ok(Written {
            temp,
            bytes,
            hash,
            mode,
            unsynced,
            dev: None,
        })
    }
}
