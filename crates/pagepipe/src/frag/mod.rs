//! [`FragCache`]: a page-fragment allocator (the idea of Linux's page_frag cache,
//! `page_frag_alloc()`).
//!
//! A cache carves large *blocks* (32 KiB by default) into small fragments by bumping an offset.
//! Each block has one atomic reference count, one reference per fragment handle (a [`Frag`], or
//! each clone of a [`FrozenFrag`]), whatever its length. When the cache takes a block it puts a
//! huge *bias* into the count at once (the kernel's `pagecnt_bias`) and keeps a private copy of
//! that bias; handing out a fragment only lowers the private copy by one, so the allocation path
//! has no atomic read-modify-write. Dropping a handle, on any thread, subtracts one from the
//! shared count. When the block is used up, the cache subtracts what is left of its bias: if the
//! count then reads zero every fragment is gone and the block is reused in place; otherwise the
//! last fragment to go parks the block on the cache's spare list (or frees it once the list is
//! full or the cache is gone).
//!
//! Spare blocks are the memory [`crate::shrink`] gives back to the OS.

// One file per type; each file imports only files above it in this list, never one below:
// block (the memory block, its count, the spare list) <- frozen (FrozenFrag) <- unique (Frag)
// <- cache (FragCache, FragStats) <- prepared (PreparedFrag, FragCache::prepare / probe).
mod block;
mod cache;
mod frozen;
#[cfg(all(test, loom))]
mod loom_tests;
mod prepared;
mod unique;

pub use cache::{FragCache, FragStats, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE};
pub use frozen::FrozenFrag;
pub use prepared::PreparedFrag;
pub use unique::Frag;
