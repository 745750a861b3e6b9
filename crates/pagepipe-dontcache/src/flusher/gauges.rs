//! What the flusher learns about the system, as plain values it then publishes in
//! [`FLUSHER`](super::FLUSHER): other processes' writeback ([`Foreign`], from `/proc/meminfo`)
//! and its own writeback bandwidth ([`Bandwidth`]).

use crate::consts::{FOREIGN_CHECK, YIELD_OFF, YIELD_ON};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// The submitter's view of other processes' writeback: `Writeback:` of `/proc/meminfo` (every
/// page under writeback in the system) less what this process has in flight, read at most every
/// [`FOREIGN_CHECK`], published in `Flusher::yielding` with hysteresis ([`YIELD_ON`],
/// [`YIELD_OFF`]). Measured on the development VM (competing writes): when the buffered
/// competitor's `fsync` of 512 MiB started, `Writeback:` rose from under 16 MiB to 91 MiB within
/// 3 ms and stayed near 146 MiB (the block layer's throttling holds the rest back) until it
/// ended, ~250 ms later; our own in flight was 10-30 MiB.
///
/// System-wide, not per device: writeback to another disk makes the writers yield too (they then
/// write at the yield pace into their overdraft, and start writeback when it runs out).
pub(super) struct Foreign {
    meminfo: Option<File>,
    checked: std::time::Instant,
    buf: Vec<u8>,
}

impl Foreign {
    pub(super) fn new() -> Foreign {
        Foreign {
            meminfo: File::open("/proc/meminfo").ok(),
            checked: std::time::Instant::now(),
            buf: vec![0; 8192],
        }
    }

    /// The new value of `Flusher::yielding`(super::Flusher) from `was`, its value now, and
    /// `ours`, the bytes this process has in flight: `was` until [`FOREIGN_CHECK`] has passed
    /// since the last look or while `/proc/meminfo` cannot be read.
    pub(super) fn update(&mut self, was: bool, ours: u64) -> bool {
        if self.checked.elapsed() < FOREIGN_CHECK {
            return was;
        }
        self.checked = std::time::Instant::now();
        let Some(writeback) = self.system_writeback() else {
            return was;
        };
        let foreign = writeback.saturating_sub(ours);
        if was {
            foreign > YIELD_OFF
        } else {
            foreign > YIELD_ON
        }
    }

    /// Bytes under writeback in the whole system, `None` if `/proc/meminfo` cannot be read.
    fn system_writeback(&mut self) -> Option<u64> {
        let n = self.meminfo.as_ref()?.read_at(&mut self.buf, 0).ok()?;
        meminfo_kib(&self.buf[..n], b"Writeback:").map(|kib| kib << 10)
    }
}

/// The value in KiB of the `/proc/meminfo` line starting with `key` (e.g. `b"Writeback:"`).
pub(super) fn meminfo_kib(text: &[u8], key: &[u8]) -> Option<u64> {
    let line = text.split(|&b| b == b'\n').find(|l| l.starts_with(key))?;
    let value = std::str::from_utf8(&line[key.len()..]).ok()?;
    value.split_whitespace().next()?.parse().ok()
}

/// Measures the flusher's writeback bandwidth: bytes dropped per second of *busy* time, the
/// time during which the writers kept data in flight (an idle stretch measures the writers, not
/// the disk), summed over the reaper's rounds until it reaches [`BANDWIDTH_INTERVAL`], smoothed
/// (a quarter of each new sample), published in `Flusher::bandwidth`.
///
/// Only busy time counts, however it is spread: a writer paced by a low estimate writes a few
/// MiB, pauses, and finds them all written back and dropped before its pause ends, so the
/// flusher is busy for a few milliseconds out of every twenty. An earlier version took a sample
/// only over an interval of at least 10 ms that was busy at both ends; measured (competing
/// writes, after the competitor's `fsync` had held our writeback up): the estimate fell to
/// 7 MiB/s during the stall and never recovered, because that pattern was never busy at both
/// ends of an interval, and the writer was paused 20 ms per 1 MiB write until it finished.
pub(super) struct Bandwidth {
    /// When the reaper last looked.
    last: std::time::Instant,
    /// `Flusher::dropped` when the reaper last looked.
    dropped: u64,
    /// Whether writeback was in flight when the reaper last looked: the time and bytes until it
    /// looks again count.
    busy: bool,
    /// Busy time and bytes dropped in it since the last sample.
    busy_time: Duration,
    busy_bytes: u64,
}

/// The busy time over which [`Bandwidth`] takes a sample.
pub(super) const BANDWIDTH_INTERVAL: Duration = Duration::from_millis(10);

impl Bandwidth {
    pub(super) fn new(now: std::time::Instant) -> Bandwidth {
        Bandwidth {
            last: now,
            dropped: 0,
            busy: false,
            busy_time: Duration::ZERO,
            busy_bytes: 0,
        }
    }

    /// Adds the stretch since the last look if writeback was busy during it; returns a rate
    /// (bytes per second) once [`BANDWIDTH_INTERVAL`] of busy time has been seen. `dropped` is
    /// the running count of bytes dropped, `busy` whether writeback is in flight now.
    pub(super) fn observe(
        &mut self,
        now: std::time::Instant,
        dropped: u64,
        busy: bool,
    ) -> Option<u64> {
        if self.busy {
            self.busy_time += now.saturating_duration_since(self.last);
            self.busy_bytes += dropped.saturating_sub(self.dropped);
        }
        self.last = now;
        self.dropped = dropped;
        self.busy = busy;
        if self.busy_time < BANDWIDTH_INTERVAL {
            return None;
        }
        let rate = (self.busy_bytes as f64 / self.busy_time.as_secs_f64()) as u64;
        self.busy_time = Duration::ZERO;
        self.busy_bytes = 0;
        Some(rate)
    }
}

/// The bandwidth estimate after a new sample `rate`: a quarter of the way from `old` (the first
/// sample as it is), never 0 (0 means "not measured yet").
pub(super) fn smooth(old: u64, rate: u64) -> u64 {
    let new = if old == 0 { rate } else { (3 * old + rate) / 4 };
    new.max(1)
}
