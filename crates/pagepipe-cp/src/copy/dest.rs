//! Where a copy goes (through a symlink at its destination, as cp writes through it) and the
//! destinations refused before anything is copied: one this run made, one ending in `/`, an
//! immutable or append-only file, a special file.

use crate::copy::copier::Copier;
use crate::copy::plan::{ctx, invalid};
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

impl Copier<'_> {
    /// Where a copy of `src` (as the messages name it) to `dst` goes, as cp decides: `dst`, or
    /// the file a symlink at `dst` points to (cp writes through it; the copy replaces that
    /// file and the link stays), and that file's metadata (None for a new name): what
    /// `fs::metadata` of the path returned gives, without another look.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a destination this run already put a copy at (cp:
    /// "will not overwrite just-created"), a dangling symlink (cp will not write through one),
    /// and a destination that is neither a regular file nor a directory (a device, a fifo, a
    /// socket: cp writes into it, where pagepipe-cp, which renames a finished temporary over
    /// its destination, would replace it with a regular file).
    pub(super) fn destination(
        &self,
        src: &str,
        dst: &Path,
    ) -> io::Result<(PathBuf, Option<Metadata>)> {
        self.refuse_just_created(src, dst)?;
        let Ok(at) = fs::symlink_metadata(dst) else {
            // A new name (or one the create will say why about).
            return Ok((dst.to_path_buf(), None));
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
        Ok((target, Some(meta)))
    }

    pub(super) fn refuse_just_created(&self, src: &str, dst: &Path) -> io::Result<()> {
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
pub(super) fn refuse_trailing_slash(dst: &Path) -> io::Result<()> {
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
pub(super) fn refuse_unreplaceable(dst: &Path) -> io::Result<()> {
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
