//! What a copy gets besides its bytes: its mode as cp gives it (the source's permission bits,
//! masked by the kernel with the umask or the directory's default ACL), an existing
//! destination's mode, access ACL and owner kept as cp keeps them by writing into it, and with
//! `-p`/`--preserve` the source's mode, ACL, owner, times and extended attributes.
//!
//! System calls through rustix (xattrs, `fchown`, `utimensat`), as the house style asks for
//! syscalls outside pagepipe-sys.

use rustix::fs::{self as rfs, Gid, Uid, XattrFlags};
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The name of a file's access ACL (`acl(5)`), as the kernel stores it.
pub const ACL_ACCESS: &str = "system.posix_acl_access";

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
pub fn get_xattr(path: &Path, name: &str, nofollow: bool) -> io::Result<Option<Vec<u8>>> {
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
    let acl = get_xattr(existing, ACL_ACCESS, false).map_err(err_at("read the ACL", dst))?;
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

/// cp's rule for a failed chown: an unprivileged user may not give files away, and is not told.
fn forgiven(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    (e == Errno::PERM || e == Errno::INVAL) && !rustix::process::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_acl_reads_as_none_and_removing_it_is_no_error() {
        let path = std::env::temp_dir().join(format!("pagepipe-cp-meta-{}", std::process::id()));
        let f = File::create(&path).unwrap();
        assert_eq!(get_xattr(&path, ACL_ACCESS, false).unwrap(), None);
        set_access_acl(&f, None).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
