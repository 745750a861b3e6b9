//! The copy of one regular file, or of standard input: its destination checked, its layout
//! (dense or sparse) found, its temporary written, its size checked after, then put in place.

use crate::batch;
use crate::copy::attrs::omitted_bits;
use crate::copy::copier::Copier;
use crate::copy::dest::{refuse_trailing_slash, refuse_unreplaceable};
use crate::copy::plan::{ctx, invalid, parent_of};
use crate::copy::temp::{How, Layout, Perms};
use pagepipe_dontcache::{self as dontcache, Reader};
use std::fs::{File, Metadata};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A source read to its end (standard input, a fifo, a character device), which is never
/// sparse: seeking it is never asked for.
struct StreamSource<R>(R);

impl<R: Read> Read for StreamSource<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R> Seek for StreamSource<R> {
    fn seek(&mut self, _: SeekFrom) -> io::Result<u64> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a stream cannot seek",
        ))
    }
}

/// The data extents of `file`'s first `size` bytes (`lseek(2)` with `SEEK_DATA`/`SEEK_HOLE`).
///
/// # Errors
/// The OS's error (`EINVAL` where the filesystem does not tell holes apart).
fn data_extents(file: &File, size: u64) -> io::Result<Vec<(u64, u64)>> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        // SAFETY: lseek(2) on a descriptor borrowed from a live File touches no memory (it moves
        // that description's offset, which nothing reading this file uses: Reader reads at
        // explicit offsets).
        let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // no data past pos
            }
            return Err(e);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(io::Error::last_os_error());
        }
        let (start, end) = (data as u64, (hole as u64).min(size));
        if start >= end {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    Ok(out)
}

/// The holes of a file of `size` bytes with data in `extents` (ascending): the ranges between
/// them and after the last.
fn holes_of(extents: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut holes = Vec::new();
    let mut at = 0;
    for &(start, end) in extents {
        if start > at {
            holes.push((at, start));
        }
        at = at.max(end);
    }
    if size > at {
        holes.push((at, size));
    }
    holes
}

/// Whether standard input was closed when the process started. Rust's runtime reopens a closed
/// descriptor 0 on `/dev/null` for reading and writing before `main`, which reads as an empty
/// input; a shell's `< /dev/null` opens it read-only. Copying that empty input replaced the
/// destination with an empty file and exited 0.
fn stdin_was_closed() -> bool {
    // SAFETY: fstat(2) writes a stat to the pointer we pass; all zeroes is a valid stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; descriptor 0 is only inspected.
    if unsafe { libc::fstat(0, &mut st) } != 0 {
        return true;
    }
    // SAFETY: F_GETFL only reads descriptor 0's status flags.
    let flags = unsafe { libc::fcntl(0, libc::F_GETFL) };
    let dev_null = st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 3);
    dev_null && flags >= 0 && flags & libc::O_ACCMODE == libc::O_RDWR
}

impl Copier<'_> {
    pub(super) fn copy_file(&mut self, src: &Path, dst: &Path, meta: &Metadata) -> io::Result<()> {
        let given = dst;
        refuse_trailing_slash(given)?;
        // Looked at once: a new name costs one failed stat, and none at all in a directory this
        // run made (the common case in a tree), where only this run puts names (cp's shortcut).
        let (dst, existing) = if self.made_dirs.contains(&parent_of(dst)) {
            self.refuse_just_created(&format!("'{}'", src.display()), dst)?;
            (dst.to_path_buf(), None)
        } else {
            self.destination(&format!("'{}'", src.display()), dst)?
        };
        let dst = &dst;
        if existing.is_some() {
            refuse_unreplaceable(dst)?;
        }
        if let Some(d) = &existing {
            if d.dev() == meta.dev() && d.ino() == meta.ino() {
                return Err(invalid(format!(
                    "'{}' and '{}' are the same file",
                    src.display(),
                    dst.display()
                )));
            }
            if d.is_dir() {
                return Err(invalid(format!(
                    "cannot overwrite directory '{}' with non-directory '{}'",
                    dst.display(),
                    src.display()
                )));
            }
        }
        let what = format!("reading '{}'", src.display());
        let file = File::open(src).map_err(ctx(&what))?;
        self.summary.src_cached_before += dontcache::cached_bytes(&file).unwrap_or(0);
        let mut reader = Reader::with_mode(file, self.mode).map_err(ctx(&what))?;
        let size = meta.len();
        // cp: an existing destination keeps its mode (cp writes into it); a new one is created
        // with the source's permission bits, which the kernel masks with the umask or the
        // directory's default ACL (never chmod'ed afterwards, which would undo that mask).
        let perms = match existing {
            Some(d) if d.is_file() => Perms::Existing(d),
            _ => Perms::Create(meta.mode() & 0o777 & !omitted_bits(&self.opts.preserve, false)),
        };
        let layout = if meta.blocks() * 512 < size {
            // Sparse (fewer blocks than bytes, cp's test): copy the data, keep the holes.
            match data_extents(reader.file(), size) {
                Ok(extents) => Layout::Sparse { size, extents },
                Err(_) => Layout::Dense { size, exact: false },
            }
        } else {
            Layout::Dense {
                size,
                exact: size > 0,
            }
        };
        // Where the source has no data: what a read there caches (the kernel's readahead into
        // a hole, the read of its last byte) is dropped after the copy, which the reads' own
        // dropping missed (1-12 MiB were left cached of a source ending in a hole).
        let holes = match &layout {
            Layout::Sparse { size, extents } => holes_of(extents, *size),
            _ => Vec::new(),
        };
        // A small file goes in a batch, if its directory can be opened to sync its filesystem
        // (a missing one is reported by the create, naming the destination).
        let fs_dev = if size <= batch::SMALL {
            self.batch.watch(&parent_of(dst)).ok()
        } else {
            None
        };
        let batched = fs_dev.is_some();
        let how = How {
            perms,
            layout,
            attrs: Some((src, meta)),
            batched,
        };
        let mut written = self.write_temp(&mut reader, &what, dst, how)?;
        written.dev = fs_dev;
        // The size said before and after the copy, and the bytes the reads gave, which are the
        // copy (as cp copies what it reads to the end of the file). A file whose size says
        // nothing of its content (a /proc file says 0, a sysfs one 4096) says the same after;
        // one that was truncated or grew while being read does not: that is an error.
        let now = reader.file().metadata().map_err(ctx(&what))?.len();
        if written.bytes < size && now < size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "'{}' shrank from {size} to {now} bytes while being copied (vanished or \
                     truncated; {} bytes copied)",
                    src.display(),
                    written.bytes
                ),
            ));
        }
        if now != written.bytes && now != size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "'{}' changed size while being copied ({} bytes copied, {now} now)",
                    src.display(),
                    written.bytes
                ),
            ));
        }
        self.summary
            .read_modes
            .insert(format!("{:?}", reader.mode()).to_lowercase());
        reader.drop_read_pages(); // what its last reads left cached
        for &(start, end) in &holes {
            // Fails only for a bad descriptor or a non-regular file.
            let _ = pagepipe_sys::fs::fadvise_dontneed(reader.file(), start, end - start);
        }
        self.summary.src_bytes += written.bytes;
        self.summary.src_cached += dontcache::cached_bytes(reader.file()).unwrap_or(0);
        drop(reader);
        // As named too: a symlink at `given` was followed to `dst`.
        self.created.insert(given.to_path_buf());
        self.commit_or_defer(written, dst)
    }

    pub(super) fn copy_stdin(&mut self, dst: &Path) -> io::Result<()> {
        refuse_trailing_slash(dst)?;
        let (dst, existing) = self.destination("standard input", dst)?;
        let dst = &dst;
        refuse_unreplaceable(dst)?;
        if existing.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(invalid(format!(
                "cannot overwrite directory '{}' with standard input",
                dst.display()
            )));
        }
        if stdin_was_closed() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "standard input is closed; '{}' is left as it was (to copy an empty input, \
                     redirect it from /dev/null)",
                    dst.display()
                ),
            ));
        }
        self.summary.from_stdin = true;
        let perms = match existing {
            Some(d) if d.is_file() => Perms::Existing(d),
            _ => Perms::Create(0o666),
        };
        let mut stdin = StreamSource(io::stdin().lock());
        let how = How {
            perms,
            layout: Layout::Stream,
            attrs: None,
            batched: false,
        };
        let written = self.write_temp(&mut stdin, "reading standard input", dst, how)?;
        self.commit(written, dst)
    }

    /// A fifo or character device named as SRC without `-r`: read to its end and copied into a
    /// regular file, as cp copies it (a fifo has no size: its content is streamed into the
    /// durable temporary, as standard input is). Opening a fifo waits for a writer, as cp's
    /// open does. No page cache is involved: a fifo's and a device's reads are not cached.
    pub(super) fn copy_stream(
        &mut self,
        src: &Path,
        dst: &Path,
        meta: &Metadata,
    ) -> io::Result<()> {
        refuse_trailing_slash(dst)?;
        let (dst, existing) = self.destination(&format!("'{}'", src.display()), dst)?;
        let dst = &dst;
        if let Some(d) = &existing {
            refuse_unreplaceable(dst)?;
            if d.is_dir() {
                return Err(invalid(format!(
                    "cannot overwrite directory '{}' with non-directory '{}'",
                    dst.display(),
                    src.display()
                )));
            }
        }
        let reading = format!("reading '{}'", src.display());
        let file = File::open(src).map_err(ctx(&reading))?;
        let perms = match existing {
            Some(d) if d.is_file() => Perms::Existing(d),
            _ => Perms::Create(meta.mode() & 0o777 & !omitted_bits(&self.opts.preserve, false)),
        };
        let how = How {
            perms,
            layout: Layout::Stream,
            attrs: Some((src, meta)),
            batched: false,
        };
        let written = self.write_temp(&mut StreamSource(file), &reading, dst, how)?;
        self.commit(written, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::holes_of;

    #[test]
    fn holes_are_what_lies_between_and_after_the_data() {
        assert_eq!(holes_of(&[], 10), vec![(0, 10)]);
        assert_eq!(holes_of(&[(0, 4)], 4), vec![]);
        assert_eq!(
            holes_of(&[(2, 4), (6, 8)], 12),
            vec![(0, 2), (4, 6), (8, 12)]
        );
    }
}
