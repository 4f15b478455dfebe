//! ICMP extensions (RFC 4884) on the errors the translator translates (RFC 7915 4.2, 5.2).
//!
//! RFC 4884 4 gives ICMPv4 Destination Unreachable, Time Exceeded and Parameter Problem a
//! length attribute in their sixth octet (the original datagram field's length in 32-bit
//! words), ICMPv6 Destination Unreachable and Time Exceeded one in their fifth (in 64-bit
//! words). When an ICMP Extension Structure follows the original datagram field, the field is
//! zero-padded to that boundary and holds at least 128 octets (RFC 4884 5). Translating the
//! quoted packet changes the field's length by the 20 bytes the header grows or shrinks by,
//! so the translator takes the extension structure off, translates the error, pads the new
//! field to the other family's boundary (at least 128 octets), puts the structure back after
//! it, and writes the new length attribute -- the adjustment RFC 7915 4.2 and 5.2 ask for.
//! The structure itself (its own checksum covers only it) travels unchanged. Where it cannot
//! follow -- the new type has no length attribute (Packet Too Big, ICMPv6 Parameter Problem),
//! or the error would outgrow its size limit -- it is left off and the attribute is 0, as an
//! error without extensions has it.

use xlat_wire::field::u8_at;
use xlat_wire::PacketBuf;

/// The most extension bytes carried over (an error is at most 1280 bytes, RFC 4443 2.4 c).
const MAX: usize = 1024;

/// RFC 4884 5: the original datagram field holds at least this much when extensions follow.
const MIN_FIELD: usize = 128;

/// The length attribute of one family's errors: where it is in the ICMP header, its unit,
/// and the types that have it.
#[derive(Clone, Copy)]
pub(crate) struct Attr {
    at: usize,
    unit: usize,
    types: &'static [u8],
}

/// ICMPv4 (RFC 4884 4.1-4.3): octet 6 (index 5), 32-bit words; types 3, 11, 12.
pub(crate) const V4: Attr = Attr {
    at: 5,
    unit: 4,
    types: &[3, 11, 12],
};

/// ICMPv6 (RFC 4884 4.4-4.5): octet 5 (index 4), 64-bit words; types 1 and 3.
pub(crate) const V6: Attr = Attr {
    at: 4,
    unit: 8,
    types: &[1, 3],
};

impl Attr {
    /// True when type `t` carries a length attribute.
    pub(crate) fn has(&self, t: u8) -> bool {
        self.types.contains(&t)
    }
}

/// An extension structure taken off an error.
pub(crate) struct Saved {
    bytes: [u8; MAX],
    len: usize,
}

/// Takes the extension structure off the ICMP error whose header starts at `msg` in `buf`
/// (the message runs to the end of `buf`), if its length attribute says one follows the
/// original datagram field: the structure is saved and `buf` ends with the field. `None`,
/// with `buf` unchanged, when there is none (attribute 0, a type without one, or a field
/// shorter than RFC 4884 allows).
pub(crate) fn take(buf: &mut PacketBuf, msg: usize, a: Attr) -> Option<Saved> {
    let d = buf.data();
    if !a.has(u8_at(d, msg)?) {
        return None;
    }
    let words = usize::from(u8_at(d, msg + a.at)?);
    let field = words * a.unit;
    let start = msg + 8 + field;
    // An extension header (4 octets) must fit after a field of at least 128 octets.
    if words == 0 || field < MIN_FIELD || d.len() < start + 4 {
        return None;
    }
    let ext = d.get(start..)?;
    let mut s = Saved {
        bytes: [0; MAX],
        len: ext.len(),
    };
    s.bytes.get_mut(..ext.len())?.copy_from_slice(ext);
    buf.truncate(start);
    Some(s)
}

/// Puts `s` back after the translated original datagram field, which starts at `field` and
/// runs to the end of `buf`: the field zero-padded to `a`'s unit and to at least 128 octets,
/// then the structure, if the whole stays within `limit` bytes and the attribute fits its
/// octet. Returns the length attribute to write (0: the structure was left off).
pub(crate) fn put(buf: &mut PacketBuf, field: usize, a: Attr, s: &Saved, limit: usize) -> u8 {
    let Some(have) = buf.len().checked_sub(field) else {
        return 0;
    };
    let padded = have.div_ceil(a.unit).max(MIN_FIELD / a.unit) * a.unit;
    let Ok(attr) = u8::try_from(padded / a.unit) else {
        return 0;
    };
    let end = field + padded + s.len;
    if end > limit || !buf.set_len(end) {
        return 0;
    }
    let ok = buf
        .data_mut()
        .get_mut(field + have..end)
        .and_then(|tail| tail.split_at_mut_checked(padded - have))
        .zip(s.bytes.get(..s.len))
        .is_some_and(|((pad, out), ext)| {
            pad.fill(0);
            out.len() == ext.len() && {
                out.copy_from_slice(ext);
                true
            }
        });
    if ok {
        attr
    } else {
        // Back to the length it had (shorter than `end`).
        buf.truncate(field + have);
        0
    }
}
