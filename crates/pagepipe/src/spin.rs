//! When a blocked side spins before it sleeps, and for how long.
//!
//! Spinning wins only while the other side is running on another core and is close to done: a
//! round trip between two running threads is well under a microsecond through the ring, where a
//! futex sleep and wake-up costs several. On a machine whose cores are all taken (other
//! processes' work, or more of our threads than cores) a spinner takes the core that the thread
//! it waits for needs, and loses. Issue 38's held-out measurements on the 2-core development
//! VM with busy loops beside a 1 MiB pipe: the old fixed spin (4096 rounds, a `sched_yield`
//! every 256) fell to 0.43-0.93x the kernel pipe's bandwidth; sleeping at once gave 2.4-3.6x
//! loaded but 0.86x idle. This policy's own figures are in the README's Results. So the spin is decided, not fixed (the kernel's optimistic spinning spins only while
//! the lock owner runs; glibc's adaptive mutex learns its spin count from recent outcomes):
//!
//! - **Cores to spare.** [`cores_to_spare`] reads the runnable thread count the kernel reports
//!   (`/proc/loadavg`, its fourth field: `running/total`, counted at the moment of the read,
//!   this thread included) at most once per [`CHECK_EVERY`] per process, and compares it with
//!   the CPUs online (the count is machine-wide; a process confined to one CPU never spins).
//!   While every core has a runnable thread, a spin is cut to [`BUSY_SPINS`] rounds: enough
//!   to catch a peer that is running right now (a round trip's reply), too short to cost the
//!   peer its core; while a core is free it takes at least [`IDLE_SPINS`]. Without `/proc` the count is unknown and only the learning below decides.
//! - **Learned from outcomes.** Each thread keeps its own budget ([`BUDGET`]): a spin that
//!   found the condition after `n` rounds lets the next spin take up to `2n +` [`MIN_SPINS`];
//!   a spin that ran out halves it, down to [`MIN_SPINS`]. A thread whose peer keeps it waiting
//!   for long (a descheduled writer, a slow consumer) soon spins for a few hundred nanoseconds
//!   only, and one whose peer answers at once keeps spinning.
//! - **Not for a thread woken on this CPU.** While every core is busy, a spin that follows a
//!   wake-up of a thread asleep on this CPU ([`woke_here`]) is skipped: the kernel queues that
//!   thread here, so it runs, and answers, only once we sleep (`sleeper_cpu`, a hint: wrong, it
//!   costs one sleep or one spin). Pinned to one CPU, where nothing spins, `lat`'s round trip
//!   was 0.93-0.95x the kernel pipe's; beside 1 or 2 busy loops at 71e9b9f its medians were
//!   0.78x and 0.81x, and with this skip 0.87-0.90x and 0.81-0.86x (docs/benchmarks.md).
//! - **Never `sched_yield`.** Under CFS/EEVDF a yield beside a busy process gives it the core
//!   for a whole slice (milliseconds), not the peer; the futex sleep is what hands the core
//!   over, and its wake-up is what brings us back at once.
//!
//! Under loom nothing spins: the model explores the sleeping path, where lost wake-ups hide.

use std::cell::Cell;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The most rounds a spin takes (a round loads the other side's index line, which the peer
/// keeps writing).
pub(crate) const MAX_SPINS: u32 = 1 << 11;
/// The fewest rounds a learned budget keeps: a probe cheap enough to pay for itself even when
/// it fails.
pub(crate) const MIN_SPINS: u32 = 32;
/// The most rounds while every core is busy: catches a reply from a peer running right now.
pub(crate) const BUSY_SPINS: u32 = 128;
/// The fewest rounds while a core is free: a peer that answers within a few microseconds is
/// caught without a sleep, whatever the learned budget says.
pub(crate) const IDLE_SPINS: u32 = 256;
/// How often a process rereads the runnable count.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(2);

thread_local! {
    /// This thread's spin budget in rounds (see the module docs).
    static BUDGET: Cell<u32> = const { Cell::new(MAX_SPINS) };
    /// This thread's last wake-up went to a thread asleep on its CPU (see [`woke_here`]).
    static WOKE_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Notes that this thread just woke a thread asleep on its own CPU: its next spin, if every core
/// is busy, is skipped (see the module docs).
pub(crate) fn woke_here() {
    WOKE_HERE.with(|w| w.set(true));
}

/// Spins until `ready`, for as many rounds as recent outcomes and the machine's load allow;
/// false if it never became true (the caller then sleeps). Under loom, never spins.
#[cfg(loom)]
pub(crate) fn spin_until(_ready: impl Fn() -> bool) -> bool {
    false
}

/// Spins until `ready`, for as many rounds as recent outcomes and the machine's load allow;
/// false if it never became true (the caller then sleeps).
#[cfg(not(loom))]
pub(crate) fn spin_until(ready: impl Fn() -> bool) -> bool {
    let budget = BUDGET.with(Cell::get);
    let woke_here = WOKE_HERE.with(|w| w.replace(false));
    let Some(limit) = rounds(budget, one_cpu(), cores_to_spare, woke_here) else {
        return false; // skipped, not failed: the budget stays
    };
    for i in 0..limit {
        if ready() {
            BUDGET.with(|b| b.set(learn_success(b.get(), i)));
            return true;
        }
        std::hint::spin_loop();
    }
    BUDGET.with(|b| b.set(learn_failure(b.get())));
    false
}

/// How many rounds a spin takes, from this thread's `budget`, whether the process runs on
/// `one_cpu`, whether the machine has `spare` cores (asked only if it matters) and whether this
/// thread's last wake-up was of a thread asleep on its own CPU; `None`: skip the spin.
#[cfg(not(loom))]
fn rounds(
    budget: u32,
    one_cpu: bool,
    spare: impl FnOnce() -> bool,
    woke_here: bool,
) -> Option<u32> {
    if one_cpu {
        Some(0)
    } else if spare() {
        Some(budget.max(IDLE_SPINS))
    } else if woke_here {
        None
    } else {
        Some(budget.min(BUSY_SPINS))
    }
}

/// The budget after a spin that succeeded in `rounds`: enough for twice that, at least as much
/// as before while that was already enough.
fn learn_success(budget: u32, rounds: u32) -> u32 {
    budget
        .max(rounds.saturating_mul(2).saturating_add(MIN_SPINS))
        .min(MAX_SPINS)
}

/// The budget after a spin that ran out: half, down to [`MIN_SPINS`].
fn learn_failure(budget: u32) -> u32 {
    (budget / 2).max(MIN_SPINS)
}

/// The runnable count last read and when: `millis << 1 | spare` (`CLOCK_MONOTONIC`
/// milliseconds); 0 until first read.
#[cfg(not(loom))]
static LAST: AtomicU64 = AtomicU64::new(0);

/// Whether the machine has a core for every runnable thread, as last read (at most
/// [`CHECK_EVERY`] ago); true when the count cannot be read.
#[cfg(not(loom))]
pub(crate) fn cores_to_spare() -> bool {
    let now = crate::sys::thread::monotonic_ms();
    // Relaxed: a hint; a stale or raced value changes one spin's length, nothing else.
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last >> 1) < CHECK_EVERY.as_millis() as u64 {
        return last & 1 != 0;
    }
    let spare = match runnable() {
        Some(r) => r <= online_cpus(),
        None => true,
    };
    // Relaxed: as above; two threads racing both store a fresh reading.
    LAST.store((now.max(1) << 1) | u64::from(spare), Ordering::Relaxed);
    spare
}

/// Threads runnable on the machine now (this one included): the fourth field of
/// `/proc/loadavg`, `running/total`. `None` without `/proc` (or a descriptor to read it with).
/// Opened for each reading (every [`CHECK_EVERY`] at most): a descriptor kept open could be
/// closed or replaced under us by the application.
#[cfg(not(loom))]
fn runnable() -> Option<usize> {
    use std::io::Read;
    let mut buf = [0u8; 128];
    let n = std::fs::File::open("/proc/loadavg")
        .ok()?
        .read(&mut buf)
        .ok()?;
    parse_running(&buf[..n])
}

/// The running count in a `/proc/loadavg` line (`0.52 0.58 0.59 3/467 12345`).
fn parse_running(line: &[u8]) -> Option<usize> {
    let field = std::str::from_utf8(line).ok()?.split_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

/// CPUs online on the machine, read once: `/proc/loadavg` counts runnable threads machine-wide
/// (it knows no affinity, cgroup or namespace), so that is what it is compared with.
#[cfg(not(loom))]
fn online_cpus() -> usize {
    static ONLINE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ONLINE.get_or_init(crate::sys::thread::online_cpus)
}

/// Whether this process may run on one CPU only (its affinity mask or CPU quota): then a
/// spinner holds the one CPU its peer needs, and never spins.
#[cfg(not(loom))]
fn one_cpu() -> bool {
    static ONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONE.get_or_init(|| std::thread::available_parallelism().map_or(true, |n| n.get() == 1))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn loadavg_running_field_is_parsed() {
        assert_eq!(parse_running(b"0.52 0.58 0.59 3/467 12345\n"), Some(3));
        assert_eq!(parse_running(b"0.00 0.01 0.05 12/1000 1"), Some(12));
        assert_eq!(parse_running(b"0.52 0.58"), None);
        assert_eq!(parse_running(b"a b c x/467 1"), None);
        if std::path::Path::new("/proc/loadavg").exists() {
            assert!(runnable().is_some_and(|n| n >= 1), "this thread is running");
        }
    }

    #[test]
    fn the_budget_grows_with_success_and_halves_with_failure() {
        assert_eq!(learn_success(MIN_SPINS, 10), 2 * 10 + MIN_SPINS);
        assert_eq!(
            learn_success(1000, 10),
            1000,
            "a budget that sufficed is kept"
        );
        assert_eq!(learn_success(MIN_SPINS, u32::MAX), MAX_SPINS);
        assert_eq!(learn_failure(MAX_SPINS), MAX_SPINS / 2);
        let mut b = MAX_SPINS;
        for _ in 0..32 {
            b = learn_failure(b);
        }
        assert_eq!(b, MIN_SPINS, "failures never take the probe away");
    }

    #[test]
    fn a_busy_machine_skips_the_spin_after_a_wake_up_on_this_cpu() {
        assert_eq!(rounds(1000, false, || false, true), None);
        assert_eq!(rounds(1000, false, || false, false), Some(BUSY_SPINS));
        assert_eq!(rounds(40, false, || false, false), Some(40));
        assert_eq!(
            rounds(40, false, || true, true),
            Some(IDLE_SPINS),
            "a spare core: the wakee runs there, so spinning may catch its answer"
        );
        assert_eq!(rounds(1000, true, || panic!("not asked"), false), Some(0));
        // The note is taken by the next spin, once.
        woke_here();
        assert!(WOKE_HERE.with(Cell::get));
        let before = BUDGET.with(Cell::get);
        let _ = spin_until(|| false);
        assert!(!WOKE_HERE.with(Cell::get));
        assert!(BUDGET.with(Cell::get) <= before.max(MIN_SPINS));
    }

    #[test]
    fn a_spin_that_finds_its_condition_returns_true() {
        let n = std::cell::Cell::new(0);
        assert!(spin_until(|| {
            n.set(n.get() + 1);
            n.get() > 3
        }));
        assert!(!spin_until(|| false));
        assert!(BUDGET.with(Cell::get) >= MIN_SPINS);
    }
}
