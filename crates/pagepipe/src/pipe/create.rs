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

/// Makes a new pipe's region of `ring_size` slots, which may grow to `reach`, and its two ends
/// in this process: `(write end, read end)`, for the caller to wrap in the handle types of its
/// kind of pipe.
pub(crate) fn create(
    ring_size: usize,
    config: Config,
    reach: usize,
) -> io::Result<(Arc<End>, Arc<End>)> {
    let shared = open(Region::create(ring_size, config, reach)?);
    #[cfg(not(loom))]
    let (w, r) = {
        use std::os::fd::AsFd;
        let (read, write) = crate::sys::pipe::packet_pipe()?;
        // Nobody polls yet: one packet, both descriptors ready (see End::enable_polling). The
        // pipe keeps the kernel's default slot count until a sync needs two (see
        // End::sync_locked; the header says "not set yet", see Region::init).
        crate::sys::pipe::write_byte(write.as_fd())?;
        (
            End::new(shared.clone(), Side::Write, write),
            End::new(shared, Side::Read, read),
        )
    };
    #[cfg(loom)]
    let (w, r) = (
        End::new(shared.clone(), Side::Write),
        End::new(shared, Side::Read),
    );
    Ok((End::arc(w), End::arc(r)))
}
