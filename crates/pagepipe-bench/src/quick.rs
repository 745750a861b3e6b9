//! The quick suite (no subcommand): every benchmark briefly, every transport side by side, in
//! about a minute, as one table with the ratios to the kernel.

use crate::common::{fmt_summary, print_json, print_table, progress, Record, Summary};
use crate::lmbench::{bw_once, idle_once, lat_once};
use crate::pipe_bench::{self, alternate, ratio_cell, summarise, summary_of, variants, Workload};
use crate::transport::{PipeConfig, Transport};
use pagepipe::PoolPolicy;
use std::io;
use std::time::Duration;

const RUNS: usize = 3;

/// One row of the table: a metric of one benchmark for each transport measured.
struct Row {
    bench: String,
    metric: &'static str,
    scale: f64,
    lower_is_better: bool,
    cells: Vec<(Transport, Summary)>,
}

impl Row {
    fn render(&self) -> Vec<String> {
        let cell = |t: Transport| {
            self.cells
                .iter()
                .find(|(ct, _)| *ct == t)
                .map_or("-".to_string(), |(_, s)| {
                    fmt_summary(&s.scaled(self.scale), 2)
                })
        };
        let get = |t: Transport| self.cells.iter().find(|(ct, _)| *ct == t).map(|(_, s)| s);
        let ratio = match (get(Transport::Pagepipe), get(Transport::Kernel)) {
            (Some(p), Some(k)) if self.lower_is_better => ratio_cell(k, p),
            (Some(p), Some(k)) if !self.lower_is_better => ratio_cell(p, k),
            _ => "-".into(),
        };
        vec![
            self.bench.clone(),
            self.metric.to_string(),
            cell(Transport::Kernel),
            cell(Transport::Unix),
            cell(Transport::Pagepipe),
            ratio,
        ]
    }
}

fn rows_from(
    bench: &str,
    vs: &[Transport],
    results: &[Vec<Record>],
    metrics: &[(&'static str, &'static str, f64, bool)],
    json: bool,
) -> Vec<Row> {
    let mut rows: Vec<Row> = metrics
        .iter()
        .map(|&(_, label, scale, lower)| Row {
            bench: bench.into(),
            metric: label,
            scale,
            lower_is_better: lower,
            cells: vec![],
        })
        .collect();
    for (&t, runs) in vs.iter().zip(results) {
        let (rec, sums) = summarise(runs, &metrics.iter().map(|m| m.0).collect::<Vec<_>>());
        if json {
            print_json(&rec);
        }
        for (row, m) in rows.iter_mut().zip(metrics) {
            row.cells.push((t, *summary_of(&sums, m.0)));
        }
    }
    rows
}

pub fn run(json: bool) -> io::Result<()> {
    let kp = [Transport::Kernel, Transport::Pagepipe];
    let all = [Transport::Kernel, Transport::Unix, Transport::Pagepipe];
    let pipe_cfg = PipeConfig {
        pipe_size: 1 << 20,
        pool: PoolPolicy::default(),
        slot_size: 4096,
    };
    let steps = (2 * kp.len() + 2 * all.len()) * RUNS + kp.len();
    let bar = progress(steps as u64, "quick suite", json);
    let mut rows = Vec::new();
    let second = Duration::from_secs(1);
    for (w, r) in [(1, 1), (5, 5)] {
        let wl = Workload {
            writers: w,
            readers: r,
            msgsize: 64 * 1024,
            duration: second,
            pipe: pipe_cfg,
        };
        let vs = variants(&kp, &[PoolPolicy::default()]);
        let results = alternate(&vs, RUNS, &bar, |v| pipe_bench::measure(v, &wl))?;
        rows.extend(rows_from(
            &format!("pipe {w}w/{r}r 64K"),
            &kp,
            &results,
            &[
                ("mbps", "MB/s", 1.0, false),
                ("lat_avg_ns", "write avg µs", 1e3, true),
                ("minor_faults", "page faults", 1.0, true),
            ],
            json,
        ));
    }
    let bw_cfg = PipeConfig::default();
    let vs = variants(&all, &[PoolPolicy::default()]);
    let results = alternate(&vs, RUNS, &bar, |v| {
        bw_once(v.transport, &bw_cfg, 64 * 1024, second)
    })?;
    rows.extend(rows_from(
        "bw 64K",
        &all,
        &results,
        &[("mbps", "MB/s", 1.0, false)],
        json,
    ));
    let results = alternate(&vs, RUNS, &bar, |v| lat_once(v.transport, second / 2))?;
    rows.extend(rows_from(
        "lat 1B",
        &all,
        &results,
        &[("lat_avg_ns", "round trip µs", 1e3, true)],
        json,
    ));
    // Both idle readers block at the same time: 2 s in all.
    let idle: Vec<_> = kp
        .iter()
        .map(|&t| std::thread::spawn(move || idle_once(t, Duration::from_secs(2))))
        .collect();
    let mut idle_results = Vec::new();
    for h in idle {
        idle_results.push(vec![h.join().expect("idle thread panicked")?]);
        bar.inc(1);
    }
    rows.extend(rows_from(
        "idle reader 2s",
        &kp,
        &idle_results,
        &[("cpu_pct", "% of a core", 1.0, true)],
        json,
    ));
    bar.finish_and_clear();
    if !json {
        println!("pagepipe-bench quick suite: median [95% CI] of {RUNS} runs; 'pagepipe vs kernel' > 1 means pagepipe is better");
        let rendered: Vec<Vec<String>> = rows.iter().map(Row::render).collect();
        print_table(
            &[
                "bench",
                "metric",
                "kernel",
                "unix",
                "pagepipe",
                "pagepipe vs kernel",
            ],
            &rendered,
        );
    }
    Ok(())
}
