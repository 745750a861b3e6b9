//! Making a pipe: its region, this process's handle on it, and its two ends.

use crate::pipe::end::End;
use crate::pipe::shared::Shared;
use crate::region::{Config, Region, Side};
use crate::sync::Arc;
use std::io;

/// This process's handle on a region it made or attached: registered for idle trimming (after
/// the fork handlers are installed: see [`crate::fork`]). `from_elsewhere`: the region came
/// from another process (or another mapping), so the handle is exposed before any other thread
/// can reach it through the registry (the idle trimmer, `shrink()`): one that took a side
/// before the mark would take a provisional key on a pipe peers see (see `Shared::take_key`).
pub(crate) fn open(region: Region, from_elsewhere: bool) -> Arc<Shared> {
    let shared = Arc::new(Shared::new(region));
    #[cfg(loom)]
    let _ = from_elsewhere;
    #[cfg(not(loom))]
    {
        if from_elsewhere {
            shared.mark_exposed();
        }
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
    // No fork until both ends exist: a pipe made while another thread forks is either in the
    // fork handlers' view (and gets its signal pipe) or made after the fork.
    #[cfg(not(loom))]
    let _no_fork = crate::fork_gate::hold();
    #[cfg(not(loom))]
    let region = match crate::pipe::cache::take(config, ring_size, reach) {
        Some(region) => region,
        None => Region::create(ring_size, config, reach)?,
    };
    #[cfg(loom)]
    let region = Region::create(ring_size, config, reach)?;
    let shared = open(region, false);
    #[cfg(not(loom))]
    // No signal pipe yet: the pipe gets one when it may leave this process or someone
    // polls it (see Shared::ensure_signal).
    let (w, r) = (
        End::new(shared.clone(), Side::Write, None),
        End::new(shared, Side::Read, None),
    );
    #[cfg(loom)]
    let (w, r) = (
        End::new(shared.clone(), Side::Write),
        End::new(shared, Side::Read),
    );
    Ok((End::arc(w), End::arc(r)))
}
