//! pagepipe-cp end to end: trees and stdin round trip with checksums and modes, cp's
//! conventions, ENOSPC on a small filesystem, and interrupted copies (SIGKILL, SIGINT, a source
//! truncated mid-copy) that leave no complete-looking destination.

#[path = "../../pagepipe-dontcache/tests/support/smallfs.rs"]
mod smallfs;

use smallfs::SmallFs;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;

use common::*;

fn make_tree(root: &Path) {
    fs::create_dir(root).unwrap();
    write_file(&root.join("empty"), b"", 0o644);
    write_file(&root.join("one-byte"), b"x", 0o600);
    write_file(&root.join("page-and-one"), &pattern(4097, 1), 0o640);
    write_file(&root.join("big"), &pattern((3 << 20) + 5, 2), 0o755);
    fs::create_dir(root.join("sub")).unwrap();
    write_file(&root.join("sub/inner"), &pattern(200_000, 3), 0o604);
    fs::set_permissions(root.join("sub"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::create_dir(root.join("empty-dir")).unwrap();
    fs::set_permissions(root.join("empty-dir"), fs::Permissions::from_mode(0o711)).unwrap();
    std::os::unix::fs::symlink("one-byte", root.join("link")).unwrap();
}

#[test]
fn a_tree_round_trips_with_checksums_and_modes() {
    let t = TempDir::new("tree");
    let src = t.join("src");
    make_tree(&src);
    // DST missing: it becomes the copy.
    let dst = t.join("dst");
    let out = cp(&[Path::new("-r"), Path::new("--verify"), &src, &dst]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_same_tree(&src, &dst);
    let report = text(&out.stdout);
    assert!(report.contains("copied 5 file(s)"), "{report}");
    assert!(report.contains("verified 5 file(s)"), "{report}");
    assert!(
        report.contains("left in the page cache: source"),
        "{report}"
    );
    // DST an existing directory: the tree goes inside it, under its own name.
    let out = cp(&[Path::new("-r"), &src, &dst]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_same_tree(&src, &dst.join("src"));
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

#[test]
fn files_follow_cp_conventions() {
    let t = TempDir::new("conv");
    write_file(&t.join("a"), &pattern(10_000, 4), 0o640);
    write_file(&t.join("b"), &pattern(70_000, 5), 0o600);
    fs::create_dir(t.join("d")).unwrap();
    // SRC DST: a new name; over an existing file: replaced, keeping the destination's mode
    // (as cp, which writes into the existing file).
    let out = cp(&[&t.join("a"), &t.join("c")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_same_tree(&t.join("a"), &t.join("c"));
    let out = cp(&[&t.join("b"), &t.join("c")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        fs::read(t.join("c")).unwrap(),
        fs::read(t.join("b")).unwrap()
    );
    assert_eq!(fs::metadata(t.join("c")).unwrap().mode() & 0o7777, 0o640);
    // Several SRC into a directory.
    let out = cp(&[&t.join("a"), &t.join("b"), &t.join("d")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_same_tree(&t.join("a"), &t.join("d/a"));
    assert_same_tree(&t.join("b"), &t.join("d/b"));
    // Several SRC need a directory DST.
    let out = cp(&[&t.join("a"), &t.join("b"), &t.join("c")]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is not a directory"),
        "{}",
        text(&out.stderr)
    );
    // A directory without -r is reported and skipped, the rest copied, the exit status 1.
    let out = cp(&[&t.join("d"), &t.join("a"), &t.join("e-dir-missing")]);
    assert!(!out.status.success());
    fs::create_dir(t.join("e")).unwrap();
    let out = cp(&[&t.join("d"), &t.join("a"), &t.join("e")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("-r not specified; omitting directory"));
    assert_same_tree(&t.join("a"), &t.join("e/a"));
    assert!(!t.join("e/d").exists());
    // A file onto itself, a missing source.
    let out = cp(&[&t.join("a"), &t.join("a")]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("are the same file"));
    let out = cp(&[&t.join("nope"), &t.join("x")]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("nope"), "{}", text(&out.stderr));
    assert!(!t.join("x").exists());
    // A destination in a missing directory is named as given, with the directory that is
    // missing (not by the temporary's name).
    let out = cp(&[&t.join("a"), &t.join("no-dir/x")]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("cannot create '{}'", t.join("no-dir/x").display()))
            && err.contains("does not exist")
            && !err.contains(".pagepipe-cp-"),
        "{err}"
    );
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

#[test]
fn help_shows_the_usage_as_cp_does() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = text(&out.stdout);
    assert!(
        help.contains("Usage: pagepipe-cp [OPTIONS] SRC... DST\n"),
        "{help}"
    );
}

#[test]
fn stdin_is_copied_to_a_named_file() {
    let t = TempDir::new("stdin");
    let data = pattern((5 << 20) + 3, 6);
    let dst = t.join("from-stdin");
    let mut child = Command::new(BIN)
        .args(["--verify", "--mode", "fallback", "-"])
        .arg(&dst)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fnv1a(&fs::read(&dst).unwrap()), fnv1a(&data));
    assert!(
        text(&out.stdout).contains("writes: fallback"),
        "{}",
        text(&out.stdout)
    );
    // stdin needs a file name, not a directory.
    let out = cp(&[Path::new("-"), &t.0]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("standard input"),
        "{}",
        text(&out.stderr)
    );
}

/// Copies 32 MiB onto a small filesystem, from a file (its reservation is refused, and the copy
/// goes on without it, as cp) and from standard input (no size): the disk fills mid-copy, and
/// the copy must fail with ENOSPC's message and leave neither the destination nor a temporary.
fn expect_enospc(fs_dir: &Path, mode: &str) {
    let t = TempDir::new("enospc-src");
    let src = t.join("big");
    write_file(&src, &pattern(32 << 20, 7), 0o644);
    let dst = fs_dir.join("copy");
    let from_file = Command::new(BIN)
        .args(["--mode", mode])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let from_stdin = Command::new(BIN)
        .args(["--mode", mode, "-"])
        .arg(&dst)
        .stdin(File::open(&src).unwrap())
        .output()
        .unwrap();
    for out in [from_file, from_stdin] {
        expect_enospc_output(fs_dir, &dst, mode, &out);
    }
}

fn expect_enospc_output(fs_dir: &Path, dst: &Path, mode: &str, out: &Output) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{mode}: {err}");
    assert!(err.contains("No space left on device"), "{mode}: {err}");
    assert!(
        err.contains("copy"),
        "the message names the destination: {err}"
    );
    assert!(!dst.exists(), "{mode}: a partial destination was left");
    assert_eq!(temporaries(fs_dir), Vec::<PathBuf>::new(), "{mode}");
}

#[test]
fn enospc_on_tmpfs_stops_with_no_destination() {
    let Some(fs) = SmallFs::tmpfs_or_skip("enospc_on_tmpfs_stops_with_no_destination") else {
        return;
    };
    for mode in ["auto", "fallback"] {
        expect_enospc(&fs.dir, mode);
    }
}

#[test]
fn enospc_on_ext4_stops_with_no_destination() {
    let Some(fs) = SmallFs::ext4_or_skip("enospc_on_ext4_stops_with_no_destination") else {
        return;
    };
    for mode in ["auto", "fallback"] {
        expect_enospc(&fs.dir, mode);
    }
}

#[test]
fn sigkill_mid_copy_leaves_no_destination() {
    let t = TempDir::new("kill");
    let dst = t.join("out");
    let (mut child, stdin) = start_stdin_copy(&dst);
    child.kill().unwrap(); // SIGKILL: nothing can clean up
    let status = child.wait().unwrap();
    drop(stdin);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(!dst.exists(), "a killed copy left a destination");
    // What SIGKILL leaves is a dot-file that says what it is.
    let temps = temporaries(&t.0);
    assert_eq!(temps.len(), 1, "{temps:?}");
    assert!(temps[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(".out.pagepipe-cp-"));
}

#[test]
fn sigint_mid_copy_removes_the_temporary() {
    let t = TempDir::new("int");
    let dst = t.join("out");
    let (child, stdin) = start_stdin_copy(&dst);
    // SAFETY: kill(2) with a live child's pid and a valid signal number.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    assert_eq!(out.status.signal(), Some(libc::SIGINT));
    assert!(!dst.exists());
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

#[test]
fn a_source_truncated_mid_copy_is_an_error_with_no_destination() {
    let t = TempDir::new("shrink");
    let src = t.join("unwritten");
    // Allocated but never written (reads as zeros; not sparse, so it is read through): a
    // gigabyte that costs no writing.
    let f = File::create(&src).unwrap();
    // SAFETY: fallocate(2) on a live descriptor touches no memory.
    let rc = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 1 << 30) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
    drop(f);
    fs::create_dir(t.join("out")).unwrap();
    let dst = t.join("out/copy");
    let child = Command::new(BIN)
        .arg(&src)
        .arg(&dst)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    wait_for_temporary(&t.join("out"));
    // SAFETY: kill(2) with a live child's pid and valid signal numbers.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("shrank"), "{err}");
    assert!(!dst.exists(), "a truncated copy was renamed into place");
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

/// Issue 27: one missing source among several stopped the copy (the later sources were not
/// copied, and the directory of the earlier ones was never synced); cp reports it and goes on,
/// and every directory that got an entry is synced before the exit (checked with strace where
/// it is installed).
#[test]
fn a_missing_source_is_reported_and_the_rest_copied_and_synced() {
    let t = TempDir::new("missing");
    write_file(&t.join("a"), &pattern(5000, 8), 0o644);
    write_file(&t.join("b"), &pattern(7000, 9), 0o644);
    fs::create_dir(t.join("d")).unwrap();
    let out = cp(&[&t.join("a"), &t.join("nope"), &t.join("b"), &t.join("d")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nope"), "{}", text(&out.stderr));
    assert_eq!(fs::read(t.join("d/a")).unwrap(), pattern(5000, 8));
    assert_eq!(fs::read(t.join("d/b")).unwrap(), pattern(7000, 9));
    fs::remove_file(t.join("d/a")).unwrap();
    let traced = Command::new("strace")
        .args(["-f", "-e", "trace=fsync,fdatasync,openat", "-o"])
        .arg(t.join("trace"))
        .arg(BIN)
        .args([&t.join("a"), &t.join("nope"), &t.join("d")])
        .output();
    match traced {
        Ok(o) if o.status.code() == Some(1) => {
            let trace = fs::read_to_string(t.join("trace")).unwrap();
            let d = t.join("d");
            // The directory is opened more than once (a batch of small files syncs its
            // filesystem through one descriptor): one of them must be fsync'ed.
            let dir_fds: Vec<i32> = trace
                .lines()
                .filter(|l| l.contains(&format!("\"{}\"", d.display())))
                .filter_map(|l| l.rsplit("= ").next()?.trim().parse::<i32>().ok())
                .collect();
            assert!(
                !dir_fds.is_empty(),
                "the directory was never opened to be synced:\n{trace}"
            );
            assert!(
                dir_fds
                    .iter()
                    .any(|fd| trace.contains(&format!("fsync({fd})"))),
                "the directory was not synced:\n{trace}"
            );
        }
        Ok(o) => println!(
            "note: strace did not run ({}), the sync is not checked",
            o.status
        ),
        Err(e) => println!("note: no strace ({e}), the sync is not checked"),
    }
}

/// Issue 27: with standard input closed, the Rust runtime hands the process /dev/null, and the
/// copy replaced the destination with an empty file and exited 0.
#[test]
fn a_closed_stdin_leaves_the_destination_alone() {
    let t = TempDir::new("closed-stdin");
    let dst = t.join("dst");
    write_file(&dst, b"precious", 0o644);
    let out = cp_with(&[Path::new("-"), &dst], || {
        // SAFETY: close(2) of descriptor 0 in the child before exec.
        unsafe { libc::close(0) };
        Ok(())
    });
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("standard input is closed"));
    assert_eq!(fs::read(&dst).unwrap(), b"precious");
    // An empty input on purpose still copies.
    let out = Command::new(BIN)
        .arg("-")
        .arg(&dst)
        .stdin(File::open("/dev/null").unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read(&dst).unwrap(), b"");
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

/// Issue 27: past the file size limit (`ulimit -f`) SIGXFSZ killed the copy and left its
/// temporary; now the write fails with EFBIG, which is reported, and nothing is left.
#[test]
fn a_file_size_limit_is_an_error_that_leaves_nothing() {
    let t = TempDir::new("fsize");
    write_file(&t.join("big"), &pattern(4 << 20, 10), 0o644);
    fs::create_dir(t.join("out")).unwrap();
    for args in [vec![], vec!["--mode", "fallback"]] {
        let mut all: Vec<&Path> = args.iter().map(Path::new).collect();
        let (src, dst) = (t.join("big"), t.join("out/copy"));
        all.push(&src);
        all.push(&dst);
        let out = cp_with(&all, || {
            let lim = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            // SAFETY: setrlimit(2) reads `lim`, valid for the call.
            unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &lim) };
            Ok(())
        });
        assert_eq!(out.status.signal(), None, "{args:?}: killed by a signal");
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("File too large"),
            "{}",
            text(&out.stderr)
        );
        assert!(!dst.exists());
        assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new(), "{args:?}");
    }
}

/// Issue 27: a sparse source was copied fully allocated, its apparent size reserved first: a
/// 1 GiB sparse file with 1 MiB of data did not fit on a 16 MiB filesystem, where cp copies it.
#[test]
fn a_sparse_source_stays_sparse() {
    let Some(small) = SmallFs::ext4_or_skip("a_sparse_source_stays_sparse") else {
        return;
    };
    let t = TempDir::new("sparse");
    let src = t.join("sparse");
    let data = pattern(1 << 20, 11);
    {
        let f = File::create(&src).unwrap();
        f.set_len(1 << 30).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &data, 300 << 20).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"head", 0).unwrap();
    }
    let dst = small.dir.join("copy");
    let out = cp(&[&src, &dst]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let m = fs::metadata(&dst).unwrap();
    assert_eq!(m.len(), 1 << 30);
    assert!(
        m.blocks() * 512 < 4 << 20,
        "{} bytes allocated",
        m.blocks() * 512
    );
    let f = File::open(&dst).unwrap();
    let mut got = vec![0u8; 1 << 20];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut got, 300 << 20).unwrap();
    assert_eq!(fnv1a(&got), fnv1a(&data));
    let mut head = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0).unwrap();
    assert_eq!(&head, b"head\0\0\0\0");
    // --verify hashes the holes as the zeros they read back as (a smaller file: hashing is slow
    // in a debug build).
    let small_src = t.join("small-sparse");
    {
        let f = File::create(&small_src).unwrap();
        f.set_len(16 << 20).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &data, 5 << 20).unwrap();
    }
    let out = cp(&[Path::new("--verify"), &small_src, &small.dir.join("v")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("verified 1 file(s)"));
    assert_eq!(
        fnv1a(&fs::read(small.dir.join("v")).unwrap()),
        fnv1a(&fs::read(&small_src).unwrap())
    );
}

/// Issue 27: the source's mode was applied ignoring the umask, and an existing destination
/// directory was chmod'ed to its source's mode; cp does neither.
#[test]
fn modes_follow_the_umask_and_spare_existing_directories() {
    let t = TempDir::new("umask");
    write_file(&t.join("f"), b"x", 0o664);
    let out = cp_with(&[&t.join("f"), &t.join("g")], || {
        // SAFETY: umask(2) in the child before exec.
        unsafe { libc::umask(0o077) };
        Ok(())
    });
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::metadata(t.join("g")).unwrap().mode() & 0o7777, 0o600);
    let src = t.join("src");
    fs::create_dir(&src).unwrap();
    write_file(&src.join("inner"), b"y", 0o644);
    fs::set_permissions(&src, fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir_all(t.join("dst/src")).unwrap();
    fs::set_permissions(t.join("dst/src"), fs::Permissions::from_mode(0o755)).unwrap();
    let out = cp(&[Path::new("-r"), &src, &t.join("dst")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        fs::metadata(t.join("dst/src")).unwrap().mode() & 0o7777,
        0o755
    );
    assert_eq!(fs::read(t.join("dst/src/inner")).unwrap(), b"y");
}

/// Issue 27: names of 240 bytes and more (valid: up to 255) failed, the temporary's suffix
/// pushing its name past NAME_MAX.
#[test]
fn long_names_copy() {
    let t = TempDir::new("long");
    let name = "n".repeat(255);
    write_file(&t.join(&name), b"long", 0o644);
    fs::create_dir(t.join("d")).unwrap();
    let out = cp(&[&t.join(&name), &t.join("d")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read(t.join("d").join(&name)).unwrap(), b"long");
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

/// What cp does with the destination: it writes through a symlink (the link stays, its target
/// gets the data), refuses a dangling one, never turns a device or fifo into a regular file,
/// and never lets a second source with the same name replace the first one's copy. Before:
/// the link, the fifo and the device node were replaced by regular files with exit status 0,
/// and `a/x b/x DIR` left b's copy, exit 0.
#[test]
fn destinations_follow_cp_links_specials_and_repeats() {
    let t = TempDir::new("dests");
    write_file(&t.join("src"), b"new data", 0o644);
    // Through a symlink.
    write_file(&t.join("target"), b"target-old", 0o644);
    std::os::unix::fs::symlink("target", t.join("link")).unwrap();
    let out = cp(&[&t.join("src"), &t.join("link")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(fs::symlink_metadata(t.join("link")).unwrap().is_symlink());
    assert_eq!(fs::read(t.join("target")).unwrap(), b"new data");
    // A dangling one.
    std::os::unix::fs::symlink("missing", t.join("dangling")).unwrap();
    let out = cp(&[&t.join("src"), &t.join("dangling")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("dangling symlink"),
        "{}",
        text(&out.stderr)
    );
    assert!(fs::symlink_metadata(t.join("dangling"))
        .unwrap()
        .is_symlink());
    assert!(!t.join("missing").exists());
    // A fifo (and, as root, a character device).
    let fifo =
        std::ffi::CString::new(t.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let mut specials = vec![t.join("fifo")];
    let null =
        std::ffi::CString::new(t.join("null").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: mknod(2) reads a NUL-terminated path (1, 3: /dev/null's numbers).
    if unsafe { libc::mknod(null.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0 {
        specials.push(t.join("null"));
    }
    for special in &specials {
        let out = cp(&[&t.join("src"), special]);
        assert_eq!(out.status.code(), Some(1), "{}", special.display());
        assert!(
            text(&out.stderr).contains("name a regular file"),
            "{}",
            text(&out.stderr)
        );
        assert!(!fs::symlink_metadata(special).unwrap().is_file());
    }
    // Two sources of one name into one directory: the first copy stays.
    for (dir, data) in [("a", "AAA"), ("b", "BBB")] {
        fs::create_dir(t.join(dir)).unwrap();
        write_file(&t.join(dir).join("x"), data.as_bytes(), 0o644);
    }
    fs::create_dir(t.join("out")).unwrap();
    let out = cp(&[&t.join("a/x"), &t.join("b/x"), &t.join("out")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("will not overwrite just-created"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fs::read(t.join("out/x")).unwrap(), b"AAA");
    assert!(
        text(&out.stdout).contains("copied 1 file"),
        "{}",
        text(&out.stdout)
    );
    // The same source twice: a warning, exit 0, as cp.
    fs::create_dir(t.join("twice")).unwrap();
    let again = t.join("a/./x");
    let out = cp(&[&t.join("a/x"), &again, &t.join("twice")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("specified more than once"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fs::read(t.join("twice/x")).unwrap(), b"AAA");
    // A file a recursion reaches twice goes to both places, as in cp (`-r a a/sub DIR`).
    fs::create_dir_all(t.join("tree/sub")).unwrap();
    write_file(&t.join("tree/sub/y"), b"YYY", 0o644);
    fs::create_dir(t.join("both")).unwrap();
    let out = Command::new(BIN)
        .arg("-r")
        .arg(t.join("tree"))
        .arg(t.join("tree/sub"))
        .arg(t.join("both"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read(t.join("both/tree/sub/y")).unwrap(), b"YYY");
    assert_eq!(fs::read(t.join("both/sub/y")).unwrap(), b"YYY");
    // A hard link of a source under another name is another source, as in cp: refused, exit 1.
    fs::create_dir(t.join("links")).unwrap();
    fs::hard_link(t.join("a/x"), t.join("links/x")).unwrap();
    fs::create_dir(t.join("linked")).unwrap();
    let out = cp(&[&t.join("a/x"), &t.join("links/x"), &t.join("linked")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("will not overwrite just-created"),
        "{}",
        text(&out.stderr)
    );
    // `SRC/.`: the directory's contents go into DST itself.
    fs::create_dir(t.join("into")).unwrap();
    let dot = t.join("a").join(".");
    let out = Command::new(BIN)
        .arg("-r")
        .arg(&dot)
        .arg(t.join("into"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read(t.join("into/x")).unwrap(), b"AAA");
    assert!(!t.join("into/a").exists());
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

/// A destination link that leads to a file with no name (unlinked while open: the kernel names
/// it "... (deleted)") is refused: before, the copy was renamed to a new file literally named
/// `out (deleted)`, exit 0.
#[test]
fn a_link_to_an_unlinked_file_is_refused() {
    let t = TempDir::new("unlinked");
    write_file(&t.join("a"), b"data", 0o644);
    let gone = File::create(t.join("out")).unwrap();
    fs::remove_file(t.join("out")).unwrap();
    // The command's standard output is the unlinked file; /proc/self/fd/1 leads there.
    let out = Command::new(BIN)
        .arg(t.join("a"))
        .arg("/proc/self/fd/1")
        .stdout(gone)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no name of its own"),
        "{}",
        text(&out.stderr)
    );
    let names: Vec<_> = fs::read_dir(&t.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("a")]);
}

/// A summary that cannot be written fails the command with a message, not a panic (exit 101).
#[test]
fn a_full_stdout_is_an_error_not_a_panic() {
    let t = TempDir::new("full-stdout");
    write_file(&t.join("a"), b"abc", 0o644);
    let full = File::options().write(true).open("/dev/full").unwrap();
    let out = Command::new(BIN)
        .arg(t.join("a"))
        .arg(t.join("b"))
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot write the summary"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fs::read(t.join("b")).unwrap(), b"abc");
}

/// A symlink destination is followed by the kernel, so `fs.protected_symlinks` applies: root
/// copying onto another user's link in a sticky world-writable directory is refused, as cp's
/// open is, and the link's target keeps its bytes. Resolved in userspace (before), the copy was
/// renamed over the target. Needs root; turns the setting on for the test if it is off.
#[test]
fn a_destination_link_is_followed_under_the_kernels_rules() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        println!("SKIPPED a_destination_link_is_followed_under_the_kernels_rules: not root");
        return;
    }
    const SETTING: &str = "/proc/sys/fs/protected_symlinks";
    let Ok(was) = fs::read_to_string(SETTING) else {
        println!("SKIPPED a_destination_link_is_followed_under_the_kernels_rules: no {SETTING}");
        return;
    };
    if fs::write(SETTING, "1").is_err() {
        println!(
            "SKIPPED a_destination_link_is_followed_under_the_kernels_rules: {SETTING} read-only"
        );
        return;
    }
    let t = TempDir::new("protected");
    let shared = t.join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    write_file(&t.join("victim"), b"precious", 0o644);
    write_file(&t.join("src"), b"attacker's", 0o644);
    let link = shared.join("link");
    std::os::unix::fs::symlink(t.join("victim"), &link).unwrap();
    let c = std::ffi::CString::new(link.clone().into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: lchown(2) reads a NUL-terminated path; 65534 is nobody.
    assert_eq!(unsafe { libc::lchown(c.as_ptr(), 65534, 65534) }, 0);
    let out = cp(&[&t.join("src"), &link]);
    fs::write(SETTING, was.trim()).unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot follow"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(fs::read(t.join("victim")).unwrap(), b"precious");
}

/// Issue 40: a fifo or character device named as SRC without -r is read, as cp reads it, into
/// a regular file (it was refused as "not a regular file"). A fifo has no size: its content is
/// streamed into the durable temporary, as standard input is. Compared with the system's cp.
#[test]
fn a_fifo_or_character_device_named_as_source_is_read() {
    let t = TempDir::new("fifo-src");
    let fifo = t.join("fifo");
    let c = std::ffi::CString::new(fifo.clone().into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0);
    let bytes = pattern(300_000, 7); // more than a pipe holds: the reader must keep reading
    for (tool, out) in [("cp", t.join("by-cp")), ("pagepipe-cp", t.join("by-pp"))] {
        let writer = {
            let (fifo, bytes) = (fifo.clone(), bytes.clone());
            std::thread::spawn(move || {
                let mut f = fs::OpenOptions::new().write(true).open(fifo).unwrap();
                f.write_all(&bytes).unwrap();
            })
        };
        let bin = if tool == "cp" { "cp" } else { BIN };
        let ran = Command::new(bin).arg(&fifo).arg(&out).output().unwrap();
        writer.join().unwrap();
        assert!(ran.status.success(), "{tool}: {}", text(&ran.stderr));
        let m = fs::metadata(&out).unwrap();
        assert!(m.is_file(), "{tool}");
        assert_eq!(fs::read(&out).unwrap(), bytes, "{tool}");
    }
    let mode = |p: &str| fs::metadata(t.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode("by-pp"),
        mode("by-cp"),
        "the copy's mode, as cp gives it"
    );
    // A character device: /dev/null reads as empty.
    let out = cp(&[Path::new("/dev/null"), &t.join("null-copy")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let m = fs::metadata(t.join("null-copy")).unwrap();
    assert!(m.is_file() && m.len() == 0);
}
