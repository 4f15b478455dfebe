//! IPv6 -> IPv4 (RFC 7915 5): the header translation both SIIT and NAT64 use.
//!
//! [`parse`] reads an IPv6 packet into [`In6`] (extension headers walked, transport part
//! examined); the translator decides the addresses (and ports); [`emit`] rewrites in place:
//!
//! - 5.1: the IPv6 header and the extension headers before the transport header become a
//!   20-byte IPv4 header (TOS = traffic class, TTL = hop limit - 1, identification 0 and DF
//!   set for unfragmented packets; Hop-by-Hop, Destination Options and Routing headers with
//!   Segments Left 0 are skipped).
//! - 5.1.1: a Fragment header becomes the IPv4 fragment fields (identification = its low 16
//!   bits, offset and MF copied, DF clear).
//! - 5.2: ICMPv6 echo becomes ICMPv4 echo; the checksum loses the IPv6 pseudo-header.
//! - 5.3: ICMPv6 errors become ICMPv4 errors (per [`super::icmp`]) with the quoted packet
//!   translated too (hop limit kept).
//! - 5.5: TCP and UDP checksums follow the pseudo-header change incrementally (RFC 1624).

use xlat_wire::checksum;
use xlat_wire::field::{chunk_mut, set_u16, set_u32, set_u8, u16_at, u32_at, u8_at};
use xlat_wire::ipv4::{self, proto as ipproto, Ipv4Fields};
use xlat_wire::ipv6::{self, addr4_sum, addr_sum, nh, Ipv6Header};
use xlat_wire::l4::{icmp, icmpv6, tcp, udp};
use xlat_wire::{Delta, PacketBuf};

use super::{ext, icmp as map, resize_front, Map, Ports};
use crate::config::XlatParams;
use crate::counters::{wrote, DropReason};
use crate::flow::Proto;
use crate::ipv4_id::Ipv4Ids;

/// An IPv6 packet, examined.
#[derive(Clone, Copy, Debug)]
pub(crate) struct In6 {
    pub h: Ipv6Header,
    pub kind: Kind6,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind6 {
    /// TCP, UDP or ICMPv6 echo; whole packet or first fragment.
    Flow(Ports),
    /// An ICMPv6 error (never a fragment).
    Error(Err6),
    /// A non-first fragment, or a protocol without ports: addresses only.
    Other,
}

/// An ICMPv6 error, mapped to ICMPv4, with the packet it quotes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Err6 {
    pub typ4: u8,
    pub code4: u8,
    /// ICMPv4 bytes 4-7 (MTU in the low 16 bits, or pointer in the first byte).
    pub rest4: u32,
    /// The quoted header, extension headers walked; offsets relative to its start.
    pub inner: Ipv6Header,
    pub inner_ports: Option<Ports>,
}

/// The IPv4 protocol a Next Header becomes (RFC 7915 5.1: ICMPv6 -> ICMPv4, others copied).
pub(crate) fn proto4(p: u8) -> u8 {
    if p == nh::ICMPV6 {
        ipproto::ICMP
    } else {
        p
    }
}

fn ports_of(proto: u8, l4: &[u8], whole: bool) -> Result<Option<Ports>, DropReason> {
    let (p, need) = match proto {
        nh::TCP => (Proto::Tcp, if whole { tcp::NEEDED } else { 4 }),
        nh::UDP => (Proto::Udp, if whole { udp::HEADER } else { 4 }),
        nh::ICMPV6 => (Proto::Icmp, icmpv6::HEADER),
        _ => return Ok(None),
    };
    if l4.len() < need {
        return Err(DropReason::TruncatedL4);
    }
    let rd = |off| u16_at(l4, off).ok_or(DropReason::TruncatedL4);
    let (src, dst) = match p {
        Proto::Icmp => {
            let id = rd(icmpv6::IDENT)?;
            (id, id)
        }
        _ => (rd(0)?, rd(2)?),
    };
    let flags = if p == Proto::Tcp {
        u8_at(l4, tcp::FLAGS).unwrap_or(0)
    } else {
        0
    };
    Ok(Some(Ports {
        proto: p,
        src,
        dst,
        flags,
    }))
}

/// Reads and checks an IPv6 packet for translation to IPv4 (RFC 7915 5).
#[inline(always)]
pub(crate) fn parse(pkt: &[u8], p: &XlatParams) -> Result<In6, DropReason> {
    let mut h = Ipv6Header::parse(pkt).map_err(DropReason::from)?;
    // RFC 6946 4: an atomic fragment (Fragment header with offset 0 and M clear) is processed
    // "in isolation from any other packets/fragments": it is a whole packet, translated as an
    // unfragmented one (its Fragment header goes like any other extension header). So an
    // ICMPv6 echo in one gets its checksum completed at once, and an ICMPv6 error in one is
    // translated, not dropped as fragmented.
    if h.frag.is_some_and(|f| f.offset == 0 && !f.more) {
        h.frag = None;
    }
    let other = In6 {
        h,
        kind: Kind6::Other,
    };
    if h.is_later_fragment() {
        return Ok(other);
    }
    // RFC 7915 5.1: only headers before the Fragment header can go; what follows it is
    // fragmented data whose offsets would change.
    if h.is_fragment() && h.ext_after_fragment {
        return Err(DropReason::UntranslatableExtensionHeader);
    }
    let l4 = pkt.get(h.l4_off..h.total_len()).unwrap_or(&[]);
    if h.proto != nh::ICMPV6 {
        return Ok(match ports_of(h.proto, l4, true)? {
            Some(ports) => In6 {
                kind: Kind6::Flow(ports),
                ..other
            },
            None => other,
        });
    }
    if l4.len() < icmpv6::HEADER {
        return Err(DropReason::TruncatedL4);
    }
    let t = u8_at(l4, icmpv6::TYPE).ok_or(DropReason::TruncatedL4)?;
    if map::query_6to4(t).is_some() {
        let ports = ports_of(h.proto, l4, true)?.ok_or(DropReason::TruncatedL4)?;
        return Ok(In6 {
            kind: Kind6::Flow(ports),
            ..other
        });
    }
    if !icmpv6::is_error(t) {
        // RFC 7915 5.2: MLD, neighbor discovery, unknown informational messages.
        return Err(DropReason::IcmpNotTranslated);
    }
    if h.is_fragment() {
        return Err(DropReason::FragmentedIcmpError);
    }
    let sum = checksum::sum(
        l4,
        ipv6::pseudo_header_sum(
            h.src,
            h.dst,
            u32::try_from(l4.len()).unwrap_or(u32::MAX),
            nh::ICMPV6,
        ),
    );
    if checksum::fold(sum) != 0xffff {
        return Err(DropReason::IcmpErrorBadChecksum);
    }
    let code = u8_at(l4, icmpv6::CODE).ok_or(DropReason::TruncatedL4)?;
    let rest = u32_at(l4, icmpv6::MTU).ok_or(DropReason::TruncatedL4)?;
    let quote = l4.get(icmpv6::HEADER..).unwrap_or(&[]);
    let inner = Ipv6Header::parse_embedded(quote).map_err(|_| DropReason::IcmpErrorMalformed)?;
    let (typ4, code4, rest4) = map::error_6to4(t, code, rest, inner.is_fragment(), p.mtu)
        .ok_or(DropReason::IcmpNotTranslated)?;
    let inner_l4 = quote.get(inner.l4_off..).unwrap_or(&[]);
    let mut inner_ports = None;
    if !inner.is_later_fragment() {
        if inner.proto == nh::ICMPV6 {
            // RFC 7915 5.3: stop at the first embedded header.
            match u8_at(inner_l4, 0) {
                Some(it) if icmpv6::is_error(it) => return Err(DropReason::IcmpErrorNested),
                Some(it) if map::query_6to4(it).is_none() => {
                    return Err(DropReason::IcmpNotTranslated)
                }
                _ => {}
            }
        }
        inner_ports = ports_of(inner.proto, inner_l4, false).unwrap_or(None);
    }
    Ok(In6 {
        kind: Kind6::Error(Err6 {
            typ4,
            code4,
            rest4,
            inner,
            inner_ports,
        }),
        ..other
    })
}

/// What [`emit`] left for the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Emitted4 {
    /// Offset of an ICMPv4 checksum that still holds the message length of the IPv6
    /// pseudo-header (a first fragment of an ICMP message).
    pub icmp_len_pending: Option<usize>,
}

/// Rewrites the transport header at `at`; see the IPv4 -> IPv6 twin in [`super::to6`].
fn rewrite_l4(
    pkt: &mut [u8],
    at: usize,
    src6: u128,
    dst6: u128,
    m: &Map<u32>,
    ports: &Ports,
    len: Option<u32>,
) -> bool {
    match ports.proto {
        Proto::Tcp | Proto::Udp => {
            let ck = at
                + if ports.proto == Proto::Tcp {
                    tcp::CHECKSUM
                } else {
                    udp::CHECKSUM
                };
            let wrote = set_u16(pkt, at, m.sport) & set_u16(pkt, at + 2, m.dport);
            let d = Delta::ZERO
                .remove_sum(addr_sum(src6).wrapping_add(addr_sum(dst6)))
                .add_sum(addr4_sum(m.src) + addr4_sum(m.dst))
                .word(ports.src, m.sport)
                .word(ports.dst, m.dport);
            // A quoted packet may end before its checksum.
            if let Some(ck) = chunk_mut::<2>(pkt, ck) {
                let c = u16::from_be_bytes(*ck);
                // RFC 768: a zero UDP checksum means none in IPv4 and stays zero.
                let new = if ports.proto == Proto::Udp {
                    d.apply_udp(c)
                } else {
                    d.apply(c)
                };
                *ck = new.to_be_bytes();
            }
            wrote
        }
        Proto::Icmp => {
            // RFC 7915 5.2: echo 128/129 -> 8/0; the pseudo-header leaves the checksum.
            let (Some(t), Some(code)) = (u8_at(pkt, at), u8_at(pkt, at + 1)) else {
                return true;
            };
            let t4 = map::query_6to4(t).unwrap_or(t);
            let wrote = set_u8(pkt, at, t4) & set_u16(pkt, at + icmp::IDENT, m.sport);
            let mut d = Delta::ZERO
                .word(
                    u16::from_be_bytes([t, code]),
                    u16::from_be_bytes([t4, code]),
                )
                .word(ports.src, m.sport)
                .remove_sum(
                    addr_sum(src6)
                        .wrapping_add(addr_sum(dst6))
                        .wrapping_add(u32::from(nh::ICMPV6)),
                );
            if let Some(l) = len {
                d = d.remove_sum(l);
            }
            if let Some(ck) = chunk_mut::<2>(pkt, at + icmp::CHECKSUM) {
                *ck = d.apply(u16::from_be_bytes(*ck)).to_be_bytes();
            }
            // Without the pseudo-header a whole message may be all zero (RFC 1624 3).
            if let Some(m) = len.and_then(|l| pkt.get_mut(at..at + l as usize)) {
                checksum::fix_all_zero(m, icmp::CHECKSUM);
            }
            wrote
        }
    }
}

/// Translates the packet in `buf` to IPv4 in place with the addresses (and ports) of `m`
/// and, for an ICMPv6 error, `inner` for the quoted packet (RFC 7915 5.1-5.5).
pub(crate) fn emit(
    buf: &mut PacketBuf,
    in6: &In6,
    m: &Map<u32>,
    inner: Option<&Map<u32>>,
    decrement: bool,
    ids: &mut Ipv4Ids,
) -> Result<Emitted4, DropReason> {
    let h = &in6.h;
    // RFC 7915 5.1: TTL = hop limit (minus one: the translator is a router).
    let ttl = if decrement {
        h.hop_limit.saturating_sub(1)
    } else {
        h.hop_limit
    };
    if let Kind6::Error(e) = &in6.kind {
        let inner = inner.ok_or(DropReason::IcmpErrorMalformed)?;
        return emit_error(buf, h, e, m, inner, ttl, ids);
    }
    let l4 = h.l4_off;
    let l4_len = h.l4_len();
    // A super-packet's DF and identification are its segments' (RFC 7915 5.1 decides by
    // the length on the wire).
    let on_wire = ipv4::MIN_HEADER + buf.offload().l4_on_wire(buf.data(), l4, l4_len);
    let Ok(total) = u16::try_from(ipv4::MIN_HEADER + l4_len) else {
        // A jumbo-sized IPv6 fragment (payload length up to 65,535 after a Fragment header)
        // whose IPv4 form no total length can say (RFC 791).
        return Err(DropReason::TranslatedTooLong);
    };
    let mut pending = false;
    if let Kind6::Flow(ports) = &in6.kind {
        let len = if h.is_fragment() {
            pending = ports.proto == Proto::Icmp;
            None
        } else {
            u32::try_from(l4_len).ok()
        };
        wrote(rewrite_l4(buf.data_mut(), l4, h.src, h.dst, m, ports, len))?;
    }
    buf.truncate(h.total_len());
    resize_front(buf, l4, ipv4::MIN_HEADER)?;
    let frag = h.frag;
    // RFC 7915 5.1: without a Fragment header, identification from the translator's
    // generator and DF clear up to 1260 bytes (set above); 5.1.1: with one, identification
    // = its low 16 bits, MF and offset copied, DF clear.
    let proto = proto4(h.proto);
    let (ident, dont_fragment) = match frag {
        Some(f) => ((f.ident & 0xffff) as u16, false),
        None => ids.next(on_wire, m.src, m.dst, proto),
    };
    let header = ipv4::write_header(
        buf.data_mut(),
        &Ipv4Fields {
            tos: h.traffic_class,
            total_len: total,
            ident,
            dont_fragment,
            more_fragments: frag.is_some_and(|f| f.more),
            frag_offset: frag.map_or(0, |f| f.offset),
            ttl,
            proto,
            src: m.src,
            dst: m.dst,
        },
    );
    wrote(header)?;
    Ok(Emitted4 {
        icmp_len_pending: pending.then_some(ipv4::MIN_HEADER + icmp::CHECKSUM),
    })
}

/// RFC 7915 5.3: an ICMPv6 error with its quoted packet -> an ICMPv4 error.
fn emit_error(
    buf: &mut PacketBuf,
    h: &Ipv6Header,
    e: &Err6,
    m: &Map<u32>,
    im: &Map<u32>,
    ttl: u8,
    ids: &mut Ipv4Ids,
) -> Result<Emitted4, DropReason> {
    let ii = &e.inner;
    let inner_at = h.l4_off + icmpv6::HEADER;
    let inner_l4 = inner_at + ii.l4_off;
    // Transport bytes of the original packet: its payload minus the headers removed.
    let inner_payload = (ipv6::HEADER + ii.payload_len).saturating_sub(ii.l4_off);
    if let Some(ports) = &e.inner_ports {
        let len = u32::try_from(inner_payload)
            .ok()
            .filter(|_| !ii.is_fragment());
        wrote(rewrite_l4(
            buf.data_mut(),
            inner_l4,
            ii.src,
            ii.dst,
            im,
            ports,
            len,
        ))?;
    }
    buf.truncate(h.total_len());
    // RFC 4884 extensions come off here and go back after the translated quote (`ext`).
    let saved = ext::take(buf, h.l4_off, ext::V6);
    let front = ipv4::MIN_HEADER + icmp::HEADER + ipv4::MIN_HEADER;
    resize_front(buf, inner_l4, front)?;
    let length_attr = match &saved {
        Some(s) if ext::V4.has(e.typ4) => ext::put(
            buf,
            ipv4::MIN_HEADER + icmp::HEADER,
            ext::V4,
            s,
            ipv6::MIN_MTU,
        ),
        _ => 0,
    };
    let total = buf.len();
    // RFC 7915 5.1 for the error itself (cut to 1280 bytes before, so never past 0xffff)
    // and 5.3 for the packet it quotes, translated "as any packet".
    let (ident, dont_fragment) = ids.next(total, m.src, m.dst, ipproto::ICMP);
    let quoted_total = ipv4::MIN_HEADER + inner_payload;
    let quoted_proto = proto4(ii.proto);
    let (quoted_ident, quoted_df) = match ii.frag {
        Some(f) => ((f.ident & 0xffff) as u16, false),
        None => ids.next(quoted_total, im.src, im.dst, quoted_proto),
    };
    let pkt = buf.data_mut();
    let header = ipv4::write_header(
        pkt,
        &Ipv4Fields {
            tos: h.traffic_class,
            total_len: u16::try_from(total).unwrap_or(u16::MAX),
            ident,
            dont_fragment,
            more_fragments: false,
            frag_offset: 0,
            ttl,
            proto: ipproto::ICMP,
            src: m.src,
            dst: m.dst,
        },
    );
    let icmp_at = ipv4::MIN_HEADER;
    wrote(
        header
            & set_u8(pkt, icmp_at + icmp::TYPE, e.typ4)
            & set_u8(pkt, icmp_at + icmp::CODE, e.code4)
            & set_u16(pkt, icmp_at + icmp::CHECKSUM, 0)
            & set_u32(pkt, icmp_at + 4, e.rest4)
            & (length_attr == 0 || set_u8(pkt, icmp_at + 5, length_attr)),
    )?;
    let frag = ii.frag;
    // The front was resized to hold the quoted header.
    let quoted = pkt.get_mut(icmp_at + icmp::HEADER..).is_some_and(|ih| {
        ipv4::write_header(
            ih,
            &Ipv4Fields {
                tos: ii.traffic_class,
                total_len: u16::try_from(quoted_total).unwrap_or(u16::MAX),
                ident: quoted_ident,
                dont_fragment: quoted_df,
                more_fragments: frag.is_some_and(|f| f.more),
                frag_offset: frag.map_or(0, |f| f.offset),
                // RFC 7915 5.3: the quoted packet's hop limit is not decremented.
                ttl: ii.hop_limit,
                proto: quoted_proto,
                src: im.src,
                dst: im.dst,
            },
        )
    });
    let c = checksum::checksum(pkt.get(icmp_at..).unwrap_or(&[]));
    wrote(quoted & set_u16(pkt, icmp_at + icmp::CHECKSUM, c))?;
    Ok(Emitted4::default())
}
