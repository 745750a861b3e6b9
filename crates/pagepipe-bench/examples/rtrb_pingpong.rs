//! The reference for `pagepipe-bench lat --transport rtrb`: rtrb's own `io::Write` / `io::Read`
//! in a plain ping-pong, nothing of the harness around it. The main thread writes 1 byte into
//! one ring and spins until the echo thread has written it back through a second ring; both
//! sides spin while their ring is empty. Prints the mean round trip per 1 s round.
//!
//! `cargo run --release -p pagepipe-bench --example rtrb_pingpong -- [rounds] [ring bytes]`
//! (docs/benchmarks.md says how it compares with the harness's arm).

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// Spins until `rx` yields one byte.
fn read_byte(rx: &mut rtrb::Consumer<u8>, b: &mut [u8; 1]) {
    loop {
        match rx.read(b) {
            Ok(1) => return,
            Ok(_) => unreachable!("a 1-byte read returns 1 byte or WouldBlock"),
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Writes one byte into `tx` (never full: one byte is in flight at a time).
fn write_byte(tx: &mut rtrb::Producer<u8>, b: &[u8; 1]) {
    assert_eq!(tx.write(b).expect("the ring has room for one byte"), 1);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(3, |a| a.parse().expect("rounds"));
    let ring: usize = args
        .next()
        .map_or(64 << 10, |a| a.parse().expect("ring bytes"));
    for round in 0..rounds {
        let (mut ping, mut ping_in) = rtrb::RingBuffer::<u8>::new(ring);
        let (mut pong, mut pong_in) = rtrb::RingBuffer::<u8>::new(ring);
        let echo = std::thread::spawn(move || {
            let mut b = [0u8; 1];
            loop {
                read_byte(&mut ping_in, &mut b);
                if b[0] == 0 {
                    return; // the stop byte
                }
                write_byte(&mut pong, &b);
            }
        });
        let mut b = [7u8; 1];
        let (start, mut trips) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(1) {
            write_byte(&mut ping, &b);
            read_byte(&mut pong_in, &mut b);
            trips += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        write_byte(&mut ping, &[0]);
        echo.join().unwrap();
        println!(
            "round {round}: {:.3} us per round trip ({trips} round trips)",
            secs / trips as f64 * 1e6
        );
    }
}
