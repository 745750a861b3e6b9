//! [`Region`]: this process's view of a pipe's region, from its creation or its attachment (with
//! the validation of every immutable word) to the addressing of slots and pages.

use crate::error::{invalid, needs_proc};
use crate::pool::policy::PoolPolicy;
#[cfg(not(loom))]
use crate::region::backing::{Backing, KEYED, KEYING, LOST_IN_CHILD, UNKEYED};
use crate::region::geometry::{check_slot_size, notes_ok, positions_for, MAX_CAPACITY};
use crate::region::layout::{
    far_slots, Header, Layout, Slot, ARENA, DROPPED, HEADER_SIZE, MAGIC, NEAR_SLOTS, RELEASED,
    VERSION,
};
use crate::sync::Ordering;
use crate::sys::mm::PAGE_SIZE;
use std::io;
use std::ptr::NonNull;

/// Immutable choices made when the pipe was built, kept by each process from its own
/// validated reading of the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) policy: PoolPolicy,
    pub(crate) packet: bool,
    pub(crate) slot_size: usize,
    /// Record slots of a notification pipe (its ring size), 0 for a data pipe.
    pub(crate) notes: usize,
}

/// This process's view of a pipe's region.
pub(crate) struct Region {
    header: NonNull<Header>,
    /// Slot 0, in the near part; slots `0..near_slots` are there.
    slots: NonNull<Slot>,
    near_slots: usize,
    /// Position 0's page, in the near part; positions `0..near_positions` are there.
    arena: NonNull<u8>,
    near_positions: usize,
    /// Validated at attach; the region's own copy is never read again.
    pub(crate) config: Config,
    /// Slot positions (and pages) reserved: the largest ring this region can hold.
    pub(crate) max_ring: usize,
    #[cfg(not(loom))]
    backing: Backing,
    #[cfg(loom)]
    _heap: (Box<Header>, Box<[Slot]>, Box<[std::cell::UnsafeCell<u8>]>),
}

// SAFETY: the region is memory shared by design; which thread touches which bytes is decided
// by the side locks and the ring protocol, and every access goes through atomics or raw copies.
unsafe impl Send for Region {}
// SAFETY: as for Send.
unsafe impl Sync for Region {}

fn encode_policy(p: PoolPolicy) -> [u32; 3] {
    let c = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    match p {
        PoolPolicy::Adaptive { keep } => [0, c(keep), 0],
        PoolPolicy::Unified { keep, burst } => [1, c(keep), c(burst)],
        PoolPolicy::TmpPage => [2, 0, 0],
        PoolPolicy::None => [3, 0, 0],
    }
}

fn decode_policy(v: [u32; 3]) -> io::Result<PoolPolicy> {
    Ok(match v[0] {
        0 => PoolPolicy::Adaptive {
            keep: v[1] as usize,
        },
        1 => PoolPolicy::Unified {
            keep: v[1] as usize,
            burst: v[2] as usize,
        },
        2 => PoolPolicy::TmpPage,
        3 => PoolPolicy::None,
        k => return Err(invalid(format!("unknown pool policy {k} in the region"))),
    })
}

/// A copy of a region's header page, read before anything is mapped (see [`Region::attach`]):
/// its words in the layout [`Header`] pins, in this machine's byte order as the atomics store
/// them.
#[cfg(not(loom))]
struct HeaderCopy<'a>(&'a [u8]);

#[cfg(not(loom))]
impl HeaderCopy<'_> {
    fn u32_at(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.0[off..off + 4].try_into().expect("4 bytes"))
    }

    fn u64_at(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.0[off..off + 8].try_into().expect("8 bytes"))
    }
}

impl Region {
    /// A new region for a ring of `ring_size` slots that may grow to `reach` slots (reserving
    /// [`positions_for`] them; a notification pipe, never resized, exactly its ring).
    #[cfg(not(loom))]
    pub(crate) fn create(ring_size: usize, config: Config, reach: usize) -> io::Result<Region> {
        let max_ring = if config.notes != 0 {
            ring_size
        } else {
            positions_for(reach)
        };
        debug_assert!(ring_size <= reach && reach.is_power_of_two() && ring_size.is_power_of_two());
        let layout = Layout::of(config.slot_size, max_ring);
        let memfd = crate::sys::memfd::sealed_memfd(layout.total as u64)?;
        use std::os::fd::AsFd;
        let near = crate::cells::Cell::map(memfd.as_fd(), layout.near_len)?;
        let backing = Backing::new(near, memfd);
        let region = Region::from_backing(backing, layout, config, max_ring);
        region.init(ring_size)?;
        Ok(region)
    }

    /// A new region on the heap (loom models).
    #[cfg(loom)]
    pub(crate) fn create(ring_size: usize, config: Config, _reach: usize) -> io::Result<Region> {
        let header = Box::new(Header::zeroed());
        let slots: Box<[Slot]> = (0..ring_size).map(|_| Slot::free()).collect();
        let arena: Box<[std::cell::UnsafeCell<u8>]> = (0..ring_size * config.slot_size)
            .map(|_| std::cell::UnsafeCell::new(0))
            .collect();
        let region = Region {
            header: NonNull::from(&*header),
            slots: NonNull::new(slots.as_ptr() as *mut Slot).unwrap(),
            near_slots: ring_size,
            arena: NonNull::new(arena.as_ptr() as *mut u8).unwrap(),
            near_positions: ring_size,
            config,
            max_ring: ring_size,
            _heap: (header, slots, arena),
        };
        region.init(ring_size)?;
        Ok(region)
    }

    #[cfg(not(loom))]
    fn from_backing(backing: Backing, layout: Layout, config: Config, max_ring: usize) -> Region {
        let base = backing.near.as_ptr();
        assert!(
            layout.near_len <= backing.near.len(),
            "the near part is not mapped"
        );
        // SAFETY: (all three) the offsets lie in the near part, which the cell's mapping covers
        // (asserted above: ARENA is the header's page, HEADER_SIZE is inside it), and a mapping
        // is never at address 0.
        let (header, slots, arena) = unsafe {
            (
                NonNull::new_unchecked(base.cast::<Header>()),
                NonNull::new_unchecked(base.add(HEADER_SIZE).cast::<Slot>()),
                NonNull::new_unchecked(base.add(ARENA)),
            )
        };
        Region {
            header,
            slots,
            near_slots: max_ring.min(NEAR_SLOTS),
            arena,
            near_positions: layout.near_positions,
            config,
            max_ring,
            backing,
        }
    }

    /// Writes the immutable words and the initial state; the region is not yet shared.
    ///
    /// # Errors
    /// As [`Region::ensure_far`], for a ring larger than the near part.
    fn init(&self, ring_size: usize) -> io::Result<()> {
        if !self.fits_near(ring_size) {
            self.ensure_far()?;
        }
        let h = self.header();
        let c = self.config;
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        h.slot_size.store(c.slot_size as u32, Ordering::Relaxed);
        h.max_ring.store(self.max_ring as u32, Ordering::Relaxed);
        h.packet.store(u32::from(c.packet), Ordering::Relaxed);
        for (w, v) in h.policy.iter().zip(encode_policy(c.policy)) {
            w.store(v, Ordering::Relaxed);
        }
        h.notes.store(c.notes as u32, Ordering::Relaxed);
        h.ring_size.store(ring_size as u32, Ordering::Relaxed);
        h.max_usage.store(ring_size as u32, Ordering::Relaxed);
        h.dropped.store(ring_size as u64, Ordering::Relaxed);
        for pos in 0..ring_size {
            self.slot(pos)
                .state
                .store(RELEASED | DROPPED, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Validates a region received from another process (or this one) and maps its near part.
    ///
    /// # Errors
    /// `InvalidData` naming what is wrong: not a memory file sealed against shrinking (or one
    /// sealed against writing, or of huge pages), a wrong size, magic or version, sizes out of
    /// range; the OS's error if it cannot be read or mapped.
    #[cfg(not(loom))]
    pub(crate) fn attach(memfd: std::os::fd::OwnedFd) -> io::Result<Region> {
        use std::os::fd::AsFd;
        let (size, seals) = crate::sys::memfd::memfd_info(memfd.as_fd())?;
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(invalid(
                "the memory file is not sealed against shrinking (not a pagepipe region)",
            ));
        }
        if seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) != 0 {
            return Err(invalid(
                "the memory file is sealed against writing (not a pagepipe region)",
            ));
        }
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s >= PAGE_SIZE && s % PAGE_SIZE == 0)
            .ok_or_else(|| invalid(format!("a memory file of {size} bytes is not a region")))?;
        // Validated from a copy read without a mapping: nothing is mapped at a fixed address
        // (a cell) until the file is known to be a region of exactly the size it describes.
        let mut page = vec![0u8; PAGE_SIZE];
        crate::sys::memfd::read_exact_at(memfd.as_fd(), &mut page, 0)?;
        let h = HeaderCopy(&page);
        let magic = h.u64_at(std::mem::offset_of!(Header, magic));
        if magic != MAGIC {
            return Err(invalid(format!("bad region magic {magic:#x}")));
        }
        let version = h.u32_at(std::mem::offset_of!(Header, version));
        if version != VERSION {
            return Err(invalid(format!(
                "region version {version}, this pagepipe speaks {VERSION}"
            )));
        }
        let slot_size = h.u32_at(std::mem::offset_of!(Header, slot_size)) as usize;
        if check_slot_size(slot_size).is_err() {
            return Err(invalid(format!("bad slot size {slot_size} in the region")));
        }
        let packet = match h.u32_at(std::mem::offset_of!(Header, packet)) {
            0 => false,
            1 => true,
            v => return Err(invalid(format!("bad packet flag {v} in the region"))),
        };
        let policy_at = std::mem::offset_of!(Header, policy);
        let policy = decode_policy([0, 1, 2].map(|i| h.u32_at(policy_at + 4 * i)))?;
        let notes = h.u32_at(std::mem::offset_of!(Header, notes)) as usize;
        if notes != 0 && !notes_ok(notes, slot_size) {
            return Err(invalid(format!(
                "bad notification record count {notes} for {slot_size}-byte slots in the region"
            )));
        }
        let max_ring = h.u32_at(std::mem::offset_of!(Header, max_ring)) as usize;
        let max_ok = if notes != 0 {
            max_ring == notes
        } else {
            max_ring >= 2
                && max_ring.is_power_of_two()
                && max_ring <= positions_for((MAX_CAPACITY / slot_size).max(1))
        };
        if !max_ok {
            return Err(invalid(format!(
                "region reserves {max_ring} slots of {slot_size} bytes, not a size pagepipe makes"
            )));
        }
        let layout = Layout::of(slot_size, max_ring);
        if layout.total != size {
            return Err(invalid(format!(
                "region of {size} bytes, its header describes {}",
                layout.total
            )));
        }
        let config = Config {
            policy,
            packet,
            slot_size,
            notes,
        };
        let near = crate::cells::Cell::map(memfd.as_fd(), layout.near_len)?;
        Ok(Region::from_backing(
            Backing::new(near, memfd),
            layout,
            config,
            max_ring,
        ))
    }

    /// Whether this region can be a new pipe of `config` that may grow to `reach` slots (see
    /// `pipe::cache`): a data pipe's, with the same slot size and reservation.
    #[cfg(not(loom))]
    pub(crate) fn fits(&self, config: &Config, reach: usize) -> bool {
        config.notes == 0
            && self.config.notes == 0
            && config.slot_size == self.config.slot_size
            && self.max_ring == positions_for(reach)
    }

    /// Gives every page of the memory file back (a hole over all of it): the region then reads
    /// as the zeros a new memory file holds, and costs no memory. For a region no other
    /// process maps (see `pipe::cache`). The far part, if it was mapped, is unmapped: the next
    /// pipe may not need it.
    #[cfg(not(loom))]
    pub(crate) fn punch(&mut self) {
        // `&mut self`: nothing points into the far part, which is unmapped when it goes.
        if let Some(far) = self.backing.far.take() {
            far.remove(0, far.len());
        } else {
            // Nothing in this process touched the far part, and no other process maps it.
            let near = &self.backing.near;
            crate::sys::mm::advise_raw_remove(near.as_ptr(), near.len());
        }
    }

    /// Makes a punched region ([`Region::punch`]) a new pipe's: `config`, a ring of
    /// `ring_size` slots, as [`Region::create`] would.
    ///
    /// # Errors
    /// As [`Region::ensure_far`], for a ring larger than the near part.
    #[cfg(not(loom))]
    pub(crate) fn reuse(&mut self, config: Config, ring_size: usize) -> io::Result<()> {
        debug_assert!(ring_size <= self.reach() && ring_size.is_power_of_two());
        self.config = config;
        self.init(ring_size)
    }

    /// The largest ring `set_capacity` may make: half the reserved positions (the other half
    /// stages a resize), or a notification pipe's ring.
    pub(crate) fn reach(&self) -> usize {
        if self.config.notes != 0 {
            self.max_ring
        } else {
            self.max_ring / 2
        }
    }

    /// This process's descriptor of the memory file (see [`Backing::memfd`]): for queries
    /// (`F_OFD_GETLK`, `fstat`) and to open it again for a peer.
    ///
    /// # Errors
    /// `BrokenPipe` in a forked child that could not reopen it (see
    /// [`Region::forget_in_forked_child`]).
    #[cfg(not(loom))]
    pub(crate) fn memfd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        let raw = self
            .backing
            .memfd
            .load(std::sync::atomic::Ordering::Relaxed);
        if raw < 0 {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "this process could not reopen the pipe's memory file after fork(2)",
            ));
        }
        // SAFETY: `raw` stays open while `self` lives: only Drop closes it; `key_description`
        // and a forked child's handler replace the description in place (dup3), and a child
        // that cannot stores -1 before it closes the number, with no other thread alive.
        Ok(unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) })
    }

    /// The description this process's key lock lives on: the memory file opened again
    /// (through `/proc/self/fd`), in place of the descriptor's mapped one, the first time.
    /// Asked for only when the key is real: a pipe that stays in this process never opens it
    /// (its key is provisional, see `Shared::take_key`); one that leaves does on its way out.
    ///
    /// Never the description the region is mapped from: a mapping holds its description, and
    /// a forked child inherits the mapping, so a lock on it would outlive this process for as
    /// long as any child does. Nor one any other process holds: an end that travels gets a
    /// fresh description ([`Region::memfd`] opened again), and a forked child replaces its
    /// copy of this one ([`Region::forget_in_forked_child`]).
    ///
    /// # Errors
    /// The OS's error if the file cannot be opened again (no `/proc`, a full descriptor
    /// table); `BrokenPipe` as for [`Region::memfd`].
    #[cfg(not(loom))]
    pub(crate) fn key_description(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        use std::sync::atomic::Ordering as O;
        let keyed = &self.backing.keyed;
        loop {
            // No fork while KEYING (a child would inherit the state with nobody to finish it)
            // nor while the reopening's spare descriptor exists (a child would inherit it, and
            // with it a reference to our key description).
            let no_fork = crate::fork_gate::hold();
            // Acquire: pairs with the Release store of KEYED below (the dup3 is done).
            match keyed.compare_exchange(UNKEYED, KEYING, O::Acquire, O::Acquire) {
                Ok(_) => {
                    let done = self.memfd().and_then(|fd| {
                        crate::sys::fd::reopen_in_place(std::os::fd::AsRawFd::as_raw_fd(&fd))
                    });
                    // Release: the replaced description is in place for whoever sees KEYED.
                    keyed.store(if done.is_ok() { KEYED } else { UNKEYED }, O::Release);
                    drop(no_fork);
                    done.map_err(|e| needs_proc(e, "a key of this process on the pipe"))?;
                    return self.memfd();
                }
                Err(KEYED) => return self.memfd(),
                Err(_) => {
                    drop(no_fork);
                    std::thread::yield_now(); // another thread is reopening it
                }
            }
        }
    }

    /// In the prepare fork handler: whether a child forked now must lose this region (`lose`:
    /// the parent's provisional key could not be made real, so the lock words the parent's
    /// threads write name a key whose byte nobody locks; a child that used the region would
    /// take their sides from them). See [`Region::forget_in_forked_child`].
    #[cfg(not(loom))]
    pub(crate) fn lose_in_forked_child(&self, lose: bool) {
        self.backing
            .lose_in_child
            .store(lose, std::sync::atomic::Ordering::Relaxed);
    }

    /// In a forked child (fork handler, one thread): if this process took its key, the
    /// inherited descriptor shares the parent's key description; the child gets a description
    /// of its own in its place, so the parent's key dies with the parent (the mapping the child
    /// inherited holds only the mapped description, which no lock uses). If that fails (no
    /// `/proc`, a full descriptor table), or the parent could not make its key real before the
    /// fork ([`Region::lose_in_forked_child`]), the child closes its copy and every call that
    /// needs the file fails with `BrokenPipe`: failing closed, never keeping the parent alive
    /// in the eyes of its peers nor taking a side from a live parent thread.
    #[cfg(not(loom))]
    pub(crate) fn forget_in_forked_child(&self) {
        use std::sync::atomic::Ordering as O;
        let raw = self.backing.memfd.load(O::Relaxed);
        let lose = self.backing.lose_in_child.swap(false, O::Relaxed);
        if raw < 0 || (!lose && self.backing.keyed.load(O::Relaxed) == UNKEYED) {
            return;
        }
        if !lose && crate::sys::fd::reopen_in_place(raw).is_ok() {
            self.backing.keyed.store(KEYED, O::Relaxed);
        } else {
            self.backing.memfd.store(-1, O::Relaxed);
            crate::sys::fd::close_raw(raw);
            // The number just closed is free, and stays free for the other regions' reopens;
            // the fork handler makes the stand-in for lost ends' descriptors after them all
            // (`after_forgets`), where later there may be none to spare.
            LOST_IN_CHILD.store(true, O::Relaxed);
        }
    }

    /// The header: all atomics, so a shared reference is sound whatever peers write.
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: `header` points to a live, aligned Header for as long as `self` (the mapping or
        // box it is in is owned by `self`); every field is an atomic, valid for any bits.
        unsafe { self.header.as_ref() }
    }

    /// Slot position `pos`'s bookkeeping.
    ///
    /// # Panics
    /// If `pos >= max_ring` (callers derive positions from a validated ring size), or if the
    /// slot lies in the far part and this process has not mapped it: every position past the
    /// near part comes from a ring size [`Region::ring_size`] validated (which maps the far
    /// part first) or from a resize, which maps it before it stages ([`Region::ensure_far`]).
    #[inline]
    pub(crate) fn slot(&self, pos: usize) -> &Slot {
        assert!(pos < self.max_ring, "slot position {pos} out of the region");
        if pos < self.near_slots {
            // SAFETY: pos < near_slots: inside the header's page, which holds near_slots slots of
            // atomics after the header.
            return unsafe { &*self.slots.as_ptr().add(pos) };
        }
        let far = self.far();
        assert!(
            !far.is_null(),
            "slot {pos} is in the far part, not mapped here"
        );
        let off = far_slots(self.config.slot_size, self.max_ring)
            + (pos - self.near_slots) * std::mem::size_of::<Slot>();
        // SAFETY: the far part maps the whole file, whose slots past the header's page start
        // at `far_slots` and hold max_ring - near_slots slots (pos < max_ring); aligned to 64
        // (far_slots is a page multiple).
        unsafe { &*far.add(off).cast::<Slot>() }
    }

    /// The first byte of position `pos`'s page.
    ///
    /// # Panics
    /// As [`Region::slot`].
    #[inline]
    pub(crate) fn page(&self, pos: usize) -> *mut u8 {
        self.run(pos, 1)
    }

    /// The first byte of the `count` pages of positions `first..first + count`, which are
    /// contiguous: in the far part once it is mapped, else in the near part.
    ///
    /// # Panics
    /// If the positions pass `max_ring`, or the near part while the far part is not mapped.
    #[inline]
    pub(crate) fn run(&self, first: usize, count: usize) -> *mut u8 {
        let end = first.checked_add(count);
        assert!(
            end.is_some_and(|e| e <= self.max_ring),
            "page positions {first}+{count} out of the region"
        );
        let off = first * self.config.slot_size;
        let far = self.far();
        if far.is_null() {
            assert!(
                end.is_some_and(|e| e <= self.near_positions),
                "page positions {first}+{count} are in the far part, not mapped here"
            );
            // SAFETY: the positions lie in the near part's arena (asserted above).
            unsafe { self.arena.as_ptr().add(off) }
        } else {
            // SAFETY: the far part maps the whole file, whose arena of max_ring pages starts at
            // ARENA; the positions lie in it (asserted above).
            unsafe { far.add(ARENA + off) }
        }
    }

    /// The far part's first byte, or null while this process has not mapped it.
    #[inline]
    fn far(&self) -> *mut u8 {
        #[cfg(not(loom))]
        {
            // OnceLock::get: an Acquire load that pairs with its `set` in `map_far`.
            self.backing
                .far
                .get()
                .map_or(std::ptr::null_mut(), crate::sys::mm::Mapping::as_ptr)
        }
        #[cfg(loom)]
        {
            std::ptr::null_mut()
        }
    }

    /// Whether a ring of `ring` slots lies wholly in the near part.
    #[inline]
    fn fits_near(&self, ring: usize) -> bool {
        ring <= self.near_positions && ring <= self.near_slots
    }

    /// Maps the far part if this process has not yet: before any use of a slot or page past
    /// the near part.
    ///
    /// # Errors
    /// The OS's error if the file cannot be opened again (no `/proc`, a full descriptor table)
    /// or mapped (no address space); `BrokenPipe` as for [`Region::memfd`].
    pub(crate) fn ensure_far(&self) -> io::Result<()> {
        if self.far().is_null() {
            #[cfg(not(loom))]
            return self.map_far();
        }
        Ok(())
    }

    /// [`Region::ensure_far`]'s mapping. From a description of its own, opened again for it
    /// and closed after: never the key's (a mapping holds its description, and a forked child
    /// inherits the mapping, so the key's lock would outlive this process; see
    /// [`Region::key_description`]).
    #[cfg(not(loom))]
    #[cold]
    fn map_far(&self) -> io::Result<()> {
        use std::sync::atomic::Ordering as O;
        let total = Layout::of(self.config.slot_size, self.max_ring).total;
        let keyed = &self.backing.keyed;
        loop {
            // No fork while the spare descriptor is open or the mapping unowned: a child would
            // inherit them, unknown to it.
            let no_fork = crate::fork_gate::hold();
            if self.backing.far.get().is_some() {
                return Ok(()); // another thread mapped it meanwhile
            }
            // The mapping must never hold the key description (a key lock would then live as
            // long as any mapping, a forked child's too): while the descriptor still names the
            // mapped description (no real key yet) it is mapped as it is, which needs no
            // `/proc`, and KEYING keeps `key_description` from replacing the description under
            // the mapping; once it names the key's, the file is opened again (through `/proc`).
            // Acquire: as in `key_description`.
            let far = match keyed.compare_exchange(UNKEYED, KEYING, O::Acquire, O::Acquire) {
                Ok(_) => {
                    let far = self
                        .memfd()
                        .and_then(|fd| crate::sys::mm::Mapping::shared(fd, total));
                    // Release: pairs with the Acquire CAS in `key_description`.
                    keyed.store(UNKEYED, O::Release);
                    far
                }
                Err(KEYED) => {
                    let what = "mapping a ring larger than 64 KiB of a pipe that left the process";
                    let fd =
                        crate::sys::fd::reopen(self.memfd()?).map_err(|e| needs_proc(e, what))?;
                    crate::sys::mm::Mapping::shared(std::os::fd::AsFd::as_fd(&fd), total)
                }
                Err(_) => {
                    // Another thread is mapping it or making the key real: wait for it.
                    drop(no_fork);
                    std::thread::yield_now();
                    continue;
                }
            };
            // A thread that lost the race drops (unmaps) its own, still under the gate.
            let _ = self.backing.far.set(far?);
            drop(no_fork);
            return Ok(());
        }
    }

    /// Whether this forked child lost the region (see [`Region::forget_in_forked_child`]):
    /// every call on its ends fails with `BrokenPipe`.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn lost(&self) -> bool {
        self.backing
            .memfd
            .load(std::sync::atomic::Ordering::Relaxed)
            < 0
    }

    /// The current ring size, validated: a power of two of at most `max_ring` slots. A ring
    /// larger than the near part gets the far part mapped first, so every position derived
    /// from the size can be used.
    ///
    /// # Errors
    /// `InvalidData` for a bad size; as [`Region::ensure_far`].
    #[inline]
    pub(crate) fn ring_size(&self) -> io::Result<usize> {
        // Acquire: pairs with the Release store in set_capacity (made with both sides held).
        let v = self.header().ring_size.load(Ordering::Acquire) as usize;
        if v == 0 || !v.is_power_of_two() || v > self.max_ring {
            return Err(invalid(format!("bad ring size {v} in the region")));
        }
        if !self.fits_near(v) {
            self.ensure_far()?;
        }
        Ok(v)
    }

    /// Slots data may use, validated against `ring`.
    pub(crate) fn max_usage(&self, ring: usize) -> io::Result<usize> {
        // Acquire: pairs with the Release store in set_capacity.
        let v = self.header().max_usage.load(Ordering::Acquire) as usize;
        if v == 0 || v > ring {
            return Err(invalid(format!(
                "bad max_usage {v} for a ring of {ring} slots"
            )));
        }
        Ok(v)
    }

    /// Gives the pages of `count` positions from `first` back to the OS.
    ///
    /// # Panics
    /// As [`Region::run`].
    pub(crate) fn drop_pages(&self, first: usize, count: usize) {
        let run = self.run(first, count);
        #[cfg(not(loom))]
        crate::sys::mm::advise_raw_remove(run, count * self.config.slot_size);
        #[cfg(loom)]
        let _ = run;
    }

    /// Faults in the pages of `count` positions from `first` (contents unchanged).
    ///
    /// # Panics
    /// As [`Region::run`].
    pub(crate) fn populate(&self, first: usize, count: usize) {
        let run = self.run(first, count);
        #[cfg(not(loom))]
        crate::sys::mm::advise_raw_populate(run, 0, count * self.config.slot_size);
        #[cfg(loom)]
        let _ = run;
    }

    /// Resident 4 KiB pages of position `pos`'s page (`mincore(2)`).
    #[cfg(not(loom))]
    pub(crate) fn resident_pages(&self, pos: usize) -> io::Result<usize> {
        crate::sys::mm::resident_raw(self.page(pos), self.config.slot_size)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::geometry::{notes_ring_for, ring_size_for, DEFAULT_MAX_CAPACITY};

    #[test]
    fn capacity_rounds_like_f_setpipe_sz() {
        assert_eq!(ring_size_for(1, 4096).unwrap(), 1);
        assert_eq!(ring_size_for(4097, 4096).unwrap(), 2);
        assert_eq!(ring_size_for(65536, 4096).unwrap(), 16);
        assert_eq!(ring_size_for(65537, 4096).unwrap(), 32);
        assert_eq!(ring_size_for(65536, 65536).unwrap(), 1);
        assert_eq!(ring_size_for(4096, 65536).unwrap(), 1);
        assert_eq!(
            ring_size_for(0, 4096).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            ring_size_for(MAX_CAPACITY + 1, 4096).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(check_slot_size(8192).is_ok());
        assert!(check_slot_size(6000).is_err());
        assert!(check_slot_size(2048).is_err());
    }

    #[test]
    fn notification_rings_round_up() {
        assert_eq!(notes_ring_for(1).unwrap(), 1);
        assert_eq!(notes_ring_for(33).unwrap(), 64);
        assert_eq!(notes_ring_for(512).unwrap(), 512);
        assert!(notes_ring_for(0).is_err() && notes_ring_for(513).is_err());
    }

    /// A default pipe reserves room to grow to 1 MiB and to stage that much: 2 MiB and a slot
    /// table, well under issue 23's 64 MiB of address space for a 64 KiB pipe. Its whole
    /// 64 KiB ring is in the near part, a cell's worth.
    #[test]
    fn layout_reserves_twice_the_reach() {
        let reach = DEFAULT_MAX_CAPACITY / 4096;
        let max_ring = positions_for(reach);
        let l = Layout::of(4096, max_ring);
        assert_eq!(l.far_slots, 4096 + 2 * DEFAULT_MAX_CAPACITY);
        assert_eq!(
            l.total,
            l.far_slots + ((max_ring - 32) * 64).next_multiple_of(4096)
        );
        assert!(l.total <= 64 << 20);
        assert_eq!(l.near_positions, 16);
        assert_eq!(l.near_len, crate::cells::CELL);
        // Big slots: no page in the near part, only the header's.
        let big = Layout::of(1 << 20, 4);
        assert_eq!((big.near_positions, big.near_len), (0, 4096));
        assert_eq!(big.total, 4096 + (4 << 20));
    }

    /// A default pipe's region lives in a cell (its header and whole ring within one cell of
    /// a 2 MiB-aligned area); a ring larger than the near part maps the far part, through which
    /// the same pages read the same, and slots past the header's page become reachable.
    #[test]
    fn a_region_is_near_until_its_ring_outgrows_the_cell() {
        use crate::cells::{AREA, CELL};
        let config = Config {
            policy: PoolPolicy::default(),
            packet: false,
            slot_size: PAGE_SIZE,
            notes: 0,
        };
        let r = Region::create(16, config, 256).unwrap();
        let base = r.header() as *const Header as usize;
        assert_eq!(base % AREA % CELL, 0, "the header starts a cell");
        assert!(r.far().is_null(), "a default ring needs no far part");
        let last = r.page(15) as usize;
        assert!(last + PAGE_SIZE <= base + CELL, "the ring lies in the cell");
        // SAFETY: position 3's page is free and nothing else uses this region.
        unsafe { r.page(3).add(5).write(42) };
        r.header().ring_size.store(64, Ordering::Relaxed);
        assert_eq!(r.ring_size().unwrap(), 64);
        assert!(!r.far().is_null(), "a 64-slot ring maps the far part");
        assert_ne!(
            r.page(3) as usize,
            last - 12 * PAGE_SIZE,
            "pages now go through it"
        );
        // SAFETY: as above.
        assert_eq!(unsafe { r.page(3).add(5).read() }, 42, "the same page");
        r.slot(63).start.store(7, Ordering::Relaxed);
        assert_eq!(r.slot(63).start.load(Ordering::Relaxed), 7);
        assert_eq!(
            r.slot(31).state.load(Ordering::Relaxed),
            0,
            "slot 31: free, never used"
        );
    }

    #[test]
    fn policies_round_trip() {
        for p in [
            PoolPolicy::Adaptive { keep: 3 },
            PoolPolicy::Unified { keep: 2, burst: 8 },
            PoolPolicy::TmpPage,
            PoolPolicy::None,
        ] {
            assert_eq!(decode_policy(encode_policy(p)).unwrap(), p);
        }
        assert!(decode_policy([9, 0, 0]).is_err());
    }
}
