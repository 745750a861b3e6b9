//! Making a pipe: its region, this process's handle on it, and its two ends.

use crate::pipe::end::End;
use crate::pipe::shared::Shared;
use crate::region::{Config, Region, Side};
use crate::sync::Arc;
use std::io;

/// This process's handle on a region it made or attached: registered for idle trimming (after
/// the fork handlers are installed: see [`crate::fork`]).
pub(crate) fn open(region: Region) -> Arc<Shared> {
    let shared = Arc::new(Shared::new(region));
    #[cfg(not(loom))]
    {
        crate::fork::install();
        let weak: std::sync::Weak<dyn crate::reclaim::Trim> = Arc::downgrade(&shared) as _;
        crate::reclaim::register(weak);
    }
    shared
}

/// Makes a new pipe's region of `ring_size` slots and its two ends in this process: `(write
/// end, read end)`, for the caller to wrap in the handle types of its kind of pipe.
pub(crate) fn create(ring_size: usize, config: Config) -> io::Result<(Arc<End>, Arc<End>)> {
    let shared = open(Region::create(ring_size, config)?);
    #[cfg(not(loom))]
    let (w, r) = {
        use crate::sys::mm::PAGE_SIZE;
        use std::os::fd::AsFd;
        let (readable_r, readable_w) = crate::sys::pipe::os_pipe()?;
        let (full_r, full_w) = crate::sys::pipe::os_pipe()?;
        for fd in [&readable_r, &readable_w, &full_r, &full_w] {
            crate::sys::fd::set_fd_nonblocking(fd.as_fd())?;
        }
        // One byte fills it: the writer's descriptor polls POLLOUT exactly while it is empty.
        crate::sys::pipe::set_pipe_size(full_w.as_fd(), PAGE_SIZE)?;
        // Nobody polls yet: the readable pipe starts charged (see End::enable_polling).
        crate::sys::pipe::write_byte(readable_w.as_fd())?;
        // Indexed by FULL (0) and READABLE (1).
        (
            End::new(shared.clone(), Side::Write, [full_w, readable_w]),
            End::new(shared, Side::Read, [full_r, readable_r]),
        )
    };
    #[cfg(loom)]
    let (w, r) = (
        End::new(shared.clone(), Side::Write),
        End::new(shared, Side::Read),
    );
    Ok((End::arc(w), End::arc(r)))
}
