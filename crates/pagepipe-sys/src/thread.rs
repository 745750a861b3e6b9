//! Threads and processes: ids, start times from procfs, fork handlers (`gettid(2)`, `proc(5)`, `pthread_atfork(3)`).

/// The calling thread's id (`gettid(2)`).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// What `/proc/<tid>/stat` says of a thread: `None` if it does not exist (or is a zombie or
/// dead), else the low 32 bits of its start time in clock ticks since boot.
pub fn thread_start_time(tid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?; // field 3
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    // Field 22 (starttime) is the 20th after the state.
    let start: u64 = fields.nth(18)?.parse().ok()?;
    Some(start as u32)
}

/// Registers fork handlers around `fork(2)` (`pthread_atfork(3)`).
pub fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registers plain function pointers.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}
