//! Zero-filled tables sized ahead for a configured maximum.
//!
//! A table of 16 MiB or more comes straight from the kernel (an anonymous `mmap`): its pages
//! read as zero and take memory only once written, so sizing the session index for
//! `limits.max_sessions` up front costs nothing until sessions fill it, and nothing moves or
//! rehashes while traffic runs. (From the heap, `calloc` would clear the whole table each time
//! an engine is built.) Smaller tables use the heap. [`mapped_bytes`] tells benchmarks how
//! much is mapped, since an allocator that counts bytes does not see it.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes mapped by all [`Zeroed`] tables alive in this process.
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// Bytes mapped (reserved; resident only where written) by the engine's large tables.
pub fn mapped_bytes() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

const MAP_MIN: usize = 16 << 20;

/// A zero-filled `[u64]` of fixed length.
pub struct Zeroed {
    ptr: std::ptr::NonNull<u64>,
    len: usize,
    /// From `mmap` (else a leaked `Box<[u64]>`).
    mapped: bool,
}

// SAFETY: `Zeroed` owns its memory exclusively, like a `Box<[u64]>`.
unsafe impl Send for Zeroed {}
// SAFETY: shared access is read-only, like a `Box<[u64]>`.
unsafe impl Sync for Zeroed {}

impl Zeroed {
    pub fn new(len: usize) -> Zeroed {
        #[cfg(unix)]
        if let Some(bytes) = len.checked_mul(8).filter(|&b| b >= MAP_MIN) {
            // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                if let Some(ptr) = std::ptr::NonNull::new(p.cast::<u64>()) {
                    MAPPED.fetch_add(bytes, Ordering::Relaxed);
                    return Zeroed {
                        ptr,
                        len,
                        mapped: true,
                    };
                }
            }
        }
        let b: Box<[u64]> = vec![0; len].into_boxed_slice();
        let len = b.len();
        // SAFETY: `Box::into_raw` never returns null.
        let ptr = unsafe { std::ptr::NonNull::new_unchecked(Box::into_raw(b).cast::<u64>()) };
        Zeroed {
            ptr,
            len,
            mapped: false,
        }
    }
}

impl std::ops::Deref for Zeroed {
    type Target = [u64];
    #[inline]
    fn deref(&self) -> &[u64] {
        // SAFETY: `ptr` holds `len` initialised u64s for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Zeroed {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        if self.mapped {
            #[cfg(unix)]
            // SAFETY: unmaps exactly the mapping made in `new`, which nothing else refers to.
            unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.len * 8);
            }
            MAPPED.fetch_sub(self.len * 8, Ordering::Relaxed);
        } else {
            // SAFETY: `ptr`/`len` came from `Box::into_raw` of a `Box<[u64]>` of this length.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ))
            });
        }
    }
}
