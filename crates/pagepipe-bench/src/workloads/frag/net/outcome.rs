//! What a `udp` or `tcp` receiver saw, and the thread CPU time it is measured in.

use std::time::Duration;

/// What the receiver saw.
pub(super) struct Outcome {
    pub(super) delivered: u64,
    pub(super) bytes: u64,
    /// First to last datagram (udp), or first read to end of stream (tcp).
    pub(super) elapsed: Duration,
    pub(super) rx_cpu: ThreadCpu,
    pub(super) worker_cpu_s: f64,
    pub(super) rcvbuf: usize,
}

/// User and system CPU of the calling thread (`getrusage(RUSAGE_THREAD)`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ThreadCpu {
    user_s: f64,
    sys_s: f64,
}

impl ThreadCpu {
    pub(super) fn now() -> ThreadCpu {
        // SAFETY: rusage is plain data; zeroed is a valid value for getrusage to overwrite.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        ThreadCpu {
            user_s: secs(ru.ru_utime),
            sys_s: secs(ru.ru_stime),
        }
    }

    pub(super) fn since(self, earlier: ThreadCpu) -> ThreadCpu {
        ThreadCpu {
            user_s: self.user_s - earlier.user_s,
            sys_s: self.sys_s - earlier.sys_s,
        }
    }

    pub(super) fn total(self) -> f64 {
        self.user_s + self.sys_s
    }
}
