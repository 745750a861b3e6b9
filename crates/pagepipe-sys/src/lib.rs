//! The syscall layer of the pagepipe crates: every system call they make, and the only home of
//! their syscall `unsafe`. One module per family, as rustix arranges them; each wrapper names
//! the man page it follows.
//!
//! This crate serves [`pagepipe`](https://docs.rs/pagepipe) (pipes and the fragment cache) and
//! `pagepipe-dontcache` (the uncached file writer), which share nothing else. Its API follows
//! their needs and is not promised to stay stable on its own.
//!
//! ```
//! // A kernel pipe, and one byte through it.
//! let (r, w) = pagepipe_sys::pipe::os_pipe()?;
//! pagepipe_sys::pipe::write_byte(std::os::fd::AsFd::as_fd(&w))?;
//! assert_eq!(pagepipe_sys::pipe::fionread(std::os::fd::AsFd::as_fd(&r))?, 1);
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod fd;
pub mod fs;
pub mod futex;
pub mod io;
pub mod memfd;
pub mod mm;
pub mod net;
pub mod pipe;
pub mod poll;
pub mod psi;
pub mod thread;

/// A C return code as a result: negative is the thread's `errno`.
pub(crate) fn cvt(rc: libc::c_int) -> std::io::Result<libc::c_int> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
