//! What the integration tests of pagepipe-cp share: the binary, fresh directories, files of
//! known bytes, and comparisons of trees.
// Each test file uses some of these helpers, none uses all: unused ones are not a defect there.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_pagepipe-cp");

/// A fresh directory under the temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("pagepipe-cp-{what}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub fn cp(args: &[&Path]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Bytes that differ from page to page (a copy that shuffled pages would not match).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 12) as u8 ^ seed)
        .collect()
}

pub fn write_file(path: &Path, bytes: &[u8], mode: u32) {
    fs::write(path, bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// The temporaries pagepipe-cp left in `dir` (recursively).
pub fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().contains(".pagepipe-cp-") {
            out.push(p.clone());
        }
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(temporaries(&p));
        }
    }
    out
}

/// Asserts that `b` is a copy of `a`: same entries, kinds, mode bits, symlink targets and
/// file checksums.
pub fn assert_same_tree(a: &Path, b: &Path) {
    let (ma, mb) = (
        fs::symlink_metadata(a).unwrap(),
        fs::symlink_metadata(b).unwrap(),
    );
    assert_eq!(ma.file_type(), mb.file_type(), "{a:?} vs {b:?}");
    if ma.file_type().is_symlink() {
        assert_eq!(fs::read_link(a).unwrap(), fs::read_link(b).unwrap());
        return;
    }
    assert_eq!(
        ma.mode() & 0o7777,
        mb.mode() & 0o7777,
        "mode bits of {b:?} differ from {a:?}"
    );
    if ma.is_file() {
        let (da, db) = (fs::read(a).unwrap(), fs::read(b).unwrap());
        assert_eq!(da.len(), db.len(), "size of {b:?}");
        assert_eq!(fnv1a(&da), fnv1a(&db), "checksum of {b:?}");
        return;
    }
    let names = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let (na, nb) = (names(a), names(b));
    assert_eq!(na, nb, "entries of {b:?}");
    for n in na {
        assert_same_tree(&a.join(&n), &b.join(&n));
    }
}

/// Runs pagepipe-cp with `args`, `pre` applied in the child before exec (a closed stdin, a
/// file size limit, a umask).
pub fn cp_with(
    args: &[&Path],
    pre: impl Fn() -> std::io::Result<()> + Send + Sync + 'static,
) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    // SAFETY: `pre` only makes async-signal-safe system calls (close, setrlimit, umask).
    unsafe { cmd.pre_exec(pre) };
    cmd.output().unwrap()
}

/// Starts copying stdin to `dst` and feeds it 4 MiB without closing it, so the copy is
/// mid-way for as long as the test likes; returns once the temporary exists.
pub fn start_stdin_copy(dst: &Path) -> (Child, std::process::ChildStdin) {
    let mut child = Command::new(BIN)
        .arg("-")
        .arg(dst)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&pattern(4 << 20, 8)).unwrap();
    wait_for_temporary(dst.parent().unwrap());
    (child, stdin)
}

pub fn wait_for_temporary(dir: &Path) {
    let t0 = Instant::now();
    while temporaries(dir).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no temporary appeared in {dir:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
