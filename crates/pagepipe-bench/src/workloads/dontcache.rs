//! dontcache-bench (seed 003), scaled to this machine: buffered, O_DIRECT, the kernel's
//! RWF_DONTCACHE (plain pwritev2) and pagepipe's dontcache writer (Auto and Fallback) side by
//! side, alternating in one run, on sequential, random, multi-writer, many-file and competing
//! workloads.
//!
//! Metrics: MB/s including the final fsync (`mbps`), per-write latency quantiles, peak `Dirty:`
//! of /proc/meminfo above its value at the start (`peak_dirty_kib`), and the page cache the files
//! hold afterwards (`cache_left_pct`, cachestat(2) or mincore(2)).

use crate::common::{Histogram, MemoryHog, Record, Usage};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, MIN_RUNS};
use pagepipe_dontcache::{self as dontcache, Mode, Writer};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// `RWF_DONTCACHE` from linux/fs.h (not in the libc crate yet).
const RWF_DONTCACHE: libc::c_int = 0x80;

/// Options of `pagepipe-bench dontcache`.
#[derive(clap::Args)]
pub struct Args {
    /// Bytes written per workload, mode and run (suffix K, M or G), split among its writers.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    size: u64,
    /// Directory for the test files (default: a temp dir on the first ext4 among $TMPDIR,
    /// /var/tmp, /work; else $TMPDIR). A subdirectory is created and removed.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Workloads to run, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "seq,rand,multi,many,compete"
    )]
    workloads: Vec<Workload>,
    /// Modes to compare, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "buffered,direct,kernel,auto,fallback"
    )]
    modes: Vec<WMode>,
    /// pagepipe's per-writer window (bound on dirty data in flight), e.g. 32M.
    #[arg(long, default_value = "32M", value_parser = parse_size)]
    window: u64,
    /// Writer threads in the `multi` workload.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Files (one writer thread each) in the `many` workload.
    #[arg(long, default_value_t = 32)]
    files: usize,
    /// Run beside a memory hog (stress-ng).
    #[arg(long)]
    memory_pressure: bool,
    /// Reserve each tested file's blocks before writing it, in every mode alike: `fallocate(2)`
    /// with `FALLOC_FL_KEEP_SIZE` for the plain modes, `Writer::preallocate` for pagepipe's
    /// (the competing workload's buffered competitor is left as it is).
    #[arg(long)]
    prealloc: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    /// One writer, one file, sequential 1 MiB writes.
    Seq,
    /// One writer, one file, 64 KiB writes at shuffled block offsets.
    Rand,
    /// `--writers` threads, one file each, sequential 1 MiB writes.
    Multi,
    /// `--files` threads, one file each, sequential 1 MiB writes (Axboe's 32-file test).
    Many,
    /// The mode under test against a buffered writer, separate files, half the size each.
    Compete,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Seq => "seq-write",
            Workload::Rand => "rand-write",
            Workload::Multi => "multi-write",
            Workload::Many => "many-files",
            Workload::Compete => "competing",
        }
    }

    fn block(self) -> usize {
        if self == Workload::Rand {
            64 << 10
        } else {
            1 << 20
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum WMode {
    /// pwrite(2) through the page cache, fsync at the end.
    Buffered,
    /// O_DIRECT pwrite(2), fsync at the end.
    Direct,
    /// pwritev2(2) with RWF_DONTCACHE, fsync at the end.
    Kernel,
    /// pagepipe_dontcache::Writer in Mode::Auto, finish() at the end.
    Auto,
    /// pagepipe_dontcache::Writer in Mode::Fallback, finish() at the end.
    Fallback,
}

impl WMode {
    fn name(self) -> &'static str {
        match self {
            WMode::Buffered => "buffered",
            WMode::Direct => "o_direct",
            WMode::Kernel => "kernel-dontcache",
            WMode::Auto => "pagepipe-auto",
            WMode::Fallback => "pagepipe-fallback",
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, shift) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 10),
        Some('M') => (&s[..s.len() - 1], 20),
        Some('G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = num.parse().map_err(|e| format!("bad size {s:?}: {e}"))?;
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| format!("size {s:?} overflows"))
}

/// A 4 KiB-aligned buffer (O_DIRECT needs aligned memory), filled with non-zero bytes.
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is only read after construction; sharing immutable bytes is thread-safe.
unsafe impl Send for AlignedBuf {}
// SAFETY: as for Send: no interior mutability after `new`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("buffer layout");
        // SAFETY: the layout has a non-zero size (every block is at least 64 KiB).
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` is a fresh allocation of `len` bytes that nothing else refers to.
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in bytes.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = (x as u8) | 1;
        }
        AlignedBuf { ptr, layout }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `layout.size()` initialised bytes (filled in `new`), live until drop.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// One file being written in one mode.
enum Sink {
    Plain { file: File, flags: libc::c_int },
    Pagepipe(Writer),
}

impl Sink {
    /// Opens `path` for `mode`, with `reserve` bytes preallocated if given.
    fn open(mode: WMode, path: &Path, window: u64, reserve: Option<u64>) -> io::Result<Sink> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(true);
        if mode == WMode::Direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(path)?;
        let mut sink = match mode {
            WMode::Buffered | WMode::Direct => Sink::Plain { file, flags: 0 },
            WMode::Kernel => Sink::Plain {
                file,
                flags: RWF_DONTCACHE,
            },
            WMode::Auto => {
                Sink::Pagepipe(Writer::with_mode(file, Mode::Auto)?.with_window(window as usize))
            }
            WMode::Fallback => Sink::Pagepipe(
                Writer::with_mode(file, Mode::Fallback)?.with_window(window as usize),
            ),
        };
        if let Some(len) = reserve {
            match &mut sink {
                Sink::Pagepipe(w) => w.preallocate(len)?,
                // As Writer::preallocate does: nothing where the filesystem cannot.
                Sink::Plain { file, .. } => {
                    dontcache::reserve(file, len)?;
                }
            }
        }
        Ok(sink)
    }

    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self {
            Sink::Pagepipe(w) => w.write_all_at(buf, offset),
            Sink::Plain { file, flags: 0 } => file.write_all_at(buf, offset),
            Sink::Plain { file, flags } => {
                let iov = libc::iovec {
                    iov_base: buf.as_ptr() as *mut libc::c_void,
                    iov_len: buf.len(),
                };
                // SAFETY: `iov` describes `buf`, live and readable for the call (pwritev2(2)).
                let rc = unsafe {
                    libc::pwritev2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, *flags)
                };
                if rc < 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                        return Err(io::Error::new(
                            io::ErrorKind::Unsupported,
                            format!("RWF_DONTCACHE: {e}"),
                        ));
                    }
                    return Err(e);
                }
                if (rc as usize) < buf.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short write of {rc} bytes"),
                    ));
                }
                Ok(())
            }
        }
    }

    /// fsync (plain) or finish (pagepipe); returns pagepipe's stats.
    fn finish(self) -> io::Result<Option<dontcache::Stats>> {
        match self {
            Sink::Plain { file, .. } => file.sync_all().map(|()| None),
            Sink::Pagepipe(w) => w.finish().map(Some),
        }
    }
}

/// What one writer thread did.
struct ThreadResult {
    bytes: u64,
    elapsed: Duration,
    hist: Histogram,
    stats: Option<dontcache::Stats>,
    cpu_s: f64,
}

/// One writer thread's assignment.
struct Job<'a> {
    mode: WMode,
    path: &'a Path,
    size: u64,
    block: usize,
    /// Shuffled block offsets instead of sequential ones.
    random: bool,
    window: u64,
    /// Reserve the file's `size` bytes before writing (`--prealloc`).
    prealloc: bool,
}

/// Writes `job.size` bytes to `job.path` in `job.block`-sized writes, then fsyncs or finishes.
fn write_file(job: Job<'_>, buf: &AlignedBuf, start: &Barrier) -> io::Result<ThreadResult> {
    let Job {
        mode,
        path,
        size,
        block,
        random,
        window,
        prealloc,
    } = job;
    let sink = Sink::open(mode, path, window, prealloc.then_some(size));
    start.wait(); // every thread passes the barrier, even one whose open failed
    let mut sink = sink?;
    let blocks = size / block as u64;
    let mut order: Vec<u64> = (0..blocks).collect();
    if random {
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ size;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
    }
    let data = &buf.as_slice()[..block];
    let cpu0 = Usage::thread();
    let t0 = Instant::now();
    let mut hist = Histogram::default();
    for &b in &order {
        let t = Instant::now();
        sink.write_all_at(data, b * block as u64)?;
        hist.record(t.elapsed());
    }
    let stats = sink.finish()?;
    Ok(ThreadResult {
        bytes: blocks * block as u64,
        elapsed: t0.elapsed(),
        hist,
        stats,
        cpu_s: Usage::thread().since(cpu0).cpu_s,
    })
}

/// `Dirty:` of /proc/meminfo in KiB.
fn meminfo_dirty_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("Dirty:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Samples `Dirty:` every 5 ms until stopped; returns the peak above the value at the start.
struct DirtySampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl DirtySampler {
    fn start() -> DirtySampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let base = meminfo_dirty_kib();
        let thread = std::thread::spawn(move || {
            let mut peak = base;
            // Relaxed: a stop request; the join in `finish` orders everything else.
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(meminfo_dirty_kib());
                std::thread::sleep(Duration::from_millis(5));
            }
            peak.max(meminfo_dirty_kib()).saturating_sub(base)
        });
        DirtySampler { stop, thread }
    }

    fn finish(self) -> u64 {
        // Relaxed: see the loop above.
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

/// One run of one workload in one mode.
fn run_once(
    args: &Args,
    dir: &Path,
    workload: Workload,
    mode: WMode,
    buf: &AlignedBuf,
) -> io::Result<Run> {
    let block = workload.block();
    // (mode, bytes) for each writer thread
    let jobs: Vec<(WMode, u64)> = match workload {
        Workload::Seq | Workload::Rand => vec![(mode, args.size)],
        Workload::Multi => vec![(mode, args.size / args.writers as u64); args.writers],
        Workload::Many => vec![(mode, args.size / args.files as u64); args.files],
        Workload::Compete => vec![(mode, args.size / 2), (WMode::Buffered, args.size / 2)],
    };
    let jobs: Vec<(WMode, u64)> = jobs
        .into_iter()
        .map(|(m, b)| (m, b / block as u64 * block as u64))
        .collect();
    let paths: Vec<PathBuf> = (0..jobs.len())
        .map(|i| dir.join(format!("{}-{}-{i}", workload.name(), mode.name())))
        .collect();
    let barrier = Barrier::new(jobs.len() + 1);
    let usage0 = Usage::now();
    let sampler = DirtySampler::start();
    let (results, wall) = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .zip(&paths)
            .enumerate()
            .map(|(i, (&(m, bytes), path))| {
                let barrier = &barrier;
                // The competing workload's competitor (its second job) is never reserved.
                let tested = workload != Workload::Compete || i == 0;
                let job = Job {
                    mode: m,
                    path,
                    size: bytes,
                    block,
                    random: workload == Workload::Rand,
                    window: args.window,
                    prealloc: args.prealloc && tested,
                };
                s.spawn(move || write_file(job, buf, barrier))
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let results: Vec<io::Result<ThreadResult>> = handles
            .into_iter()
            .map(|h| h.join().expect("writer thread panicked"))
            .collect();
        (results, t0.elapsed())
    });
    let peak_dirty_kib = sampler.finish();
    let cpu_s = Usage::now().since(usage0).cpu_s;
    let competitor = (workload == Workload::Compete).then_some(1);
    let cache_left = cache_left_and_clean(&paths, competitor);
    let results: Vec<ThreadResult> = results.into_iter().collect::<io::Result<_>>()?;
    let (cached, size) = cache_left?;
    // The mode under test: every thread except the competing buffered writer.
    let tested = if workload == Workload::Compete {
        &results[..1]
    } else {
        &results[..]
    };
    let mut hist = Histogram::default();
    for r in tested {
        hist.merge(&r.hist);
    }
    let bytes: u64 = tested.iter().map(|r| r.bytes).sum();
    let thread_mbps: Vec<f64> = results
        .iter()
        .map(|r| r.bytes as f64 / 1e6 / r.elapsed.as_secs_f64())
        .collect();
    let mut rec = Record::new("dontcache", mode.name())
        .config("workload", workload.name())
        .config("threads", jobs.len())
        .config("block_bytes", block)
        .config("size_bytes", args.size)
        .config("window_bytes", args.window)
        .config("prealloc", args.prealloc);
    let mbps = if workload == Workload::Compete {
        thread_mbps[0]
    } else {
        bytes as f64 / 1e6 / wall.as_secs_f64()
    };
    rec.metric("mbps", mbps);
    if workload == Workload::Compete {
        rec.metric("competitor_mbps", thread_mbps[1]);
    }
    if thread_mbps.len() > 1 {
        let max = thread_mbps.iter().copied().fold(0.0, f64::max);
        let min = thread_mbps.iter().copied().fold(f64::INFINITY, f64::min);
        rec.metric("fairness", if max > 0.0 { min / max } else { 0.0 });
        // Jain's index (sum x)^2 / (n * sum x^2): 1 when all writers get the same MB/s, 1/n when
        // one gets everything.
        let sum: f64 = thread_mbps.iter().sum();
        let sq: f64 = thread_mbps.iter().map(|x| x * x).sum();
        let n = thread_mbps.len() as f64;
        rec.metric(
            "fairness_jain",
            if sq > 0.0 { sum * sum / (n * sq) } else { 0.0 },
        );
    }
    rec.metric("writes", hist.count() as f64);
    hist.put_metrics(&mut rec);
    rec.metric("peak_dirty_kib", peak_dirty_kib as f64);
    rec.metric(
        "cache_left_pct",
        if size > 0 {
            100.0 * cached as f64 / size as f64
        } else {
            0.0
        },
    );
    rec.metric("cpu_s", cpu_s);
    rec.metric("writer_cpu_s", tested.iter().map(|r| r.cpu_s).sum());
    let stats: Vec<_> = tested.iter().filter_map(|r| r.stats).collect();
    if let Some(first) = stats.first() {
        let peak = stats.iter().map(|s| s.peak_dirty_bytes).max().unwrap_or(0);
        let waits: u64 = stats.iter().map(|s| s.writeback_waits).sum();
        let overdraft = stats
            .iter()
            .map(|s| s.peak_overdraft_bytes)
            .max()
            .unwrap_or(0);
        rec.metric("writer_peak_dirty_kib", (peak / 1024) as f64);
        rec.metric("writer_overdraft_kib", (overdraft / 1024) as f64);
        rec.metric("writeback_waits", waits as f64);
        rec = rec.config("resolved_mode", format!("{:?}", first.mode));
    }
    Ok(Run {
        record: rec,
        latency: Some(hist),
    })
}

/// Page cache held by the files of the mode under test (all but the `competitor`'s file),
/// then drops their cache (posix_fadvise, our files only) and deletes them. Returns (cached
/// bytes, file bytes).
fn cache_left_and_clean(paths: &[PathBuf], competitor: Option<usize>) -> io::Result<(u64, u64)> {
    let mut cached = 0;
    let mut size = 0;
    let mut first_err = None;
    for (i, p) in paths.iter().enumerate() {
        let Ok(f) = File::open(p) else { continue };
        if competitor != Some(i) {
            match dontcache::cached_bytes(&f) {
                Ok(c) => cached += c,
                Err(e) => first_err = first_err.or(Some(e)),
            }
            size += f.metadata().map(|m| m.len()).unwrap_or(0);
        }
        let _ = f.sync_all();
        let _ = dontcache::drop_cache(&f);
        drop(f);
        let _ = std::fs::remove_file(p);
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((cached, size)),
    }
}

/// The benchmark directory: a fresh subdirectory, removed on drop.
struct BenchDir(PathBuf);

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_ext4(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data; zeroed is a valid value for statfs(2) to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statfs (statfs(2)).
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::EXT4_SUPER_MAGIC
}

fn bench_dir(arg: Option<&Path>) -> io::Result<BenchDir> {
    let parent = match arg {
        Some(d) => d.to_path_buf(),
        None => {
            let tmp = std::env::temp_dir();
            [
                tmp.clone(),
                PathBuf::from("/var/tmp"),
                PathBuf::from("/work"),
            ]
            .into_iter()
            .find(|d| is_ext4(d))
            .unwrap_or(tmp)
        }
    };
    let dir = parent.join(format!("pagepipe-dontcache-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(BenchDir(dir))
}

/// The table rows of a dontcache case.
const COLUMNS: [Column; 8] = [
    Column::new("mbps", "MB/s incl fsync", 1.0, 0),
    Column::new("lat_p99_ns", "write p99 µs", 1e3, 0),
    Column::new("lat_p999_ns", "write p99.9 µs", 1e3, 0),
    Column::new("peak_dirty_kib", "peak dirty MiB", 1024.0, 0),
    Column::new("cache_left_pct", "cache left %", 1.0, 1),
    Column::new("fairness", "fairness min/max", 1.0, 2),
    Column::new("fairness_jain", "Jain", 1.0, 2),
    Column::new("competitor_mbps", "competitor MB/s", 1.0, 0),
];

/// `pagepipe-bench dontcache`: every workload, every mode, alternating.
///
/// # Errors
/// `InvalidInput` for a bad option; a write or fsync that fails (a mode the filesystem does
/// not support is skipped with a note instead).
pub fn run(args: &Args, opts: &RunArgs) -> io::Result<()> {
    if args.writers == 0 || args.files == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--writers and --files must be at least 1",
        ));
    }
    let dir = bench_dir(args.dir.as_deref())?;
    let _hog = MemoryHog::start(args.memory_pressure)?;
    let buf = AlignedBuf::new(1 << 20);
    // Each run writes --size bytes per workload and mode: the fewest runs with a 95% interval.
    let mut harness = Harness::new(opts, "dontcache", MIN_RUNS)?;
    for &w in &args.workloads {
        let case = Case {
            bench: "dontcache",
            title: w.name().to_string(),
            arms: args.modes.iter().map(|m| Arm::new(m.name())).collect(),
            columns: COLUMNS.to_vec(),
        };
        harness.run(case, |i| {
            run_once(args, &dir.0, w, args.modes[i], &buf).map_err(unsupported_is_skipped)
        })?;
    }
    harness.finish(&format!(
        "dontcache: {} MiB per workload and mode, window {} MiB, in {} (ext4: {})",
        args.size >> 20,
        args.window >> 20,
        dir.0.display(),
        is_ext4(&dir.0)
    ))
}

/// A mode this filesystem cannot do fails with `Unsupported` or `InvalidInput` (`O_DIRECT`'s
/// `EINVAL`); both become `Unsupported`, which the harness reports as a skipped mode.
fn unsupported_is_skipped(e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::InvalidInput => io::Error::new(io::ErrorKind::Unsupported, e),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
