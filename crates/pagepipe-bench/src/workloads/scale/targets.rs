//! Issue 23's targets beside what `scale` measured: the medians of both transports, the ratio
//! pagepipe/kernel with its paired 95% interval, and whether each target is met.

use super::Args;
use crate::common::Record;
use crate::harness::print_table;
use crate::stats::{median, ratio_ci};

/// Whether a target is met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Met,
    NotMet,
    /// The interval holds the bound: more runs would tell.
    Unclear,
    /// The target does not apply to this run (or nothing to judge it by).
    NotApplicable,
}

impl Verdict {
    fn text(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "NOT met",
            Verdict::Unclear => "unclear (interval holds the bound)",
            Verdict::NotApplicable => "n/a",
        }
    }

    /// `value <= bound`, judged on an interval `[lo, hi]` of `value`.
    fn at_most(lo: f64, hi: f64, bound: f64) -> Verdict {
        if hi <= bound {
            Verdict::Met
        } else if lo > bound {
            Verdict::NotMet
        } else {
            Verdict::Unclear
        }
    }
}

/// The values of `metric` over `records`, if every record has it.
fn values(records: &[Record], metric: &str) -> Option<Vec<f64>> {
    let v: Option<Vec<f64>> = records.iter().map(|r| r.get(metric)).collect();
    v.filter(|v| !v.is_empty())
}

/// A target row: what, kernel, pagepipe, ratio, goal, verdict.
struct Row {
    what: String,
    kernel: String,
    pagepipe: String,
    ratio: String,
    goal: String,
    verdict: Verdict,
}

impl Row {
    fn cells(&self) -> Vec<String> {
        vec![
            self.what.clone(),
            self.kernel.clone(),
            self.pagepipe.clone(),
            self.ratio.clone(),
            self.goal.clone(),
            self.verdict.text().to_string(),
        ]
    }
}

/// pagepipe/kernel of `metric`: `(ratio, lo, hi, text)`, with the paired interval when the runs
/// pair up, else the ratio of the medians as its own bounds.
fn ratio(kernel: &[f64], pagepipe: &[f64]) -> Option<(f64, f64, f64, String)> {
    if let Some(r) = ratio_ci(kernel, pagepipe) {
        let text = format!("{:.2}x [{:.2}, {:.2}]", r.ratio, r.lo, r.hi);
        return Some((r.ratio, r.lo, r.hi, text));
    }
    let (k, p) = (median(kernel), median(pagepipe));
    (k > 0.0 && p.is_finite()).then(|| (p / k, p / k, p / k, format!("{:.2}x", p / k)))
}

/// The rows of every target that `kernel`'s and `pagepipe`'s runs can judge.
fn rows(kernel: &[Record], pagepipe: &[Record], a: &Args) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut row = |what: String,
                   metric: &str,
                   (scale, decimals, unit): (f64, usize, &str),
                   goal: &str,
                   judge: &dyn Fn(&[f64], &[f64]) -> Verdict| {
        let (Some(k), Some(p)) = (values(kernel, metric), values(pagepipe, metric)) else {
            return;
        };
        let shown = |v: &[f64]| format!("{:.*} {unit}", decimals, median(v) / scale);
        rows.push(Row {
            what,
            kernel: shown(&k),
            pagepipe: shown(&p),
            ratio: ratio(&k, &p).map_or("-".into(), |r| r.3),
            goal: goal.to_string(),
            verdict: judge(&k, &p),
        });
    };
    row(
        "descriptors per idle pipe".into(),
        "fds_per_pipe",
        (1.0, 2, "fds"),
        "<= 3 fds",
        &|_, p| Verdict::at_most(median(p), median(p), 3.0),
    );
    let default_size = a.pipe_size == pagepipe::DEFAULT_CAPACITY;
    row(
        "address space per pipe".into(),
        "vm_kib_per_pipe",
        (1024.0, 1, "MiB"),
        if default_size {
            "<= 64 MiB (64 KiB pipe)"
        } else {
            "<= 64 MiB, stated for 64 KiB pipes"
        },
        &|_, p| match default_size {
            true => Verdict::at_most(median(p), median(p), 64.0 * 1024.0),
            false => Verdict::NotApplicable,
        },
    );
    row(
        "create+drop p50".into(),
        "create_drop_p50_ns",
        (1e3, 2, "µs"),
        "<= 3x kernel",
        &|k, p| ratio(k, p).map_or(Verdict::NotApplicable, |r| Verdict::at_most(r.1, r.2, 3.0)),
    );
    row(
        format!("live pipes under {} fds", a.fd_limit),
        "live_pipes",
        (1.0, 0, "pipes"),
        ">= 2/3 of kernel",
        // ratio >= 2/3 is kernel/pagepipe <= 3/2.
        &|k, p| ratio(p, k).map_or(Verdict::NotApplicable, |r| Verdict::at_most(r.1, r.2, 1.5)),
    );
    let has = |m: &str| values(kernel, m).is_some() && values(pagepipe, m).is_some();
    let (what, metric) = if has("memory_kib_per_pipe") {
        (
            "idle memory per pipe (memcg, heap exact)",
            "memory_kib_per_pipe",
        )
    } else if has("memcg_kib_per_pipe") {
        ("idle memory per pipe (memcg)", "memcg_kib_per_pipe")
    } else {
        ("idle memory per pipe (PSS; no memcg)", "pss_kib_per_pipe")
    };
    row(
        what.into(),
        metric,
        (1.0, 1, "KiB"),
        "<= kernel + 4 KiB",
        &|k, p| {
            let extra = median(p) - median(k);
            Verdict::at_most(extra, extra, 4.0)
        },
    );
    rows
}

/// Prints the targets table (to stderr with `--json`, whose stdout is JSON lines only).
pub fn print(kernel: &[Record], pagepipe: &[Record], a: &Args, json: bool) {
    let rows = rows(kernel, pagepipe, a);
    let header = [
        "issue 23 target",
        "kernel",
        "pagepipe",
        "pagepipe/kernel [95% CI]",
        "goal",
        "verdict",
    ];
    if json {
        for r in &rows {
            eprintln!("target: {}", r.cells().join(" | "));
        }
        return;
    }
    println!();
    println!("issue 23's targets, from the medians above:");
    let cells: Vec<Vec<String>> = rows.iter().map(Row::cells).collect();
    print_table(&header, &cells);
    if rows.iter().any(|r| r.what.contains("no memcg")) {
        println!(
            "no readable memory cgroup: the idle memory row is PSS only, without the kernel's \
             pipe buffers, inodes and page tables"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(pairs: &[(&str, f64)], n: usize) -> Vec<Record> {
        (0..n)
            .map(|_| {
                let mut r = Record::new("scale", "x");
                for (k, v) in pairs {
                    r.metric(k, *v);
                }
                r
            })
            .collect()
    }

    #[test]
    fn todays_pagepipe_misses_and_a_kernel_like_one_meets() {
        let a = Args {
            transport: Vec::new(),
            iterations: 1,
            pipes: 1,
            fd_limit: 1024,
            pipe_size: pagepipe::DEFAULT_CAPACITY,
        };
        let kernel = runs(
            &[
                ("fds_per_pipe", 2.0),
                ("vm_kib_per_pipe", 0.5),
                ("create_drop_p50_ns", 7000.0),
                ("live_pipes", 509.0),
                ("memcg_kib_per_pipe", 6.4),
            ],
            6,
        );
        let today = runs(
            &[
                ("fds_per_pipe", 5.0),
                ("vm_kib_per_pipe", 1_040.0 * 1024.0),
                ("create_drop_p50_ns", 60_000.0),
                ("live_pipes", 200.0),
                ("memcg_kib_per_pipe", 40.0),
            ],
            6,
        );
        let verdicts: Vec<Verdict> = rows(&kernel, &today, &a)
            .iter()
            .map(|r| r.verdict)
            .collect();
        assert_eq!(verdicts, [Verdict::NotMet; 5]);
        let goal = runs(
            &[
                ("fds_per_pipe", 3.0),
                ("vm_kib_per_pipe", 1024.0),
                ("create_drop_p50_ns", 14_000.0),
                ("live_pipes", 340.0),
                ("memcg_kib_per_pipe", 10.0),
            ],
            6,
        );
        let verdicts: Vec<Verdict> = rows(&kernel, &goal, &a).iter().map(|r| r.verdict).collect();
        assert_eq!(verdicts, [Verdict::Met; 5]);
        assert_eq!(Verdict::at_most(2.5, 3.5, 3.0), Verdict::Unclear);
    }
}
