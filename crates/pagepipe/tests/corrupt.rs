//! A peer that lies: random words of a live pipe's shared region are overwritten between
//! operations, as a hostile process mapping the region could. Every operation must return (an
//! error is fine, `InvalidData` expected), never panic, fault or hang; bytes are the peer's
//! business, memory safety is ours.

#[path = "support/peer.rs"]
#[allow(dead_code)] // the fuzz target uses all of it, this test not `len`
mod peer;

use pagepipe::{Builder, PoolPolicy, Reader, Writer};
use peer::{header_word, Mapped};
use proptest::prelude::*;
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
enum Op {
    Write(usize),
    Read(usize),
    Chunk(usize),
    Consume(usize),
    Resize(usize),
    Len,
    /// Overwrite the u64 at this offset (words of the header, slot table or arena).
    Poke(usize, u64),
}

/// Offsets worth corrupting: every header word, the slots' states and starts (the 32 slots in
/// the header's page: a default ring has 16), arena bytes.
fn offset() -> impl Strategy<Value = usize> {
    prop_oneof![
        (0usize..160).prop_map(header_word),          // header (1.25 KiB)
        (0usize..32).prop_map(|s| 2048 + s * 64),     // slot states
        (0usize..32).prop_map(|s| 2048 + s * 64 + 8), // slot starts
        (0usize..16, 0usize..4).prop_map(|(p, w)| ARENA + p * 4096 + w * 8), // data
    ]
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..70_000,
        Just(0),
        Just(u64::MAX),
        (0u64..64).prop_map(|b| 1 << b),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..20_000).prop_map(Op::Write),
        3 => (0usize..20_000).prop_map(Op::Read),
        1 => (0usize..20_000).prop_map(Op::Chunk),
        1 => (0usize..20_000).prop_map(Op::Consume),
        1 => (1usize..300_000).prop_map(Op::Resize),
        1 => Just(Op::Len),
        3 => (offset(), value()).prop_map(|(o, v)| Op::Poke(o, v)),
    ]
}

fn acceptable(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::WouldBlock
            | ErrorKind::InvalidData
            | ErrorKind::TimedOut
            | ErrorKind::BrokenPipe
            | ErrorKind::Deadlock
            | ErrorKind::ResourceBusy
    )
}

fn check<T>(r: std::io::Result<T>) -> Result<(), TestCaseError> {
    if let Err(e) = r {
        prop_assert!(acceptable(e.kind()), "unexpected error {e:?}");
    }
    Ok(())
}

fn run(ops: &[Op], policy: PoolPolicy) -> Result<(), TestCaseError> {
    let (w, r): (Writer, Reader) = Builder::new().capacity(65536).pool(policy).build().unwrap();
    w.set_nonblocking(true).unwrap();
    r.set_nonblocking(true).unwrap();
    let map = Mapped::of(&w);
    let data = vec![0xa5u8; 20_000];
    let mut buf = vec![0u8; 20_000];
    for op in ops {
        let t = Instant::now();
        match *op {
            Op::Write(n) => check((&w).write(&data[..n]))?,
            Op::Read(n) => check((&r).read(&mut buf[..n]))?,
            Op::Chunk(n) => check(w.write_chunk().map(|mut c| {
                let first = c.as_mut_slices().0;
                let n = n.min(first.len());
                first[..n].fill(1);
                c.commit(n)
            }))?,
            Op::Consume(n) => check(r.read_chunk().map(|c| {
                let n = n.min(c.len());
                let seen: usize = c
                    .slices()
                    .map(|s| s.iter().map(|&b| b as usize).sum::<usize>())
                    .sum();
                c.consume(n);
                seen
            }))?,
            Op::Resize(n) => check(w.set_capacity(n))?,
            Op::Len => {
                let _ = (r.len(), w.free(), w.capacity(), w.spare_pages());
            }
            Op::Poke(o, v) => map.poke(o, v),
        }
        // Non-blocking calls never sleep; a dead "holder" a peer wrote is checked at once. A
        // live one (our own thread id) is Deadlock.
        prop_assert!(
            t.elapsed() < Duration::from_secs(5),
            "{op:?} took {:?}",
            t.elapsed()
        );
    }
    // Blocking calls with a timeout return too.
    w.set_nonblocking(false).unwrap();
    r.set_nonblocking(false).unwrap();
    r.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    w.set_write_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let t = Instant::now();
    check((&r).read(&mut buf))?;
    check((&w).write(&data))?;
    prop_assert!(t.elapsed() < Duration::from_secs(5));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn corrupted_regions_are_errors_not_undefined_behaviour(
        ops in prop::collection::vec(op(), 1..40),
        policy in prop_oneof![
            Just(PoolPolicy::default()),
            Just(PoolPolicy::None),
            Just(PoolPolicy::Unified { keep: 2, burst: 8 }),
        ],
    ) {
        run(&ops, policy)?;
    }
}

/// A side whose saved state a peer corrupted is reported, and left free: the next caller, on
/// any thread, gets the error too (not a wait for a side nobody will release), and once the
/// word is right again the pipe works.
#[test]
fn a_corrupt_side_state_leaves_the_side_free() {
    // The saved head of the write side and the saved tail of the read side
    // (`Header::write_side` at 640 and `read_side` at 768; `Side::state` at 8).
    const SAVED_HEAD: usize = 648;
    const SAVED_TAIL: usize = 776;
    let (w, r): (Writer, Reader) = Builder::new().build().unwrap();
    let map = Mapped::of(&w);
    let wait = Some(Duration::from_millis(300));
    w.set_write_timeout(wait).unwrap();
    r.set_read_timeout(wait).unwrap();
    (&w).write_all(b"ab").unwrap();
    let mut one = [0u8; 1];
    (&r).read_exact(&mut one).unwrap(); // one slot: head 1, tail 0 (the slot is not drained)

    map.poke(SAVED_HEAD, 77);
    map.poke(SAVED_TAIL, 77);
    for _ in 0..2 {
        assert_eq!((&w).write(b"c").unwrap_err().kind(), ErrorKind::InvalidData);
        assert_eq!(
            (&r).read(&mut one).unwrap_err().kind(),
            ErrorKind::InvalidData
        );
    }
    let (w2, r2) = (w.clone(), r.clone());
    let kinds = std::thread::spawn(move || {
        let mut one = [0u8; 1];
        (
            (&w2).write(b"c").unwrap_err().kind(),
            (&r2).read(&mut one).unwrap_err().kind(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(kinds, (ErrorKind::InvalidData, ErrorKind::InvalidData));

    map.poke(SAVED_HEAD, 1);
    map.poke(SAVED_TAIL, 0);
    (&w).write_all(b"c").unwrap();
    let mut rest = [0u8; 2];
    (&r).read_exact(&mut rest).unwrap();
    assert_eq!(&rest, b"bc");
}

/// A head word that a peer moved away from the writer's saved head is reported by the writer:
/// when it publishes (the RMW returns the word), and when it finds the ring full, before it
/// waits for room the word promises but the ring does not have.
#[test]
fn a_moved_head_word_is_reported_by_the_writer() {
    // `Header::head`, the index word: `index << 1`.
    const HEAD_WORD: usize = 128;
    let (w, _r): (Writer, Reader) = Builder::new().capacity(4096).build().unwrap();
    let map = Mapped::of(&w);
    w.set_write_timeout(Some(Duration::from_millis(300)))
        .unwrap();

    // Publication: the ring is empty, so the byte takes a new slot and the RMW sees index 5.
    map.poke(HEAD_WORD, 5 << 1);
    assert_eq!((&w).write(b"x").unwrap_err().kind(), ErrorKind::InvalidData);

    // A full ring (one slot): a word behind the saved head promises room.
    let (w, _r): (Writer, Reader) = Builder::new().capacity(4096).build().unwrap();
    let map = Mapped::of(&w);
    w.set_write_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    (&w).write_all(&[1u8; 4096]).unwrap();
    map.poke(HEAD_WORD, 0);
    let t = Instant::now();
    assert_eq!((&w).write(b"y").unwrap_err().kind(), ErrorKind::InvalidData);
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

/// A peer that shrinks a slot under a live chunk: the caller's count, taken from the chunk
/// before, no longer matches the region, and `consume` (and the splice family, which consume
/// the count they moved) must not panic on it.
#[test]
fn a_slot_shrunk_under_a_chunk_does_not_make_consume_panic() {
    // The slot table starts a page into the region; a slot's state is `end | flags`.
    const SLOT0_STATE: usize = 2048;
    const CAN_MERGE: u64 = 1 << 32;
    let (mut w, r): (Writer, Reader) = Builder::new().build().unwrap();
    let map = Mapped::of(&w);
    w.write_all(b"hello").unwrap();
    let chunk = r.read_chunk().unwrap();
    let n = chunk.len();
    assert_eq!(n, 5);
    map.poke(SLOT0_STATE, CAN_MERGE | 1); // the slot now ends after one byte
    chunk.consume(n); // consumes what the region now says is there
    r.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(
        (&r).read(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}

/// Where the ring's first page starts in a region: right after the header's page (which holds
/// the header and the first 32 slots).
const ARENA: usize = 4096;

/// Once another process may hold an end, a read chunk's safe slices are this process's copy:
/// a peer's write to the ring leaves them as they were (a `&[u8]` over memory a peer writes
/// would be undefined behaviour); the unchecked slices are the ring itself.
#[test]
fn a_read_chunk_of_an_exposed_pipe_is_a_copy() {
    let (w, r) = pagepipe::pipe().unwrap();
    (&w).write_all(b"original").unwrap();
    let region = peer::Mapped::of(&w); // sends the end away: no longer confined
    let chunk = r.read_chunk().unwrap();
    let before: Vec<u8> = chunk.slices().flatten().copied().collect();
    region.poke(ARENA, u64::from_le_bytes(*b"tampered"));
    let after: Vec<u8> = chunk.slices().flatten().copied().collect();
    assert_eq!(before, b"original");
    assert_eq!(after, b"original");
    // SAFETY: the peer's write above is over; nothing writes the ring while `raw` lives.
    let raw: Vec<u8> = unsafe { chunk.slices_unchecked() }
        .flatten()
        .copied()
        .collect();
    assert_eq!(raw, b"tampered");
}

/// The same for a write chunk: its safe slices are a buffer of this process that `commit`
/// copies into the ring, so a peer's write to the free page before the commit is overwritten.
#[test]
fn a_write_chunk_of_an_exposed_pipe_is_a_copy() {
    let (w, mut r) = pagepipe::pipe().unwrap();
    let region = peer::Mapped::of(&w);
    let mut chunk = w.write_chunk().unwrap();
    let (first, _) = chunk.as_mut_slices();
    first[..8].copy_from_slice(b"ours....");
    region.poke(ARENA, u64::from_le_bytes(*b"theirs!!"));
    assert_eq!(chunk.commit(8), 8);
    drop(w);
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"ours....");
}
