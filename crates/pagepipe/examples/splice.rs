//! The splice family: a file into a pipe, and the pipe out to a Unix socket and to a file,
//! with no user buffer in between (`splice_from` reads straight into ring pages, `splice_to`
//! writes straight from them).
//!
//! Run: `cargo run -p pagepipe --example splice`

use std::io::{Read, Seek, Write};
use std::os::unix::net::UnixStream;

fn main() -> std::io::Result<()> {
    let dir = std::env::temp_dir();
    let src_path = dir.join(format!("pagepipe-splice-src-{}", std::process::id()));
    let dst_path = dir.join(format!("pagepipe-splice-dst-{}", std::process::id()));
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src_path, &data)?;

    let (w, r) = pagepipe::pipe()?;
    let (mut sock_in, sock_out) = UnixStream::pair()?;
    let mut src = std::fs::File::open(&src_path)?;
    let mut dst = std::fs::File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&dst_path)?;

    // File -> pipe -> socket, 64 KiB (the pipe's capacity) at a time.
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        (&sock_out).read_to_end(&mut got).map(|_| got)
    });
    let mut moved = 0;
    loop {
        let n = w.splice_from(&src, 1 << 16)?; // 0: the file's end
        if n == 0 {
            break;
        }
        let mut left = n;
        while left > 0 {
            left -= r.splice_to(&sock_in, left)?;
        }
        moved += n;
    }
    sock_in.flush()?;
    drop(sock_in); // the reading thread sees end of file
    let got = reader.join().expect("the reading thread")?;
    assert_eq!(got, data);
    println!("file -> pagepipe -> socket: {moved} bytes");

    // And once more, file -> pipe -> file.
    src.rewind()?;
    let mut copied = 0;
    while copied < data.len() {
        let n = w.splice_from(&src, data.len() - copied)?;
        let mut left = n;
        while left > 0 {
            left -= r.splice_to(&dst, left)?;
        }
        copied += n;
    }
    dst.rewind()?;
    let mut back = Vec::new();
    dst.read_to_end(&mut back)?;
    assert_eq!(back, data);
    println!("file -> pagepipe -> file: {copied} bytes");

    std::fs::remove_file(&src_path)?;
    std::fs::remove_file(&dst_path)?;
    Ok(())
}
