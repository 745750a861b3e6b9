//! `pagepipe-bench compare OLD.jsonl NEW.jsonl`: benchstat for our JSON lines.
//!
//! Records are matched on (bench, transport, config); for every metric both sides have raw
//! samples of, the table shows the old and new medians, the change in %, its 95% interval
//! (two-sample Hodges–Lehmann on log ratios), the Mann–Whitney p-value, and "~" in place of the
//! change where p >= 0.05: nothing stands out of the noise.

use crate::harness::print_table;
use crate::stats::{mann_whitney, median, shift_ci};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Options of `pagepipe-bench compare`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSON lines of the old run (`pagepipe-bench ... --json > old.jsonl`).
    pub old: PathBuf,
    /// JSON lines of the new run.
    pub new: PathBuf,
}

/// Significance level below which a change is shown.
const ALPHA: f64 = 0.05;

/// What identifies a record across files: bench, transport and its configuration.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    bench: String,
    transport: String,
    /// The config object as canonical JSON (serde_json sorts object keys).
    config: String,
}

/// Raw samples per metric, in file order of first appearance.
type Groups = Vec<(Key, BTreeMap<String, Vec<f64>>)>;

/// Runs the comparison and prints the table.
///
/// # Errors
/// A file cannot be read (its `ErrorKind`, with the path), or holds a line that is not a
/// pagepipe-bench JSON record with samples (`InvalidData`, with file and line); `InvalidData`
/// when the two files share no (bench, transport, config).
pub fn run(a: &Args) -> io::Result<()> {
    let old = load(&a.old)?;
    let new = load(&a.new)?;
    let rows = rows(&old, &new);
    if rows.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} and {} share no (bench, transport, config) with samples of the same metric",
                a.old.display(),
                a.new.display()
            ),
        ));
    }
    println!(
        "compare: old {} vs new {}",
        a.old.display(),
        a.new.display()
    );
    print_table(
        &[
            "bench",
            "transport",
            "config",
            "metric",
            "old",
            "new",
            "change",
            "95% CI",
            "p",
        ],
        &rows,
    );
    println!(
        "old/new: medians (runs); change: Hodges-Lehmann estimate of new/old - 1 with its 95% \
         interval; p: Mann-Whitney two-sided; ~: p >= {ALPHA} (no difference stands out)"
    );
    let fewest = old
        .iter()
        .chain(&new)
        .flat_map(|(_, m)| m.values().map(Vec::len))
        .min();
    if fewest.is_some_and(|n| n < 4) {
        println!(
            "warning: with fewer than 4 runs on a side p < {ALPHA} may be out of reach; \
             save runs with --runs 6 or more"
        );
    }
    for (key, _) in old.iter().filter(|(k, _)| !new.iter().any(|(n, _)| n == k)) {
        println!(
            "only in old: {} {} {}",
            key.bench, key.transport, key.config
        );
    }
    for (key, _) in new.iter().filter(|(k, _)| !old.iter().any(|(o, _)| o == k)) {
        println!(
            "only in new: {} {} {}",
            key.bench, key.transport, key.config
        );
    }
    Ok(())
}

fn invalid(path: &Path, line: usize, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}:{line}: {what}", path.display()),
    )
}

/// Reads a JSON lines file into groups; records with the same key are pooled.
fn load(path: &Path) -> io::Result<Groups> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let mut groups: Groups = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (key, samples) = parse_record(line).map_err(|what| invalid(path, i + 1, &what))?;
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, have)) => {
                for (metric, values) in samples {
                    have.entry(metric).or_default().extend(values);
                }
            }
            None => groups.push((key, samples)),
        }
    }
    if groups.is_empty() {
        return Err(invalid(path, 0, "no records"));
    }
    Ok(groups)
}

/// One record's key and samples, or what is wrong with it.
fn parse_record(line: &str) -> Result<(Key, BTreeMap<String, Vec<f64>>), String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let text = |field: &str| {
        v.get(field)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("no \"{field}\" string"))
    };
    let config = v
        .get("config")
        .and_then(Value::as_object)
        .ok_or("no \"config\" object")?;
    let samples = v.get("samples").and_then(Value::as_object).ok_or(
        "no \"samples\" object (written before pagepipe-bench kept raw runs? rerun with --json)",
    )?;
    let key = Key {
        bench: text("bench")?,
        transport: text("transport")?,
        config: Value::Object(config.clone()).to_string(),
    };
    Ok((key, numbers(samples)?))
}

fn numbers(samples: &Map<String, Value>) -> Result<BTreeMap<String, Vec<f64>>, String> {
    samples
        .iter()
        .map(|(metric, values)| {
            let values = values
                .as_array()
                .ok_or_else(|| format!("samples of {metric:?} is not an array"))?
                .iter()
                .map(|x| {
                    x.as_f64()
                        .ok_or_else(|| format!("a sample of {metric:?} is not a number"))
                })
                .collect::<Result<Vec<f64>, String>>()?;
            Ok((metric.clone(), values))
        })
        .collect()
}

/// Table rows for every key and metric both sides have.
fn rows(old: &Groups, new: &Groups) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for (key, old_samples) in old {
        let Some((_, new_samples)) = new.iter().find(|(k, _)| k == key) else {
            continue;
        };
        for (metric, o) in old_samples {
            let Some(n) = new_samples.get(metric).filter(|n| !n.is_empty()) else {
                continue;
            };
            if o.is_empty() {
                continue;
            }
            let mut row = vec![
                key.bench.clone(),
                key.transport.clone(),
                compact_config(&key.config),
                metric.clone(),
            ];
            row.extend(change_cells(o, n));
            rows.push(row);
        }
    }
    rows
}

/// old, new, change, interval, p for one metric.
fn change_cells(old: &[f64], new: &[f64]) -> Vec<String> {
    let p = mann_whitney(old, new);
    let (mo, mn) = (median(old), median(new));
    let shift = shift_ci(old, new);
    let pct = |r: f64| format!("{:+.1}%", (r - 1.0) * 100.0);
    let (change, interval) = match shift {
        Some(s) if p < ALPHA => (pct(s.ratio), format!("[{}, {}]", pct(s.lo), pct(s.hi))),
        Some(s) => ("~".into(), format!("[{}, {}]", pct(s.lo), pct(s.hi))),
        None if p < ALPHA && mo > 0.0 => (pct(mn / mo), "-".into()),
        None => ("~".into(), "-".into()),
    };
    vec![
        format!("{} ({})", short(mo), old.len()),
        format!("{} ({})", short(mn), new.len()),
        change,
        interval,
        format!("{p:.3}"),
    ]
}

/// A number in at most about 6 significant digits.
fn short(x: f64) -> String {
    if x.abs() >= 100.0 || x == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

/// `{"readers":1,"writers":1}` as `readers=1 writers=1`.
fn compact_config(json: &str) -> String {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(json) else {
        return json.to_string();
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pagepipe-compare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn line(transport: &str, mbps: &[f64]) -> String {
        serde_json::json!({
            "bench": "bw", "transport": transport, "config": {"size": 65536},
            "metrics": {}, "samples": {"mbps": mbps},
        })
        .to_string()
    }

    #[test]
    fn a_shift_is_shown_and_noise_is_a_tilde() {
        let base = [100.0, 102.0, 98.0, 101.0, 99.0, 100.5, 99.5, 100.2];
        let faster: Vec<f64> = base.iter().map(|x| x * 1.2).collect();
        let old = write(
            "old.jsonl",
            &format!("{}\n{}\n", line("kernel", &base), line("pagepipe", &base)),
        );
        let new = write(
            "new.jsonl",
            &format!(
                "{}\n\n{}\n",
                line("kernel", &base),
                line("pagepipe", &faster)
            ),
        );
        let rows = rows(&load(&old).unwrap(), &load(&new).unwrap());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0][6], "~", "{:?}", rows[0]);
        assert_eq!(rows[1][6], "+20.0%", "{:?}", rows[1]);
        assert_eq!(rows[1][2], "size=65536");
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let missing = load(Path::new("/nonexistent/old.jsonl")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        assert!(missing.to_string().contains("/nonexistent/old.jsonl"));
        let garbled = write(
            "garbled.jsonl",
            &format!("{}\n{{not json\n", line("kernel", &[1.0])),
        );
        let e = load(&garbled).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("garbled.jsonl:2: not JSON"), "{e}");
        let old_format = write(
            "old-format.jsonl",
            r#"{"bench":"bw","transport":"k","config":{},"metrics":{"mbps":1}}"#,
        );
        let e = load(&old_format).unwrap_err();
        assert!(e.to_string().contains(":1: no \"samples\""), "{e}");
        let empty = write("empty.jsonl", "\n");
        assert_eq!(load(&empty).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
