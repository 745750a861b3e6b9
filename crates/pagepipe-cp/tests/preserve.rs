//! `-p`, `--preserve`, `-a` and special files in trees, against the system's cp (issue 40: a
//! tree copy lost every mtime, split hard links, had no way to keep owners or xattrs, and a
//! fifo in a tree was exit 1). Each case runs cp and pagepipe-cp on the same source and
//! compares what they made: kinds, bytes, link targets, modes, owners, times (to the
//! nanosecond), hard-link groups, device numbers and extended attributes.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Sets the extended attribute `name` on `path` (not following a symlink); false where the
/// filesystem has none.
fn set_xattr(path: &Path, name: &str, value: &[u8]) -> bool {
    let (p, n) = (c_path(path), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of `value.len()` bytes.
    let rc = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    rc == 0
}

/// The extended attributes of `path` (not following a symlink), names and values.
fn xattrs(path: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let p = c_path(path);
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: a buffer of names.len() bytes for llistxattr(2) to fill.
    let n = unsafe { libc::llistxattr(p.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    let mut out = BTreeMap::new();
    if n <= 0 {
        return out;
    }
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cname = CString::new(name).unwrap();
        let mut value = vec![0u8; 64 << 10];
        // SAFETY: as above, for the value.
        let len = unsafe {
            libc::lgetxattr(
                p.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(len >= 0, "lgetxattr {:?}", String::from_utf8_lossy(name));
        value.truncate(len as usize);
        out.insert(name.to_vec(), value);
    }
    out
}

/// Sets the modification time of `path` (not following a symlink) and its access time to an
/// hour ago (newer than the modification and younger than a day, so that reading it under
/// `relatime` leaves it: cp, run first, reads each source too).
fn set_times(path: &Path, secs: i64, nsec: i64) {
    let p = c_path(path);
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 3600;
    let ts = [
        libc::timespec {
            tv_sec: hour_ago,
            tv_nsec: nsec / 2,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: nsec,
        },
    ];
    // SAFETY: a valid path and two timespecs, as utimensat(2) takes them.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            p.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "utimensat {path:?}");
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A tree with what `-a` keeps: hard links (inside a directory and across two), a fifo, a
/// symlink with times of its own, set-id and sticky bits, odd times, xattrs where the
/// filesystem has them and, as root, a device node and files owned by `nobody`.
fn make_archive_tree(src: &Path) -> bool {
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    write_file(&src.join("a"), &pattern(10_000, 1), 0o4755);
    fs::hard_link(src.join("a"), src.join("sub/a-again")).unwrap();
    fs::hard_link(src.join("a"), src.join("sub/deeper/a-third")).unwrap();
    write_file(&src.join("sub/b"), b"b", 0o640);
    write_file(&src.join("empty"), b"", 0o600);
    std::os::unix::fs::symlink("a", src.join("sub/to-a")).unwrap();
    std::os::unix::fs::symlink("nowhere", src.join("dangling")).unwrap();
    let fifo = c_path(&src.join("sub/fifo"));
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o620) }, 0);
    let xattrs = set_xattr(&src.join("a"), "user.note", b"kept")
        && set_xattr(&src.join("sub"), "user.dir", b"too");
    if is_root() {
        let null = c_path(&src.join("null"));
        // SAFETY: a valid path; a character device 1:3 as /dev/null.
        let rc = unsafe { libc::mknod(null.as_ptr(), libc::S_IFCHR | 0o640, libc::makedev(1, 3)) };
        assert_eq!(rc, 0);
        let nobody = c_path(&src.join("sub/b"));
        // SAFETY: a valid path; 65534 is nobody on Debian.
        assert_eq!(unsafe { libc::chown(nobody.as_ptr(), 65534, 65534) }, 0);
        let link = c_path(&src.join("sub/to-a"));
        // SAFETY: as above, on the link itself.
        assert_eq!(unsafe { libc::lchown(link.as_ptr(), 65534, 65534) }, 0);
    }
    fs::create_dir(src.join("sticky")).unwrap();
    chmod(&src.join("sticky"), 0o1777);
    chmod(&src.join("sub/deeper"), 0o2750);
    for (i, rel) in [
        "a", "sub/b", "empty", "sub/to-a", "dangling", "sub/fifo", "sticky",
    ]
    .iter()
    .enumerate()
    {
        set_times(
            &src.join(rel),
            1_000_000_000 + i as i64 * 7777,
            123_456_789 + i as i64,
        );
    }
    // Directories last: filling them moved their times.
    for rel in ["sub/deeper", "sub", ""] {
        set_times(&src.join(rel), 900_000_000, 987_654_321);
    }
    xattrs
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// What one entry of a copied tree is, for comparing two copies.
#[derive(Debug, PartialEq)]
struct Entry {
    kind: String,
    mode: u32,
    owner: (u32, u32),
    mtime: (i64, i64),
    atime: Option<(i64, i64)>,
    rdev: u64,
    content: u64,
    /// The first path (sorted) with the same inode: hard-link groups.
    link_group: PathBuf,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Every entry under `root` by relative path. `times`: whether times are compared (the root
/// directory's own are, too: cp -a sets them).
fn describe(root: &Path, times: bool) -> BTreeMap<PathBuf, Entry> {
    let mut inodes: BTreeMap<u64, PathBuf> = BTreeMap::new();
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let p = if rel.as_os_str().is_empty() {
            root.to_path_buf()
        } else {
            root.join(&rel)
        };
        let m = fs::symlink_metadata(&p).unwrap();
        let t = m.file_type();
        let (kind, content) = if t.is_dir() {
            let mut names: Vec<_> = fs::read_dir(&p)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            todo.extend(names.into_iter().map(|n| rel.join(n)));
            ("dir", 0)
        } else if t.is_symlink() {
            (
                "symlink",
                fnv1a(fs::read_link(&p).unwrap().as_os_str().as_bytes()),
            )
        } else if t.is_file() {
            ("file", fnv1a(&fs::read(&p).unwrap()))
        } else if t.is_fifo() {
            ("fifo", 0)
        } else if t.is_char_device() {
            ("char", 0)
        } else {
            ("other", 0)
        };
        let group = inodes.entry(m.ino()).or_insert_with(|| rel.clone()).clone();
        out.insert(
            rel.clone(),
            Entry {
                kind: kind.into(),
                mode: if t.is_symlink() { 0 } else { m.mode() & 0o7777 },
                owner: (m.uid(), m.gid()),
                mtime: if times {
                    (m.mtime(), m.mtime_nsec())
                } else {
                    (0, 0)
                },
                // Reading a file, directory or link moves its atime under relatime once its
                // ctime (the copy's: when its times were set) is past it, and both tools read
                // what they copy: compared for fifos and devices, which nobody reads.
                atime: (times && (t.is_fifo() || t.is_char_device()))
                    .then(|| (m.atime(), m.atime_nsec())),
                rdev: m.rdev(),
                content,
                link_group: if t.is_dir() { PathBuf::new() } else { group },
                xattrs: xattrs(&p),
            },
        );
    }
    out
}

fn assert_same(cp_tree: &Path, pp_tree: &Path, times: bool, what: &str) {
    let (a, b) = (describe(cp_tree, times), describe(pp_tree, times));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{what}: the entries"
    );
    for (rel, ea) in &a {
        assert_eq!(&b[rel], ea, "{what}: {rel:?} (left pagepipe-cp, right cp)");
    }
}

fn run_both(args: &[&str], src: &Path, t: &TempDir, name: &str) -> (PathBuf, PathBuf) {
    let (c, p) = (t.join(&format!("cp-{name}")), t.join(&format!("pp-{name}")));
    let out = Command::new("cp")
        .args(args)
        .arg(src)
        .arg(&c)
        .output()
        .unwrap();
    assert!(out.status.success(), "cp {args:?}: {}", text(&out.stderr));
    let out = Command::new(BIN)
        .args(args)
        .arg(src)
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pagepipe-cp {args:?}: {}",
        text(&out.stderr)
    );
    assert_eq!(temporaries(&t.0), Vec::<PathBuf>::new());
    (c, p)
}

#[test]
fn archive_copies_as_cp_a_does() {
    let t = TempDir::new("archive");
    let src = t.join("src");
    let xattrs = make_archive_tree(&src);
    if !xattrs {
        eprintln!("NOTE archive_copies_as_cp_a_does: no user xattrs on this filesystem");
    }
    let (c, p) = run_both(&["-a"], &src, &t, "a");
    assert_same(&c, &p, true, "-a");
    // The facts spelled out, so a cp that changed cannot make this pass by itself.
    let (a, again) = (
        fs::metadata(p.join("a")).unwrap(),
        fs::metadata(p.join("sub/a-again")).unwrap(),
    );
    assert_eq!(a.ino(), again.ino(), "hard links kept");
    assert_eq!((a.mtime(), a.mtime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!(a.mode() & 0o7777, 0o4755);
    assert!(fs::symlink_metadata(p.join("sub/fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    if xattrs {
        assert_eq!(self::xattrs(&p.join("a"))[&b"user.note".to_vec()], b"kept");
    }
    // -p on one file; --preserve=links,timestamps on the tree (modes as without -p).
    let (c, p) = run_both(&["-p"], &src.join("a"), &t, "p");
    assert_same(&c, &p, true, "-p");
    let (c, p) = run_both(&["-r", "--preserve=links,timestamps"], &src, &t, "links");
    assert_same(&c, &p, true, "--preserve=links,timestamps");
    let (c, p) = run_both(&["-r", "--preserve=xattr"], &src, &t, "xattr");
    assert_same(&c, &p, false, "--preserve=xattr");
}

/// cp -r without -a makes a fifo (and a device node) anew, splits hard links and keeps no
/// times: pagepipe-cp stopped with exit 1 at the fifo.
#[test]
fn a_tree_with_a_fifo_copies_as_cp_r_does() {
    let t = TempDir::new("fifo-tree");
    let src = t.join("src");
    make_archive_tree(&src);
    let (c, p) = run_both(&["-r"], &src, &t, "r");
    assert_same(&c, &p, false, "-r");
    assert!(fs::symlink_metadata(p.join("sub/fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
}
