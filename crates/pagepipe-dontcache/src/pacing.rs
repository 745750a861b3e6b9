//! The arithmetic of a fallback writer's pacing (`Writer::pace`): pauses spun or slept and
//! counted at what they took, the room left under a bound, and the pace of an overdraft.

use crate::consts::{MAX_CREDIT, SPIN_PAUSE, YIELD_SPAN};
use std::time::Duration;

/// Waits `d`: spinning on the CPU (reading the clock) if `spin` and `d` is at most
/// [`SPIN_PAUSE`], sleeping otherwise. Returns how long it really took.
pub(crate) fn take_pause(d: Duration, spin: bool) -> Duration {
    let t = std::time::Instant::now();
    if spin && d <= SPIN_PAUSE {
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    } else {
        std::thread::sleep(d);
    }
    t.elapsed()
}

/// The pause still owed (nanoseconds) after owing `debt` and pausing `took`: negative (a credit
/// against the next pauses) when the pause overran, by at most [`MAX_CREDIT`].
pub(crate) fn settle(debt: i64, took: Duration) -> i64 {
    let took = i64::try_from(took.as_nanos()).unwrap_or(i64::MAX);
    debt.saturating_sub(took)
        .max(-(MAX_CREDIT.as_nanos() as i64))
}

/// The CPUs this process may run on (1 if unknown), looked up once.
pub(crate) fn cpus() -> u64 {
    static CPUS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

/// The room left under a bound, in halves of the bound: 3/2 at a quarter of it, 1 at half (the
/// set point: a writer paced there writes as fast as writeback drains), 1/2 at three quarters,
/// 0 at (or past) the bound.
pub(crate) fn room(used: u64, bound: u64) -> f64 {
    bound.saturating_sub(used) as f64 / (bound / 2).max(1) as f64
}

/// The rate (bytes per second) at which a writer holding an overdraft of `grant` bytes may write,
/// or `None` when the usual pacing applies. While the submitter yields to another process's
/// writeback, the writer's own writeback waits and it writes into its overdraft at a pace that
/// makes the overdraft last [`YIELD_SPAN`] (a pause of ~4 ms per 1 MiB with the default window,
/// where the usual pacing, following the bandwidth the writer gets, would pause 20 ms). Once
/// writeback runs again and until its dirty data is back at half its window, it writes at half
/// its `share` of the bandwidth, so that its backlog drains at the other half, but never slower
/// than while it yielded (the measured bandwidth may still be that of the stall; the hard limit
/// still holds).
pub(crate) fn overdraft_rate(
    grant: u64,
    yielding: bool,
    dirty: u64,
    window: u64,
    share: u64,
) -> Option<u64> {
    let yield_rate = ((grant as f64 / YIELD_SPAN.as_secs_f64()) as u64).max(1);
    if grant == 0 {
        None
    } else if yielding {
        Some(yield_rate)
    } else if dirty > window / 2 {
        Some((share / 2).max(yield_rate))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::DEFAULT_WINDOW;
    use std::io;

    #[test]
    fn pauses_count_what_they_took() {
        let us = Duration::from_micros;
        assert_eq!(settle(100_000, us(60)), 40_000);
        assert_eq!(settle(100_000, us(300)), -200_000, "an overrun is a credit");
        assert_eq!(
            settle(100_000, us(5_000)),
            -(MAX_CREDIT.as_nanos() as i64),
            "the credit is bounded"
        );
        assert_eq!(
            settle(-100_000, Duration::MAX),
            -(MAX_CREDIT.as_nanos() as i64)
        );
    }

    /// Voluntary context switches of the calling thread so far.
    fn voluntary_switches() -> i64 {
        // SAFETY: rusage is plain data, for which all zeroes is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage(2) writes one rusage to the valid, exclusive pointer it is given.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        ru.ru_nvcsw
    }

    #[test]
    fn short_pauses_spin_and_long_ones_sleep() {
        let us = Duration::from_micros;
        let before = voluntary_switches();
        for _ in 0..20 {
            assert!(take_pause(us(100), true) >= us(100));
        }
        assert_eq!(voluntary_switches(), before, "a spun pause never blocks");
        let before = voluntary_switches();
        assert!(take_pause(SPIN_PAUSE + us(100), true) >= SPIN_PAUSE + us(100));
        assert!(take_pause(us(100), false) >= us(100));
        assert!(
            voluntary_switches() >= before + 2,
            "a long pause, or a short one when not spinning, sleeps"
        );
    }

    #[test]
    fn pacing_holds_a_writer_at_half_its_window() {
        let w = 32u64 << 20;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(room(w / 4, w), 1.5));
        assert!(
            close(room(w / 2, w), 1.0),
            "the set point: the rate of writeback"
        );
        assert!(close(room(3 * w / 4, w), 0.5));
        assert_eq!(room(w, w), 0.0);
        assert_eq!(room(2 * w, w), 0.0);
    }

    #[test]
    fn an_overdraft_is_spent_slowly_and_paid_back_at_half_the_share() {
        let w = DEFAULT_WINDOW as u64;
        let grant = 3 * w;
        let gbps = 1u64 << 30;
        // No overdraft: the usual pacing.
        assert_eq!(overdraft_rate(0, true, w, w, gbps), None);
        // While yielding: the overdraft lasts YIELD_SPAN, whatever the measured share.
        let yield_rate = overdraft_rate(grant, true, w / 4, w, 7 << 20).unwrap();
        let lasts = grant as f64 / yield_rate as f64;
        assert!((lasts - YIELD_SPAN.as_secs_f64()).abs() < 1e-3, "{lasts}");
        assert_eq!(
            overdraft_rate(grant, true, 3 * w, w, gbps),
            Some(yield_rate)
        );
        // Paying back: half the share, never slower than while yielding.
        assert_eq!(overdraft_rate(grant, false, 2 * w, w, gbps), Some(gbps / 2));
        assert_eq!(
            overdraft_rate(grant, false, 2 * w, w, 7 << 20),
            Some(yield_rate)
        );
        // Back at the set point: the usual pacing.
        assert_eq!(overdraft_rate(grant, false, w / 2, w, gbps), None);
    }
}
