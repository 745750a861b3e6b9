//! Modes as GNU cp gives them (issue 40), checked against the system's cp on the same inputs:
//! a directory's default ACL masks new files and directories (cp: 640 and 750 where
//! pagepipe-cp gave 644 and 755), a sticky directory stays sticky, set-id bits go as cp drops
//! them, and an existing destination keeps its mode and ACL.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether `setfacl` is installed (package `acl`); prints a note for `test` if not.
fn have_setfacl(test: &str) -> bool {
    let ok = Command::new("setfacl").arg("--version").output().is_ok();
    if !ok {
        eprintln!("SKIPPED {test}: no setfacl (apt-get install acl)");
    }
    ok
}

fn setfacl(args: &[&str], path: &Path) {
    let out = Command::new("setfacl")
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "setfacl: {}", text(&out.stderr));
}

/// `getfacl` of `path` without its name and owner lines (which differ between two copies).
fn getfacl(path: &Path) -> String {
    let out = Command::new("getfacl")
        .args(["--omit-header", "--absolute-names", "--physical"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "getfacl: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Runs `program` (the system's cp, or pagepipe-cp) with `args` under `umask`.
fn run_with_umask(program: &str, args: &[&Path], umask: u32) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(program);
    cmd.args(args);
    // SAFETY: umask(2) in the child before exec is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        })
    };
    cmd.output().unwrap()
}

/// A source tree of modes cp treats specially.
fn make_mode_tree(src: &Path) {
    fs::create_dir(src).unwrap();
    write_file(&src.join("rw-rw-r"), b"664", 0o664);
    write_file(&src.join("rwx-all"), b"777", 0o777);
    write_file(&src.join("setuid"), b"4755", 0o4755);
    write_file(&src.join("private"), b"600", 0o600);
    for (dir, mode) in [("open", 0o777), ("sticky", 0o1777), ("setgid", 0o2775)] {
        fs::create_dir(src.join(dir)).unwrap();
        write_file(&src.join(dir).join("inner"), b"in", 0o666);
        chmod(&src.join(dir), mode);
    }
    fs::create_dir(src.join("read-only")).unwrap();
    write_file(&src.join("read-only/inner"), b"ro", 0o444);
    chmod(&src.join("read-only"), 0o555);
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// `root` joined with `rel` (`root` itself for an empty `rel`: a join would add a slash).
fn at(root: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

/// Every path under `root`, relative, sorted.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::new()];
    let mut i = 0;
    while i < out.len() {
        let p = at(root, &out[i]);
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            let mut names: Vec<_> = fs::read_dir(&p)
                .unwrap()
                .map(|e| out[i].join(e.unwrap().file_name()))
                .collect();
            names.sort();
            out.extend(names);
        }
        i += 1;
    }
    out
}

/// Asserts that the trees `cp` and `pp` have the same entries with the same mode bits (and,
/// with `acls`, the same ACLs).
fn assert_same_modes(cp: &Path, pp: &Path, acls: bool, what: &str) {
    let (a, b) = (walk(cp), walk(pp));
    assert_eq!(a, b, "{what}: entries");
    for rel in a {
        let (ma, mb) = (
            fs::symlink_metadata(at(cp, &rel)).unwrap().mode(),
            fs::symlink_metadata(at(pp, &rel)).unwrap().mode(),
        );
        assert_eq!(
            format!("{:o}", mb & 0o7777),
            format!("{:o}", ma & 0o7777),
            "{what}: mode of {rel:?} (left pagepipe-cp, right cp)"
        );
        if acls {
            assert_eq!(
                getfacl(&at(pp, &rel)),
                getfacl(&at(cp, &rel)),
                "{what}: ACL of {rel:?}"
            );
        }
    }
}

#[test]
fn modes_match_cp_under_umasks() {
    let t = TempDir::new("modes-umask");
    make_mode_tree(&t.join("src"));
    for umask in [0o022, 0o002, 0o077] {
        let (c, p) = (
            t.join(&format!("cp-{umask:o}")),
            t.join(&format!("pp-{umask:o}")),
        );
        let out = run_with_umask("cp", &[Path::new("-r"), &t.join("src"), &c], umask);
        assert!(out.status.success(), "cp: {}", text(&out.stderr));
        let out = run_with_umask(BIN, &[Path::new("-r"), &t.join("src"), &p], umask);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_same_modes(&c, &p, false, &format!("umask {umask:03o}"));
    }
    chmod(&t.join("src/read-only"), 0o755);
    for umask in [0o022, 0o002, 0o077] {
        for d in ["cp", "pp"] {
            chmod(&t.join(&format!("{d}-{umask:o}/read-only")), 0o755);
        }
    }
}

#[test]
fn a_default_acl_masks_new_files_and_directories_as_in_cp() {
    if !have_setfacl("a_default_acl_masks_new_files_and_directories_as_in_cp") {
        return;
    }
    let t = TempDir::new("modes-acl");
    make_mode_tree(&t.join("src"));
    let into = t.join("into");
    fs::create_dir(&into).unwrap();
    setfacl(&["-d", "-m", "u::rwx,g::r-x,o::---"], &into);
    for umask in [0o022, 0o002] {
        let (c, p) = (
            into.join(format!("cp-{umask:o}")),
            into.join(format!("pp-{umask:o}")),
        );
        let out = run_with_umask("cp", &[Path::new("-r"), &t.join("src"), &c], umask);
        assert!(out.status.success(), "cp: {}", text(&out.stderr));
        let out = run_with_umask(BIN, &[Path::new("-r"), &t.join("src"), &p], umask);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_same_modes(&c, &p, true, &format!("default ACL, umask {umask:03o}"));
        // The issue's case, spelled out: 664 came out 644 and 777 as 755.
        assert_eq!(
            fs::metadata(p.join("rw-rw-r")).unwrap().mode() & 0o777,
            0o640
        );
        assert_eq!(
            fs::metadata(p.join("sticky")).unwrap().mode() & 0o7777 & 0o1000,
            0o1000
        );
        // One file, not in a tree.
        let (c1, p1) = (
            into.join(format!("cp1-{umask:o}")),
            into.join(format!("pp1-{umask:o}")),
        );
        let src = t.join("src/rwx-all");
        assert!(run_with_umask("cp", &[&src, &c1], umask).status.success());
        let out = run_with_umask(BIN, &[&src, &p1], umask);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_same_modes(&c1, &p1, true, "one file");
    }
    chmod(&t.join("src/read-only"), 0o755);
    for umask in [0o022, 0o002] {
        for d in ["cp", "pp"] {
            chmod(&into.join(format!("{d}-{umask:o}/read-only")), 0o755);
        }
    }
}

/// cp writes into an existing destination, which keeps its mode and its ACL; pagepipe-cp
/// replaces it with a copy made like it.
#[test]
fn an_existing_destination_keeps_its_mode_and_acl() {
    if !have_setfacl("an_existing_destination_keeps_its_mode_and_acl") {
        return;
    }
    let t = TempDir::new("modes-existing");
    write_file(&t.join("src"), b"new bytes", 0o777);
    for who in ["cp", "pp"] {
        write_file(&t.join(who), b"old", 0o640);
        setfacl(&["-m", "u:nobody:rw,m::rw"], &t.join(who));
    }
    assert!(Command::new("cp")
        .arg(t.join("src"))
        .arg(t.join("cp"))
        .status()
        .unwrap()
        .success());
    let out = cp(&[&t.join("src"), &t.join("pp")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read(t.join("pp")).unwrap(), b"new bytes");
    assert_same_modes(&t.join("cp"), &t.join("pp"), true, "existing destination");
    assert!(getfacl(&t.join("pp")).contains("user:nobody:rw-"));
}
