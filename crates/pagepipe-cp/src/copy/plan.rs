//! `SRC... DST` paired as cp pairs them and the bytes to copy (for the progress bar), with the
//! error and path helpers every step of a copy uses.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Adds the path to an error's message, keeping its kind.
pub(super) fn ctx(what: impl fmt::Display) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

pub(super) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

pub(super) fn is_stdin(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// The name `src` gets inside a destination directory.
fn name_of(src: &Path) -> io::Result<PathBuf> {
    if let Some(name) = src.file_name() {
        return Ok(PathBuf::from(name));
    }
    let abs =
        fs::canonicalize(src).map_err(ctx(format_args!("cannot stat '{}'", src.display())))?;
    abs.file_name().map(PathBuf::from).ok_or_else(|| {
        invalid(format!(
            "cannot copy '{}': it has no name to give the copy",
            src.display()
        ))
    })
}

/// Whether `src` ends in `/.` or is `.`: a directory's contents, to cp (`Path::file_name`
/// drops that last component).
fn names_contents(src: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let bytes = src.as_os_str().as_bytes();
    bytes == b"." || bytes.ends_with(b"/.")
}

/// Pairs every source with its destination path, following cp's rules.
pub(super) fn plan(srcs: &[PathBuf], dst: &Path) -> io::Result<Vec<(PathBuf, PathBuf)>> {
    if is_stdin(dst) {
        return Err(invalid(
            "DST '-': writing to standard output is not supported; name a file".into(),
        ));
    }
    if srcs.iter().filter(|s| is_stdin(s)).count() > 1 {
        return Err(invalid(
            "'-' (standard input) is given more than once".into(),
        ));
    }
    let dst_is_dir = fs::metadata(dst).is_ok_and(|m| m.is_dir());
    if srcs.len() > 1 && !dst_is_dir {
        return Err(invalid(format!(
            "target '{}' is not a directory (needed for {} sources)",
            dst.display(),
            srcs.len()
        )));
    }
    srcs.iter()
        .map(|src| {
            // cp: `SRC/.` (and `.`) names a directory's contents, which go into DST itself.
            if !dst_is_dir || names_contents(src) {
                return Ok((src.clone(), dst.to_path_buf()));
            }
            if is_stdin(src) {
                return Err(invalid(format!(
                    "cannot copy standard input into directory '{}': give the file's path as DST",
                    dst.display()
                )));
            }
            Ok((src.clone(), dst.join(name_of(src)?)))
        })
        .collect()
}

/// Bytes of regular files under `src` (for the progress bar; errors count as 0, the copy reports
/// them).
pub(super) fn total_size(src: &Path, recursive: bool) -> u64 {
    let meta = if recursive {
        fs::symlink_metadata(src)
    } else {
        fs::metadata(src)
    };
    match meta {
        Ok(m) if m.is_file() => m.len(),
        Ok(m) if m.is_dir() && recursive => fs::read_dir(src)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| total_size(&e.path(), true))
                    .sum()
            })
            .unwrap_or(0),
        _ => 0,
    }
}

/// The directory holding `path` (`.` for a bare name).
pub(super) fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_follows_cp() {
        let dir = std::env::temp_dir().join(format!("pagepipe-cp-plan-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = |s: &str| PathBuf::from(s);
        // One source, DST not a directory: DST is the new name.
        let missing = dir.join("new");
        assert_eq!(
            plan(&[p("a/x")], &missing).unwrap(),
            vec![(p("a/x"), missing)]
        );
        // DST a directory: copy into it, under the source's name.
        assert_eq!(
            plan(&[p("a/x"), p("y/")], &dir).unwrap(),
            vec![(p("a/x"), dir.join("x")), (p("y/"), dir.join("y"))]
        );
        // Several sources need a directory.
        let e = plan(&[p("a"), p("b")], &dir.join("new")).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        // stdin needs a file name; only once; never to stdout.
        assert!(plan(&[p("-")], &dir).is_err());
        assert!(plan(&[p("-"), p("-")], &dir).is_err());
        assert!(plan(&[p("a")], Path::new("-")).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
