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
