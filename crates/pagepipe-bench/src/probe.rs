//! What the machine is doing under a run: the core-to-core round trip right before it (the
//! "core probe") and the CPU time the hypervisor took from this VM's CPUs during it (steal).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Round trips per timed batch of the probe.
const BATCH: u32 = 64;

/// The machine's core-to-core latency right now: one cache line bounced between this thread
/// and a helper thread on another CPU for `d`, both spinning; the median over batches of 64
/// round trips, in ns. On a VM this moves as the host places the two vCPUs (seen here: ~70,
/// ~135 and ~340 ns regimes, minutes apart), and every transport that streams between cores
/// moves with it; `bw` and `pipe` record it with each run (`core_rtt_ns`).
///
/// The probe measures two CPUs, not the scheduler: the helper is pinned to a CPU other than
/// the one this thread is on (and this thread to its own for the probe's length), and timing
/// starts once the helper answers. Unpinned, a new thread starts on its parent's CPU and the
/// two spinners share it until one is migrated: the first unpinned probe of an invocation read
/// 175 ns where the later ones read 73-94 (measured here). A batch the host interrupts moves
/// the median of many batches little, where it moves the mean a lot. Pinned, the probe still
/// reads 400-460 ns in some minutes, when rtrb's plain loop slows down as well: the host's
/// placement of the vCPUs.
pub fn core_rtt_ns(d: Duration) -> f64 {
    let pins = Pins::new();
    let ball = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let echo = {
        let ball = ball.clone();
        let cpu = pins.as_ref().map(|p| p.other);
        std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                // Best effort: an unpinned helper still measures, as before.
                let _ = pin_to(cpu);
            }
            let mut seen = 0;
            while seen != u64::MAX {
                // Acquire/Release: the ball is its own message; ordering nothing else.
                let v = ball[0].load(Ordering::Acquire);
                if v == seen {
                    std::hint::spin_loop();
                    continue;
                }
                seen = v;
                ball[1].store(v, Ordering::Release);
            }
        })
    };
    let mut n = 0u64;
    let bounce = |n: &mut u64| {
        *n += 1;
        // Release/Acquire: pairs with the echo thread's load/store of the same counter.
        ball[0].store(*n, Ordering::Release);
        while ball[1].load(Ordering::Acquire) != *n {
            std::hint::spin_loop();
        }
    };
    bounce(&mut n); // the helper is running (on its own CPU, if pinned)
    let mut batches = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < d {
        let b0 = Instant::now();
        for _ in 0..BATCH {
            bounce(&mut n);
        }
        batches.push(b0.elapsed().as_nanos() as f64 / f64::from(BATCH));
    }
    // Release: the echo thread's Acquire load sees the stop value.
    ball[0].store(u64::MAX, Ordering::Release);
    echo.join().expect("the echo thread does not panic");
    drop(pins); // this thread's own CPU mask back
    batches.sort_by(f64::total_cmp);
    batches.get(batches.len() / 2).copied().unwrap_or(f64::NAN)
}

/// This thread pinned to the CPU it is on, and another CPU it may use, for the probe's helper;
/// the thread's own CPU mask is restored on drop. `None` where the thread may use one CPU only
/// or the mask cannot be read.
struct Pins {
    saved: libc::cpu_set_t,
    other: usize,
}

impl Pins {
    fn new() -> Option<Pins> {
        // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
        let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `saved` is a writable cpu_set_t of the size passed; 0 is this thread.
        let got = unsafe {
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut saved)
        };
        // SAFETY: sched_getcpu has no preconditions.
        let here = unsafe { libc::sched_getcpu() };
        if got != 0 || here < 0 {
            return None;
        }
        let here = here as usize;
        let other = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads a bit of a valid set, `cpu` below CPU_SETSIZE.
            .find(|&cpu| cpu != here && unsafe { libc::CPU_ISSET(cpu, &saved) })?;
        pin_to(here).ok()?;
        Some(Pins { saved, other })
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        // SAFETY: restores the mask read in `new` for this thread; a failure leaves the thread
        // pinned to one CPU, which harms only the measurements, so it is ignored.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.saved) };
    }
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes a bit of a valid set; callers pass cpu < CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of the size passed; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time the hypervisor ran something else on this machine's CPUs (`steal` in `/proc/stat`,
/// all CPUs together), in ms; `None` where it cannot be read.
pub fn steal_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    // cpu user nice system idle iowait irq softirq steal ...
    let ticks: f64 = cpu.split_whitespace().nth(8)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks * 1000.0 / hz as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_measures_and_gives_the_mask_back() {
        // SAFETY: as in Pins::new.
        let mut before: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as in Pins::new.
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut before) };
        let ns = core_rtt_ns(Duration::from_millis(5));
        assert!(ns > 0.0 && ns.is_finite(), "{ns}");
        // SAFETY: as in Pins::new.
        let mut after: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as in Pins::new.
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut after) };
        // SAFETY: CPU_EQUAL compares two valid sets.
        assert!(unsafe { libc::CPU_EQUAL(&before, &after) });
        if let Some(s) = steal_ms() {
            assert!(s >= 0.0);
        }
    }
}
