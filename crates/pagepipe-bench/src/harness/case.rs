//! What a benchmark hands the harness: a [`Case`] of [`Arm`]s and [`Column`]s, and the [`Run`]
//! that measuring one arm once returns.

use crate::common::{Histogram, Record};

/// One way of moving the bytes (or allocating, or writing) that a benchmark compares.
#[derive(Clone, Debug)]
pub struct Arm {
    /// The JSON `transport` (e.g. `pagepipe`).
    pub name: String,
    /// The label in tables and charts (e.g. `pagepipe/adaptive:2`).
    pub label: String,
}

impl Arm {
    /// An arm whose label is its name.
    pub fn new(name: impl Into<String>) -> Arm {
        let name = name.into();
        Arm {
            label: name.clone(),
            name,
        }
    }

    /// An arm with a table label of its own.
    pub fn labelled(name: impl Into<String>, label: impl Into<String>) -> Arm {
        Arm {
            name: name.into(),
            label: label.into(),
        }
    }
}

/// A metric shown in the table (every metric goes to JSON).
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// The metric's JSON name, with its unit (`mbps`, `lat_p99_ns`).
    pub metric: &'static str,
    /// Its table label, with the unit after scaling (`MB/s`, `p99 µs`).
    pub label: &'static str,
    /// Values are divided by this in the table and charts (1e3 for ns shown as µs).
    pub scale: f64,
    /// Decimals in the table.
    pub decimals: usize,
}

impl Column {
    /// A column.
    pub const fn new(
        metric: &'static str,
        label: &'static str,
        scale: f64,
        decimals: usize,
    ) -> Column {
        Column {
            metric,
            label,
            scale,
            decimals,
        }
    }
}

/// One configuration of a benchmark, measured on every arm.
#[derive(Clone, Debug)]
pub struct Case {
    /// The JSON `bench`.
    pub bench: &'static str,
    /// Its name in tables and charts (`pipe 1w/1r`, `seq-write`).
    pub title: String,
    /// What is compared; the first (or `--baseline`) is the one every ratio is relative to.
    pub arms: Vec<Arm>,
    /// Table rows; the first is the primary metric (charts, `--runs auto`).
    pub columns: Vec<Column>,
}

/// What one run of one arm measured.
pub struct Run {
    /// Its metrics and configuration (the harness sets `transport`).
    pub record: Record,
    /// Latencies it recorded, if any: merged over runs into the CDF chart.
    pub latency: Option<Histogram>,
}

impl From<Record> for Run {
    fn from(record: Record) -> Run {
        Run {
            record,
            latency: None,
        }
    }
}
