//! What a `udp` or `tcp` run is configured with, and the sizes both work with.

/// Bytes of one receive slot (the kernel's 2 KiB page fragment of a receive buffer).
pub const SLOT: usize = 2048;

/// Largest message of a size mix: one slot minus room for nothing else.
pub const MAX_MSG: usize = SLOT;

/// Room `tcp` asks each read for, at least and at most.
pub(super) const READ_MIN: usize = 4096;
pub(super) const READ_MAX: usize = 64 * 1024;

/// What one `udp` or `tcp` run is configured with.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// `"udp"` or `"tcp"`.
    pub workload: &'static str,
    /// The size mix as given (`SIZE:WEIGHT,...`), for the JSON config.
    pub mix: String,
    /// Message sizes in send order (a shuffled expansion of the mix), cycled.
    pub schedule: Vec<usize>,
    /// Messages sent per run.
    pub msgs: usize,
    /// `recvmmsg` batch (udp).
    pub batch: usize,
    /// Datagrams per second the sender keeps to (0: as fast as it can).
    pub rate: u64,
    /// udp: the sender sends everything before the receiver starts (see the module docs).
    pub preload: bool,
    /// FragCache block size.
    pub block_size: usize,
    /// Entries of the receiver-to-worker queue.
    pub queue: usize,
}
