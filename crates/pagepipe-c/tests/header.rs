//! The checked-in C header is the one cbindgen generates from the code (build.rs).

#[test]
fn the_checked_in_header_matches_the_code() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/pagepipe.h"));
    let checked_in = include_str!("../include/pagepipe.h");
    assert!(
        generated == checked_in,
        "crates/pagepipe-c/include/pagepipe.h is stale; regenerate it with \
         `PAGEPIPE_WRITE_HEADER=1 cargo build -p pagepipe-c` and commit it"
    );
}
