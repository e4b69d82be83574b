//! A record's bytes in one thin heap allocation.
//!
//! The index keeps one pointer per record, so the pointer must be thin
//! (8 bytes, with a niche so `Option<RecordBlob>` stays 8 bytes): the length
//! lives in the first four bytes of the allocation.
//!
//! ```text
//! +-------------+-------------------------+
//! | u32 len, LE | len bytes of record     |
//! +-------------+-------------------------+
//! ```

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

const LENGTH_BYTES: usize = 4;

/// Immutable record bytes owned through a thin pointer.
pub struct RecordBlob {
    ptr: NonNull<u8>,
}

// SAFETY: a RecordBlob owns its allocation exclusively and its bytes are
// never mutated after construction, so sharing or sending it is sound.
#[expect(unsafe_code, reason = "thin owned pointer; bytes are immutable")]
unsafe impl Send for RecordBlob {}
// SAFETY: see `Send` above; `&RecordBlob` only hands out `&[u8]`.
#[expect(unsafe_code, reason = "thin owned pointer; bytes are immutable")]
unsafe impl Sync for RecordBlob {}

impl RecordBlob {
    /// Copies `bytes` into a new allocation.
    ///
    /// # Panics
    /// If `bytes` is longer than `u32::MAX` (callers bound records far below).
    pub fn new(bytes: &[u8]) -> RecordBlob {
        let len = u32::try_from(bytes.len()).expect("record length fits in u32");
        let layout = Self::layout(bytes.len());
        #[expect(unsafe_code, reason = "raw allocation of a thin blob")]
        // SAFETY: layout has non-zero size (at least the length prefix). The
        // writes stay inside the allocation: 4 bytes of length then exactly
        // `bytes.len()` bytes.
        unsafe {
            let raw = alloc(layout);
            let Some(ptr) = NonNull::new(raw) else {
                handle_alloc_error(layout);
            };
            std::ptr::copy_nonoverlapping(len.to_le_bytes().as_ptr(), raw, LENGTH_BYTES);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), raw.add(LENGTH_BYTES), bytes.len());
            RecordBlob { ptr }
        }
    }

    /// The record bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        #[expect(unsafe_code, reason = "reading a thin blob")]
        // SAFETY: the allocation starts with a valid little-endian length
        // followed by that many initialized bytes, written in `new` and never
        // changed; the borrow of self keeps the allocation alive.
        unsafe {
            let mut len = [0u8; LENGTH_BYTES];
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), len.as_mut_ptr(), LENGTH_BYTES);
            let len = u32::from_le_bytes(len) as usize;
            std::slice::from_raw_parts(self.ptr.as_ptr().add(LENGTH_BYTES), len)
        }
    }

    /// Bytes of record data (without the length prefix).
    #[inline]
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(LENGTH_BYTES + len, 4).expect("record layout")
    }
}

impl Drop for RecordBlob {
    fn drop(&mut self) {
        let layout = Self::layout(self.len());
        #[expect(unsafe_code, reason = "freeing a thin blob")]
        // SAFETY: ptr came from `alloc` with exactly this layout (same length).
        unsafe {
            dealloc(self.ptr.as_ptr(), layout)
        }
    }
}

impl std::fmt::Debug for RecordBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordBlob({} bytes)", self.len())
    }
}

const _: () = assert!(std::mem::size_of::<Option<RecordBlob>>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_bytes() {
        for len in [0usize, 1, 3, 4, 100, 70_000] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let blob = RecordBlob::new(&bytes);
            assert_eq!(blob.as_bytes(), &bytes[..]);
            assert_eq!(blob.len(), len);
        }
    }
}
