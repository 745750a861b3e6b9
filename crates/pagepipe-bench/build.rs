//! Records the git commit the benchmark binary is built from (`PAGEPIPE_BENCH_COMMIT`), so every
//! table and JSON record can say what produced it. Outside a git checkout (a crate tarball) the
//! variable is not set and the binary reports its crate version instead.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    // Rebuild when the sources, the checked-out commit or the index change.
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=../pagepipe/src");
    for path in ["HEAD", "index"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    // Dirty means the code differs from the commit: this crate, the library or the workspace
    // manifests (an edited README does not change what the binary measures).
    let code = [".", "../pagepipe", "../../Cargo.toml", "../../Cargo.lock"];
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(code);
    let dirty = git(&status).is_some_and(|s| !s.is_empty());
    let suffix = if dirty { "+dirty" } else { "" };
    println!("cargo:rustc-env=PAGEPIPE_BENCH_COMMIT={commit}{suffix}");
}
