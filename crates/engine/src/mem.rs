//! Tables sized ahead for a configured maximum, on huge pages when they are large.
//!
//! A table of 4 MiB or more comes straight from the kernel (an anonymous `mmap`): its pages
//! read as zero and take memory only once written, so sizing the session index for
//! `limits.max_sessions` up front costs nothing until sessions fill it, and nothing moves or
//! rehashes while traffic runs. (From the heap, `calloc` would clear the whole table each time
//! an engine is built.) Smaller tables use the heap. [`mapped_bytes`] tells benchmarks how
//! much is mapped, since an allocator that counts bytes does not see it.
//!
//! Mappings are aligned to 2 MiB and marked `MADV_HUGEPAGE`, so where transparent huge pages
//! are enabled (`always` or `madvise`) the kernel backs them with 2 MiB pages: a lookup at
//! 1M-10M sessions touches an index slot and a session in tables of 10-300 MB, and with 4 KiB
//! pages nearly every one of those touches also missed the TLB (a page walk, itself a few
//! cache misses). The threshold was 16 MiB until the index slots shrank to 4 bytes: a 1M
//! table's index (10.7 MB) then fell to the heap's 4 KiB pages and NAT64 at 1M lost 12 ns a
//! packet to page walks. The price: memory is taken 2 MiB at a time where the table is written, so a
//! sparsely used index becomes resident sooner than with 4 KiB pages.
//!
//! A first write to a huge page makes the kernel find (and, with memory fragmented, compact)
//! and zero 2 MiB: up to milliseconds, paid by whichever packet creates a session there. A
//! gateway that wants none of that calls [`set_prefault`] before building its engine: tables
//! mapped afterwards are written in full at once (`MADV_POPULATE_WRITE`), so the memory for
//! `limits.max_sessions` is resident from the start and no packet waits for the kernel.
//!
//! [`Zeroed`] is a zero-filled `[u32]` (the indexes); [`FixedVec`] a vector with its capacity
//! reserved ahead (the session and mapping slabs).

use std::mem::{align_of, size_of, ManuallyDrop};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes mapped by all [`Region`]s alive in this process.
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// Write large tables in full when they are mapped (see the module docs)?
static PREFAULT: AtomicBool = AtomicBool::new(false);

/// From now on, make the pages of every large table resident when it is mapped (`true`), or
/// only where written (`false`, the default). Process-wide: the daemon sets it from
/// `[limits] prefault` before building its engine.
pub fn set_prefault(on: bool) {
    PREFAULT.store(on, Ordering::Relaxed);
}

/// Starts fetching the cache line holding `p` (a hint: no architectural effect), for batch
/// stages that look a record up before the packet that needs it is translated.
#[inline(always)]
pub(crate) fn prefetch<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch has no architectural effect; the pointer is valid anyway.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (p as *const T).cast::<i8>(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bytes mapped (reserved; resident only where written) by the engine's large tables.
pub fn mapped_bytes() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

const MAP_MIN: usize = 4 << 20;
const HUGE: usize = 2 << 20;
const PAGE: usize = 4 << 10;

/// An anonymous private mapping of at least `len` bytes, 2 MiB aligned, zero-filled.
struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl Region {
    /// Maps `bytes` (rounded up to 4 KiB) at a 2 MiB-aligned start when it is [`MAP_MIN`] or
    /// more; `None` for smaller sizes or when the kernel refuses (the caller then uses the
    /// heap). Only the whole 2 MiB pages get huge pages: the part after the last one (under
    /// 2 MiB, a few percent of a large table) stays on 4 KiB pages -- rounding every table up
    /// to 2 MiB cost 2.7 bytes per session at 1M sessions for the two indexes alone.
    #[cfg(unix)]
    fn map(bytes: usize) -> Option<Region> {
        Region::map_as(bytes, PREFAULT.load(Ordering::Relaxed), true)
    }

    /// [`Region::map`] with its two choices: made resident now (`prefault`), on huge pages
    /// (`huge`).
    #[cfg(unix)]
    fn map_as(bytes: usize, prefault: bool, huge: bool) -> Option<Region> {
        if bytes < MAP_MIN {
            return None;
        }
        let len = bytes.checked_add(PAGE - 1)? & !(PAGE - 1);
        // One huge page more than needed, so an aligned start exists inside it.
        let over = len.checked_add(HUGE)?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let base = p as usize;
        let start = (base + HUGE - 1) & !(HUGE - 1);
        let head = start - base;
        let tail = over - head - len;
        // SAFETY: both ranges lie inside the mapping just made and outside [start, start+len);
        // page aligned (mmap returns page-aligned memory; HUGE and len are page multiples).
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        #[cfg(target_os = "linux")]
        if huge {
            // SAFETY: advice on our own mapping; a kernel without THP ignores or refuses it,
            // and either is harmless (the table then stays on 4 KiB pages).
            unsafe {
                libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            }
        }
        if prefault {
            populate(start, len);
        }
        MAPPED.fetch_add(len, Ordering::Relaxed);
        Some(Region {
            ptr: NonNull::new(start as *mut u8)?,
            len,
        })
    }

    #[cfg(not(unix))]
    fn map(_bytes: usize) -> Option<Region> {
        None
    }

    #[cfg(not(unix))]
    fn map_as(_bytes: usize, _prefault: bool, _huge: bool) -> Option<Region> {
        None
    }
}

/// Makes `[start, start + len)` of a fresh zero-filled mapping resident: one
/// `MADV_POPULATE_WRITE` (Linux 5.14), else a zero written to every 4 KiB page (the pages
/// read zero already, so the contents do not change).
#[cfg(unix)]
fn populate(start: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: advice on our own mapping, which is readable and writable.
        let r =
            unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
        if r == 0 {
            return;
        }
    }
    for off in (0..len).step_by(4096) {
        // SAFETY: `start + off` lies inside the mapping (off < len), which is writable and
        // not yet shared with anything; writing the zero it already holds changes nothing.
        unsafe { std::ptr::write_volatile((start + off) as *mut u8, 0) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: unmaps exactly the range kept in `map`, which nothing else refers to.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
        MAPPED.fetch_sub(self.len, Ordering::Relaxed);
    }
}

/// A zero-filled `[u32]` of fixed length.
pub struct Zeroed {
    ptr: NonNull<u32>,
    len: usize,
    /// The mapping behind `ptr` (else `ptr` is a leaked `Box<[u32]>`).
    region: Option<Region>,
}

// SAFETY: `Zeroed` owns its memory exclusively, like a `Box<[u32]>`.
unsafe impl Send for Zeroed {}
// SAFETY: shared access is read-only, like a `Box<[u32]>`.
unsafe impl Sync for Zeroed {}

impl Zeroed {
    pub fn new(len: usize) -> Zeroed {
        Zeroed::with_prefault(len, PREFAULT.load(Ordering::Relaxed), true)
    }

    /// A table made while traffic runs (one that grows): never made resident up front,
    /// whatever [`set_prefault`] says, and on 4 KiB pages -- made resident at once, or a
    /// huge page at a time, its zeroing (and the kernel's compaction for huge pages) fell on
    /// single packets: 40 ms for a 31 MB table, 5-10 ms a page. Its pages come as its
    /// entries land, ~1 us each.
    pub fn lazy(len: usize) -> Zeroed {
        Zeroed::with_prefault(len, false, false)
    }

    /// Makes the memory of elements `from..to` (the 4 KiB pages they touch) resident now,
    /// for a table that will be written at random soon: its first touches then fault no
    /// packet. Contents are unchanged.
    pub fn populate(&mut self, from: usize, to: usize) {
        let (from, to) = (from.min(self.len), to.min(self.len));
        if self.region.is_some() {
            let base = self.ptr.as_ptr() as usize;
            let start = (base + from * 4) & !(PAGE - 1);
            let end = (base + to * 4 + PAGE - 1) & !(PAGE - 1);
            if end > start {
                populate(start, end - start);
            }
            return;
        }
        // On the heap (a table under 4 MiB, whose pages the allocator may also map lazily):
        // an element per page written with what it holds.
        for i in (from..to).step_by(PAGE / 4) {
            if let Some(e) = self.get_mut(i) {
                let p: *mut u32 = e;
                // SAFETY: `p` is a valid, exclusive element; volatile so the write stays.
                unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
            }
        }
    }

    /// Gives the memory of elements `from..to` (the whole 4 KiB pages inside) back to the
    /// kernel; they read as zero after. For a table on its way out, released a few pages at
    /// a time rather than unmapped at once (unmapping a 20 MB index that every page of was
    /// written took 0.6 ms). A heap table keeps its memory.
    pub fn release(&mut self, from: usize, to: usize) {
        #[cfg(target_os = "linux")]
        if self.region.is_some() {
            let base = self.ptr.as_ptr() as usize;
            let start = (base + from.min(self.len) * 4 + PAGE - 1) & !(PAGE - 1);
            let end = (base + to.min(self.len) * 4) & !(PAGE - 1);
            if end > start {
                // SAFETY: whole pages inside our own private anonymous mapping; they read
                // as zero afterwards, which is an initialised u32 -- nothing is left
                // dangling.
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (from, to);
    }

    fn with_prefault(len: usize, prefault: bool, huge: bool) -> Zeroed {
        if let Some(r) = len
            .checked_mul(4)
            .and_then(|b| Region::map_as(b, prefault, huge))
        {
            return Zeroed {
                ptr: r.ptr.cast(),
                len,
                region: Some(r),
            };
        }
        let b: Box<[u32]> = vec![0; len].into_boxed_slice();
        let len = b.len();
        // SAFETY: `Box::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(b).cast::<u32>()) };
        Zeroed {
            ptr,
            len,
            region: None,
        }
    }
}

impl std::ops::Deref for Zeroed {
    type Target = [u32];
    #[inline]
    fn deref(&self) -> &[u32] {
        // SAFETY: `ptr` holds `len` initialised u32s for as long as `self` lives (mapped
        // memory reads as zero).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Zeroed {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        if self.region.is_none() {
            // SAFETY: `ptr`/`len` came from `Box::into_raw` of a `Box<[u32]>` of this length.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ))
            });
        }
        // A mapping is unmapped by `Region`'s drop.
    }
}

/// A vector whose capacity is reserved ahead: on a [`Region`] (huge pages) when it is large,
/// else on the heap. Elements are reached through one pointer either way (no branch per
/// access). It grows by moving to twice the room when full, which the tables sized for
/// `limits.max_sessions` do not do.
pub struct FixedVec<T> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    /// The mapping behind `ptr` (else `ptr`/`cap` are a leaked `Vec<T>`'s).
    region: Option<Region>,
}

// SAFETY: `FixedVec<T>` owns its elements exclusively, like a `Vec<T>`.
unsafe impl<T: Send> Send for FixedVec<T> {}
// SAFETY: shared access hands out `&T` only, like a `Vec<T>`.
unsafe impl<T: Sync> Sync for FixedVec<T> {}

impl<T> FixedVec<T> {
    pub fn with_capacity(cap: usize) -> FixedVec<T> {
        if size_of::<T>() > 0 && align_of::<T>() <= 4096 {
            if let Some(r) = cap.checked_mul(size_of::<T>()).and_then(Region::map) {
                return FixedVec {
                    ptr: r.ptr.cast(),
                    len: 0,
                    cap: r.len / size_of::<T>(),
                    region: Some(r),
                };
            }
        }
        let mut v = ManuallyDrop::new(Vec::<T>::with_capacity(cap));
        FixedVec {
            // SAFETY: a `Vec`'s pointer is never null (dangling but aligned when empty).
            ptr: unsafe { NonNull::new_unchecked(v.as_mut_ptr()) },
            len: 0,
            cap: v.capacity(),
            region: None,
        }
    }

    #[inline]
    pub fn push(&mut self, v: T) {
        if self.len == self.cap {
            self.grow();
        }
        if self.len < self.cap {
            // SAFETY: `len < cap`: the slot lies inside the allocation and holds no value.
            unsafe { self.ptr.as_ptr().add(self.len).write(v) };
            self.len += 1;
        }
    }

    /// Moves the elements to twice the room.
    #[cold]
    fn grow(&mut self) {
        let mut bigger = FixedVec::<T>::with_capacity(self.cap.saturating_mul(2).max(4));
        if bigger.cap < self.len {
            return;
        }
        // SAFETY: `bigger` has room for `len` elements and does not overlap `self`; the
        // moved-out elements are forgotten here (len = 0) so they are not dropped twice.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), bigger.ptr.as_ptr(), self.len);
        }
        bigger.len = self.len;
        self.len = 0;
        std::mem::swap(self, &mut bigger);
    }
}

impl<T> std::ops::Deref for FixedVec<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` elements are initialised; `ptr` is aligned and non-null.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for FixedVec<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for FixedVec<T> {
    fn drop(&mut self) {
        if self.region.is_some() {
            // SAFETY: the first `len` elements are initialised and dropped once; the memory
            // goes with `region`.
            unsafe {
                std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ))
            };
        } else {
            // SAFETY: `ptr`/`cap` came from a `Vec<T>` whose first `len` elements are set.
            drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.cap) });
        }
    }
}

/// Element storage of a slab ([`crate::napt`]): indexed access and appending.
pub trait Store<T> {
    fn at(&self, i: usize) -> Option<&T>;
    fn at_mut(&mut self, i: usize) -> Option<&mut T>;
    fn append(&mut self, v: T);
    fn count(&self) -> usize;
}

impl<T> Store<T> for FixedVec<T> {
    #[inline(always)]
    fn at(&self, i: usize) -> Option<&T> {
        self.get(i)
    }
    #[inline(always)]
    fn at_mut(&mut self, i: usize) -> Option<&mut T> {
        self.get_mut(i)
    }
    #[inline]
    fn append(&mut self, v: T) {
        self.push(v)
    }
    #[inline(always)]
    fn count(&self) -> usize {
        self.len()
    }
}

/// A vector in chunks of fixed size, each allocated when the one before is full: elements
/// never move, and memory follows use instead of being reserved ahead for a maximum. For
/// tables whose worst case is far above their usual size (mapping records, which only
/// mappings with more than one session have: [`crate::napt`]). A chunk is one allocation
/// of up to 2^16 elements (2.4 MB of NAT44 mapping records), made when the previous one is
/// full.
pub struct Chunks<T> {
    chunks: Vec<Vec<T>>,
    shift: u32,
    len: usize,
}

impl<T> Chunks<T> {
    /// Chunks of up to 2^16 elements, fewer when `cap` is smaller.
    pub fn with_capacity(cap: usize) -> Chunks<T> {
        let shift = (usize::BITS - cap.max(1).leading_zeros()).min(16);
        Chunks {
            chunks: Vec::new(),
            shift,
            len: 0,
        }
    }
}

impl<T> Store<T> for Chunks<T> {
    #[inline]
    fn at(&self, i: usize) -> Option<&T> {
        self.chunks
            .get(i >> self.shift)?
            .get(i & ((1 << self.shift) - 1))
    }
    #[inline]
    fn at_mut(&mut self, i: usize) -> Option<&mut T> {
        let mask = (1 << self.shift) - 1;
        self.chunks.get_mut(i >> self.shift)?.get_mut(i & mask)
    }
    fn append(&mut self, v: T) {
        let size = 1 << self.shift;
        match self.chunks.last_mut() {
            Some(c) if c.len() < size => c.push(v),
            _ => {
                let mut c = Vec::with_capacity(size);
                c.push(v);
                self.chunks.push(c);
            }
        }
        self.len += 1;
    }
    #[inline]
    fn count(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_vec_keeps_values_through_growth_and_drops_them_once() {
        let mut v: FixedVec<Box<u32>> = FixedVec::with_capacity(2);
        for i in 0..100 {
            v.push(Box::new(i));
        }
        assert_eq!(v.len(), 100);
        assert!(v.iter().enumerate().all(|(i, b)| **b == i as u32));
    }

    #[test]
    fn chunks_index_across_chunk_boundaries_and_allocate_as_they_fill() {
        let mut c: Chunks<u32> = Chunks::with_capacity(100);
        assert_eq!(c.shift, 7);
        assert!(c.chunks.is_empty(), "nothing allocated ahead");
        for i in 0..300 {
            c.append(i);
        }
        assert_eq!((c.count(), c.chunks.len()), (300, 3));
        assert!((0..300).all(|i| c.at(i as usize) == Some(&i)));
        assert_eq!(c.at(300), None);
        *c.at_mut(128).unwrap() = 7;
        assert_eq!(c.at(128), Some(&7));
        let big: Chunks<u8> = Chunks::with_capacity(10_000_000);
        assert_eq!(big.shift, 16);
    }

    #[test]
    fn large_tables_are_mapped_and_aligned_to_huge_pages() {
        let z = Zeroed::new(MAP_MIN / 4);
        assert_eq!(z.as_ptr() as usize % HUGE, 0);
        assert!(z.iter().all(|&w| w == 0));
        let mut v: FixedVec<[u64; 4]> = FixedVec::with_capacity(MAP_MIN / 32 + 1);
        v.push([1; 4]);
        assert_eq!(v.as_ptr() as usize % HUGE, 0);
        assert!(v.cap > MAP_MIN / 32);
        assert_eq!(v.first(), Some(&[1; 4]));
    }

    /// The tests that turn prefaulting on, one at a time.
    static PREFAULT_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    #[cfg(target_os = "linux")]
    fn a_lazy_table_is_not_made_resident_even_with_prefault() {
        let _one = PREFAULT_TESTS.lock();
        set_prefault(true);
        let z = Zeroed::lazy(MAP_MIN / 4);
        set_prefault(false);
        assert_eq!(resident_pages(z.as_ptr(), MAP_MIN), 0);
        assert!(z.iter().take(1000).all(|&w| w == 0));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn populate_and_release_move_pages_in_and_out_keeping_contents() {
        // A growing table prepared ahead of use, then given back piece by piece.
        let mut z = Zeroed::lazy(MAP_MIN / 4);
        z[5000] = 7;
        assert_eq!(resident_pages(z.as_ptr(), MAP_MIN), 1);
        // Pages 1..3 (elements 1024..4096) plus the one holding 5000, already in.
        z.populate(1024, 4096);
        assert_eq!(resident_pages(z.as_ptr(), MAP_MIN), 4);
        assert_eq!((z[5000], z[1024]), (7, 0), "contents unchanged");
        // Only whole pages inside the range go: 1000..6000 holds pages 1..4 whole.
        z.release(1000, 6000);
        assert_eq!(resident_pages(z.as_ptr(), MAP_MIN), 0);
        assert_eq!(z[5000], 0, "a released page reads as zero");
        // A heap table (under MAP_MIN) takes the same calls, contents unchanged.
        let mut h = Zeroed::lazy(4096);
        h[3] = 9;
        h.populate(0, 4096);
        h.release(0, 4096);
        assert_eq!(h[3], 9, "a heap table keeps its memory");
    }

    /// Pages of `[p, p + len)` resident in memory, by mincore(2).
    #[cfg(target_os = "linux")]
    fn resident_pages(p: *const u32, len: usize) -> usize {
        let pages = len.div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: `p` is the page-aligned start of a mapping of at least `len` bytes, `vec`
        // has one byte per page.
        let r = unsafe { libc::mincore(p as *mut libc::c_void, len, vec.as_mut_ptr()) };
        assert_eq!(r, 0);
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn prefault_makes_a_large_table_resident_when_mapped() {
        // Process-wide: another test mapping a table meanwhile only gets resident pages.
        let _one = PREFAULT_TESTS.lock();
        set_prefault(true);
        let z = Zeroed::new(MAP_MIN / 4);
        set_prefault(false);
        let len = MAP_MIN;
        assert_eq!(resident_pages(z.as_ptr(), len), len / 4096);
        assert!(z.iter().all(|&w| w == 0));
    }
}
