//! Statistics of a finished case, and how they are shown: JSON lines and the table.

use super::args::Runs;
use super::case::{Case, Column, Run};
use super::meta::Meta;
use super::metric::{better, Better};
use crate::common::Histogram;
use crate::stats::{median_ci, ratio_ci, MedianCi, RatioCi, LEVEL};
use serde_json::{json, Map, Value};

/// Every metric's per-run values, in the order the first run's record lists them.
pub type Samples = Vec<(String, Vec<f64>)>;

/// The per-run values of every metric of `runs`.
pub fn samples_of(runs: &[Run]) -> Samples {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .record
        .metrics
        .iter()
        .map(|(key, _)| {
            let values = runs.iter().filter_map(|r| r.record.get(key)).collect();
            (key.clone(), values)
        })
        .collect()
}

/// One metric of one arm.
#[derive(Clone, Debug)]
pub struct MetricStats {
    /// JSON name.
    pub key: String,
    /// Per-run values, in run order.
    pub samples: Vec<f64>,
    /// Median and its interval.
    pub ci: MedianCi,
    /// Against the baseline, oriented by [`better`] (absent for the baseline itself, or where
    /// a value is zero).
    pub ratio: Option<RatioCi>,
}

/// One arm of a finished case.
pub struct ArmStats {
    /// JSON `transport`.
    pub name: String,
    /// Table label.
    pub label: String,
    /// The configuration its first run reported.
    pub config: Map<String, Value>,
    /// Runs measured.
    pub runs: usize,
    /// Every metric.
    pub metrics: Vec<MetricStats>,
    /// Latencies of all its runs merged, if it recorded any.
    pub latency: Option<Histogram>,
}

impl ArmStats {
    /// Statistics of `runs`, with ratios against `base` (the baseline arm's samples) if given.
    pub fn new(name: &str, label: &str, runs: &[Run], base: Option<&Samples>) -> ArmStats {
        let metrics = samples_of(runs)
            .into_iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|(key, samples)| {
                let ratio = base
                    .and_then(|b| b.iter().find(|(k, _)| *k == key))
                    .and_then(|(_, b)| ratio_ci(b, &samples))
                    .map(|r| match better(&key) {
                        Better::Higher => r,
                        Better::Lower => r.inverted(),
                    });
                MetricStats {
                    ci: median_ci(&samples),
                    key,
                    samples,
                    ratio,
                }
            })
            .collect();
        let mut latency: Option<Histogram> = None;
        for h in runs.iter().filter_map(|r| r.latency.as_ref()) {
            latency.get_or_insert_with(Histogram::default).merge(h);
        }
        ArmStats {
            name: name.to_string(),
            label: label.to_string(),
            config: runs
                .first()
                .map(|r| r.record.config.clone())
                .unwrap_or_default(),
            runs: runs.len(),
            metrics,
            latency,
        }
    }

    /// The statistics of `key`, if this arm measured it.
    pub fn metric(&self, key: &str) -> Option<&MetricStats> {
        self.metrics.iter().find(|m| m.key == key)
    }

    /// The JSON line (see the README for the contract).
    fn to_json(&self, bench: &str, meta: &Meta, stopped: &str) -> Value {
        let mut metrics = Map::new();
        let mut samples = Map::new();
        for m in &self.metrics {
            let k = &m.key;
            metrics.insert(k.clone(), json!(m.ci.median));
            metrics.insert(format!("{k}_ci_lo"), json!(m.ci.lo));
            metrics.insert(format!("{k}_ci_hi"), json!(m.ci.hi));
            if let Some(r) = &m.ratio {
                metrics.insert(format!("ratio_{k}"), json!(r.ratio));
                metrics.insert(format!("ratio_{k}_ci_lo"), json!(r.lo));
                metrics.insert(format!("ratio_{k}_ci_hi"), json!(r.hi));
                metrics.insert(format!("distinct_{k}"), json!(r.distinct()));
            }
            samples.insert(k.clone(), json!(m.samples));
        }
        let mut line = json!({
            "bench": bench,
            "transport": self.name,
            "config": self.config,
            "runs": self.runs,
            "metrics": metrics,
            "samples": samples,
            "ci_level": self.levels(),
            "meta": meta.to_json(),
        });
        if !stopped.is_empty() {
            line["stopped"] = json!(stopped);
        }
        line
    }

    /// The actual coverage of this arm's intervals: `{"median": .., "ratio": ..}`.
    fn levels(&self) -> Value {
        let first = self.metrics.first();
        json!({
            "median": first.map(|m| m.ci.level),
            "ratio": first.and_then(|m| m.ratio).map(|r| r.level),
        })
    }
}

/// A finished case.
pub struct CaseResult {
    /// What was measured.
    pub case: Case,
    /// Its arms in table order; the first is the baseline.
    pub arms: Vec<ArmStats>,
    /// Why `--runs auto` stopped (empty for a fixed count).
    pub stopped: String,
    /// Busy loops that ran beside it (`--load`, or the quick suite's loaded rows).
    pub load: usize,
}

impl CaseResult {
    /// Bundles a case with its statistics.
    pub fn new(case: &Case, arms: Vec<ArmStats>, stopped: String) -> CaseResult {
        CaseResult {
            case: case.clone(),
            arms,
            stopped,
            load: crate::load::active(),
        }
    }

    /// One JSON line per arm.
    pub fn json_lines(&self, meta: &Meta) -> Vec<String> {
        self.arms
            .iter()
            .map(|a| {
                let mut line = a.to_json(self.case.bench, meta, &self.stopped);
                // The load is part of the case (the quick suite runs cases idle and loaded).
                line["config"]["load"] = serde_json::json!(self.load);
                line.to_string()
            })
            .collect()
    }
}

/// A finished two-arm case (`kernel`, `pagepipe`) on the metric `mbps`, for tests.
#[cfg(test)]
pub fn two_arm_fixture(base: &[Run], other: &[Run]) -> CaseResult {
    let case = Case {
        bench: "t",
        title: "bw test".into(),
        arms: vec![
            super::case::Arm::new("kernel"),
            super::case::Arm::new("pagepipe"),
        ],
        columns: vec![Column::new("mbps", "MB/s", 1.0, 0)],
    };
    let b = samples_of(base);
    let arms = vec![
        ArmStats::new("kernel", "kernel", base, None),
        ArmStats::new("pagepipe", "pagepipe", other, Some(&b)),
    ];
    CaseResult::new(&case, arms, String::new())
}

/// `median [lo, hi]` in the column's unit.
fn fmt_median(ci: &MedianCi, col: &Column) -> String {
    let (d, s) = (col.decimals, col.scale);
    format!(
        "{:.*} [{:.*}, {:.*}]",
        d,
        ci.median / s,
        d,
        ci.lo / s,
        d,
        ci.hi / s
    )
}

/// `2.41x [2.20, 2.63]`, with ` (noise)` when the interval contains 1.
pub fn fmt_ratio(r: &RatioCi) -> String {
    let noise = if r.distinct() { "" } else { " (noise)" };
    format!("{:.2}x [{:.2}, {:.2}]{noise}", r.ratio, r.lo, r.hi)
}

/// The table rows of every case: one per (case, column, arm).
fn rows(results: &[CaseResult]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for r in results {
        for col in &r.case.columns {
            for (i, arm) in r.arms.iter().enumerate() {
                let Some(m) = arm.metric(col.metric) else {
                    continue;
                };
                let ratio = match (&m.ratio, i) {
                    (_, 0) => "baseline".to_string(),
                    (Some(ratio), _) => fmt_ratio(ratio),
                    (None, _) => "-".to_string(),
                };
                rows.push(vec![
                    r.case.title.clone(),
                    col.label.to_string(),
                    arm.label.clone(),
                    fmt_median(&m.ci, col),
                    ratio,
                ]);
            }
        }
    }
    rows
}

/// The baseline's label if every case has the same one.
fn common_baseline(results: &[CaseResult]) -> Option<&str> {
    let mut labels = results
        .iter()
        .filter_map(|r| r.arms.first())
        .map(|a| a.label.as_str());
    let first = labels.next()?;
    labels.all(|l| l == first).then_some(first)
}

/// Prints the heading, the reproduction line, the table and what its intervals mean.
pub fn print_report(heading: &str, meta: &Meta, results: &[CaseResult], runs: Runs) {
    println!("{heading}");
    println!("reproduce: {}", meta.line());
    let vs = common_baseline(results).map_or("vs baseline [95% CI]".to_string(), |b| {
        format!("vs {b} [95% CI]")
    });
    print_table(
        &["case", "metric", "transport", "median [95% CI]", &vs],
        &rows(results),
    );
    let counts = results.iter().flat_map(|r| r.arms.iter().map(|a| a.runs));
    let (fewest, most) = counts.fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
    let n = if fewest >= most {
        most.to_string() // one count for every arm (or no arms at all)
    } else {
        format!("{fewest} to {most}")
    };
    let how = if runs == Runs::Auto {
        " (--runs auto)"
    } else {
        ""
    };
    println!(
        "median [95% CI]: {n} runs per transport{how}, alternating; the interval is two order \
         statistics (distribution-free)."
    );
    println!(
        "vs: Hodges-Lehmann ratio over the paired runs with its signed-rank 95% interval; > 1 is \
         better (throughput: this/baseline; time, CPU, faults: baseline/this); (noise): the \
         interval contains 1."
    );
    print_level_warning(results);
}

/// Says so when too few runs left the intervals below 95%.
fn print_level_warning(results: &[CaseResult]) {
    let levels = results
        .iter()
        .flat_map(|r| &r.arms)
        .flat_map(|a| &a.metrics)
        .flat_map(|m| [Some(m.ci.level), m.ratio.map(|r| r.level)])
        .flatten();
    let lowest = levels.fold(1.0, f64::min);
    if lowest < LEVEL - 1e-9 {
        println!(
            "warning: with this few runs the intervals are min..max and cover only {:.1}%; \
             use --runs 6 or more for 95%.",
            lowest * 100.0
        );
    }
}

/// Prints rows as an aligned Markdown table.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let parts: Vec<String> = cells
            .zip(&width)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        println!("| {} |", parts.join(" | "));
    };
    line(&mut header.iter().copied());
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(w + 2)).collect();
    println!("|{}|", rule.join("|"));
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Record;

    fn runs(values: &[f64], faults: f64) -> Vec<Run> {
        values
            .iter()
            .map(|&v| {
                let mut r = Record::new("t", "x");
                r.metric("mbps", v);
                r.metric("lat_avg_ns", 1e9 / v);
                r.metric("minor_faults", faults);
                r.into()
            })
            .collect()
    }

    #[test]
    fn json_carries_medians_intervals_ratios_and_samples() {
        let base = runs(&[100.0, 110.0, 90.0, 105.0, 95.0, 100.0], 0.0);
        let fast = runs(&[200.0, 220.0, 180.0, 210.0, 190.0, 200.0], 0.0);
        let b = samples_of(&base);
        let arm = ArmStats::new("pagepipe", "pagepipe", &fast, Some(&b));
        let meta = Meta::collect();
        let v = arm.to_json("t", &meta, "");
        let m = &v["metrics"];
        assert_eq!(m["mbps"], json!(200.0));
        assert!(m["mbps_ci_lo"].as_f64().unwrap() >= 180.0);
        assert!((m["ratio_mbps"].as_f64().unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(m["distinct_mbps"], json!(true));
        // Latency: lower is better, so the ratio is baseline / this, also 2.
        assert!((m["ratio_lat_avg_ns"].as_f64().unwrap() - 2.0).abs() < 1e-9);
        // Zero faults on both sides: no ratio at all.
        assert!(m.get("ratio_minor_faults").is_none());
        assert_eq!(v["samples"]["mbps"].as_array().unwrap().len(), 6);
        assert!(v["meta"]["kernel"].is_string());
        let result = two_arm_fixture(&base, &fast);
        let rendered = rows(&[result]);
        assert_eq!(rendered[0][4], "baseline");
        assert!(rendered[1][4].starts_with("2.00x ["), "{:?}", rendered[1]);
    }

    #[test]
    fn ratio_cells_say_noise_when_the_interval_holds_one() {
        let r = RatioCi {
            ratio: 1.02,
            lo: 0.97,
            hi: 1.08,
            level: 0.95,
        };
        assert_eq!(fmt_ratio(&r), "1.02x [0.97, 1.08] (noise)");
    }
}
