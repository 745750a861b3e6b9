//! The workloads, one module per subcommand and named after it (`async_pipe` is `async`, a
//! keyword). Each has its `Args` and a `run` that measures through the harness; what several
//! share lives in `child`, `common`, `transport` or, for `bw` and `lat`, in `lmbench`.

pub mod async_pipe;
pub mod dontcache;
pub mod frag;
pub mod lmbench;
pub mod notify;
pub mod peer_death;
pub mod pipe;
pub mod splice;
