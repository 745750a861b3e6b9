//! Notification pipes: Linux's watch_queue rules (byte layout, whole-record reads, ENOBUFS,
//! LOSS, filters, EXDEV/EBUSY), a model of the kernel's queue, and posters racing a reader
//! across threads and processes.
//!
//! The kernel comparison: this test suite asks the kernel for a notification pipe
//! (`pipe2(O_NOTIFICATION_PIPE)`); the machine it was written on runs a kernel built without
//! `CONFIG_WATCH_QUEUE`, which answers `ENOPKG`, so the records are compared with a model of the
//! kernel's queue instead (`model_*`), written from the documented rules.

#[path = "support/peer.rs"]
#[allow(dead_code)] // shared with tests/corrupt.rs and the fuzz target
mod peer;

#[path = "support/children.rs"]
mod children;
use children::serial;

use pagepipe::{Builder, Filter, Notification, NotificationReader, Notifier, MAX_PAYLOAD};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::time::Duration;

/// Bound for reaping a child: a hang fails, a slow machine does not.
const HANG: Duration = Duration::from_secs(60);

fn note(kind: u32, subtype: u8, payload: &[u8]) -> Notification {
    Notification {
        kind,
        subtype,
        id: 3,
        info_flags: 0x8001,
        payload: payload.to_vec(),
    }
}

/// The errno Linux gives for `e`: a buffer too small for the next record is `ENOBUFS` there and
/// `InvalidInput` here (a kind a caller can match).
fn errno(e: &std::io::Error) -> Option<i32> {
    if e.kind() == ErrorKind::InvalidInput {
        return Some(libc::ENOBUFS);
    }
    e.raw_os_error()
}

#[test]
fn records_are_read_whole_in_linux_layout() {
    let _serial = serial();
    let (n, mut r) = Builder::new().notifications(5).build().unwrap();
    assert_eq!(n.capacity(), 8, "5 records round up to a ring of 8");
    let a = note(1, 0, b"abc");
    let b = note(0xfffff, 7, &[9; MAX_PAYLOAD]);
    assert!(n.post(&a).unwrap());
    assert!(n.post(&b).unwrap());
    assert_eq!(r.len(), 11 + 127);
    // A buffer that holds the first record but not the second returns the first alone.
    let mut buf = [0u8; 100];
    assert_eq!(r.read(&mut buf).unwrap(), 11);
    assert_eq!(&buf[..11], &a.to_bytes()[..]);
    // One too small for the next record: ENOBUFS, and the record stays queued.
    let e = r.read(&mut buf).unwrap_err();
    assert_eq!(errno(&e), Some(libc::ENOBUFS));
    let mut big = [0u8; 512];
    assert_eq!(r.read(&mut big).unwrap(), 127);
    assert_eq!(Notification::parse(&big).unwrap(), (b, 127));
    // Several records in one read.
    for i in 0..3 {
        n.post(&note(1, i, b"")).unwrap();
    }
    assert_eq!(r.read(&mut big).unwrap(), 24);
    drop(n);
    assert_eq!(
        r.read(&mut big).unwrap(),
        0,
        "end of file once no notifier is left"
    );
    assert_eq!(
        r.read_notification().unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    assert!(
        r.next_notification().unwrap().is_none(),
        "the end as Ok(None)"
    );
}

#[test]
fn the_end_of_the_stream_is_none_and_ends_the_iterator() {
    let _serial = serial();
    let (n, mut r) = Builder::new().notifications(2).build().unwrap();
    for i in 0..3 {
        n.post(&note(1, i, b"")).unwrap(); // the third is lost
    }
    drop(n);
    let got: Vec<Notification> = r.iter().collect::<Result<_, _>>().unwrap();
    let shape: Vec<(u32, u8)> = got.iter().map(|x| (x.kind, x.subtype)).collect();
    assert_eq!(shape, [(1, 0), (1, 1), (0, 1)], "two records, then LOSS");
    assert!(got[2].is_loss());
    assert!(r.next_notification().unwrap().is_none());
    assert_eq!(r.iter().count(), 0);
}

#[test]
fn a_notifier_cannot_post_meta_records() {
    let _serial = serial();
    let (n, mut r) = Builder::new().notifications(2).build().unwrap();
    r.set_nonblocking(true).unwrap();
    for forged in [Notification::loss(), note(0, 0, b""), note(0, 9, b"x")] {
        let e = n.post(&forged).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{forged:?}");
    }
    assert_eq!(
        r.next_notification().unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}

#[test]
fn a_full_ring_flags_the_last_record_and_the_reader_gets_one_loss_record() {
    let _serial = serial();
    let (n, mut r) = Builder::new().notifications(2).build().unwrap();
    assert!(n.post(&note(1, 0, b"0")).unwrap());
    assert!(n.post(&note(1, 1, b"1")).unwrap());
    assert!(!n.post(&note(1, 2, b"2")).unwrap());
    assert!(!n.post(&note(1, 3, b"3")).unwrap());
    assert_eq!(r.read_notification().unwrap().subtype, 0);
    assert!(n.post(&note(1, 4, b"4")).unwrap(), "room again");
    assert_eq!(r.read_notification().unwrap().subtype, 1);
    assert!(r.read_notification().unwrap().is_loss());
    assert_eq!(r.read_notification().unwrap().subtype, 4);
    // The LOSS record follows in the same read when it fits, and needs 8 bytes.
    n.post(&note(1, 5, b"")).unwrap();
    n.post(&note(1, 6, b"")).unwrap();
    assert!(!n.post(&note(1, 7, b"")).unwrap());
    let mut buf = [0u8; 20];
    assert_eq!(r.read(&mut buf).unwrap(), 16);
    let mut tiny = [0u8; 7];
    assert_eq!(errno(&r.read(&mut tiny).unwrap_err()), Some(libc::ENOBUFS));
    assert_eq!(r.read(&mut buf).unwrap(), 8);
    assert_eq!(&buf[..8], &Notification::loss().to_bytes()[..]);
    r.set_nonblocking(true).unwrap();
    assert_eq!(r.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
}

#[test]
fn linux_errors_for_data_operations() {
    let _serial = serial();
    let (n, r) = Builder::new().notifications(4).build().unwrap();
    n.post(&note(1, 0, b"x")).unwrap();
    // Linux answers data operations on a notification pipe with EXDEV (read_chunk, splice,
    // tee) and EBUSY (resize): here a NotificationReader has none of them, so they do not
    // compile (see the compile_fail examples on NotificationReader). An end that travels
    // between processes is checked for its kind on arrival instead.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    r.send_to(&a).unwrap();
    assert_eq!(
        pagepipe::Reader::recv_from(&b).unwrap_err().kind(),
        ErrorKind::InvalidData
    );
    let (_w, data) = pagepipe::pipe().unwrap();
    data.send_to(&a).unwrap();
    assert_eq!(
        pagepipe::NotificationReader::recv_from(&b)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidData
    );
    for bad in [0, 513] {
        let e = Builder::new().notifications(bad).build();
        assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidInput);
    }
    let too_big = note(1, 0, &[0; MAX_PAYLOAD + 1]);
    assert_eq!(
        n.post(&too_big).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        n.post(&note(1 << 24, 0, b"")).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    drop(r);
    assert_eq!(
        n.post(&note(1, 0, b"")).unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

#[test]
fn filters_drop_what_matches_none() {
    let _serial = serial();
    let (n, mut r) = Builder::new().notifications(8).build().unwrap();
    let f = Filter {
        kind: 1,
        info_filter: 0x0300,
        info_mask: 0xff00,
        subtypes: 0b110,
    };
    r.set_filter(&[f]).unwrap();
    for (kind, subtype, id) in [(1, 1, 3), (1, 0, 3), (2, 1, 3), (1, 2, 4), (1, 2, 3)] {
        let mut x = note(kind, subtype, b"");
        x.id = id;
        assert!(n.post(&x).unwrap(), "a filtered post is not a loss");
    }
    assert_eq!(r.read_notification().unwrap().subtype, 1);
    let last = r.read_notification().unwrap();
    assert_eq!((last.subtype, last.id), (2, 3));
    r.set_nonblocking(true).unwrap();
    assert_eq!(
        r.read_notification().unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    let bad = [
        Filter {
            info_mask: 0x7f,
            ..f
        },
        Filter {
            info_filter: 0x1,
            info_mask: 0x100,
            ..f
        },
    ];
    for b in bad {
        assert_eq!(
            r.set_filter(&[b]).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
    assert_eq!(
        r.set_filter(&[f; 17]).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    r.set_filter(&[]).unwrap();
    n.post(&note(9, 31, b"")).unwrap();
    assert_eq!(r.read_notification().unwrap().kind, 9);
}

#[test]
fn notifiers_travel_like_ends_and_refuse_data_pipes() {
    let _serial = serial();
    use std::os::unix::net::UnixStream;
    let (n, mut r) = Builder::new().notifications(4).build().unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    n.send_to(&a).unwrap();
    drop(n);
    let n2 = Notifier::recv_from(&b).unwrap();
    n2.post(&note(1, 5, b"via socket")).unwrap();
    assert_eq!(r.read_notification().unwrap().payload, b"via socket");
    n2.send_to(&a).unwrap();
    let e = pagepipe::Writer::recv_from(&b).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    let (w, _r) = pagepipe::pipe().unwrap();
    w.send_to(&a).unwrap();
    assert_eq!(
        Notifier::recv_from(&b).unwrap_err().kind(),
        ErrorKind::InvalidData
    );
}

/// The kernel's own notification pipe, if this kernel has one: `pipe2(O_NOTIFICATION_PIPE)`.
#[test]
fn kernel_notification_pipes_are_probed() {
    let _serial = serial();
    const O_NOTIFICATION_PIPE: libc::c_int = libc::O_EXCL;
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), O_NOTIFICATION_PIPE) };
    if rc == 0 {
        // SAFETY: both descriptors are ours.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        eprintln!("this kernel has notification pipes: the model below stands in for it anyway");
    } else {
        let e = std::io::Error::last_os_error();
        // CONFIG_WATCH_QUEUE=n: ENOPKG. Anything else would be a change worth knowing about.
        assert_eq!(e.raw_os_error(), Some(libc::ENOPKG), "{e}");
    }
}

/// Linux's watch queue as its documentation and uapi header describe it: a ring of `cap`
/// records; a post into a full ring flags the last record; reads return whole records, the
/// LOSS record after a flagged one, ENOBUFS for a buffer too small for the next.
struct Model {
    cap: usize,
    q: VecDeque<(Vec<u8>, bool)>,
    note_loss: bool,
    filters: Vec<Filter>,
}

impl Model {
    fn post(&mut self, n: &Notification) -> bool {
        let pass = self.filters.is_empty()
            || self.filters.iter().any(|f| {
                f.kind == n.kind
                    && n.subtype < 32
                    && f.subtypes >> n.subtype & 1 == 1
                    && n.info() & f.info_mask == f.info_filter
            });
        if !pass {
            return true;
        }
        if self.q.len() == self.cap {
            self.q.back_mut().unwrap().1 = true;
            return false;
        }
        self.q.push_back((n.to_bytes(), false));
        true
    }

    fn read(&mut self, len: usize) -> Result<Vec<u8>, i32> {
        let mut out = Vec::new();
        loop {
            if self.note_loss {
                if len - out.len() < 8 {
                    break;
                }
                out.extend(Notification::loss().to_bytes());
                self.note_loss = false;
                continue;
            }
            let Some((rec, _)) = self.q.front() else {
                break;
            };
            if rec.len() > len - out.len() {
                break;
            }
            let (rec, loss) = self.q.pop_front().unwrap();
            out.extend(rec);
            self.note_loss = loss;
        }
        if out.is_empty() && (self.note_loss || !self.q.is_empty()) {
            return Err(libc::ENOBUFS);
        }
        Ok(out)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Post(u32, u8, u8, usize),
    Read(usize),
    Filter(Vec<(u32, u32, u32)>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u32..3, 0u8..4, 0u8..3, 0usize..=MAX_PAYLOAD).prop_map(|(k, s, id, l)| Op::Post(k, s, id, l)),
        3 => prop_oneof![Just(7usize), Just(8), 1usize..300].prop_map(Op::Read),
        1 => proptest::collection::vec((0u32..3, 0u32..3, 0u32..16), 0..3).prop_map(Op::Filter),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn model_of_the_kernel_queue(records in 1usize..10, ops in proptest::collection::vec(op(), 1..80)) {
        let _serial = serial();
        let (n, mut r) = Builder::new().notifications(records).build().unwrap();
        r.set_nonblocking(true).unwrap();
        let mut m = Model { cap: records.next_power_of_two(), q: VecDeque::new(), note_loss: false, filters: vec![] };
        for op in ops {
            match op {
                Op::Post(kind, subtype, id, len) => {
                    let x = Notification { kind, subtype, id, info_flags: 0, payload: vec![id; len] };
                    if kind == pagepipe::META_KIND {
                        // Meta records are the pipe's own (Linux: only the kernel posts them).
                        prop_assert_eq!(n.post(&x).unwrap_err().kind(), ErrorKind::InvalidInput);
                    } else {
                        prop_assert_eq!(n.post(&x).unwrap(), m.post(&x));
                    }
                }
                Op::Read(len) => {
                    let mut buf = vec![0u8; len];
                    let got = match r.read(&mut buf) {
                        Ok(k) => Ok(buf[..k].to_vec()),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(vec![]),
                        Err(e) => Err(errno(&e).unwrap()),
                    };
                    prop_assert_eq!(got, m.read(len));
                }
                Op::Filter(fs) => {
                    let fs: Vec<Filter> = fs.into_iter().map(|(kind, id, subtypes)| Filter {
                        kind, info_filter: id << 8, info_mask: 0xff00, subtypes,
                    }).collect();
                    r.set_filter(&fs).unwrap();
                    m.filters = fs;
                }
            }
        }
    }
}

/// What a reader saw: per poster, the sequence numbers received in order, and where LOSS
/// records came in the stream.
#[derive(Default)]
struct Seen {
    stream: Vec<Option<(u8, u32)>>, // None: a LOSS record
}

impl Seen {
    fn push(&mut self, n: Notification) {
        if n.is_loss() {
            assert_ne!(self.stream.last(), Some(&None), "two LOSS records in a row");
            assert!(!self.stream.is_empty(), "a LOSS record before any record");
            self.stream.push(None);
        } else {
            let seq = u32::from_le_bytes(n.payload[..4].try_into().unwrap());
            assert!(
                n.payload[4..].iter().all(|&b| b == n.id),
                "torn record {n:?}"
            );
            self.stream.push(Some((n.id, seq)));
        }
    }

    /// Checks the invariants against the posters' own counts: per poster, sequence numbers
    /// strictly increase; every gap (posts that returned false) has a LOSS record between the
    /// records around it; received == posted-true; LOSS records <= failed posts.
    fn check(&self, posted: &[(u32, u32)]) {
        eprintln!("(queued, lost) per poster: {posted:?}");
        let mut last: Vec<Option<(u32, usize)>> = vec![None; posted.len()];
        let mut got = vec![0u32; posted.len()];
        let mut losses = 0;
        let loss_at: Vec<usize> = (0..self.stream.len())
            .filter(|&i| self.stream[i].is_none())
            .collect();
        for (i, e) in self.stream.iter().enumerate() {
            let Some((p, seq)) = *e else {
                losses += 1;
                continue;
            };
            let p = p as usize;
            got[p] += 1;
            let expect_from = last[p].map_or(0, |(s, _)| s + 1);
            assert!(seq >= expect_from, "poster {p}: {seq} after {expect_from}");
            if seq > expect_from {
                let from = last[p].map_or(0, |(_, at)| at);
                assert!(
                    loss_at.iter().any(|&l| l > from && l < i)
                        || last[p].is_none() && loss_at.iter().any(|&l| l < i),
                    "poster {p}: records {expect_from}..{seq} lost with no LOSS record between"
                );
            }
            last[p] = Some((seq, i));
        }
        let failed: u32 = posted.iter().map(|&(_, f)| f).sum();
        for (p, &(ok, _)) in posted.iter().enumerate() {
            assert_eq!(got[p], ok, "poster {p}: received vs posted");
        }
        assert!(
            losses <= failed,
            "{losses} LOSS records for {failed} failed posts"
        );
        assert_eq!(
            losses == 0,
            failed == 0,
            "{losses} LOSS records for {failed} failed posts"
        );
    }
}

/// Posts `count` sequence-numbered records as poster `id`; returns (queued, lost).
fn post_many(n: &Notifier, id: u8, count: u32) -> (u32, u32) {
    let (mut ok, mut lost) = (0, 0);
    for seq in 0..count {
        let mut payload = seq.to_le_bytes().to_vec();
        payload.extend(std::iter::repeat_n(id, (seq as usize * 7) % 60));
        let x = Notification {
            kind: 1,
            subtype: 0,
            id,
            info_flags: 0,
            payload,
        };
        if n.post(&x).unwrap() {
            ok += 1;
        } else {
            lost += 1;
        }
    }
    (ok, lost)
}

/// Reads until end of file, stalling now and then so the ring fills.
fn drain(mut r: NotificationReader) -> Seen {
    let mut seen = Seen::default();
    let mut i = 0u64;
    loop {
        match r.read_notification() {
            Ok(n) => seen.push(n),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return seen,
            Err(e) => panic!("{e}"),
        }
        i += 1;
        if i % 5000 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[test]
fn posters_race_a_reader_across_threads() {
    let _serial = serial();
    let (n, r) = Builder::new().notifications(16).build().unwrap();
    let reader = std::thread::spawn(move || drain(r));
    let posters: Vec<_> = (0..4u8)
        .map(|id| {
            let n = n.clone();
            std::thread::spawn(move || post_many(&n, id, 50_000))
        })
        .collect();
    drop(n);
    let posted: Vec<_> = posters.into_iter().map(|t| t.join().unwrap()).collect();
    let seen = reader.join().unwrap();
    seen.check(&posted);
}

#[test]
fn posters_race_a_reader_across_processes() {
    let _serial = serial();
    let (n, r) = Builder::new().notifications(8).build().unwrap();
    let mut children = Vec::new();
    for id in 0..2u8 {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a writable array of two ints.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let pid = children::fork_raw();
        if pid == 0 {
            children::child(|| {
                drop(r);
                let (ok, lost) = post_many(&n, id, 20_000);
                let out = [ok.to_le_bytes(), lost.to_le_bytes()].concat();
                // SAFETY: writes our 8 bytes to the pipe's write end.
                unsafe { libc::write(fds[1], out.as_ptr().cast(), 8) };
                0
            });
        }
        // SAFETY: the parent does not write.
        unsafe { libc::close(fds[1]) };
        children.push((pid, fds[0]));
    }
    drop(n);
    let seen = drain(r);
    let posted: Vec<(u32, u32)> = children
        .into_iter()
        .map(|(pid, fd)| {
            let mut b = [0u8; 8];
            // SAFETY: reads 8 bytes into a local buffer from the pipe's read end, which we own.
            unsafe {
                assert_eq!(libc::read(fd, b.as_mut_ptr().cast(), 8), 8);
                libc::close(fd);
            }
            assert_eq!(children::reap_within(pid, HANG), 0);
            (
                u32::from_le_bytes(b[..4].try_into().unwrap()),
                u32::from_le_bytes(b[4..].try_into().unwrap()),
            )
        })
        .collect();
    seen.check(&posted);
}

#[test]
fn a_poster_killed_holding_the_post_lock_is_taken_over() {
    let _serial = serial();
    let (n, mut r) = Builder::new().notifications(4).build().unwrap();
    r.set_nonblocking(true).unwrap();
    for _ in 0..20 {
        let pid = children::fork(|| loop {
            let _ = n.post(&note(1, 0, b"spam"));
        });
        std::thread::sleep(Duration::from_millis(3));
        assert_eq!(children::kill_and_reap(pid, HANG), 128 + libc::SIGKILL);
        // Posting (after a takeover if it died holding the lock) and reading keep working.
        let mut buf = [0u8; 4096];
        while r.read(&mut buf).is_ok() {}
        assert!(n.post(&note(1, 9, b"after")).unwrap());
        let mut last = None;
        while let Ok(x) = r.read_notification() {
            last = Some(x);
        }
        assert_eq!(last.unwrap().subtype, 9);
    }
}

#[derive(Clone, Debug)]
enum Hostile {
    Post(usize),
    Read(usize),
    One,
    Filter(u32),
    /// Overwrite the u64 at this offset of the region.
    Poke(usize, u64),
}

/// Offsets worth corrupting: the header (with the notification words), slot states and starts,
/// and the records at the start of the first slots' pages.
fn hostile_offset() -> impl Strategy<Value = usize> {
    // The header's half page, then the slot table of the 8 records' ring, in the same page: a
    // notification pipe reserves exactly its ring.
    const ARENA: usize = 4096;
    prop_oneof![
        (0usize..190).prop_map(peer::header_word),
        (0usize..8).prop_map(|s| 2048 + s * 64),
        (0usize..8).prop_map(|s| 2048 + s * 64 + 8),
        (0usize..8, 0usize..16).prop_map(|(p, w)| ARENA + p * 4096 + w * 8),
    ]
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        3 => (0usize..=MAX_PAYLOAD).prop_map(Hostile::Post),
        2 => (0usize..300).prop_map(Hostile::Read),
        1 => Just(Hostile::One),
        1 => (0u32..4).prop_map(Hostile::Filter),
        3 => (hostile_offset(), prop_oneof![any::<u64>(), 0u64..300, Just(0), Just(u64::MAX), (0u64..64).prop_map(|b| 1 << b)])
            .prop_map(|(o, v)| Hostile::Poke(o, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]
    /// A peer that scribbles on a notification pipe's region: every call returns, within a
    /// bound, with a success or an expected error; no panic, fault or hang.
    #[test]
    fn corrupted_notification_regions_are_errors(ops in proptest::collection::vec(hostile(), 1..40)) {
        let _serial = serial();
        let (n, mut r) = Builder::new().notifications(8).build().unwrap();
        r.set_nonblocking(true).unwrap();
        let map = peer::Mapped::sent(|s| n.send_to(s).unwrap());
        let ok = |e: &std::io::Error| {
            matches!(
                e.kind(),
                ErrorKind::WouldBlock | ErrorKind::InvalidData | ErrorKind::BrokenPipe
                    | ErrorKind::Deadlock | ErrorKind::UnexpectedEof
            ) || errno(e) == Some(libc::ENOBUFS)
        };
        for op in ops {
            let t = std::time::Instant::now();
            let res = match op {
                Hostile::Post(len) => n.post(&note(1, 0, &vec![7; len])).map(drop),
                Hostile::Read(len) => r.read(&mut vec![0u8; len]).map(drop),
                Hostile::One => r.read_notification().map(drop),
                Hostile::Filter(k) => r.set_filter(&[Filter { kind: k, info_filter: 0, info_mask: 0, subtypes: 1 }]),
                Hostile::Poke(o, v) => {
                    map.poke(o, v);
                    Ok(())
                }
            };
            if let Err(e) = &res {
                prop_assert!(ok(e), "{op:?}: unexpected {e:?}");
            }
            prop_assert!(t.elapsed() < Duration::from_secs(5), "{op:?} took {:?}", t.elapsed());
        }
    }
}

/// A peer writes a live, unrelated thread's identity (init's: thread 1 of process key 1, or
/// any live process's) into the write side's lock: the stranger holds no key on this pipe's
/// memory file, so the lock reads as a dead holder's and the post takes it over.
#[test]
fn a_post_takes_a_lock_a_peer_gave_to_a_live_stranger() {
    const WRITE_SIDE_LOCK: usize = 640; // region.rs pins the header's offsets
    let _serial = serial();
    let (n, mut r) = Builder::new().notifications(4).build().unwrap();
    let region = peer::Mapped::sent(|sock| n.send_to(sock).unwrap());
    region.poke(WRITE_SIDE_LOCK, 1 << 32 | 1);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(n.post(&note(1, 0, b"x")).map_err(|e| e.kind()));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a post spun on a lock held in a live stranger's name");
    assert_eq!(got, Ok(true));
    assert_eq!(r.read_notification().unwrap(), note(1, 0, b"x"));
}
