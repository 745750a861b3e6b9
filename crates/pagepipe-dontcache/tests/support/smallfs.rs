//! A small filesystem mounted for one test (tmpfs, or a loop-mounted ext4 image), and a
//! thin-provisioned one whose disk can be made to fail writeback on demand ([`ThinFs`]), shared
//! by the tests of `pagepipe-dontcache` and `pagepipe-cp` (`#[path]`-included: not a test of its
//! own). Mounting needs root; where it is forbidden the constructors say why, and the tests skip.
#![allow(dead_code)] // each test file uses what it needs

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh path under the temp dir, unique in this process.
fn temp_path(what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "pagepipe-smallfs-{what}-{}-{n}",
        std::process::id()
    ))
}

/// A small filesystem mounted for one test, unmounted (and its mount point removed) on drop.
pub struct SmallFs {
    /// The mount point.
    pub dir: PathBuf,
    image: Option<PathBuf>,
}

impl SmallFs {
    /// [`SmallFs::tmpfs`], or `None` after printing `SKIPPED {test}: ...` with the reason.
    pub fn tmpfs_or_skip(test: &str) -> Option<SmallFs> {
        skip_unless(SmallFs::tmpfs(), test, "mount a tmpfs")
    }

    /// [`SmallFs::ext4`], or `None` after printing `SKIPPED {test}: ...` with the reason.
    pub fn ext4_or_skip(test: &str) -> Option<SmallFs> {
        skip_unless(SmallFs::ext4(), test, "loop-mount an ext4 image")
    }

    /// Mounts a tmpfs of 8 MiB, or says why it cannot (mounting forbidden, not root).
    pub fn tmpfs() -> Result<SmallFs, String> {
        let dir = temp_path("tmpfs-mnt");
        std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(&dir)
            .output();
        SmallFs::mounted(dir, None, out)
    }

    /// [`SmallFs::ext4_with`] these mount options, or `None` after printing `SKIPPED {test}: ...`.
    pub fn ext4_with_or_skip(options: &str, test: &str) -> Option<SmallFs> {
        skip_unless(
            SmallFs::ext4_with(options),
            test,
            "loop-mount an ext4 image",
        )
    }

    /// Makes a 16 MiB ext4 image with mkfs.ext4 (e2fsprogs) and loop-mounts it.
    pub fn ext4() -> Result<SmallFs, String> {
        SmallFs::ext4_with("")
    }

    /// [`SmallFs::ext4`], mounted with `options` too (`-o loop,OPTIONS`).
    pub fn ext4_with(options: &str) -> Result<SmallFs, String> {
        let image = temp_path("ext4-img");
        let f = File::create(&image).map_err(|e| e.to_string())?;
        f.set_len(16 << 20).map_err(|e| e.to_string())?;
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&image)
            .output();
        match mkfs {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                let _ = std::fs::remove_file(&image);
                return Err(format!(
                    "mkfs.ext4 failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            Err(e) => {
                let _ = std::fs::remove_file(&image);
                return Err(format!("mkfs.ext4 not runnable (install e2fsprogs): {e}"));
            }
        }
        let dir = temp_path("ext4-mnt");
        std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
        let options = match options {
            "" => "loop".to_string(),
            more => format!("loop,{more}"),
        };
        let out = Command::new("mount")
            .args(["-o", &options])
            .arg(&image)
            .arg(&dir)
            .output();
        SmallFs::mounted(dir, Some(image), out)
    }

    fn mounted(
        dir: PathBuf,
        image: Option<PathBuf>,
        out: io::Result<std::process::Output>,
    ) -> Result<SmallFs, String> {
        let fs = SmallFs { dir, image };
        match out {
            Ok(o) if o.status.success() => Ok(fs),
            Ok(o) => {
                let why = format!(
                    "mount failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                fs.cleanup(false);
                Err(why)
            }
            Err(e) => {
                fs.cleanup(false);
                Err(format!("mount not runnable: {e}"))
            }
        }
    }

    fn cleanup(&self, mounted: bool) {
        if mounted {
            // Retry briefly, then detach lazily: a mount must never outlive the test.
            let unmounted = (0..20).any(|_| {
                let ok = Command::new("umount")
                    .arg(&self.dir)
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                ok
            });
            if !unmounted {
                let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
        if let Some(image) = &self.image {
            let _ = std::fs::remove_file(image);
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        self.cleanup(true);
    }
}

/// The filesystem `made`, or `None` after saying which test skips and why.
fn skip_unless(made: Result<SmallFs, String>, test: &str, what: &str) -> Option<SmallFs> {
    match made {
        Ok(fs) => Some(fs),
        Err(why) => {
            println!("SKIPPED {test}: cannot {what} here ({why})");
            None
        }
    }
}

/// A thin-provisioned disk: an ext4 filesystem (no journal, `errors=continue`) of 256 MiB on a
/// loop device whose backing file is sparse, in a tmpfs of 64 MiB. The ext4 believes it has
/// room; once [`ThinFs::exhaust`] has filled the tmpfs, every block the ext4 writes for the first
/// time fails in the loop device: writes into the page cache succeed, their writeback fails
/// (`ENOSPC`, as from a thin pool out of space), and the kernel records the error for the file.
/// No journal, so that the failed metadata writes do not abort the filesystem.
pub struct ThinFs {
    /// The ext4's mount point.
    pub dir: PathBuf,
    /// The ext4, unmounted first (fields drop in order), then the loop device goes with it.
    ext4: SmallFs,
    /// The tmpfs holding the backing image.
    backing: SmallFs,
}

impl ThinFs {
    /// [`ThinFs::new`], or `None` after printing `SKIPPED {test}: ...` with the reason.
    pub fn or_skip(test: &str) -> Option<ThinFs> {
        match ThinFs::new() {
            Ok(fs) => Some(fs),
            Err(why) => {
                println!("SKIPPED {test}: cannot make a thin-provisioned loop device here ({why})");
                None
            }
        }
    }

    /// Mounts the tmpfs, makes the sparse image and its ext4, loop-mounts it.
    pub fn new() -> Result<ThinFs, String> {
        let dir = temp_path("thin-back");
        std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
            .arg(&dir)
            .output();
        let backing = SmallFs::mounted(dir, None, out)?;
        let image = backing.dir.join("image");
        let f = File::create(&image).map_err(|e| e.to_string())?;
        f.set_len(256 << 20).map_err(|e| e.to_string())?;
        let mkfs = Command::new("mkfs.ext4")
            .args([
                "-q",
                "-F",
                "-O",
                "^has_journal",
                "-E",
                "nodiscard,lazy_itable_init=0",
            ])
            .arg(&image)
            .output();
        match mkfs {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(format!(
                    "mkfs.ext4 failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ))
            }
            Err(e) => return Err(format!("mkfs.ext4 not runnable (install e2fsprogs): {e}")),
        }
        let dir = temp_path("thin-mnt");
        std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-o", "loop,errors=continue"])
            .arg(&image)
            .arg(&dir)
            .output();
        let ext4 = SmallFs::mounted(dir, None, out)?;
        Ok(ThinFs {
            dir: ext4.dir.clone(),
            ext4,
            backing,
        })
    }

    /// Fills the backing tmpfs: from now on the ext4's writeback of new blocks fails.
    pub fn exhaust(&self) {
        let mut f = File::create(self.backing.dir.join("filler")).unwrap();
        let block = vec![0u8; 1 << 20];
        loop {
            if let Err(e) = io::Write::write_all(&mut f, &block) {
                assert_eq!(
                    e.raw_os_error(),
                    Some(libc::ENOSPC),
                    "filling the tmpfs: {e}"
                );
                return;
            }
        }
    }

    /// Frees the backing tmpfs again: writeback works from now on.
    pub fn replenish(&self) {
        std::fs::remove_file(self.backing.dir.join("filler")).unwrap();
    }
}
