//! `frag`: page_frag_test (seed 004) with FragCache, the system allocator, mimalloc and
//! bytes::BytesMut side by side, and the real workloads of issue 11 (`udp`, `tcp`: see [`net`]).
//!
//! Cross-thread: a push thread allocates fragments into a 512-entry bounded single-producer
//! single-consumer queue and a pop thread (pinned to another CPU where there is one) drops them.
//! Single-thread: allocate and drop in place, sizes cycling from 64 B to 2 KiB. Each round
//! measures every allocator once, alternating; ratios are against the system allocator (or
//! `--baseline`).

mod alloc;
mod net;

use crate::common::{Record, Usage};
use crate::harness::{Arm, Case, Column, Harness, Run, RunArgs, RECOMMENDED_RUNS};
use alloc::{RawBuf, MIMALLOC, SYSTEM};
use bytes::{Bytes, BytesMut};
use pagepipe::{Frag, FragCache};
use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Options of `pagepipe-bench frag`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Fragment size in bytes (cross-thread workload).
    #[arg(long, default_value_t = 2048)]
    size: usize,
    /// Fragment alignment (a power of two); none by default.
    #[arg(long)]
    align: Option<usize>,
    /// Fragments per run and allocator (cross-thread workload).
    #[arg(long, default_value_t = 2_000_000)]
    count: usize,
    /// Fragments per run and allocator (single-thread workload).
    #[arg(long, default_value_t = 5_000_000)]
    single_count: usize,
    /// Entries of the bounded queue between the push and the pop thread.
    #[arg(long, default_value_t = 512)]
    queue: usize,
    /// FragCache block size in bytes (a power of two from 4096); `--chunk-size` is its old name.
    #[arg(long, alias = "chunk-size", default_value_t = pagepipe::DEFAULT_BLOCK_SIZE)]
    block_size: usize,
    /// Which workloads, comma-separated: cross, single, both (= synthetic: cross and single;
    /// page_frag_test), udp, tcp (real receive paths over loopback).
    #[arg(long, default_value = "both")]
    workload: String,
    /// udp and tcp: message sizes and weights, `SIZE[:WEIGHT],...` (sizes 1 to 2048).
    #[arg(long, default_value = "64:4,128:1,576:2,1024:1,1500:4")]
    mix: String,
    /// udp and tcp: messages the sender sends per run and allocator.
    #[arg(long, default_value_t = 200_000)]
    msgs: usize,
    /// udp: datagrams per `recvmmsg` call.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// udp: datagrams per second the sender keeps to (0: as fast as it can; the kernel drops
    /// what the receiver cannot take, reported as drop_pct).
    #[arg(long, default_value_t = 0)]
    udp_rate: u64,
    /// udp: `preload` (the sender fills a socket buffer that holds every datagram and exits,
    /// then the receiver drains it: its own capacity) or `live` (both at once).
    #[arg(long, default_value = "preload", value_parser = ["preload", "live"])]
    udp_mode: String,
    /// udp and tcp: which allocators, comma-separated (default: fragcache, system, mimalloc,
    /// bytesmut); one at a time is what a profiler such as callgrind wants.
    #[arg(long)]
    alloc: Option<String>,
}

/// The allocators compared, in table order; the first is the baseline.
const TRANSPORTS: [&str; 5] = ["system", "fragcache", "mimalloc", "bytesmut", "queue-only"];

/// Runs the benchmark and prints a table (or JSON lines).
///
/// # Errors
/// `InvalidInput` for a bad option, naming it and its value.
pub fn run(a: &Args, opts: &RunArgs) -> std::io::Result<()> {
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    if a.size == 0 || a.size > 1 << 20 {
        return Err(invalid(format!(
            "--size {} must be from 1 to 1048576",
            a.size
        )));
    }
    if a.align.is_some_and(|al| !al.is_power_of_two() || al > 4096) {
        return Err(invalid(format!(
            "--align {:?} must be a power of two up to 4096",
            a.align
        )));
    }
    if a.queue < 2 || !a.queue.is_power_of_two() {
        return Err(invalid(format!(
            "--queue {} must be a power of two >= 2",
            a.queue
        )));
    }
    let (mut cross, mut single, mut udp, mut tcp) = (false, false, false, false);
    for w in a.workload.split(',').map(str::trim) {
        match w {
            "both" | "synthetic" => (cross, single) = (true, true),
            "cross" => cross = true,
            "single" => single = true,
            "udp" => udp = true,
            "tcp" => tcp = true,
            w => {
                return Err(invalid(format!(
                    "--workload {w:?} must be a comma-separated list of cross, single, both \
                     (synthetic), udp and tcp"
                )))
            }
        }
    }
    if !(1..=1024).contains(&a.batch) {
        return Err(invalid(format!(
            "--batch {} must be from 1 to 1024",
            a.batch
        )));
    }
    if a.msgs == 0 {
        return Err(invalid("--msgs 0: the sender must send something".into()));
    }
    let schedule = net::parse_mix(&a.mix)?;
    let allocs = net::parse_allocs(a.alloc.as_deref())?;
    if !a.block_size.is_power_of_two() || !(4096..=pagepipe::MAX_BLOCK_SIZE).contains(&a.block_size)
    {
        return Err(invalid(format!(
            "--block-size {} must be a power of two from 4096 to 1 GiB",
            a.block_size
        )));
    }
    let align = a.align.unwrap_or(1);
    let workloads: Vec<&str> = [
        cross.then_some("cross_thread"),
        single.then_some("single_thread"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut harness = Harness::new(opts, "frag", RECOMMENDED_RUNS)?;
    // Warm-up, not timed: first-touch page faults, thread start-up, allocator arenas.
    for t in TRANSPORTS {
        if cross {
            cross_thread(t, a.size, align, a.count / 10 + 1, a.queue, a.block_size);
        }
    }
    for workload in workloads {
        harness.run(case(a, align, workload), |t| {
            Ok(measure(a, align, workload, TRANSPORTS[t]))
        })?;
    }
    let real: Vec<&'static str> = [udp.then_some("udp"), tcp.then_some("tcp")]
        .into_iter()
        .flatten()
        .collect();
    for workload in real {
        let cfg = net::NetConfig {
            workload,
            mix: a.mix.clone(),
            schedule: schedule.clone(),
            msgs: a.msgs,
            batch: a.batch,
            rate: a.udp_rate,
            preload: a.udp_mode == "preload",
            block_size: a.block_size,
            queue: a.queue,
        };
        harness.run(net::case(&cfg, &allocs), |t| net::measure(&cfg, allocs[t]))?;
    }
    if udp || tcp {
        harness.note(
            "udp/tcp: per message delivered; receiver CPU is the receiving thread's \
             (getrusage RUSAGE_THREAD), minor faults the whole process's, peak RSS this run's \
             (VmHWM after clear_refs); the sender is a separate process",
        );
    }
    if cross || single {
        harness
            .note("synthetic: minor faults and CPU seconds per run, whole process (both threads)");
    }
    if align > 1 {
        harness.note("bytesmut ignores --align (BytesMut has no aligned split)");
    }
    let heading = match (cross || single, udp || tcp) {
        (true, true) => "frag: page_frag_test (ns per fragment) and the udp/tcp receive paths",
        (false, true) => "frag: the udp/tcp receive paths (per message)",
        _ => "frag: page_frag_test workload (ns per fragment)",
    };
    harness.finish(&format!("{heading}, align {align}, queue {}", a.queue))
}

/// One workload on every allocator.
fn case(a: &Args, align: usize, workload: &str) -> Case {
    let size = if workload == "cross_thread" {
        a.size.to_string()
    } else {
        "64..2048".to_string()
    };
    Case {
        bench: "frag",
        title: format!("{workload} {size} B, align {align}"),
        arms: TRANSPORTS.iter().map(|t| Arm::new(*t)).collect(),
        columns: vec![
            Column::new("ns_per_frag", "ns/frag", 1.0, 1),
            Column::new("minor_faults", "minor faults", 1.0, 0),
        ],
    }
}

/// One run of `workload` on `transport`: ns per fragment, faults and CPU.
fn measure(a: &Args, align: usize, workload: &str, transport: &str) -> Run {
    let before = Usage::now();
    let (ns, count, size) = if workload == "cross_thread" {
        let ns = cross_thread(transport, a.size, align, a.count, a.queue, a.block_size);
        (ns, a.count, a.size.to_string())
    } else {
        let ns = single_thread(transport, align, a.single_count, a.block_size);
        (ns, a.single_count, "64..2048".to_string())
    };
    let usage = Usage::now().since(before);
    let mut rec = Record::new("frag", transport)
        .config("workload", workload)
        .config("size", size)
        .config("align", align)
        .config("count", count)
        .config("queue", a.queue)
        .config("block_size", a.block_size);
    rec.metric("ns_per_frag", ns);
    rec.metric("minor_faults", usage.minor_faults as f64);
    rec.metric("cpu_s", usage.cpu_s);
    rec.into()
}

/// One way of getting fragments: each call returns an owned buffer of `size` bytes.
trait Source {
    type Buf: Send + 'static;
    fn get(&mut self, size: usize, align: usize) -> Self::Buf;
}

struct FragSource(FragCache);

impl Source for FragSource {
    type Buf = Frag;
    #[inline]
    fn get(&mut self, size: usize, align: usize) -> Frag {
        if align > 1 {
            self.0.alloc_aligned(size, align)
        } else {
            self.0.alloc(size)
        }
    }
}

struct RawSource<A: GlobalAlloc + 'static>(&'static A);

impl<A: GlobalAlloc + Sync + 'static> Source for RawSource<A> {
    type Buf = RawBuf<A>;
    #[inline]
    fn get(&mut self, size: usize, align: usize) -> RawBuf<A> {
        let layout = Layout::from_size_align(size, align).expect("validated size and align");
        // SAFETY: `layout` has a non-zero size (sizes are validated to be at least 1).
        let ptr = unsafe { self.0.alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        RawBuf {
            ptr,
            layout,
            alloc: self.0,
        }
    }
}

/// bytes::BytesMut the way network code uses it: reserve a 32 KiB buffer, split fragments off
/// its front and freeze them; `reserve` takes the buffer back in place once every fragment split
/// off it is gone.
struct BytesSource(BytesMut);

const BYTES_CHUNK: usize = 32 * 1024;

impl Source for BytesSource {
    type Buf = Bytes;
    #[inline]
    fn get(&mut self, size: usize, _align: usize) -> Bytes {
        if self.0.capacity() < size {
            self.0.reserve(BYTES_CHUNK.max(size));
        }
        // SAFETY: capacity >= size (just reserved). The bytes are never read: split_to, freeze
        // and drop only move pointers and counts, and no reference to the data is ever made, so
        // leaving them uninitialized breaks no validity invariant.
        unsafe { self.0.set_len(size) };
        self.0.split_to(size).freeze()
    }
}

/// No allocation at all: moves a fragment-sized descriptor (pointer, length) through the same
/// queue, so the table shows the harness's own floor.
struct NoSource;

impl Source for NoSource {
    type Buf = (usize, usize, usize);
    #[inline]
    fn get(&mut self, size: usize, align: usize) -> (usize, usize, usize) {
        (size, align, 0)
    }
}

/// ns per fragment of the cross-thread workload for `transport`.
fn cross_thread(
    transport: &str,
    size: usize,
    align: usize,
    count: usize,
    queue: usize,
    block: usize,
) -> f64 {
    match transport {
        "fragcache" => push_pop(
            FragSource(FragCache::with_block_size(block)),
            size,
            align,
            count,
            queue,
        ),
        "system" => push_pop(RawSource(&SYSTEM), size, align, count, queue),
        "mimalloc" => push_pop(RawSource(&MIMALLOC), size, align, count, queue),
        "bytesmut" => push_pop(BytesSource(BytesMut::new()), size, align, count, queue),
        "queue-only" => push_pop(NoSource, size, align, count, queue),
        _ => unreachable!("unknown transport {transport}"),
    }
}

/// ns per fragment of the single-thread workload for `transport`.
fn single_thread(transport: &str, align: usize, count: usize, block: usize) -> f64 {
    match transport {
        "fragcache" => alloc_drop(FragSource(FragCache::with_block_size(block)), align, count),
        "system" => alloc_drop(RawSource(&SYSTEM), align, count),
        "mimalloc" => alloc_drop(RawSource(&MIMALLOC), align, count),
        "bytesmut" => alloc_drop(BytesSource(BytesMut::new()), align, count),
        "queue-only" => alloc_drop(NoSource, align, count),
        _ => unreachable!("unknown transport {transport}"),
    }
}

/// Sizes of the single-thread workload: 64 B to 2 KiB, cycling.
const SINGLE_SIZES: [usize; 8] = [64, 2048, 128, 1500, 256, 1024, 512, 100];

fn alloc_drop<S: Source>(mut src: S, align: usize, count: usize) -> f64 {
    let start = Instant::now();
    for i in 0..count {
        let buf = src.get(SINGLE_SIZES[i % SINGLE_SIZES.len()], align);
        drop(std::hint::black_box(buf));
    }
    start.elapsed().as_nanos() as f64 / count as f64
}

fn push_pop<S: Source>(mut src: S, size: usize, align: usize, count: usize, queue: usize) -> f64 {
    let q = Arc::new(Spsc::<S::Buf>::new(queue));
    let popper = {
        let q = q.clone();
        std::thread::spawn(move || {
            pin_to_cpu(1);
            for _ in 0..count {
                drop(std::hint::black_box(q.pop()));
            }
        })
    };
    pin_to_cpu(0);
    let start = Instant::now();
    for _ in 0..count {
        q.push(src.get(size, align));
    }
    popper.join().expect("pop thread panicked");
    let ns = start.elapsed().as_nanos() as f64 / count as f64;
    unpin();
    drop(src);
    ns
}

/// CPUs online (`sysconf(3)`). Not `available_parallelism`: that counts the calling thread's
/// affinity mask, which is one CPU while pinned, so `unpin` would pin for good.
fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Pins the calling thread to `cpu` when the machine has more than one (`sched_setaffinity(2)`).
fn pin_to_cpu(cpu: usize) {
    if online_cpus() < 2 {
        return;
    }
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE (0 or 1) and `set` is a valid cpu_set_t.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// Lets the calling thread run on every CPU again.
fn unpin() {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in 0..online_cpus().min(libc::CPU_SETSIZE as usize) {
        // SAFETY: `cpu` < CPU_SETSIZE and `set` is a valid cpu_set_t.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: as in `pin_to_cpu`.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// A bounded single-producer single-consumer queue (the benchmark's ptr_ring): each side caches
/// the other's index and rereads it only when the queue looks full (or empty).
struct Spsc<T> {
    /// Invariant: slots `tail..head` (mod len) hold values; the rest are empty.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// Free-running count of pushes; written only by the producer.
    head: Padded<AtomicUsize>,
    /// Free-running count of pops; written only by the consumer.
    tail: Padded<AtomicUsize>,
    /// The producer's copy of `tail`; touched only by the producer.
    tail_cache: Padded<UnsafeCell<usize>>,
    /// The consumer's copy of `head`; touched only by the consumer.
    head_cache: Padded<UnsafeCell<usize>>,
}

#[repr(align(128))]
struct Padded<T>(T);

// SAFETY: values move from the one producer to the one consumer through the head/tail protocol.
unsafe impl<T: Send> Sync for Spsc<T> {}
// SAFETY: as for Sync.
unsafe impl<T: Send> Send for Spsc<T> {}

impl<T> Spsc<T> {
    fn new(len: usize) -> Spsc<T> {
        Spsc {
            slots: (0..len)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            mask: len - 1,
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
            tail_cache: Padded(UnsafeCell::new(0)),
            head_cache: Padded(UnsafeCell::new(0)),
        }
    }

    /// Producer only.
    fn push(&self, value: T) {
        let head = self.head.0.load(Ordering::Relaxed);
        // SAFETY: only the producer touches `tail_cache`.
        let tail_cache = unsafe { &mut *self.tail_cache.0.get() };
        let mut spins = 0u32;
        while head - *tail_cache > self.mask {
            // Acquire: pairs with the Release store of tail in `pop`: the slot's value was moved
            // out before we overwrite it.
            *tail_cache = self.tail.0.load(Ordering::Acquire);
            backoff(&mut spins);
        }
        // SAFETY: slot `head` is empty (head - tail <= mask) and only the producer writes it.
        unsafe { (*self.slots[head & self.mask].get()).write(value) };
        // Release: pairs with the Acquire load of head in `pop`, publishing the slot's value.
        self.head.0.store(head + 1, Ordering::Release);
    }

    /// Consumer only.
    fn pop(&self) -> T {
        let tail = self.tail.0.load(Ordering::Relaxed);
        // SAFETY: only the consumer touches `head_cache`.
        let head_cache = unsafe { &mut *self.head_cache.0.get() };
        let mut spins = 0u32;
        while *head_cache == tail {
            // Acquire: pairs with the Release store of head in `push`.
            *head_cache = self.head.0.load(Ordering::Acquire);
            backoff(&mut spins);
        }
        // SAFETY: slot `tail` holds a value (tail < head) published by the Acquire load above.
        let value = unsafe { (*self.slots[tail & self.mask].get()).assume_init_read() };
        // Release: pairs with the Acquire load of tail in `push`.
        self.tail.0.store(tail + 1, Ordering::Release);
        value
    }
}

impl<T> Drop for Spsc<T> {
    fn drop(&mut self) {
        let (head, tail) = (*self.head.0.get_mut(), *self.tail.0.get_mut());
        for i in tail..head {
            // SAFETY: slots tail..head hold values (type invariant), each dropped once here.
            unsafe { self.slots[i & self.mask].get_mut().assume_init_drop() };
        }
    }
}

/// Spins briefly, then yields: the machine is shared, a waiting side must not hog a core.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 128 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_moves_fragments_across_threads() {
        for t in TRANSPORTS {
            let ns = cross_thread(t, 2048, 1, 10_000, 64, 32768);
            assert!(ns > 0.0, "{t}");
            let ns = single_thread(t, 8, 10_000, 4096);
            assert!(ns > 0.0, "{t}");
        }
    }

    #[test]
    fn unpin_gives_back_every_cpu() {
        fn allowed() -> usize {
            // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
            // SAFETY: `set` was filled in by sched_getaffinity.
            unsafe { libc::CPU_COUNT(&set) as usize }
        }
        std::thread::spawn(|| {
            let before = allowed();
            pin_to_cpu(0);
            unpin();
            assert!(
                allowed() >= before,
                "{} CPUs after unpin, {before} before",
                allowed()
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn spsc_keeps_order_and_drops_leftovers() {
        let q = Spsc::new(4);
        for i in 0..3 {
            q.push(Box::new(i));
        }
        assert_eq!(*q.pop(), 0);
        drop(q); // two boxes left: dropped, not leaked (Miri/valgrind would see a leak)
    }
}
