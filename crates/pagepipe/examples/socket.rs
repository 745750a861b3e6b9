//! An end sent to another process over a Unix socket (`SCM_RIGHTS`).
//!
//! The parent makes a pipe and a socket pair, forks a child that holds nothing but its half of
//! the socket, and sends the writer over it; the child writes and exits, and the parent reads
//! until end of file. Between unrelated processes the socket would be a named `UnixListener`.
//!
//! Run: `cargo run -p pagepipe --example socket`

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

fn child(sock: UnixStream) -> std::io::Result<()> {
    let mut w = pagepipe::Writer::recv_from(&sock)?; // mapped and validated before it returns
    w.write_all(b"sent over a socket")?;
    Ok(())
}

fn main() -> std::io::Result<()> {
    let (parent_sock, child_sock) = UnixStream::pair()?;
    // SAFETY: the process has one thread here, so the child may run any code after fork.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            drop(parent_sock);
            let code = i32::from(child(child_sock).is_err());
            // SAFETY: _exit ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(code) }
        }
        pid => {
            drop(child_sock);
            let (w, mut r) = pagepipe::pipe()?;
            w.send_to(&parent_sock)?;
            drop(w); // the child now holds the only writer
            let mut got = String::new();
            r.read_to_string(&mut got)?;
            let mut status = 0;
            // SAFETY: waits for our own child; `status` is a valid out-pointer.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(got, "sent over a socket");
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            println!("parent read {got:?}");
            Ok(())
        }
    }
}
