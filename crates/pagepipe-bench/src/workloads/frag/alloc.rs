//! The system allocator and mimalloc used directly (not as the global allocator), by the
//! synthetic workloads and the udp/tcp receive paths alike.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::NonNull;

/// A buffer from a `GlobalAlloc` used directly (not as the global allocator), freed on drop;
/// what `Box<[u8]>` is, without zeroing and with any alignment.
pub(super) struct RawBuf<A: GlobalAlloc + 'static> {
    pub(super) ptr: NonNull<u8>,
    pub(super) layout: Layout,
    pub(super) alloc: &'static A,
}

// SAFETY: the buffer is owned memory; both allocators free memory from any thread.
unsafe impl<A: GlobalAlloc + Sync + 'static> Send for RawBuf<A> {}

impl<A: GlobalAlloc + 'static> Drop for RawBuf<A> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `self.alloc.alloc(self.layout)` in `RawSource::get`.
        unsafe { self.alloc.dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

pub(super) static SYSTEM: std::alloc::System = std::alloc::System;
pub(super) static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
