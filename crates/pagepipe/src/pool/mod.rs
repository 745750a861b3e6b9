//! The per-pipe page pool (after the 2026 proposal to replace `pipe_inode_info.tmp_page`): its
//! policies ([`policy`]) and its mechanics ([`pages`]).
//!
//! Every slot position of a pipe owns one page-sized buffer in the pipe's arena. A position that
//! holds no data is *free*; its page is either *resident* (a spare page: the next write there
//! costs no page fault) or given back to the OS (the next write there faults in a zeroed page,
//! the userspace price of the kernel's `alloc_page()`). The region's `dropped` counter and each
//! slot's `DROPPED` flag keep the account; the policy decides what to keep.

pub(crate) mod pages;
pub(crate) mod policy;
