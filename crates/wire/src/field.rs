//! Bounds-checked big-endian field access: readers return `None` past the end of the buffer,
//! writers do nothing there and say so (`false`, which must be used). The packet code uses
//! these instead of indexing, so that no offset computed from packet bytes can panic. Code
//! that writes several fields after one length check takes a fixed-size view instead
//! ([`chunk_mut`], `<[u8]>::first_chunk_mut`), whose writes cannot fail.

/// Reads one byte at `off`.
#[inline]
pub fn u8_at(b: &[u8], off: usize) -> Option<u8> {
    b.get(off).copied()
}

/// Reads a big-endian u16 at `off`.
#[inline]
pub fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    match b.get(off..off.checked_add(2)?) {
        Some(&[x, y]) => Some(u16::from_be_bytes([x, y])),
        _ => None,
    }
}

/// Reads a big-endian u32 at `off`.
#[inline]
pub fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    match b.get(off..off.checked_add(4)?) {
        Some(&[w, x, y, z]) => Some(u32::from_be_bytes([w, x, y, z])),
        _ => None,
    }
}

/// Writes a big-endian u16 at `off`; returns false (and writes nothing) if it does not fit.
#[inline]
#[must_use = "false means nothing was written: the buffer is too short"]
pub fn set_u16(b: &mut [u8], off: usize, v: u16) -> bool {
    match off.checked_add(2).and_then(|end| b.get_mut(off..end)) {
        Some(s) => {
            s.copy_from_slice(&v.to_be_bytes());
            true
        }
        None => false,
    }
}

/// Writes a big-endian u32 at `off`; returns false (and writes nothing) if it does not fit.
#[inline]
#[must_use = "false means nothing was written: the buffer is too short"]
pub fn set_u32(b: &mut [u8], off: usize, v: u32) -> bool {
    match off.checked_add(4).and_then(|end| b.get_mut(off..end)) {
        Some(s) => {
            s.copy_from_slice(&v.to_be_bytes());
            true
        }
        None => false,
    }
}

/// Writes one byte at `off`; returns false if it does not fit.
#[inline]
#[must_use = "false means nothing was written: the buffer is too short"]
pub fn set_u8(b: &mut [u8], off: usize, v: u8) -> bool {
    match b.get_mut(off) {
        Some(x) => {
            *x = v;
            true
        }
        None => false,
    }
}

/// The `N` bytes at `off` as a fixed-size array, whose fields can then be written without a
/// check each; `None` if they do not fit.
#[inline]
pub fn chunk_mut<const N: usize>(b: &mut [u8], off: usize) -> Option<&mut [u8; N]> {
    b.get_mut(off..)?.first_chunk_mut::<N>()
}
