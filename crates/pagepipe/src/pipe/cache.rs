//! Regions of dropped pipes, ready for new ones: the most expensive part of making a pipe is
//! its memory file and mapping (`memfd_create`, `ftruncate`, seals, `mmap`, and `munmap` and
//! `close` when it goes), so a pipe that never left this process leaves its region here when
//! it is dropped, and the next pipe of the same geometry takes it.
//!
//! A cached region holds no memory: every page of its file is given back first (a hole over
//! all of it), so it reads as zeros, as a new file does. It keeps its descriptor and its
//! address space. Its pipe never left this process, so it usually has no key description:
//! its key was provisional (see `Shared::take_key`), no byte locked. One whose upgrade reopened
//! the file and then failed to lock the byte (the pipe stayed confined) keeps that description,
//! with no lock, which only this process ever used: the next pipe's key uses it. At most
//! [`CACHED`] wait here, and the idle trimmer closes those that waited a tick
//! ([`crate::reclaim::IDLE_TICK`]): the cache gives its descriptors back as the pool gives
//! pages back.
//!
//! Only a region no other process can hold is cached: its pipe was confined to this process
//! (never sent, received or passed, no fork while it lived). A forked child closes the
//! regions it inherited from the cache in its fork handler ([`in_forked_child`]): they are the
//! parent's (a key description among them, if one has it).

use crate::region::{Config, Region};
use crate::sync::{Arc, Mutex};
use std::sync::MutexGuard;
use std::time::Instant;

/// The most regions waiting at once.
const CACHED: usize = 8;

struct Cached {
    region: Region,
    since: Instant,
}

/// The cache, locked (also by the fork handlers, around `fork(2)`): the waiting regions, and
/// while there are any, the idle trimmer's handle on them (the trimmer sleeps while no owner
/// is registered: an empty cache is none).
pub(crate) struct Cache {
    waiting: Vec<Cached>,
    owner: Option<Arc<Trimmer>>,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    waiting: Vec::new(),
    owner: None,
});

/// [`CACHE`], locked.
pub(crate) fn lock() -> MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A region for a new pipe of `config` with a ring of `ring_size` slots that may grow to
/// `reach`, made ready, if one waits.
pub(crate) fn take(config: Config, ring_size: usize, reach: usize) -> Option<Region> {
    let mut cache = lock();
    let i = cache
        .waiting
        .iter()
        .position(|c| c.region.fits(&config, reach))?;
    let mut region = cache.waiting.swap_remove(i).region;
    if cache.waiting.is_empty() {
        cache.owner = None;
    }
    drop(cache);
    region.reuse(config, ring_size).ok()?;
    Some(region)
}

/// Keeps the region of a dropped pipe that never left this process for the next pipe (or
/// drops it: the cache is full, or the region is not a data pipe's).
pub(crate) fn give(mut region: Region) {
    if region.config.notes != 0 {
        return;
    }
    region.punch();
    let mut cache = lock();
    if cache.waiting.len() >= CACHED {
        return; // dropped after unlocking, as `region` goes out of scope last
    }
    cache.waiting.push(Cached {
        region,
        since: Instant::now(),
    });
    let fresh = cache.owner.is_none().then(|| Arc::new(Trimmer));
    if let Some(t) = &fresh {
        cache.owner = Some(t.clone());
    }
    drop(cache);
    if let Some(t) = fresh {
        let weak: std::sync::Weak<dyn crate::reclaim::Trim> = Arc::downgrade(&t) as _;
        crate::reclaim::register(weak);
    }
}

/// In a forked child, with the lock the prepare handler took: the cached regions are the
/// parent's (a descriptor may hold a key description of the parent's); the child closes them.
pub(crate) fn in_forked_child(mut cache: MutexGuard<'static, Cache>) {
    cache.waiting.clear();
    cache.owner = None;
}

/// The idle trimmer's owner for the cache ([`crate::reclaim::Trim`]): closes the regions that
/// waited a tick (all of them for [`crate::shrink`]).
pub(crate) struct Trimmer;

impl crate::reclaim::Trim for Trimmer {
    fn trim(&self, force: bool) -> usize {
        let mut cache = lock();
        let gone: Vec<Cached> = {
            let (keep, gone) = std::mem::take(&mut cache.waiting)
                .into_iter()
                .partition(|c| !force && c.since.elapsed() < crate::reclaim::IDLE_TICK);
            cache.waiting = keep;
            gone
        };
        let owner = if cache.waiting.is_empty() {
            cache.owner.take()
        } else {
            None
        };
        drop(cache);
        drop((gone, owner)); // closed and unmapped unlocked
        0 // a cached region holds no pages: only a descriptor and address space
    }
}
