//! Files whose size is not their content (issue 40): a sysfs file says 4096 bytes and no
//! blocks for a few bytes, a /proc file says 0. cp copies what reading them to the end gives;
//! pagepipe-cp padded the sysfs file with NULs to 4096 bytes (and `--verify` passed) and
//! refused /proc files as "changed size while being copied".

mod common;

use common::*;
use std::fs;
use std::path::Path;

/// Copies `src` with `--verify` and returns the copy's bytes, or None (with a note) where the
/// file does not exist on this machine.
fn copy_of(src: &str, t: &TempDir, name: &str) -> Option<Vec<u8>> {
    if !Path::new(src).exists() {
        eprintln!("SKIPPED {src}: not on this machine");
        return None;
    }
    let dst = t.join(name);
    let out = cp(&[Path::new("--verify"), Path::new(src), &dst]);
    assert!(out.status.success(), "{src}: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("verified 1 file(s)"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(temporaries(&t.0), Vec::<std::path::PathBuf>::new());
    Some(fs::read(dst).unwrap())
}

#[test]
fn a_sysfs_file_is_copied_as_the_bytes_it_reads() {
    let t = TempDir::new("sysfs");
    for (i, src) in [
        "/sys/devices/system/cpu/online",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ]
    .iter()
    .enumerate()
    {
        let Some(copy) = copy_of(src, &t, &format!("s{i}")) else {
            continue;
        };
        let m = fs::metadata(src).unwrap();
        let real = fs::read(src).unwrap();
        assert!(
            (real.len() as u64) < m.len(),
            "{src}: the premise, a size larger than the content ({} < {})",
            real.len(),
            m.len()
        );
        assert!(
            copy == real,
            "{src}: the copy has {} bytes ({:?}...), the file reads {} ({:?})",
            copy.len(),
            text(&copy[..copy.len().min(32)]),
            real.len(),
            text(&real)
        );
    }
}

#[test]
fn proc_files_are_copied_as_the_bytes_they_read() {
    let t = TempDir::new("proc");
    if let Some(copy) = copy_of("/proc/sys/kernel/ostype", &t, "ostype") {
        assert_eq!(copy, fs::read("/proc/sys/kernel/ostype").unwrap());
        assert!(!copy.is_empty());
    }
    // The copying process's own map: other bytes than the test's, but lines of a map.
    if let Some(copy) = copy_of("/proc/self/maps", &t, "maps") {
        let copy = text(&copy);
        assert!(copy.lines().count() > 5, "{copy}");
        assert!(copy.contains("pagepipe-cp"), "{copy}");
    }
}
