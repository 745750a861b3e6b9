//! `pagepipe-bench peer-death`: peers killed with SIGKILL at random moments.
//!
//! Writers killed: forked writer processes stream checked records (at most 4096 bytes, so each
//! write is atomic: writer id, sequence number, length, checksum) into one pipe that a forked
//! reader drains and checks; the parent kills every writer at a random moment of its life and
//! measures from the kill of the last one to the reader's end of file. Reader killed: the parent
//! kills the reader instead and measures until the last writer gets `BrokenPipe`. A detection
//! slower than `--hang-ms` is counted as a hang and the stuck process killed. Every record is
//! checked: lost (a gap, or fewer records than a writer saw published), duplicated, torn.

use crate::child::{mono_ns, reader_hung_up, spawn, Between, Shm, Worker};
use crate::common::{Histogram, Record};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs};
use crate::transport::{self, PipeConfig, Transport, R, W};
use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Options of `pagepipe-bench peer-death`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Transports to compare, alternating (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "kernel,pagepipe")]
    pub transport: Vec<Transport>,
    /// Who is killed, comma separated: every writer of a trial, or the reader.
    #[arg(long, value_delimiter = ',', default_value = "writer,reader")]
    pub kill: Vec<Victim>,
    /// Trials per transport and victim: each ends with one death to detect.
    #[arg(long, default_value_t = 200)]
    pub kills: usize,
    /// Writer processes per trial.
    #[arg(long, default_value_t = 2)]
    pub writers: usize,
    /// Each victim is killed at a random moment of its first this many ms.
    #[arg(long, default_value_t = 20)]
    pub max_life_ms: u64,
    /// A detection slower than this (ms) counts as a hang; the stuck process is killed.
    #[arg(long, default_value_t = 5000)]
    pub hang_ms: u64,
    /// Pipe capacity in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    pub pipe_size: usize,
}

/// Who dies in a trial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Victim {
    /// Every writer (the reader must see end of file after every published record).
    Writer,
    /// The reader (blocked writers must get BrokenPipe).
    Reader,
}

/// Record header: magic u32, writer u32, sequence u64, length u32, checksum u32.
const HEADER: usize = 24;
/// The largest record: one atomic pipe write (`PIPE_BUF`).
const MAX_RECORD: usize = 4096;
const MAGIC: u32 = 0x5050_4452;

/// What one trial found.
#[derive(Clone, Copy, Debug, Default)]
struct Trial {
    /// Time from the kill to detection; `None` for a hang.
    detect: Option<Duration>,
    /// The other side ended (end of file, BrokenPipe) before the kill.
    early: u64,
    records: u64,
    lost: u64,
    duplicated: u64,
    torn: u64,
    /// Bytes that writes starting more than [`LATE`] after the reader's kill still accepted.
    late: u64,
}

/// A write that starts this long after the last reader was killed must fail (issue 25).
const LATE: Duration = Duration::from_millis(2);

/// The shared words of a trial, for `writers` writers: each writer's published count, then
/// the reader's kill time (`mono_ns`, 0 before the kill), then each writer's late bytes.
fn shm_words(writers: usize) -> usize {
    2 * writers + 1
}

/// A small xorshift generator: kill moments and record lengths need no better.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (n > 0), close enough.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// FNV-1a over a record with its checksum field taken as zero.
fn checksum(rec: &[u8]) -> u32 {
    let mut h = 0x811c_9dc5u32;
    for (i, &b) in rec.iter().enumerate() {
        let b = if (20..24).contains(&i) { 0 } else { b };
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

/// Fills `rec` (its whole length) as record `seq` of writer `id`.
fn encode(rec: &mut [u8], id: u32, seq: u64) {
    rec[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    rec[4..8].copy_from_slice(&id.to_le_bytes());
    rec[8..16].copy_from_slice(&seq.to_le_bytes());
    let len = rec.len() as u32;
    rec[16..20].copy_from_slice(&len.to_le_bytes());
    for (i, b) in rec[HEADER..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(i as u8) ^ id as u8;
    }
    let sum = checksum(rec);
    rec[20..24].copy_from_slice(&sum.to_le_bytes());
}

/// A record's (writer, sequence, length) if its header is plausible for `writers` writers.
fn header(h: &[u8], writers: usize) -> Option<(usize, u64, usize)> {
    let word = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
    let seq = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    let (id, len) = (word(4) as usize, word(16) as usize);
    let ok = word(0) == MAGIC && id < writers && (HEADER..=MAX_RECORD).contains(&len);
    ok.then_some((id, seq, len))
}

/// A writer: streams records until the reader hangs up (then returns when it noticed, in
/// `mono_ns`) or it is killed. After each write returns it counts the record as published.
fn stream(mut w: W, id: usize, published: &Shm, seed: u64) -> io::Result<u64> {
    let mut rng = Rng::new(seed);
    let mut buf = [0u8; MAX_RECORD];
    let words = published.words();
    let writers = (words.len() - 1) / 2;
    for seq in 0.. {
        let len = HEADER + rng.below((MAX_RECORD - HEADER + 1) as u64) as usize;
        encode(&mut buf[..len], id as u32, seq);
        let started = mono_ns();
        if let Err(e) = w.write_all(&buf[..len]) {
            let when = mono_ns();
            return if reader_hung_up(&e) { Ok(when) } else { Err(e) };
        }
        // Acquire: pairs with the parent's Release store of the kill time.
        let killed = words[writers].load(Ordering::Acquire);
        if killed != 0 && started > killed + LATE.as_nanos() as u64 {
            words[writers + 1 + id].fetch_add(len as u64, Ordering::Relaxed);
        }
        // Release: the parent reads it after the writer is dead and reaped.
        words[id].store(seq + 1, Ordering::Release);
    }
    unreachable!("2^64 records")
}

/// Reads until `buf` is full or end of file; returns the bytes read.
fn read_full(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The reader of a writer-death trial: checks every record until end of file. Returns
/// `[eof_ns, records, gaps, duplicated, torn, next sequence of each writer...]`. After a torn
/// record the stream cannot be framed again: the rest is drained unchecked.
fn check(mut r: R, writers: usize) -> io::Result<Vec<u64>> {
    let mut next = vec![0u64; writers];
    let (mut records, mut gaps, mut dups, mut torn) = (0, 0, 0, 0);
    let mut buf = [0u8; MAX_RECORD];
    let mut framed = true;
    loop {
        if !framed {
            if read_full(&mut r, &mut buf)? == 0 {
                break;
            }
            continue;
        }
        match read_full(&mut r, &mut buf[..HEADER])? {
            0 => break,
            HEADER => {}
            _ => {
                torn += 1;
                break;
            }
        }
        let Some((id, seq, len)) = header(&buf[..HEADER], writers) else {
            torn += 1;
            framed = false;
            continue;
        };
        if read_full(&mut r, &mut buf[HEADER..len])? < len - HEADER {
            torn += 1;
            break;
        }
        if checksum(&buf[..len]).to_le_bytes() != buf[20..24] {
            torn += 1;
            framed = false;
            continue;
        }
        records += 1;
        if seq < next[id] {
            dups += 1;
        } else {
            gaps += seq - next[id];
            next[id] = seq + 1;
        }
    }
    let eof = mono_ns();
    let mut out = vec![eof, records, gaps, dups, torn];
    out.extend(next);
    Ok(out)
}

/// The reader of a reader-death trial: drains until killed (or end of file).
fn drain(mut r: R) -> io::Result<()> {
    let mut buf = [0u8; MAX_RECORD];
    while read_full(&mut r, &mut buf)? > 0 {}
    Ok(())
}

/// Forks `a.writers` writers streaming into `ws`, each dropping in its child what it does not
/// use (and `rs`, if the parent still holds readers).
fn fork_writers(
    ws: &mut Vec<W>,
    rs: &mut Vec<R>,
    published: &Arc<Shm>,
    rng: &mut Rng,
) -> io::Result<Vec<Worker<u64>>> {
    let mut writers = Vec::new();
    while let Some(w) = ws.pop() {
        let (id, p, seed) = (ws.len(), published.clone(), rng.next());
        let f = move || stream(w, id, &p, seed);
        writers.push(spawn(Between::Processes, f, || {
            ws.clear();
            rs.clear();
        })?);
    }
    Ok(writers)
}

/// `mono_ns` difference as a duration (zero if `later` is earlier).
fn since(earlier: u64, later: u64) -> Duration {
    Duration::from_nanos(later.saturating_sub(earlier))
}

/// One trial in which every writer is killed.
fn writers_killed(t: Transport, cfg: &PipeConfig, a: &Args, rng: &mut Rng) -> io::Result<Trial> {
    let (mut ws, mut rs) = transport::open(t, cfg, a.writers, 1)?;
    let published = Arc::new(Shm::new(shm_words(a.writers))?);
    let (r, n) = (rs.pop().expect("one reader"), a.writers);
    let reader = spawn(Between::Processes, move || check(r, n), || ws.clear())?;
    let start = mono_ns();
    let writers = fork_writers(&mut ws, &mut rs, &published, rng)?;
    let mut moments: Vec<(u64, &Worker<u64>)> = writers
        .iter()
        .map(|w| (rng.below(a.max_life_ms * 1_000_000 + 1), w))
        .collect();
    moments.sort_by_key(|m| m.0);
    let mut last_kill = start;
    for (at, w) in moments {
        std::thread::sleep(since(mono_ns(), start + at));
        last_kill = mono_ns();
        w.kill();
    }
    let hang = Duration::from_millis(a.hang_ms);
    let mut trial = Trial::default();
    match reader.join(hang) {
        Ok(out) => {
            let eof = out[0];
            trial.detect = Some(since(last_kill, eof));
            trial.early = u64::from(eof < last_kill);
            (trial.records, trial.lost, trial.duplicated, trial.torn) =
                (out[1], out[2], out[3], out[4]);
            for (id, next) in out[5..].iter().enumerate() {
                // Acquire: pairs with the writer's Release store (it is dead and reaped below,
                // but the reader's end of file already came after its death).
                let published = published.words()[id].load(Ordering::Acquire);
                trial.lost += published.saturating_sub(*next);
            }
        }
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
        Err(e) => return Err(e),
    }
    for w in writers {
        w.reap_killed(hang)?;
    }
    Ok(trial)
}

/// One trial in which the reader is killed.
fn reader_killed(t: Transport, cfg: &PipeConfig, a: &Args, rng: &mut Rng) -> io::Result<Trial> {
    let (mut ws, mut rs) = transport::open(t, cfg, a.writers, 1)?;
    let published = Arc::new(Shm::new(shm_words(a.writers))?);
    let r = rs.pop().expect("one reader");
    let reader = spawn(Between::Processes, move || drain(r), || ws.clear())?;
    let writers = fork_writers(&mut ws, &mut rs, &published, rng)?;
    std::thread::sleep(Duration::from_nanos(
        rng.below(a.max_life_ms * 1_000_000 + 1),
    ));
    let killed = mono_ns();
    // Release: the writers compare their writes' start times with it.
    published.words()[a.writers].store(killed, Ordering::Release);
    reader.kill();
    let hang = Duration::from_millis(a.hang_ms);
    let mut trial = Trial {
        detect: Some(Duration::ZERO),
        ..Trial::default()
    };
    for w in writers {
        match w.join(hang) {
            Ok(noticed) => {
                trial.early += u64::from(noticed < killed);
                trial.detect = trial.detect.map(|d| d.max(since(killed, noticed)));
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => trial.detect = None,
            Err(e) => return Err(e),
        }
    }
    reader.reap_killed(hang)?;
    trial.late = published.words()[a.writers + 1..]
        .iter()
        .map(|w| w.load(Ordering::Acquire))
        .sum();
    Ok(trial)
}

/// Runs `a.kills` trials on `t` and sums them up as one run.
fn measure(t: Transport, victim: Victim, a: &Args, seed: u64) -> io::Result<Run> {
    let cfg = PipeConfig {
        pipe_size: a.pipe_size,
        ..PipeConfig::default()
    };
    let mut rng = Rng::new(seed);
    let mut hist = Histogram::default();
    let mut sum = Trial::default();
    let mut hangs = 0u64;
    for _ in 0..a.kills {
        let trial = match victim {
            Victim::Writer => writers_killed(t, &cfg, a, &mut rng)?,
            Victim::Reader => reader_killed(t, &cfg, a, &mut rng)?,
        };
        match trial.detect {
            Some(d) => hist.record(d),
            None => hangs += 1,
        }
        sum.early += trial.early;
        sum.records += trial.records;
        sum.lost += trial.lost;
        sum.duplicated += trial.duplicated;
        sum.torn += trial.torn;
        sum.late += trial.late;
    }
    let mut rec = Record::new("peer-death", t.name())
        .config("between", Between::Processes.name())
        .config("victim", format!("{victim:?}").to_lowercase())
        .config("kills", a.kills)
        .config("writers", a.writers)
        .config("max_life_ms", a.max_life_ms)
        .config("hang_ms", a.hang_ms)
        .config("pipe_size", a.pipe_size);
    let ms = |q: f64| hist.quantile_ns(q) / 1e6;
    rec.metric("detect_p50_ms", ms(0.5));
    rec.metric("detect_p99_ms", ms(0.99));
    rec.metric("detect_max_ms", hist.max_ns() / 1e6);
    rec.metric("detected", hist.count() as f64);
    rec.metric("hangs", hangs as f64);
    rec.metric("early", sum.early as f64);
    if victim == Victim::Reader {
        rec.metric("late_bytes", sum.late as f64);
    }
    if victim == Victim::Writer {
        rec.metric("records", sum.records as f64);
        rec.metric("lost", sum.lost as f64);
        rec.metric("duplicated", sum.duplicated as f64);
        rec.metric("torn", sum.torn as f64);
    }
    Ok(Run {
        record: rec,
        latency: Some(hist),
    })
}

/// The table rows.
const COLUMNS: [Column; 11] = [
    Column::new("detect_p50_ms", "detect p50 ms", 1.0, 2),
    Column::new("detect_p99_ms", "detect p99 ms", 1.0, 2),
    Column::new("detect_max_ms", "detect max ms", 1.0, 2),
    Column::new("detected", "detected", 1.0, 0),
    Column::new("hangs", "hangs", 1.0, 0),
    Column::new("early", "early EOF/EPIPE", 1.0, 0),
    Column::new("late_bytes", "bytes accepted >2 ms after", 1.0, 0),
    Column::new("records", "records checked", 1.0, 0),
    Column::new("lost", "records lost", 1.0, 0),
    Column::new("duplicated", "records duplicated", 1.0, 0),
    Column::new("torn", "records torn", 1.0, 0),
];

/// `pagepipe-bench peer-death`.
///
/// # Errors
/// `InvalidInput` for no kills or no writers; a transport cannot be opened; a child fails
/// other than by the kill.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    if a.kills == 0 || a.writers == 0 || a.writers > u32::MAX as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--kills {} and --writers {} must be positive",
                a.kills, a.writers
            ),
        ));
    }
    // One run is all the kills: the detection quantiles are over every trial.
    let mut harness = Harness::new(opts, "peer-death", 1)?;
    let mut seed = mono_ns();
    for &victim in &a.kill {
        let title = match victim {
            Victim::Writer => format!("{} writers killed x{}", a.writers, a.kills),
            Victim::Reader => format!("reader killed x{}", a.kills),
        };
        let case = Case {
            bench: "peer-death",
            title,
            arms: a.transport.iter().map(|t| Arm::new(t.name())).collect(),
            columns: COLUMNS.to_vec(),
        };
        harness.run(case, |i| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            measure(a.transport[i], victim, a, seed)
        })?;
    }
    harness.note(format!(
        "detect: from the SIGKILL of the last writer to the reader's end of file, or of the \
         reader to the last writer's BrokenPipe; a hang is a detection over {} ms. Target: \
         all detected, p99 <= 2 ms (issue 25), 0 lost or duplicated, 0 hangs.",
        a.hang_ms
    ));
    harness.finish(&format!(
        "peer-death: {} writer processes, records of 24..=4096 B, {} B pipe, kills within \
         {} ms",
        a.writers, a.pipe_size, a.max_life_ms
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_check_out_and_damage_is_seen() {
        let mut rec = vec![0u8; 100];
        encode(&mut rec, 3, 77);
        assert_eq!(header(&rec[..HEADER], 4), Some((3, 77, 100)));
        assert_eq!(header(&rec[..HEADER], 3), None, "writer id out of range");
        assert_eq!(checksum(&rec).to_le_bytes(), rec[20..24]);
        rec[60] ^= 1;
        assert_ne!(checksum(&rec).to_le_bytes(), rec[20..24]);
    }

    #[test]
    fn the_checker_counts_gaps_duplicates_and_torn_records() {
        let mut stream = Vec::new();
        for (id, seq) in [(0, 0), (1, 0), (0, 1), (0, 1), (0, 3), (1, 1)] {
            let mut rec = vec![0u8; 50 + seq as usize];
            encode(&mut rec, id, seq);
            stream.extend(rec);
        }
        stream.extend([1, 2, 3]); // a torn tail
        let out = check(Box::new(io::Cursor::new(stream)), 2).unwrap();
        // records, gaps, duplicated, torn, next of writer 0 and 1
        assert_eq!(out[1..], [6, 1, 1, 1, 4, 2]);
    }

    #[test]
    fn killed_peers_are_noticed_and_no_record_is_lost() {
        let _serial = crate::child::tests::serial();
        let a = Args {
            transport: vec![Transport::Kernel, Transport::Pagepipe],
            kill: vec![Victim::Writer, Victim::Reader],
            kills: 3,
            writers: 2,
            max_life_ms: 5,
            hang_ms: 10_000,
            pipe_size: 65536,
        };
        for t in [Transport::Kernel, Transport::Pagepipe] {
            for victim in [Victim::Writer, Victim::Reader] {
                let rec = measure(t, victim, &a, 42).unwrap().record;
                let m = |k: &str| rec.get(k).unwrap_or(0.0);
                assert_eq!(m("detected") + m("hangs"), 3.0, "{t:?} {victim:?}");
                for bad in ["early", "lost", "duplicated", "torn"] {
                    assert_eq!(m(bad), 0.0, "{t:?} {victim:?} {bad}");
                }
            }
        }
    }
}
