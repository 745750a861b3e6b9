//! Reading without caching: [`Reader`].

use crate::consts::MAX_FOLIO;
use crate::dirty::Range;
use crate::error::{check_regular, is_unsupported, unsupported};
use crate::mode::Mode;
use pagepipe_sys as sys;
use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A file reader that drops what it reads from the page cache: `preadv2(2)` with
/// `RWF_DONTCACHE` where the file supports it, otherwise a buffered read followed by
/// `POSIX_FADV_DONTNEED` on the pages read.
///
/// The fallback drops the pages it read even if they were cached before, and leaves what the
/// kernel read ahead past the last read (at most one readahead window).
///
/// ```
/// use std::io::Read;
/// use pagepipe_dontcache::Reader;
///
/// let path = std::env::temp_dir().join(format!("dontcache-reader-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![3u8; 100_000])?;
/// let mut bytes = Vec::new();
/// Reader::open(&path)?.read_to_end(&mut bytes)?;
/// assert_eq!(bytes, vec![3u8; 100_000]);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Reader {
    file: File,
    mode: Mode,
    pos: u64,
    /// Fallback: pages read and not yet dropped, page aligned (`start..end`, empty when equal).
    /// Dropped up to the last [`MAX_FOLIO`] boundary as reads go on (a large folio is dropped only
    /// once it lies wholly inside the range), the rest when the reads jump elsewhere, reach the
    /// end of the file, or the reader is dropped.
    undropped: std::ops::Range<u64>,
}

impl Reader {
    /// Opens `path` for reading in [`Mode::Auto`].
    ///
    /// # Errors
    /// Those of [`File::open`]; [`io::ErrorKind::InvalidInput`] if it is not a regular file.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Reader> {
        Reader::with_mode(File::open(path)?, Mode::Auto)
    }

    /// Reads `file` in `mode`, from offset 0.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if `file` is not a regular file.
    pub fn with_mode(file: File, mode: Mode) -> io::Result<Reader> {
        check_regular(&file)?;
        Ok(Reader {
            file,
            mode,
            pos: 0,
            undropped: 0..0,
        })
    }

    /// The mode in use: [`Mode::Auto`] until the first non-empty read.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The file being read (to inspect it: its size, how much of it is cached). Reads through
    /// it bypass the reader: their pages are not dropped.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Drops from the page cache, now, what the reads so far left there: in the fallback, the
    /// pages of the last reads (a reader that never read to the end of the file holds them
    /// until it is dropped); nothing in kernel mode. Dropping the reader does the same.
    pub fn drop_read_pages(&mut self) {
        self.drop_undropped(u64::MAX);
    }

    /// Reads into `buf` from `offset`, leaving the cursor alone, like `pread(2)`; 0 at end of file.
    ///
    /// # Errors
    /// The read's error; [`io::ErrorKind::Unsupported`] for the first read in [`Mode::Kernel`] on a
    /// file without `RWF_DONTCACHE`.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match self.mode {
            Mode::Fallback => self.read_fallback(buf, offset),
            Mode::Kernel => sys::fs::preadv2(&self.file, buf, offset, sys::fs::RWF_DONTCACHE)
                .map_err(|e| {
                    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                        unsupported(e)
                    } else {
                        e
                    }
                }),
            Mode::Auto => match sys::fs::preadv2(&self.file, buf, offset, sys::fs::RWF_DONTCACHE) {
                Ok(n) => {
                    self.mode = Mode::Kernel;
                    Ok(n)
                }
                Err(e) if is_unsupported(&e) => {
                    self.mode = Mode::Fallback;
                    self.read_fallback(buf, offset)
                }
                Err(e) => Err(e),
            },
        }
    }

    fn read_fallback(&mut self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.file.read_at(buf, offset)?;
        if n == 0 {
            self.drop_undropped(u64::MAX);
            return Ok(0);
        }
        let r = Range::of_write(offset, n as u64);
        let contiguous = r.start <= self.undropped.end && r.end >= self.undropped.start;
        if !contiguous {
            self.drop_undropped(u64::MAX);
            self.undropped = r.start..r.end;
        } else {
            self.undropped = self.undropped.start.min(r.start)..self.undropped.end.max(r.end);
        }
        let boundary = self.undropped.end / MAX_FOLIO * MAX_FOLIO;
        self.drop_undropped(boundary);
        Ok(n)
    }

    /// Drops the undropped pages below `upto` (all of them for `u64::MAX`).
    fn drop_undropped(&mut self, upto: u64) {
        let end = self.undropped.end.min(upto);
        if end > self.undropped.start {
            // Only fails for a bad fd or a non-regular file (excluded at creation).
            let _ = sys::fs::fadvise_dontneed(
                &self.file,
                self.undropped.start,
                end - self.undropped.start,
            );
            self.undropped.start = end;
        }
    }
}

impl Drop for Reader {
    /// Drops what the last reads left in the cache.
    fn drop(&mut self) {
        self.drop_undropped(u64::MAX);
    }
}

impl io::Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Reader {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.pos = seek_target(&self.file, self.pos, pos)?;
        Ok(self.pos)
    }
}

/// Where `pos` moves a cursor at `cur` in `file` (`SeekFrom::End` is relative to its current
/// size); `InvalidInput` for a target below 0 or past `u64::MAX`.
pub(crate) fn seek_target(file: &File, cur: u64, pos: SeekFrom) -> io::Result<u64> {
    let (base, delta) = match pos {
        SeekFrom::Start(n) => (n, 0),
        SeekFrom::Current(d) => (cur, d),
        SeekFrom::End(d) => (file.metadata()?.len(), d),
    };
    base.checked_add_signed(delta).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("seek to {base} + {delta} is out of range"),
        )
    })
}
