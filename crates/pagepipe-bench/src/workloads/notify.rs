//! `notify`: notification pipes (seed 002, Linux's watch_queue). Posters post records for a
//! fixed time while this thread drains them; reported: posts per second (every call, queued or
//! lost), records queued per second, and the share lost. With a stalling reader (it sleeps
//! after every read), the loss rate a full ring gives.
//!
//! The kernel's figure: a kernel with `CONFIG_WATCH_QUEUE` lets user space make a notification
//! pipe (`pipe2(O_NOTIFICATION_PIPE)`), but only the kernel posts into it (key changes through
//! `keyctl(KEYCTL_WATCH_KEY)`). The kernel arm probes for it and is dropped with a note when the
//! kernel has none (`ENOPKG`), as on the machine this was written on; posting through key
//! updates is not implemented, for want of a kernel to check it against.

use crate::child::{spawn, Between, Flags, CHILD_GRACE};
use crate::common::Record;
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use pagepipe::{Builder, Notification, Notifier};
use std::io::{self, Read};
use std::time::{Duration, Instant};

/// Options of `pagepipe-bench notify`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Poster counts, comma separated (each a case).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub posters: Vec<usize>,
    /// Records the pipe holds (1..=512; Linux rounds up to a power of two).
    #[arg(long, default_value_t = 256)]
    pub records: usize,
    /// Payload bytes per record (at most 119).
    #[arg(long, default_value_t = 32)]
    pub payload: usize,
    /// Microseconds the reader sleeps after each read in the stalling case (0: no such case).
    #[arg(long, default_value_t = 1000)]
    pub stall_us: u64,
    /// Seconds measured per run (after a warm-up of a fifth of it).
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Where the posters run, comma separated: threads, or forked children.
    #[arg(long, value_delimiter = ',', default_value = "threads")]
    pub between: Vec<Between>,
}

/// One configuration.
#[derive(Clone, Copy)]
struct Load {
    posters: usize,
    records: usize,
    payload: usize,
    stall: Option<Duration>,
    duration: Duration,
    between: Between,
}

/// `pagepipe-bench notify`.
///
/// # Errors
/// `InvalidInput` for no posters or a payload above 119 bytes; a run's error.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    if a.posters.contains(&0) || a.payload > pagepipe::MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--posters {:?} must be positive and --payload {} at most {}",
                a.posters,
                a.payload,
                pagepipe::MAX_PAYLOAD
            ),
        ));
    }
    let mut harness = Harness::new(opts, "notify", RECOMMENDED_RUNS)?;
    let stall = (a.stall_us > 0).then(|| Duration::from_micros(a.stall_us));
    let stall_posters = a.posters.iter().copied().max().unwrap_or(1);
    for &between in &a.between {
        let mut loads: Vec<Load> = a
            .posters
            .iter()
            .map(|&posters| Load {
                posters,
                records: a.records,
                payload: a.payload,
                stall: None,
                duration: Duration::from_secs_f64(a.duration),
                between,
            })
            .collect();
        if let Some(stall) = stall {
            loads.push(Load {
                posters: stall_posters,
                stall: Some(stall),
                ..loads[0]
            });
        }
        for load in loads {
            let mut title = format!("notify {} poster(s)", load.posters);
            if let Some(s) = load.stall {
                title += &format!(", reader stalls {} µs per read", s.as_micros());
            }
            harness.run(case(&between.title(&title)), |i| {
                if i == 0 {
                    kernel_once()
                } else {
                    pagepipe_once(&load).map(Run::from)
                }
            })?;
        }
    }
    harness.finish(&format!(
        "notify: {} records, {} B payloads, {} s per run",
        a.records, a.payload, a.duration
    ))
}

fn case(title: &str) -> Case {
    Case {
        bench: "notify",
        title: title.into(),
        arms: vec![Arm::new("kernel"), Arm::new("pagepipe")],
        columns: vec![
            Column::new("posts_per_s", "M posts/s", 1e6, 2),
            Column::new("records_per_s", "M records/s", 1e6, 2),
            Column::new("loss_pct", "lost %", 1.0, 1),
        ],
    }
}

/// The kernel arm: dropped (`Unsupported`) with the reason.
fn kernel_once() -> io::Result<Run> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints; O_EXCL is O_NOTIFICATION_PIPE.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_EXCL | libc::O_CLOEXEC) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this kernel has no notification pipes (pipe2(O_NOTIFICATION_PIPE): {e})"),
        ));
    }
    // SAFETY: both descriptors are ours.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the kernel posts only its own records (key notifications); not measured here",
    ))
}

/// One pagepipe run: posters post until stopped, counting inside the measured window; this
/// thread drains (stalling after each read if asked).
fn pagepipe_once(l: &Load) -> io::Result<Record> {
    let (n, r) = Builder::new().notifications(l.records).build()?;
    let flags = Flags::new()?;
    let mut r = Some(r);
    let mut workers = Vec::new();
    for id in 0..l.posters {
        let (n, f, payload) = (n.clone(), flags.clone(), l.payload);
        workers.push(spawn(
            l.between,
            move || post_until_stopped(&n, id as u8, payload, &f),
            || drop(r.take()),
        )?);
    }
    drop(n);
    let mut r = r.take().expect("the parent keeps the reader");
    let mut buf = vec![0u8; 4096];
    let warm = Instant::now() + l.duration / 5;
    while Instant::now() < warm {
        drain_once(&mut r, &mut buf, l.stall)?;
    }
    let t0 = Instant::now();
    flags.set_measuring(true);
    while t0.elapsed() < l.duration {
        drain_once(&mut r, &mut buf, l.stall)?;
    }
    flags.set_measuring(false);
    let secs = t0.elapsed().as_secs_f64();
    flags.stop();
    drop(r);
    let (mut ok, mut lost) = (0u64, 0u64);
    for w in workers {
        let (o, x) = w.join(l.duration + CHILD_GRACE)?;
        ok += o;
        lost += x;
    }
    let mut rec = Record::new("notify", "pagepipe")
        .config("posters", l.posters)
        .config("records", l.records)
        .config("payload", l.payload)
        .config("stall_us", l.stall.map_or(0, |s| s.as_micros() as u64))
        .config("between", l.between.name());
    rec.metric("posts_per_s", (ok + lost) as f64 / secs);
    rec.metric("records_per_s", ok as f64 / secs);
    let total = (ok + lost).max(1) as f64;
    rec.metric("loss_pct", lost as f64 / total * 100.0);
    Ok(rec)
}

fn drain_once(
    r: &mut pagepipe::NotificationReader,
    buf: &mut [u8],
    stall: Option<Duration>,
) -> io::Result<()> {
    let _records_read = r.read(buf)?; // whole records; the posters count them
    if let Some(s) = stall {
        std::thread::sleep(s);
    }
    Ok(())
}

/// A poster: posts until told to stop (or the reader is gone); returns (queued, lost) counted
/// while the window was open.
fn post_until_stopped(
    n: &Notifier,
    id: u8,
    payload: usize,
    flags: &Flags,
) -> io::Result<(u64, u64)> {
    let mut rec = Notification {
        kind: 1,
        subtype: 0,
        id,
        info_flags: 0,
        payload: vec![id; payload],
    };
    let (mut ok, mut lost) = (0u64, 0u64);
    let mut i = 0u32;
    while !flags.stopped() {
        i = i.wrapping_add(1);
        rec.subtype = i as u8; // the record changes every post
        let queued = match n.post(&rec) {
            Ok(q) => q,
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => break,
            Err(e) => return Err(e),
        };
        if flags.measuring() {
            if queued {
                ok += 1;
            } else {
                lost += 1;
            }
        }
    }
    Ok((ok, lost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posters_post_and_a_stalled_reader_loses() {
        let _serial = crate::child::tests::serial();
        for between in [Between::Threads, Between::Processes] {
            let l = Load {
                posters: 2,
                records: 8,
                payload: 16,
                stall: Some(Duration::from_millis(5)),
                duration: Duration::from_millis(50),
                between,
            };
            let rec = pagepipe_once(&l).unwrap();
            assert!(rec.get("posts_per_s").unwrap() > 0.0);
            assert!(rec.get("loss_pct").unwrap() > 0.0, "{between:?}");
        }
        let e = kernel_once().err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }
}
