//! Generates the C header from the crate's `extern "C"` items into `OUT_DIR/pagepipe.h`.
//! The checked-in `include/pagepipe.h` must equal it: `tests/header.rs` checks (in
//! `cargo test --workspace`, so in CI), and `PAGEPIPE_WRITE_HEADER=1 cargo build -p pagepipe-c`
//! rewrites it.
//!
//! The shared library gets a soname, `libpagepipe_c.so.MAJOR.MINOR` while the major version is 0
//! (`.so.MAJOR` after), the names `install.sh` installs it under.

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("pagepipe.h");
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    // From the sources alone (`with_src` follows the `mod` items), not `with_crate`: that one
    // runs `cargo metadata`, which fails where the crate sits inside another workspace's
    // directory (a packaged crate verified under target/, a vendored copy).
    cbindgen::Builder::new()
        .with_src(crate_dir.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write_to_file(&out);
    if std::env::var_os("PAGEPIPE_WRITE_HEADER").is_some() {
        std::fs::copy(&out, crate_dir.join("include/pagepipe.h")).unwrap();
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let soversion = if major == "0" {
        format!("{major}.{minor}")
    } else {
        major
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpagepipe_c.so.{soversion}");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=PAGEPIPE_WRITE_HEADER");
}
