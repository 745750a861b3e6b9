//! Every `io::Error` the pipes make, in one place: the kinds and errnos a user of Linux pipes
//! expects, with messages that say what was wrong and with which value.

use std::io;

/// `InvalidData`: a value loaded from the shared region (or a received end) failed validation.
/// A peer corrupted the region, or the descriptor is not a pagepipe's.
#[cold]
pub(crate) fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// `InvalidInput`: the caller asked for something pipes cannot do (a bad size or count).
#[cold]
pub(crate) fn invalid_input(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// `BrokenPipe` (`EPIPE`): a write with no reader left in any process.
pub(crate) fn broken_pipe() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "pipe has no reader left")
}

/// `WouldBlock` (`EAGAIN`): a non-blocking call that could do nothing now.
pub(crate) fn would_block() -> io::Error {
    io::Error::from(io::ErrorKind::WouldBlock)
}

/// `TimedOut`: a blocking call reached the end's timeout.
pub(crate) fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "pipe operation timed out")
}

/// `EBUSY`, Linux's answer to resizing a notification pipe.
pub(crate) fn ebusy() -> io::Error {
    io::Error::from_raw_os_error(libc::EBUSY)
}

/// A notification read whose buffer (`have` bytes) cannot hold the next record (`need` bytes).
/// Linux answers `ENOBUFS`, which `std` files under no [`io::ErrorKind`] a caller can match, so
/// this is `InvalidInput` (the caller's buffer is the problem), naming both sizes and the errno
/// Linux would give.
#[cold]
pub(crate) fn buffer_too_small(have: usize, need: usize) -> io::Error {
    invalid_input(format!(
        "a buffer of {have} bytes cannot hold the next notification record of {need} bytes \
         (Linux: ENOBUFS); a buffer of 127 bytes holds any record"
    ))
}

/// Whether the process whose key (`key`) a side lock names still holds the pipe could not be
/// told (`cause`: `F_GETLK` failed): the lock is not taken over (a live process may hold it)
/// and the caller gets this error, of the cause's kind.
#[cold]
pub(crate) fn unknown_holder(key: u32, cause: io::Error) -> io::Error {
    io::Error::new(
        cause.kind(),
        format!(
            "cannot tell whether process key {key}, which holds a side of the pipe, still \
             holds it: {cause}"
        ),
    )
}

/// `TimedOut`: a side lock that a spinning taker (a notification poster) found held by the
/// live thread `tid` for `waited`, longer than a holder ever keeps it; a word a peer wrote
/// naming a live thread looks the same.
#[cold]
pub(crate) fn held_too_long(tid: u64, waited: std::time::Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "a side of the pipe has been held by thread {tid} for {waited:?}; not waiting longer"
        ),
    )
}

/// `TimedOut`: a poster found the ring full with its last record released, and the reader did
/// not move tail past it for `waited` (a reader preempted mid-release, or a peer's flag).
pub(crate) fn release_stuck(record: u64, tail: u64, waited: std::time::Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("record {record} released but tail stuck at {tail} for {waited:?}"),
    )
}

/// A call that needs `/proc` (to open a pipe's memory file again: a key of this process on the
/// pipe, or a mapping of a ring larger than 64 KiB once the pipe has left the process) found it
/// missing (`cause`: `ENOENT`): said as such, with what needed it (`what`). Other causes (a full
/// descriptor table) are returned as they are.
pub(crate) fn needs_proc(cause: io::Error, what: &str) -> io::Error {
    if cause.kind() != io::ErrorKind::NotFound {
        return cause;
    }
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{what} needs /proc, which is not mounted (the pipe's memory file is opened again \
             through /proc/self/fd): {cause}"
        ),
    )
}
