//! The workloads, one module per subcommand and named after it (`async_pipe` is `async`, a
//! keyword), plus `idle`, a case of the quick suite only. Each has its options and a `run` that
//! measures through the harness. Workloads do not use one another: what several share lives in
//! `child`, `common` and `transport`, and what `bw`, `lat` and `idle` share in `lmbench`.

pub mod async_pipe;
pub mod bw;
pub mod dontcache;
pub mod frag;
pub mod idle;
pub mod lat;
pub mod lmbench;
pub mod notify;
pub mod peer_death;
pub mod pipe;
pub mod scale;
pub mod splice;
