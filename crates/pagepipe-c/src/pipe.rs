//! Making pipes: `pp_pipe` and `pp_pipe_sized`.

use crate::end::{check_out, close_number, new_handle, store};
use crate::errno::guard0;
use crate::reader::pp_reader;
use crate::writer::pp_writer;
use std::ffi::c_int;

/// Creates a pipe with Linux's defaults (64 KiB capacity), like `pipe(2)`: stores its write
/// end in `*w` and its read end in `*r`.
///
/// Returns 0, or -1 with `errno`: `EINVAL` for a null pointer, the OS's error (`ENOMEM`,
/// `EMFILE`, ...) if it refuses the memory or descriptors.
///
/// Both ends are blocking and survive `fork()`: a child holds the ends its parent held, and
/// a reader sees end of file once no process holds a writer.
#[no_mangle]
pub extern "C" fn pp_pipe(w: *mut *mut pp_writer, r: *mut *mut pp_reader) -> c_int {
    pp_pipe_sized(pagepipe::DEFAULT_CAPACITY, w, r)
}

/// `pp_pipe` with a capacity of `capacity` bytes, rounded up as `F_SETPIPE_SZ` rounds (a
/// power-of-two number of 4 KiB pages).
///
/// Returns 0, or -1 with `errno`: `EINVAL` for a null pointer or a capacity of 0 or above
/// 1 GiB; the OS's error if it refuses the memory or descriptors.
#[no_mangle]
pub extern "C" fn pp_pipe_sized(
    capacity: usize,
    w: *mut *mut pp_writer,
    r: *mut *mut pp_reader,
) -> c_int {
    guard0(|| {
        check_out(w)?;
        check_out(r)?;
        let (writer, reader) = pagepipe::Builder::new().capacity(capacity).build()?;
        let wh = new_handle(writer)?;
        let rh = new_handle(reader).inspect_err(|_| {
            let _ = close_number::<pagepipe::Writer>(wh);
        })?;
        store(w, wh);
        store(r, rh);
        Ok(())
    })
}
