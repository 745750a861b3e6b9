//! `splice`: seed 002's pipe / splice / vmsplice table (David Howells' benchmark of the pipe
//! ring), the kernel and pagepipe side by side, alternating in one run.
//!
//! One writer (a thread, or a forked child) and this thread as the reader move bytes for a
//! fixed time; the reader counts them. The rows:
//! - `pipe`: the writer fills a buffer and writes it; the reader reads into a buffer.
//! - `splice`: the writer moves a file that sits in the page cache into the pipe (kernel:
//!   `splice(2)` file to pipe; pagepipe: `Writer::splice_from`), the reader moves it out to
//!   /dev/null (kernel: `splice(2)` pipe to /dev/null; pagepipe: `Reader::splice_to`).
//! - `vmsplice`: the writer fills a buffer and hands it over (kernel: `vmsplice(2)`, then the
//!   reader `splice(2)`s to /dev/null; pagepipe: fills a `WriteChunk` in place and commits it,
//!   the reader borrows a `ReadChunk` and consumes it).
//!
//! What bounds pagepipe's splice row: the kernel's splice moves page references (the file's
//! page cache pages go into the pipe and on to /dev/null without a byte copied); pagepipe's
//! ring pages are its own memory, so `splice_from` copies each byte once (page cache to ring,
//! in `readv`), and the best it can do is one memcpy of the data against the kernel's page
//! reference counting.

use crate::child::{spawn, until_hangup, Between, Flags, Worker, CHILD_GRACE};
use crate::common::{Record, Usage};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use crate::transport::kernel_pipe;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// write + read.
    Pipe,
    /// splice from a file, splice to /dev/null.
    Splice,
    /// vmsplice (pagepipe: write_chunk + read_chunk), splice to /dev/null.
    Vmsplice,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Pipe => "pipe",
            Method::Splice => "splice",
            Method::Vmsplice => "vmsplice",
        }
    }
}

/// Who moves the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Kernel,
    Pagepipe,
}

const SIDES: [Side; 2] = [Side::Kernel, Side::Pagepipe];

/// Options of `pagepipe-bench splice`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Rows, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "pipe,splice,vmsplice")]
    pub method: Vec<Method>,
    /// Bytes per operation (write, splice, vmsplice, chunk).
    #[arg(long, default_value_t = 64 * 1024)]
    pub size: usize,
    /// Pipe capacity in bytes (kernel: F_SETPIPE_SZ).
    #[arg(long, default_value_t = 64 * 1024)]
    pub pipe_size: usize,
    /// Size of the file the splice rows read (written once and read once so it sits in the
    /// page cache; removed at the end).
    #[arg(long, default_value_t = 16 << 20)]
    pub file_size: usize,
    /// Directory for that file.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub dir: PathBuf,
    /// Seconds measured per run (after a warm-up of a fifth of it).
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Where the writer runs, comma separated: a thread of this process, or a forked child.
    #[arg(long, value_delimiter = ',', default_value = "threads")]
    pub between: Vec<Between>,
}

/// What one run needs.
struct Setup<'a> {
    size: usize,
    pipe_size: usize,
    file: &'a Path,
    duration: Duration,
    between: Between,
}

/// `pagepipe-bench splice`.
///
/// # Errors
/// The file cannot be written, a pipe cannot be made, or a run fails.
pub fn run(a: &Args, opts: &RunArgs) -> io::Result<()> {
    if a.size == 0 || a.file_size < a.size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "--size {} must be positive and at most --file-size {}",
                a.size, a.file_size
            ),
        ));
    }
    let file = CachedFile::new(&a.dir, a.file_size)?;
    let mut harness = Harness::new(opts, "splice", RECOMMENDED_RUNS)?;
    for &between in &a.between {
        for &m in &a.method {
            let setup = Setup {
                size: a.size,
                pipe_size: a.pipe_size,
                file: &file.path,
                duration: Duration::from_secs_f64(a.duration),
                between,
            };
            let title = between.title(&format!("{} {} KiB", m.name(), a.size / 1024));
            harness.run(case(&title), |i| once(SIDES[i], m, &setup).map(Run::from))?;
        }
    }
    harness.note(
        "splice row: the kernel moves page references (no byte copied); pagepipe copies each \
         byte once (page cache to ring in readv), its bound",
    );
    harness.finish(&format!(
        "splice: seed 002's pipe/splice/vmsplice table, {} B per operation, {} B pipe, {} s per run",
        a.size, a.pipe_size, a.duration
    ))
}

fn case(title: &str) -> Case {
    Case {
        bench: "splice",
        title: title.into(),
        arms: vec![Arm::new("kernel"), Arm::new("pagepipe")],
        columns: vec![
            Column::new("mbps", "MB/s", 1.0, 0),
            Column::new("cpu_s", "CPU s", 1.0, 2),
        ],
    }
}

/// A file of pattern bytes in the page cache, removed on drop.
struct CachedFile {
    path: PathBuf,
}

impl CachedFile {
    fn new(dir: &Path, len: usize) -> io::Result<CachedFile> {
        let path = dir.join(format!("pagepipe-bench-splice-{}", std::process::id()));
        let mut f = File::create(&path)?;
        let block: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        let mut left = len;
        while left > 0 {
            let n = left.min(block.len());
            f.write_all(&block[..n])?;
            left -= n;
        }
        drop(f);
        // Read it once: the splice rows must read from the page cache, not the disk.
        io::copy(&mut File::open(&path)?, &mut io::sink())?;
        Ok(CachedFile { path })
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn dev_null() -> io::Result<File> {
    std::fs::OpenOptions::new().write(true).open("/dev/null")
}

/// One run of one row on one side: the writer (thread or child) moves bytes until told to
/// stop; this thread receives and counts them.
fn once(side: Side, m: Method, s: &Setup<'_>) -> io::Result<Record> {
    let flags = Flags::new()?;
    let f = flags.clone();
    let size = s.size;
    let src = File::open(s.file)?;
    let (writer, mut reader): (_, Box<dyn FnMut() -> io::Result<usize>>) = match side {
        Side::Kernel => {
            let pipe = kernel_pipe(s.pipe_size)?;
            let write = move |w: File| kernel_writer(m, &w, &src, size, &f);
            let (worker, r) = start(s.between, pipe, write)?;
            (worker, kernel_reader(m, r, size)?)
        }
        Side::Pagepipe => {
            let pipe = pagepipe::Builder::new().capacity(s.pipe_size).build()?;
            let write = move |w: pagepipe::Writer| pagepipe_writer(m, &w, &src, size, &f);
            let (worker, r) = start(s.between, pipe, write)?;
            (worker, pagepipe_reader(m, r, size)?)
        }
    };
    let warm = Instant::now() + s.duration / 5;
    while Instant::now() < warm {
        reader()?;
    }
    let (u0, t0) = (Usage::now(), Instant::now());
    flags.set_measuring(true);
    let mut bytes = 0u64;
    while t0.elapsed() < s.duration {
        bytes += reader()? as u64;
    }
    flags.set_measuring(false);
    let (mut usage, secs) = (Usage::now().since(u0), t0.elapsed().as_secs_f64());
    flags.stop();
    drop(reader); // a writer blocked on a full pipe gets BrokenPipe
    let spent = writer.join(s.duration + CHILD_GRACE)?;
    if s.between == Between::Processes {
        usage = usage.plus(spent);
    }
    let mut rec = Record::new(
        "splice",
        if side == Side::Kernel {
            "kernel"
        } else {
            "pagepipe"
        },
    )
    .config("method", m.name())
    .config("between", s.between.name())
    .config("size", size)
    .config("pipe_size", s.pipe_size);
    rec.metric("mbps", bytes as f64 / secs / 1e6);
    rec.metric("cpu_s", usage.cpu_s);
    rec.metric("minor_faults", usage.minor_faults as f64);
    Ok(rec)
}

/// Runs `writer` with the write end of `pipe` on a thread or in a child (which closes its copy
/// of the read end); returns the worker and the read end.
fn start<Wr: Send + 'static, Rd>(
    between: Between,
    (w, r): (Wr, Rd),
    writer: impl FnOnce(Wr) -> io::Result<Usage> + Send + 'static,
) -> io::Result<(Worker<Usage>, Rd)> {
    let mut r = Some(r);
    let worker = spawn(between, move || writer(w), || drop(r.take()))?;
    Ok((worker, r.take().expect("the parent keeps its read end")))
}

/// Fills `buf` with a byte that changes every call, so no row moves untouched memory.
fn touch(buf: &mut [u8], round: &mut u8) {
    *round = round.wrapping_add(1);
    buf.fill(*round);
}

/// The kernel rows' writer: write, splice from the file, or vmsplice.
fn kernel_writer(m: Method, w: &File, src: &File, size: usize, flags: &Flags) -> io::Result<Usage> {
    let mut buf = vec![0u8; size];
    let (mut round, mut off) = (0u8, 0i64);
    until_hangup(flags, || match m {
        Method::Pipe => {
            touch(&mut buf, &mut round);
            (&*w).write_all(&buf)
        }
        Method::Splice => {
            if splice(src, Some(&mut off), w, size)? == 0 {
                off = 0; // end of the file: from its start again
            }
            Ok(())
        }
        Method::Vmsplice => {
            touch(&mut buf, &mut round);
            vmsplice_all(w, &buf)
        }
    })
}

/// The pipe rows' reader: reads into a `size`-byte buffer.
fn read_into_buffer(
    mut r: impl Read + 'static,
    size: usize,
) -> Box<dyn FnMut() -> io::Result<usize>> {
    let mut buf = vec![0u8; size];
    Box::new(move || r.read(&mut buf))
}

/// The kernel rows' reader: read, or splice to /dev/null. Returns bytes per call.
fn kernel_reader(
    m: Method,
    r: File,
    size: usize,
) -> io::Result<Box<dyn FnMut() -> io::Result<usize>>> {
    Ok(match m {
        Method::Pipe => read_into_buffer(r, size),
        Method::Splice | Method::Vmsplice => {
            let null = dev_null()?;
            Box::new(move || splice(&r, None, &null, size))
        }
    })
}

/// The pagepipe rows' writer: write, splice_from the file, or fill and commit a chunk.
fn pagepipe_writer(
    m: Method,
    w: &pagepipe::Writer,
    src: &File,
    size: usize,
    flags: &Flags,
) -> io::Result<Usage> {
    let mut buf = vec![0u8; size];
    let (mut round, mut src) = (0u8, src);
    until_hangup(flags, || match m {
        Method::Pipe => {
            touch(&mut buf, &mut round);
            (&*w).write_all(&buf)
        }
        Method::Splice => {
            if w.splice_from(src, size)? == 0 {
                src.rewind()?; // end of the file: from its start again
            }
            Ok(())
        }
        Method::Vmsplice => fill_chunk(w, size, &mut round),
    })
}

/// Fills up to `size` bytes of a write chunk in place and commits them.
fn fill_chunk(w: &pagepipe::Writer, size: usize, round: &mut u8) -> io::Result<()> {
    let mut chunk = w.write_chunk()?;
    // SAFETY: every process holding this pipe is this benchmark, running pagepipe unmodified
    // (vmsplice's arm measures filling the ring in place, not a copy).
    let (a, b) = unsafe { chunk.as_mut_slices_unchecked() };
    let la = a.len().min(size);
    let lb = b.len().min(size - la);
    touch(&mut a[..la], round);
    touch(&mut b[..lb], round);
    chunk.commit(la + lb);
    Ok(())
}

/// The pagepipe rows' reader: read, splice_to /dev/null, or borrow and consume a chunk.
fn pagepipe_reader(
    m: Method,
    r: pagepipe::Reader,
    size: usize,
) -> io::Result<Box<dyn FnMut() -> io::Result<usize>>> {
    Ok(match m {
        Method::Pipe => read_into_buffer(r, size),
        Method::Splice => {
            let null = dev_null()?;
            Box::new(move || r.splice_to(&null, size))
        }
        Method::Vmsplice => Box::new(move || {
            let chunk = r.read_chunk()?;
            let n = chunk.len().min(size);
            chunk.consume(n);
            Ok(n)
        }),
    })
}

/// `splice(2)` of up to `len` bytes from `from` (at `*off` if given, advancing it) to `to`.
fn splice(from: &File, off: Option<&mut i64>, to: &File, len: usize) -> io::Result<usize> {
    let off = off.map_or(std::ptr::null_mut(), |o| o as *mut i64);
    // SAFETY: both descriptors are open for the call; `off` is null or points to a live i64
    // the kernel reads and advances.
    let n = unsafe {
        libc::splice(
            from.as_fd().as_raw_fd(),
            off,
            to.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `vmsplice(2)` of all of `buf` into the pipe `w` (it may take several calls). The kernel
/// pipe then references `buf`'s pages: a writer that refills `buf` before the reader drained
/// it changes what the reader gets, the hazard pagepipe's chunks do not have.
fn vmsplice_all(w: &File, buf: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let iov = libc::iovec {
            iov_base: buf[done..].as_ptr() as *mut libc::c_void,
            iov_len: buf.len() - done,
        };
        // SAFETY: the iovec describes live bytes of `buf`; vmsplice without SPLICE_F_GIFT only
        // reads them (the pipe takes references to their pages).
        let n = unsafe { libc::vmsplice(w.as_raw_fd(), &iov, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_moves_bytes_on_both_sides() {
        let _serial = crate::child::tests::serial();
        let file = CachedFile::new(&std::env::temp_dir(), 1 << 20).unwrap();
        for between in [Between::Threads, Between::Processes] {
            let s = Setup {
                size: 65536,
                pipe_size: 65536,
                file: &file.path,
                duration: Duration::from_millis(30),
                between,
            };
            for m in [Method::Pipe, Method::Splice, Method::Vmsplice] {
                for side in SIDES {
                    let rec = once(side, m, &s).unwrap();
                    assert!(rec.get("mbps").unwrap() > 0.0, "{side:?} {m:?} {between:?}");
                    assert_eq!(rec.config["method"], m.name());
                }
            }
        }
    }
}
