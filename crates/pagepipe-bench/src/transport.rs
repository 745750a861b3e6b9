//! The byte transports benchmarks compare: the kernel pipe, an AF_UNIX socketpair, pagepipe,
//! and with `--features iceoryx2`, iceoryx2.

use pagepipe::PoolPolicy;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The Linux pipe (pipe2 + F_SETPIPE_SZ).
    Kernel,
    /// An AF_UNIX stream socketpair (lmbench's bw_unix / lat_unix).
    Unix,
    /// pagepipe.
    Pagepipe,
    /// iceoryx2 publish-subscribe, the reader sleeping on an event (`--features iceoryx2`;
    /// one writer, one reader).
    Iceoryx2,
    /// iceoryx2 with a busy-polling reader, no event (`--features iceoryx2`).
    Iceoryx2Spin,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Kernel => "kernel",
            Transport::Unix => "unix",
            Transport::Pagepipe => "pagepipe",
            Transport::Iceoryx2 => "iceoryx2",
            Transport::Iceoryx2Spin => "iceoryx2-spin",
        }
    }
}

/// How to build a pipe (ignored where a transport has no such knob).
#[derive(Clone, Copy, Debug)]
pub struct PipeConfig {
    pub pipe_size: usize,
    pub pool: PoolPolicy,
    pub slot_size: usize,
}

impl Default for PipeConfig {
    fn default() -> Self {
        PipeConfig {
            pipe_size: 64 * 1024,
            pool: PoolPolicy::default(),
            slot_size: 4096,
        }
    }
}

pub type W = Box<dyn Write + Send>;
pub type R = Box<dyn Read + Send>;

/// Opens one channel with `writers` write handles and `readers` read handles.
pub fn open(
    t: Transport,
    cfg: &PipeConfig,
    writers: usize,
    readers: usize,
) -> io::Result<(Vec<W>, Vec<R>)> {
    match t {
        Transport::Kernel => {
            let (w, r) = kernel_pipe(cfg.pipe_size)?;
            Ok((
                dup_n(&w, writers, |f| Box::new(f) as W)?,
                dup_n(&r, readers, |f| Box::new(f) as R)?,
            ))
        }
        Transport::Unix => {
            let (a, b) = UnixStream::pair()?;
            let ws = (0..writers)
                .map(|_| a.try_clone().map(|s| Box::new(s) as W))
                .collect::<io::Result<_>>()?;
            let rs = (0..readers)
                .map(|_| b.try_clone().map(|s| Box::new(s) as R))
                .collect::<io::Result<_>>()?;
            Ok((ws, rs))
        }
        Transport::Pagepipe => {
            let (w, r) = pagepipe::Builder::new()
                .capacity(cfg.pipe_size)
                .pool(cfg.pool)
                .slot_size(cfg.slot_size)
                .build()?;
            let ws = (0..writers).map(|_| Box::new(w.clone()) as W).collect();
            let rs = (0..readers).map(|_| Box::new(r.clone()) as R).collect();
            Ok((ws, rs))
        }
        Transport::Iceoryx2 | Transport::Iceoryx2Spin => {
            iceoryx2(t == Transport::Iceoryx2Spin, cfg, writers, readers)
        }
    }
}

/// An iceoryx2 channel: one writer, one reader (publish-subscribe would give every reader
/// every byte, and the ports are not shared between handles).
fn iceoryx2(
    spin: bool,
    cfg: &PipeConfig,
    writers: usize,
    readers: usize,
) -> io::Result<(Vec<W>, Vec<R>)> {
    if (writers, readers) != (1, 1) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("iceoryx2 takes one writer and one reader, not {writers} and {readers}"),
        ));
    }
    #[cfg(feature = "iceoryx2")]
    {
        let (w, r) = crate::iox::channel(cfg.pipe_size, spin);
        Ok((vec![Box::new(w) as W], vec![Box::new(r) as R]))
    }
    #[cfg(not(feature = "iceoryx2"))]
    {
        let _ = (spin, cfg);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "built without iceoryx2 (cargo build --features iceoryx2)",
        ))
    }
}

/// `n` duplicates (`dup(2)`) of a descriptor, as boxed handles.
fn dup_n<T>(f: &File, n: usize, boxed: impl Fn(File) -> T) -> io::Result<Vec<T>> {
    (0..n).map(|_| f.try_clone().map(&boxed)).collect()
}

/// A blocking kernel pipe of `size` bytes (`pipe2(2)`, `F_SETPIPE_SZ` in `fcntl(2)`).
pub fn kernel_pipe(size: usize) -> io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these descriptors; nothing else owns them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, size as libc::c_int) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((File::from(w), File::from(r)))
}

/// Parses a pool policy: `adaptive[:keep]`, `unified[:keep:burst]`, `tmppage`, `none`.
pub fn parse_pool(s: &str) -> Result<PoolPolicy, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize, default: usize| -> Result<usize, String> {
        parts.get(i).map_or(Ok(default), |p| {
            p.parse()
                .map_err(|e| format!("bad number {p:?} in pool {s:?}: {e}"))
        })
    };
    match parts[0] {
        "adaptive" => Ok(PoolPolicy::Adaptive { keep: num(1, 2)? }),
        "unified" => Ok(PoolPolicy::Unified {
            keep: num(1, 2)?,
            burst: num(2, 8)?,
        }),
        "tmppage" => Ok(PoolPolicy::TmpPage),
        "none" => Ok(PoolPolicy::None),
        other => Err(format!(
            "unknown pool policy {other:?} (adaptive, unified, tmppage, none)"
        )),
    }
}

/// The name of a pool policy as `--pool` takes it.
pub fn pool_name(p: PoolPolicy) -> String {
    match p {
        PoolPolicy::Adaptive { keep } => format!("adaptive:{keep}"),
        PoolPolicy::Unified { keep, burst } => format!("unified:{keep}:{burst}"),
        PoolPolicy::TmpPage => "tmppage".into(),
        PoolPolicy::None => "none".into(),
    }
}
