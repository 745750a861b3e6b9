//! This process's key on a pipe (see [`crate::lock`]): how a lock word names its holder's
//! process, how that key is taken (provisional while the pipe is confined, a locked byte of the
//! memory file once it leaves), made real before a fork or an exposure, and forgotten by a
//! forked child; and the answer to "does that key still live?" that a taker of a side asks.

use crate::lock;
use crate::pipe::shared::Shared;
use std::io;

/// Where the process keys' bytes start in the memory file: far past its end (record locks may
/// cover bytes beyond a file's end, and these never touch its data).
#[cfg(not(loom))]
const KEY_BASE: u64 = 1 << 40;
/// A process tries keys `pid + i * KEY_STRIDE` (above every `pid_max`) until one is free: two
/// processes of different pid namespaces may share a pid.
#[cfg(not(loom))]
const KEY_STRIDE: u32 = 1 << 22;
/// [`Shared::key`]'s flag: the key is provisional, its byte not locked (the pipe is confined
/// to this process).
#[cfg(not(loom))]
const PROVISIONAL: u64 = 1 << 63;

/// The fork generation part of a [`Shared::key`] word (`generation + 1`, 0: no key).
#[cfg(not(loom))]
#[inline]
fn key_generation(word: u64) -> u64 {
    (word & !PROVISIONAL) >> 32
}

#[cfg(not(loom))]
impl lock::Holders for Shared {
    #[inline]
    fn key(&self) -> io::Result<u32> {
        // Provisional or real: the same value (see `Shared::take_key`).
        let cached = self.key.load(std::sync::atomic::Ordering::Relaxed);
        if key_generation(cached) == lock::fork_generation() + 1 {
            return Ok(cached as u32);
        }
        self.take_key()
    }

    #[inline]
    fn id(&self, l: &lock::SideLock) -> u64 {
        let offset = std::ptr::from_ref(l) as u64 - std::ptr::from_ref(self.header()) as u64;
        self.ino() << 12 | offset
    }

    fn process_alive(&self, key: u32) -> io::Result<bool> {
        crate::sys::fd::byte_locked(self.region.memfd()?, KEY_BASE + u64::from(key))
    }

    fn ours(&self, key: u32) -> bool {
        let generation = lock::fork_generation();
        own_keys()
            .iter()
            .any(|&(ino, k, g)| ino == self.ino() && k == key && g == generation)
    }
}

/// The keys this process holds, on which memory file, in which fork generation: every mapping
/// of a pipe takes a key of its own (its own description), and a second mapping of the same
/// pipe in this process (an end received from ourselves) must see the first's holders as ours.
#[cfg(not(loom))]
pub(crate) type OwnKeys = Vec<(u64, u32, u64)>;

#[cfg(not(loom))]
static OWN_KEYS: std::sync::Mutex<OwnKeys> = std::sync::Mutex::new(Vec::new());

/// [`OWN_KEYS`], locked (also by the fork handlers, around `fork(2)`).
#[cfg(not(loom))]
pub(crate) fn own_keys() -> std::sync::MutexGuard<'static, OwnKeys> {
    OWN_KEYS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The first key a process of pid `pid` tries (the provisional key, see `Shared::take_key`).
#[cfg(not(loom))]
fn first_key(pid: u32) -> u32 {
    pid.max(1)
}

/// An error of the key description, said as the key's.
#[cfg(not(loom))]
fn cannot_take(e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot take a key on the pipe: {e}"))
}

#[cfg(loom)]
impl lock::Holders for Shared {
    fn key(&self) -> io::Result<u32> {
        Ok(1)
    }
    fn id(&self, l: &lock::SideLock) -> u64 {
        std::ptr::from_ref(l) as u64
    }
    fn process_alive(&self, _key: u32) -> io::Result<bool> {
        Ok(true)
    }
    fn ours(&self, _key: u32) -> bool {
        false
    }
}

impl Shared {
    /// Takes this process's key on the pipe (see [`crate::lock`]): a byte of the memory file
    /// locked (`F_OFD_SETLK`) through an open file description of this mapping's own, never
    /// mapped and never shared (`Region::key_description`), `pid` unless another holder has
    /// that byte. So the lock lives exactly as long as this process keeps the mapping (a forked
    /// child reopens the file, [`Shared::forget_key`], and takes a key of its own).
    ///
    /// While the pipe is confined to this process ([`Shared::confined`]) the key is
    /// *provisional*: the value the real key would take first (`pid`), with no description
    /// opened, no byte locked, and no record in `OWN_KEYS` (which [`lock::Holders::ours`] asks
    /// for other mappings of the pipe in this process; a confined pipe has none, and the
    /// upgrade records the key). No other process can read a lock word of a confined pipe, so none can ask
    /// whether that key lives; the reopened description and the lock (a `/proc` dentry and
    /// inode, a file, a file lock: about 1 KiB of kernel memory, and two system calls) are
    /// paid only by a pipe that leaves. The byte is locked before it does: by
    /// [`Shared::expose_key`] before an end goes to another process, and by the prepare fork
    /// handler ([`Shared::key_before_fork`]) before a fork.
    ///
    /// Why no lock word of a pipe another process can see names an unlocked key of ours: the
    /// choice (`confined()`, then the provisional record) is made holding the fork gate shared
    /// and `keying`. A fork's prepare handler takes the gate exclusively, then counts the fork
    /// (`FORKS`, so `confined()` is false from then on), then makes every provisional key of
    /// this generation real: a record made before it took the gate is seen (the gate orders
    /// it), and a choice made after the parent's handlers released it sees the fork and takes a
    /// real key. An exposure marks the pipe (`exposed`) under `keying` after making the key
    /// real: a record made before is made real, a choice made after sees the mark. The key's
    /// value never changes within a generation, so a thread that read it provisional, before
    /// the upgrade, writes the same identity that the upgrade locked.
    #[cfg(not(loom))]
    #[cold]
    pub(super) fn take_key(&self) -> io::Result<u32> {
        let generation = lock::fork_generation();
        // Order: the gate, then `keying` (as everywhere), then OWN_KEYS.
        let _no_fork = crate::fork_gate::hold();
        let _keying = self.keying.lock().unwrap_or_else(|e| e.into_inner());
        let cached = self.key.load(std::sync::atomic::Ordering::Relaxed);
        if key_generation(cached) == generation + 1 {
            return Ok(cached as u32); // another thread chose it meanwhile
        }
        let pid = std::process::id();
        if self.confined() {
            let key = first_key(pid);
            self.key.store(
                PROVISIONAL | (generation + 1) << 32 | u64::from(key),
                std::sync::atomic::Ordering::Relaxed,
            );
            // Not in OWN_KEYS yet: only another mapping of the pipe in this process asks it
            // (`Holders::ours`), and a confined pipe has none; the upgrade records it.
            return Ok(key);
        }
        let desc = self.region.key_description().map_err(cannot_take)?;
        for i in 0..16u32 {
            let key = pid.wrapping_add(i.wrapping_mul(KEY_STRIDE)).max(1);
            if crate::sys::fd::lock_byte(desc, KEY_BASE + u64::from(key))? {
                self.key.store(
                    (generation + 1) << 32 | u64::from(key),
                    std::sync::atomic::Ordering::Relaxed,
                );
                own_keys().push((self.ino(), key, generation));
                return Ok(key);
            }
        }
        Err(io::Error::other(
            "no free process key on the pipe's memory file (16 tried)",
        ))
    }

    /// Makes a provisional key of this fork generation real (see [`Shared::take_key`]): its
    /// byte locked through the key description. Nothing to do for a real key or none. The
    /// caller holds the fork gate (shared with `keying`, or exclusively in the prepare
    /// handler).
    ///
    /// # Errors
    /// The OS's error if the file cannot be opened again or the byte locked; `Other` if
    /// another description holds that byte (the key stays provisional in every case).
    #[cfg(not(loom))]
    fn make_key_real(&self) -> io::Result<()> {
        let cached = self.key.load(std::sync::atomic::Ordering::Relaxed);
        if cached & PROVISIONAL == 0 || key_generation(cached) != lock::fork_generation() + 1 {
            return Ok(());
        }
        let key = cached as u32;
        let desc = self.region.key_description().map_err(cannot_take)?;
        // A region from the cache may have a key description already (an upgrade whose reopen
        // worked and whose lock failed, leaving the pipe confined): the lock is taken through
        // it, and would succeed again for the same description.
        if !crate::sys::fd::lock_byte(desc, KEY_BASE + u64::from(key))? {
            return Err(io::Error::other(format!(
                "cannot take a key on the pipe: its byte {key} is locked by another description"
            )));
        }
        self.key
            .store(cached & !PROVISIONAL, std::sync::atomic::Ordering::Relaxed);
        // From now on another mapping of the pipe in this process may find the key (an end sent
        // to ourselves): it must know it for ours.
        own_keys().push((self.ino(), key, key_generation(cached) - 1));
        Ok(())
    }

    /// Before an end of this pipe goes to another process: makes a provisional key real, then
    /// marks the pipe exposed ([`Shared::mark_exposed`]), both under the fork gate and
    /// `keying`, so no provisional key is chosen after the upgrade and before the mark (see
    /// [`Shared::take_key`]).
    ///
    /// # Errors
    /// As [`Shared::make_key_real`]; the pipe then stays confined, and the end must not go.
    #[cfg(not(loom))]
    pub(crate) fn expose_key(&self) -> io::Result<()> {
        let _no_fork = crate::fork_gate::hold();
        let _keying = self.keying.lock().unwrap_or_else(|e| e.into_inner());
        self.make_key_real()?;
        self.mark_exposed();
        Ok(())
    }

    /// In the prepare fork handler (the fork gate held exclusively, the fork counted): readies
    /// the pipe for two processes, its signal pipe made (the kernel counts each side's holders
    /// from now on: two descriptors) and a provisional key made real. If either fails (no
    /// `/proc`, a full descriptor table) the child will not use this pipe: its fork handler
    /// closes its memory file (see `Region::forget_in_forked_child`) and its calls fail with
    /// `BrokenPipe` (or see end of file) and never wait. Without a signal pipe the parent then
    /// judges the pipe by its own ends, which are all that can still move bytes; with one (the
    /// key was what failed) the kernel still counts the child's inherited descriptors until it
    /// closes them or exits, so the parent may wait for that child's exit to see end of file.
    /// A child that kept such a pipe used to judge its peer from its own process alone: the
    /// parent's reader saw end of file while the child wrote, and the child's writes went
    /// unread.
    #[cfg(not(loom))]
    pub(crate) fn key_before_fork(&self) {
        // Nobody else holds `keying` now: its holders hold the gate, which the forking thread
        // has; so this cannot wait. Order: `keying`, then the signal pipe's locks (leaves).
        let _keying = self.keying.lock().unwrap_or_else(|e| e.into_inner());
        let failed = self.ensure_signal().is_err() || self.make_key_real().is_err();
        self.region.lose_in_forked_child(failed);
    }

    /// In a forked child (fork handler, one thread): the child's memory file descriptor gets a
    /// description of its own in place of the parent's key description, so the parent's key
    /// dies with the parent, whatever the child does.
    #[cfg(not(loom))]
    pub(crate) fn forget_key(&self) {
        self.region.forget_in_forked_child();
    }

    /// The memory file's inode: names a lock the same from every mapping of the pipe in this
    /// process (the hold table's key, see `lock::held`). Asked of the kernel (`fstat`) the
    /// first time a lock needs it, not when the pipe is made.
    #[cfg(not(loom))]
    #[inline]
    fn ino(&self) -> u64 {
        let ino = self.ino.load(std::sync::atomic::Ordering::Relaxed);
        if ino != 0 {
            return ino;
        }
        self.ask_ino()
    }

    #[cfg(not(loom))]
    #[cold]
    fn ask_ino(&self) -> u64 {
        // A failure (a forked child that lost the file) leaves a stand-in no inode has: this
        // mapping's address, unique in the process while it lives.
        let ino = self
            .region
            .memfd()
            .and_then(crate::sys::memfd::file_id)
            .map_or(std::ptr::from_ref(self) as u64 | 1 << 63, |(_, ino)| {
                ino.max(1)
            });
        self.ino.store(ino, std::sync::atomic::Ordering::Relaxed);
        ino
    }

    /// This mapping is gone: its key (if it took one) is no longer this process's. (A real
    /// key's lock goes with the description, closed with the region, or kept by the region
    /// cache for the next pipe of this process.)
    #[cfg(not(loom))]
    pub(super) fn drop_key(&self) {
        let cached = self.key.load(std::sync::atomic::Ordering::Relaxed);
        let generation = lock::fork_generation();
        // A provisional key was never recorded (see `Shared::take_key`): no global lock then.
        if cached & PROVISIONAL == 0 && key_generation(cached) == generation + 1 {
            let key = cached as u32;
            let ino = self.ino();
            own_keys().retain(|&(i, k, g)| !(i == ino && k == key && g == generation));
        }
    }
}
