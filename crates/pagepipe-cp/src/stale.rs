//! Temporaries a killed copy left behind, found and removed by the next run that writes into
//! the same directory.
//!
//! A temporary is named `.NAME.pagepipe-cp-PID-START-N`: the pid of the process that made it
//! and that process's start time (`/proc/PID/stat`, field 22, clock ticks since boot), so that
//! a pid reused by another process is not taken for the owner. A regular temporary is also
//! locked by its owner for as long as it exists (an OFD lock on its first byte, held by the
//! temporary's own descriptor: the kernel drops it when the owner dies, even of SIGKILL). A
//! temporary is removed only when both say its owner is gone: no process has its pid with its
//! start time, and no one holds its lock. A SIGKILLed copy's temporary, with whatever it had
//! reserved on disk (`fallocate`), thus lasts until the next copy into its directory.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// What every temporary's name holds after its destination's name.
pub const MARK: &str = ".pagepipe-cp-";

/// The start time of process `pid` in clock ticks since boot (`proc(5)`, `/proc/PID/stat`
/// field 22), or None when there is no such process (or no /proc).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces and parentheses: the
    // fields that follow start after the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // rest: " S PPID ...": field 3 is its first word, so field 22 is its 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This process's pid, looked up once (pagepipe-cp never forks).
pub fn own_pid() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// This process's start time (see [`start_time`]); 0 without /proc.
pub fn own_start() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(|| start_time(own_pid()).unwrap_or(0))
}

/// The owner a temporary's name gives: its pid, and its start time (None in the names of
/// versions before it was written there: `PID-N`).
pub fn owner_of(name: &OsStr) -> Option<(u32, Option<u64>)> {
    let name = name.as_bytes();
    if name.first() != Some(&b'.') {
        return None;
    }
    let at = name
        .windows(MARK.len())
        .rposition(|w| w == MARK.as_bytes())?;
    let tail = std::str::from_utf8(&name[at + MARK.len()..]).ok()?;
    let numbers: Vec<u64> = tail
        .split('-')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match numbers[..] {
        [pid, start, _n] => Some((u32::try_from(pid).ok()?, Some(start))),
        [pid, _n] => Some((u32::try_from(pid).ok()?, None)),
        _ => None,
    }
}

/// Whether the process a temporary's name gives is still running: the same pid with the same
/// start time (without one in the name: any process with the pid).
fn owner_alive(pid: u32, start: Option<u64>) -> bool {
    if pid == own_pid() {
        return true; // ours: the run that made it is this one
    }
    match start {
        Some(start) => start_time(pid) == Some(start),
        None => {
            // SAFETY: kill(2) with signal 0 sends nothing; it only asks whether the pid exists.
            let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
            rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        }
    }
}

/// Whether a live process holds the lock of the regular temporary `path` (see the module
/// docs): true also when it cannot be told (the file cannot be opened), so that a doubt keeps
/// the file.
fn locked(path: &Path) -> bool {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    match opened {
        Ok(f) => pagepipe_sys::fd::byte_locked(f.as_fd(), 0).unwrap_or(true),
        Err(_) => true,
    }
}

/// Takes the lock that tells others a regular temporary's owner is alive (see the module
/// docs), on `file`'s open file description (it must be open for writing).
///
/// # Errors
/// The OS's error from `fcntl(2)`; `ResourceBusy` if someone else holds it (a clean-up that
/// took the file for stale in the instant between its creation and this call).
pub fn hold(file: &File) -> io::Result<()> {
    if pagepipe_sys::fd::lock_byte(file.as_fd(), 0)? {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            "a new temporary was locked by another process",
        ))
    }
}

/// Directories swept (or made) by this run: each is swept once.
static SWEPT: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Notes that `dir` needs no sweep (this run made it: nothing stale is in it).
pub fn mark_clean(dir: &Path) {
    SWEPT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(dir.to_path_buf());
}

/// Removes, once per run and directory, the temporaries in `dir` whose owner is gone (see the
/// module docs), and returns their paths. Only this user's (root: anyone's), never a directory.
/// What cannot be read or removed is left, silently: it is not the copy's business.
pub fn sweep(dir: &Path) -> Vec<PathBuf> {
    if !SWEPT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(dir.to_path_buf())
    {
        return Vec::new();
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    // SAFETY: geteuid(2) cannot fail.
    let euid = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some((pid, start)) = owner_of(&name) else {
            continue;
        };
        if owner_alive(pid, start) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() || (euid != 0 && meta.uid() != euid) {
            continue;
        }
        if meta.is_file() && locked(&path) {
            continue;
        }
        if fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_from_names() {
        let own = owner_of(OsStr::new(".a.b.pagepipe-cp-123-456-7"));
        assert_eq!(own, Some((123, Some(456))));
        assert_eq!(
            owner_of(OsStr::new(".a.pagepipe-cp-12-3")),
            Some((12, None))
        );
        assert_eq!(owner_of(OsStr::new("a.pagepipe-cp-12-3")), None);
        assert_eq!(owner_of(OsStr::new(".a.pagepipe-cp-x-3")), None);
        assert_eq!(owner_of(OsStr::new(".a.pagepipe-cp-1-2-3-4")), None);
    }

    #[test]
    fn this_process_is_alive_and_its_start_time_is_read() {
        let start = own_start();
        assert!(start > 0);
        assert_eq!(start_time(std::process::id()), Some(start));
        assert!(!owner_alive(u32::MAX - 1, Some(start)));
    }
}
