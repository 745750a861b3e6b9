//! What a copy gets besides its bytes: its mode as cp gives it (the source's permission bits,
//! masked by the kernel with the umask or the directory's default ACL), an existing
//! destination's mode, access ACL and owner kept as cp keeps them by writing into it, and with
//! `-p`/`--preserve` the source's mode, ACL, owner, times and extended attributes.
//!
//! System calls through rustix (xattrs, `fchown`, `utimensat`), as the house style asks for
//! syscalls outside pagepipe-sys.

use rustix::fs::{self as rfs, AtFlags, Gid, Timespec, Timestamps, Uid, XattrFlags, CWD};
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The name of a file's access ACL (`acl(5)`), as the kernel stores it.
pub const ACL_ACCESS: &str = "system.posix_acl_access";
/// The name of a directory's default ACL.
pub const ACL_DEFAULT: &str = "system.posix_acl_default";

/// Adds the path and what was being done to an error, keeping its kind.
pub fn err_at(what: &str, path: &Path) -> impl FnOnce(io::Error) -> io::Error {
    let msg = format!("cannot {what} of '{}'", path.display());
    move |e| io::Error::new(e.kind(), format!("{msg}: {e}"))
}

/// Whether an xattr call failed only because the filesystem or the attribute does not exist
/// for it (no ACL set, no xattr support): nothing to copy.
fn absent(e: &rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [Errno::NODATA, Errno::NOTSUP, Errno::OPNOTSUPP].contains(e)
}

/// The value of `name` on `path` (not following a final symlink when `nofollow`), or None.
///
/// # Errors
/// The OS's error other than "no such attribute" or "not supported".
pub fn get_xattr(path: &Path, name: &OsStr, nofollow: bool) -> io::Result<Option<Vec<u8>>> {
    loop {
        let query = if nofollow {
            rfs::lgetxattr_query(path, name)
        } else {
            rfs::getxattr_query(path, name)
        };
        let len = match query {
            Ok(n) => n,
            Err(e) if absent(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut buf = vec![0u8; len];
        let got = if nofollow {
            rfs::lgetxattr(path, name, &mut buf[..])
        } else {
            rfs::getxattr(path, name, &mut buf[..])
        };
        match got {
            Ok(n) => {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            Err(rustix::io::Errno::RANGE) => continue, // it grew meanwhile: ask again
            Err(e) if absent(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Gives the open file `dst` the access ACL `acl` (the raw xattr value), or removes the one it
/// has (`None`: the file's mode bits alone say who may do what).
///
/// # Errors
/// The OS's error; removing an ACL that is not there, or on a filesystem without ACLs, is not
/// one.
pub fn set_access_acl(dst: &File, acl: Option<&[u8]>) -> io::Result<()> {
    let done = match acl {
        Some(value) => rfs::fsetxattr(dst, ACL_ACCESS, value, XattrFlags::empty()),
        None => rfs::fremovexattr(dst, ACL_ACCESS),
    };
    match done {
        Err(e) if acl.is_none() && absent(&e) => Ok(()),
        other => other.map_err(Into::into),
    }
}

/// Makes the temporary `temp` stand for the existing destination `existing` (its metadata
/// `was`) as cp leaves a file it writes into: the same mode bits, access ACL and, where this
/// process may give it (root), owner and group. Owner first: a `chown` clears set-id bits.
///
/// # Errors
/// The OS's errors, naming `dst`; a `chown` refused to an unprivileged user is not one (the
/// copy then belongs to the user, a difference from cp listed in the README).
pub fn like_existing(temp: &File, existing: &Path, was: &Metadata, dst: &Path) -> io::Result<()> {
    if temp.metadata()?.uid() != was.uid() || temp.metadata()?.gid() != was.gid() {
        chown_if_allowed(temp, was.uid(), was.gid()).map_err(err_at("set the owner", dst))?;
    }
    let acl =
        get_xattr(existing, OsStr::new(ACL_ACCESS), false).map_err(err_at("read the ACL", dst))?;
    set_access_acl(temp, acl.as_deref()).map_err(err_at("set the ACL", dst))?;
    rfs::fchmod(temp, rfs::Mode::from_raw_mode(was.mode() & 0o7777))
        .map_err(|e| err_at("set the mode", dst)(e.into()))
}

/// `fchown(2)`, where a refusal for want of privilege (`EPERM`, `EINVAL` for an id the
/// filesystem cannot hold) is no error unless this process is root, as in cp.
///
/// # Errors
/// The OS's error, unless forgiven as above.
pub fn chown_if_allowed(file: &File, uid: u32, gid: u32) -> io::Result<()> {
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    match rfs::fchown(file, Some(uid), Some(gid)) {
        Ok(()) => Ok(()),
        Err(e) if forgiven(e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `lchown(2)`-like on a path (a symlink is changed itself), forgiven as [`chown_if_allowed`].
///
/// # Errors
/// As [`chown_if_allowed`].
pub fn lchown_if_allowed(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    match rfs::chownat(CWD, path, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(()) => Ok(()),
        Err(e) if forgiven(e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// cp's rule for a failed chown: an unprivileged user may not give files away, and is not told.
fn forgiven(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    (e == Errno::PERM || e == Errno::INVAL) && !rustix::process::geteuid().is_root()
}

/// Gives `path` (not following a final symlink) the access and modification times of `src`.
///
/// # Errors
/// The OS's error from `utimensat(2)`.
pub fn set_times(path: &Path, src: &Metadata) -> io::Result<()> {
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: src.atime(),
            tv_nsec: src.atime_nsec() as _,
        },
        last_modification: Timespec {
            tv_sec: src.mtime(),
            tv_nsec: src.mtime_nsec() as _,
        },
    };
    rfs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into)
}

/// The names of `path`'s extended attributes (not following a final symlink when `nofollow`).
///
/// # Errors
/// The OS's error; a filesystem without xattrs has none, which is no error.
fn xattr_names(path: &Path, nofollow: bool) -> io::Result<Vec<Vec<u8>>> {
    loop {
        let query = if nofollow {
            rfs::llistxattr_query(path)
        } else {
            rfs::listxattr_query(path)
        };
        let len = match query {
            Ok(n) => n,
            Err(e) if absent(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut buf = vec![0u8; len];
        let got = if nofollow {
            rfs::llistxattr(path, &mut buf[..])
        } else {
            rfs::listxattr(path, &mut buf[..])
        };
        match got {
            Ok(n) => {
                buf.truncate(n);
                let names = buf.split(|&b| b == 0).filter(|n| !n.is_empty());
                return Ok(names.map(<[u8]>::to_vec).collect());
            }
            Err(rustix::io::Errno::RANGE) => continue,
            Err(e) if absent(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `--preserve=xattr` leaves the attribute `name` alone, as cp does (libattr's
/// `/etc/xattr.conf`): ACLs go with the mode, SELinux labels with `context` (not supported),
/// and integrity or filesystem-private attributes are the target filesystem's own.
fn xattr_skipped(name: &[u8]) -> bool {
    const SKIPPED: [&[u8]; 6] = [
        b"system.posix_acl_access",
        b"system.posix_acl_default",
        b"system.nfs4_acl",
        b"system.nfs4acl",
        b"security.selinux",
        b"security.evm",
    ];
    SKIPPED.contains(&name) || name.starts_with(b"trusted.SGI_") || name.starts_with(b"xfsroot.")
}

/// Copies the extended attributes of `src` to `dst` (both not following a final symlink when
/// `nofollow`). With `required` every failure is an error; without it (under `-a`), an
/// attribute the destination cannot hold is passed over, as cp passes it over.
///
/// # Errors
/// The OS's error, naming `dst` and the attribute.
pub fn copy_xattrs(src: &Path, dst: &Path, nofollow: bool, required: bool) -> io::Result<()> {
    let names = match xattr_names(src, nofollow) {
        Ok(names) => names,
        Err(_) if !required => return Ok(()),
        Err(e) => return Err(err_at("list the extended attributes", src)(e)),
    };
    for name in names.iter().filter(|n| !xattr_skipped(n)) {
        let name = OsStr::from_bytes(name);
        let copied = get_xattr(src, name, nofollow).and_then(|value| {
            let Some(value) = value else { return Ok(()) };
            let set = if nofollow {
                rfs::lsetxattr(dst, name, &value, XattrFlags::empty())
            } else {
                rfs::setxattr(dst, name, &value, XattrFlags::empty())
            };
            set.map_err(Into::into)
        });
        match copied {
            Ok(()) => {}
            Err(_) if !required => {}
            Err(e) => {
                let what = format!("copy the extended attribute {}", name.to_string_lossy());
                return Err(err_at(&what, dst)(e));
            }
        }
    }
    Ok(())
}

/// Copies the ACLs of `src` to `dst` (a file or directory): the access ACL, and a directory's
/// default ACL; an ACL the source lacks is removed from the copy.
///
/// # Errors
/// The OS's error, naming `dst`.
fn copy_acls(src: &Path, dst: &Path, is_dir: bool) -> io::Result<()> {
    let names: &[&str] = if is_dir {
        &[ACL_ACCESS, ACL_DEFAULT]
    } else {
        &[ACL_ACCESS]
    };
    for &name in names {
        let acl = get_xattr(src, OsStr::new(name), true).map_err(err_at("read the ACL", src))?;
        let done = match &acl {
            Some(value) => rfs::lsetxattr(dst, name, value, XattrFlags::empty()),
            None => rfs::lremovexattr(dst, name),
        };
        match done {
            Ok(()) => {}
            Err(e) if acl.is_none() && absent(&e) => {}
            Err(e) => return Err(err_at("set the ACL", dst)(e.into())),
        }
    }
    Ok(())
}

/// What kind of file a copy to be given its source's attributes is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file, fifo or device node.
    File,
    /// A directory (its default ACL too).
    Dir,
    /// A symlink: no mode of its own, its owner and times set on the link itself.
    Symlink,
}

/// Gives the copy at `dst` (`named` as the user knows it, for messages) the attributes of
/// `src` (its metadata `from`) that `keep` asks for, in cp's order: extended attributes,
/// owner, mode and ACLs (after the owner: a `chown` clears set-id bits), times last.
///
/// # Errors
/// The OS's error, naming `named`; a `chown` an unprivileged user may not make is no error.
pub fn preserve(
    src: &Path,
    from: &Metadata,
    dst: &Path,
    named: &Path,
    kind: Kind,
    keep: &crate::cli::Preserve,
) -> io::Result<()> {
    let rename = |e: io::Error| {
        let msg = e
            .to_string()
            .replace(&*dst.to_string_lossy(), &named.to_string_lossy());
        io::Error::new(e.kind(), msg)
    };
    let symlink = kind == Kind::Symlink;
    if keep.xattr {
        copy_xattrs(src, dst, true, keep.xattr_required).map_err(rename)?;
    }
    if keep.ownership {
        lchown_if_allowed(dst, from.uid(), from.gid()).map_err(err_at("set the owner", named))?;
    }
    if keep.mode && !symlink {
        std::fs::set_permissions(
            dst,
            std::os::unix::fs::PermissionsExt::from_mode(from.mode() & 0o7777),
        )
        .map_err(err_at("set the mode", named))?;
        copy_acls(src, dst, kind == Kind::Dir).map_err(rename)?;
    }
    if keep.timestamps {
        set_times(dst, from).map_err(err_at("set the times", named))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_acl_reads_as_none_and_removing_it_is_no_error() {
        let path = std::env::temp_dir().join(format!("pagepipe-cp-meta-{}", std::process::id()));
        let f = File::create(&path).unwrap();
        assert_eq!(
            get_xattr(&path, OsStr::new(ACL_ACCESS), false).unwrap(),
            None
        );
        set_access_acl(&f, None).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
