//! A notification pipe (Linux's watch_queue records) with a filter.
//!
//! A `Notifier` never blocks: when the ring is full it drops the record, and the reader gets
//! one LOSS record where records were lost. The reader's filter drops, at the poster, every
//! record that matches none of its entries (that is not a loss).
//!
//! Run: `cargo run -p pagepipe --example notify`

use pagepipe::{Builder, Filter, Notification};

fn main() -> std::io::Result<()> {
    let (notifier, mut reader) = Builder::new().notifications(4).build()?;

    // Keep kind 1 records of subtypes 2 and 3 only.
    reader.set_filter(&[Filter {
        kind: 1,
        info_filter: 0,
        info_mask: 0,
        subtypes: 1 << 2 | 1 << 3,
    }])?;
    let post = |subtype: u8, payload: &[u8]| {
        notifier.post(&Notification {
            kind: 1,
            subtype,
            payload: payload.to_vec(),
            ..Notification::default()
        })
    };
    assert!(post(1, b"filtered out")?); // Ok(true): filtered, not lost
    for i in 0..6u8 {
        let queued = post(2 + i % 2, &[i])?; // 4 fit, then Ok(false): lost
        println!("post {i}: {}", if queued { "queued" } else { "lost" });
    }
    drop(notifier); // no notifier left: the reader sees the end after the queued records

    while let Some(n) = reader.next_notification()? {
        if n.is_loss() {
            println!("LOSS: records were lost here");
        } else {
            println!(
                "kind {} subtype {} payload {:?}",
                n.kind, n.subtype, n.payload
            );
        }
    }
    println!("end of the notification stream");
    Ok(())
}
