//! Giving memory back under pressure: the PSI-driven [`PressureMonitor`], which calls
//! [`shrink`] by itself whenever the kernel reports memory pressure (Linux PSI,
//! `/proc/pressure/memory`).

use crate::reclaim::shrink;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Where the kernel reports memory pressure.
const PSI_MEMORY: &str = "/proc/pressure/memory";

/// How often the monitor thread wakes even without events (a safety net: stopping does not
/// depend on it, the eventfd wakes the thread at once).
const POLL_TICK: Duration = Duration::from_secs(1);

/// Watches Linux memory pressure (PSI) from a background thread and calls [`shrink`] each time
/// the trigger fires. Off unless started; stops (and joins its thread) when dropped.
///
/// ```
/// use std::time::Duration;
/// match pagepipe::PressureMonitor::start() {
///     Ok(monitor) => assert_eq!(monitor.events(), 0), // dropped here: the thread stops
///     Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {} // no PSI on this system
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct PressureMonitor {
    /// Signalled by `drop` to wake and stop the thread.
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

/// What the monitor thread did; read by [`PressureMonitor::events`] and
/// [`PressureMonitor::bytes_released`] (Relaxed: statistics only).
#[derive(Debug, Default)]
struct Counters {
    events: AtomicU64,
    bytes: AtomicU64,
}

impl PressureMonitor {
    /// Starts watching with the default trigger: 150 ms of memory stall ("some" tasks stalled)
    /// within a 2 s window.
    ///
    /// # Errors
    /// [`io::ErrorKind::Unsupported`] where PSI is missing (kernel without `CONFIG_PSI`, booted
    /// with `psi=0`, or no `/proc/pressure/memory`); the OS's error if the thread or the files
    /// cannot be created.
    ///
    /// # Examples
    ///
    /// ```
    /// let monitor = match pagepipe::PressureMonitor::start() {
    ///     Ok(m) => Some(m),
    ///     Err(e) if e.kind() == std::io::ErrorKind::Unsupported => None, // no PSI here
    ///     Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => None,
    ///     Err(e) => return Err(e),
    /// };
    /// if let Some(m) = &monitor {
    ///     println!("{} events, {} bytes released", m.events(), m.bytes_released());
    /// }
    /// drop(monitor); // stops and joins its thread
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start() -> io::Result<PressureMonitor> {
        PressureMonitor::with_trigger(Duration::from_millis(150), Duration::from_secs(2))
    }

    /// Starts watching with a trigger of `stall` within `window` ("some" tasks stalled).
    ///
    /// # Errors
    /// As [`PressureMonitor::start`]; [`io::ErrorKind::InvalidInput`] when the kernel rejects
    /// the trigger (the window must be 0.5 s to 10 s, and a multiple of 2 s for a process
    /// without `CAP_SYS_RESOURCE`; the stall must not exceed the window).
    ///
    /// # Examples
    /// See [`PressureMonitor::start`]; `with_trigger(Duration::from_millis(100), Duration::from_secs(2))`
    /// fires on 100 ms of stall within 2 s.
    pub fn with_trigger(stall: Duration, window: Duration) -> io::Result<PressureMonitor> {
        PressureMonitor::start_at(Path::new(PSI_MEMORY), stall, window)
    }

    /// Triggers seen so far (each one called [`shrink`]).
    ///
    /// # Examples
    /// See [`PressureMonitor::start`].
    pub fn events(&self) -> u64 {
        self.counters.events.load(Ordering::Relaxed)
    }

    /// Bytes the monitor's calls to [`shrink`] gave back so far.
    ///
    /// # Examples
    /// See [`PressureMonitor::start`].
    pub fn bytes_released(&self) -> u64 {
        self.counters.bytes.load(Ordering::Relaxed)
    }

    fn start_at(path: &Path, stall: Duration, window: Duration) -> io::Result<PressureMonitor> {
        if stall.is_zero() || stall > window {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("PSI trigger stall {stall:?} must be non-zero and at most the window {window:?}"),
            ));
        }
        let trigger = format!("some {} {}", stall.as_micros(), window.as_micros());
        let psi = crate::sys::psi::psi_trigger(path, &trigger)?;
        let stop = crate::sys::poll::eventfd()?;
        let stop_rx = stop.try_clone()?;
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        let thread = crate::sys::thread::spawn_helper(
            std::thread::Builder::new().name("pagepipe-psi".into()),
            move || watch(psi, stop_rx, &c),
        )?;
        Ok(PressureMonitor {
            stop,
            thread: Some(thread),
            counters,
        })
    }
}

/// The monitor thread: sleeps in poll until the trigger fires (then shrinks) or `stop` wakes it.
fn watch(psi: std::fs::File, stop: OwnedFd, counters: &Counters) {
    loop {
        match crate::sys::poll::poll_two(psi.as_fd(), stop.as_fd(), POLL_TICK) {
            Ok((_, true)) => return,
            Ok((revents, false)) if revents & (libc::POLLERR | libc::POLLNVAL) != 0 => return,
            Ok((revents, false)) if revents & libc::POLLPRI != 0 => {
                let bytes = shrink();
                counters.events.fetch_add(1, Ordering::Relaxed);
                counters.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            }
            Ok(_) => {}
            // poll on two live descriptors only fails for lack of memory: try again shortly.
            Err(_) => std::thread::sleep(POLL_TICK),
        }
    }
}

impl Drop for PressureMonitor {
    fn drop(&mut self) {
        crate::sys::poll::eventfd_signal(self.stop.as_fd());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn missing_psi_is_unsupported() {
        let err = PressureMonitor::start_at(
            Path::new("/proc/pressure/no-such-resource"),
            Duration::from_millis(150),
            Duration::from_secs(2),
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported, "{err}");
        assert!(
            err.to_string().contains("/proc/pressure/no-such-resource"),
            "{err}"
        );
    }

    #[test]
    fn bad_trigger_is_invalid_input() {
        let err = PressureMonitor::with_trigger(Duration::from_secs(3), Duration::from_secs(2))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    }

    #[test]
    fn starts_and_stops_promptly() {
        let monitor = match PressureMonitor::start() {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::Unsupported => return, // no PSI here
            Err(e) => panic!("{e}"),
        };
        let t = std::time::Instant::now();
        drop(monitor);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "stopping hung: {:?}",
            t.elapsed()
        );
    }
}
