//! Resolving `SRC... DST` as cp does, walking trees, and copying one file through a temporary.

use crate::batch::{self, Batch, Pending, Sink};
use crate::cleanup::Temp;
use crate::cli::{Args, Preserve, Resolved};
use crate::meta::{self, Kind};
use indicatif::{ProgressBar, ProgressStyle};
use pagepipe_dontcache::{self as dontcache, Mode, Reader, Writer};
use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File, Metadata, Permissions};
use std::io::{self, IsTerminal, Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// Bytes per read and write.
const CHUNK: usize = 1 << 20;

/// What a run copied and left behind.
#[derive(Debug, Default)]
pub struct Summary {
    files: u64,
    bytes: u64,
    elapsed: Duration,
    verified: u64,
    /// Errors reported and skipped over, as cp does (a directory without -r, a special file).
    skipped: u64,
    /// The modes the writers and readers resolved to.
    write_modes: BTreeSet<String>,
    read_modes: BTreeSet<String>,
    /// Source bytes from regular files (not stdin) and how much of them is cached after the copy.
    src_bytes: u64,
    src_cached: u64,
    /// Of the source bytes, how many were cached before the copy read them (a `RWF_DONTCACHE`
    /// read leaves pages that were cached before it where they are).
    src_cached_before: u64,
    dst_bytes: u64,
    dst_cached: u64,
    from_stdin: bool,
}

impl Summary {
    /// Whether an error was reported along the way (the exit status must say so).
    pub fn failed(&self) -> bool {
        self.skipped > 0
    }
}

/// `1536` -> `1.50 KiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn join(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "-".into()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join("+")
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "copied {} file(s), {} in {:.2} s ({:.0} MB/s); writes: {}, reads: {}",
            self.files,
            human(self.bytes),
            secs,
            if secs > 0.0 {
                self.bytes as f64 / 1e6 / secs
            } else {
                0.0
            },
            join(&self.write_modes),
            join(&self.read_modes),
        )?;
        if self.verified > 0 {
            writeln!(
                f,
                "verified {} file(s): each copy, read back, has the xxh3-128 of the data read",
                self.verified
            )?;
        }
        let src = if self.from_stdin && self.src_bytes == 0 {
            "- (standard input)".to_string()
        } else {
            let before = if self.src_cached_before > 0 {
                format!("; {} was cached before", human(self.src_cached_before))
            } else {
                String::new()
            };
            // The cache is counted in whole pages: no more than the file, for a small one.
            let cached = self.src_cached.min(self.src_bytes);
            format!(
                "{} of {} ({:.1}%{before})",
                human(cached),
                human(self.src_bytes),
                pct(cached, self.src_bytes)
            )
        };
        writeln!(
            f,
            "left in the page cache: source {src}, destination {} of {} ({:.1}%)",
            human(self.dst_cached.min(self.dst_bytes)),
            human(self.dst_bytes),
            pct(self.dst_cached.min(self.dst_bytes), self.dst_bytes)
        )
    }
}

/// Adds the path to an error's message, keeping its kind.
fn ctx(what: impl fmt::Display) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn is_stdin(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// The name `src` gets inside a destination directory.
fn name_of(src: &Path) -> io::Result<PathBuf> {
    if let Some(name) = src.file_name() {
        return Ok(PathBuf::from(name));
    }
    let abs =
        fs::canonicalize(src).map_err(ctx(format_args!("cannot stat '{}'", src.display())))?;
    abs.file_name().map(PathBuf::from).ok_or_else(|| {
        invalid(format!(
            "cannot copy '{}': it has no name to give the copy",
            src.display()
        ))
    })
}

/// Whether `src` ends in `/.` or is `.`: a directory's contents, to cp (`Path::file_name`
/// drops that last component).
fn names_contents(src: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let bytes = src.as_os_str().as_bytes();
    bytes == b"." || bytes.ends_with(b"/.")
}

/// Pairs every source with its destination path, following cp's rules.
fn plan(srcs: &[PathBuf], dst: &Path) -> io::Result<Vec<(PathBuf, PathBuf)>> {
    if is_stdin(dst) {
        return Err(invalid(
            "DST '-': writing to standard output is not supported; name a file".into(),
        ));
    }
    if srcs.iter().filter(|s| is_stdin(s)).count() > 1 {
        return Err(invalid(
            "'-' (standard input) is given more than once".into(),
        ));
    }
    let dst_is_dir = fs::metadata(dst).is_ok_and(|m| m.is_dir());
    if srcs.len() > 1 && !dst_is_dir {
        return Err(invalid(format!(
            "target '{}' is not a directory (needed for {} sources)",
            dst.display(),
            srcs.len()
        )));
    }
    srcs.iter()
        .map(|src| {
            // cp: `SRC/.` (and `.`) names a directory's contents, which go into DST itself.
            if !dst_is_dir || names_contents(src) {
                return Ok((src.clone(), dst.to_path_buf()));
            }
            if is_stdin(src) {
                return Err(invalid(format!(
                    "cannot copy standard input into directory '{}': give the file's path as DST",
                    dst.display()
                )));
            }
            Ok((src.clone(), dst.join(name_of(src)?)))
        })
        .collect()
}

/// Bytes of regular files under `src` (for the progress bar; errors count as 0, the copy reports
/// them).
fn total_size(src: &Path, recursive: bool) -> u64 {
    let meta = if recursive {
        fs::symlink_metadata(src)
    } else {
        fs::metadata(src)
    };
    match meta {
        Ok(m) if m.is_file() => m.len(),
        Ok(m) if m.is_dir() && recursive => fs::read_dir(src)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| total_size(&e.path(), true))
                    .sum()
            })
            .unwrap_or(0),
        _ => 0,
    }
}

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
        uncached_small: Mode::from(args.mode) != Mode::Fallback,
        dir_finishes: Vec::new(),
        umask: umask(),
        mode: args.mode.into(),
        bar: progress_bar(total),
        buf: vec![0; CHUNK],
        dirs: BTreeMap::new(),
        created: BTreeSet::new(),
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

/// The permissions a copy's temporary gets.
enum Perms {
    /// Created with these bits, which the kernel masks with the umask or the directory's default
    /// ACL, as cp's `open(O_CREAT)` of a new destination is.
    Create(u32),
    /// Made like this existing destination (its metadata), which cp would have written into:
    /// its mode, access ACL and owner.
    Existing(Metadata),
}

/// How [`Copier::write_temp`] makes a copy.
struct How<'a> {
    /// Its permissions.
    perms: Perms,
    /// What is known of the source.
    layout: Layout,
    /// The source and its metadata, for `--preserve` (None: standard input).
    attrs: Option<(&'a Path, &'a Metadata)>,
    /// Written through the page cache for a batch (not synced, see `batch.rs`), or through
    /// the dontcache writer and synced.
    batched: bool,
}

/// What [`Copier::write_temp`] knows of its source.
enum Layout {
    /// Standard input: read to its end.
    Stream,
    /// A file of this size, as good as fully allocated.
    Dense(u64),
    /// A sparse file of `size` bytes, with data only in `extents` (`start..end`, ascending).
    Sparse { size: u64, extents: Vec<(u64, u64)> },
}

/// A source [`Copier::write_temp`] reads, and seeks over holes in.
trait ReadSeek: Read + Seek {}
impl<T: Read + Seek> ReadSeek for T {}

/// Standard input, which is never sparse: seeking it is never asked for.
struct StdinSource<'a>(io::StdinLock<'a>);

impl Read for StdinSource<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Seek for StdinSource<'_> {
    fn seek(&mut self, _: SeekFrom) -> io::Result<u64> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "standard input cannot seek",
        ))
    }
}

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

/// The process's umask (read by setting it and putting it back, while pagepipe-cp has one
/// thread: `run` calls this before the first writer starts the flusher threads).
fn umask() -> u32 {
    // SAFETY: umask(2) cannot fail and touches no memory; set back at once.
    let old = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    old as u32
}

/// A copy written to its temporary and synced, not yet renamed into place.
struct Written {
    temp: Temp,
    bytes: u64,
    hash: u128,
    /// The writer's mode; None for a small file of a batch, written through the page cache.
    mode: Option<Mode>,
    /// A batch's copy, not yet synced (see `batch.rs`).
    unsynced: bool,
    /// A batch's copy: the device of the filesystem it is on.
    dev: Option<u64>,
}

/// What is left to do to a directory once its entries have their names: give it back its
/// mode (or the group and other bits left out when it was made) and what `--preserve` keeps.
/// Done when its last entry is renamed into it: a rename into it later would move its times,
/// and a mode without write permission would refuse the rename.
struct DirFinish {
    src: PathBuf,
    meta: Metadata,
    dst: PathBuf,
    created: bool,
    restore: Option<u32>,
}

struct Copier<'a> {
    args: &'a Args,
    /// The options as cp reads them together.
    opts: Resolved,
    /// With `--preserve=links`: each source with more than one link this run copied, by
    /// device and inode, and where its copy is; the next name of it is linked to that copy.
    links: HashMap<(u64, u64), PathBuf>,
    /// Small copies written, waiting for their batch's sync to be renamed into place.
    batch: Batch,
    /// Whether a batch's copies are written with `RWF_DONTCACHE` (until a file refuses it;
    /// never in `--mode fallback`).
    uncached_small: bool,
    /// Directories whose entries are all copied, waiting for the batch's renames (in the order
    /// they were finished: a directory's after its subdirectories').
    dir_finishes: Vec<DirFinish>,
    /// The process's umask: new files and directories get the source's permission bits less
    /// these, as cp gives them without `-p`.
    umask: u32,
    mode: Mode,
    bar: ProgressBar,
    buf: Vec<u8>,
    /// Directories that received a new entry: synced at the end so the renames are durable.
    dirs: BTreeMap<PathBuf, Vec<PathBuf>>,
    /// Every destination this run put a copy at, as named and as followed: a second source for
    /// one of them (`a/x b/x DIR`) is refused, as cp refuses it, rather than replacing the first
    /// one's copy.
    created: BTreeSet<PathBuf>,
    /// Every file named on the command line, as cp remembers them: its directory's device and
    /// inode, its name there, its own device and inode. The same one again (`x x DIR`, `x ./x
    /// DIR`) is a warning, as in cp; a hard link of it under another name is another source.
    seen: BTreeSet<(u64, u64, std::ffi::OsString, u64, u64)>,
    summary: Summary,
}

impl Copier<'_> {
    fn copy_top(&mut self, src: &Path, dst: &Path) -> io::Result<()> {
        if is_stdin(src) {
            return self.copy_stdin(dst);
        }
        // As cp: a file (not a directory) named twice on the command line is copied once, with
        // a warning. Files a recursion reaches twice (`-r a a/sub DIR`) go to two places, and
        // are copied to both.
        let meta = if self.opts.follow_top {
            fs::metadata(src)
        } else {
            fs::symlink_metadata(src)
        };
        if let Some(meta) = meta.ok().filter(|m| !m.is_dir()) {
            if !self.first_sight(src, &meta) {
                let msg = format!(
                    "pagepipe-cp: warning: source file '{}' specified more than once",
                    src.display()
                );
                self.bar.suspend(|| eprintln!("{msg}"));
                return Ok(());
            }
        }
        self.copy_entry(src, dst, true)
    }

    /// Reports an error that cp reports and goes on from (the exit status will be 1).
    fn skip(&mut self, msg: String) {
        self.bar.suspend(|| eprintln!("pagepipe-cp: {msg}"));
        self.summary.skipped += 1;
    }

    /// Copies `src` to `dst` by its kind; `top`: named on the command line (whose symlinks
    /// cp follows without `-r`).
    fn copy_entry(&mut self, src: &Path, dst: &Path, top: bool) -> io::Result<()> {
        let follow = if top {
            self.opts.follow_top
        } else {
            self.opts.follow_inside
        };
        let meta = if follow {
            fs::metadata(src)
        } else {
            fs::symlink_metadata(src)
        }
        .map_err(ctx(format_args!("cannot stat '{}'", src.display())))?;
        let kind = meta.file_type();
        if !kind.is_dir() && self.opts.preserve.links && meta.nlink() > 1 {
            if let Some(first) = self.links.get(&(meta.dev(), meta.ino())).cloned() {
                return self.link_to(&first, dst);
            }
        }
        let copied = self.copy_kind(src, dst, &meta);
        if copied.is_ok() && !kind.is_dir() && self.opts.preserve.links && meta.nlink() > 1 {
            self.links
                .insert((meta.dev(), meta.ino()), dst.to_path_buf());
        }
        copied
    }

    fn copy_kind(&mut self, src: &Path, dst: &Path, meta: &Metadata) -> io::Result<()> {
        let kind = meta.file_type();
        if kind.is_dir() {
            if !self.opts.recursive {
                self.skip(format!(
                    "-r not specified; omitting directory '{}'",
                    src.display()
                ));
                return Ok(());
            }
            self.copy_dir(src, dst, meta)
        } else if kind.is_file() {
            self.copy_file(src, dst, meta)
        } else if kind.is_symlink() {
            self.copy_symlink(src, dst, meta)
        } else if self.opts.recursive {
            // cp -R makes fifos, device nodes and sockets anew (it reads them only without -R).
            self.copy_special(src, dst, meta)
        } else {
            self.skip(format!(
                "skipping '{}': not a regular file, directory or symlink",
                src.display()
            ));
            Ok(())
        }
    }

    fn copy_dir(&mut self, src: &Path, dst: &Path, meta: &Metadata) -> io::Result<()> {
        refuse_copy_into_itself(src, dst)?;
        let created = match fs::symlink_metadata(dst) {
            Ok(m) if m.is_dir() => false,
            Ok(_) => {
                return Err(invalid(format!(
                    "cannot overwrite non-directory '{}' with directory '{}'",
                    dst.display(),
                    src.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.make_dir(dst, meta)?;
                true
            }
            Err(e) => return Err(ctx(format_args!("cannot stat '{}'", dst.display()))(e)),
        };
        // cp: a new directory this process cannot fill (no u+rwx) gets it while it is filled,
        // and its mode back after.
        let mut restore = None;
        if created {
            let now = mode_of(dst)?;
            if now & 0o700 != 0o700 {
                set_mode(dst, now | 0o700)?;
                restore = Some(now);
            }
        }
        let mut entries: Vec<_> = fs::read_dir(src)
            .and_then(|it| it.collect::<io::Result<Vec<_>>>())
            .map_err(ctx(format_args!(
                "cannot read directory '{}'",
                src.display()
            )))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            // As cp: report, and go on with the next entry.
            if let Err(e) = self.copy_entry(&e.path(), &dst.join(e.file_name()), false) {
                self.skip(e.to_string());
            }
        }
        let finish = DirFinish {
            src: src.to_path_buf(),
            meta: meta.clone(),
            dst: dst.to_path_buf(),
            created,
            restore,
        };
        if self.batch.is_empty() {
            self.finish_dir(finish)
        } else {
            self.dir_finishes.push(finish);
            Ok(())
        }
    }

    /// Finishes a directory whose entries all have their names (see [`DirFinish`]).
    fn finish_dir(&mut self, finish: DirFinish) -> io::Result<()> {
        let DirFinish {
            src,
            meta,
            dst,
            created,
            mut restore,
        } = finish;
        let (src, meta, dst) = (&*src, &meta, &*dst);
        let keep = self.opts.preserve;
        if !created || keep.mode {
            // cp leaves an existing directory's mode alone, unless it keeps the source's.
            return self.preserve(src, meta, dst, dst, Kind::Dir);
        }
        // Last, so that a read-only source directory's copy could be filled first. cp gives
        // back the group and other write bits `make_dir` left out, as far as the umask allows
        // (even where a default ACL masked them: cp's own rule), and the mode the directory was
        // made with if it was raised to fill it.
        let omitted = meta.mode() & omitted_bits(&keep, true) & !self.umask;
        if restore.is_none() && omitted != 0 {
            let now = mode_of(dst)?;
            if omitted & !now != 0 {
                restore = Some(now);
            }
        }
        if let Some(mode) = restore {
            set_mode(dst, mode | omitted)?;
        }
        self.preserve(src, meta, dst, dst, Kind::Dir)
    }

    /// A new file made without group and other bits because its owner was to change
    /// (`--preserve=ownership` without `mode`) gets them back once it has its owner, as far as
    /// the umask allows, as cp gives them back.
    fn give_back_omitted(&self, meta: &Metadata, at: &Path) -> io::Result<()> {
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
    fn preserve(
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

    /// Syncs the batch of small copies, renames each into place (or reports why not), then
    /// finishes the directories that were waiting for them.
    fn flush_batch(&mut self) {
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

    /// Makes `dst` another name of the copy at `first` (`--preserve=links`), through a
    /// temporary name and a rename, as every copy is put in place.
    fn link_to(&mut self, first: &Path, dst: &Path) -> io::Result<()> {
        // The first copy may wait in the batch, at its temporary name.
        self.flush_batch();
        self.refuse_just_created(&format!("a link to '{}'", first.display()), dst)?;
        let (a, b) = (fs::symlink_metadata(first), fs::symlink_metadata(dst));
        if let (Ok(a), Ok(b)) = (&a, &b) {
            if a.dev() == b.dev() && a.ino() == b.ino() {
                return Ok(()); // linked already (a rename onto itself would do nothing)
            }
        }
        if b.is_ok_and(|b| b.is_dir()) {
            return Err(invalid(format!(
                "cannot overwrite directory '{}' with non-directory",
                dst.display()
            )));
        }
        let temp = Temp::hard_link(dst, first)?;
        temp.commit(dst)?;
        self.named_in(dst);
        self.created.insert(dst.to_path_buf());
        self.summary.files += 1;
        Ok(())
    }

    /// Makes a fifo, device node or socket at `dst` like `src`, as cp -R does (`mknod(2)`,
    /// with the source's permission bits for the kernel to mask with the umask or a default
    /// ACL), through a temporary name and a rename.
    fn copy_special(&mut self, src: &Path, dst: &Path, meta: &Metadata) -> io::Result<()> {
        refuse_trailing_slash(dst)?;
        refuse_unreplaceable(dst)?;
        self.refuse_just_created(&format!("'{}'", src.display()), dst)?;
        if fs::symlink_metadata(dst).is_ok_and(|m| m.is_dir()) {
            return Err(invalid(format!(
                "cannot overwrite directory '{}' with non-directory '{}'",
                dst.display(),
                src.display()
            )));
        }
        let keep = self.opts.preserve;
        let mode = meta.mode() & 0o7777 & !omitted_bits(&keep, false);
        let temp = Temp::special(dst, meta.mode() & libc::S_IFMT, mode, meta.rdev())?;
        self.preserve(src, meta, temp.path(), dst, Kind::File)?;
        self.give_back_omitted(meta, temp.path())?;
        temp.commit(dst)?;
        self.named_in(dst);
        self.created.insert(dst.to_path_buf());
        self.summary.files += 1;
        Ok(())
    }

    /// Makes the directory `dst` for the source directory `meta` as cp's `mkdir(2)` makes it:
    /// with the source's mode bits (the sticky bit included) less group and other write (all of
    /// group and other's when the owner is to change), so that nobody else writes into it
    /// before it is ready; the kernel then masks them with the
    /// umask or the parent's default ACL, and a set-group-id parent passes its bit on.
    fn make_dir(&mut self, dst: &Path, meta: &Metadata) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .mode(meta.mode() & 0o7777 & !omitted_bits(&self.opts.preserve, true))
            .create(dst)
            .map_err(ctx(format_args!(
                "cannot create directory '{}'",
                dst.display()
            )))?;
        crate::stale::mark_clean(dst);
        self.named_in(dst);
        Ok(())
    }

    fn copy_symlink(&mut self, src: &Path, dst: &Path, meta: &Metadata) -> io::Result<()> {
        refuse_trailing_slash(dst)?;
        refuse_unreplaceable(dst)?;
        let target = fs::read_link(src)
            .map_err(ctx(format_args!("cannot read link '{}'", src.display())))?;
        if fs::symlink_metadata(dst).is_ok_and(|m| m.is_dir()) {
            return Err(invalid(format!(
                "cannot overwrite directory '{}' with a symlink",
                dst.display()
            )));
        }
        self.refuse_just_created(&format!("'{}'", src.display()), dst)?;
        // A registered temporary, so that a signal between the two steps removes it too.
        let temp = Temp::symlink(dst, &target)?; // its error names dst
        self.preserve(src, meta, temp.path(), dst, Kind::Symlink)?;
        temp.commit(dst)?;
        self.named_in(dst);
        self.created.insert(dst.to_path_buf());
        Ok(())
    }

    fn copy_file(&mut self, src: &Path, dst: &Path, meta: &Metadata) -> io::Result<()> {
        let given = dst;
        refuse_trailing_slash(given)?;
        let dst = &self.destination(&format!("'{}'", src.display()), dst)?;
        // Looked at once: a new name (the common case in a tree) costs one failed stat.
        let existing = fs::metadata(dst).ok();
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
        let probe = file.try_clone().map_err(ctx(&what))?;
        self.summary.src_cached_before += dontcache::cached_bytes(&probe).unwrap_or(0);
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
            match data_extents(&probe, size) {
                Ok(extents) => Layout::Sparse { size, extents },
                Err(_) => Layout::Dense(size),
            }
        } else {
            Layout::Dense(size)
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
        let now = probe.metadata().map_err(ctx(&what))?.len();
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
        drop(reader); // drops what its last reads left cached
        self.summary.src_bytes += written.bytes;
        self.summary.src_cached += dontcache::cached_bytes(&probe).unwrap_or(0);
        // As named too: a symlink at `given` was followed to `dst`.
        self.created.insert(given.to_path_buf());
        self.commit_or_defer(written, dst)
    }

    fn copy_stdin(&mut self, dst: &Path) -> io::Result<()> {
        refuse_trailing_slash(dst)?;
        let dst = &self.destination("standard input", dst)?;
        refuse_unreplaceable(dst)?;
        if fs::metadata(dst).is_ok_and(|m| m.is_dir()) {
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
        let perms = match fs::metadata(dst) {
            Ok(d) if d.is_file() => Perms::Existing(d),
            _ => Perms::Create(0o666),
        };
        let mut stdin = StdinSource(io::stdin().lock());
        let how = How {
            perms,
            layout: Layout::Stream,
            attrs: None,
            batched: false,
        };
        let written = self.write_temp(&mut stdin, "reading standard input", dst, how)?;
        self.commit(written, dst)
    }

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
    fn write_temp(
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
        let (temp, file) = Temp::create(dst, create_mode)?;
        let mut w = if batched {
            Sink::Plain {
                file,
                pos: 0,
                uncached: self.uncached_small,
            }
        } else {
            Sink::Dontcache(
                Writer::with_mode(file, self.mode)
                    .map_err(ctx(&writing))?
                    .with_window(self.args.window.min(usize::MAX as u64) as usize),
            )
        };
        if let (Layout::Dense(size), Sink::Dontcache(w)) = (&layout, &mut w) {
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
            Layout::Dense(size) => size,
            _ => 0,
        };
        let mut hasher = Xxh3::new();
        let (extents, size) = match layout {
            Layout::Sparse { size, extents } => (extents, Some(size)),
            Layout::Dense(_) | Layout::Stream => (vec![(0, u64::MAX)], None),
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
        match w {
            Sink::Plain { uncached, .. } => {
                // Its descriptor closes; the temporary's own (`Temp::file`) stays open.
                self.uncached_small &= uncached;
                Ok(Written {
                    temp,
                    bytes,
                    hash,
                    mode: None,
                    unsynced: true,
                    dev: None,
                })
            }
            Sink::Dontcache(w) => {
                if attrs.is_some() && self.opts.preserve.any_metadata() {
                    // The attributes are metadata that fdatasync may leave out.
                    w.file().sync_all().map_err(ctx(&writing))?;
                }
                let stats = w.finish().map_err(ctx(&writing))?;
                Ok(Written {
                    temp,
                    bytes,
                    hash,
                    mode: Some(stats.mode),
                    unsynced: false,
                    dev: None,
                })
            }
        }
    }

    /// Renames a synced copy into place now, or adds a batch's copy to the batch (synced and
    /// renamed with it, see `batch.rs`).
    fn commit_or_defer(&mut self, written: Written, dst: &Path) -> io::Result<()> {
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
    fn commit(&mut self, written: Written, dst: &Path) -> io::Result<()> {
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
        let cached = match written.temp.file() {
            Some(file) => dontcache::cached_bytes(file).unwrap_or(0),
            None => {
                let copy = File::open(written.temp.path()).map_err(ctx(format_args!(
                    "reading the copy for '{}'",
                    dst.display()
                )))?;
                dontcache::cached_bytes(&copy).unwrap_or(0)
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
    fn sync_dirs(&mut self) -> io::Result<()> {
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
    fn named_in(&mut self, dst: &Path) {
        self.dirs
            .entry(parent_of(dst))
            .or_default()
            .push(dst.to_path_buf());
    }

    /// Where a copy of `src` (as the messages name it) to `dst` goes, as cp decides: `dst`, or
    /// the file a symlink at `dst` points to (cp writes through it; the copy replaces that
    /// file and the link stays).
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a destination this run already put a copy at (cp:
    /// "will not overwrite just-created"), a dangling symlink (cp will not write through one),
    /// and a destination that is neither a regular file nor a directory (a device, a fifo, a
    /// socket: cp writes into it, where pagepipe-cp, which renames a finished temporary over
    /// its destination, would replace it with a regular file).
    fn destination(&self, src: &str, dst: &Path) -> io::Result<PathBuf> {
        self.refuse_just_created(src, dst)?;
        let Ok(at) = fs::symlink_metadata(dst) else {
            return Ok(dst.to_path_buf()); // a new name (or one the create will say why about)
        };
        let (target, meta) = if at.file_type().is_symlink() {
            follow(dst)?
        } else {
            (dst.to_path_buf(), at)
        };
        self.refuse_just_created(src, &target)?;
        if !meta.is_file() && !meta.is_dir() {
            return Err(invalid(format!(
                "'{}' is {}: pagepipe-cp renames a finished copy over its destination, which \
                 would replace it with a regular file (cp writes into it); name a regular file",
                dst.display(),
                kind_of(&meta)
            )));
        }
        Ok(target)
    }

    /// Records `src` (its metadata `meta`) as taken; false if it was already, under the same
    /// name in the same directory.
    fn first_sight(&mut self, src: &Path, meta: &Metadata) -> bool {
        let Some(name) = src.file_name() else {
            return true;
        };
        let Ok(dir) = fs::metadata(parent_of(src)) else {
            return true;
        };
        self.seen.insert((
            dir.dev(),
            dir.ino(),
            name.to_os_string(),
            meta.dev(),
            meta.ino(),
        ))
    }

    fn refuse_just_created(&self, src: &str, dst: &Path) -> io::Result<()> {
        if self.created.contains(dst) {
            return Err(invalid(format!(
                "will not overwrite just-created '{}' with {src}",
                dst.display()
            )));
        }
        Ok(())
    }
}

/// The file the symlink `dst` leads to, and its metadata, followed by the kernel as cp's open
/// follows it, so that its rules for links apply (`fs.protected_symlinks`: no following another
/// user's link in a sticky world-writable directory such as `/tmp`). A path resolved in
/// userspace would let a link planted there have a copy renamed over a file its owner could not
/// write.
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] for a dangling link (cp will not write through one); the
/// kernel's refusal (`EACCES` from `protected_symlinks`, `ELOOP`), naming `dst`.
fn follow(dst: &Path) -> io::Result<(PathBuf, Metadata)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(dst)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => invalid(format!(
                "not writing through dangling symlink '{}'",
                dst.display()
            )),
            _ => ctx(format_args!("cannot follow '{}'", dst.display()))(e),
        })?;
    let followed = opened.metadata().and_then(|meta| {
        fs::read_link(format!("/proc/thread-self/fd/{}", opened.as_raw_fd()))
            .map(|target| (target, meta))
    });
    let (target, meta) =
        followed.map_err(ctx(format_args!("cannot follow '{}'", dst.display())))?;
    // The name read back must still be the file opened: not for a file unlinked since (the
    // kernel then names it "... (deleted)"), a memfd, a path mounted over, or a /proc that is
    // not procfs.
    let named = fs::symlink_metadata(&target)
        .is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino() && meta.nlink() > 0);
    if !named {
        return Err(invalid(format!(
            "'{}' leads to a file with no name of its own to put a copy at (unlinked, or not \
             in a directory; cp would write into it)",
            dst.display()
        )));
    }
    Ok((target, meta))
}

/// "a fifo", "a socket", ...: what a special file is, for a message.
fn kind_of(m: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "a fifo"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else {
        "not a regular file"
    }
}

/// Refuses a destination for a file that ends in `/` and is not a directory (cp: "Not a
/// directory"), before anything is copied: the rename of a finished copy failed there, after
/// the whole copy was written and synced, and the message named the temporary.
///
/// # Errors
/// [`io::ErrorKind::NotADirectory`], naming `dst` as given.
fn refuse_trailing_slash(dst: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if !dst.as_os_str().as_bytes().ends_with(b"/") {
        return Ok(());
    }
    let why = if fs::symlink_metadata(dst).is_ok() {
        "failed to access"
    } else {
        "cannot create regular file"
    };
    Err(io::Error::new(
        io::ErrorKind::NotADirectory,
        format!("{why} '{}': Not a directory", dst.display()),
    ))
}

/// Refuses, before anything is copied, an existing destination the kernel will not let be
/// replaced or written: immutable or append-only (`chattr +i`, `+a`; cp's open fails with
/// EPERM there). The rename of a finished copy failed there, after the whole copy.
///
/// # Errors
/// [`io::ErrorKind::PermissionDenied`] (EPERM), naming `dst`.
fn refuse_unreplaceable(dst: &Path) -> io::Result<()> {
    use rustix::fs::IFlags;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(dst);
    let Ok(file) = opened else {
        return Ok(()); // missing, unreadable or a link: the copy says what is wrong, if anything
    };
    let Ok(flags) = rustix::fs::ioctl_getflags(&file) else {
        return Ok(()); // a filesystem without these flags
    };
    if flags.intersects(IFlags::IMMUTABLE | IFlags::APPEND) {
        let what = if flags.contains(IFlags::IMMUTABLE) {
            "immutable"
        } else {
            "append-only"
        };
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "cannot create regular file '{}': Operation not permitted (it is {what})",
                dst.display()
            ),
        ));
    }
    Ok(())
}

/// The permission bits cp leaves out when it makes a file or directory, until it is ready:
/// group and other write of a directory; all of group and other's when the owner is to be
/// changed (`--preserve=ownership`), so that the old owner's group never gets a window.
fn omitted_bits(keep: &Preserve, dir: bool) -> u32 {
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
fn mode_of(path: &Path) -> io::Result<u32> {
    fs::symlink_metadata(path)
        .map(|m| m.mode() & 0o7777)
        .map_err(ctx(format_args!("cannot stat '{}'", path.display())))
}

/// `chmod(2)`, naming the path and the mode in its error.
///
/// # Errors
/// The OS's error.
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, Permissions::from_mode(mode)).map_err(ctx(format_args!(
        "cannot set the mode of '{}' to {mode:04o}",
        path.display()
    )))
}

/// The directory holding `path` (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// cp refuses `cp -r a a/b`: the copy would recurse into itself.
fn refuse_copy_into_itself(src: &Path, dst: &Path) -> io::Result<()> {
    let src_abs =
        fs::canonicalize(src).map_err(ctx(format_args!("cannot stat '{}'", src.display())))?;
    let Ok(parent) = fs::canonicalize(parent_of(dst)) else {
        return Ok(()); // the destination's parent is missing: creating it will fail and say so
    };
    let dst_abs = match dst.file_name() {
        Some(name) => parent.join(name),
        None => parent,
    };
    if dst_abs.starts_with(&src_abs) {
        return Err(invalid(format!(
            "cannot copy a directory, '{}', into itself, '{}'",
            src.display(),
            dst.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_follows_cp() {
        let dir = std::env::temp_dir().join(format!("pagepipe-cp-plan-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = |s: &str| PathBuf::from(s);
        // One source, DST not a directory: DST is the new name.
        let missing = dir.join("new");
        assert_eq!(
            plan(&[p("a/x")], &missing).unwrap(),
            vec![(p("a/x"), missing)]
        );
        // DST a directory: copy into it, under the source's name.
        assert_eq!(
            plan(&[p("a/x"), p("y/")], &dir).unwrap(),
            vec![(p("a/x"), dir.join("x")), (p("y/"), dir.join("y"))]
        );
        // Several sources need a directory.
        let e = plan(&[p("a"), p("b")], &dir.join("new")).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        // stdin needs a file name; only once; never to stdout.
        assert!(plan(&[p("-")], &dir).is_err());
        assert!(plan(&[p("-"), p("-")], &dir).is_err());
        assert!(plan(&[p("a")], Path::new("-")).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(2 << 30), "2.00 GiB");
        assert_eq!(pct(1, 0), 0.0);
    }
}
