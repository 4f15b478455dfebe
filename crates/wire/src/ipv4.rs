//! The IPv4 header (RFC 791 3.1): a validated, copied-out summary plus in-place setters.

use crate::checksum;
use crate::field::u8_at;

/// Offsets of IPv4 header fields (RFC 791 3.1).
pub mod off {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTO: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// Minimum IPv4 header length in bytes.
pub const MIN_HEADER: usize = 20;

/// IP protocol numbers the translators look at (IANA "Assigned Internet Protocol Numbers").
pub mod proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
}

/// Why bytes are not a usable IPv4 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipv4Error {
    /// Fewer than 20 bytes.
    Truncated,
    /// The version nibble is not 4.
    Version(u8),
    /// IHL below 5 or past the end of the buffer.
    BadIhl,
    /// Total length below the header length or past the end of the buffer.
    BadTotalLength,
    /// The header checksum does not verify.
    BadChecksum,
}

/// A validated IPv4 header, copied out of the packet (it is `Copy`, 24 bytes).
///
/// After [`Ipv4Header::parse`] succeeds, `header_len <= total_len <= buffer length`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Header {
    pub header_len: usize,
    pub total_len: usize,
    /// Type of service / DSCP and ECN (RFC 2474, RFC 3168).
    pub tos: u8,
    pub ident: u16,
    /// Fragment offset in 8-byte units.
    pub frag_offset: u16,
    pub more_fragments: bool,
    pub dont_fragment: bool,
    pub ttl: u8,
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
}

impl Ipv4Header {
    /// Validates and reads the header at the start of `b` (RFC 791 3.1; RFC 1812 5.2.2).
    /// With `verify_checksum`, a header whose checksum does not verify is rejected.
    #[inline]
    pub fn parse(b: &[u8], verify_checksum: bool) -> Result<Self, Ipv4Error> {
        // One bounds check for the fixed header; the fields below index a [u8; 20].
        let Some(f) = b.first_chunk::<MIN_HEADER>() else {
            return Err(Ipv4Error::Truncated);
        };
        let ver_ihl = f[off::VER_IHL];
        if ver_ihl >> 4 != 4 {
            return Err(Ipv4Error::Version(ver_ihl >> 4));
        }
        let header_len = usize::from(ver_ihl & 0x0f) * 4;
        if header_len < MIN_HEADER || header_len > b.len() {
            return Err(Ipv4Error::BadIhl);
        }
        let total_len = usize::from(u16::from_be_bytes([f[2], f[3]]));
        if total_len < header_len || total_len > b.len() {
            return Err(Ipv4Error::BadTotalLength);
        }
        if verify_checksum {
            let hdr = b.get(..header_len).ok_or(Ipv4Error::BadIhl)?;
            if !checksum::verifies(hdr) {
                return Err(Ipv4Error::BadChecksum);
            }
        }
        let ff = u16::from_be_bytes([f[6], f[7]]);
        Ok(Ipv4Header {
            header_len,
            total_len,
            tos: f[off::TOS],
            ident: u16::from_be_bytes([f[4], f[5]]),
            frag_offset: ff & 0x1fff,
            more_fragments: ff & 0x2000 != 0,
            dont_fragment: ff & 0x4000 != 0,
            ttl: f[off::TTL],
            proto: f[off::PROTO],
            src: u32::from_be_bytes([f[12], f[13], f[14], f[15]]),
            dst: u32::from_be_bytes([f[16], f[17], f[18], f[19]]),
        })
    }

    /// True for any fragment (first, middle or last).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments || self.frag_offset != 0
    }

    /// True for a fragment that is not the first one (carries no transport header).
    pub fn is_later_fragment(&self) -> bool {
        self.frag_offset != 0
    }

    /// Payload length in bytes (total length minus header length).
    pub fn payload_len(&self) -> usize {
        self.total_len.saturating_sub(self.header_len)
    }
}

/// Rewrites the source address in place and returns the checksum delta of that change;
/// the IPv4 header checksum is updated incrementally (RFC 1624). A buffer shorter than the
/// 20-byte header is left alone (delta zero): the callers parsed the header first.
pub fn rewrite_src(b: &mut [u8], new: u32) -> crate::Delta {
    let Some(h) = b.first_chunk_mut::<MIN_HEADER>() else {
        return crate::Delta::ZERO;
    };
    let [.., c0, c1, s0, s1, s2, s3, _, _, _, _] = h;
    rewrite_addr([c0, c1], [s0, s1, s2, s3], new)
}

/// Rewrites the destination address in place; see [`rewrite_src`].
pub fn rewrite_dst(b: &mut [u8], new: u32) -> crate::Delta {
    let Some(h) = b.first_chunk_mut::<MIN_HEADER>() else {
        return crate::Delta::ZERO;
    };
    let [.., c0, c1, _, _, _, _, d0, d1, d2, d3] = h;
    rewrite_addr([c0, c1], [d0, d1, d2, d3], new)
}

/// The address bytes `a` become `new`, the checksum bytes `ck` follow (RFC 1624).
#[inline]
fn rewrite_addr(ck: [&mut u8; 2], a: [&mut u8; 4], new: u32) -> crate::Delta {
    let [a0, a1, a2, a3] = a;
    let old = u32::from_be_bytes([*a0, *a1, *a2, *a3]);
    let d = crate::Delta::ZERO.addr(old, new);
    [*a0, *a1, *a2, *a3] = new.to_be_bytes();
    let [c0, c1] = ck;
    [*c0, *c1] = d.apply(u16::from_be_bytes([*c0, *c1])).to_be_bytes();
    d
}

/// Computes and writes the header checksum over `header_len` bytes (for headers we build);
/// a buffer shorter than `header_len`, or a `header_len` below 20, is left alone.
pub fn fill_checksum(b: &mut [u8], header_len: usize) {
    let Some((fixed, options)) = b
        .get_mut(..header_len)
        .and_then(|h| h.split_first_chunk_mut::<MIN_HEADER>())
    else {
        return;
    };
    [fixed[off::CHECKSUM], fixed[off::CHECKSUM + 1]] = [0, 0];
    let c = checksum::finish(checksum::sum(options, checksum::sum(fixed, 0)));
    [fixed[off::CHECKSUM], fixed[off::CHECKSUM + 1]] = c.to_be_bytes();
}

/// The fields of a 20-byte IPv4 header (no options) to write with [`write_header`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Fields {
    pub tos: u8,
    pub total_len: u16,
    pub ident: u16,
    pub dont_fragment: bool,
    pub more_fragments: bool,
    /// Fragment offset in 8-byte units.
    pub frag_offset: u16,
    pub ttl: u8,
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
}

/// The 20-byte IPv4 header of `f` with its checksum (for a packet being built).
pub fn header(f: &Ipv4Fields) -> [u8; MIN_HEADER] {
    let flags = (u16::from(f.dont_fragment) << 14)
        | (u16::from(f.more_fragments) << 13)
        | (f.frag_offset & 0x1fff);
    let [t0, t1] = f.total_len.to_be_bytes();
    let [i0, i1] = f.ident.to_be_bytes();
    let [f0, f1] = flags.to_be_bytes();
    let [s0, s1, s2, s3] = f.src.to_be_bytes();
    let [d0, d1, d2, d3] = f.dst.to_be_bytes();
    let mut h = [
        0x45, f.tos, t0, t1, i0, i1, f0, f1, f.ttl, f.proto, 0, 0, s0, s1, s2, s3, d0, d1, d2, d3,
    ];
    [h[off::CHECKSUM], h[off::CHECKSUM + 1]] = checksum::checksum(&h).to_be_bytes();
    h
}

/// Writes [`header`] at the start of `b`; false (nothing written) if `b` is shorter.
#[must_use = "false means nothing was written: the buffer is too short"]
pub fn write_header(b: &mut [u8], f: &Ipv4Fields) -> bool {
    let Some(h) = b.first_chunk_mut::<MIN_HEADER>() else {
        return false;
    };
    *h = header(f);
    true
}

/// IPv4 options (RFC 791 3.1) that matter to a translator.
pub mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    /// Loose Source and Record Route.
    pub const LSRR: u8 = 131;
    /// Strict Source and Record Route.
    pub const SSRR: u8 = 137;
}

/// True when the options of the header in `b` (IHL > 5) hold a source route option (LSRR or
/// SSRR) that is not yet exhausted: its pointer still points into its address list (RFC 791
/// 3.1). Malformed options end the scan.
pub fn has_unexpired_source_route(b: &[u8], header_len: usize) -> bool {
    let mut at = MIN_HEADER;
    while at < header_len {
        let Some(kind) = u8_at(b, at) else {
            return false;
        };
        match kind {
            option::END => return false,
            option::NOP => {
                at += 1;
                continue;
            }
            _ => {}
        }
        let Some(len) = u8_at(b, at + 1).map(usize::from) else {
            return false;
        };
        if len < 2 || at + len > header_len {
            return false;
        }
        if kind == option::LSRR || kind == option::SSRR {
            // The pointer (third byte, 1-based, minimum 4) is past the list when the route is
            // exhausted: pointer > length.
            if u8_at(b, at + 2).is_some_and(|p| usize::from(p) <= len) {
                return true;
            }
        }
        at += len;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 28, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 10, 198, 19, 0, 2, 0x30,
            0x39, 0, 53, 0, 8, 0, 0,
        ];
        fill_checksum(&mut p, 20);
        p
    }

    #[test]
    fn parses_and_validates() {
        let p = sample();
        let h = Ipv4Header::parse(&p, true).unwrap();
        assert_eq!(h.header_len, 20);
        assert_eq!(h.total_len, 28);
        assert!(h.dont_fragment);
        assert_eq!(h.src, u32::from_be_bytes([198, 18, 0, 10]));
    }

    #[test]
    fn rejects_malformed() {
        let p = sample();
        assert_eq!(Ipv4Header::parse(&p[..19], true), Err(Ipv4Error::Truncated));
        let mut q = p.clone();
        q[0] = 0x44;
        assert_eq!(Ipv4Header::parse(&q, false), Err(Ipv4Error::BadIhl));
        let mut q = p.clone();
        q[0] = 0x4f;
        assert_eq!(Ipv4Header::parse(&q, false), Err(Ipv4Error::BadIhl));
        let mut q = p.clone();
        q[3] = 29;
        assert_eq!(Ipv4Header::parse(&q, false), Err(Ipv4Error::BadTotalLength));
        let mut q = p.clone();
        q[3] = 19;
        assert_eq!(Ipv4Header::parse(&q, false), Err(Ipv4Error::BadTotalLength));
        let mut q = p.clone();
        q[8] = 1;
        assert_eq!(Ipv4Header::parse(&q, true), Err(Ipv4Error::BadChecksum));
        let mut q = p;
        q[0] = 0x65;
        assert_eq!(Ipv4Header::parse(&q, true), Err(Ipv4Error::Version(6)));
    }

    #[test]
    fn writes_a_valid_header() {
        let mut b = [0u8; 28];
        let f = Ipv4Fields {
            tos: 0x28,
            total_len: 28,
            ident: 0x1234,
            dont_fragment: false,
            more_fragments: true,
            frag_offset: 3,
            ttl: 63,
            proto: 17,
            src: 0xc6120014,
            dst: 0xc6130002,
        };
        assert!(write_header(&mut b, &f));
        let h = Ipv4Header::parse(&b, true).unwrap();
        assert_eq!(
            (h.ident, h.frag_offset, h.more_fragments, h.dont_fragment),
            (0x1234, 3, true, false)
        );
        assert_eq!(
            (h.ttl, h.proto, h.src, h.dst),
            (63, 17, 0xc6120014, 0xc6130002)
        );
        assert!(!write_header(&mut b[..19], &f));
    }

    #[test]
    fn source_route_options() {
        let mut p = vec![
            0x47, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        // NOP, LSRR len 7 pointer 4 (one address left), END
        p.extend_from_slice(&[1, 131, 7, 4, 9, 9, 9, 9, 0, 0, 0, 0]);
        p.truncate(28);
        assert!(has_unexpired_source_route(&p, 28));
        p[23] = 8; // pointer past the list: exhausted
        assert!(!has_unexpired_source_route(&p, 28));
        p[23] = 4;
        p[22] = 7 + 30; // length beyond the header: malformed, not a route
        assert!(!has_unexpired_source_route(&p, 28));
    }

    #[test]
    fn rewrite_keeps_checksum_valid() {
        let mut p = sample();
        rewrite_src(&mut p, u32::from_be_bytes([198, 19, 0, 100]));
        assert!(checksum::verifies(&p[..20]));
        assert_eq!(Ipv4Header::parse(&p, true).unwrap().src, 0xc6130064);
    }
}
