//! A writer's own open file description: the kernel keeps its writeback-error cursor there.
//!
//! Linux records a writeback error in the file's mapping (`errseq_t`), and each open file
//! description keeps a cursor into that record: `fsync`, `fdatasync` and `sync_file_range`'s
//! wait report an error recorded since the cursor and move it on. Every descriptor of one
//! description (`dup`, `try_clone`, inherited across `fork`) shares the cursor, so whichever
//! syncs first consumes the error and the others never see it. A writer therefore writes and
//! syncs through a description of its own, opened from the caller's file through
//! `/proc/thread-self/fd`: it sees every writeback error of the file recorded after it was opened (or
//! not yet seen by anyone when it was), and nothing else can consume them.

use pagepipe_sys as sys;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

/// Opens a new description of `file`'s inode, with its access mode and the status flags that
/// change what a write means (`O_SYNC`, `O_DSYNC`, `O_DIRECT`), close-on-exec. Never grants
/// more access than `file` has: a read-only file reopens read-only. Never append-only: a writer
/// writes at offsets, which Linux ignores on an append-only description (a writer refuses one:
/// [`refuse_append`]; a flag the caller sets later on its own description does not reach this
/// one).
///
/// # Errors
/// `fcntl`'s, or the open's: `ENOENT` without `/proc`, `EACCES` when the file's permissions
/// forbid what the caller's description was opened for (a file created read-only);
/// [`io::ErrorKind::InvalidData`] when `/proc` named another file (not procfs);
/// [`io::ErrorKind::ResourceBusy`] when the caller's description holds a lease, which the
/// reopen would break (the writer then writes through the caller's description).
pub(crate) fn reopen(file: &File) -> io::Result<File> {
    sys::fs::refuse_leased(file)?;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL reads the status flags of a descriptor borrowed from a live File.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let access = flags & libc::O_ACCMODE;
    OpenOptions::new()
        .read(access != libc::O_WRONLY)
        .write(access != libc::O_RDONLY)
        .custom_flags(flags & (libc::O_SYNC | libc::O_DSYNC | libc::O_DIRECT))
        .open(format!("/proc/thread-self/fd/{fd}"))
        .and_then(|again| sys::fs::same_file(file, &again).map(|()| again))
}

/// Refuses a description opened for appending: Linux writes each `pwrite` on it at the end of
/// the file whatever offset it is given, so a writer's bytes would land, and its window be
/// counted, somewhere else than where it says.
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] on an append-only description; `fcntl`'s.
pub(crate) fn refuse_append(file: &File) -> io::Result<()> {
    // SAFETY: F_GETFL reads the status flags of a descriptor borrowed from a live File.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_APPEND != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a dontcache writer writes at offsets, and the file is open for appending (Linux \
             would put every write at the end): open it without append",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reopened_file_is_a_new_description_of_the_same_inode() {
        use std::os::unix::fs::MetadataExt;
        let path = std::env::temp_dir().join(format!("dontcache-reopen-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        let again = reopen(&file).unwrap();
        let (a, b) = (file.metadata().unwrap(), again.metadata().unwrap());
        assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()));
        // SAFETY: F_GETFL on live descriptors.
        let access = unsafe { libc::fcntl(again.as_raw_fd(), libc::F_GETFL) } & libc::O_ACCMODE;
        assert_eq!(access, libc::O_WRONLY);
        let ro = File::open(&path).unwrap();
        // SAFETY: as above.
        let access = unsafe { libc::fcntl(reopen(&ro).unwrap().as_raw_fd(), libc::F_GETFL) };
        assert_eq!(access & libc::O_ACCMODE, libc::O_RDONLY);
        std::fs::remove_file(&path).unwrap();
    }
}
