//! The temporary destination file, and its removal on error, on drop and on SIGINT/SIGTERM/SIGHUP.
//!
//! A copy is written to a temporary name beside its destination and renamed over it only when it
//! is complete, durable and (on request) verified, so a destination name never holds a partial
//! copy. [`Temp`] removes its file when dropped uncommitted (every error path), and a signal
//! handler removes every temporary (the one being written and a batch's, see `batch.rs`) if
//! the user interrupts the copy (`stale.rs` removes what a SIGKILLed copy left, on the next
//! run into the same directory). SIGKILL
//! cannot be caught: it leaves the temporary (a dot-file named `.NAME.pagepipe-cp-PID-N`), never
//! a complete-looking destination.

use crate::stale;
use pagepipe_sys as sys;
use std::ffi::{CString, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// How many temporaries may exist at once: a batch's (`batch::MAX_FILES`, 768) and the one
/// being written, with room to spare. `batch.rs` checks at compile time that they fit (naming
/// its constant here made the two files import each other).
pub const MAX_TEMPS: usize = 768 + 64;

/// The paths of the temporaries that exist (each a `CString` leaked with `into_raw`), or null.
/// Whoever swaps a non-null pointer out of its slot owns it: the signal handler (which unlinks
/// the file and never frees) or [`Temp`] (which frees it). So the handler never reads freed
/// memory.
static SLOTS: [AtomicPtr<libc::c_char>; MAX_TEMPS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_TEMPS];

/// Installs the handler that removes the current temporary on SIGINT, SIGTERM and SIGHUP, then
/// dies of the same signal (so the exit status says "interrupted", as cp's does), and ignores
/// SIGXFSZ: a write past the file size limit (`ulimit -f`) then fails with `EFBIG`, which is
/// reported and removes the temporary, where the signal's default action killed the process
/// and left the temporary behind (cp dies of the signal and leaves its partial destination).
///
/// # Errors
/// The OS's error from `sigaction(2)` or `signal(2)`.
pub fn install_signal_handlers() -> io::Result<()> {
    // SAFETY: signal(2) with SIG_IGN installs no handler code.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid value to fill in (plain C struct).
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: `sa.sa_mask` is a valid sigset_t owned by us (sigemptyset(3)).
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: `sa` is initialised; the handler only calls async-signal-safe functions
        // (unlink, signal, raise) and an atomic swap (sigaction(2)).
        if unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

extern "C" fn on_signal(sig: libc::c_int) {
    for slot in &SLOTS {
        // AcqRel: the Acquire half pairs with the Release CAS in `Temp::register`, so the
        // path's bytes are visible here; taking the pointer makes the handler its owner (see
        // SLOTS).
        let path = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !path.is_null() {
            // SAFETY: a NUL-terminated string leaked by `Temp::register` and owned by us now
            // (nobody frees it after this swap); unlink(2) is async-signal-safe.
            unsafe { libc::unlink(path) };
        }
    }
    // SAFETY: signal(2) and raise(3) are async-signal-safe; restoring the default action and
    // re-raising ends the process with this signal's status.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// A temporary file beside a destination: created exclusively, removed on drop unless
/// [`Temp::commit`] renamed it to the destination.
#[derive(Debug)]
pub struct Temp {
    path: PathBuf,
    /// The pointer this temp stored in SLOTS, to take back (and free) on commit or drop.
    registered: *mut libc::c_char,
    /// Its slot in SLOTS.
    slot: usize,
    /// A regular temporary's own descriptor, which holds its lock (`stale::hold`) for as long
    /// as the temporary exists, whatever the copy does with its other descriptors.
    lock: Option<File>,
    committed: bool,
}

impl Temp {
    /// Creates a fresh temporary file (mode `mode`, less the umask) in the directory of `dst`,
    /// named `.NAME.pagepipe-cp-PID-START-N`, and makes it the one the signal handler removes.
    /// Its descriptor, open for writing, is [`Temp::file`].
    ///
    /// # Errors
    /// The OS's error from `open(2)`, its message naming `dst` (and a missing directory).
    pub fn create(dst: &Path, mode: u32) -> io::Result<Temp> {
        let mut file = None;
        let mut temp = Temp::make(dst, "", |path| {
            file = Some(
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(path)?,
            );
            Ok(())
        })?;
        let file = file.expect("made with the temporary");
        stale::hold(&file).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create '{}': {e}", dst.display()))
        })?;
        temp.lock = Some(file);
        Ok(temp)
    }

    /// Creates a symlink to `target` at a fresh temporary name beside `dst` (see
    /// [`Temp::create`]), registered for removal like a temporary file.
    ///
    /// # Errors
    /// The OS's error from `symlink(2)`, its message naming `dst` (and a missing directory).
    pub fn symlink(dst: &Path, target: &Path) -> io::Result<Temp> {
        Temp::make(dst, "symlink ", |path| {
            std::os::unix::fs::symlink(target, path)
        })
    }

    /// Makes a fifo, device node or socket (`kind`: its `S_IFMT` bits) with the permission bits
    /// `mode` (masked by the kernel with the umask or a default ACL) and device `rdev` at a fresh
    /// temporary name beside `dst` (see [`Temp::create`]), registered for removal.
    ///
    /// # Errors
    /// The OS's error from `mknod(2)`, its message naming `dst`.
    pub fn special(dst: &Path, kind: u32, mode: u32, rdev: u64) -> io::Result<Temp> {
        use rustix::fs::{FileType, Mode, CWD};
        let kind = FileType::from_raw_mode(kind);
        Temp::make(dst, "special file ", |path| {
            rustix::fs::mknodat(CWD, path, kind, Mode::from_raw_mode(mode), rdev)
                .map_err(Into::into)
        })
    }

    /// Makes a hard link to `existing` at a fresh temporary name beside `dst` (see
    /// [`Temp::create`]), registered for removal like a temporary file.
    ///
    /// # Errors
    /// The OS's error from `link(2)`, its message naming `dst`.
    pub fn hard_link(dst: &Path, existing: &Path) -> io::Result<Temp> {
        Temp::make(dst, "hard link ", |path| std::fs::hard_link(existing, path))
    }

    /// Makes a fresh temporary beside `dst` with `create` (which must fail with
    /// `AlreadyExists` when the name is taken), registers it, and returns it.
    fn make(
        dst: &Path,
        what: &str,
        mut create: impl FnMut(&Path) -> io::Result<()>,
    ) -> io::Result<Temp> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = dst.file_name().unwrap_or(dst.as_os_str());
        stale::sweep(dir);
        loop {
            // Relaxed: a counter for unique names; the exclusive create is what guarantees them.
            let n = N.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(temp_name(name, stale::own_pid(), stale::own_start(), n));
            // Made and registered with asynchronous signals held on this thread: a SIGINT
            // between the two would find the new temporary unregistered and leave it behind;
            // held, it arrives once the temporary is registered, and the handler removes it. No
            // other thread takes it meanwhile: the only others, the dontcache flusher's, hold
            // them for good.
            let held = sys::thread::block_async_signals()?;
            let made = create(&path);
            let temp = made.as_ref().ok().map(|()| {
                let mut temp = Temp {
                    path: path.clone(),
                    registered: std::ptr::null_mut(),
                    slot: 0,
                    lock: None,
                    committed: false,
                };
                temp.register();
                temp
            });
            drop(held);
            match made {
                Ok(()) => return Ok(temp.expect("registered when made")),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    // Named as the user wrote it: the temporary's name is ours, and what fails
                    // (a missing or read-only directory) is the destination's.
                    let why = match e.kind() {
                        io::ErrorKind::NotFound => format!(
                            "cannot create {what}'{}': directory '{}' does not exist",
                            dst.display(),
                            dir.display()
                        ),
                        _ => format!("cannot create {what}'{}': {e}", dst.display()),
                    };
                    return Err(io::Error::new(e.kind(), why));
                }
            }
        }
    }

    /// The temporary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A regular temporary's own descriptor (None for a link or special file).
    pub fn file(&self) -> Option<&File> {
        self.lock.as_ref()
    }

    /// Puts the path in a free slot of SLOTS, for the signal handler. All slots taken (more
    /// temporaries than a batch makes: a bug) leaves it unregistered: a signal then leaves it
    /// behind, for the next run's clean-up (`stale.rs`).
    fn register(&mut self) {
        // A path with an interior NUL cannot be opened, so `create` never gets here with one.
        let Ok(c) = CString::new(self.path.as_os_str().as_bytes()) else {
            return;
        };
        let raw = c.into_raw();
        for (i, slot) in SLOTS.iter().enumerate() {
            // Release: pairs with the Acquire swap in `on_signal` (the handler sees the whole
            // string). Relaxed on failure: the slot is taken, nothing is read.
            let put = slot.compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::Release,
                Ordering::Relaxed,
            );
            if put.is_ok() {
                self.registered = raw;
                self.slot = i;
                return;
            }
        }
        debug_assert!(false, "more than {MAX_TEMPS} temporaries at once");
        free_if_ours(raw);
    }

    /// Takes the path back from the signal handler, if the handler has not taken it.
    fn unregister(&mut self) {
        if self.registered.is_null() {
            return;
        }
        // AcqRel: pairs with the swap in `on_signal` and the CAS in `register`; only if the
        // pointer is still in our slot do we free it (otherwise the handler owns it).
        let swapped = SLOTS[self.slot].compare_exchange(
            self.registered,
            std::ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        if swapped.is_ok() {
            free_if_ours(self.registered);
        }
        self.registered = std::ptr::null_mut();
    }

    /// Renames the temporary to `dst` (replacing what was there atomically).
    ///
    /// # Errors
    /// The OS's error from `rename(2)`, naming `dst` as the user gave it (the temporary's name
    /// is pagepipe-cp's own); the temporary is then removed on drop.
    pub fn commit(mut self, dst: &Path) -> io::Result<()> {
        std::fs::rename(&self.path, dst).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot put the copy at '{}': {e}", dst.display()),
            )
        })?;
        self.committed = true;
        self.unregister();
        Ok(())
    }
}

/// The longest file name Linux filesystems take (`NAME_MAX`), in bytes.
const NAME_MAX: usize = 255;

/// `.NAME.pagepipe-cp-PID-START-N` (START: the process's start time, see `stale.rs`), with NAME
/// cut short when the whole would pass [`NAME_MAX`]: a destination name of 240 bytes or more,
/// valid itself, must still get a temporary.
fn temp_name(name: &std::ffi::OsStr, pid: u32, start: u64, n: u64) -> OsString {
    use std::os::unix::ffi::OsStringExt;
    let suffix = format!("{}{pid}-{start}-{n}", stale::MARK);
    let room = NAME_MAX - 1 - suffix.len();
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(NAME_MAX);
    out.push(b'.');
    out.extend_from_slice(&bytes[..bytes.len().min(room)]);
    out.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(out)
}

/// Frees a pointer made by `CString::into_raw` in `Temp::register` (null: nothing).
fn free_if_ours(p: *mut libc::c_char) {
    if !p.is_null() {
        // SAFETY: `p` came from CString::into_raw in `register` and was swapped out of SLOTS
        // by the caller, who thereby owns it; the signal handler can no longer reach it.
        drop(unsafe { CString::from_raw(p) });
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.path);
        }
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_fit_in_name_max() {
        let long = OsString::from("x".repeat(NAME_MAX));
        let t = temp_name(&long, u32::MAX, u64::MAX, u64::MAX);
        assert_eq!(t.len(), NAME_MAX);
        assert!(t.to_string_lossy().ends_with(&format!("-{}", u64::MAX)));
        let short = temp_name(std::ffi::OsStr::new("a"), 7, 9, 3);
        assert_eq!(short, ".a.pagepipe-cp-7-9-3");
        assert_eq!(stale::owner_of(&short), Some((7, Some(9))));
    }
}
