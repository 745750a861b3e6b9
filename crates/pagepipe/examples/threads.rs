//! The README's first example: a producer thread writes 1000 numbers into a pipe, the main
//! thread reads to end of file.
//!
//! Run: `cargo run -p pagepipe --example threads`

use std::io::{Read, Write};

fn main() -> std::io::Result<()> {
    // (writer, reader): the reverse of std's and os_pipe's (reader, writer) order.
    let (mut writer, mut reader) = pagepipe::pipe()?; // 64 KiB, like Linux
    let producer = std::thread::spawn(move || -> std::io::Result<()> {
        for i in 0..1000u32 {
            writer.write_all(&i.to_le_bytes())?;
        }
        Ok(()) // the last writer drops: end of file
    });
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes)?;
    producer.join().expect("the producer thread")?;
    assert_eq!(bytes.len(), 4000);
    let last = u32::from_le_bytes(bytes[3996..].try_into().expect("4 bytes"));
    println!("read {} bytes; the last number is {last}", bytes.len());
    Ok(())
}
