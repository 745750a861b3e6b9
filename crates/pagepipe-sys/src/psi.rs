//! Pressure-stall information triggers (`Documentation/accounting/psi.rst`).

use std::io;

/// Opens a pressure-stall trigger (`Documentation/accounting/psi.rst`): opens `path` (for
/// example `/proc/pressure/memory`) read-write and non-blocking, and writes `trigger` (such as
/// `some 150000 2000000`: 150 ms of stall within a 2 s window), NUL-terminated. The returned file
/// then reports `POLLPRI` each time the threshold is crossed.
///
/// Errors: `Unsupported` when the file is missing or PSI is disabled (`psi=0`), `InvalidInput`
/// when the kernel rejects the trigger, otherwise the OS's error; each names the path.
///
/// # Errors
/// The OS's error from opening or writing the pressure file (`ENOENT` without PSI, `EINVAL` for a
/// trigger the kernel refuses).
pub fn psi_trigger(path: &std::path::Path, trigger: &str) -> io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "pressure stall information is not available at {}: {e}",
                    path.display()
                ),
            ),
            _ => io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())),
        })?;
    let mut bytes = trigger.as_bytes().to_vec();
    bytes.push(0);
    file.write_all(&bytes).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} rejected the trigger {trigger:?} (the window must be 0.5 to 10 s, and a \
                 multiple of 2 s without CAP_SYS_RESOURCE; the stall at most the window)",
                path.display()
            ),
        ),
        Some(libc::EOPNOTSUPP) => io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{} does not support triggers: {e}", path.display()),
        ),
        _ => io::Error::new(
            e.kind(),
            format!(
                "cannot set the trigger {trigger:?} on {}: {e}",
                path.display()
            ),
        ),
    })?;
    Ok(file)
}
