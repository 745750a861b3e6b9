//! The chunk API: fill ring pages in place and read them in place (pagepipe's `vmsplice(2)`).
//!
//! Run: `cargo run -p pagepipe --example chunks`

fn main() -> std::io::Result<()> {
    let (w, r) = pagepipe::pipe()?;
    let mut chunk = w.write_chunk()?; // the free room, as at most two slices
    let (first, _wrapped) = chunk.as_mut_slices();
    first[..5].copy_from_slice(b"hello");
    chunk.commit(5); // published: the reader sees these very bytes

    let chunk = r.read_chunk()?;
    let bytes: Vec<u8> = chunk.slices().flatten().copied().collect();
    assert_eq!(bytes, b"hello");
    let n = chunk.len();
    chunk.consume(n); // the pages go back to the ring
    println!(
        "read {n} bytes in place: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    Ok(())
}
