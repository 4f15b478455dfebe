//! Packet trace (`xlat trace`, issue 21): one packet's path through the engine as a typed
//! record -- the translator [`Engine::process`] chose, the headers before, the session lookup's
//! result, the headers after, the verdict -- like VPP's packet trace.
//!
//! Costs nothing when off. The packet paths are not touched: tracing is a separate entry
//! point, [`Engine::process_batch_traced`], which a driver calls instead of
//! [`Engine::process_batch`] only for a batch that arrives while a trace is armed (the daemon's
//! worker tests one field of its own per batch). With no trace armed no instruction of
//! this module runs, so the translators need no generic `Tracer` parameter and nothing on the
//! packet path tests a flag. `process_batch` gives what `process` gives packet by packet
//! (verdicts, bytes, counters, sessions), so the traced batch, which calls
//! [`Engine::process`] for each packet, translates exactly as the untraced batch would.
//!
//! What a record knows is read around the translation, not from inside it: the headers are
//! parsed from the buffer before and after (a few loads, no allocation), the translator is
//! chosen by the same rules as `dispatch`, and the lookup result and direction are read from
//! the counters the packet moved (`sessions_created`, `static_translated`, `outbound`, ...).
//! Records are plain values; nothing is formatted, logged or sent here: the caller drains them
//! after the batch, and the CLI formats them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};
use xlat_wire::field::{u16_at, u32_at, u8_at};

use crate::counters::Event;
use crate::flow::Proto;
use crate::{Engine, PacketBuf, Time, Verdict};

/// The translator [`Engine::process`] gives a packet to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Translator {
    Nat44,
    Nat64,
    Siit,
    /// A 6to4 or ISATAP tunnel endpoint.
    Tunnel,
}

impl Translator {
    pub fn name(self) -> &'static str {
        match self {
            Translator::Nat44 => "nat44",
            Translator::Nat64 => "nat64",
            Translator::Siit => "siit",
            Translator::Tunnel => "tunnel",
        }
    }
}

/// What the translator's session lookup found, read from the counters the packet moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lookup {
    /// A stateless translator (SIIT, tunnel): no session table.
    Stateless,
    /// Translated through an existing session.
    Found,
    /// A new session was made for it.
    Created,
    /// Translated by a static 1:1 entry.
    Static,
    /// No session used: the packet was dropped before or at the lookup (an unsolicited
    /// packet, a malformed one), or held (a fragment).
    None,
}

impl Lookup {
    pub fn name(self) -> &'static str {
        match self {
            Lookup::Stateless => "stateless",
            Lookup::Found => "session found",
            Lookup::Created => "session created",
            Lookup::Static => "static entry",
            Lookup::None => "no session",
        }
    }
}

/// Which way a stateful translator translated a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Inside to outside.
    Outbound,
    /// Outside to inside.
    Inbound,
}

/// A packet's headers, summarised: what `xlat trace` prints before and after translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Headers {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 protocol, or the IPv6 next header after a fragment header.
    pub proto: u8,
    /// Bytes, IP header included.
    pub len: u16,
    /// TTL or hop limit.
    pub ttl: u8,
    /// TCP/UDP source port, or the ICMP echo identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    /// TCP/UDP destination port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    /// ICMP or ICMPv6 type and code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp: Option<(u8, u8)>,
    /// TCP flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_flags: Option<u8>,
    /// A fragment (more fragments follow, or the offset is not 0).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fragment: bool,
}

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;
const ICMP6: u8 = 58;
const FRAGMENT6: u8 = 44;

impl Headers {
    /// Parses the IP header and the start of the transport header; `None` when the buffer
    /// does not hold a whole IPv4 or IPv6 header. Never panics.
    pub fn parse(data: &[u8]) -> Option<Headers> {
        match data.first()? >> 4 {
            4 => {
                let ihl = usize::from(u8_at(data, 0)? & 0x0f) * 4;
                let frag = u16_at(data, 6)?;
                let mut h = Headers {
                    src: IpAddr::V4(Ipv4Addr::from(u32_at(data, 12)?)),
                    dst: IpAddr::V4(Ipv4Addr::from(u32_at(data, 16)?)),
                    proto: u8_at(data, 9)?,
                    len: u16_at(data, 2)?,
                    ttl: u8_at(data, 8)?,
                    sport: None,
                    dport: None,
                    icmp: None,
                    tcp_flags: None,
                    fragment: frag & 0x3fff != 0,
                };
                if ihl >= 20 && frag & 0x1fff == 0 {
                    h.transport(data.get(ihl..).unwrap_or(&[]));
                }
                Some(h)
            }
            6 => {
                let addr = |off| xlat_wire::ipv6::addr_at(data, off).map(Ipv6Addr::from);
                let mut h = Headers {
                    src: IpAddr::V6(addr(8)?),
                    dst: IpAddr::V6(addr(24)?),
                    proto: u8_at(data, 6)?,
                    len: u16_at(data, 4)?.saturating_add(40),
                    ttl: u8_at(data, 7)?,
                    sport: None,
                    dport: None,
                    icmp: None,
                    tcp_flags: None,
                    fragment: false,
                };
                let mut l4 = 40;
                if h.proto == FRAGMENT6 {
                    let off = u16_at(data, 42)?;
                    h.proto = u8_at(data, 40)?;
                    h.fragment = true;
                    if off & 0xfff8 != 0 {
                        return Some(h);
                    }
                    l4 = 48;
                }
                h.transport(data.get(l4..).unwrap_or(&[]));
                Some(h)
            }
            _ => None,
        }
    }

    fn transport(&mut self, l4: &[u8]) {
        match self.proto {
            TCP | UDP => {
                self.sport = u16_at(l4, 0);
                self.dport = u16_at(l4, 2);
                if self.proto == TCP {
                    self.tcp_flags = u8_at(l4, 13);
                }
            }
            ICMP | ICMP6 => {
                if let (Some(t), Some(c)) = (u8_at(l4, 0), u8_at(l4, 1)) {
                    self.icmp = Some((t, c));
                    // Echo request and reply (RFC 792, RFC 4443 4.1-4.2): the identifier.
                    if matches!((self.proto, t), (ICMP, 0 | 8) | (ICMP6, 128 | 129)) {
                        self.sport = u16_at(l4, 4);
                    }
                }
            }
            _ => {}
        }
    }

    /// Whether this is a packet of `p` (ICMP: ICMPv4 or ICMPv6).
    pub fn is(&self, p: Proto) -> bool {
        match p {
            Proto::Tcp => self.proto == TCP,
            Proto::Udp => self.proto == UDP,
            Proto::Icmp => self.proto == ICMP || self.proto == ICMP6,
        }
    }

    fn has(&self, a: IpAddr) -> bool {
        self.src == a || self.dst == a
    }
}

/// Which packets a trace records: every condition given must hold, each on the headers
/// before or after translation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceFilter {
    /// The inside host's address is the packet's source or destination, before or after
    /// translation (an outbound packet's source before, an inbound one's destination after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside: Option<IpAddr>,
    /// An outside address (pool or remote) is the packet's source or destination, before or
    /// after translation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<Proto>,
}

impl TraceFilter {
    /// Whether a packet with these headers is to be recorded.
    pub fn takes(&self, before: Option<&Headers>, after: Option<&Headers>) -> bool {
        let any = |f: &dyn Fn(&Headers) -> bool| before.is_some_and(f) || after.is_some_and(f);
        self.inside.is_none_or(|a| any(&|h| h.has(a)))
            && self.outside.is_none_or(|a| any(&|h| h.has(a)))
            && self.proto.is_none_or(|p| any(&|h| h.is(p)))
    }
}

/// One packet's path through the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// The `now` it was translated at.
    pub at: Time,
    /// `None`: no translator takes it (dropped as not ours, or malformed).
    pub translator: Option<Translator>,
    /// `None` for a stateless translation, or a drop before the direction was known.
    pub direction: Option<Direction>,
    /// `None`: not an IPv4 or IPv6 header.
    pub before: Option<Headers>,
    pub lookup: Lookup,
    /// A new mapping (inside address and port to outside address and port) was made.
    pub mapping_created: bool,
    /// Translated twice: an inside host to another by its outside address (RFC 4787 REQ-9).
    pub hairpin: bool,
    /// The packet transmitted (`Forward`: the translated packet; `Reply`: the ICMP error
    /// the translator sent back); `None` when nothing is transmitted.
    pub after: Option<Headers>,
    pub verdict: Verdict,
}

/// The counters a record is read from, in this order.
const WATCHED: [Event; 6] = [
    Event::SessionsCreated,
    Event::StaticTranslated,
    Event::Outbound,
    Event::Inbound,
    Event::MappingsCreated,
    Event::Hairpinned,
];

impl Engine {
    /// The translator [`Engine::process`] gives `data` to (the rules of `dispatch`).
    pub fn translator_of(&self, data: &[u8]) -> Option<Translator> {
        match data.first().map(|b| b >> 4) {
            Some(6) => {
                let dst = xlat_wire::ipv6::addr_at(data, xlat_wire::ipv6::off::DST)?;
                if self.nat64.as_ref().is_some_and(|n| n.owns6(dst)) {
                    Some(Translator::Nat64)
                } else if self.siit.as_ref().is_some_and(|s| s.owns6(dst)) {
                    Some(Translator::Siit)
                } else if self.tunnel.is_some() {
                    Some(Translator::Tunnel)
                } else {
                    None
                }
            }
            Some(4) => {
                let dst = u32_at(data, xlat_wire::ipv4::off::DST);
                let proto = u8_at(data, xlat_wire::ipv4::off::PROTO);
                if let (Some(t), Some(d), Some(p)) = (&self.tunnel, dst, proto) {
                    if t.owns4(d, p) {
                        return Some(Translator::Tunnel);
                    }
                }
                let dst = dst?;
                if self.nat64.as_ref().is_some_and(|n| n.owns4(dst)) {
                    Some(Translator::Nat64)
                } else if self.siit.as_ref().is_some_and(|s| s.owns4(dst)) {
                    Some(Translator::Siit)
                } else {
                    self.nat44.as_ref().map(|_| Translator::Nat44)
                }
            }
            _ => None,
        }
    }

    /// [`Engine::process`], and the packet's [`TraceRecord`].
    pub fn process_traced(&mut self, now: Time, pkt: &mut PacketBuf) -> (Verdict, TraceRecord) {
        let before = Headers::parse(pkt.data());
        let translator = self.translator_of(pkt.data());
        let was = WATCHED.map(|e| self.counters.count(e));
        let verdict = self.process(now, pkt);
        let after = if verdict.transmit() {
            Headers::parse(pkt.data())
        } else {
            None
        };
        let moved = |i: usize| {
            let e = WATCHED.get(i).copied().unwrap_or(Event::PacketsIn);
            self.counters.count(e) > was.get(i).copied().unwrap_or(u64::MAX)
        };
        let stateful = matches!(translator, Some(Translator::Nat44 | Translator::Nat64));
        let lookup = if !stateful && translator.is_some() {
            Lookup::Stateless
        } else if moved(1) {
            Lookup::Static
        } else if moved(0) {
            Lookup::Created
        } else if stateful && (moved(2) || moved(3)) {
            Lookup::Found
        } else {
            Lookup::None
        };
        let direction = if moved(2) {
            Some(Direction::Outbound)
        } else if moved(3) {
            Some(Direction::Inbound)
        } else {
            None
        };
        let rec = TraceRecord {
            at: now,
            translator,
            direction,
            before,
            lookup,
            mapping_created: moved(4),
            hairpin: moved(5),
            after,
            verdict,
        };
        (verdict, rec)
    }

    /// [`Engine::process_batch`] for a batch being traced: each packet through
    /// [`Engine::process_traced`] (same verdicts, bytes, counters and sessions), and the
    /// records of those `filter` takes appended to `out` while it holds fewer than `max`
    /// (reserve `max` and nothing is allocated here). Returns how many were appended.
    pub fn process_batch_traced(
        &mut self,
        now: Time,
        pkts: &mut [PacketBuf],
        verdicts: &mut [Verdict],
        filter: &TraceFilter,
        out: &mut Vec<TraceRecord>,
        max: usize,
    ) -> usize {
        let mut n = 0;
        for (p, v) in pkts.iter_mut().zip(verdicts.iter_mut()) {
            let (verdict, rec) = self.process_traced(now, p);
            *v = verdict;
            if out.len() < max && filter.takes(rec.before.as_ref(), rec.after.as_ref()) {
                out.push(rec);
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Nat44Config, Nat64Config, SiitConfig};
    use crate::{DropReason, EngineConfig};

    fn nat44() -> Engine {
        let cfg = EngineConfig {
            nat44: Some(Nat44Config {
                inside: vec!["198.18.0.0/24".parse().unwrap()],
                pool: vec!["203.0.113.1/32".parse().unwrap()],
                ..Nat44Config::default()
            }),
            ..EngineConfig::default()
        };
        Engine::new(cfg).unwrap()
    }

    /// An IPv4 packet with a valid header checksum; `l4` follows the 20-byte header.
    fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
        let len = 20 + l4.len();
        let mut p = vec![
            0x45,
            0,
            (len >> 8) as u8,
            len as u8,
            0,
            1,
            0,
            0,
            64,
            proto,
            0,
            0,
        ];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        let c = xlat_wire::checksum::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(l4);
        p
    }

    fn echo_request(id: u16) -> Vec<u8> {
        let mut m = vec![8, 0, 0, 0, (id >> 8) as u8, id as u8, 0, 1, 1, 2, 3, 4];
        let c = xlat_wire::checksum::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        m
    }

    fn udp(sport: u16, dport: u16) -> Vec<u8> {
        // Checksum 0: no checksum (IPv4 UDP).
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&[0, 12, 0, 0, 1, 2, 3, 4]);
        u
    }

    fn traced(e: &mut Engine, bytes: Vec<u8>) -> TraceRecord {
        let mut room = vec![0u8; crate::HEADROOM + bytes.len() + crate::HEADROOM];
        room[crate::HEADROOM..crate::HEADROOM + bytes.len()].copy_from_slice(&bytes);
        let Some(mut b) = PacketBuf::new(&mut room, crate::HEADROOM, bytes.len()) else {
            panic!("buffer");
        };
        let (v, rec) = e.process_traced(Time::from_secs(1), &mut b);
        assert_eq!(v, rec.verdict);
        rec
    }

    #[test]
    fn outbound_echo_creates_a_session_then_finds_it() {
        let mut e = nat44();
        let ping = ipv4([198, 18, 0, 7], [198, 51, 100, 9], ICMP, &echo_request(77));
        let r = traced(&mut e, ping.clone());
        assert_eq!(r.translator, Some(Translator::Nat44));
        assert_eq!(r.lookup, Lookup::Created);
        assert_eq!(r.direction, Some(Direction::Outbound));
        assert!(r.mapping_created);
        assert_eq!(r.verdict, Verdict::Forward);
        let (b, a) = (r.before.unwrap(), r.after.unwrap());
        assert_eq!(b.src, IpAddr::from([198, 18, 0, 7]));
        assert_eq!(b.icmp, Some((8, 0)));
        assert_eq!(b.sport, Some(77));
        assert_eq!(a.src, IpAddr::from([203, 0, 113, 1]));
        assert_eq!(a.dst, IpAddr::from([198, 51, 100, 9]));
        let r2 = traced(&mut e, ping);
        assert_eq!(r2.lookup, Lookup::Found);
        assert!(!r2.mapping_created);
        // The echo reply, inbound to the mapping, back to the inside host.
        let Some(id) = r.after.and_then(|a| a.sport) else {
            panic!("no identifier");
        };
        let mut reply = echo_request(id);
        reply[0] = 0;
        reply[2..4].copy_from_slice(&[0, 0]);
        let c = xlat_wire::checksum::checksum(&reply);
        reply[2..4].copy_from_slice(&c.to_be_bytes());
        let r3 = traced(
            &mut e,
            ipv4([198, 51, 100, 9], [203, 0, 113, 1], ICMP, &reply),
        );
        assert_eq!(r3.lookup, Lookup::Found);
        assert_eq!(r3.direction, Some(Direction::Inbound));
        assert_eq!(r3.after.map(|a| a.dst), Some(IpAddr::from([198, 18, 0, 7])));
    }

    #[test]
    fn unsolicited_inbound_is_dropped_with_no_session() {
        let mut e = nat44();
        let r = traced(
            &mut e,
            ipv4([198, 51, 100, 9], [203, 0, 113, 1], UDP, &udp(53, 4000)),
        );
        assert_eq!(r.translator, Some(Translator::Nat44));
        assert_eq!(r.lookup, Lookup::None);
        assert_eq!(r.verdict, Verdict::Drop(DropReason::NoMapping));
        assert_eq!(r.after, None);
        assert_eq!(r.direction, None);
        let b = r.before.unwrap();
        assert_eq!((b.sport, b.dport, b.proto), (Some(53), Some(4000), UDP));
    }

    #[test]
    fn static_entry_is_named() {
        let cfg = EngineConfig {
            nat44: Some(Nat44Config {
                inside: vec!["198.18.0.0/24".parse().unwrap()],
                pool: vec!["203.0.113.1/32".parse().unwrap()],
                statics: vec![crate::StaticEntry {
                    inside: [198, 18, 0, 9].into(),
                    outside: [203, 0, 113, 9].into(),
                }],
                ..Nat44Config::default()
            }),
            ..EngineConfig::default()
        };
        let mut e = Engine::new(cfg).unwrap();
        let r = traced(
            &mut e,
            ipv4([198, 51, 100, 9], [203, 0, 113, 9], UDP, &udp(53, 4000)),
        );
        assert_eq!(r.lookup, Lookup::Static);
        assert_eq!(r.direction, Some(Direction::Inbound));
        assert_eq!(r.after.map(|a| a.dst), Some(IpAddr::from([198, 18, 0, 9])));
    }

    #[test]
    fn not_ours_and_garbage() {
        let mut e = nat44();
        let r = traced(
            &mut e,
            ipv4([192, 0, 2, 1], [192, 0, 2, 2], UDP, &udp(1, 2)),
        );
        assert_eq!(r.verdict, Verdict::Drop(DropReason::NotOurs));
        assert_eq!(r.lookup, Lookup::None);
        let r = traced(&mut e, vec![0x45, 0, 0]);
        assert!(matches!(r.verdict, Verdict::Drop(_)));
        assert_eq!(r.before, None);
        for n in 0..64 {
            // Truncations never panic the parser.
            let p = ipv4([198, 18, 0, 7], [198, 51, 100, 9], TCP, &[0; 20]);
            let _ = Headers::parse(p.get(..n).unwrap_or(&[]));
        }
    }

    #[test]
    fn siit_and_nat64_are_named() {
        let cfg = EngineConfig {
            nat64: Some(Nat64Config {
                prefix: "2001:2:0:64::/96".parse().unwrap(),
                pool4: vec!["203.0.113.0/28".parse().unwrap()],
                ..Nat64Config::default()
            }),
            siit: Some(SiitConfig {
                prefix: Some("2001:db8:46::/96".parse().unwrap()),
                pool4: vec!["192.0.2.0/28".parse().unwrap()],
                ..SiitConfig::default()
            }),
            ..EngineConfig::default()
        };
        let e = Engine::new(cfg).unwrap();
        let p = ipv4([198, 51, 100, 9], [203, 0, 113, 1], UDP, &udp(53, 4000));
        assert_eq!(e.translator_of(&p), Some(Translator::Nat64));
        let p = ipv4([198, 51, 100, 9], [192, 0, 2, 1], UDP, &udp(53, 4000));
        assert_eq!(e.translator_of(&p), Some(Translator::Siit));
    }

    /// An IPv6 UDP packet with a valid checksum.
    fn udp6(src: u128, dst: u128) -> Vec<u8> {
        let mut p = vec![0u8; 40 + 12];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&12u16.to_be_bytes());
        p[6] = UDP;
        p[7] = 64;
        p[8..24].copy_from_slice(&src.to_be_bytes());
        p[24..40].copy_from_slice(&dst.to_be_bytes());
        p[40..42].copy_from_slice(&5000u16.to_be_bytes());
        p[42..44].copy_from_slice(&53u16.to_be_bytes());
        p[44..46].copy_from_slice(&12u16.to_be_bytes());
        p[48..52].copy_from_slice(&[1, 2, 3, 4]);
        let sum = xlat_wire::ipv6::pseudo_header_sum(src, dst, 12, UDP);
        let c = xlat_wire::checksum::finish(xlat_wire::checksum::sum(&p[40..], sum));
        p[46..48].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn nat64_and_siit_records() {
        let cfg = EngineConfig {
            nat64: Some(Nat64Config {
                prefix: "2001:2:0:64::/96".parse().unwrap(),
                pool4: vec!["203.0.113.0/28".parse().unwrap()],
                ..Nat64Config::default()
            }),
            siit: Some(SiitConfig {
                prefix: Some("2001:db8:46::/96".parse().unwrap()),
                pool4: vec!["192.0.2.0/28".parse().unwrap()],
                ..SiitConfig::default()
            }),
            ..EngineConfig::default()
        };
        let mut e = Engine::new(cfg).unwrap();
        let host: u128 = 0x2001_0002_0000_0001_0000_0000_0000_0007;
        // To 198.51.100.9 through NAT64's pref64: a new session, IPv6 -> IPv4.
        let r = traced(
            &mut e,
            udp6(host, 0x2001_0002_0000_0064_0000_0000_c633_6409),
        );
        assert_eq!(r.translator, Some(Translator::Nat64));
        assert_eq!(r.lookup, Lookup::Created);
        assert_eq!(r.direction, Some(Direction::Outbound));
        assert_eq!(r.verdict, Verdict::Forward);
        let a = r.after.unwrap();
        assert_eq!(a.dst, IpAddr::from([198, 51, 100, 9]));
        assert!(matches!(a.src, IpAddr::V4(s) if s.octets()[..3] == [203, 0, 113]));
        assert_eq!((a.proto, a.dport), (UDP, Some(53)));
        // SIIT: stateless, its pool4 as the source of 2001:db8:46::c000:201.
        let r = traced(
            &mut e,
            udp6(
                0x2001_0db8_0046_0000_0000_0000_c000_0201,
                0x2001_0db8_0046_0000_0000_0000_c633_6409,
            ),
        );
        assert_eq!(r.translator, Some(Translator::Siit));
        assert_eq!(r.lookup, Lookup::Stateless);
        assert_eq!(r.verdict, Verdict::Forward, "{r:?}");
        assert_eq!(
            r.after.map(|a| (a.src, a.dst)),
            Some((
                IpAddr::from([192, 0, 2, 1]),
                IpAddr::from([198, 51, 100, 9])
            ))
        );
    }

    #[test]
    fn batch_traced_keeps_what_the_filter_takes_up_to_max() {
        let mut e = nat44();
        let mut plain = nat44();
        let pkts: Vec<Vec<u8>> = (0..6u16)
            .map(|i| {
                let src = [198, 18, 0, 1 + (i % 2) as u8];
                ipv4(src, [198, 51, 100, 9], UDP, &udp(1000 + i, 53))
            })
            .collect();
        let mut rooms: Vec<Vec<u8>> = pkts
            .iter()
            .map(|p| {
                let mut r = vec![0u8; crate::HEADROOM + p.len() + crate::HEADROOM];
                r[crate::HEADROOM..crate::HEADROOM + p.len()].copy_from_slice(p);
                r
            })
            .collect();
        let mut bufs: Vec<PacketBuf> = rooms
            .iter_mut()
            .zip(&pkts)
            .filter_map(|(r, p)| PacketBuf::new(r, crate::HEADROOM, p.len()))
            .collect();
        let mut vs = vec![Verdict::Held; bufs.len()];
        let filter = TraceFilter {
            inside: Some(IpAddr::from([198, 18, 0, 2])),
            ..TraceFilter::default()
        };
        let mut out = Vec::with_capacity(2);
        let n =
            e.process_batch_traced(Time::from_secs(1), &mut bufs, &mut vs, &filter, &mut out, 2);
        assert_eq!(n, 2);
        assert_eq!(out.len(), 2);
        assert!(out
            .iter()
            .all(|r| r.before.map(|b| b.src) == Some(IpAddr::from([198, 18, 0, 2]))));
        assert!(vs.iter().all(|v| *v == Verdict::Forward));
        // Translated as the untraced path translates.
        for p in &pkts {
            let mut q = p.clone();
            assert_eq!(
                plain.process_vec(Time::from_secs(1), &mut q),
                Verdict::Forward
            );
        }
        assert_eq!(e.stats(), plain.stats());
        let udp_only = TraceFilter {
            proto: Some(Proto::Tcp),
            ..TraceFilter::default()
        };
        let h = Headers::parse(&pkts[0]);
        assert!(!udp_only.takes(h.as_ref(), None));
    }
}
