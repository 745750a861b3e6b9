//! The walk: a command-line source, then each entry by its kind; directories made, filled in
//! name order and finished; hard links (`--preserve=links`), symlinks and special files made
//! through a temporary name.

use crate::cleanup::Temp;
use crate::copy::attrs::{mode_of, omitted_bits, set_mode};
use crate::copy::copier::{Copier, DirFinish};
use crate::copy::dest::{refuse_trailing_slash, refuse_unreplaceable};
use crate::copy::plan::{ctx, invalid, is_stdin, parent_of};
use crate::meta::Kind;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

impl Copier<'_> {
    pub(super) fn copy_top(&mut self, src: &Path, dst: &Path) -> io::Result<()> {
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
        } else if kind.is_fifo() || kind.is_char_device() {
            // Without -R cp reads them, into a regular file.
            self.copy_stream(src, dst, meta)
        } else {
            // A block device would be read through its page cache, which pagepipe-cp does not
            // drop (others' pages of it, a mounted filesystem's, are there too); a socket cannot
            // be opened (cp fails on it too).
            let what = if kind.is_block_device() {
                "a block device (pagepipe-cp does not read one: its page cache is shared)"
            } else {
                "not a regular file, directory, symlink, fifo or character device"
            };
            self.skip(format!("skipping '{}': {what}", src.display()));
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
    pub(super) fn finish_dir(&mut self, finish: DirFinish) -> io::Result<()> {
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
        self.made_dirs.insert(dst.to_path_buf());
        self.named_in(dst);
        Ok(())
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
