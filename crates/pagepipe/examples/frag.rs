//! The fragment cache: receive-style buffers carved from shared blocks, filled in place,
//! frozen and handed to another thread, where they are dropped.
//!
//! Run: `cargo run -p pagepipe --example frag`

use pagepipe::FragCache;

fn main() {
    let mut cache = FragCache::new(); // 32 KiB blocks
    let (tx, rx) = std::sync::mpsc::channel();
    let consumer = std::thread::spawn(move || {
        let mut total = 0;
        for packet in rx {
            let packet: pagepipe::FrozenFrag = packet;
            total += packet.len(); // dropped here, on another thread: one atomic subtraction
        }
        total
    });
    for i in 0..1000u32 {
        let mut room = cache.prepare(64, 1500); // room for at least 64, at most 1500 bytes
        let msg = format!("packet {i}");
        room[..msg.len()].copy_from_slice(msg.as_bytes());
        let packet = room.commit(msg.len()).freeze(); // Send + Sync; clone is one atomic add
        tx.send(packet).expect("the consumer");
    }
    drop(tx);
    let total = consumer.join().expect("the consumer thread");
    let stats = cache.stats();
    println!(
        "{total} bytes in 1000 fragments; blocks mapped: {}, reused: {}",
        stats.blocks_allocated, stats.blocks_reused
    );
    pagepipe::shrink(); // give spare blocks back to the OS now
}
