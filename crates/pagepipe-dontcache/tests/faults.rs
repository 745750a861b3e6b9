//! Writeback errors under fault injection: a thin-provisioned loop device ([`ThinFs`]) whose
//! writeback fails after the writes into the page cache succeeded. Whatever else shares the
//! file (another writer on the same open file description, a forked child with a writer of its
//! own or with the parent's writer), a writer whose data did not reach the disk must never
//! finish with `Ok`. Needs root (mount, loop devices, mkfs.ext4); skips with a message without.

use pagepipe_dontcache::{Mode, Writer};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

#[path = "support/smallfs.rs"]
mod smallfs;
use smallfs::ThinFs;

#[path = "../../pagepipe/tests/support/children.rs"]
mod children;

fn rw_file(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap()
}

/// The modes to test on `dir`: Fallback, and Kernel where its filesystem takes RWF_DONTCACHE.
fn modes_on(dir: &Path) -> Vec<Mode> {
    let path = dir.join("probe");
    let mut w = Writer::with_mode(rw_file(&path), Mode::Kernel).unwrap();
    let kernel = w.write_all(b"probe").is_ok();
    drop(w);
    std::fs::remove_file(&path).unwrap();
    if kernel {
        vec![Mode::Fallback, Mode::Kernel]
    } else {
        println!("note: no RWF_DONTCACHE on ext4 here: Kernel mode not tested");
        vec![Mode::Fallback]
    }
}

/// An error of a lost writeback: StorageFull (ENOSPC from the loop device) or EIO.
fn assert_lost(e: &io::Error, what: &str) {
    assert!(
        matches!(e.kind(), io::ErrorKind::StorageFull) || e.raw_os_error() == Some(libc::EIO),
        "{what}: unexpected error {e}"
    );
}

/// Rounds per case: `PAGEPIPE_FAULT_ROUNDS`, else `default` (more to measure).
fn rounds(default: usize) -> usize {
    std::env::var("PAGEPIPE_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the forked child does.
#[derive(Clone, Copy, Debug)]
enum Child {
    /// Makes a fallback writer of its own, on a file elsewhere, and finishes it.
    OwnWriter,
    /// Writes more through the writer it inherited (to a range of its own), and finishes it.
    Inherited,
    /// Drops the writer it inherited without finishing it.
    DropsInherited,
}

#[test]
fn a_parent_sees_its_writeback_error_whatever_its_children_do() {
    let _serial = children::serial();
    let Some(fs) = ThinFs::or_skip("a_parent_sees_its_writeback_error_whatever_its_children_do")
    else {
        return;
    };
    let elsewhere = std::env::temp_dir().join(format!("pagepipe-faults-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    let modes = modes_on(&fs.dir);
    fs.exhaust();
    // Whether the child's flusher reaches the parent's ranges before the parent's does is a
    // race: before the fix 0-4 of 5 and 3 of 20 rounds with a writer in the child lost the
    // error, so 20 rounds, to fail without the fix all but surely.
    let rounds = rounds(20);
    let mut lost = Vec::new();
    for mode in modes {
        for child in [Child::OwnWriter, Child::Inherited, Child::DropsInherited] {
            for round in 0..rounds {
                let path = fs.dir.join(format!("parent-{mode:?}-{child:?}-{round}"));
                let mut w = Writer::with_mode(rw_file(&path), mode).unwrap();
                w.write_all(&[0x5a; 1 << 20]).unwrap();
                // The child takes its copy out of the slot; the parent's stays in its own.
                let mut slot = Some(w);
                let inherited = &mut slot;
                let own = elsewhere.join(format!("child-{round}"));
                let pid = children::fork(move || {
                    let w = inherited.take().unwrap();
                    match child {
                        Child::OwnWriter => {
                            let mut c =
                                Writer::with_mode(File::create(&own).unwrap(), Mode::Fallback)
                                    .unwrap();
                            c.write_all(&[1u8; 4 << 20]).unwrap();
                            c.finish().unwrap();
                            // Give the child's flusher time to look at everything it knows of.
                            std::thread::sleep(Duration::from_millis(100));
                            std::mem::forget(w);
                        }
                        Child::Inherited => {
                            let mut w = w;
                            let _ = w.write_all_at(&[2u8; 1 << 20], 8 << 20);
                            let _ = w.finish();
                        }
                        Child::DropsInherited => drop(w),
                    }
                    0
                });
                let status = children::reap_within(pid, Duration::from_secs(60));
                assert_eq!(status, 0, "{mode:?} {child:?}: child failed");
                match slot.take().unwrap().finish() {
                    Ok(_) => lost.push(format!("{mode:?} {child:?} round {round}")),
                    Err(e) => assert_lost(&e, &format!("{mode:?} {child:?}")),
                }
            }
        }
    }
    std::fs::remove_dir_all(&elsewhere).unwrap();
    println!(
        "parent finish() Ok with its data lost: {} cases",
        lost.len()
    );
    assert!(
        lost.is_empty(),
        "the parent's finish() returned Ok with its data not on disk: {lost:?}"
    );
}

/// Two writers on one open file description (`try_clone`, as a segmented copy may share one
/// `File`), each writing its own range: both ranges' writeback fails, and both `finish()` calls
/// must say so. Through one description, the first sync consumed the kernel's error record and
/// the other writer finished `Ok`.
#[test]
fn two_writers_on_one_description_both_see_the_loss() {
    let Some(fs) = ThinFs::or_skip("two_writers_on_one_description_both_see_the_loss") else {
        return;
    };
    let modes = modes_on(&fs.dir);
    fs.exhaust();
    let mut lost = Vec::new();
    for mode in modes {
        for round in 0..rounds(5) {
            let file = rw_file(&fs.dir.join(format!("shared-{mode:?}-{round}")));
            let mut a = Writer::with_mode(file.try_clone().unwrap(), mode).unwrap();
            let mut b = Writer::with_mode(file, mode).unwrap();
            a.write_all_at(&[0xaa; 1 << 20], 0).unwrap();
            b.write_all_at(&[0xbb; 1 << 20], 1 << 20).unwrap();
            for (name, w) in [("first", a), ("second", b)] {
                match w.finish() {
                    Ok(_) => lost.push(format!("{mode:?} round {round}: the {name} writer")),
                    Err(e) => assert_lost(&e, name),
                }
            }
        }
    }
    assert!(
        lost.is_empty(),
        "finish() returned Ok with the writer's data not on disk: {lost:?}"
    );
}
