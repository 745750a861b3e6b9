//! Sealed memory files, for regions shared between processes (`memfd_create(2)`, `fcntl(2)` seals, `fstat(2)`).

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A sealed anonymous memory file of `len` bytes (`memfd_create(2)`, `ftruncate(2)`, then
/// `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` so no holder can change its size: a shrunk file
/// would turn accesses of everyone's mapping into SIGBUS). Close-on-exec; no name in any file
/// system, visible only to processes given the descriptor.
///
/// # Errors
/// The OS's error from `memfd_create(2)`, `ftruncate(2)` or `fcntl(2)`; `InvalidInput` for a size
/// beyond `off_t`.
pub fn sealed_memfd(len: u64) -> io::Result<OwnedFd> {
    const MFD_NOEXEC_SEAL: libc::c_uint = 0x8;
    let name = c"pagepipe";
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `name` is a NUL-terminated string; memfd_create has no other preconditions.
    let mut fd = unsafe { libc::memfd_create(name.as_ptr(), base | MFD_NOEXEC_SEAL) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Kernels before 6.3 do not know MFD_NOEXEC_SEAL.
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(name.as_ptr(), base) };
    }
    cvt(fd)?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
    // SAFETY: ftruncate and fcntl on a descriptor we own touch no user memory.
    unsafe {
        cvt(libc::ftruncate(fd.as_raw_fd(), size))?;
        cvt(libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        ))?;
    }
    Ok(fd)
}

/// Size in bytes and seals of a memory file received from elsewhere (`F_GET_SEALS`, then
/// `fstat(2)`), for validation before mapping it.
///
/// Seals before size: the sender may still hold the file and change it between two calls. Once
/// `F_SEAL_SHRINK` is seen it can never be removed, so a size read after it can only have grown
/// since; read the other way round, a sender could shrink the file and then seal it between the
/// two calls, and the size returned would be one the file no longer has (a mapping of it would
/// fault with SIGBUS).
///
/// # Errors
/// `InvalidData` for a file that cannot be sealed (not a memory file); the OS's error from
/// `fstat(2)` or `fcntl(2)`.
pub fn memfd_info(fd: BorrowedFd<'_>) -> io::Result<(u64, libc::c_int)> {
    // SAFETY: F_GET_SEALS touches no user memory.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "descriptor {} cannot be sealed (not a memfd): {}",
                fd.as_raw_fd(),
                io::Error::last_os_error()
            ),
        ));
    }
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable for the call; the fd is borrowed from a live descriptor.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("descriptor {} is not a memory file", fd.as_raw_fd()),
        ));
    }
    // A huge-page memory file (MFD_HUGETLB) maps in whole huge pages: a mapping of one page of
    // it at a fixed address would cover 2 MiB and more of what lies around.
    // SAFETY: an all-zero `statfs` is a valid value of this plain C struct.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one `statfs` to the pointer we pass.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut fs) })?;
    if fs.f_type as u32 == libc::HUGETLBFS_MAGIC as u32 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("descriptor {} is a huge-page memory file", fd.as_raw_fd()),
        ));
    }
    Ok((st.st_size as u64, seals))
}

/// Reads exactly `buf.len()` bytes of `fd` from `offset` (`pread(2)`), without a mapping.
///
/// # Errors
/// `UnexpectedEof` if the file ends first; the OS's error from `pread(2)`.
pub fn read_exact_at(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    // SAFETY: the File borrows the descriptor for this call only and is never dropped
    // (ManuallyDrop), so it never closes what it does not own.
    let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd.as_raw_fd()) });
    file.read_exact_at(buf, offset)
}

/// The file `fd` refers to, as `(device, inode)` (`fstat(2)`): equal for two descriptors of
/// the same memory file, in whichever process they were opened.
///
/// # Errors
/// The OS's error from `fstat(2)`.
pub fn file_id(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` to the pointer we pass.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn sealed_memfd_reports_its_size_and_seals() {
        let fd = sealed_memfd(8192).unwrap();
        let (size, seals) = memfd_info(fd.as_fd()).unwrap();
        assert_eq!(size, 8192);
        assert_ne!(seals & libc::F_SEAL_SHRINK, 0);
    }

    #[test]
    fn a_memory_file_reads_without_a_mapping() {
        let fd = sealed_memfd(8192).unwrap();
        let mut buf = [1u8; 4096];
        read_exact_at(fd.as_fd(), &mut buf, 4096).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let e = read_exact_at(fd.as_fd(), &mut buf, 6144).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_file_that_cannot_be_sealed_is_refused() {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let e = memfd_info(f.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}
