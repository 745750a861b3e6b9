//! What every workload uses to measure: the record of one run, resource usage, latency
//! histograms and the memory hog. (Repetition, statistics and output live in `harness`.)

use serde_json::{Map, Value};
use std::time::Duration;

/// One measurement of one transport in one configuration.
#[derive(Clone, Debug)]
pub struct Record {
    /// The benchmark (`pipe`, `bw`, ...): the case's, checked by the harness.
    pub bench: &'static str,
    /// The transport; the harness sets it to the arm's name.
    pub transport: String,
    /// How the run was set up (writers, sizes, pool, ...): the JSON `config`.
    pub config: Map<String, Value>,
    /// Metric name (with its unit, e.g. `mbps`, `lat_p99_ns`) to value.
    pub metrics: Vec<(String, f64)>,
}

impl Record {
    /// An empty record.
    pub fn new(bench: &'static str, transport: impl Into<String>) -> Record {
        Record {
            bench,
            transport: transport.into(),
            config: Map::new(),
            metrics: Vec::new(),
        }
    }

    /// Adds a configuration entry.
    pub fn config(mut self, key: &str, value: impl Into<Value>) -> Record {
        self.config.insert(key.to_string(), value.into());
        self
    }

    /// Sets a metric (named with its unit), replacing an earlier value of the same name.
    pub fn metric(&mut self, key: &str, value: f64) {
        match self.metrics.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metrics.push((key.to_string(), value)),
        }
    }

    /// A metric's value.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

/// Process-wide resource usage (`getrusage(RUSAGE_SELF)`): minor faults and user+system CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Minor page faults.
    pub minor_faults: u64,
    /// User plus system CPU seconds.
    pub cpu_s: f64,
}

impl Usage {
    /// The whole process's usage so far.
    pub fn now() -> Usage {
        usage(libc::RUSAGE_SELF)
    }

    /// The calling thread's usage (`RUSAGE_THREAD`).
    pub fn thread() -> Usage {
        usage(libc::RUSAGE_THREAD)
    }

    /// This and `other` together.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            minor_faults: self.minor_faults + other.minor_faults,
            cpu_s: self.cpu_s + other.cpu_s,
        }
    }

    /// The usage between `earlier` and this.
    pub fn since(self, earlier: Usage) -> Usage {
        Usage {
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            cpu_s: self.cpu_s - earlier.cpu_s,
        }
    }
}

fn usage(who: libc::c_int) -> Usage {
    // SAFETY: rusage is plain data; zeroed is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(who, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Usage {
        minor_faults: ru.ru_minflt as u64,
        cpu_s: secs(ru.ru_utime) + secs(ru.ru_stime),
    }
}

/// Largest latency a histogram holds (longer ones count as this): 100 s.
const HIST_MAX_NS: u64 = 100_000_000_000;

/// A latency histogram (`hdrhistogram`, 3 significant digits: quantiles within 0.1%), cheap
/// enough to record every write.
#[derive(Clone)]
pub struct Histogram(hdrhistogram::Histogram<u64>);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(
            hdrhistogram::Histogram::new_with_bounds(1, HIST_MAX_NS, 3)
                .expect("1 ns .. 100 s at 3 digits is a valid histogram"),
        )
    }
}

impl Histogram {
    /// Counts one latency.
    pub fn record(&mut self, d: Duration) {
        let ns = d.as_nanos().min(u128::from(HIST_MAX_NS)) as u64;
        self.0.saturating_record(ns);
    }

    /// Counts `count` latencies of `ns` nanoseconds.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        self.0.saturating_record_n(ns.clamp(1, HIST_MAX_NS), count);
    }

    /// Every recorded value (ns, as its bucket's highest equivalent) with its count.
    pub fn counts(&self) -> Vec<(u64, u64)> {
        self.0
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        self.0
            .add(&other.0)
            .expect("histograms with the same bounds always add");
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Mean in ns (0 when empty).
    pub fn mean_ns(&self) -> f64 {
        self.0.mean()
    }

    /// Largest in ns (0 when empty).
    pub fn max_ns(&self) -> f64 {
        self.0.max() as f64
    }

    /// The `q` quantile (0..=1) in ns (0 when empty).
    pub fn quantile_ns(&self, q: f64) -> f64 {
        self.0.value_at_quantile(q) as f64
    }

    /// The distribution as at most about `max_points` (ns, fraction at or below) pairs, for a
    /// CDF chart.
    pub fn cdf_points(&self, max_points: usize) -> Vec<(f64, f64)> {
        let all: Vec<(f64, f64)> = self
            .0
            .iter_recorded()
            .map(|v| (v.value_iterated_to() as f64, v.quantile_iterated_to()))
            .collect();
        let step = all.len().div_ceil(max_points.max(1)).max(1);
        let mut points: Vec<(f64, f64)> = all.iter().step_by(step).copied().collect();
        if let Some(&last) = all.last() {
            if points.last() != Some(&last) {
                points.push(last);
            }
        }
        points
    }

    /// Stores the standard latency metrics of this histogram in `rec`: `lat_avg_ns`,
    /// `lat_p50_ns`, `lat_p99_ns`, `lat_p999_ns`, `lat_max_ns`.
    pub fn put_metrics(&self, rec: &mut Record) {
        rec.metric("lat_avg_ns", self.mean_ns());
        rec.metric("lat_p50_ns", self.quantile_ns(0.50));
        rec.metric("lat_p99_ns", self.quantile_ns(0.99));
        rec.metric("lat_p999_ns", self.quantile_ns(0.999));
        rec.metric("lat_max_ns", self.max_ns());
    }
}

/// Runs `stress-ng --vm N --vm-bytes P%` beside a benchmark (as pipe_bench does), if installed.
pub struct MemoryHog(Option<std::process::Child>);

impl MemoryHog {
    /// Starts the hog if `enabled` (and waits 2 s for it to fill memory).
    ///
    /// # Errors
    /// stress-ng is not installed (its `ErrorKind`, with how to install it).
    pub fn start(enabled: bool) -> std::io::Result<MemoryHog> {
        if !enabled {
            return Ok(MemoryHog(None));
        }
        let child = std::process::Command::new("stress-ng")
            .args(["--vm", "2", "--vm-bytes", "80%", "--quiet"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "--memory-pressure needs stress-ng (apt-get install -y stress-ng): {e}"
                    ),
                )
            })?;
        std::thread::sleep(Duration::from_secs(2)); // let it fill memory
        Ok(MemoryHog(Some(child)))
    }
}

impl Drop for MemoryHog {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            // SIGTERM lets stress-ng stop its workers; wait so none outlive the benchmark.
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_close() {
        let mut h = Histogram::default();
        for ns in 1..=10_000u64 {
            h.record(Duration::from_nanos(ns));
        }
        let p50 = h.quantile_ns(0.5);
        assert!((4990.0..=5010.0).contains(&p50), "p50 {p50}");
        let p999 = h.quantile_ns(0.999);
        assert!((9980.0..=10_000.0).contains(&p999), "p99.9 {p999}");
        assert!((h.max_ns() - 10_000.0).abs() <= 10.0);
        assert!((h.mean_ns() - 5000.5).abs() < 5.0);
        let mut other = Histogram::default();
        other.record(Duration::from_secs(1000)); // beyond the bound: counted as 100 s
        h.merge(&other);
        assert_eq!(h.count(), 10_001);
        let cdf = h.cdf_points(100);
        assert!(
            cdf.len() <= 102 && cdf.last().unwrap().1 == 1.0,
            "{}",
            cdf.len()
        );
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
