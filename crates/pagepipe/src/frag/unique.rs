//! [`Frag`]: a writable fragment that owns its bytes alone, and its conversion to
//! `bytes::Bytes`.

use super::block::{put, Block, MAX_COUNT};
use super::frozen::FrozenFrag;
use crate::sync::Ordering;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A writable fragment from a [`FragCache`]: derefs to its bytes, owns them alone, may be sent
/// to and dropped on any thread. [`freeze`](Frag::freeze) it to share it read-only.
///
/// ```
/// let mut cache = pagepipe::FragCache::new();
/// let mut f = cache.alloc(4);
/// f.copy_from_slice(&[1, 2, 3, 4]);
/// let shared = f.freeze();
/// let copy = shared.clone();
/// std::thread::spawn(move || assert_eq!(&copy[..], &[1, 2, 3, 4])).join().unwrap();
/// assert_eq!(shared.len(), 4);
/// ```
///
/// [`FragCache`]: crate::FragCache
pub struct Frag {
    /// The block holding the bytes; `None` for an empty fragment, which holds no memory.
    /// Invariant: when `Some`, `len > 0` and one reference of the block's count is this
    /// fragment's.
    pub(super) block: Option<NonNull<Block>>,
    /// Invariant: `ptr..ptr + len` lies in the block and belongs to this fragment alone.
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: a Frag owns its bytes alone (type invariant) and gives up its share of the block with
// an atomic subtraction, which is sound on any thread.
unsafe impl Send for Frag {}
// SAFETY: `&Frag` only reads its own bytes.
unsafe impl Sync for Frag {}

impl Frag {
    /// An empty fragment; holds no memory.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(pagepipe::Frag::empty().is_empty());
    /// ```
    pub fn empty() -> Frag {
        Frag::empty_aligned(1)
    }

    pub(super) fn empty_aligned(align: usize) -> Frag {
        // A zero-length slice needs only a non-null, aligned address.
        let ptr = NonNull::new(std::ptr::null_mut::<u8>().wrapping_add(align))
            .expect("align is non-zero");
        Frag {
            block: None,
            ptr,
            len: 0,
        }
    }

    /// Turns the fragment into a read-only handle that is cheap to clone (one atomic add) and
    /// may be shared between threads.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut f = cache.alloc(5);
    /// f.copy_from_slice(b"hello");
    /// let shared = f.freeze();
    /// let copy = shared.clone();                 // one atomic add
    /// std::thread::spawn(move || assert_eq!(&copy[..], b"hello")).join().unwrap();
    /// ```
    pub fn freeze(self) -> FrozenFrag {
        let this = std::mem::ManuallyDrop::new(self);
        FrozenFrag {
            block: this.block,
            ptr: this.ptr,
            len: this.len,
        }
    }

    /// Shortens the fragment to its first `len` bytes; does nothing when it is not longer. The
    /// bytes cut off stay allocated (and unused) until the fragment is dropped, as in a
    /// network driver's receive buffer whose packet is shorter than the buffer. `truncate(0)`
    /// is the exception: the fragment becomes empty and gives its share of the block back at
    /// once, as dropping it would (an empty fragment holds no memory).
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut f = cache.alloc(2048); // a receive buffer
    /// f[..3].copy_from_slice(b"pkt");
    /// f.truncate(3); // the packet was 3 bytes
    /// assert_eq!(&f[..], b"pkt");
    /// ```
    pub fn truncate(&mut self, len: usize) {
        if len == 0 {
            // Keeps the `block` invariant (a fragment with a block is not empty).
            drop(std::mem::take(self));
        }
        self.len = self.len.min(len);
    }

    /// Splits the fragment in two at `at`: returns the first `at` bytes as a fragment of its
    /// own and keeps the rest, without copying (like `BytesMut::split_to`). Costs one atomic
    /// add on the block's count (the new fragment's reference). Frames read into one large
    /// fragment are split off this way.
    ///
    /// # Panics
    /// If `at > self.len()`.
    ///
    /// ```
    /// let mut cache = pagepipe::FragCache::new();
    /// let mut f = cache.alloc(8);
    /// f.copy_from_slice(b"headbody");
    /// let head = f.split_to(4);
    /// assert_eq!((&head[..], &f[..]), (&b"head"[..], &b"body"[..]));
    /// std::thread::spawn(move || drop(head)); // each half is an independent fragment
    /// ```
    pub fn split_to(&mut self, at: usize) -> Frag {
        assert!(
            at <= self.len,
            "Frag::split_to: at {at} is past the end of a {}-byte fragment",
            self.len
        );
        if at == 0 {
            return Frag::empty();
        }
        let ptr = self.ptr;
        if at == self.len {
            return std::mem::take(self);
        }
        let block = self.block.expect("a non-empty fragment has a block");
        // SAFETY: our own reference keeps the header live.
        let c = unsafe { block.as_ref() };
        // Relaxed: we already hold a reference, so the block cannot be released meanwhile (as
        // in `Arc::clone`).
        if c.count.fetch_add(1, Ordering::Relaxed) > MAX_COUNT {
            std::process::abort(); // over usize::MAX / 4 handles: the count would overflow
        }
        // SAFETY: at < len, so the pointer stays inside this fragment's bytes.
        self.ptr = unsafe { NonNull::new_unchecked(ptr.as_ptr().add(at)) };
        self.len -= at;
        Frag {
            block: Some(block),
            ptr,
            len: at,
        }
    }

    #[cfg(all(loom, test))]
    pub(crate) fn loom_write_probe(&self, value: usize) {
        if let Some(c) = self.block {
            // SAFETY: a live fragment keeps its block's header live.
            let c = unsafe { c.as_ref() };
            // SAFETY: loom checks this write against the cache's recycling write.
            c.probe.with_mut(|p| unsafe { *p = value });
        }
    }
}

impl Default for Frag {
    fn default() -> Self {
        Frag::empty()
    }
}

impl Drop for Frag {
    #[inline]
    fn drop(&mut self) {
        if let Some(block) = self.block {
            // SAFETY: this fragment holds one reference of the count (type invariant).
            unsafe { put(block) };
        }
    }
}

impl Deref for Frag {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is initialized (zero-filled or written) memory that belongs
        // to this fragment alone (type invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Frag {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for Frag {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for Frag {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for Frag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frag")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// Without copying: the `Bytes` owns the fragment and drops it with its last clone.
///
/// ```
/// let mut cache = pagepipe::FragCache::new();
/// let mut f = cache.alloc(3);
/// f.copy_from_slice(b"abc");
/// let at = f.as_ptr();
/// let b = bytes::Bytes::from(f);
/// assert_eq!(b.as_ptr(), at);
/// assert_eq!(&b[..], b"abc");
/// ```
#[cfg(feature = "bytes")]
#[cfg_attr(docsrs, doc(cfg(feature = "bytes")))]
impl From<Frag> for bytes::Bytes {
    fn from(frag: Frag) -> bytes::Bytes {
        bytes::Bytes::from_owner(frag)
    }
}
