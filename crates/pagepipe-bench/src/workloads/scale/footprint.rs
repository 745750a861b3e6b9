//! What this process holds right now, read from `/proc` and its memory cgroup: descriptors,
//! address space, resident memory, and the memory (user and kernel) charged to its cgroup.

use std::fs;
use std::io;

/// A snapshot of what the process holds. Kernel-side memory (pipe buffers, inodes, files,
/// page tables) shows in no per-process counter; the memory cgroup's charge is the only place
/// it can be read, and it counts every process of the cgroup.
#[derive(Clone, Copy, Debug, Default)]
pub struct Footprint {
    /// Open descriptors (entries of `/proc/self/fd`).
    pub fds: f64,
    /// Address space, KiB (`VmSize`).
    pub vm_kib: f64,
    /// Resident memory, KiB (`VmRSS`; shared pages count once per mapping).
    pub rss_kib: f64,
    /// The shared-memory part of `rss_kib`, KiB (`RssShmem`).
    pub shmem_kib: f64,
    /// The anonymous part of `rss_kib`, KiB (`RssAnon`): the heap's pages among it.
    pub anon_kib: f64,
    /// Bytes the allocator hands out now, KiB (glibc's `mallinfo2()`, every arena: `uordblks`
    /// and the chunks it mapped on their own, `hblkhd`),
    /// or `None` without glibc. Unlike `anon_kib` it does not depend on whether freed memory
    /// was there to reuse.
    pub heap_kib: Option<f64>,
    /// Proportional set size, KiB (`Pss` of `/proc/self/smaps_rollup`): a page mapped twice
    /// counts once.
    pub pss_kib: f64,
    /// The memory cgroup's charge, KiB: every page once, user and kernel (`None` without a
    /// readable memory cgroup).
    pub memcg_kib: Option<f64>,
    /// The kernel-memory part of `memcg_kib`, KiB.
    pub memcg_kernel_kib: Option<f64>,
}

impl Footprint {
    /// The process's footprint now.
    ///
    /// # Errors
    /// `/proc/self` cannot be read, or lacks a field (`InvalidData`).
    pub fn now() -> io::Result<Footprint> {
        let status = fs::read_to_string("/proc/self/status")?;
        let rollup = fs::read_to_string("/proc/self/smaps_rollup")?;
        let memcg = memcg_kib();
        Ok(Footprint {
            fds: fs::read_dir("/proc/self/fd")?.count() as f64,
            vm_kib: field_kib(&status, "VmSize")?,
            rss_kib: field_kib(&status, "VmRSS")?,
            shmem_kib: field_kib(&status, "RssShmem")?,
            anon_kib: field_kib(&status, "RssAnon")?,
            heap_kib: heap_kib(),
            pss_kib: field_kib(&rollup, "Pss")?,
            memcg_kib: memcg.map(|m| m.0),
            memcg_kernel_kib: memcg.map(|m| m.1),
        })
    }

    /// What each of `n` things made between `before` and this took, on average.
    pub fn per(self, before: Footprint, n: usize) -> Footprint {
        let n = n.max(1) as f64;
        let d = |after: f64, before: f64| (after - before) / n;
        let opt = |a: Option<f64>, b: Option<f64>| Some(d(a?, b?));
        Footprint {
            fds: d(self.fds, before.fds),
            vm_kib: d(self.vm_kib, before.vm_kib),
            rss_kib: d(self.rss_kib, before.rss_kib),
            shmem_kib: d(self.shmem_kib, before.shmem_kib),
            anon_kib: d(self.anon_kib, before.anon_kib),
            heap_kib: opt(self.heap_kib, before.heap_kib),
            pss_kib: d(self.pss_kib, before.pss_kib),
            memcg_kib: opt(self.memcg_kib, before.memcg_kib),
            memcg_kernel_kib: opt(self.memcg_kernel_kib, before.memcg_kernel_kib),
        }
    }
}

impl Footprint {
    /// What the memory cgroup charged, with the heap counted by what the allocator hands out
    /// instead of by the pages it touched: `memcg - anon + heap`, KiB (`None` without a memory
    /// cgroup or glibc). Between two snapshots of one process this is what was made in between
    /// costs, whether or not the heap had freed memory to reuse (a process that held and
    /// dropped as many pipes before would otherwise show their heap as free).
    pub fn memory_kib(&self) -> Option<f64> {
        Some(self.memcg_kib? - self.anon_kib + self.heap_kib?)
    }
}

/// [`Footprint::heap_kib`].
fn heap_kib() -> Option<f64> {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let info = unsafe { libc::mallinfo2() };
        Some((info.uordblks + info.hblkhd) as f64 / 1024.0) // small chunks, mmapped ones
    }
    #[cfg(not(target_env = "gnu"))]
    {
        None
    }
}

/// The value of a `Name:   123 kB` line.
fn field_kib(text: &str, name: &str) -> io::Result<f64> {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k == name).then(|| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())?
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no {name} in /proc/self"),
            )
        })
}

/// The memory cgroup's (all, kernel) charge in KiB: cgroup v1's `memory.usage_in_bytes` and
/// `memory.kmem.usage_in_bytes`, or v2's `memory.current` and `kernel` of `memory.stat`.
fn memcg_kib() -> Option<(f64, f64)> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path_of = |wanted: &dyn Fn(&str) -> bool| {
        cgroups.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            wanted(controllers).then(|| path.to_string())
        })
    };
    let number = |file: String| fs::read_to_string(file).ok()?.trim().parse::<f64>().ok();
    if let Some(path) = path_of(&|c| c.split(',').any(|c| c == "memory")) {
        let dir = format!("/sys/fs/cgroup/memory{path}");
        let all = number(format!("{dir}/memory.usage_in_bytes"))?;
        let kernel = number(format!("{dir}/memory.kmem.usage_in_bytes"))?;
        return Some((all / 1024.0, kernel / 1024.0));
    }
    let dir = format!("/sys/fs/cgroup{}", path_of(&|c| c.is_empty())?);
    let all = number(format!("{dir}/memory.current"))?;
    let stat = fs::read_to_string(format!("{dir}/memory.stat")).ok()?;
    let kernel = stat.lines().find_map(|l| l.strip_prefix("kernel "))?;
    Some((all / 1024.0, kernel.trim().parse::<f64>().ok()? / 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse_and_a_missing_one_is_named() {
        let text = "Name:\tx\nVmSize:\t  123456 kB\nPss:   77 kB\n";
        assert_eq!(field_kib(text, "VmSize").unwrap(), 123_456.0);
        assert_eq!(field_kib(text, "Pss").unwrap(), 77.0);
        let e = field_kib(text, "VmRSS").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("VmRSS"), "{e}");
    }

    #[test]
    fn this_process_has_a_footprint() {
        let f = Footprint::now().unwrap();
        assert!(f.fds >= 3.0 && f.vm_kib > 0.0 && f.rss_kib > 0.0 && f.pss_kib > 0.0);
        assert!(f.anon_kib > 0.0);
        #[cfg(target_env = "gnu")]
        {
            let before = Footprint::now().unwrap();
            // 64 MiB: far above what the other tests of this binary allocate meanwhile.
            let block = vec![1u8; 64 << 20];
            let after = Footprint::now().unwrap();
            let grew = after.heap_kib.unwrap() - before.heap_kib.unwrap();
            let mib = grew / 1024.0;
            assert!((60.0..68.0).contains(&mib), "{mib} MiB for a 64 MiB block");
            drop(block);
        }
        let per = f.per(Footprint::default(), 2);
        assert_eq!(per.vm_kib, f.vm_kib / 2.0);
    }
}
