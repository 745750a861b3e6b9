//! The command line: `pagepipe-cp [OPTIONS] SRC... DST` (clap).

use clap::Parser;
use pagepipe_dontcache::Mode;
use std::path::PathBuf;

/// Copy files without filling the page cache (pagepipe-dontcache).
#[derive(Parser, Debug)]
#[command(
    name = "pagepipe-cp",
    version,
    about,
    long_about = None,
    override_usage = "pagepipe-cp [OPTIONS] SRC... DST"
)]
pub(crate) struct Args {
    /// Copy directories recursively (symlinks inside are copied as symlinks, fifos and device
    /// nodes made anew, as cp -R does).
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub(crate) recursive: bool,
    /// Same as -dR --preserve=all: an archive of the tree, links and specials as they are.
    #[arg(short = 'a', long = "archive")]
    pub(crate) archive: bool,
    /// Same as --no-dereference --preserve=links.
    #[arg(short = 'd')]
    pub(crate) no_deref_links: bool,
    /// Never follow symlinks in SRC (copy them as symlinks).
    #[arg(short = 'P', long = "no-dereference", overrides_with = "dereference")]
    pub(crate) no_dereference: bool,
    /// Always follow symlinks in SRC.
    #[arg(short = 'L', long = "dereference", overrides_with = "no_dereference")]
    pub(crate) dereference: bool,
    /// Same as --preserve=mode,ownership,timestamps.
    #[arg(short = 'p')]
    pub(crate) preserve_default: bool,
    /// Keep the given attributes: mode, ownership, timestamps, links, xattr, context (not
    /// supported: ignored under `all`), all. Without a list: mode,ownership,timestamps.
    #[arg(
        long,
        value_name = "ATTR_LIST",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "mode,ownership,timestamps",
        action = clap::ArgAction::Append
    )]
    pub(crate) preserve: Vec<String>,
    /// Do not keep the given attributes (applied after --preserve, -p and -a).
    #[arg(long, value_name = "ATTR_LIST", action = clap::ArgAction::Append)]
    pub(crate) no_preserve: Vec<String>,
    /// How to keep data out of the page cache: RWF_DONTCACHE where the filesystem has it
    /// (auto), insist on it (kernel), or pagepipe's userspace flusher (fallback).
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) mode: CliMode,
    /// Bound on dirty data in flight per file in fallback mode (suffix K, M or G).
    #[arg(long, value_parser = parse_size, default_value = "32M")]
    pub(crate) window: u64,
    /// Read each copy back (without caching it) and compare its xxh3-128 checksum with that of
    /// the data read from the source; a mismatch is an error and the copy is removed.
    #[arg(long)]
    pub(crate) verify: bool,
    /// Print each file as it is copied.
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Print nothing but errors (no summary).
    #[arg(short, long)]
    pub(crate) quiet: bool,
    /// Sources (`-` is standard input), then the destination.
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
}

/// What a copy keeps of its source besides the bytes (`--preserve`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Preserve {
    /// Permission bits, set-id and sticky bits, and ACLs.
    pub(crate) mode: bool,
    /// Owner and group (refused to an unprivileged user without a word, as in cp).
    pub(crate) ownership: bool,
    /// Access and modification times.
    pub(crate) timestamps: bool,
    /// Hard links among the sources: files linked together are copied linked together.
    pub(crate) links: bool,
    /// Extended attributes (ACLs go with `mode`).
    pub(crate) xattr: bool,
    /// Whether xattr was named, not only implied by `all`: a failure to keep one is then an
    /// error (under `all`, cp is silent about attributes the filesystem cannot hold).
    pub(crate) xattr_required: bool,
}

impl Preserve {
    /// Applies one `--preserve` (`keep`) or `--no-preserve` list.
    ///
    /// # Errors
    /// A message naming an attribute that does not exist.
    fn apply(&mut self, list: &str, keep: bool) -> Result<(), String> {
        for attr in list.split(',') {
            match attr {
                "mode" => self.mode = keep,
                "ownership" => self.ownership = keep,
                "timestamps" => self.timestamps = keep,
                "links" => self.links = keep,
                "xattr" => {
                    self.xattr = keep;
                    self.xattr_required = keep;
                }
                // SELinux contexts: pagepipe-cp does not copy them (listed in the README).
                "context" if !keep => {}
                "context" => {
                    return Err("--preserve=context is not supported by pagepipe-cp \
                        (SELinux contexts are not copied)"
                        .into())
                }
                "all" => {
                    let required = self.xattr_required && keep;
                    *self = Preserve {
                        mode: keep,
                        ownership: keep,
                        timestamps: keep,
                        links: keep,
                        xattr: keep,
                        xattr_required: required,
                    };
                }
                other => {
                    return Err(format!(
                        "invalid attribute '{other}' (valid: mode, ownership, timestamps, links, \
                         context, xattr, all)"
                    ))
                }
            }
        }
        Ok(())
    }

    /// Whether anything besides links is kept.
    pub(crate) fn any_metadata(&self) -> bool {
        self.mode || self.ownership || self.timestamps || self.xattr
    }
}

/// The command line resolved: cp's options that imply others, spelled out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resolved {
    pub(crate) recursive: bool,
    /// Whether symlinks among the sources are followed: `-L`, or by default without `-r`.
    pub(crate) follow_top: bool,
    /// Whether symlinks inside a tree are followed (`-L` only).
    pub(crate) follow_inside: bool,
    pub(crate) preserve: Preserve,
}

impl Args {
    /// What the options mean together, as cp reads them: `-a` is `-dR --preserve=all`, `-d`
    /// is `-P --preserve=links`, `-p` is `--preserve=mode,ownership,timestamps`, then every
    /// `--preserve` and last every `--no-preserve`.
    ///
    /// # Errors
    /// A message for an attribute list that names an unknown attribute.
    pub(crate) fn resolve(&self) -> Result<Resolved, String> {
        let mut preserve = Preserve::default();
        if self.archive {
            preserve.apply("all", true)?;
        }
        if self.no_deref_links {
            preserve.links = true;
        }
        if self.preserve_default {
            preserve.apply("mode,ownership,timestamps", true)?;
        }
        for list in &self.preserve {
            preserve.apply(list, true)?;
        }
        for list in &self.no_preserve {
            preserve.apply(list, false)?;
        }
        let recursive = self.recursive || self.archive;
        let no_deref = self.no_dereference || self.no_deref_links || self.archive;
        let follow_top = self.dereference || (!recursive && !no_deref);
        Ok(Resolved {
            recursive,
            follow_top,
            follow_inside: self.dereference && !self.no_dereference,
            preserve,
        })
    }
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CliMode {
    /// RWF_DONTCACHE where the file supports it, else the fallback.
    Auto,
    /// RWF_DONTCACHE only; a file without it is an error.
    Kernel,
    /// pagepipe's flusher thread and POSIX_FADV_DONTNEED, never RWF_DONTCACHE.
    Fallback,
}

impl From<CliMode> for Mode {
    fn from(m: CliMode) -> Mode {
        match m {
            CliMode::Auto => Mode::Auto,
            CliMode::Kernel => Mode::Kernel,
            CliMode::Fallback => Mode::Fallback,
        }
    }
}

/// Parses `123`, `64K`, `32M`, `1G`.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = num
        .parse()
        .map_err(|e| format!("bad size {s:?}: {e} (use e.g. 8M)"))?;
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("32M"), Ok(32 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn arguments_parse_like_cp() {
        let a = Args::try_parse_from(["pagepipe-cp", "-r", "--verify", "a", "b", "dst"]).unwrap();
        assert!(a.recursive && a.verify);
        assert_eq!(a.paths.len(), 3);
        assert!(
            Args::try_parse_from(["pagepipe-cp", "-R", "a", "b"])
                .unwrap()
                .recursive
        );
        assert!(Args::try_parse_from(["pagepipe-cp", "only-one"]).is_err());
        let a = Args::try_parse_from(["pagepipe-cp", "--mode", "fallback", "-", "out"]).unwrap();
        assert_eq!(Mode::from(a.mode), Mode::Fallback);
    }

    fn resolved(args: &[&str]) -> Result<Resolved, String> {
        let mut all = vec!["pagepipe-cp"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["a", "b"]);
        Args::try_parse_from(all).unwrap().resolve()
    }

    #[test]
    fn preserve_options_combine_as_in_cp() {
        let p = resolved(&["-p"]).unwrap().preserve;
        assert!(p.mode && p.ownership && p.timestamps && !p.links && !p.xattr);
        let a = resolved(&["-a"]).unwrap();
        assert!(a.recursive && !a.follow_top && !a.follow_inside);
        let p = a.preserve;
        assert!(p.mode && p.ownership && p.timestamps && p.links && p.xattr);
        assert!(
            !p.xattr_required,
            "-a is silent about xattrs a filesystem cannot hold"
        );
        let p = resolved(&["-a", "--no-preserve=mode,links"])
            .unwrap()
            .preserve;
        assert!(!p.mode && !p.links && p.ownership);
        let p = resolved(&["--preserve=xattr", "--preserve"])
            .unwrap()
            .preserve;
        assert!(p.xattr && p.xattr_required && p.mode && !p.links);
        let d = resolved(&["-d"]).unwrap();
        assert!(d.preserve.links && !d.follow_top && !d.recursive);
        assert!(resolved(&[]).unwrap().follow_top);
        assert!(!resolved(&["-r"]).unwrap().follow_top);
        assert!(resolved(&["-rL"]).unwrap().follow_inside);
        assert!(resolved(&["--preserve=bogus"]).is_err());
        assert!(resolved(&["--preserve=context"]).is_err());
        assert!(resolved(&["-a", "--no-preserve=context"]).is_ok());
    }
}
