//! The options every subcommand shares (`--runs`, `--budget`, `--aa`, `--baseline`, `--plot`,
//! `--json`) and the run counts they default to.

use std::path::PathBuf;

/// How many runs: a fixed count, or until the ratios are known to ±5%.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs {
    /// Exactly this many runs of every arm.
    Fixed(usize),
    /// At least [`MIN_RUNS`], then one more round at a time until every ratio's interval
    /// is within ±5% of the ratio or `--budget` runs out.
    Auto,
}

/// The fewest runs with a 95% interval (the median's and the paired ratio's both reach 95%
/// from 6 runs): the default where runs are long, and where `--runs auto` starts looking.
pub const MIN_RUNS: usize = 6;
/// The runs a comparison needs to find a 5% difference with 80% power on this machine's
/// run-time distribution (simulated in `stats`' tests): the default of a benchmark.
pub const RECOMMENDED_RUNS: usize = 12;

fn parse_runs(s: &str) -> Result<Runs, String> {
    if s == "auto" {
        return Ok(Runs::Auto);
    }
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(Runs::Fixed(n)),
        _ => Err(format!(
            "--runs {s:?} must be a positive number or \"auto\""
        )),
    }
}

fn parse_budget(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(b) if b > 0.0 && b.is_finite() => Ok(b),
        _ => Err(format!(
            "--budget {s:?} must be a positive number of seconds"
        )),
    }
}

/// The options every subcommand (and the quick suite) shares.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunArgs {
    /// Print one JSON object per line instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Runs per transport and configuration, alternating: a number, or `auto` (repeat until
    /// every ratio's 95% interval is within ±5% of it, or --budget runs out). Default: 12 for
    /// comparisons (pipe, bw, lat, frag), 6 in the quick suite and for dontcache.
    #[arg(long, global = true, value_parser = parse_runs)]
    pub runs: Option<Runs>,
    /// With `--runs auto`: seconds each configuration may take before it stops anyway.
    #[arg(long, global = true, default_value_t = 60.0, value_parser = parse_budget)]
    pub budget: f64,
    /// A/A check: run the first transport twice; the second is labelled NAME#2 and should come
    /// out "(noise)" against the first.
    #[arg(long, global = true)]
    pub aa: bool,
    /// Compare every transport with this one (a transport name) instead of the first listed.
    #[arg(long, global = true, value_name = "NAME")]
    pub baseline: Option<String>,
    /// Run N busy loops (`while :; do :; done`, one process each, default priority) during the
    /// measurement, so both arms share the cores with the same load in the same run (every
    /// table and JSON line says the load it ran under). The quick suite, run idle, adds rows
    /// with 1 and 2 busy loops of its own.
    #[arg(long, global = true, default_value_t = 0, value_name = "N")]
    pub load: usize,
    /// Write SVG charts into DIR (created if missing): medians with their intervals and the
    /// ratios, and latency CDFs where the benchmark records latencies.
    #[arg(long, global = true, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_parse() {
        assert_eq!(parse_runs("auto"), Ok(Runs::Auto));
        assert_eq!(parse_runs("7"), Ok(Runs::Fixed(7)));
        assert!(parse_runs("0").is_err());
        assert!(parse_budget("-1").is_err());
    }
}
