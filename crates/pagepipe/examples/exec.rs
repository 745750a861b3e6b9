//! An end passed into an exec'd program: the example runs itself again as the child.
//!
//! `Writer::pass_to` marks the end's descriptors to be inherited by the program a `Command`
//! spawns and names them in an environment variable; the child takes the end with
//! `Writer::from_env`. The `Command` holds a clone of the writer until it is dropped, so the
//! parent drops it (and its own writer) before it reads to end of file. `Writer::spawn_with`
//! does the same in one call; the second child uses it.
//!
//! Run: `cargo run -p pagepipe --example exec`

use std::io::{Read, Write};
use std::process::Command;

const VAR: &str = "PAGEPIPE_EXAMPLE_OUT";

fn main() -> std::io::Result<()> {
    if std::env::var_os(VAR).is_some() {
        // The child: take the end the parent passed, write, exit (which closes it).
        let mut w = pagepipe::Writer::from_env(VAR)?;
        writeln!(w, "hello from pid {}", std::process::id())?;
        return Ok(());
    }
    let (w, mut r) = pagepipe::pipe()?;
    let mut cmd = Command::new(std::env::current_exe()?);
    w.pass_to(&mut cmd, VAR)?;
    let mut child = cmd.spawn()?;
    drop(cmd); // the Command held a clone of the writer: without this, no end of file
    drop(w);
    let mut got = String::new();
    r.read_to_string(&mut got)?;
    assert!(child.wait()?.success());
    assert!(got.starts_with("hello from pid "), "{got:?}");
    print!("parent read: {got}");

    // The same in one call: spawn_with consumes the writer and drops the Command after spawning.
    let (w, mut r) = pagepipe::pipe()?;
    let mut child = w.spawn_with(Command::new(std::env::current_exe()?), VAR)?;
    let mut got = String::new();
    r.read_to_string(&mut got)?;
    assert!(child.wait()?.success());
    assert!(got.starts_with("hello from pid "), "{got:?}");
    print!("parent read: {got}");
    Ok(())
}
