//! `idle`, a case of the quick suite (no subcommand of its own): the CPU of a reader blocked on
//! an empty pipe.

use crate::child::{spawn, Between, CHILD_GRACE};
use crate::common::{Record, Usage};
use crate::harness::{Case, Column};
use crate::transport::{self, PipeConfig, Transport};
use crate::workloads::lmbench::{arms, check_between};
use std::io::{self, Read, Write};
use std::time::Duration;

/// CPU used by a reader blocked on an empty pipe for `wait`, as a percentage of one core: a
/// reader thread's own `RUSAGE_THREAD`, or a reader process's whole `RUSAGE_SELF`.
pub fn idle_once(t: Transport, wait: Duration, between: Between) -> io::Result<Record> {
    check_between(t, between)?;
    let (mut ws, mut rs) = transport::open(t, &PipeConfig::default(), 1, 1)?;
    let mut r = rs.pop().expect("one reader");
    let reader = move || -> io::Result<f64> {
        let usage = || match between {
            Between::Threads => Usage::thread(),
            Between::Processes => Usage::now(),
        };
        let u0 = usage();
        let mut b = [0u8; 1];
        r.read_exact(&mut b)?;
        Ok(usage().since(u0).cpu_s)
    };
    let reader = spawn(between, reader, || ws.clear())?;
    let mut w = ws.pop().expect("one writer");
    std::thread::sleep(wait);
    w.write_all(b"x")?;
    let cpu = reader.join(wait + CHILD_GRACE)?;
    let mut rec = Record::new("idle", t.name())
        .config("between", between.name())
        .config("wait_s", wait.as_secs_f64());
    rec.metric("cpu_pct", cpu / wait.as_secs_f64() * 100.0);
    Ok(rec)
}

/// CPU of a reader blocked on an empty pipe for `wait`.
pub fn idle_case(transports: &[Transport], between: Between, wait: Duration) -> Case {
    Case {
        bench: "idle",
        title: between.title(&format!("idle reader {} s", wait.as_secs_f64())),
        arms: arms(transports),
        columns: vec![Column::new("cpu_pct", "% of a core", 1.0, 3)],
    }
}
