//! Futex waits and wakes, private and shared (`futex(2)`).

use std::io;

/// Sleeps while `*word == expected`, at most `timeout` (`futex(2)`, `FUTEX_WAIT_PRIVATE`).
/// Returns false when the timeout expired; spurious returns are possible.
pub fn wait(
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    timeout: Option<std::time::Duration>,
) -> bool {
    wait_op(
        word.as_ptr(),
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
        expected,
        timeout,
    ) != WaitEnd::TimedOut
}

/// Wakes every thread sleeping on `word` (`futex(2)`, `FUTEX_WAKE_PRIVATE`).
pub fn wake_all(word: &std::sync::atomic::AtomicU32) {
    wake_op(
        word.as_ptr(),
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
        i32::MAX,
    );
}

/// Sleeps while `*word == expected` for another process too (`futex(2)`, shared `FUTEX_WAIT`:
/// keyed by the memory's inode and offset, so processes may map the word at different
/// addresses). Returns false when `timeout` expired; spurious returns are possible.
pub fn wait_shared(word: *const u32, expected: u32, timeout: Option<std::time::Duration>) -> bool {
    wait_op(word, libc::FUTEX_WAIT, expected, timeout) != WaitEnd::TimedOut
}

/// How a futex wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// The call returned 0: a `FUTEX_WAKE` picked this sleeper (a sleeper woken by a wake of
    /// one knows the wake-up was spent on it).
    Woken,
    /// The timeout expired.
    TimedOut,
    /// It did not sleep, or stopped for another reason: the word no longer held `expected`
    /// (`EAGAIN`), a signal (`EINTR`), or an error.
    Other,
}

/// As [`wait_shared`], telling how the wait ended.
pub fn wait_shared_end(
    word: *const u32,
    expected: u32,
    timeout: Option<std::time::Duration>,
) -> WaitEnd {
    wait_op(word, libc::FUTEX_WAIT, expected, timeout)
}

/// Wakes every thread of any process sleeping on `word` (`futex(2)`, shared `FUTEX_WAKE`).
pub fn wake_shared(word: *const u32) {
    wake_op(word, libc::FUTEX_WAKE, i32::MAX);
}

/// Wakes one thread of any process sleeping on `word` (shared `FUTEX_WAKE` of 1).
pub fn wake_one_shared(word: *const u32) {
    wake_op(word, libc::FUTEX_WAKE, 1);
}

/// `FUTEX_WAIT` (private or shared, per `op`) with an optional relative timeout.
fn wait_op(
    word: *const u32,
    op: libc::c_int,
    expected: u32,
    timeout: Option<std::time::Duration>,
) -> WaitEnd {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: the kernel only reads the u32 at `word` (callers pass a live, aligned word: an
    // atomic they borrow or one of a mapping they hold; a bad address is EFAULT, not undefined
    // behaviour) and `ts_ptr` is null or a timespec that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word, op, expected, ts_ptr) };
    if rc == 0 {
        WaitEnd::Woken
    } else if io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        WaitEnd::TimedOut
    } else {
        WaitEnd::Other
    }
}

/// `FUTEX_WAKE` (private or shared, per `op`) of up to `n` sleepers.
fn wake_op(word: *const u32, op: libc::c_int, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; it reads no memory we own.
    unsafe {
        libc::syscall(libc::SYS_futex, word, op, n);
    }
}
