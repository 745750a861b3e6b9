//! What the crate's unit tests share.

use std::fs::File;
use std::path::PathBuf;

/// A fresh file, readable and writable, under the temp dir: `pagepipe-dontcache-WHAT-PID`.
pub(crate) fn temp_rw(what: &str) -> (PathBuf, File) {
    let path =
        std::env::temp_dir().join(format!("pagepipe-dontcache-{what}-{}", std::process::id()));
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (path, file)
}
