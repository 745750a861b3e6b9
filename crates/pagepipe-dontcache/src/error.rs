//! The errors of the crate's own making: `RWF_DONTCACHE` unsupported, and a file that is not a
//! regular file.

use std::fs::File;
use std::io;

/// True for the answers that mean "this kernel or file does not do `RWF_DONTCACHE`".
pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
    )
}

pub(crate) fn unsupported(e: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("RWF_DONTCACHE is not supported on this file: {e}"),
    )
}

pub(crate) fn check_regular(file: &File) -> io::Result<()> {
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("dontcache needs a regular file, not {kind:?}"),
        ));
    }
    Ok(())
}

/// The name of the errno behind `e` (`ENOSPC`, `EIO`, ...), or `errno N` for one without a
/// name here; `no errno` for an error of the library's own making.
pub(crate) fn errno_name(e: &io::Error) -> String {
    let Some(n) = e.raw_os_error() else {
        return "no errno".to_string();
    };
    let name = match n {
        libc::EIO => "EIO",
        libc::ENOSPC => "ENOSPC",
        libc::EDQUOT => "EDQUOT",
        libc::EROFS => "EROFS",
        libc::EFBIG => "EFBIG",
        libc::ENODEV => "ENODEV",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ESTALE => "ESTALE",
        libc::ENOLCK => "ENOLCK",
        libc::EINTR => "EINTR",
        _ => return format!("errno {n}"),
    };
    name.to_string()
}

/// The message of a kept writeback or sync error: the call, what the kernel reported, and what
/// that does not say. Linux keeps one writeback error record per file, and a sync reports the
/// newest error recorded since this writer's description last looked, whichever data of the
/// file it came from (another writer's included).
pub(crate) fn reported(call: &str, e: &io::Error) -> String {
    format!(
        "{call} reported {} ({e}); the kernel records writeback errors per file, not per \
         range: some data of this file written back since this writer last checked did not \
         reach the disk",
        errno_name(e)
    )
}
