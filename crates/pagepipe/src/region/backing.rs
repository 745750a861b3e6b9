//! The memory file behind a region and this process's mappings of it ([`Backing`]), and the
//! always-ready descriptor handed to an end that lost its own in a forked child.

/// The memory file and this process's mappings of it.
#[cfg(not(loom))]
pub(crate) struct Backing {
    /// The near part, in a cell.
    pub(crate) near: crate::cells::Cell,
    /// The whole file, mapped at the first need (see [`Region::ensure_far`]). Never unmapped
    /// while the region lives (callers hold pointers into it), except by [`Region::punch`],
    /// which no other user of the region can overlap.
    pub(crate) far: std::sync::OnceLock<crate::sys::mm::Mapping>,
    /// This process's descriptor of the memory file, -1 once a forked child could not reopen
    /// it (or its parent could not make its key real). Until the process takes a real key
    /// ([`KEYED`]) it names the description the mapping was made from; from then on a
    /// description of its own, opened again for the key's lock and never mapped (see
    /// [`Region::key_description`]). A pipe confined to this process has only a provisional
    /// key (see `Shared::take_key`), and so usually no second description.
    pub(crate) memfd: std::sync::atomic::AtomicI32,
    /// [`UNKEYED`], [`KEYING`] or [`KEYED`].
    pub(crate) keyed: std::sync::atomic::AtomicU8,
    /// Set by the prepare fork handler when this process's provisional key on the region could
    /// not be made real: a child forked now must not use the region (see
    /// [`Region::lose_in_forked_child`]). Written and read only by the fork handlers.
    pub(crate) lose_in_child: std::sync::atomic::AtomicBool,
}

/// `Backing::keyed`: the descriptor still names the mapped description.
#[cfg(not(loom))]
pub(crate) const UNKEYED: u8 = 0;
/// `Backing::keyed`: a thread is giving it a description of its own.
#[cfg(not(loom))]
pub(crate) const KEYING: u8 = 1;
/// `Backing::keyed`: it names a description of its own, which only locks use.
#[cfg(not(loom))]
pub(crate) const KEYED: u8 = 2;

#[cfg(not(loom))]
impl Backing {
    pub(crate) fn new(near: crate::cells::Cell, memfd: std::os::fd::OwnedFd) -> Backing {
        use std::os::fd::IntoRawFd;
        Backing {
            near,
            far: std::sync::OnceLock::new(),
            memfd: std::sync::atomic::AtomicI32::new(memfd.into_raw_fd()),
            keyed: std::sync::atomic::AtomicU8::new(UNKEYED),
            lose_in_child: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[cfg(not(loom))]
impl Drop for Backing {
    fn drop(&mut self) {
        let raw = *self.memfd.get_mut();
        if raw >= 0 {
            crate::sys::fd::close_raw(raw);
        }
    }
}

/// A descriptor that always polls ready (`sys::poll::always_ready`: `POLLIN` and `POLLOUT`
/// whoever reads or writes it), handed to the poller of an end that lost every descriptor of
/// its own (a forked child at its descriptor limit, see [`Region::forget_in_forked_child`]):
/// the poller wakes and its call finds the end's error (`BrokenPipe`), never a wait with no
/// end. Made once per process on first need (a forked child inherits it); -1 until made. Every
/// such end of the process hands out this one number: an epoll instance takes it once.
#[cfg(not(loom))]
pub(crate) static READY_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// A region of this forked child lost its memory file (see [`Region::forget_in_forked_child`]).
#[cfg(not(loom))]
pub(crate) static LOST_IN_CHILD: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// In a forked child, after every region forgot its parent's key: if one lost its memory file,
/// make [`READY_FD`] now, with the descriptor number that closing it freed.
#[cfg(not(loom))]
pub(crate) fn after_forgets() {
    if LOST_IN_CHILD.swap(false, std::sync::atomic::Ordering::Relaxed) {
        let _ = ready_fd();
    }
}

/// [`READY_FD`], made if it was not yet; `None` if it cannot be (no descriptor, no memory).
#[cfg(not(loom))]
pub(crate) fn ready_fd() -> Option<std::os::fd::BorrowedFd<'static>> {
    use std::os::fd::IntoRawFd;
    use std::sync::atomic::Ordering as O;
    // Relaxed: the number is all there is to publish (the eventfd is complete when the CAS
    // below stores it; a reader only polls the number).
    let fd = READY_FD.load(O::Relaxed);
    let fd = if fd >= 0 {
        fd
    } else {
        let made = crate::sys::poll::always_ready().ok()?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&made);
        // Relaxed: as above; a thread that lost the race drops its own.
        match READY_FD.compare_exchange(-1, raw, O::Relaxed, O::Relaxed) {
            Ok(_) => made.into_raw_fd(),
            Err(other) => other,
        }
    };
    // SAFETY: once stored, READY_FD is never closed: it stays open for the process's life.
    Some(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
}
