//! The C API of pagepipe (`include/pagepipe.h`): opaque `pp_writer` and `pp_reader` handles
//! and functions that behave like `pipe(2)`, `write(2)`, `read(2)` and friends on a pipe: a
//! count, 0 at end of file, or -1 with `errno` set.
//!
//! Every exported function:
//! - answers `EINVAL` for a null pointer, a closed or made-up handle or a bad size, and
//!   `EBADF` for a handle of the other end's kind (a cast), never crashing and never acting on
//!   another end;
//! - catches any Rust panic before it reaches C (`EIO`);
//! - never raises `SIGPIPE`: a write to a pipe without readers is -1 with `EPIPE`.
//!
//! Files: `errno` (io::Error to errno, the panic guard), `handle` (the handle tables: a handle
//! is a generation-tagged number, so a closed one is an error, never a dangling pointer, and a
//! fork at any instant leaves the child nothing to wait for), `fds` (an end's descriptors out of
//! and back into an end, for exec and for pagepipe-py), then the functions: `pipe`, `writer`,
//! `reader`, and `end` (what both ends share).
//!
//! ```
//! use pagepipe_c::*;
//! let (mut w, mut r) = (std::ptr::null_mut(), std::ptr::null_mut());
//! assert_eq!(pp_pipe(&mut w, &mut r), 0);
//! assert_eq!(unsafe { pp_write(w, b"hi".as_ptr().cast(), 2) }, 2);
//! let mut buf = [0u8; 8];
//! assert_eq!(unsafe { pp_read(r, buf.as_mut_ptr().cast(), 8) }, 2);
//! assert_eq!(pp_writer_close(w), 0);
//! assert_eq!(unsafe { pp_read(r, buf.as_mut_ptr().cast(), 8) }, 0); // end of file
//! assert_eq!(pp_writer_close(w), -1); // closed: EINVAL, not a crash
//! assert_eq!(pp_reader_close(r), 0);
//! ```
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)] // the C names are the contract

mod end;
mod errno;
pub mod fds;
mod handle;
mod pipe;
mod reader;
mod writer;

pub use pipe::{pp_pipe, pp_pipe_sized};
pub use reader::*;
pub use writer::*;
