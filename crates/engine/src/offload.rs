//! Session recipes for a fast path (issue 6: XDP applies them in the kernel).
//!
//! The engine stays the only authority over sessions. When the daemon enables offload
//! ([`crate::Engine::set_offload`]), a session simple enough to be rewritten without the engine
//! -- NAT44 UDP, NAT44 TCP in the established state (RFC 6146 3.5.2.2), not hairpinned --
//! yields one [`Recipe`] per direction: the tuple its packets carry on arrival, the tuple to
//! write, and the RFC 1624 checksum adjustments, which are constant per session because the
//! rewrite is. The daemon drains [`OffloadOp`]s after each batch and installs or withdraws the
//! recipes; a fast path applies them to established packets only and hands everything else
//! (TCP SYN/FIN/RST, fragments, options, ICMP, misses) to the engine as before.
//!
//! Expiry: a fast path stamps when a recipe last matched. A session the engine would expire
//! is not removed at once: the engine emits [`OffloadKind::Query`] and the daemon answers
//! with the stamps ([`crate::Engine::offload_seen`]); the engine then refreshes the session
//! (RFC 4787 REQ-6 / RFC 6146 3.5.2.2 refresh rules: outbound always, inbound where they
//! allow) or removes it and withdraws its recipes. Timeouts are minimums (RFC 4787 REQ-5):
//! a session may outlive its timeout by the time the sweep takes to reach it, never less.
//!
//! [`apply`] is the reference model of what a fast path does with a recipe; the tests check
//! it against the engine's own translation, and the XDP program (crates/xdp) follows it.

use xlat_wire::field::{set_u16, set_u32, set_u8, u16_at, u32_at, u8_at};
use xlat_wire::ipv4::{off as ip4off, proto as ipproto};
use xlat_wire::l4::{tcp, udp};
use xlat_wire::Delta;

use crate::napt::{Endpoint, Proto};

/// An IPv4 transport tuple as a packet carries it (host byte order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple4 {
    /// IP protocol number (TCP 6, UDP 17).
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
}

/// What a fast path does to a packet whose tuple is `key`: write `new`, decrement the TTL,
/// add `ip_delta` and `l4_delta` to the checksums (RFC 1624 eqn. 3: `~(~HC + delta)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recipe {
    pub key: Tuple4,
    pub new: Tuple4,
    /// Adjustment of the IPv4 header checksum: addresses and the TTL decrement.
    pub ip_delta: u16,
    /// Adjustment of the TCP/UDP checksum: pseudo-header addresses and ports.
    pub l4_delta: u16,
}

/// What the daemon must do with a session's recipes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadKind {
    /// Install both recipes (replacing any with the same keys).
    Install,
    /// Withdraw both recipes.
    Remove,
    /// Read when each recipe last matched and answer with [`crate::Engine::offload_seen`].
    Query,
}

/// One instruction for the fast path: a session's two recipes and what to do with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadOp {
    pub kind: OffloadKind,
    /// Names the session in [`crate::Engine::offload_seen`].
    pub token: u64,
    /// Inside to outside.
    pub out: Recipe,
    /// Outside to inside.
    pub inb: Recipe,
}

/// The TTL/protocol word drops by 0x0100 at a router hop (RFC 1812 5.3.1): ~m + m' with
/// m' = m - 0x0100 is the same whatever m is.
fn ttl_decrement() -> Delta {
    Delta::ZERO.word(0x0100, 0)
}

fn recipe(proto: u8, key: Tuple4, new: Tuple4) -> Recipe {
    let addrs = Delta::ZERO.addr(key.src, new.src).addr(key.dst, new.dst);
    Recipe {
        key,
        new,
        ip_delta: addrs.plus(ttl_decrement()).folded(),
        l4_delta: addrs
            .word(key.sport, new.sport)
            .word(key.dport, new.dport)
            .folded(),
    }
    .with_proto(proto)
}

impl Recipe {
    fn with_proto(mut self, proto: u8) -> Recipe {
        self.key.proto = proto;
        self.new.proto = proto;
        self
    }
}

/// The two recipes of a NAT44 NAPT session: `int` <-> `ext` towards `remote` (RFC 3022 4.1:
/// outbound rewrites the source, inbound the destination, with their checksums).
pub fn nat44_recipes(
    proto: Proto,
    int: Endpoint,
    ext: Endpoint,
    remote: Endpoint,
) -> (Recipe, Recipe) {
    let p = match proto {
        Proto::Tcp => ipproto::TCP,
        Proto::Udp => ipproto::UDP,
        Proto::Icmp => ipproto::ICMP,
    };
    let t = |src: Endpoint, dst: Endpoint| Tuple4 {
        proto: p,
        src: src.addr,
        dst: dst.addr,
        sport: src.port,
        dport: dst.port,
    };
    (
        recipe(p, t(int, remote), t(ext, remote)),
        recipe(p, t(remote, ext), t(remote, int)),
    )
}

/// The tuple of an IPv4 TCP/UDP packet a fast path would consider: no options, not a
/// fragment, TTL above 1, TCP without SYN/FIN/RST. `None` for anything else.
pub fn fast_tuple(pkt: &[u8]) -> Option<Tuple4> {
    let vihl = u8_at(pkt, 0)?;
    if vihl != 0x45 {
        return None;
    }
    if u16_at(pkt, ip4off::FLAGS_FRAG)? & 0x3fff != 0 || u8_at(pkt, ip4off::TTL)? <= 1 {
        return None;
    }
    let proto = u8_at(pkt, ip4off::PROTO)?;
    let l4 = 20;
    match proto {
        ipproto::TCP => {
            let flags = u8_at(pkt, l4 + tcp::FLAGS)?;
            if flags & (tcp::SYN | tcp::FIN | tcp::RST) != 0 {
                return None;
            }
            u16_at(pkt, l4 + tcp::CHECKSUM)?;
        }
        ipproto::UDP => {
            u16_at(pkt, l4 + udp::CHECKSUM)?;
        }
        _ => return None,
    }
    Some(Tuple4 {
        proto,
        src: u32_at(pkt, ip4off::SRC)?,
        dst: u32_at(pkt, ip4off::DST)?,
        sport: u16_at(pkt, l4)?,
        dport: u16_at(pkt, l4 + 2)?,
    })
}

/// Applies `r` to an IPv4 packet (no link header) the way the XDP program does; false (and
/// the packet untouched) when the packet is not one a fast path handles or not `r`'s.
pub fn apply(r: &Recipe, pkt: &mut [u8]) -> bool {
    if fast_tuple(pkt) != Some(r.key) {
        return false;
    }
    let (Some(ttl), Some(ipck)) = (u8_at(pkt, ip4off::TTL), u16_at(pkt, ip4off::CHECKSUM)) else {
        return false;
    };
    let ck_off = 20
        + match r.key.proto {
            ipproto::TCP => tcp::CHECKSUM,
            _ => udp::CHECKSUM,
        };
    let Some(l4ck) = u16_at(pkt, ck_off) else {
        return false;
    };
    let fold = |ck: u16, d: u16| -> u16 {
        let s = u32::from(!ck) + u32::from(d);
        let s = (s & 0xffff) + (s >> 16);
        let s = (s & 0xffff) + (s >> 16);
        !(s as u16)
    };
    let new_l4 = if r.key.proto == ipproto::UDP && l4ck == 0 {
        0
    } else {
        match fold(l4ck, r.l4_delta) {
            0 if r.key.proto == ipproto::UDP => 0xffff,
            c => c,
        }
    };
    set_u32(pkt, ip4off::SRC, r.new.src);
    set_u32(pkt, ip4off::DST, r.new.dst);
    set_u8(pkt, ip4off::TTL, ttl.saturating_sub(1));
    set_u16(pkt, ip4off::CHECKSUM, fold(ipck, r.ip_delta));
    set_u16(pkt, 20, r.new.sport);
    set_u16(pkt, 22, r.new.dport);
    set_u16(pkt, ck_off, new_l4);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat_wire::checksum;

    fn ep(a: [u8; 4], port: u16) -> Endpoint {
        Endpoint {
            addr: u32::from_be_bytes(a),
            port,
        }
    }

    /// A UDP or TCP packet with correct checksums.
    fn packet(proto: u8, src: Endpoint, dst: Endpoint, ttl: u8, payload: &[u8]) -> Vec<u8> {
        let l4len = if proto == ipproto::TCP { 20 } else { 8 };
        let total = 20 + l4len + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = ttl;
        p[9] = proto;
        p[12..16].copy_from_slice(&src.addr.to_be_bytes());
        p[16..20].copy_from_slice(&dst.addr.to_be_bytes());
        let ck = checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&ck.to_be_bytes());
        p[20..22].copy_from_slice(&src.port.to_be_bytes());
        p[22..24].copy_from_slice(&dst.port.to_be_bytes());
        if proto == ipproto::TCP {
            p[32] = 0x50;
            p[33] = 0x10; // ACK
        } else {
            p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        }
        p[20 + l4len..].copy_from_slice(payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, proto]);
        pseudo.extend_from_slice(&((l4len + payload.len()) as u16).to_be_bytes());
        let s = checksum::sum(&pseudo, 0);
        let s = checksum::sum(&p[20..], s);
        let ck = checksum::finish(s);
        let off = if proto == ipproto::TCP { 36 } else { 26 };
        p[off..off + 2].copy_from_slice(&ck.to_be_bytes());
        p
    }

    fn verifies(p: &[u8]) -> bool {
        let l4len = p.len() - 20;
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, p[9]]);
        pseudo.extend_from_slice(&(l4len as u16).to_be_bytes());
        let s = checksum::sum(&pseudo, 0);
        checksum::verifies(&p[..20]) && checksum::finish(checksum::sum(&p[20..], s)) == 0
    }

    #[test]
    fn recipes_rewrite_both_directions_with_valid_checksums() {
        let int = ep([198, 18, 0, 2], 40000);
        let ext = ep([198, 19, 0, 200], 1234);
        let remote = ep([198, 19, 0, 2], 53);
        for proto in [Proto::Udp, Proto::Tcp] {
            let p = if proto == Proto::Tcp { 6 } else { 17 };
            let (out, inb) = nat44_recipes(proto, int, ext, remote);
            let mut o = packet(p, int, remote, 64, b"hello, fast path");
            assert!(apply(&out, &mut o));
            assert_eq!(o, {
                let mut want = packet(p, ext, remote, 63, b"hello, fast path");
                want.truncate(o.len());
                want
            });
            assert!(verifies(&o));
            let mut i = packet(p, remote, ext, 9, b"reply");
            assert!(apply(&inb, &mut i));
            assert_eq!(i, packet(p, remote, int, 8, b"reply"));
            // Not this recipe's packet: untouched.
            let mut other = packet(p, remote, int, 9, b"x");
            let before = other.clone();
            assert!(!apply(&out, &mut other));
            assert_eq!(other, before);
        }
    }

    #[test]
    fn bad_checksums_stay_bad_and_zero_udp_checksum_stays_zero() {
        let int = ep([198, 18, 0, 2], 40000);
        let ext = ep([198, 19, 0, 200], 1234);
        let remote = ep([198, 19, 0, 2], 53);
        let (out, _) = nat44_recipes(Proto::Udp, int, ext, remote);
        let mut p = packet(17, int, remote, 64, b"abc");
        p[26] ^= 0x55;
        assert!(apply(&out, &mut p));
        assert!(!verifies(&p));
        let mut z = packet(17, int, remote, 64, b"abc");
        z[26] = 0;
        z[27] = 0;
        assert!(apply(&out, &mut z));
        assert_eq!(&z[26..28], &[0, 0]);
    }

    #[test]
    fn control_segments_fragments_options_and_low_ttl_are_not_fast() {
        let a = ep([198, 18, 0, 2], 1);
        let b = ep([198, 19, 0, 2], 2);
        let base = packet(6, a, b, 64, b"");
        assert!(fast_tuple(&base).is_some());
        for flag in [0x02u8, 0x01, 0x04] {
            let mut p = base.clone();
            p[33] = flag | 0x10;
            assert_eq!(fast_tuple(&p), None, "flag {flag:#x}");
        }
        let mut frag = base.clone();
        frag[6] = 0x20; // MF
        assert_eq!(fast_tuple(&frag), None);
        let mut opts = base.clone();
        opts[0] = 0x46;
        assert_eq!(fast_tuple(&opts), None);
        let mut ttl = base.clone();
        ttl[8] = 1;
        assert_eq!(fast_tuple(&ttl), None);
        assert_eq!(fast_tuple(&base[..30]), None);
    }
}
