//! Workers of a benchmark on threads or in forked processes, with one code path for both.
//!
//! [`spawn`] runs a closure on a thread, or in a child forked for it; the child's result comes
//! back through a shared anonymous mapping ([`Shm`]), never through the transport being
//! measured. As a child of `pipe(2)` closes the descriptors it does not use, a forked child must
//! drop every end it does not use: `spawn` runs `close_in_child` first in the child (and never in
//! the parent), and what the worker closure captured by move is dropped in the parent when
//! `spawn` returns. Flags that workers poll ([`Flags`]) live in shared memory too, so the same
//! workload code runs on threads and in processes.

use crate::common::{Histogram, Usage};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the ends of a transport are used: threads of this process, or forked processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Between {
    /// Threads of the benchmark's process.
    Threads,
    /// The benchmark's process and children it forks.
    Processes,
}

impl Between {
    /// `threads` or `processes`: the JSON `config.between`.
    pub fn name(self) -> &'static str {
        match self {
            Between::Threads => "threads",
            Between::Processes => "processes",
        }
    }

    /// A case title for this placement: `TITLE, threads` or `TITLE, processes`.
    pub fn title(self, title: &str) -> String {
        format!("{title}, {}", self.name())
    }
}

/// A fresh zeroed `MAP_SHARED | MAP_ANONYMOUS` mapping of `bytes` bytes (page-aligned; shared
/// with every child forked while it exists). The caller unmaps it.
///
/// # Errors
/// `mmap`'s error.
pub fn map_shared(bytes: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(NonNull::new(p.cast()).expect("mmap does not return null on success"))
}

/// A zeroed `MAP_SHARED | MAP_ANONYMOUS` mapping of 64-bit words: shared with every child
/// forked while it exists (and with every thread).
pub struct Shm {
    words: NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: the mapping holds only atomics, and lives until drop; sharing it is sharing atomics.
unsafe impl Send for Shm {}
// SAFETY: as above: every access goes through `&AtomicU64`.
unsafe impl Sync for Shm {}

impl Shm {
    /// A mapping of `len` zeroed words (`mmap(2)`; pages are allocated on first touch).
    ///
    /// # Errors
    /// `mmap`'s error.
    pub fn new(len: usize) -> io::Result<Shm> {
        Ok(Shm {
            words: map_shared(len.max(1) * 8)?.cast(),
            len,
        })
    }

    /// The words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: `len` zero-initialised, 8-aligned words mapped until drop; AtomicU64 has the
        // layout of u64 and every access is atomic.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr(), self.len) }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no reference outlives `self`.
        unsafe { libc::munmap(self.words.as_ptr().cast(), self.len.max(1) * 8) };
    }
}

/// The measured window and the stop signal, polled by workers on threads or in processes.
pub struct Flags(Shm);

const MEASURING: usize = 0;
const STOP: usize = 1;

impl Flags {
    /// Not measuring, not stopped.
    ///
    /// # Errors
    /// The mapping cannot be made.
    pub fn new() -> io::Result<Arc<Flags>> {
        Ok(Arc::new(Flags(Shm::new(2)?)))
    }

    /// Whether the measured window is open.
    pub fn measuring(&self) -> bool {
        self.0.words()[MEASURING].load(Ordering::Relaxed) != 0
    }

    /// Opens or closes the measured window.
    pub fn set_measuring(&self, on: bool) {
        self.0.words()[MEASURING].store(u64::from(on), Ordering::Relaxed);
    }

    /// Whether workers should stop.
    pub fn stopped(&self) -> bool {
        self.0.words()[STOP].load(Ordering::Relaxed) != 0
    }

    /// Tells workers to stop.
    pub fn stop(&self) {
        self.0.words()[STOP].store(1, Ordering::Relaxed);
    }
}

/// A worker's CPU and faults over the measured window, as it saw the window open and close.
#[derive(Default)]
pub struct Meter {
    start: Option<Usage>,
    spent: Option<Usage>,
}

impl Meter {
    /// Call after every operation: notes the usage when the window opens and when it closes.
    pub fn tick(&mut self, flags: &Flags) {
        if self.spent.is_some() {
            return;
        }
        match (self.start, flags.measuring()) {
            (None, true) => self.start = Some(Usage::now()),
            (Some(u0), false) => self.spent = Some(Usage::now().since(u0)),
            _ => {}
        }
    }

    /// The usage over the window (up to now if it did not see it close).
    pub fn spent(&self) -> Usage {
        match (self.spent, self.start) {
            (Some(u), _) => u,
            (None, Some(u0)) => Usage::now().since(u0),
            (None, None) => Usage::default(),
        }
    }
}

/// A writer's loop: runs `op` until told to stop or the reader hangs up; returns the writer's
/// usage over the measured window.
pub fn until_hangup(flags: &Flags, mut op: impl FnMut() -> io::Result<()>) -> io::Result<Usage> {
    let mut meter = Meter::default();
    while !flags.stopped() {
        if let Err(e) = op() {
            return if reader_hung_up(&e) {
                Ok(meter.spent())
            } else {
                Err(e)
            };
        }
        meter.tick(flags);
    }
    Ok(meter.spent())
}

/// The reader closed its end: EPIPE, or ECONNRESET from an AF_UNIX socket closed with unread
/// data in its queue (`unix_release_sock`).
pub fn reader_hung_up(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
}

/// A value a forked child can hand back as 64-bit words.
pub trait Wire: Sized {
    /// Appends this value.
    fn put(&self, out: &mut Vec<u64>);
    /// Takes a value off the front of `words`.
    ///
    /// # Errors
    /// `InvalidData` when `words` ends early.
    fn take(words: &mut &[u64]) -> io::Result<Self>;
}

fn next(words: &mut &[u64]) -> io::Result<u64> {
    let (&first, rest) = words.split_first().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "a child's result ended early")
    })?;
    *words = rest;
    Ok(first)
}

impl Wire for () {
    fn put(&self, _: &mut Vec<u64>) {}
    fn take(_: &mut &[u64]) -> io::Result<()> {
        Ok(())
    }
}

impl Wire for u64 {
    fn put(&self, out: &mut Vec<u64>) {
        out.push(*self);
    }
    fn take(words: &mut &[u64]) -> io::Result<u64> {
        next(words)
    }
}

impl Wire for f64 {
    fn put(&self, out: &mut Vec<u64>) {
        out.push(self.to_bits());
    }
    fn take(words: &mut &[u64]) -> io::Result<f64> {
        next(words).map(f64::from_bits)
    }
}

impl<T: Wire> Wire for Vec<T> {
    fn put(&self, out: &mut Vec<u64>) {
        out.push(self.len() as u64);
        self.iter().for_each(|x| x.put(out));
    }
    fn take(words: &mut &[u64]) -> io::Result<Vec<T>> {
        let n = next(words)?;
        (0..n).map(|_| T::take(words)).collect()
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    fn put(&self, out: &mut Vec<u64>) {
        self.0.put(out);
        self.1.put(out);
    }
    fn take(words: &mut &[u64]) -> io::Result<(A, B)> {
        Ok((A::take(words)?, B::take(words)?))
    }
}

impl Wire for Usage {
    fn put(&self, out: &mut Vec<u64>) {
        self.minor_faults.put(out);
        self.cpu_s.put(out);
    }
    fn take(words: &mut &[u64]) -> io::Result<Usage> {
        Ok(Usage {
            minor_faults: next(words)?,
            cpu_s: f64::take(words)?,
        })
    }
}

impl Wire for Histogram {
    fn put(&self, out: &mut Vec<u64>) {
        self.counts().put(out);
    }
    fn take(words: &mut &[u64]) -> io::Result<Histogram> {
        let mut h = Histogram::default();
        for (ns, count) in Vec::<(u64, u64)>::take(words)? {
            h.record_n(ns, count);
        }
        Ok(h)
    }
}

/// Words a child's result may take (its mapping is touched only as far as it is used).
const RESULT_WORDS: usize = 1 << 20;
/// Result slot states (0: the child stored nothing).
const OK: u64 = 1;
const FAILED: u64 = 2;

/// How long a run may take beyond its duration before a child is declared hung.
pub const CHILD_GRACE: Duration = Duration::from_secs(60);

/// A worker: a thread, or a forked child and the mapping it leaves its result in.
pub enum Worker<T> {
    /// On a thread.
    Thread(JoinHandle<io::Result<T>>),
    /// In a child process.
    Process {
        /// The child, killed and reaped if dropped unreaped (an error path must not leave
        /// children holding ends).
        pid: Pid,
        /// Its result: state, length, words (or an error message's bytes).
        result: Shm,
    },
}

/// Runs `f` on a thread or in a forked child. In a child, `close_in_child` runs first (drop
/// there every end the child does not use, as a child closes unused pipe descriptors) and the
/// child exits with `_exit` after storing `f`'s result, so no destructor of the parent's
/// state runs in it. Fork only while no other thread holds ends of other pipes: a child
/// inherits every end alive at the fork.
///
/// # Errors
/// The thread or the child cannot be started.
pub fn spawn<T: Wire + Send + 'static>(
    between: Between,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
    close_in_child: impl FnOnce(),
) -> io::Result<Worker<T>> {
    if between == Between::Threads {
        return Ok(Worker::Thread(std::thread::Builder::new().spawn(f)?));
    }
    let result = Shm::new(RESULT_WORDS)?;
    // SAFETY: the child runs only benchmark code (pagepipe's fork handlers make it usable in a
    // child) on the forking thread's copy of memory, and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        close_in_child();
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err(io::Error::other("panicked")));
        let code = store(&result, out);
        // SAFETY: ends the child at once, running no destructor of the parent's state.
        unsafe { libc::_exit(code) }
    }
    Ok(Worker::Process {
        pid: Pid(Some(pid)),
        result,
    })
}

/// A forked child not yet reaped (`None` once reaped).
pub struct Pid(Option<libc::pid_t>);

impl Drop for Pid {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = wait_timeout(pid, Duration::MAX);
        }
    }
}

/// Stores a child's result; returns its exit code.
fn store<T: Wire>(slot: &Shm, out: io::Result<T>) -> i32 {
    let words = slot.words();
    let (state, body) = match out {
        Ok(v) => {
            let mut body = Vec::new();
            v.put(&mut body);
            (OK, body)
        }
        Err(e) => (
            FAILED,
            e.to_string()
                .into_bytes()
                .into_iter()
                .map(u64::from)
                .collect(),
        ),
    };
    let (state, body) = if body.len() + 2 > words.len() {
        let msg = format!("result of {} words does not fit", body.len());
        (
            FAILED,
            msg.into_bytes().into_iter().map(u64::from).collect(),
        )
    } else {
        (state, body)
    };
    words[1].store(body.len() as u64, Ordering::Relaxed);
    for (w, v) in words[2..].iter().zip(&body) {
        w.store(*v, Ordering::Relaxed);
    }
    // Release: pairs with the Acquire load in `result_of` (waitpid orders it too).
    words[0].store(state, Ordering::Release);
    i32::from(state != OK)
}

impl<T: Wire> Worker<T> {
    /// The child's pid (none for a thread).
    pub fn pid(&self) -> Option<libc::pid_t> {
        match self {
            Worker::Thread(_) => None,
            Worker::Process { pid, .. } => pid.0,
        }
    }

    /// Sends SIGKILL to a child (nothing for a thread).
    pub fn kill(&self) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on our own child, not yet reaped (reaping consumes the worker).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Waits for the worker and returns its result. A child still running after `timeout` is
    /// killed (`TimedOut`); a thread is waited for without limit.
    ///
    /// # Errors
    /// The worker's error (a child's as its message); `TimedOut`; a child that died without a
    /// result (`Other`, with how it ended).
    pub fn join(self, timeout: Duration) -> io::Result<T> {
        match self {
            Worker::Thread(h) => h.join().expect("worker thread panicked"),
            Worker::Process { mut pid, result } => result_of(&result, reap(&mut pid, timeout)?),
        }
    }

    /// Reaps a child this process killed with [`Worker::kill`]: `Ok` if SIGKILL ended it (or
    /// it finished well before), like [`Worker::join`] otherwise.
    ///
    /// # Errors
    /// As [`Worker::join`]: the error the child failed with before the kill, `TimedOut`.
    pub fn reap_killed(self, timeout: Duration) -> io::Result<()> {
        match self {
            Worker::Thread(h) => h.join().expect("worker thread panicked").map(drop),
            Worker::Process { mut pid, result } => match reap(&mut pid, timeout)? {
                s if libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == libc::SIGKILL => Ok(()),
                s => result_of::<T>(&result, s).map(drop),
            },
        }
    }
}

/// Reaps the child, killing it if it still runs after `timeout` (`TimedOut`).
fn reap(child: &mut Pid, timeout: Duration) -> io::Result<i32> {
    let pid = child.0.expect("a worker is reaped once");
    if let Some(status) = wait_timeout(pid, timeout)? {
        child.0 = None;
        return Ok(status);
    }
    drop(std::mem::replace(child, Pid(None))); // kills and reaps
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("child {pid} still running after {timeout:?}: killed"),
    ))
}

/// The result a reaped child left.
fn result_of<T: Wire>(slot: &Shm, status: i32) -> io::Result<T> {
    let words = slot.words();
    // Acquire: pairs with the Release store in `store`.
    let state = words[0].load(Ordering::Acquire);
    let len = (words[1].load(Ordering::Relaxed) as usize).min(words.len() - 2);
    let body: Vec<u64> = words[2..2 + len]
        .iter()
        .map(|w| w.load(Ordering::Relaxed))
        .collect();
    match state {
        OK => T::take(&mut body.as_slice()),
        FAILED => {
            let msg: String = body.iter().map(|&b| b as u8 as char).collect();
            Err(io::Error::other(format!("child: {msg}")))
        }
        _ => Err(io::Error::other(format!(
            "child died without a result ({})",
            describe(status)
        ))),
    }
}

/// `exit N` or `signal N`.
fn describe(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit {}", libc::WEXITSTATUS(status))
    } else {
        format!("signal {}", libc::WTERMSIG(status))
    }
}

/// Reaps `pid` if it exits within `timeout` and returns its wait status; `None` if it is still
/// running. Polls every millisecond (a child's own clock, not this, times what is measured).
///
/// # Errors
/// `waitpid`'s error.
pub fn wait_timeout(pid: libc::pid_t, timeout: Duration) -> io::Result<Option<i32>> {
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            return Ok(Some(status));
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `CLOCK_MONOTONIC` in ns: one clock for every process, so children's timestamps compare
/// with the parent's.
pub fn mono_ns() -> u64 {
    // SAFETY: timespec is plain data; clock_gettime overwrites it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_socket_closed_under_a_blocked_writer_counts_as_a_hang_up() {
        // The writer fills the socket and blocks; closing the reader with unread data queued
        // wakes it with EPIPE here, and sometimes with ECONNRESET (the close sets the writer's
        // sk_err; seen once in a quick suite run, which then died): both are a hang-up.
        let (mut a, b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || loop {
            if let Err(e) = a.write_all(&[0u8; 65536]) {
                return e;
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(b);
        let e = writer.join().unwrap();
        assert!(reader_hung_up(&e), "{e}");
        assert!(reader_hung_up(&io::Error::from(
            io::ErrorKind::ConnectionReset
        )));
        assert!(!reader_hung_up(&io::Error::from(
            io::ErrorKind::InvalidInput
        )));
    }

    #[test]
    fn results_come_back_from_threads_and_processes() {
        let _serial = serial();
        for between in [Between::Threads, Between::Processes] {
            let mut h = Histogram::default();
            h.record(Duration::from_micros(3));
            h.record(Duration::from_micros(3));
            let w = spawn(between, move || Ok((h, vec![1.5f64, 2.0])), || {}).unwrap();
            let (h, v) = w.join(Duration::from_secs(30)).unwrap();
            assert_eq!(h.count(), 2);
            assert_eq!(v, [1.5, 2.0]);
            let e = spawn(
                between,
                || -> io::Result<()> { Err(io::Error::other("nope")) },
                || {},
            )
            .unwrap()
            .join(Duration::from_secs(30))
            .unwrap_err();
            assert!(e.to_string().contains("nope"), "{e}");
        }
    }

    /// Tests that fork run one at a time, so that no child holds another test's ends for long.
    pub fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sleeper() -> Worker<()> {
        let nap = || {
            std::thread::sleep(Duration::from_secs(60));
            Ok(())
        };
        spawn(Between::Processes, nap, || {}).unwrap()
    }

    #[test]
    fn a_hung_child_is_killed_and_a_killed_one_reported() {
        let _serial = serial();
        let e = sleeper().join(Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let w = sleeper();
        w.kill();
        let e = w.join(Duration::from_secs(30)).unwrap_err();
        assert!(e.to_string().contains("signal 9"), "{e}");
        let w = sleeper();
        w.kill();
        w.reap_killed(Duration::from_secs(30)).unwrap();
    }
}
