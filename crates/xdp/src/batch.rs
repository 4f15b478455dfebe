//! Batched BPF hash-map writes: `BPF_MAP_UPDATE_BATCH` and `BPF_MAP_DELETE_BATCH` through the
//! bpf(2) system call (Linux >= 5.6), which aya 0.14 does not wrap.
//!
//! The daemon installs two recipes for every new session; one `BPF_MAP_UPDATE_ELEM` each cost
//! a system call per recipe on the packet workers' path (issue 25: with the fast path on, the
//! new-session rate halved). With these, the recipes of a whole batch of packets go into a map
//! in one call. The kernel applies the elements in order and stops at the first one it
//! refuses (a full table: `E2BIG`; a key not present on delete: `ENOENT`), telling how many it
//! applied; [`Batch::flush`] then counts that element as failed and goes on from the next one,
//! so a refused element costs one more call and never blocks the others.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Commands of `enum bpf_cmd` (include/uapi/linux/bpf.h).
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;
/// The kernel's ENOTSUPP (not in libc): a map type without batch operations.
const ENOTSUPP: i32 = 524;

/// The `batch` member of `union bpf_attr` (include/uapi/linux/bpf.h, "struct used by
/// BPF_MAP_*_BATCH commands"). The kernel reads `size_of::<BatchAttr>()` bytes and treats the
/// rest of its union as zero.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    /// In: elements in `keys` (and `values`); out: elements the kernel applied.
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// The anonymous member of `union bpf_attr` used by `BPF_MAP_*_ELEM`.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

const _: () = assert!(size_of::<BatchAttr>() == 56 && size_of::<ElemAttr>() == 32);

/// One element the old way (a kernel without batch operations for this map): `value` null
/// for a deletion. True if the kernel applied it.
///
/// # Safety
/// `key` (and `value`, unless null) must point to one key (value) of the map's sizes.
unsafe fn bpf_elem(map: BorrowedFd<'_>, key: *const u8, value: *const u8) -> bool {
    let cmd = if value.is_null() {
        BPF_MAP_DELETE_ELEM
    } else {
        BPF_MAP_UPDATE_ELEM
    };
    let mut attr = ElemAttr {
        map_fd: u32::try_from(map.as_raw_fd()).unwrap_or(u32::MAX),
        key: key as u64,
        value: value as u64,
        ..ElemAttr::default()
    };
    // SAFETY: `attr` is a valid element attribute of the size passed; the kernel reads one
    // key and value through the pointers, which the caller vouches for.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            &mut attr as *mut ElemAttr,
            size_of::<ElemAttr>() as libc::c_uint,
        )
    };
    r == 0
}

/// Calls bpf(2) with `cmd` over `count` keys (and values, for updates) of `map`; returns the
/// elements applied, and the error that stopped the kernel early, if any.
///
/// # Safety
/// `keys` must point to `count` keys and `values`, unless null, to `count` values, each of the
/// map's key and value size, readable for the duration of the call.
unsafe fn bpf_batch(
    cmd: libc::c_long,
    map: BorrowedFd<'_>,
    keys: *const u8,
    values: *const u8,
    count: u32,
) -> (u32, Option<io::Error>) {
    let mut attr = BatchAttr {
        keys: keys as u64,
        values: values as u64,
        count,
        map_fd: u32::try_from(map.as_raw_fd()).unwrap_or(u32::MAX),
        ..BatchAttr::default()
    };
    // SAFETY: `attr` is a valid, writable `batch` attribute of the size passed; the kernel
    // reads `count` keys and values through the pointers, which the caller vouches for, and
    // writes back only `attr.count`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            &mut attr as *mut BatchAttr,
            size_of::<BatchAttr>() as libc::c_uint,
        )
    };
    if r == 0 {
        (count, None)
    } else {
        // On an error the kernel has set `count` to the elements it applied (it is left as
        // given when it failed before the first one: clamp).
        (attr.count.min(count), Some(io::Error::last_os_error()))
    }
}

/// What one [`Batch::flush`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Elements written (updates) or removed (deletes).
    pub done: u64,
    /// Elements the kernel refused (updates: a full table; deletes: no such key).
    pub failed: u64,
    /// bpf(2) calls made.
    pub calls: u64,
}

/// Keys (and values) waiting to be written to, or deleted from, one BPF hash map in one
/// system call. `K` and `V` must be the map's key and value types (`#[repr(C)]`, no
/// padding the kernel would read as garbage): the caller pairs a batch with the map
/// whose types aya checked at load time.
pub struct Batch<K, V> {
    keys: Vec<K>,
    values: Vec<V>,
    delete: bool,
}

impl<K: Copy, V: Copy> Batch<K, V> {
    /// An empty batch of updates (`delete` false) or deletions.
    pub fn new(delete: bool) -> Batch<K, V> {
        Batch {
            keys: Vec::new(),
            values: Vec::new(),
            delete,
        }
    }

    /// Adds an update (the batch must be one of updates).
    pub fn update(&mut self, key: K, value: V) {
        debug_assert!(!self.delete);
        self.keys.push(key);
        self.values.push(value);
    }

    /// Adds a deletion (the batch must be one of deletions).
    pub fn delete(&mut self, key: K) {
        debug_assert!(self.delete);
        self.keys.push(key);
    }

    /// Elements waiting.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Applies what waits to `map` (whose key and value types are `K` and `V`) in as few
    /// bpf(2) calls as the kernel allows -- one when it accepts every element -- and empties
    /// the batch. Bounded: at most one call per element.
    pub fn flush(&mut self, map: BorrowedFd<'_>) -> Flushed {
        let mut out = Flushed::default();
        let n = self.keys.len();
        let mut at = 0usize;
        while at < n {
            let rest = u32::try_from(n - at).unwrap_or(u32::MAX);
            let (cmd, values) = if self.delete {
                (BPF_MAP_DELETE_BATCH, std::ptr::null())
            } else {
                (
                    BPF_MAP_UPDATE_BATCH,
                    self.values[at..].as_ptr().cast::<u8>(),
                )
            };
            // SAFETY: `keys[at..]` (and `values[at..]`, as long) hold `rest` elements of the
            // map's key and value types (the caller's contract above), alive until we return.
            let (applied, err) =
                unsafe { bpf_batch(cmd, map, self.keys[at..].as_ptr().cast(), values, rest) };
            out.calls += 1;
            out.done += u64::from(applied);
            at += applied as usize;
            let Some(err) = err else { break };
            if applied == 0 && unsupported(&err) {
                // No batch operations here (Linux < 5.6, or this map type): one call each.
                self.one_by_one(map, at, &mut out);
                break;
            }
            // The element at `at` was refused: count it and go on after it.
            out.failed += 1;
            at += 1;
        }
        self.keys.clear();
        self.values.clear();
        out
    }

    /// Applies the elements from `at` on with one bpf(2) call each.
    fn one_by_one(&self, map: BorrowedFd<'_>, at: usize, out: &mut Flushed) {
        for (i, k) in self.keys.iter().enumerate().skip(at) {
            let v = if self.delete {
                std::ptr::null()
            } else {
                match self.values.get(i) {
                    Some(v) => (v as *const V).cast::<u8>(),
                    None => break,
                }
            };
            // SAFETY: `k` and `v` point to one key and value of the map's types.
            let ok = unsafe { bpf_elem(map, (k as *const K).cast(), v) };
            out.calls += 1;
            if ok {
                out.done += 1;
            } else {
                out.failed += 1;
            }
        }
    }
}

/// Errors that mean "no batch operations", not "this element".
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | ENOTSUPP)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    /// A BPF hash map of u32 -> u64 with `max` entries (BPF_MAP_CREATE), or None where this
    /// process may not create one (not root, no BPF).
    fn hash_map(max: u32) -> Option<OwnedFd> {
        #[repr(C)]
        struct Create {
            map_type: u32,
            key_size: u32,
            value_size: u32,
            max_entries: u32,
            map_flags: u32,
        }
        let mut attr = Create {
            map_type: 1, // BPF_MAP_TYPE_HASH
            key_size: 4,
            value_size: 8,
            max_entries: max,
            map_flags: 1, // BPF_F_NO_PREALLOC, as the recipe maps
        };
        // SAFETY: `attr` is a valid map-create attribute of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                0 as libc::c_long, // BPF_MAP_CREATE
                &mut attr as *mut Create,
                size_of::<Create>() as libc::c_uint,
            )
        };
        // SAFETY: a non-negative return is a new file descriptor we own.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// The value of `key`, by BPF_MAP_LOOKUP_ELEM.
    fn get(map: BorrowedFd<'_>, key: u32) -> Option<u64> {
        let mut v = 0u64;
        let mut attr = ElemAttr {
            map_fd: map.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &mut v as *mut u64 as u64,
            ..ElemAttr::default()
        };
        // SAFETY: key and value point to a u32 and a u64, the map's sizes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                1 as libc::c_long, // BPF_MAP_LOOKUP_ELEM
                &mut attr as *mut ElemAttr,
                size_of::<ElemAttr>() as libc::c_uint,
            )
        };
        (r == 0).then_some(v)
    }

    /// Needs root (a real BPF map): run by scripts/test.sh, fails elsewhere.
    #[test]
    #[ignore = "needs root: scripts/test.sh"]
    fn batches_write_and_delete_in_one_call_and_skip_refused_elements() {
        let map = hash_map(8).unwrap_or_else(|| {
            panic!("cannot create a BPF map here (needs root: scripts/test.sh)")
        });
        let fd = map.as_fd();
        let mut up: Batch<u32, u64> = Batch::new(false);
        for k in 1..=6u32 {
            up.update(k, u64::from(k) * 10);
        }
        let f = up.flush(fd);
        assert_eq!(
            f,
            Flushed {
                done: 6,
                failed: 0,
                calls: 1
            }
        );
        assert!(up.is_empty());
        assert_eq!(get(fd, 4), Some(40));
        // Full table: 8 entries; keys 7..=10 are new (two refused), 3 is replaced.
        for k in [7u32, 8, 9, 3, 10] {
            up.update(k, u64::from(k) + 1);
        }
        let f = up.flush(fd);
        assert_eq!((f.done, f.failed), (3, 2));
        assert!(f.calls <= 3, "{f:?}");
        assert_eq!(get(fd, 3), Some(4), "a replacement is accepted when full");
        assert_eq!(get(fd, 9), None);
        // Deletions: one absent key in the middle is skipped, the rest go.
        let mut del: Batch<u32, ()> = Batch::new(true);
        for k in [1u32, 2, 9, 4] {
            del.delete(k);
        }
        let f = del.flush(fd);
        assert_eq!((f.done, f.failed), (3, 1));
        assert_eq!(get(fd, 1), None);
        assert_eq!(get(fd, 4), None);
        assert_eq!(get(fd, 5), Some(50));
        // An empty flush makes no call.
        assert_eq!(del.flush(fd), Flushed::default());
    }
}
