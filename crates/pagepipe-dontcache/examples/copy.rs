//! A copy that leaves no page cache behind: read with `pagepipe_dontcache::Reader`, write with
//! `pagepipe_dontcache::Writer` in 1 MiB blocks, then report what is left cached.
//!
//! Copies `SRC DST` when given two paths; without arguments it makes an 8 MiB file in the
//! temporary directory, copies it and removes both.
//!
//! Run: `cargo run -p pagepipe-dontcache --example copy [SRC DST]`

use pagepipe_dontcache::{cached_bytes, Reader, Writer};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Writes of 1 MiB: the writer's cost per call is fixed, so small writes (`io::copy`'s 8 KiB)
/// are several times slower.
const BLOCK: usize = 1 << 20;

fn copy(src: &Path, dst: &Path) -> std::io::Result<u64> {
    let mut reader = Reader::open(src)?;
    let mut writer = Writer::create(dst)?;
    let mut buf = vec![0u8; BLOCK];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        writer.write_all(&buf[..n])?;
    }
    let stats = writer.finish()?; // fdatasync, then nothing left cached
    println!(
        "{} bytes via {:?}; peak dirty {} bytes",
        stats.bytes_written, stats.mode, stats.peak_dirty_bytes
    );
    Ok(stats.bytes_written)
}

fn main() -> std::io::Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let (src, dst, temporary) = match args.as_slice() {
        [src, dst] => (src.clone(), dst.clone(), false),
        [] => {
            let dir = std::env::temp_dir();
            let src = dir.join(format!("pagepipe-copy-src-{}", std::process::id()));
            let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 253) as u8).collect();
            std::fs::write(&src, data)?;
            let dst = dir.join(format!("pagepipe-copy-dst-{}", std::process::id()));
            (src, dst, true)
        }
        _ => {
            eprintln!("usage: copy [SRC DST]");
            std::process::exit(2);
        }
    };
    let n = copy(&src, &dst)?;
    assert_eq!(std::fs::metadata(&dst)?.len(), n);
    let left = cached_bytes(&std::fs::File::open(&dst)?)?;
    println!("copied {n} bytes; the copy has {left} bytes in the page cache");
    if temporary {
        assert_eq!(std::fs::read(&src)?, std::fs::read(&dst)?);
        std::fs::remove_file(&src)?;
        std::fs::remove_file(&dst)?;
    }
    Ok(())
}
