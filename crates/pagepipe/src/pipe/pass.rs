//! Handing an end to another process: over a Unix socket (`SCM_RIGHTS`) or to a child program
//! (inherited descriptors named by an environment variable). An end travels as two
//! descriptors: the region's memory file, through a description made for the journey (the
//! sender's own may hold its process key's lock, see `Region::key_description`), and this
//! end's descriptor of the signal pipe. Every way out exposes the pipe first
//! (`pipe::end::expose`), which makes the sender's key real: the receiver will read lock words
//! naming it.

use crate::error::{invalid, needs_proc};
use crate::pipe::create;
use crate::pipe::end::{expose, End};
use crate::pipe::notify::{NotificationReader, Notifier};
use crate::pipe::reader::Reader;
use crate::pipe::writer::Writer;
use crate::region::{Region, Side};
use crate::sync::Arc;
use crate::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The message that carries an end: a tag and the side.
const TAG: &[u8; 6] = b"PPEND2";

impl End {
    /// The descriptors an end travels as: a fresh description of the memory file (kept open
    /// by the caller until the end has left), and the signal pipe's.
    fn travel_fds(&self) -> io::Result<(OwnedFd, [RawFd; 2])> {
        let memfd = sys::fd::reopen(self.shared.region.memfd()?)
            .map_err(|e| needs_proc(e, "sending an end"))?;
        let fds = [memfd.as_raw_fd(), self.signal_now()?.as_raw_fd()];
        Ok((memfd, fds))
    }

    /// Descriptors that carry a clone of this end: a fresh description of the memory file and
    /// a duplicate of the signal pipe's end.
    fn to_fds(&self) -> io::Result<[OwnedFd; 2]> {
        expose(&self.shared)?;
        let memfd = sys::fd::reopen(self.shared.region.memfd()?)
            .map_err(|e| needs_proc(e, "an end's descriptors"))?;
        let signal = self.signal_now()?.try_clone_to_owned()?;
        Ok([memfd, signal])
    }

    fn send_to(&self, sock: &UnixStream) -> io::Result<()> {
        let mut msg = [0u8; 7];
        msg[..6].copy_from_slice(TAG);
        msg[6] = self.side().index() as u8;
        expose(&self.shared)?;
        let (_journey, fds) = self.travel_fds()?;
        sys::net::send_fds(sock.as_fd(), &msg, &fds)
    }

    fn recv_from(sock: &UnixStream, side: Side) -> io::Result<End> {
        let mut msg = [0u8; 16];
        let (n, fds) = sys::net::recv_fds(sock.as_fd(), &mut msg, 2)?;
        if n == 0 && fds.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the socket closed before a pipe end arrived",
            ));
        }
        if n != 7 || &msg[..6] != TAG {
            return Err(invalid(format!(
                "received a message of {n} bytes that is not a pagepipe end"
            )));
        }
        if usize::from(msg[6]) != side.index() {
            return Err(invalid(format!(
                "received a pagepipe {} where a {} was expected",
                side.other().name(),
                side.name()
            )));
        }
        let Ok([memfd, signal]) = <[OwnedFd; 2]>::try_from(fds) else {
            return Err(invalid("a pagepipe end carries two descriptors"));
        };
        End::attach(memfd, signal, side)
    }

    /// Checks the signal descriptor, maps a received region and makes this process's end. (The
    /// sender may keep the description it sent: our key's lock will live on one of our own,
    /// see `Region::key_description`.)
    fn attach(memfd: OwnedFd, signal: OwnedFd, side: Side) -> io::Result<End> {
        check_signal(signal.as_fd(), side)?;
        let region = Region::attach(memfd)?;
        // Exposed at birth, before the registry (and so the idle trimmer or `shrink()`) can
        // reach it and take a side: its key is real from the start.
        let shared = create::open(region, true);
        shared.note_signal();
        Ok(End::new(shared, side, Some(signal)))
    }

    fn pass_to(self: &Arc<End>, cmd: &mut Command, var: &str) -> io::Result<()> {
        if var.is_empty() || var.contains(['=', '\0']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{var:?} is not a valid environment variable name"),
            ));
        }
        expose(&self.shared)?;
        let (journey, fds) = self.travel_fds()?;
        let [m, signal] = fds;
        cmd.env(var, format!("pagepipe:{}:{m}:{signal}", self.side().name()));
        let keep = (self.clone(), journey);
        // SAFETY: the closure runs in the child between fork and exec; it calls only fcntl
        // (async-signal-safe) and allocates nothing. `keep` holds the descriptors open in the
        // parent until the Command is dropped, so the numbers name them at spawn time.
        unsafe {
            cmd.pre_exec(move || {
                let _ = &keep;
                fds.iter().try_for_each(|&fd| sys::fd::clear_cloexec(fd))
            })
        };
        Ok(())
    }

    fn from_env(var: &str, side: Side) -> io::Result<End> {
        static TAKEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let value = std::env::var(var).map_err(|e| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("environment variable {var}: {e}"),
            )
        })?;
        let fds = parse_env(&value, side).ok_or_else(|| {
            invalid(format!(
                "{var}={value:?} does not name a pagepipe {}",
                side.name()
            ))
        })?;
        let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        if taken.iter().any(|v| v == var) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("the pipe end in {var} was already taken by this process"),
            ));
        }
        if !fds.iter().all(|&fd| sys::fd::fd_is_open(fd)) {
            return Err(invalid(format!(
                "{var}={value:?} names descriptors this process does not have (not inherited?)"
            )));
        }
        // SAFETY: the numbers are open descriptors (checked above), only borrowed for the checks.
        let [m, signal] = fds.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
        check_signal(signal, side)?;
        sys::memfd::memfd_info(m)?;
        taken.push(var.to_string());
        // SAFETY: the descriptors were inherited for us (pass_to set the variable and cleared
        // close-on-exec on exactly these), and TAKEN makes this the only owner.
        let [memfd, signal] = fds.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        for fd in [&memfd, &signal] {
            sys::fd::set_cloexec(fd.as_fd())?;
        }
        End::attach(memfd, signal, side)
    }
}

/// Parses `pagepipe:<side>:<memfd>:<signal pipe fd>`.
fn parse_env(value: &str, side: Side) -> Option<[RawFd; 2]> {
    let mut parts = value.split(':');
    if parts.next()? != "pagepipe" || parts.next()? != side.name() {
        return None;
    }
    let mut fds = [0; 2];
    for fd in &mut fds {
        *fd = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(fds)
}

/// Checks that `fd` is the right end of a kernel pipe for `side`: write ends for a writer.
fn check_signal(fd: BorrowedFd<'_>, side: Side) -> io::Result<()> {
    match sys::pipe::pipe_end_kind(fd)? {
        Some(is_write) if is_write == (side == Side::Write) => Ok(()),
        Some(_) => Err(invalid(format!(
            "a signal descriptor of the end is the wrong end of its pipe for a {}",
            side.name()
        ))),
        None => Err(invalid("a signal descriptor of the end is not a pipe")),
    }
}

/// An end received for a [`Writer`] or [`Reader`]: a data pipe's.
fn data_pipe(end: End) -> io::Result<End> {
    if end.shared.config().notes != 0 {
        return Err(invalid(format!(
            "received the {} of a notification pipe, not a data pipe's",
            end.side.name()
        )));
    }
    Ok(end)
}

/// An end received for a [`Notifier`] or [`NotificationReader`]: a notification pipe's.
fn notification_pipe(end: End) -> io::Result<End> {
    if end.shared.config().notes == 0 {
        return Err(invalid(format!(
            "received the {} of a data pipe, not a notification pipe's",
            end.side.name()
        )));
    }
    Ok(end)
}

macro_rules! passing {
    ($end:ident, $side:expr, $name:literal, $check:ident, $recv_example:literal) => {
        impl $end {
            #[doc = concat!("Sends a clone of this ", $name, " over a Unix socket (`SCM_RIGHTS`); the")]
            #[doc = concat!("receiving process gets it with [`", stringify!($end), "::recv_from`]. This")]
            /// process keeps its own handle.
            ///
            /// # Examples
            #[doc = concat!("See [`", stringify!($end), "::recv_from`], and `examples/socket.rs`.")]
            ///
            /// # Errors
            /// The socket's error if sending fails.
            pub fn send_to(&self, sock: &UnixStream) -> io::Result<()> {
                self.end.send_to(sock)
            }

            #[doc = concat!("Receives a ", $name, " sent with `send_to`, mapping and validating its")]
            /// shared region before returning it.
            ///
            /// # Errors
            /// [`io::ErrorKind::InvalidData`] saying what was wrong when the message is not a
            /// pagepipe end (wrong descriptors, size, magic or version, or the other end of the
            /// pipe); [`io::ErrorKind::UnexpectedEof`] if the socket closed; the socket's error.
            ///
            /// # Examples
            ///
            /// ```
            #[doc = $recv_example]
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn recv_from(sock: &UnixStream) -> io::Result<$end> {
                Ok($end {
                    end: End::arc($check(End::recv_from(sock, $side)?)?),
                })
            }

            #[doc = concat!("Lets the program `cmd` will spawn inherit this ", $name, ": its")]
            /// descriptors are inherited across exec and the environment variable `var` names
            #[doc = concat!("them; the child takes the end with [`", stringify!($end), "::from_env`].")]
            ///
            #[doc = concat!("`cmd` keeps a clone of the ", $name, " until `cmd` is dropped: drop it")]
            /// after `spawn` (as with `os_pipe`), or the other end never sees this one close
            #[doc = concat!("(end of file, `BrokenPipe`); [`", stringify!($end), "::spawn_with`] does both.")]
            /// With tokio's `Command`, pass `cmd.as_std_mut()` and drop the tokio `Command` after
            /// spawning. Do not give the child this end's `as_fd()` as its stdin or stdout: that
            /// descriptor only signals readiness (and carries wake-up bytes), not the pipe's data.
            ///
            /// # Examples
            /// Shown with a data pipe's writer; every kind of end passes the same way.
            /// `examples/exec.rs` runs itself as the child:
            ///
            /// ```no_run
            /// use std::io::Read;
            /// let (w, mut r) = pagepipe::pipe()?;
            /// let mut cmd = std::process::Command::new("some-program"); // takes it with from_env
            /// w.pass_to(&mut cmd, "PAGEPIPE_OUT")?;
            /// let mut child = cmd.spawn()?;
            /// drop((cmd, w)); // the Command's clone and ours: now the child holds the only writer
            /// let mut out = Vec::new();
            /// r.read_to_end(&mut out)?; // end of file when the child exits
            /// child.wait()?;
            /// # Ok::<(), std::io::Error>(())
            /// ```
            ///
            /// # Errors
            /// [`io::ErrorKind::InvalidInput`] for an empty `var` or one holding `=` or NUL.
            pub fn pass_to(&self, cmd: &mut Command, var: &str) -> io::Result<()> {
                self.end.pass_to(cmd, var)
            }

            #[doc = concat!("Spawns `cmd` with this ", $name, " passed under `var` (see")]
            #[doc = concat!("[`", stringify!($end), "::pass_to`]) and lets go of it: the ", $name, " and `cmd`, which")]
            /// held a clone, are dropped once the child is spawned (or failed to be), so the child
            /// holds the only copy this process gave it and the other end sees it close when the
            /// child exits.
            ///
            /// # Examples
            /// Shown with a data pipe's writer; every kind of end passes the same way:
            ///
            /// ```no_run
            /// use std::io::Read;
            /// let (w, mut r) = pagepipe::pipe()?;
            /// let mut child = w.spawn_with(std::process::Command::new("some-program"), "PAGEPIPE_OUT")?;
            /// let mut out = Vec::new();
            /// r.read_to_end(&mut out)?; // end of file when the child exits
            /// child.wait()?;
            /// # Ok::<(), std::io::Error>(())
            /// ```
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($end), "::pass_to`], and `Command::spawn`'s.")]
            pub fn spawn_with(self, mut cmd: Command, var: &str) -> io::Result<std::process::Child> {
                self.end.pass_to(&mut cmd, var)?;
                cmd.spawn()
            }

            #[doc = concat!("Takes the ", $name, " a parent passed with `pass_to` under `var`. Call it")]
            /// once per variable; the descriptors it names become owned by the returned end.
            ///
            /// # Examples
            /// In the child (see `examples/exec.rs`):
            ///
            /// ```no_run
            #[doc = concat!("let end = pagepipe::", stringify!($end), "::from_env(\"PAGEPIPE_END\")?;")]
            /// # Ok::<(), std::io::Error>(())
            /// ```
            ///
            /// # Errors
            /// [`io::ErrorKind::NotFound`] if `var` is not set; [`io::ErrorKind::InvalidData`]
            /// if it does not name an inherited pagepipe end of this kind (or its region fails
            /// validation); [`io::ErrorKind::AlreadyExists`] if this process already took it.
            pub fn from_env(var: &str) -> io::Result<$end> {
                Ok($end {
                    end: End::arc($check(End::from_env(var, $side)?)?),
                })
            }

            #[doc = concat!("New descriptors that carry a clone of this ", $name, ", for a transport")]
            /// pagepipe does not know (a C program, Python's `multiprocessing`, a descriptor
            /// store): the pipe's memory file, through an open file description of their own,
            /// and this end's descriptor of the signal pipe, close-on-exec. While they are open
            #[doc = concat!("they hold the ", $name, " as a clone does; [`", stringify!($end), "::from_fds`] makes")]
            /// them an end again, in this process or another one.
            ///
            /// # Examples
            /// Shown with a data pipe's writer; every kind of end works the same way:
            ///
            /// ```
            /// use std::io::{Read, Write};
            /// let (w, mut r) = pagepipe::pipe()?;
            /// let fds = w.to_fds()?;
            /// drop(w);
            /// let mut w2 = pagepipe::Writer::from_fds(fds)?; // in another process, typically
            /// w2.write_all(b"back")?;
            /// drop(w2);
            /// let mut s = String::new();
            /// r.read_to_string(&mut s)?;
            /// assert_eq!(s, "back");
            /// # Ok::<(), std::io::Error>(())
            /// ```
            ///
            /// # Errors
            /// The OS's error if the descriptors cannot be made (a full descriptor table, no
            /// `/proc` to open the memory file again).
            pub fn to_fds(&self) -> io::Result<[OwnedFd; 2]> {
                self.end.to_fds()
            }

            #[doc = concat!("The ", $name, " whose descriptors [`", stringify!($end), "::to_fds`] made, taking them over;")]
            /// the region is mapped and validated as [`recv_from`](Self::recv_from) does.
            ///
            /// # Examples
            #[doc = concat!("See [`", stringify!($end), "::to_fds`].")]
            ///
            /// # Errors
            #[doc = concat!("[`io::ErrorKind::InvalidData`] if they are not the descriptors of a ", $name, " (or")]
            /// its region fails validation); the OS's error.
            pub fn from_fds(fds: [OwnedFd; 2]) -> io::Result<$end> {
                let [memfd, signal] = fds;
                Ok($end {
                    end: End::arc($check(End::attach(memfd, signal, $side)?)?),
                })
            }
        }
    };
}

passing!(
    Writer,
    Side::Write,
    "writer",
    data_pipe,
    "use std::io::{Read, Write};
let (a, b) = std::os::unix::net::UnixStream::pair()?;
let (w, mut r) = pagepipe::pipe()?;
w.send_to(&a)?;
drop(w);
let mut w2 = pagepipe::Writer::recv_from(&b)?; // in another process, typically
w2.write_all(b\"hi\")?;
drop(w2);
let mut s = String::new();
r.read_to_string(&mut s)?;
assert_eq!(s, \"hi\");"
);
passing!(
    Reader,
    Side::Read,
    "reader",
    data_pipe,
    "use std::io::{Read, Write};
let (a, b) = std::os::unix::net::UnixStream::pair()?;
let (mut w, r) = pagepipe::pipe()?;
r.send_to(&a)?;
drop(r);
let mut r2 = pagepipe::Reader::recv_from(&b)?; // in another process, typically
w.write_all(b\"hi\")?;
drop(w);
let mut s = String::new();
r2.read_to_string(&mut s)?;
assert_eq!(s, \"hi\");"
);
passing!(
    Notifier,
    Side::Write,
    "notifier",
    notification_pipe,
    "use pagepipe::{Builder, Notification};
let (a, b) = std::os::unix::net::UnixStream::pair()?;
let (n, mut r) = Builder::new().notifications(4).build()?;
n.send_to(&a)?;
drop(n);
let n2 = pagepipe::Notifier::recv_from(&b)?; // in another process, typically
n2.post(&Notification { kind: 1, subtype: 3, ..Default::default() })?;
drop(n2);
assert_eq!(r.next_notification()?.map(|x| x.subtype), Some(3));
assert!(r.next_notification()?.is_none());"
);
passing!(
    NotificationReader,
    Side::Read,
    "notification reader",
    notification_pipe,
    "use pagepipe::{Builder, Notification};
let (a, b) = std::os::unix::net::UnixStream::pair()?;
let (n, r) = Builder::new().notifications(4).build()?;
r.send_to(&a)?;
drop(r);
let mut r2 = pagepipe::NotificationReader::recv_from(&b)?; // in another process, typically
n.post(&Notification { kind: 1, subtype: 3, ..Default::default() })?;
assert_eq!(r2.read_notification()?.subtype, 3);"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_parse_strictly() {
        assert_eq!(parse_env("pagepipe:writer:5:6", Side::Write), Some([5, 6]));
        assert_eq!(parse_env("pagepipe:reader:5:6", Side::Write), None);
        assert_eq!(parse_env("pagepipe:writer:5:6:7", Side::Write), None);
        assert_eq!(parse_env("pagepipe:writer:5", Side::Write), None);
        assert_eq!(parse_env("pagepipe:writer:x:6", Side::Write), None);
        assert_eq!(parse_env("other:writer:5:6", Side::Write), None);
    }
}
