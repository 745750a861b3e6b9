//! [`FrozenFrag`]: a read-only fragment shared between threads, and its conversion to
//! `bytes::Bytes`.

use super::block::{put, Block, MAX_COUNT};
use crate::sync::Ordering;
use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

/// A read-only, cheaply cloneable, thread-shareable fragment (see [`Frag::freeze`]). The bytes
/// stay allocated until the last clone is dropped.
///
/// [`Frag::freeze`]: crate::Frag::freeze
pub struct FrozenFrag {
    /// Invariant: as for [`Frag`] (one reference of the count per handle), but the bytes are
    /// only read.
    ///
    /// [`Frag`]: crate::Frag
    pub(super) block: Option<NonNull<Block>>,
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: handles only read the bytes, and share the count through atomic operations.
unsafe impl Send for FrozenFrag {}
// SAFETY: as for Send.
unsafe impl Sync for FrozenFrag {}

impl Clone for FrozenFrag {
    fn clone(&self) -> FrozenFrag {
        if let Some(block) = self.block {
            // SAFETY: our own share keeps the header live.
            let c = unsafe { block.as_ref() };
            // Relaxed: we already hold a share, so the block cannot be released meanwhile (as
            // in `Arc::clone`).
            if c.count.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
                std::process::abort(); // over usize::MAX / 4 clones: the count would overflow
            }
        }
        FrozenFrag {
            block: self.block,
            ptr: self.ptr,
            len: self.len,
        }
    }
}

impl Drop for FrozenFrag {
    fn drop(&mut self) {
        if let Some(block) = self.block {
            // SAFETY: this handle holds one reference of the count (type invariant).
            unsafe { put(block) };
        }
    }
}

impl Deref for FrozenFrag {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: initialized bytes no one writes while a frozen handle lives (type invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for FrozenFrag {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for FrozenFrag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenFrag")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// Without copying, as for [`Frag`].
///
/// [`Frag`]: crate::Frag
#[cfg(feature = "bytes")]
#[cfg_attr(docsrs, doc(cfg(feature = "bytes")))]
impl From<FrozenFrag> for bytes::Bytes {
    fn from(frag: FrozenFrag) -> bytes::Bytes {
        bytes::Bytes::from_owner(frag)
    }
}
