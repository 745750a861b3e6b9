//! What a reader needs to reproduce a result: the commit, the kernel, the CPU, the command line,
//! the time and how loaded the machine was. Carried by every JSON record and printed above every table.

use serde_json::{json, Value};

/// Reproduction information, collected once per invocation.
#[derive(Clone, Debug)]
pub struct Meta {
    /// Git commit the binary was built from (`+dirty` with uncommitted changes), or the crate
    /// version outside a git checkout.
    pub commit: String,
    /// `uname -r`.
    pub kernel: String,
    /// `model name` of /proc/cpuinfo.
    pub cpu: String,
    /// CPUs this process may use.
    pub cores: usize,
    /// The command line, arguments space-separated (quoted where they hold spaces).
    pub cmdline: String,
    /// Start of the invocation, UTC, ISO-8601.
    pub time: String,
    /// Busy loops running beside the measurement (`--load`).
    pub load: usize,
    /// The load averages over 1, 5 and 15 minutes at the start (`/proc/loadavg`): what else the
    /// machine was running (a benchmark's own processes are not running yet).
    pub loadavg: Option<[f64; 3]>,
}

impl Meta {
    /// Reads everything now.
    pub fn collect() -> Meta {
        Meta {
            commit: option_env!("PAGEPIPE_BENCH_COMMIT")
                .map(str::to_string)
                .unwrap_or_else(|| format!("pagepipe-bench {}", env!("CARGO_PKG_VERSION"))),
            kernel: kernel_release(),
            cpu: cpu_model(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cmdline: command_line(),
            time: utc_iso8601(std::time::SystemTime::now()),
            load: crate::load::active(),
            loadavg: load_averages(),
        }
    }

    /// The JSON object `{"commit", "kernel", "cpu", "cores", "cmdline", "time", "load",
    /// "loadavg"}` (`load`: the busy loops of `--load`; `loadavg`: `[1 min, 5 min, 15 min]`, or
    /// null where `/proc/loadavg` cannot be read).
    pub fn to_json(&self) -> Value {
        json!({
            "commit": self.commit,
            "kernel": self.kernel,
            "cpu": self.cpu,
            "cores": self.cores,
            "cmdline": self.cmdline,
            "time": self.time,
            "load": self.load,
            "loadavg": self.loadavg,
        })
    }

    /// One line for a table header or a chart.
    pub fn line(&self) -> String {
        let loadavg = self.loadavg.map_or("load average unknown".into(), |l| {
            format!("load average {:.2}", l[0])
        });
        format!(
            "commit {} · Linux {} · {} ({} cores) · {} · {} · {} · {}",
            self.commit,
            self.kernel,
            self.cpu,
            self.cores,
            crate::load::label(self.load),
            loadavg,
            self.time,
            self.cmdline
        )
    }
}

fn kernel_release() -> String {
    // SAFETY: utsname is plain data; zeroed is a valid value for uname(2) to overwrite.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname (uname(2)).
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    // SAFETY: uname(2) wrote a NUL-terminated string into `release`.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    release.to_string_lossy().into_owned()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The three load averages of `/proc/loadavg` (proc(5)), if readable.
fn load_averages() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

fn command_line() -> String {
    let mut args = std::env::args();
    let program = args.next().unwrap_or_default();
    let program = std::path::Path::new(&program)
        .file_name()
        .map_or(program.clone(), |f| f.to_string_lossy().into_owned());
    std::iter::once(program)
        .chain(args.map(|a| if a.contains(' ') { format!("{a:?}") } else { a }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `2026-11-22T08:15:03Z` for `t` (UTC).
pub fn utc_iso8601(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Year, month, day of the `days`-th day after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn utc_times_format() {
        assert_eq!(utc_iso8601(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // a leap day
        assert_eq!(utc_iso8601(t), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn meta_has_every_field() {
        let m = Meta::collect().to_json();
        for key in [
            "commit", "kernel", "cpu", "cores", "cmdline", "time", "load", "loadavg",
        ] {
            assert!(m.get(key).is_some(), "{key}");
        }
    }
}
