//! `--load N`: busy loops beside the measurement, as users run us (issue 38).
//!
//! Each loop is a shell running `while :; do :; done`, one process each, at default priority,
//! so both arms of a comparison share the cores with the same load in the same run. The loops
//! die with the benchmark: they are killed when the [`Load`] is dropped, and the kernel kills
//! each one if the benchmark process dies first (`PR_SET_PDEATHSIG`).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Busy loops running now (0: idle), for the tables' headers and the JSON lines.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// The number of busy loops running now.
pub fn active() -> usize {
    // Relaxed: only the main thread starts and stops loads; others read it for labels.
    ACTIVE.load(Ordering::Relaxed)
}

/// "idle" or "N busy loop(s)", for titles.
pub fn label(n: usize) -> String {
    match n {
        0 => "idle".to_string(),
        1 => "1 busy loop".to_string(),
        n => format!("{n} busy loops"),
    }
}

/// Busy loops that run until dropped.
pub struct Load {
    children: Vec<Child>,
}

impl Load {
    /// Starts `n` busy loops (none for 0).
    ///
    /// # Errors
    /// `sh` cannot be started (the loops already started are stopped).
    pub fn start(n: usize) -> io::Result<Load> {
        let mut load = Load {
            children: Vec::with_capacity(n),
        };
        for _ in 0..n {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            // SAFETY: the closure runs in the child between fork and exec and calls only
            // prctl(2), which is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = cmd
                .spawn()
                .map_err(|e| io::Error::new(e.kind(), format!("--load: cannot start sh: {e}")))?;
            load.children.push(child);
            ACTIVE.fetch_add(1, Ordering::Relaxed);
        }
        // Let the scheduler place them before anything is measured.
        if n > 0 {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(load)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
            ACTIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_run_while_held_and_stop_when_dropped() {
        let load = Load::start(2).unwrap();
        assert_eq!(active(), 2);
        let pids: Vec<u32> = load.children.iter().map(Child::id).collect();
        for &p in &pids {
            assert!(std::path::Path::new(&format!("/proc/{p}")).exists());
        }
        drop(load);
        assert_eq!(active(), 0);
        for p in pids {
            // Reaped by the drop: no such process (or a recycled pid that is not our sh).
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            assert!(comm.trim() != "sh" || p == std::process::id());
        }
        assert_eq!(label(0), "idle");
        assert_eq!(label(2), "2 busy loops");
    }
}
