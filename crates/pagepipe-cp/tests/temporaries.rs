//! Temporaries and destinations that cannot be written (issue 40): a SIGKILLed copy's
//! temporary (with its reservation) was never cleaned up; now the next run into the same
//! directory removes it, and only it (a running copy's temporary stays, and a pid taken over
//! by another process does not pass for the owner). A destination ending in `/` that is not a
//! directory, or an immutable one, failed only at the rename, after the whole copy, naming the
//! temporary; now it fails before anything is read.

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// This process's start time, as pagepipe-cp writes it in its temporaries' names.
fn own_start() -> u64 {
    let stat = fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

fn kill(child: &mut Child, sig: libc::c_int) {
    // SAFETY: kill(2) with a live child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

#[test]
fn a_killed_copys_temporaries_are_removed_by_the_next_run_and_only_they() {
    let t = TempDir::new("stale");
    let dir = t.join("out");
    fs::create_dir(&dir).unwrap();
    // A copy killed mid-way leaves its temporary.
    let (mut killed, _stdin) = start_stdin_copy(&dir.join("killed"));
    kill(&mut killed, libc::SIGKILL);
    killed.wait().unwrap();
    let left = temporaries(&dir);
    assert_eq!(left.len(), 1, "{left:?}");
    // Names of a live process: this test's pid with a start time that is not its own (the pid
    // reused by another process), and with its own (a copy of this process still running).
    let me = std::process::id();
    let reused = dir.join(format!(".reused.pagepipe-cp-{me}-{}-0", own_start() + 1));
    let alive = dir.join(format!(".alive.pagepipe-cp-{me}-{}-0", own_start()));
    write_file(&reused, b"stale", 0o600);
    write_file(&alive, b"in use", 0o600);
    // A copy that is running (stopped mid-way) keeps its temporary.
    let (mut running, stdin) = start_stdin_copy(&dir.join("running"));
    kill(&mut running, libc::SIGSTOP);
    let running_temp: Vec<PathBuf> = temporaries(&dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".running."))
        .collect();
    assert_eq!(running_temp.len(), 1);
    // The next run into the directory.
    write_file(&t.join("small"), b"small", 0o644);
    let out = cp(&[&t.join("small"), &dir]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut now = temporaries(&dir);
    now.sort();
    let mut expected = vec![alive.clone(), running_temp[0].clone()];
    expected.sort();
    assert_eq!(
        now, expected,
        "removed: the killed copy's and the reused pid's only"
    );
    kill(&mut running, libc::SIGKILL);
    drop(stdin);
    running.wait().unwrap();
}

/// Runs pagepipe-cp reading a standard input that never ends, so that it can only finish by
/// failing before it reads: returns its stderr, or fails the test if it is still running after
/// 10 s (it was copying).
fn fails_before_reading(args: &[&Path]) -> String {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            drop(stdin);
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            assert_eq!(status.code(), Some(1), "{err}");
            return err;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            kill(&mut child, libc::SIGKILL);
            panic!("pagepipe-cp {args:?} went on copying into a destination it cannot have");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_destination_ending_in_a_slash_fails_before_the_copy() {
    let t = TempDir::new("slash");
    write_file(&t.join("file"), b"a file", 0o644);
    for dst in [
        format!("{}/missing/", t.0.display()),
        format!("{}/file/", t.0.display()),
    ] {
        let err = fails_before_reading(&[Path::new("-"), Path::new(&dst)]);
        assert!(err.contains(&format!("'{dst}': Not a directory")), "{err}");
        assert!(!err.contains(".pagepipe-cp-"), "names the temporary: {err}");
        // A file too (not only standard input).
        let out = cp(&[&t.join("file"), Path::new(&dst)]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains("Not a directory"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(fs::read(t.join("file")).unwrap(), b"a file");
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}

#[test]
fn an_immutable_destination_fails_before_the_copy() {
    let t = TempDir::new("immutable");
    let dst = t.join("locked");
    write_file(&dst, b"keep me", 0o644);
    let chattr = Command::new("chattr").arg("+i").arg(&dst).output();
    if !chattr.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED an_immutable_destination_fails_before_the_copy: chattr +i refused here");
        return;
    }
    let err = fails_before_reading(&[Path::new("-"), &dst]);
    let _ = Command::new("chattr").arg("-i").arg(&dst).output();
    assert!(
        err.contains(&format!("'{}': Operation not permitted", dst.display())),
        "{err}"
    );
    assert!(!err.contains(".pagepipe-cp-"), "names the temporary: {err}");
    assert_eq!(fs::read(&dst).unwrap(), b"keep me");
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
}
