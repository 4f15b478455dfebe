//! IPv4 -> IPv6 (RFC 7915 4): the header translation both SIIT and NAT64 use.
//!
//! [`parse`] reads an IPv4 packet into [`In4`]: its header, and what its transport part is
//! (ports or an echo identifier, an ICMP error with the quoted packet already examined, or
//! something without ports). The translator then decides the addresses (and, for NAT64,
//! ports) and [`emit`] rewrites the packet in place:
//!
//! - 4.1: the IPv4 header becomes an IPv6 header (traffic class = TOS, flow label 0, hop
//!   limit = TTL - 1, payload length, next header; options are dropped); a Fragment header is
//!   added to fragments (identification, offset, M copied) and to packets without DF that
//!   must be fragmented to the lowest IPv6 MTU (the caller splits them, [`super::split6`]).
//! - 4.2: ICMPv4 echo becomes ICMPv6 echo; the checksum gains the IPv6 pseudo-header.
//! - 4.3: ICMPv4 errors become ICMPv6 errors (type, code, MTU or pointer per
//!   [`super::icmp`]), the quoted packet is translated like any other (its TTL kept), and the
//!   result is cut to 1280 bytes.
//! - 4.5: TCP and UDP checksums follow the pseudo-header change incrementally (RFC 1624); a
//!   UDP checksum of zero is computed (or the datagram dropped, by configuration).

use xlat_wire::checksum;
use xlat_wire::field::{chunk_mut, set_u16, set_u8, u16_at, u8_at};
use xlat_wire::ipv4::{self, proto as ipproto, Ipv4Header};
use xlat_wire::ipv6::{self, addr4_sum, addr_sum, nh, Ipv6Fields};
use xlat_wire::l4::{icmp, icmpv6, tcp, udp};
use xlat_wire::{Delta, PacketBuf};

use super::{ext, icmp as map, resize_front, Map, Ports};
use crate::config::{UdpZeroChecksum, XlatParams};
use crate::counters::{wrote, DropReason};
use crate::flow::Proto;

/// An IPv4 packet, examined.
#[derive(Clone, Copy, Debug)]
pub(crate) struct In4 {
    pub h: Ipv4Header,
    pub kind: Kind4,
    /// An unexpired source route option is present (RFC 7915 4.1).
    pub source_route: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind4 {
    /// TCP, UDP or ICMP echo; whole packet or first fragment.
    Flow(Ports),
    /// An ICMP error (never a fragment).
    Error(Err4),
    /// A non-first fragment, or a protocol without ports: addresses only.
    Other,
}

/// An ICMPv4 error, mapped to ICMPv6, with the packet it quotes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Err4 {
    pub typ6: u8,
    pub code6: u8,
    /// ICMPv6 bytes 4-7: MTU (Packet Too Big) or pointer (Parameter Problem).
    pub rest6: u32,
    pub inner: Inner4,
    /// Ports or echo identifier of the quoted packet, when it is a first fragment and quoted
    /// far enough.
    pub inner_ports: Option<Ports>,
}

/// The IPv4 header quoted in an ICMP error (RFC 792: header + at least 8 bytes). Its total
/// length may exceed the bytes quoted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inner4 {
    pub header_len: usize,
    pub total_len: u16,
    pub tos: u8,
    pub ident: u16,
    pub more_fragments: bool,
    pub frag_offset: u16,
    pub ttl: u8,
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
}

impl Inner4 {
    fn parse(b: &[u8]) -> Option<Inner4> {
        let v = u8_at(b, 0)?;
        if v >> 4 != 4 {
            return None;
        }
        let header_len = usize::from(v & 0x0f) * 4;
        if header_len < ipv4::MIN_HEADER || b.len() < header_len {
            return None;
        }
        let ff = u16_at(b, ipv4::off::FLAGS_FRAG)?;
        Some(Inner4 {
            header_len,
            total_len: u16_at(b, ipv4::off::TOTAL_LEN)?,
            tos: u8_at(b, ipv4::off::TOS)?,
            ident: u16_at(b, ipv4::off::IDENT)?,
            more_fragments: ff & 0x2000 != 0,
            frag_offset: ff & 0x1fff,
            ttl: u8_at(b, ipv4::off::TTL)?,
            proto: u8_at(b, ipv4::off::PROTO)?,
            src: u32_be(b, ipv4::off::SRC)?,
            dst: u32_be(b, ipv4::off::DST)?,
        })
    }

    pub fn is_fragment(&self) -> bool {
        self.more_fragments || self.frag_offset != 0
    }
}

fn u32_be(b: &[u8], off: usize) -> Option<u32> {
    xlat_wire::field::u32_at(b, off)
}

/// The Next Header an IPv4 protocol becomes (RFC 7915 4.1: ICMPv4 -> ICMPv6, others copied).
pub(crate) fn proto6(p: u8) -> u8 {
    if p == ipproto::ICMP {
        nh::ICMPV6
    } else {
        p
    }
}

/// Reads the transport identifiers of a TCP/UDP header or ICMP echo at the start of `l4`.
/// `whole`: the header must be complete (an outer packet), else 4 bytes of ports (or the 8
/// bytes of an ICMP header) are enough (a quote).
fn ports_of(proto: u8, l4: &[u8], whole: bool) -> Result<Option<Ports>, DropReason> {
    let (p, need) = match proto {
        ipproto::TCP => (Proto::Tcp, if whole { tcp::NEEDED } else { 4 }),
        ipproto::UDP => (Proto::Udp, if whole { udp::HEADER } else { 4 }),
        ipproto::ICMP => (Proto::Icmp, icmp::HEADER),
        _ => return Ok(None),
    };
    if l4.len() < need {
        return Err(DropReason::TruncatedL4);
    }
    let rd = |off| u16_at(l4, off).ok_or(DropReason::TruncatedL4);
    let (src, dst) = match p {
        Proto::Icmp => {
            let id = rd(icmp::IDENT)?;
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

/// Reads and checks an IPv4 packet for translation to IPv6 (RFC 7915 4).
#[inline(always)]
pub(crate) fn parse(
    pkt: &[u8],
    verify_ip_checksum: bool,
    p: &XlatParams,
) -> Result<In4, DropReason> {
    let h = Ipv4Header::parse(pkt, verify_ip_checksum).map_err(DropReason::from)?;
    let pkt = pkt.get(..h.total_len).unwrap_or(&[]);
    let source_route =
        h.header_len > ipv4::MIN_HEADER && ipv4::has_unexpired_source_route(pkt, h.header_len);
    let other = In4 {
        h,
        kind: Kind4::Other,
        source_route,
    };
    if h.is_later_fragment() {
        return Ok(other);
    }
    let l4 = pkt.get(h.header_len..).unwrap_or(&[]);
    if h.proto == 2 {
        // RFC 7915 4.2: IGMP is single-hop; silently dropped.
        return Err(DropReason::IcmpNotTranslated);
    }
    if h.proto != ipproto::ICMP {
        return Ok(match ports_of(h.proto, l4, true)? {
            Some(ports) => In4 {
                kind: Kind4::Flow(ports),
                ..other
            },
            None => other,
        });
    }
    if l4.len() < icmp::HEADER {
        return Err(DropReason::TruncatedL4);
    }
    let t = u8_at(l4, icmp::TYPE).ok_or(DropReason::TruncatedL4)?;
    if map::query_4to6(t).is_some() {
        let ports = ports_of(h.proto, l4, true)?.ok_or(DropReason::TruncatedL4)?;
        return Ok(In4 {
            kind: Kind4::Flow(ports),
            ..other
        });
    }
    if !map::is_error4(t) {
        // RFC 7915 4.2: timestamp, information, address mask, router messages, unknown.
        return Err(DropReason::IcmpNotTranslated);
    }
    // RFC 7915 1.2: fragmented ICMP errors are not translated.
    if h.is_fragment() {
        return Err(DropReason::FragmentedIcmpError);
    }
    // A corrupt error is not translated into a valid-looking one (RFC 5508 REQ-3 a).
    if !checksum::verifies(l4) {
        return Err(DropReason::IcmpErrorBadChecksum);
    }
    let code = u8_at(l4, icmp::CODE).ok_or(DropReason::TruncatedL4)?;
    let rest = xlat_wire::field::u32_at(l4, 4).ok_or(DropReason::TruncatedL4)?;
    let quote = l4.get(icmp::HEADER..).unwrap_or(&[]);
    let inner = Inner4::parse(quote).ok_or(DropReason::IcmpErrorMalformed)?;
    let (typ6, code6, rest6) = map::error_4to6(t, code, rest, inner.total_len, p.mtu)
        .ok_or(DropReason::IcmpNotTranslated)?;
    let inner_l4 = quote.get(inner.header_len..).unwrap_or(&[]);
    let mut inner_ports = None;
    if inner.frag_offset == 0 {
        if inner.proto == ipproto::ICMP {
            // RFC 7915 4.3: stop at the first embedded header; an error in an error is dropped.
            match u8_at(inner_l4, 0) {
                Some(it) if map::is_error4(it) => return Err(DropReason::IcmpErrorNested),
                Some(it) if map::query_4to6(it).is_none() => {
                    return Err(DropReason::IcmpNotTranslated)
                }
                _ => {}
            }
        }
        inner_ports = ports_of(inner.proto, inner_l4, false).unwrap_or(None);
    }
    Ok(In4 {
        kind: Kind4::Error(Err4 {
            typ6,
            code6,
            rest6,
            inner,
            inner_ports,
        }),
        ..other
    })
}

/// What [`emit`] left for the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Emitted6 {
    /// Offset of an ICMPv6 checksum still missing the message length (a first fragment of an
    /// ICMP message): the caller holds the packet until the length is known.
    pub icmp_len_pending: Option<usize>,
    /// The packet exceeds the lowest IPv6 MTU and has no DF: split it into fragments of at
    /// most this many bytes (it already carries a Fragment header).
    pub split: Option<usize>,
    /// A zero UDP checksum was computed (RFC 7915 4.5).
    pub udp_checksum_computed: bool,
}

/// The checksum change of a TCP/UDP header whose pseudo-header goes from IPv4 to IPv6 and
/// whose ports change.
fn l4_delta(src4: u32, dst4: u32, m: &Map<u128>, ports: &Ports) -> Delta {
    Delta::ZERO
        .remove_sum(addr4_sum(src4) + addr4_sum(dst4))
        .add_sum(addr_sum(m.src).wrapping_add(addr_sum(m.dst)))
        .word(ports.src, m.sport)
        .word(ports.dst, m.dport)
}

/// Rewrites the transport header at `at` (ports or identifier, ICMP type, checksum).
/// `len`: the ICMP message length for the pseudo-header, `None` when unknown (a fragment).
/// A checksum past the end of `pkt` (a short quote) is left alone. Returns whether a UDP
/// checksum of zero was found; `Err` ([`DropReason::Internal`]) when the ports or type
/// read before were not there to write.
fn rewrite_l4(
    pkt: &mut [u8],
    at: usize,
    src4: u32,
    dst4: u32,
    m: &Map<u128>,
    ports: &Ports,
    len: Option<u32>,
) -> Result<bool, DropReason> {
    match ports.proto {
        Proto::Tcp | Proto::Udp => {
            let ck = at
                + if ports.proto == Proto::Tcp {
                    tcp::CHECKSUM
                } else {
                    udp::CHECKSUM
                };
            wrote(set_u16(pkt, at, m.sport) & set_u16(pkt, at + 2, m.dport))?;
            let d = l4_delta(src4, dst4, m, ports);
            let Some(ck) = chunk_mut::<2>(pkt, ck) else {
                return Ok(false);
            };
            *ck = match u16::from_be_bytes(*ck) {
                0 if ports.proto == Proto::Udp => return Ok(true),
                // RFC 8200 8.1: a UDP checksum that comes out zero is sent as all ones.
                c if ports.proto == Proto::Udp => d.apply_udp(c),
                c => d.apply(c),
            }
            .to_be_bytes();
            Ok(false)
        }
        Proto::Icmp => {
            // RFC 7915 4.2: echo request/reply -> 128/129; the ICMPv6 checksum also covers
            // the IPv6 pseudo-header.
            let (Some(t), Some(code)) = (u8_at(pkt, at), u8_at(pkt, at + 1)) else {
                return Ok(false);
            };
            let t6 = map::query_4to6(t).unwrap_or(t);
            wrote(set_u8(pkt, at, t6) & set_u16(pkt, at + icmpv6::IDENT, m.sport))?;
            let mut d = Delta::ZERO
                .word(
                    u16::from_be_bytes([t, code]),
                    u16::from_be_bytes([t6, code]),
                )
                .word(ports.src, m.sport)
                .add_sum(
                    addr_sum(m.src)
                        .wrapping_add(addr_sum(m.dst))
                        .wrapping_add(u32::from(nh::ICMPV6)),
                );
            if let Some(l) = len {
                d = d.add_sum(l);
            }
            if let Some(ck) = chunk_mut::<2>(pkt, at + icmp::CHECKSUM) {
                *ck = d.apply(u16::from_be_bytes(*ck)).to_be_bytes();
            }
            Ok(false)
        }
    }
}

/// Translates the packet in `buf` to IPv6 in place with the addresses (and ports) of `m`
/// and, for an ICMP error, `inner` for the quoted packet (RFC 7915 4.1-4.5). `decrement`:
/// the hop limit is the TTL minus one (not for the second pass of a hairpin).
pub(crate) fn emit(
    buf: &mut PacketBuf,
    in4: &In4,
    m: &Map<u128>,
    inner: Option<&Map<u128>>,
    p: &XlatParams,
    decrement: bool,
) -> Result<Emitted6, DropReason> {
    let h = &in4.h;
    let hop = if decrement {
        h.ttl.saturating_sub(1)
    } else {
        h.ttl
    };
    if let Kind4::Error(e) = &in4.kind {
        let inner = inner.ok_or(DropReason::IcmpErrorMalformed)?;
        return emit_error(buf, h, e, m, inner, hop);
    }
    let ihl = h.header_len;
    let payload = h.payload_len();
    // RFC 7915 4.1: without DF, packets that would exceed lowest-ipv6-mtu are fragmented;
    // a Fragment header is only added to packets that are (or will be) fragments.
    let limit = p.lowest_ipv6_mtu.min(p.mtu) as usize;
    let split = !h.dont_fragment && ipv6::HEADER + super::on_wire4(buf, h) > limit;
    let frag = h.is_fragment() || split;
    let hdr6 = ipv6::HEADER + if frag { ipv6::FRAGMENT_HEADER } else { 0 };
    let mut compute_udp = false;
    let mut pending = false;
    if let Kind4::Flow(ports) = &in4.kind {
        let len = if h.is_fragment() {
            pending = ports.proto == Proto::Icmp;
            None
        } else {
            u32::try_from(payload).ok()
        };
        compute_udp = rewrite_l4(buf.data_mut(), ihl, h.src, h.dst, m, ports, len)?;
        if compute_udp {
            // RFC 7915 4.5: a stateless translator computes a zero UDP checksum of an
            // unfragmented datagram (or drops it, if so configured); fragments are dropped.
            if h.is_fragment() || p.udp_zero_checksum == UdpZeroChecksum::Drop {
                return Err(DropReason::UdpZeroChecksum);
            }
        }
    }
    resize_front(buf, ihl, hdr6)?;
    let pkt = buf.data_mut();
    let next = proto6(h.proto);
    let header = ipv6::write_header(
        pkt,
        &Ipv6Fields {
            // RFC 7915 4.1: traffic class copied from TOS; flow label zero.
            traffic_class: h.tos,
            flow_label: 0,
            payload_len: u16::try_from(hdr6 - ipv6::HEADER + payload)
                .map_err(|_| DropReason::TranslatedTooLong)?,
            next_header: if frag { nh::FRAGMENT } else { next },
            hop_limit: hop,
            src: m.src,
            dst: m.dst,
        },
    );
    // RFC 7915 4.1: offset and M copied; identification = the IPv4 one, zero-extended.
    let fragment = !frag
        || ipv6::write_fragment_header(
            pkt,
            ipv6::HEADER,
            next,
            h.frag_offset,
            h.more_fragments,
            u32::from(h.ident),
        );
    wrote(header & fragment)?;
    if compute_udp {
        let ck = hdr6 + udp::CHECKSUM;
        let zeroed = set_u16(pkt, ck, 0);
        let c = ipv6::upper_checksum(m.src, m.dst, nh::UDP, pkt.get(hdr6..).unwrap_or(&[]));
        wrote(zeroed & set_u16(pkt, ck, if c == 0 { 0xffff } else { c }))?;
    }
    Ok(Emitted6 {
        icmp_len_pending: pending.then_some(hdr6 + icmpv6::CHECKSUM),
        split: split.then_some(limit),
        udp_checksum_computed: compute_udp,
    })
}

/// RFC 7915 4.3: an ICMPv4 error with its quoted packet -> an ICMPv6 error of at most 1280
/// bytes.
fn emit_error(
    buf: &mut PacketBuf,
    h: &Ipv4Header,
    e: &Err4,
    m: &Map<u128>,
    im: &Map<u128>,
    hop: u8,
) -> Result<Emitted6, DropReason> {
    let ii = &e.inner;
    let inner_at = h.header_len + icmp::HEADER;
    let inner_l4 = inner_at + ii.header_len;
    let inner_frag = ii.is_fragment();
    let inner_hdr6 = ipv6::HEADER + if inner_frag { ipv6::FRAGMENT_HEADER } else { 0 };
    let inner_payload = usize::from(ii.total_len).saturating_sub(ii.header_len);
    // RFC 4884 extensions come off here and go back after the translated quote (`ext`).
    buf.truncate(h.total_len);
    let saved = ext::take(buf, h.header_len, ext::V4);
    if let Some(ports) = &e.inner_ports {
        // The quoted transport header is translated too (4.3: "just like a normal IP
        // packet"), including its checksum where quoted.
        let len = u32::try_from(inner_payload).ok().filter(|_| !inner_frag);
        rewrite_l4(buf.data_mut(), inner_l4, ii.src, ii.dst, im, ports, len)?;
    }
    let front = ipv6::HEADER + icmpv6::HEADER + inner_hdr6;
    resize_front(buf, inner_l4, front)?;
    let field = ipv6::HEADER + icmpv6::HEADER;
    let length_attr = match &saved {
        Some(s) if ext::V6.has(e.typ6) => ext::put(buf, field, ext::V6, s, ipv6::MIN_MTU),
        _ => 0,
    };
    // RFC 4443 2.4 c (RFC 7915 4.3): an ICMPv6 error fits the minimum MTU.
    buf.truncate(ipv6::MIN_MTU);
    let total = buf.len();
    let pkt = buf.data_mut();
    let header = ipv6::write_header(
        pkt,
        &Ipv6Fields {
            traffic_class: h.tos,
            flow_label: 0,
            payload_len: u16::try_from(total - ipv6::HEADER).map_err(|_| DropReason::Internal)?,
            next_header: nh::ICMPV6,
            hop_limit: hop,
            src: m.src,
            dst: m.dst,
        },
    );
    let icmp_at = ipv6::HEADER;
    wrote(
        header
            & set_u8(pkt, icmp_at + icmpv6::TYPE, e.typ6)
            & set_u8(pkt, icmp_at + icmpv6::CODE, e.code6)
            & set_u16(pkt, icmp_at + icmpv6::CHECKSUM, 0)
            & xlat_wire::field::set_u32(pkt, icmp_at + icmpv6::MTU, e.rest6)
            & (length_attr == 0 || set_u8(pkt, icmp_at + 4, length_attr)),
    )?;
    let inner_start = icmp_at + icmpv6::HEADER;
    let inner_next = proto6(ii.proto);
    // The front was resized to hold the quoted header (and its Fragment header).
    let quoted = pkt.get_mut(inner_start..).is_some_and(|ih| {
        ipv6::write_header(
            ih,
            &Ipv6Fields {
                traffic_class: ii.tos,
                flow_label: 0,
                payload_len: u16::try_from(inner_hdr6 - ipv6::HEADER + inner_payload)
                    .unwrap_or(u16::MAX),
                next_header: if inner_frag { nh::FRAGMENT } else { inner_next },
                // RFC 7915 4.3: the quoted packet's TTL is not decremented.
                hop_limit: ii.ttl,
                src: im.src,
                dst: im.dst,
            },
        ) & (!inner_frag
            || ipv6::write_fragment_header(
                ih,
                ipv6::HEADER,
                inner_next,
                ii.frag_offset,
                ii.more_fragments,
                u32::from(ii.ident),
            ))
    });
    let c = ipv6::upper_checksum(m.src, m.dst, nh::ICMPV6, pkt.get(icmp_at..).unwrap_or(&[]));
    wrote(quoted & set_u16(pkt, icmp_at + icmpv6::CHECKSUM, c))?;
    Ok(Emitted6::default())
}
