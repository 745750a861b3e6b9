//! Which way is better, per metric: the one place that orients every ratio.

/// Whether a larger or a smaller value of a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Throughputs and rates: a ratio is `this / baseline`.
    Higher,
    /// Times, latencies, CPU, faults, memory: a ratio is `baseline / this`.
    Lower,
}

/// Metrics where more is better; every other metric (latencies `lat_*_ns`, `ns_per_frag`,
/// `cpu_s`, `cpu_pct`, `minor_faults`, `peak_dirty_kib`, `cache_left_pct`, `writeback_waits`,
/// ...) is a cost, where less is better.
const HIGHER_IS_BETTER: [&str; 11] = [
    "mbps",
    "writes_per_s",
    "round_trips",
    "fairness",
    "fairness_jain",
    "competitor_mbps",
    "ops_per_s",
    "msgs_per_s",
    "detected",
    "records",
    "live_pipes",
];

/// Which way `metric` is better. Every ratio in tables, charts and JSON is oriented by this, so
/// that a ratio above 1 always means "better than the baseline".
pub fn better(metric: &str) -> Better {
    if HIGHER_IS_BETTER.contains(&metric) {
        Better::Higher
    } else {
        Better::Lower
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_up_costs_down() {
        assert_eq!(better("mbps"), Better::Higher);
        assert_eq!(better("msgs_per_s"), Better::Higher);
        assert_eq!(better("lat_p999_ns"), Better::Lower);
        assert_eq!(better("minor_faults"), Better::Lower);
        assert_eq!(better("ns_per_frag"), Better::Lower);
    }
}
