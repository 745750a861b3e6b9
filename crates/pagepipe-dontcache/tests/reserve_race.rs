//! A failed [`Writer::preallocate`] leaves nothing reserved past the file's end, even when
//! another process takes the space while `fallocate` runs (so the check for room before it
//! passed), and touches no byte another writer appends meanwhile (issue 27).
//!
//! The race is made exact by interposing `fallocate` in this test binary: armed, it fills the
//! filesystem just before the real call, so that the call allocates part of the request and
//! fails, then gives the space back and lets another writer append to the file. Its own test
//! binary, so that no other test's `fallocate` goes through it. Needs root (mount, loop
//! devices, mkfs.ext4); skips with a message without.

use pagepipe_dontcache::Writer;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[path = "support/smallfs.rs"]
mod smallfs;
use smallfs::SmallFs;

/// What the interposed `fallocate` does around the next `FALLOC_FL_KEEP_SIZE` call.
struct Race {
    /// A file on the filesystem under test, grown to fill it before the real call and removed
    /// after it.
    filler: PathBuf,
    /// Bytes left free for the real call, which allocates about this much and fails.
    leave: u64,
    /// Another writer's description of the file, and what it appends after the call.
    other: Option<(File, Vec<u8>)>,
}

static RACE: Mutex<Option<Race>> = Mutex::new(None);
/// Another writer's description and bytes to append just before the writer's next `pwrite`
/// (the failing append that gives the blocks back): an append between its look at the file's
/// end and the cut.
static BEFORE_CUT: Mutex<Option<(File, Vec<u8>)>> = Mutex::new(None);
/// Held by each test for its whole run: one armed race at a time.
static SERIAL: Mutex<()> = Mutex::new(());
/// Disk bytes the file held right after the real call: proof that it kept a partial
/// reservation for the writer to give back.
static HELD_AFTER_CALL: Mutex<Option<u64>> = Mutex::new(None);

/// `fallocate(2)` itself, past this binary's interposer.
fn real_fallocate(fd: libc::c_int, mode: libc::c_int, offset: i64, len: i64) -> libc::c_int {
    // SAFETY: fallocate touches no user memory.
    unsafe { libc::syscall(libc::SYS_fallocate, fd, mode, offset, len) as libc::c_int }
}

/// This binary's `fallocate`, in place of the C library's for every caller in the binary (the
/// writer's included): the real call, with the armed [`Race`] around it.
#[no_mangle]
pub extern "C" fn fallocate(
    fd: libc::c_int,
    mode: libc::c_int,
    offset: i64,
    len: i64,
) -> libc::c_int {
    let race = match mode {
        libc::FALLOC_FL_KEEP_SIZE => RACE.lock().unwrap().take(),
        _ => None,
    };
    let Some(race) = race else {
        return real_fallocate(fd, mode, offset, len);
    };
    fill(&race.filler, race.leave);
    let rc = real_fallocate(fd, mode, offset, len);
    let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
    // SAFETY: fstat writes a stat to the pointer we pass; all zeroes is a valid stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `fd` is the caller's live descriptor.
    if unsafe { libc::fstat(fd, &mut st) } == 0 {
        *HELD_AFTER_CALL.lock().unwrap() = Some(st.st_blocks as u64 * 512);
    }
    std::fs::remove_file(&race.filler).unwrap();
    if let Some((file, data)) = race.other {
        let end = file.metadata().unwrap().len();
        file.write_all_at(&data, end).unwrap();
        file.sync_all().unwrap();
    }
    // SAFETY: errno is this thread's; the caller reads it after a failure.
    unsafe { *libc::__errno_location() = errno };
    rc
}

/// This binary's `pwrite` (the standard library writes with `pwrite64`, so only the writer's
/// give-back comes here): appends the armed [`BEFORE_CUT`] bytes first.
///
/// # Safety
/// `pwrite(2)`'s contract: `buf` is readable for `count` bytes, or the kernel says `EFAULT`.
#[no_mangle]
pub unsafe extern "C" fn pwrite(
    fd: libc::c_int,
    buf: *const libc::c_void,
    count: libc::size_t,
    offset: libc::off_t,
) -> libc::ssize_t {
    if let Some((file, data)) = BEFORE_CUT.lock().unwrap().take() {
        let end = file.metadata().unwrap().len();
        file.write_all_at(&data, end).unwrap();
        // On disk, size included: a direct write below the new size then extends nothing (a
        // write past the size on disk still counts as extending for ext4).
        file.sync_all().unwrap();
    }
    // SAFETY: the caller's arguments, as its contract has them, passed on unchanged to the
    // system call, which checks the buffer itself.
    unsafe { libc::syscall(libc::SYS_pwrite64, fd, buf, count, offset) as libc::ssize_t }
}

/// Fills the filesystem of `path` with a new file there, all but `leave` bytes.
fn fill(path: &Path, leave: u64) {
    let f = File::create(path).unwrap();
    const STEP: i64 = 256 << 10;
    let mut size = 0;
    while real_fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, size, STEP) == 0 {
        size += STEP;
    }
    let size = f.metadata().unwrap().len();
    f.set_len(size.saturating_sub(leave)).unwrap();
    f.sync_all().unwrap();
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Arms the race on `fs`: filled but `leave` bytes, `other` appended after the call.
fn arm_on(fs: &SmallFs, leave: u64, other: Option<(File, Vec<u8>)>) {
    arm(Race {
        filler: fs.dir.join("filler"),
        leave,
        other,
    });
}

fn arm(race: Race) {
    *HELD_AFTER_CALL.lock().unwrap() = None;
    *RACE.lock().unwrap() = Some(race);
}

/// Disk bytes the file at `path` holds (`st_blocks`).
fn disk_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// A writer on a file already holding `data` (written and synced).
fn writer_after(path: &Path, data: &[u8]) -> Writer {
    let mut w = Writer::create(path).unwrap();
    w.write_all(data).unwrap();
    w.sync().unwrap();
    w
}

/// Another writer's bytes for the file: 100,000 of them, none zero (a zeroed byte shows).
fn theirs() -> Vec<u8> {
    (0..100_000u32).map(|i| (i % 253) as u8 | 1).collect()
}

/// After a failed `preallocate` with another writer's `theirs` appended to `first`: the error
/// says the blocks were given back, the file holds exactly `first` then `theirs`, and nothing
/// beyond a few blocks is held past that.
fn assert_given_back_and_whole(e: &io::Error, path: &Path, first: Vec<u8>, theirs: &[u8]) {
    assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
    assert!(e.to_string().contains("were given back"), "{e}");
    let mut want = first;
    want.extend_from_slice(theirs);
    assert_eq!(
        std::fs::read(path).unwrap(),
        want,
        "the other writer's bytes"
    );
    let now = disk_bytes(path);
    assert!(now <= 128 << 10, "{now} bytes held for {}", want.len());
}

/// The failed call's partial reservation past the end is given back: nothing is left reserved
/// and the writer goes on. Before: the writer punched a hole past the end, which ext4 clamps
/// to the size, and the reservation stayed (the error said so).
#[test]
fn a_failed_preallocate_gives_back_what_it_reserved_past_the_end() {
    let _serial = serial();
    let Some(fs) =
        SmallFs::ext4_or_skip("a_failed_preallocate_gives_back_what_it_reserved_past_the_end")
    else {
        return;
    };
    let path = fs.dir.join("target");
    let first = vec![0x11u8; 10_000];
    let mut w = writer_after(&path, &first);
    arm_on(&fs, 2 << 20, None);
    let e = w.preallocate(8 << 20).unwrap_err();
    let held = HELD_AFTER_CALL.lock().unwrap().expect("the interposer ran");
    assert!(
        held >= 1 << 20,
        "the call kept only {held} bytes: no race was made"
    );
    assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
    assert!(e.to_string().contains("were given back"), "{e}");
    let now = disk_bytes(&path);
    assert!(
        now <= 16 << 10,
        "{now} bytes still held for 10,000 ({held} right after the call)"
    );
    w.write_all(b"and more").unwrap();
    w.finish().unwrap();
    let mut want = first;
    want.extend_from_slice(b"and more");
    assert_eq!(std::fs::read(&path).unwrap(), want);
}

/// Another writer appends to the file while the call fails: its bytes all stay, and what lies
/// past the new end is given back. Before: the writer saw the size move and kept the whole
/// reservation; a punch at the old size would have zeroed the other's bytes.
#[test]
fn giving_back_never_touches_what_another_writer_appended() {
    let _serial = serial();
    let Some(fs) = SmallFs::ext4_or_skip("giving_back_never_touches_what_another_writer_appended")
    else {
        return;
    };
    let runs: usize = std::env::var("PAGEPIPE_RACE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for run in 0..runs {
        let path = fs.dir.join(format!("target-{run}"));
        let first = vec![0x11u8; 5000];
        let mut w = writer_after(&path, &first);
        let theirs = theirs();
        let other = OpenOptions::new().write(true).open(&path).unwrap();
        arm_on(&fs, 2 << 20, Some((other, theirs.clone())));
        let e = w.preallocate(8 << 20).unwrap_err();
        println!("run {run}: {e}");
        assert_given_back_and_whole(&e, &path, first, &theirs);
        drop(w);
        std::fs::remove_file(&path).unwrap();
    }
}

/// Another writer appends between the writer's look at the file's end and its cut: the cut is
/// made at the end as it is then (an append), and every appended byte stays. Before: a hole
/// punched from the end as read zeroed 96,808 of the 100,000 bytes appended (and the error said
/// the reservation was given back).
#[test]
fn an_append_just_before_the_give_back_stays_whole() {
    let Some(fs) = SmallFs::ext4_or_skip("an_append_just_before_the_give_back_stays_whole") else {
        return;
    };
    let _serial = serial();
    let path = fs.dir.join("target");
    let first = vec![0x11u8; 5000];
    let mut w = writer_after(&path, &first);
    let theirs = theirs();
    let other = OpenOptions::new().write(true).open(&path).unwrap();
    *BEFORE_CUT.lock().unwrap() = Some((other, theirs.clone()));
    arm_on(&fs, 2 << 20, None);
    let e = w.preallocate(8 << 20).unwrap_err();
    assert!(
        BEFORE_CUT.lock().unwrap().is_none(),
        "no give-back was tried: {e}"
    );
    assert_given_back_and_whole(&e, &path, first, &theirs);
    drop(w);
}

/// On tmpfs a failing `fallocate` undoes itself; the error says nothing was kept.
#[test]
fn a_failed_preallocate_on_tmpfs_says_nothing_was_kept() {
    let _serial = serial();
    let Some(fs) = SmallFs::tmpfs_or_skip("a_failed_preallocate_on_tmpfs_says_nothing_was_kept")
    else {
        return;
    };
    let path = fs.dir.join("target");
    let mut w = writer_after(&path, b"data");
    arm_on(&fs, 1 << 20, None);
    let e = w.preallocate(4 << 20).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
    assert!(e.to_string().contains("no more blocks than before"), "{e}");
    assert!(disk_bytes(&path) <= 4096);
    w.finish().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"data");
}
