//! Threads and processes: ids, start times from procfs, fork handlers, signal masks
//! (`gettid(2)`, `proc(5)`, `pthread_atfork(3)`, `pthread_sigmask(3)`).

use std::io;

/// The calling thread's id (`gettid(2)`).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Milliseconds on `CLOCK_MONOTONIC` (`clock_gettime(2)`; through the vDSO, no system call).
pub fn monotonic_ms() -> u64 {
    // SAFETY: an all-zero timespec is a valid value; clock_gettime writes one into it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The CPU this thread ran on a moment ago (`sched_getcpu(3)`: glibc reads it from the rseq
/// area or the vDSO, no system call); `None` if it cannot be told.
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// CPUs online (`sysconf(_SC_NPROCESSORS_ONLN)`, see `sysconf(3)`), at least 1.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf(3) has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// What `/proc/<tid>/stat` says of a thread (`proc(5)`): `Ok(Some(start))` with the low 32
/// bits of its start time in clock ticks since boot; `Ok(None)` if no such thread exists (or it
/// is a zombie or dead); `Err` when it cannot be told: procfs missing, out of descriptors or
/// memory, an unreadable entry. Callers must not read an error as "dead": the thread may be
/// alive and holding something.
///
/// A missing entry is told apart from a missing procfs by `/proc/self/stat`, checked with
/// `stat(2)` (which needs no descriptor).
///
/// # Errors
/// The OS's error from reading `/proc/<tid>/stat` other than a thread that does not exist (which is
/// `Ok(None)`).
pub fn thread_start_time(tid: u32) -> io::Result<Option<u32>> {
    // Bytes, not a String: the command name (field 2) is whatever the thread set, not
    // necessarily UTF-8 (std cuts thread names to 15 bytes, even inside a character).
    let stat = match std::fs::read(format!("/proc/{tid}/stat")) {
        Ok(stat) => stat,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            std::fs::metadata("/proc/self/stat").map_err(|e| {
                io::Error::new(e.kind(), format!("procfs is not readable here: {e}"))
            })?;
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let malformed = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "/proc/{tid}/stat does not parse: {:?}",
                String::from_utf8_lossy(&stat)
            ),
        )
    };
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    let close = stat
        .iter()
        .rposition(|&b| b == b')')
        .ok_or_else(malformed)?;
    let rest = std::str::from_utf8(&stat[close + 1..]).map_err(|_| malformed())?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next().ok_or_else(malformed)?; // field 3
    if matches!(state, "Z" | "X" | "x") {
        return Ok(None);
    }
    // Field 22 (starttime) is the 20th after the state.
    let start: u64 = fields
        .nth(18)
        .and_then(|f| f.parse().ok())
        .ok_or_else(malformed)?;
    Ok(Some(start as u32))
}

/// Registers fork handlers around `fork(2)` (`pthread_atfork(3)`).
pub fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registers plain function pointers.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// The calling thread's signal mask as it was before [`block_async_signals`], restored on drop.
#[must_use = "the signals stay blocked only while the guard lives"]
pub struct SignalsBlocked {
    old: libc::sigset_t,
}

/// Blocks every signal but the synchronous ones (`SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL`,
/// `SIGTRAP`, `SIGSYS`) on the calling thread until the guard is dropped. Threads spawned
/// meanwhile inherit the mask: a library's helper threads started so never run the
/// application's handlers for process-directed signals (`SIGINT`, `SIGTERM`, ...), which the
/// application's own threads then receive.
///
/// # Errors
/// The OS's error from `pthread_sigmask(3)` (none is expected with valid arguments).
pub fn block_async_signals() -> io::Result<SignalsBlocked> {
    // SAFETY: sigset_t is plain data, for which all zeroes is a valid value; sigfillset and
    // sigdelset only write the set we pass.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the set is a local.
    unsafe {
        libc::sigfillset(&mut set);
        for sync in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut set, sync);
        }
    }
    // SAFETY: pthread_sigmask reads `set` and writes `old`, both valid locals.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(SignalsBlocked { old })
}

/// Starts a library helper thread (`builder`'s name and stack) with asynchronous signals
/// blocked, as [`block_async_signals`] blocks them, from its first instruction: the mask is set
/// on the calling thread around `spawn` (a new thread inherits its creator's mask) and restored
/// at once. Every thread a library starts on an application's behalf should start this way;
/// one that does not takes the application's process-directed signals (a `SIGTERM` the
/// application blocks and waits for with `sigtimedwait(2)` kills the process instead).
///
/// # Errors
/// The OS's error from `pthread_sigmask(3)` or from starting the thread.
pub fn spawn_helper<F, T>(
    builder: std::thread::Builder,
    f: F,
) -> io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let blocked = block_async_signals()?;
    let spawned = builder.spawn(f);
    drop(blocked);
    spawned
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `block_async_signals`, a valid set.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_of_live_and_missing_threads() {
        assert!(thread_start_time(gettid()).unwrap().is_some());
        // Thread ids never reach 2^31 (PID_MAX_LIMIT is 2^22).
        assert_eq!(thread_start_time(1 << 31).unwrap(), None);
    }

    #[test]
    fn a_thread_name_cut_inside_a_character_still_parses() {
        // 18 bytes of two-byte characters: the kernel keeps 15, ending inside one.
        let start = std::thread::Builder::new()
            .name("ααααααααα".into())
            .spawn(|| thread_start_time(gettid()))
            .unwrap()
            .join()
            .unwrap();
        assert!(start.unwrap().is_some());
    }

    /// Whether `sig` is blocked on the calling thread.
    fn blocked(sig: libc::c_int) -> bool {
        // SAFETY: sigset_t is plain data; pthread_sigmask with a null set only reads the mask
        // into `now`, a valid local; sigismember reads it.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            libc::sigismember(&now, sig) == 1
        }
    }

    #[test]
    fn threads_spawned_while_blocked_keep_async_signals_blocked_and_the_caller_gets_its_mask_back()
    {
        let before = blocked(libc::SIGINT);
        let guard = block_async_signals().unwrap();
        assert!(blocked(libc::SIGINT) && blocked(libc::SIGTERM));
        assert!(!blocked(libc::SIGSEGV));
        let child = std::thread::spawn(|| (blocked(libc::SIGINT), blocked(libc::SIGBUS)));
        drop(guard);
        assert_eq!(child.join().unwrap(), (true, false));
        assert_eq!(blocked(libc::SIGINT), before);
    }
}
