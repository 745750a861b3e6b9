//! The one harness every benchmark runs in: transport variants ("arms"), alternation across
//! repeated runs, `--runs N` / `--runs auto`, `--aa`, statistics, tables, JSON lines, SVG
//! charts and the progress bar.
//!
//! A benchmark module holds only its workload. It describes each configuration it measures as
//! a [`Case`] (its arms and the metrics its table shows) and hands [`Harness::run`] a closure
//! that measures one arm once and returns a [`Run`]. Everything else happens here, the same way
//! for every benchmark, so a new one (`splice`, `notify`, `async`) touches no other module.

mod args;
mod case;
mod meta;
mod metric;
mod plot;
mod report;

pub use args::{RunArgs, Runs, MIN_RUNS, RECOMMENDED_RUNS};
pub use case::{Arm, Case, Column, Run};
pub use report::print_table;

use indicatif::{ProgressBar, ProgressStyle};
use report::{ArmStats, CaseResult};
use std::io::{self, IsTerminal};
use std::time::{Duration, Instant};

/// `--runs auto` stops here whatever the budget says.
const AUTO_MAX_RUNS: usize = 1000;
/// `--runs auto`'s target: every ratio interval within this fraction of its ratio.
const AUTO_TARGET: f64 = 0.05;

/// An arm as the harness runs it: which of the case's arms it measures, and its names.
struct Slot {
    arm: usize,
    name: String,
    label: String,
    runs: Vec<Run>,
    /// Why it was dropped (`ErrorKind::Unsupported` from its first run), if it was.
    skipped: Option<String>,
}

/// Runs cases and reports them. Build one per invocation, call [`Harness::run`] for each case,
/// then [`Harness::finish`].
pub struct Harness {
    opts: RunArgs,
    name: &'static str,
    runs: Runs,
    meta: meta::Meta,
    bar: ProgressBar,
    results: Vec<CaseResult>,
    notes: Vec<String>,
}

impl Harness {
    /// A harness for the invocation `name` (the chart's file name), running `default_runs`
    /// unless `--runs` says otherwise.
    ///
    /// # Errors
    /// The `--plot` directory cannot be created.
    pub fn new(opts: &RunArgs, name: &'static str, default_runs: usize) -> io::Result<Harness> {
        if let Some(dir) = &opts.plot {
            std::fs::create_dir_all(dir)
                .map_err(|e| io::Error::new(e.kind(), format!("--plot {}: {e}", dir.display())))?;
        }
        Ok(Harness {
            runs: opts.runs.unwrap_or(Runs::Fixed(default_runs)),
            opts: opts.clone(),
            name,
            meta: meta::Meta::collect(),
            bar: progress_bar(opts.json),
            results: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// Adds a line printed under the table (not in JSON).
    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// Measures every arm of `case` repeatedly, alternating (round 1 in order, round 2 in
    /// reverse, ...), with `measure(i)` measuring `case.arms[i]` once. An arm whose run fails
    /// with `ErrorKind::Unsupported` is dropped from the case with a note; any other error ends
    /// the benchmark. Prints the case's JSON lines at once with `--json`.
    ///
    /// # Errors
    /// The first error of `measure` that is not `Unsupported`, with the case and arm named;
    /// `InvalidInput` when `--baseline` names no arm of the case.
    pub fn run(
        &mut self,
        case: Case,
        mut measure: impl FnMut(usize) -> io::Result<Run>,
    ) -> io::Result<()> {
        let mut slots = self.slots(&case)?;
        let start = Instant::now();
        let mut rounds = 0;
        let stopped = loop {
            self.bar
                .inc_length(slots.iter().filter(|s| s.skipped.is_none()).count() as u64);
            self.run_round(&case, &mut slots, rounds, &mut measure)?;
            rounds += 1;
            if let Some(why) = self.stop_reason(&case, &slots, rounds, start.elapsed()) {
                break why;
            }
        };
        let result = CaseResult::new(&case, slots_into_stats(slots), stopped);
        if self.bar.is_hidden() && !self.opts.json {
            // No progress bar (stderr is not a terminal): a line per case instead of silence.
            eprintln!(
                "{}: {} rounds in {:.1} s",
                case.title,
                rounds,
                start.elapsed().as_secs_f64()
            );
        }
        if self.opts.json {
            for line in result.json_lines(&self.meta) {
                println!("{line}");
            }
        }
        self.results.push(result);
        Ok(())
    }

    /// The arms as run: `--baseline` first, `--aa` adds a copy of the first as `NAME#2`.
    fn slots(&self, case: &Case) -> io::Result<Vec<Slot>> {
        let mut order: Vec<usize> = (0..case.arms.len()).collect();
        if let Some(base) = &self.opts.baseline {
            let Some(pos) = case
                .arms
                .iter()
                .position(|a| &a.name == base || &a.label == base)
            else {
                let names: Vec<&str> = case.arms.iter().map(|a| a.label.as_str()).collect();
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "--baseline {base:?} is not a transport of {} ({})",
                        case.title,
                        names.join(", ")
                    ),
                ));
            };
            order.remove(pos);
            order.insert(0, pos);
        }
        let slot = |arm: usize, suffix: &str| Slot {
            arm,
            name: format!("{}{suffix}", case.arms[arm].name),
            label: format!("{}{suffix}", case.arms[arm].label),
            runs: Vec::new(),
            skipped: None,
        };
        let mut slots: Vec<Slot> = order.iter().map(|&a| slot(a, "")).collect();
        if self.opts.aa && !slots.is_empty() {
            slots.insert(1, slot(order[0], "#2"));
        }
        Ok(slots)
    }

    /// One alternation round: every arm once, in order on even rounds and reversed on odd
    /// ones, so neither arm always runs first (or right after the same other arm).
    fn run_round(
        &mut self,
        case: &Case,
        slots: &mut [Slot],
        round: usize,
        measure: &mut impl FnMut(usize) -> io::Result<Run>,
    ) -> io::Result<()> {
        let mut order: Vec<usize> = (0..slots.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let slot = &mut slots[i];
            if slot.skipped.is_some() {
                continue;
            }
            self.bar
                .set_message(format!("{} {}", case.title, slot.label));
            match measure(slot.arm) {
                Ok(mut run) => {
                    debug_assert_eq!(run.record.bench, case.bench, "a record of another bench");
                    run.record.transport = slot.name.clone();
                    slot.runs.push(run);
                }
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    slot.skipped = Some(e.to_string());
                    slot.runs.clear();
                    self.notes
                        .push(format!("{}: skipped {}: {e}", case.title, slot.label));
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{} {}: {e}", case.title, slot.label),
                    ))
                }
            }
            self.bar.inc(1);
        }
        Ok(())
    }

    /// `Some(why)` when the case has run enough rounds.
    fn stop_reason(
        &mut self,
        case: &Case,
        slots: &[Slot],
        rounds: usize,
        elapsed: Duration,
    ) -> Option<String> {
        match self.runs {
            Runs::Fixed(n) => (rounds >= n).then(String::new),
            Runs::Auto if rounds < MIN_RUNS => None,
            Runs::Auto => {
                let widest = widest_interval(case, slots);
                let why = if widest <= AUTO_TARGET {
                    format!(
                        "every interval within ±{:.0}% after {rounds} runs",
                        AUTO_TARGET * 100.0
                    )
                } else if elapsed.as_secs_f64() >= self.opts.budget {
                    format!(
                        "budget of {} s ran out after {rounds} runs; widest interval ±{:.1}%",
                        self.opts.budget,
                        widest * 100.0
                    )
                } else if rounds >= AUTO_MAX_RUNS {
                    format!(
                        "stopped at {rounds} runs; widest interval ±{:.1}%",
                        widest * 100.0
                    )
                } else {
                    return None;
                };
                self.notes
                    .push(format!("--runs auto: {}: {why}", case.title));
                Some(why)
            }
        }
    }

    /// Prints the table (unless `--json`) and writes the charts (with `--plot`).
    ///
    /// # Errors
    /// A chart cannot be written.
    pub fn finish(self, heading: &str) -> io::Result<()> {
        self.bar.finish_and_clear();
        if !self.opts.json {
            report::print_report(heading, &self.meta, &self.results, self.runs);
            for note in &self.notes {
                println!("{note}");
            }
        } else {
            for note in &self.notes {
                eprintln!("{note}");
            }
        }
        if let Some(dir) = &self.opts.plot {
            let written = plot::write(dir, self.name, heading, &self.meta, &self.results)?;
            for path in written {
                eprintln!("chart: {}", path.display());
            }
        }
        Ok(())
    }
}

/// The widest relative half-width among the primary metric's ratio intervals (or, with one
/// arm, its median interval); infinite when there is nothing to measure it by yet.
fn widest_interval(case: &Case, slots: &[Slot]) -> f64 {
    let metric = case.columns[0].metric;
    let live: Vec<&Slot> = slots.iter().filter(|s| s.skipped.is_none()).collect();
    let samples =
        |s: &Slot| -> Vec<f64> { s.runs.iter().filter_map(|r| r.record.get(metric)).collect() };
    let Some(base) = live.first().map(|s| samples(s)) else {
        return 0.0;
    };
    if live.len() == 1 {
        let ci = crate::stats::median_ci(&base);
        return if ci.median > 0.0 {
            (ci.hi - ci.lo) / 2.0 / ci.median
        } else {
            0.0
        };
    }
    live[1..]
        .iter()
        .map(|s| {
            crate::stats::ratio_ci(&base, &samples(s)).map_or(0.0, |r| r.relative_half_width())
        })
        .fold(0.0, f64::max)
}

fn slots_into_stats(slots: Vec<Slot>) -> Vec<ArmStats> {
    let live: Vec<Slot> = slots
        .into_iter()
        .filter(|s| s.skipped.is_none() && !s.runs.is_empty())
        .collect();
    let base = live.first().map(|s| report::samples_of(&s.runs));
    live.iter()
        .enumerate()
        .map(|(i, s)| ArmStats::new(&s.name, &s.label, &s.runs, base.as_ref().filter(|_| i > 0)))
        .collect()
}

/// A progress bar on a terminal; hidden when stderr is piped or with `--json`. Its length
/// grows as rounds are started.
fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg:40} [{bar:30}] {pos}/{len} {elapsed_precise}")
            .expect("a valid progress template")
            .progress_chars("=> "),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Record;

    fn fake_case(arms: &[&str]) -> Case {
        Case {
            bench: "fake",
            title: "fake 1".into(),
            arms: arms.iter().map(|a| Arm::new(*a)).collect(),
            columns: vec![Column::new("mbps", "MB/s", 1.0, 0)],
        }
    }

    fn quiet(runs: Runs) -> RunArgs {
        RunArgs {
            json: true,
            runs: Some(runs),
            budget: 60.0,
            ..RunArgs::default()
        }
    }

    #[test]
    fn runs_alternate_and_aa_adds_a_labelled_copy() {
        let mut opts = quiet(Runs::Fixed(3));
        opts.aa = true;
        let mut h = Harness::new(&opts, "fake", 3).unwrap();
        let mut order = Vec::new();
        h.run(fake_case(&["kernel", "pagepipe"]), |arm| {
            order.push(arm);
            let mut r = Record::new("fake", "x");
            r.metric("mbps", 100.0 * (arm + 1) as f64);
            Ok(r.into())
        })
        .unwrap();
        // slots: kernel, kernel#2, pagepipe; round 2 reversed
        assert_eq!(order, [0, 0, 1, 1, 0, 0, 0, 0, 1]);
        let names: Vec<&str> = h.results[0].arms.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["kernel", "kernel#2", "pagepipe"]);
    }

    #[test]
    fn auto_stops_once_the_ratio_is_known() {
        let mut h = Harness::new(&quiet(Runs::Auto), "fake", 3).unwrap();
        let mut n = 0;
        h.run(fake_case(&["a", "b"]), |arm| {
            n += 1;
            let mut r = Record::new("fake", "x");
            r.metric(
                "mbps",
                if arm == 0 { 100.0 } else { 200.0 } + (n % 3) as f64,
            );
            Ok(r.into())
        })
        .unwrap();
        assert_eq!(h.results[0].arms[0].runs, MIN_RUNS);
        assert!(h.notes[0].contains("within ±5%"), "{:?}", h.notes);
    }

    #[test]
    fn unsupported_arms_are_dropped_and_other_errors_name_the_case() {
        let mut h = Harness::new(&quiet(Runs::Fixed(2)), "fake", 2).unwrap();
        h.run(fake_case(&["a", "b"]), |arm| {
            if arm == 1 {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "no such thing here",
                ));
            }
            let mut r = Record::new("fake", "x");
            r.metric("mbps", 1.0);
            Ok(r.into())
        })
        .unwrap();
        assert_eq!(h.results[0].arms.len(), 1);
        assert!(h.notes[0].contains("skipped b"));
        let err = h
            .run(fake_case(&["a"]), |_| {
                Err(io::Error::new(io::ErrorKind::NotFound, "gone"))
            })
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("fake 1 a: gone"), "{err}");
        let mut opts = quiet(Runs::Fixed(1));
        opts.baseline = Some("zzz".into());
        let mut h = Harness::new(&opts, "fake", 1).unwrap();
        let err = h.run(fake_case(&["a"]), |_| unreachable!()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
