//! Differential tests: random sequences of non-blocking operations run against a real kernel
//! pipe (pipe2 with O_NONBLOCK, F_SETPIPE_SZ) and a pagepipe side by side must give the same
//! results, byte for byte.

use pagepipe::{Builder, PoolPolicy, Reader, Writer};
use proptest::prelude::*;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

#[path = "support/children.rs"]
mod children;

#[derive(Clone, Debug)]
enum Op {
    Write(usize),
    Read(usize),
    SetCapacity(usize),
    CloseWriter,
    CloseReader,
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![
        0usize..64,
        1usize..8192,
        4090usize..4200,
        0usize..=200 * 1024
    ];
    prop_oneof![
        8 => len.clone().prop_map(Op::Write),
        8 => len.prop_map(Op::Read),
        // 0 and > 1 GiB are documented deviations (pagepipe rejects them; Linux rounds 0 up).
        2 => prop_oneof![1usize..=1 << 20, Just(4096), Just(65536), Just(8192)].prop_map(Op::SetCapacity),
        1 => Just(Op::CloseWriter),
        1 => Just(Op::CloseReader),
    ]
}

/// Every pool policy: page recycling must never change what a pipe does.
const POLICIES: [PoolPolicy; 4] = [
    PoolPolicy::Adaptive { keep: 2 },
    PoolPolicy::Unified { keep: 2, burst: 8 },
    PoolPolicy::TmpPage,
    PoolPolicy::None,
];

fn policy() -> impl Strategy<Value = PoolPolicy> {
    prop::sample::select(POLICIES.to_vec())
}

/// The kernel side: a non-blocking pipe.
struct Kernel {
    w: Option<OwnedFd>,
    r: Option<OwnedFd>,
}

fn errno_result(rc: isize) -> Result<usize, io::ErrorKind> {
    if rc < 0 {
        Err(io::Error::last_os_error().kind())
    } else {
        Ok(rc as usize)
    }
}

impl Kernel {
    fn new(packet: bool) -> Kernel {
        let mut fds = [0; 2];
        let flags = libc::O_NONBLOCK | libc::O_CLOEXEC | if packet { libc::O_DIRECT } else { 0 };
        // SAFETY: fds is a valid array of two ints.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), flags) }, 0);
        // SAFETY: pipe2 just returned these descriptors and nothing else owns them.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Kernel {
            w: Some(w),
            r: Some(r),
        }
    }

    fn any_fd(&self) -> i32 {
        self.w.as_ref().or(self.r.as_ref()).unwrap().as_raw_fd()
    }

    fn write(&mut self, data: &[u8]) -> Result<usize, io::ErrorKind> {
        let fd = self.w.as_ref().unwrap().as_raw_fd();
        // SAFETY: data is a valid buffer of data.len() bytes.
        errno_result(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) })
    }

    fn read(&mut self, len: usize) -> Result<Vec<u8>, io::ErrorKind> {
        let fd = self.r.as_ref().unwrap().as_raw_fd();
        let mut buf = vec![0u8; len];
        // SAFETY: buf is a valid, writable buffer of len bytes.
        let n = errno_result(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), len) })?;
        buf.truncate(n);
        Ok(buf)
    }

    fn set_capacity(&mut self, bytes: usize) -> Result<usize, io::ErrorKind> {
        // SAFETY: fcntl on a descriptor we own.
        errno_result(
            unsafe { libc::fcntl(self.any_fd(), libc::F_SETPIPE_SZ, bytes as libc::c_int) }
                as isize,
        )
    }

    fn capacity(&self) -> usize {
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(self.any_fd(), libc::F_GETPIPE_SZ) as usize }
    }
}

struct Ours {
    w: Option<Writer>,
    r: Option<OurReader>,
}

/// pagepipe's reader: in this process, or in a forked child that runs each operation when told
/// over a socket (the same pipe, shared between two processes).
enum OurReader {
    Local(Reader),
    Remote(Remote),
}

impl OurReader {
    fn read(&mut self, len: usize) -> Result<Vec<u8>, io::ErrorKind> {
        match self {
            OurReader::Local(r) => {
                let mut buf = vec![0u8; len];
                let n = r.read(&mut buf).map_err(|e| e.kind())?;
                buf.truncate(n);
                Ok(buf)
            }
            OurReader::Remote(c) => c.call(b'r', len),
        }
    }

    fn set_capacity(&mut self, bytes: usize) -> Result<usize, io::ErrorKind> {
        match self {
            OurReader::Local(r) => r.set_capacity(bytes).map_err(|e| e.kind()),
            OurReader::Remote(c) => c
                .call(b'c', bytes)
                .map(|v| u64::from_le_bytes(v.try_into().unwrap()) as usize),
        }
    }
}

/// A forked child holding the pipe's only reader, serving `(op, arg)` requests on a socket.
struct Remote {
    sock: std::os::unix::net::UnixStream,
    pid: libc::pid_t,
}

/// Bound for reaping the child: a hang fails, a slow machine does not.
const HANG: Duration = Duration::from_secs(60);

/// Held shared by every in-process case, exclusively around a fork (see [`run_with`]).
static FORKS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The error kinds a pipe operation can return, by index on the wire.
const KINDS: [io::ErrorKind; 4] = [
    io::ErrorKind::WouldBlock,
    io::ErrorKind::BrokenPipe,
    io::ErrorKind::ResourceBusy,
    io::ErrorKind::InvalidInput,
];

impl Remote {
    /// Forks a child that takes `r`; the parent keeps only the socket. The child drops the
    /// writer it inherited, as a child of `pipe(2)` closes the end it does not use.
    fn spawn(w: &mut Option<Writer>, r: Reader) -> Remote {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let exclusive = FORKS.write().unwrap_or_else(|e| e.into_inner());
        let pid = children::fork_raw();
        drop(exclusive);
        if pid == 0 {
            children::child(|| {
                drop(w.take());
                drop(a);
                serve(b, r);
                0
            });
        }
        drop(r);
        Remote { sock: a, pid }
    }

    fn call(&mut self, op: u8, arg: usize) -> Result<Vec<u8>, io::ErrorKind> {
        let mut req = [0u8; 9];
        req[0] = op;
        req[1..].copy_from_slice(&(arg as u64).to_le_bytes());
        self.sock.write_all(&req).unwrap();
        let mut head = [0u8; 9];
        self.sock.read_exact(&mut head).unwrap();
        let len = u64::from_le_bytes(head[1..].try_into().unwrap()) as usize;
        if head[0] != 0 {
            return Err(KINDS.get(len).copied().unwrap_or(io::ErrorKind::Other));
        }
        let mut body = vec![0u8; len];
        self.sock.read_exact(&mut body).unwrap();
        Ok(body)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.sock.write_all(&[b'q'; 9]);
        if std::thread::panicking() {
            // A second panic would abort the run: the child is not waited for, only ended.
            children::kill_and_reap(self.pid, HANG);
        } else {
            let code = children::reap_within(self.pid, HANG);
            assert_eq!(code, 0, "the reader's process failed");
        }
    }
}

/// The child's loop: `r` reads `arg` bytes, `c` sets the capacity, `q` quits (dropping the
/// reader: the pipe's last reader goes with it).
fn serve(mut sock: std::os::unix::net::UnixStream, r: Reader) {
    let mut req = [0u8; 9];
    while sock.read_exact(&mut req).is_ok() {
        let arg = u64::from_le_bytes(req[1..].try_into().unwrap()) as usize;
        let result = match req[0] {
            b'r' => {
                let mut buf = vec![0u8; arg];
                (&r).read(&mut buf).map(|n| {
                    buf.truncate(n);
                    buf
                })
            }
            b'c' => r
                .set_capacity(arg)
                .map(|c| (c as u64).to_le_bytes().to_vec()),
            _ => return,
        };
        let mut reply = vec![0u8; 9];
        match result {
            Ok(body) => {
                reply[1..].copy_from_slice(&(body.len() as u64).to_le_bytes());
                reply.extend(body);
            }
            Err(e) => {
                let k = KINDS.iter().position(|k| *k == e.kind()).unwrap_or(99);
                reply[0] = 1;
                reply[1..].copy_from_slice(&(k as u64).to_le_bytes());
            }
        }
        sock.write_all(&reply).unwrap();
    }
}

fn pattern(seq: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *seq += 1;
            (*seq % 251) as u8
        })
        .collect()
}

fn run(ops: &[Op], packet: bool, policy: PoolPolicy) -> Result<(), TestCaseError> {
    run_with(ops, packet, policy, false)
}

/// `remote`: the pagepipe reader lives in a forked child process.
///
/// A forked child inherits every descriptor of the process, as with `pipe(2)`: so that it
/// holds no end of a pipe another test thread is using, local cases hold [`FORKS`] shared for
/// their whole run, and a fork happens only with it held exclusively.
fn run_with(
    ops: &[Op],
    packet: bool,
    policy: PoolPolicy,
    remote: bool,
) -> Result<(), TestCaseError> {
    // SAFETY: ignoring SIGPIPE process-wide so EPIPE comes back as an error (Rust's runtime does
    // this too; be explicit).
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let _shared = (!remote).then(|| FORKS.read().unwrap_or_else(|e| e.into_inner()));
    let (w, r) = Builder::new()
        .packet_mode(packet)
        .pool(policy)
        .build()
        .unwrap();
    w.set_nonblocking(true).unwrap();
    r.set_nonblocking(true).unwrap();
    let mut w = Some(w);
    let r = if remote {
        OurReader::Remote(Remote::spawn(&mut w, r))
    } else {
        OurReader::Local(r)
    };
    let mut ours = Ours { w, r: Some(r) };
    // After the fork: the child must not hold the kernel pipe's descriptors.
    let mut k = Kernel::new(packet);
    prop_assume!(k.capacity() == 65536, "kernel pipe did not start at 64 KiB");
    prop_assert_eq!(poll_masks(&k, &ours), (None, None), "before any operation");
    let mut seq = 0u64;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Write(len) => {
                let (Some(_), Some(w)) = (&k.w, &mut ours.w) else {
                    continue;
                };
                let data = pattern(&mut seq, len);
                let kr = k.write(&data);
                let or = w.write(&data).map_err(|e| e.kind());
                prop_assert_eq!(kr, or, "op {} write({})", i, len);
            }
            Op::Read(len) => {
                let (Some(_), Some(r)) = (&k.r, &mut ours.r) else {
                    continue;
                };
                let kr = k.read(len);
                let or = r.read(len);
                match (&kr, &or) {
                    (Ok(a), Ok(b)) => {
                        prop_assert_eq!(a.len(), b.len(), "op {} read({}) count", i, len);
                        prop_assert!(a == b, "op {} read({}) data differs", i, len);
                    }
                    _ => prop_assert_eq!(kr, or, "op {} read({})", i, len),
                }
            }
            Op::SetCapacity(bytes) => {
                let ours_cap = match (&ours.w, &mut ours.r) {
                    (Some(w), _) => w.set_capacity(bytes).map_err(|e| e.kind()),
                    (None, Some(r)) => r.set_capacity(bytes),
                    (None, None) => continue,
                };
                prop_assert_eq!(
                    k.set_capacity(bytes),
                    ours_cap,
                    "op {} set_capacity({})",
                    i,
                    bytes
                );
            }
            Op::CloseWriter => {
                if k.r.is_some() || ours.r.is_some() {
                    k.w = None;
                    ours.w = None;
                }
            }
            Op::CloseReader => {
                if k.w.is_some() || ours.w.is_some() {
                    k.r = None;
                    ours.r = None;
                }
            }
        }
        // Every mask as the kernel's after every operation, a resize with the reader gone (or
        // in another process) included: either side can set the signal pipe's slot count.
        let masks = poll_masks(&k, &ours);
        prop_assert_eq!(masks, (None, None), "poll after op {} {:?}", i, op);
    }
    Ok(())
}

/// `poll(2)` of one descriptor, now: the bits a pipe end can report.
fn mask(fd: i32, events: i16) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, 0) },
        i32::from(p.revents != 0)
    );
    p.revents & (libc::POLLIN | libc::POLLOUT | libc::POLLHUP | libc::POLLERR)
}

/// The reader's and the writer's poll masks where kernel and pagepipe differ: `(None, None)`
/// when they agree (a remote reader is polled only through its writer).
#[allow(clippy::type_complexity)]
fn poll_masks(k: &Kernel, ours: &Ours) -> (Option<(i16, i16)>, Option<(i16, i16)>) {
    let both = libc::POLLIN | libc::POLLOUT;
    let r = match (&k.r, &ours.r) {
        (Some(kr), Some(OurReader::Local(or))) => {
            let pair = (mask(kr.as_raw_fd(), both), mask(or.as_raw_fd(), both));
            (pair.0 != pair.1).then_some(pair)
        }
        _ => None,
    };
    let w = match (&k.w, &ours.w) {
        (Some(kw), Some(ow)) => {
            let pair = (mask(kw.as_raw_fd(), both), mask(ow.as_raw_fd(), both));
            (pair.0 != pair.1).then_some(pair)
        }
        _ => None,
    };
    (r, w)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn same_as_kernel_pipe(ops in prop::collection::vec(op(), 1..60), policy in policy()) {
        run(&ops, false, policy)?;
    }

    #[test]
    fn same_as_kernel_packet_pipe(ops in prop::collection::vec(op(), 1..60), policy in policy()) {
        run(&ops, true, policy)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    /// The same, with pagepipe's reader in a forked child process.
    #[test]
    fn same_as_kernel_pipe_reader_in_another_process(
        ops in prop::collection::vec(op(), 1..60),
        policy in policy(),
        packet in any::<bool>(),
    ) {
        run_with(&ops, packet, policy, true)?;
    }
}

#[test]
fn merge_rule_examples() {
    // Hand-picked sequences that exercise the sub-page remainder rule.
    use Op::*;
    for ops in [
        vec![
            Write(100),
            Write(5000),
            Read(3000),
            Write(4000),
            Write(100),
            Read(70000),
        ],
        vec![Write(4000), Read(4000), Write(50), Read(10)],
        vec![
            Write(65536),
            Write(1),
            Read(1),
            Write(1),
            Write(4096),
            Read(5000),
            Write(8192),
        ],
        vec![
            Write(100),
            SetCapacity(4096),
            Write(4096),
            Write(3996),
            Write(1),
        ],
        vec![
            Write(70000),
            SetCapacity(8192),
            Read(70000),
            SetCapacity(8192),
            Write(9000),
        ],
        vec![Write(10), CloseReader, Write(0), Write(1)],
        vec![Write(10), CloseWriter, Read(5), Read(5), Read(5)],
    ] {
        for policy in POLICIES {
            run(&ops, false, policy).unwrap();
            run(&ops, true, policy).unwrap();
        }
    }
}
