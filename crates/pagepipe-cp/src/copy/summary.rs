//! [`Summary`]: what a run copied and left behind, and how it is printed.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

/// What a run copied and left behind.
#[derive(Debug, Default)]
pub struct Summary {
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) elapsed: Duration,
    pub(super) verified: u64,
    /// Errors reported and skipped over, as cp does (a directory without -r, a special file).
    pub(super) skipped: u64,
    /// The modes the writers and readers resolved to.
    pub(super) write_modes: BTreeSet<String>,
    pub(super) read_modes: BTreeSet<String>,
    /// Source bytes from regular files (not stdin) and how much of them is cached after the copy.
    pub(super) src_bytes: u64,
    pub(super) src_cached: u64,
    /// Of the source bytes, how many were cached before the copy read them (a `RWF_DONTCACHE`
    /// read leaves pages that were cached before it where they are).
    pub(super) src_cached_before: u64,
    pub(super) dst_bytes: u64,
    pub(super) dst_cached: u64,
    pub(super) from_stdin: bool,
}

impl Summary {
    /// Whether an error was reported along the way (the exit status must say so).
    pub fn failed(&self) -> bool {
        self.skipped > 0
    }
}

/// `1536` -> `1.50 KiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn join(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "-".into()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join("+")
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "copied {} file(s), {} in {:.2} s ({:.0} MB/s); writes: {}, reads: {}",
            self.files,
            human(self.bytes),
            secs,
            if secs > 0.0 {
                self.bytes as f64 / 1e6 / secs
            } else {
                0.0
            },
            join(&self.write_modes),
            join(&self.read_modes),
        )?;
        if self.verified > 0 {
            writeln!(
                f,
                "verified {} file(s): each copy, read back, has the xxh3-128 of the data read",
                self.verified
            )?;
        }
        let src = if self.from_stdin && self.src_bytes == 0 {
            "- (standard input)".to_string()
        } else {
            let before = if self.src_cached_before > 0 {
                format!("; {} was cached before", human(self.src_cached_before))
            } else {
                String::new()
            };
            // The cache is counted in whole pages: no more than the file, for a small one.
            let cached = self.src_cached.min(self.src_bytes);
            format!(
                "{} of {} ({:.1}%{before})",
                human(cached),
                human(self.src_bytes),
                pct(cached, self.src_bytes)
            )
        };
        writeln!(
            f,
            "left in the page cache: source {src}, destination {} of {} ({:.1}%)",
            human(self.dst_cached.min(self.dst_bytes)),
            human(self.dst_bytes),
            pct(self.dst_cached.min(self.dst_bytes), self.dst_bytes)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(2 << 30), "2.00 GiB");
        assert_eq!(pct(1, 0), 0.0);
    }
}
