//! The side locks' unit tests, with made-up pipes (`Fake`).

use super::*;
use std::sync::Arc;

/// A pipe's answers, made up: this process's key, and which other keys hold the pipe.
struct Fake {
    key: u32,
    alive: Vec<u32>,
    /// Keys of this process's other mappings of the pipe.
    mine: Vec<u32>,
}

impl Holders for Fake {
    fn key(&self) -> io::Result<u32> {
        Ok(self.key)
    }
    fn id(&self, lock: &SideLock) -> u64 {
        std::ptr::from_ref(lock) as u64
    }
    fn process_alive(&self, key: u32) -> io::Result<bool> {
        Ok(self.alive.contains(&key))
    }
    fn ours(&self, key: u32) -> bool {
        self.mine.contains(&key)
    }
}

fn free() -> SideLock {
    SideLock {
        word: AtomicU64::new(0),
    }
}

const ME: u32 = 5;
const LIVE: u32 = 6;
const DEAD: u32 = 7;

fn fake() -> Fake {
    Fake {
        key: ME,
        alive: vec![LIVE],
        mine: Vec::new(),
    }
}

fn word(key: u32, tid: u32) -> u64 {
    u64::from(key) << 32 | u64::from(tid)
}

#[test]
fn a_dead_process_loses_its_lock_and_a_live_one_keeps_it() {
    let h = fake();
    let lock = free();
    lock.word.store(word(DEAD, 1234), Ordering::Relaxed);
    let t = Instant::now();
    assert_eq!(lock.lock(&h, Wait::Until(None)).unwrap(), Taken::FromDead);
    assert!(t.elapsed() < 5 * TICK);
    // Now ours: taking it again is a real deadlock.
    assert_eq!(
        lock.lock(&h, Wait::Until(None)).unwrap_err().kind(),
        io::ErrorKind::Deadlock
    );
    lock.unlock(&h);
    // Non-blocking takers take over from a dead process at once, and give up on a live one.
    lock.word.store(word(DEAD, 1), Ordering::Relaxed);
    assert_eq!(lock.lock(&h, Wait::Never).unwrap(), Taken::FromDead);
    lock.unlock(&h);
    lock.word.store(word(LIVE, 1), Ordering::Relaxed);
    assert_eq!(
        lock.lock(&h, Wait::Never).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    let t = Instant::now();
    assert_eq!(
        lock.lock(&h, Wait::Until(Some(t + TICK)))
            .unwrap_err()
            .kind(),
        io::ErrorKind::TimedOut
    );
}

#[test]
fn our_own_threads_are_asked_not_trusted() {
    let h = Arc::new(fake());
    let lock = Arc::new(free());
    // A live thread of ours that holds the lock keeps it.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (h2, l2) = (h.clone(), lock.clone());
    let holder = std::thread::spawn(move || {
        l2.lock(&*h2, Wait::Never).unwrap();
        held_tx.send(tid().unwrap()).unwrap();
        done_rx.recv().unwrap();
        l2.unlock(&*h2);
        tid().unwrap()
    });
    let holder_tid = held_rx.recv().unwrap();
    assert_eq!(
        lock.lock(&*h, Wait::Never).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    done_tx.send(()).unwrap();
    assert_eq!(holder.join().unwrap(), holder_tid);
    // A word naming a thread of ours that holds nothing (it has exited here, or is alive
    // and says so) was written by a peer: taken over.
    lock.word.store(word(ME, holder_tid), Ordering::Relaxed);
    assert_eq!(lock.lock(&*h, Wait::Never).unwrap(), Taken::FromDead);
    lock.unlock(&*h);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let idle = std::thread::spawn(move || {
        ready_tx.send(tid().unwrap()).unwrap();
        stop_rx.recv().unwrap();
    });
    lock.word
        .store(word(ME, ready_rx.recv().unwrap()), Ordering::Relaxed);
    assert_eq!(lock.lock(&*h, Wait::Never).unwrap(), Taken::FromDead);
    lock.unlock(&*h);
    stop_tx.send(()).unwrap();
    idle.join().unwrap();
    // Our own identity, which we do not hold: a peer wrote it.
    lock.word.store(identity(&*h).unwrap(), Ordering::Relaxed);
    assert_eq!(lock.lock(&*h, Wait::Never).unwrap(), Taken::FromDead);
    lock.unlock(&*h);
}

/// Threads of one process contend for one lock through `mappings` while every contended
/// taker asks about the holder before it sleeps (a death was just noted): asking must never let
/// two hold it.
fn contend_while_asking(mappings: Vec<Arc<Fake>>) {
    use std::sync::atomic::AtomicU32;
    note_death();
    let lock = Arc::new(free());
    let inside = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (h, lock, inside) = (
                mappings[t % mappings.len()].clone(),
                lock.clone(),
                inside.clone(),
            );
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    lock.lock(&*h, Wait::Until(None)).unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::Relaxed), 0, "two holders");
                    for _ in 0..200 {
                        std::hint::spin_loop(); // hold long enough for takers to ask
                    }
                    if i % 16 == 0 {
                        std::thread::yield_now();
                    }
                    inside.fetch_sub(1, Ordering::Relaxed);
                    lock.unlock(&*h);
                    if i % 1000 == 0 {
                        note_death();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn contended_takers_that_ask_never_share_the_lock() {
    contend_while_asking(vec![Arc::new(fake())]);
}

/// The same through two mappings of one pipe in this process (an end received from ourselves):
/// each has its own key, and a take-over from the other's thread must ask again as from ours.
#[test]
fn contended_takers_through_two_mappings_never_share_the_lock() {
    let other = ME + 100;
    let a = Fake {
        mine: vec![other],
        ..fake()
    };
    let b = Fake {
        key: other,
        mine: vec![ME],
        ..fake()
    };
    contend_while_asking(vec![Arc::new(a), Arc::new(b)]);
}

#[test]
fn an_abandoned_lock_is_taken_over() {
    let h = fake();
    let lock = free();
    assert_eq!(lock.lock(&h, Wait::Never).unwrap(), Taken::Clean);
    lock.abandon(&h);
    assert_eq!(lock.lock(&h, Wait::Never).unwrap(), Taken::FromDead);
    lock.unlock(&h);
    assert_eq!(lock.lock(&h, Wait::Never).unwrap(), Taken::Clean);
    lock.unlock(&h);
}

/// A take-over that finds the named thread alive after all gives the word back, also when a
/// taker set WAITERS on it meanwhile (the word must not keep naming us: our next look would
/// take the lock from its live holder).
#[test]
fn a_give_back_keeps_a_waiters_flag_set_meanwhile_and_leaves_no_trace_of_us() {
    let lock = free();
    let (holder, us) = (word(ME, 7), word(ME, 8));
    lock.word.store(us | WAITERS, Ordering::Relaxed); // our CAS, then a taker's flag
    lock.give_back(us, holder, us);
    assert_eq!(lock.word.load(Ordering::Relaxed), holder | WAITERS);
    lock.word.store(us, Ordering::Relaxed); // no flag: as before
    lock.give_back(us, holder, us);
    assert_eq!(lock.word.load(Ordering::Relaxed), holder);
    lock.word.store(0, Ordering::Relaxed); // the holder released: nothing to give back
    lock.give_back(us, holder, us);
    assert_eq!(lock.word.load(Ordering::Relaxed), 0);
}
