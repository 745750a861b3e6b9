//! A parent and a forked child share one pipe, as they would share `pipe(2)` descriptors.
//!
//! `fork(2)` gives the child every end the parent held, so each process drops the end it does
//! not use: the parent's read then sees end of file once the child's writer is gone.
//!
//! Run: `cargo run -p pagepipe --example fork`

use std::io::{Read, Write};

fn main() -> std::io::Result<()> {
    // Note the order: (writer, reader).
    let (w, mut r) = pagepipe::pipe()?;
    // SAFETY: the process has one thread here, so the child may run any code after fork.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            drop(r);
            let code = match (&w).write_all(b"hello from the child") {
                Ok(()) => 0,
                Err(_) => 1,
            };
            drop(w); // the child's writer closes (it would close at exit anyway)
                     // SAFETY: _exit ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(code) }
        }
        child => {
            drop(w);
            let mut got = String::new();
            r.read_to_string(&mut got)?; // end of file once the child's writer is gone
            let mut status = 0;
            // SAFETY: waits for our own child; `status` is a valid out-pointer.
            unsafe { libc::waitpid(child, &mut status, 0) };
            assert_eq!(got, "hello from the child");
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            println!("parent read {got:?}");
            Ok(())
        }
    }
}
