//! What every benchmark shares: result records and JSON lines, repeated-run statistics,
//! resource usage, progress bars and tables.

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Map, Value};
use std::io::IsTerminal;
use std::time::Duration;

/// One measurement of one transport in one configuration.
#[derive(Clone, Debug)]
pub struct Record {
    pub bench: &'static str,
    pub transport: String,
    pub config: Map<String, Value>,
    /// Metric name (with its unit, e.g. `mbps`, `lat_p99_ns`) to value.
    pub metrics: Vec<(String, f64)>,
}

impl Record {
    pub fn new(bench: &'static str, transport: impl Into<String>) -> Record {
        Record {
            bench,
            transport: transport.into(),
            config: Map::new(),
            metrics: Vec::new(),
        }
    }

    pub fn config(mut self, key: &str, value: impl Into<Value>) -> Record {
        self.config.insert(key.to_string(), value.into());
        self
    }

    pub fn metric(&mut self, key: &str, value: f64) {
        match self.metrics.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metrics.push((key.to_string(), value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The DESIGN.md §4 JSON line: `{"bench", "transport", "config", "metrics"}`.
    pub fn to_json(&self) -> Value {
        let metrics: Map<String, Value> = self
            .metrics
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({"bench": self.bench, "transport": self.transport, "config": self.config, "metrics": metrics})
    }
}

/// Prints a record as one JSON line (with `--json`).
pub fn print_json(rec: &Record) {
    println!("{}", rec.to_json());
}

/// Median and a 95% confidence interval of the mean of repeated runs (Student's t).
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    pub n: usize,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Summary {
        assert!(!samples.is_empty(), "no samples to summarise");
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        let mean = s.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Summary {
                median,
                mean,
                lo: mean,
                hi: mean,
                n,
            };
        }
        let var = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t95(n - 1) * (var / n as f64).sqrt();
        Summary {
            median,
            mean,
            lo: mean - half,
            hi: mean + half,
            n,
        }
    }

    /// The same summary in other units: every value divided by `divisor`.
    pub fn scaled(&self, divisor: f64) -> Summary {
        Summary {
            median: self.median / divisor,
            mean: self.mean / divisor,
            lo: self.lo / divisor,
            hi: self.hi / divisor,
            n: self.n,
        }
    }

    /// True when the two 95% intervals do not overlap: the difference stands out of the noise.
    /// (Conservative: non-overlap of two 95% intervals implies p < 0.05 and more.)
    pub fn distinct_from(&self, other: &Summary) -> bool {
        self.n > 1 && other.n > 1 && (self.lo > other.hi || other.lo > self.hi)
    }
}

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    T.get(df.saturating_sub(1)).copied().unwrap_or(1.96)
}

/// Process-wide resource usage (`getrusage(RUSAGE_SELF)`): minor faults and user+system CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub minor_faults: u64,
    pub cpu_s: f64,
}

impl Usage {
    pub fn now() -> Usage {
        usage(libc::RUSAGE_SELF)
    }

    /// The calling thread's usage (`RUSAGE_THREAD`).
    pub fn thread() -> Usage {
        usage(libc::RUSAGE_THREAD)
    }

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

/// A progress bar on a terminal; hidden when stderr is piped (or with `--json`).
pub fn progress(total: u64, what: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:30} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta})",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Latency histogram with fixed log-linear buckets (16 sub-buckets per power of two, so
/// quantiles are within ~6%); cheap enough to record every write.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; 64 * 16],
            total: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn bucket(ns: u64) -> usize {
        if ns < 16 {
            return ns as usize;
        }
        let log = 63 - ns.leading_zeros() as usize; // >= 4
        let sub = ((ns >> (log - 4)) & 15) as usize;
        (log - 3) * 16 + sub
    }

    fn bucket_low(b: usize) -> u64 {
        if b < 16 {
            return b as u64;
        }
        let log = b / 16 + 3;
        let sub = (b % 16) as u64;
        (16 + sub) << (log - 4)
    }

    pub fn record(&mut self, d: Duration) {
        let ns = d.as_nanos().min(u64::MAX as u128) as u64;
        self.counts[Self::bucket(ns)] += 1;
        self.total += 1;
        self.sum += ns as u128;
        self.max = self.max.max(ns);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn mean_ns(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    pub fn max_ns(&self) -> f64 {
        self.max as f64
    }

    /// The `q` quantile (0..=1), as the lower bound of its bucket.
    pub fn quantile_ns(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::bucket_low(b) as f64;
            }
        }
        self.max as f64
    }
}

/// Prints rows as an aligned text table.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("| {} |", parts.join(" | "));
    };
    line(header.to_vec());
    println!(
        "|{}|",
        width
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// Formats a summary as `median [lo, hi]`.
pub fn fmt_summary(s: &Summary, decimals: usize) -> String {
    if s.n < 2 {
        format!("{:.*}", decimals, s.median)
    } else {
        format!(
            "{:.*} [{:.*}, {:.*}]",
            decimals, s.median, decimals, s.lo, decimals, s.hi
        )
    }
}

/// Runs `stress-ng --vm N --vm-bytes P%` beside a benchmark (as pipe_bench does), if installed.
pub struct MemoryHog(Option<std::process::Child>);

impl MemoryHog {
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
        assert!((4700.0..=5000.0).contains(&p50), "p50 {p50}");
        let p99 = h.quantile_ns(0.99);
        assert!((9300.0..=9900.0).contains(&p99), "p99 {p99}");
        assert_eq!(h.max_ns(), 10_000.0);
        assert!((h.mean_ns() - 5000.5).abs() < 1e-6);
    }

    #[test]
    fn summary_interval_contains_mean() {
        let s = Summary::of(&[10.0, 11.0, 9.0, 10.5, 9.5]);
        assert_eq!(s.median, 10.0);
        assert!(s.lo < 10.0 && s.hi > 10.0);
        let t = Summary::of(&[20.0, 21.0, 19.0, 20.5, 19.5]);
        assert!(s.distinct_from(&t));
        assert!(!s.distinct_from(&s));
    }
}
