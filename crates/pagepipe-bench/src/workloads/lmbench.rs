//! What `bw`, `lat` (lmbench's bw_pipe / bw_unix and lat_pipe / lat_unix) and `idle` share.

use crate::child::Between;
use crate::harness::Arm;
use crate::transport::Transport;
use std::io;

/// Refuses a transport that cannot connect a forked child (it would wait forever).
pub fn check_between(t: Transport, between: Between) -> io::Result<()> {
    if t.works_between(between) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{} runs between threads only", t.name()),
    ))
}

/// The arms of a transport list.
pub fn arms(transports: &[Transport]) -> Vec<Arm> {
    transports.iter().map(|t| Arm::new(t.name())).collect()
}
