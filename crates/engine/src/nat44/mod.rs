//! NAT44: static 1:1, dynamic pool (Basic NAT) and NAPT.
//!
//! - RFC 3022 (traditional NAT): 2.1 Basic NAT, 2.2 NAPT, 4.1 IP/TCP/UDP/ICMP header changes.
//! - RFC 4787 (UDP): endpoint-independent mapping (REQ-1), paired pooling (REQ-2), port
//!   preservation within the configured range (REQ-3), configurable filtering (REQ-8, section
//!   5), mapping refresh on outbound (REQ-6), 5 min timeout (REQ-5), hairpinning (REQ-9),
//!   fragments (REQ-14).
//! - RFC 5382 (TCP): endpoint-independent mapping (REQ-1), simultaneous open (REQ-2), state
//!   tracking with 2 h 4 min established and 4 min transitory timeouts (REQ-5), hairpinning
//!   (REQ-8). The state machine is RFC 6146 3.5.2.2 (see [`crate::tcp`]).
//! - RFC 5508 (ICMP): query identifier translation (REQ-1, 60 s), ICMP errors translated with
//!   their embedded packet and its checksums (REQ-3, REQ-4), hairpinned ICMP (REQ-7, REQ-9).
//! - Checksums are updated incrementally (RFC 1624), so a bad one stays bad.
//!
//! The packet path is `process` -> classify by address -> `outbound` / `inbound` -> (hairpin:
//! `inbound` once more). Each step returns `Result<_, DropReason>`; `?` ends the packet.
//!
//! State: hosts (inside address -> paired outside address, RFC 4787 REQ-2), mappings (the BIB:
//! inside endpoint <-> outside endpoint, one per protocol) and sessions (mapping + remote
//! endpoint, with the TCP state and expiry). A mapping lives as long as its sessions.

use std::collections::VecDeque;

use hashbrown::HashMap;
use xlat_wire::field::{chunk_mut, set_u16, set_u32, u16_at, u32_at, u8_at};
use xlat_wire::ipv4::{self, proto as ipproto, Ipv4Header};
use xlat_wire::l4::{icmp, tcp, udp};
use xlat_wire::{checksum, Delta};

use crate::alg::{self, Announced, FtpAlg};
use crate::config::{Nat44Config, Nat44Mode, PrefixSet4};
use crate::counters::{wrote, Counters, DropReason, Event};
use crate::flow::{Endpoint, FlowKey, Proto};
use crate::frag::{earliest, FragId, FragTable, Rewrite};
use crate::napt::{Napt, NaptConfig, NO_CAND};
use crate::offload::{self, OffloadKind, OffloadOp};
use crate::snapshot::{SessionFilter, SessionInfo, SessionState, Stats};
use crate::tcp::Dir;
use crate::{PacketBuf, Time, Verdict};

/// The transport part of a packet that can open or match a session.
#[derive(Clone, Copy, Debug)]
struct Flow {
    proto: Proto,
    src: Endpoint,
    dst: Endpoint,
    tcp_flags: u8,
}

/// What the transport header says about the packet.
enum L4 {
    Flow(Flow),
    IcmpError,
    /// A protocol without ports (or a later fragment): only static entries translate it.
    Other,
}

/// Which header field a rewrite touches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Src,
    Dst,
}

/// What stage 1 of [`crate::Engine::process_batch`] learned about a packet NAPT will look up:
/// its session-index key and hash (to prefetch, and to look up again without rehashing),
/// and whether it may take the established-flow lane ([`Nat44::lane`]).
#[derive(Clone, Copy, Debug)]
pub struct Lane44 {
    hash: u64,
    /// The index entry stage 2 found under `hash` ([`Napt::prefetch_session`]).
    cand: u32,
    key: FlowKey<u32>,
    /// The IPv4 total length (bytes after it are link padding).
    total_len: u16,
    tcp_flags: u8,
    /// A plain TCP/UDP packet of a dynamic flow: 20-byte header (checksum verified where
    /// configured), not a fragment, no SYN/FIN/RST, not hairpinned.
    fast: bool,
}

/// The NAT44 translator state.
pub struct Nat44 {
    cfg: Nat44Config,
    /// `cfg.inside`, prepared for the per-packet test.
    inside: PrefixSet4,
    static_in: HashMap<u32, u32>,
    static_out: HashMap<u32, u32>,
    napt: Napt<u32>,
    frags: FragTable,
    ready: VecDeque<Vec<u8>>,
    /// The FTP ALG (`alg = ["ftp"]`), if on ([`crate::alg`]).
    ftp: Option<Box<FtpAlg>>,
}

impl Nat44 {
    pub fn new(cfg: Nat44Config, seed: u64) -> Self {
        let static_in = cfg
            .statics
            .iter()
            .map(|s| (u32::from(s.inside), u32::from(s.outside)))
            .collect();
        let static_out = cfg
            .statics
            .iter()
            .map(|s| (u32::from(s.outside), u32::from(s.inside)))
            .collect();
        let frags = FragTable::new(
            cfg.limits.max_fragment_flows,
            cfg.limits.max_fragments_held,
            cfg.timeouts.fragment,
        );
        let mut napt = Napt::new(
            NaptConfig {
                mode: cfg.mode,
                filtering: cfg.filtering,
                ports: cfg.ports,
                timeouts: cfg.timeouts,
                limits: cfg.limits,
                inbound_refresh: cfg.inbound_refresh,
                det: cfg.deterministic_map(),
            },
            &cfg.pool,
            seed,
        );
        napt.set_forwards(&cfg.forwards);
        let ftp = cfg.alg_ftp.then(|| Box::new(FtpAlg::new(false)));
        if ftp.is_some() {
            napt.set_alg_port(alg::FTP_PORT);
        }
        Nat44 {
            inside: PrefixSet4::new(&cfg.inside),
            cfg,
            static_in,
            static_out,
            napt,
            frags,
            ready: VecDeque::new(),
            ftp,
        }
    }

    #[inline(always)]
    fn is_inside(&self, a: u32) -> bool {
        self.inside.contains(a) || (!self.static_in.is_empty() && self.static_in.contains_key(&a))
    }

    /// An address this NAT answers for on the outside: a pool or static outside address.
    #[inline(always)]
    fn is_outside(&self, a: u32) -> bool {
        self.napt.is_pool(a) || (!self.static_out.is_empty() && self.static_out.contains_key(&a))
    }

    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// True with the FTP ALG on (`alg = ["ftp"]`): it reads and rewrites control
    /// connections' payload, which needs their checksums complete.
    pub(crate) fn ftp_alg(&self) -> bool {
        self.ftp.is_some()
    }

    /// Translates one packet in place.
    pub fn process(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        if self.ftp.is_some() && alg::is_control4(buf.data()) {
            return self.process_ftp(now, buf, c);
        }
        self.process_plain(now, buf, c)
    }

    /// An FTP control segment with the ALG on ([`crate::alg`]): an inbound one has its
    /// sequence numbers moved before translation, an outbound one its lines rewritten and
    /// its numbers moved after (the ALG works on the outside view of the connection).
    #[cold]
    fn process_ftp(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        let (Some(src), Some(dst)) = (
            u32_at(buf.data(), ipv4::off::SRC),
            u32_at(buf.data(), ipv4::off::DST),
        ) else {
            return self.process_plain(now, buf, c);
        };
        let Some(mut ftp) = self.ftp.take() else {
            return self.process_plain(now, buf, c);
        };
        let outbound = self.is_inside(src);
        // Hairpinned control connections are translated twice and not rewritten.
        let hairpin = outbound && self.is_outside(dst);
        if !outbound && self.is_outside(dst) {
            if let Err(e) = ftp.inbound(now, buf, c) {
                self.ftp = Some(ftp);
                return Verdict::Drop(e);
            }
        }
        let mut v = self.process_plain(now, buf, c);
        if outbound && !hairpin && v == Verdict::Forward {
            let napt = &mut self.napt;
            // A static 1:1 host keeps its ports and admits every remote (RFC 2663 4.1.1):
            // its announced endpoint only changes address.
            let static_out = self.static_in.get(&src).copied();
            let (ext, remote) = (
                u32_at(buf.data(), ipv4::off::SRC).unwrap_or(0),
                u32_at(buf.data(), ipv4::off::DST).unwrap_or(0),
            );
            // RFC 959 4.1.2 PORT / RFC 2428 EPRT |1| from an inside client, 227 / 229 from
            // a port-forwarded inside server: only the control connection's own host (a PORT
            // naming another is a bounce, RFC 2577) gets a mapping.
            let mut map = |a: Announced, c: &mut Counters| {
                let port = match a {
                    Announced::V4(addr, port) if addr == src && port != 0 => port,
                    Announced::Own(port) if port != 0 => port,
                    _ => return None,
                };
                if let Some(addr) = static_out {
                    return Some(Endpoint { addr, port });
                }
                napt.expect(now, Endpoint { addr: src, port }, ext, remote, c)
            };
            if let Err(e) = ftp.outbound(now, buf, &mut map, c) {
                v = Verdict::Drop(e);
            }
        }
        self.ftp = Some(ftp);
        v
    }

    fn process_plain(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        let h = match Ipv4Header::parse(buf.data(), self.cfg.verify_ip_checksum) {
            Ok(h) => h,
            Err(e) => return Verdict::Drop(e.into()),
        };
        // Bytes past the IPv4 total length (link padding) are not part of the packet.
        buf.truncate(h.total_len);
        let pkt = buf.data_mut();
        let r = if h.is_later_fragment() {
            self.later_fragment(now, pkt, &h, c)
        } else {
            self.translate(now, pkt, &h, c).and_then(|()| {
                if h.more_fragments {
                    self.first_fragment_done(now, pkt, &h, c)
                } else {
                    Ok(true)
                }
            })
        };
        match r {
            Ok(true) => Verdict::Forward,
            Ok(false) => Verdict::Held,
            Err(reason) => Verdict::Drop(reason),
        }
    }

    /// The session-index key a packet would look up, if it is a plain TCP/UDP/ICMP-query
    /// packet of a dynamic flow (for batch prefetching; the real work re-derives it).
    fn flow_key(&self, pkt: &[u8]) -> Option<FlowKey<u32>> {
        let h = Ipv4Header::parse(pkt, false).ok()?;
        if h.is_later_fragment() {
            return None;
        }
        let L4::Flow(f) = parse_l4(pkt, &h).ok()? else {
            return None;
        };
        let rp = |p: u16| f.proto.remote_port(p);
        if self.is_inside(h.src) {
            if self.static_in.contains_key(&h.src) {
                return None;
            }
            let remote = Endpoint {
                addr: f.dst.addr,
                port: rp(f.dst.port),
            };
            Some(FlowKey::Out(f.proto, f.src, remote))
        } else if self.napt.is_pool(h.dst) {
            let remote = Endpoint {
                addr: f.src.addr,
                port: rp(f.src.port),
            };
            Some(FlowKey::In(f.proto, f.dst, remote))
        } else {
            None
        }
    }

    /// See [`crate::napt::Napt::set_ranges`].
    pub fn set_ranges(&mut self, ports: (u16, u16), icmp_ids: (u16, u16)) {
        self.napt.set_ranges(ports, icmp_ids);
    }

    /// Batch stage 1: plans `pkt` (see [`Lane44`]) and starts fetching the index slot it
    /// will probe (`None`: nothing to prefetch, the packet takes the full path).
    #[inline(always)]
    pub fn plan(&self, pkt: &[u8]) -> Option<Lane44> {
        let mut lane = match self.fast_key(pkt) {
            Some(l) => l,
            None => Lane44 {
                key: self.flow_key(pkt)?,
                hash: 0,
                cand: NO_CAND,
                fast: false,
                total_len: 0,
                tcp_flags: 0,
            },
        };
        lane.hash = self.napt.prefetch_index(&lane.key);
        Some(lane)
    }

    /// The minimal parse of the established-flow lane: the key of a packet the full path
    /// would hand straight to [`Napt::outbound`] / [`Napt::inbound`] and rewrite, without
    /// fragment, option, static-entry, ICMP or hairpin handling; `None` for anything else.
    /// Reads only the fixed 20-byte header and the first 14 bytes of the transport header.
    #[inline(always)]
    fn fast_key(&self, pkt: &[u8]) -> Option<Lane44> {
        let f: &[u8; 20] = pkt.first_chunk()?;
        let total_len = u16::from_be_bytes([f[2], f[3]]);
        // Version 4, IHL 5 (options take the full path); MF clear and offset 0 (RFC 4787
        // REQ-14: fragments take the full path); the transport header present.
        let ff = u16::from_be_bytes([f[6], f[7]]);
        if f[0] != 0x45 || ff & 0x3fff != 0 || usize::from(total_len) > pkt.len() {
            return None;
        }
        let (proto, need) = match f[9] {
            ipproto::UDP => (Proto::Udp, udp::HEADER),
            ipproto::TCP => (Proto::Tcp, tcp::NEEDED),
            _ => return None,
        };
        if usize::from(total_len) < ipv4::MIN_HEADER + need {
            return None;
        }
        let tcp_flags = match proto {
            Proto::Tcp => u8_at(pkt, ipv4::MIN_HEADER + tcp::FLAGS)?,
            _ => 0,
        };
        // RFC 6146 3.5.2.2: SYN, FIN and RST move the TCP state machine (or open sessions):
        // the full path handles them.
        if tcp_flags & (crate::tcp::SYN | crate::tcp::FIN | crate::tcp::RST) != 0 {
            return None;
        }
        if self.cfg.verify_ip_checksum && !xlat_wire::checksum::header_verifies(f) {
            return None;
        }
        let src = u32::from_be_bytes([f[12], f[13], f[14], f[15]]);
        let dst = u32::from_be_bytes([f[16], f[17], f[18], f[19]]);
        let sport = u16_at(pkt, ipv4::MIN_HEADER)?;
        let dport = u16_at(pkt, ipv4::MIN_HEADER + 2)?;
        let (s, d) = (
            Endpoint {
                addr: src,
                port: sport,
            },
            Endpoint {
                addr: dst,
                port: dport,
            },
        );
        // Classified as `translate` does: inside source first, then an outside destination.
        let key = if self.is_inside(src) {
            if self.cfg.mode == Nat44Mode::Static
                || (!self.static_in.is_empty() && self.static_in.contains_key(&src))
                || self.is_outside(dst)
            {
                return None;
            }
            FlowKey::Out(proto, s, d)
        } else if self.napt.is_pool(dst)
            && (self.static_out.is_empty() || !self.static_out.contains_key(&dst))
        {
            FlowKey::In(proto, d, s)
        } else {
            return None;
        };
        // With the FTP ALG on, its control connections take the full path.
        if self.ftp.is_some() && alg::is_control_key(&key) {
            return None;
        }
        Some(Lane44 {
            key,
            hash: 0,
            cand: NO_CAND,
            fast: true,
            total_len,
            tcp_flags,
        })
    }

    /// The established-flow lane (batch stage 3): for a packet [`Nat44::plan`] found fast,
    /// which the full path would hand straight to [`Napt::outbound`] / [`Napt::inbound`],
    /// does what they do with the stage-1 hash ([`Napt::lane_or_new`]: the session
    /// refreshed as the full path does, RFC 4787 REQ-6, RFC 6146 3.5.2.2, or a new one
    /// made, RFC 4787 REQ-1 and 5) and rewrites address, port and checksums with the full
    /// path's own RFC 1624 rewrite, so output, counters and state are the full path's.
    /// `None` (nothing changed) sends the packet to the full path.
    #[inline]
    pub fn lane(
        &mut self,
        now: Time,
        buf: &mut PacketBuf,
        l: &Lane44,
        c: &mut Counters,
    ) -> Option<Verdict> {
        if !l.fast {
            return None;
        }
        let tr = self
            .napt
            .lane_or_new(now, &l.key, l.hash, l.cand, l.tcp_flags, c);
        // Bytes past the IPv4 total length (link padding) are not part of the packet.
        buf.truncate(usize::from(l.total_len));
        let tr = match tr {
            Ok(tr) => tr,
            Err(e) => return Some(Verdict::Drop(e)),
        };
        let pkt = buf.data_mut();
        match l.key {
            FlowKey::Out(proto, src, _) => {
                let (l4, old) = (ipv4::MIN_HEADER, src.port);
                if let Err(e) = rewrite_endpoint(pkt, l4, proto, Side::Src, old, tr.ext) {
                    return Some(Verdict::Drop(e));
                }
                c.event(Event::Outbound);
            }
            FlowKey::In(proto, dst, _) => {
                let (l4, old) = (ipv4::MIN_HEADER, dst.port);
                if let Err(e) = rewrite_endpoint(pkt, l4, proto, Side::Dst, old, tr.int) {
                    return Some(Verdict::Drop(e));
                }
                c.event(Event::Inbound);
            }
        }
        Some(Verdict::Forward)
    }

    /// The lane's view of a packet (for tests): is it fast, and which key?
    #[cfg(test)]
    pub(crate) fn lane_key(&self, pkt: &[u8]) -> Option<(bool, FlowKey<u32>)> {
        self.plan(pkt).map(|l| (l.fast, l.key))
    }

    /// Batch stage 2: starts fetching the session behind a stage-1 plan (noting the index
    /// entry for stage 3) or, when the index has none (a new flow), the BIB slot its
    /// creation will probe ([`Napt::prefetch_new`]).
    #[inline(always)]
    pub fn prefetch_session(&self, l: &mut Lane44) {
        l.cand = self.napt.prefetch_session(&l.key, l.hash);
        if l.cand == NO_CAND {
            self.napt.prefetch_new(&l.key, l.hash);
        }
    }

    /// Classifies by address and translates; then hairpins if the result is addressed to
    /// one of our outside addresses (RFC 4787 REQ-9, RFC 5382 REQ-8, RFC 5508 REQ-9).
    fn translate(
        &mut self,
        now: Time,
        pkt: &mut [u8],
        h: &Ipv4Header,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        if self.is_inside(h.src) {
            self.outbound(now, pkt, h, c)?;
            c.event(Event::Outbound);
            // Outbound translation rewrites only the source.
            if self.is_outside(h.dst) {
                let h2 = Ipv4Header {
                    src: u32_at(pkt, ipv4::off::SRC).unwrap_or(h.src),
                    ..*h
                };
                // RFC 4787 REQ-9: the packet leaves with its outside source and is then
                // treated as if it arrived on the outside. Its source is now an outside
                // address, so this cannot recurse.
                self.inbound(now, pkt, &h2, c)?;
                c.event(Event::Hairpinned);
            }
            Ok(())
        } else if self.is_outside(h.dst) {
            self.inbound(now, pkt, h, c)?;
            c.event(Event::Inbound);
            Ok(())
        } else {
            Err(DropReason::NotOurs)
        }
    }

    /// RFC 4787 REQ-14: remember the first fragment's translation for the later ones and
    /// release later fragments that arrived before it.
    #[cold]
    #[inline(never)]
    fn first_fragment_done(
        &mut self,
        now: Time,
        pkt: &[u8],
        h: &Ipv4Header,
        c: &mut Counters,
    ) -> Result<bool, DropReason> {
        let key = FragId::of4(h);
        let (src, dst) = (
            u32_at(pkt, ipv4::off::SRC).unwrap_or(h.src),
            u32_at(pkt, ipv4::off::DST).unwrap_or(h.dst),
        );
        let rewrite = Rewrite::To4 { src, dst };
        self.frags
            .first(key, Some(rewrite), h.payload_len(), None, now)?;
        c.event(Event::Fragments);
        let mut held = Vec::new();
        self.frags.take_held(key, &mut held);
        for mut frag in held {
            if let Ok(fh) = Ipv4Header::parse(&frag, false) {
                let later = self.frags.later4(&fh, now, false);
                if later.rewrite.is_some() {
                    ipv4::rewrite_src(&mut frag, src);
                    ipv4::rewrite_dst(&mut frag, dst);
                    c.event(Event::Fragments);
                    self.ready.push_back(frag);
                }
            }
        }
        Ok(true)
    }

    /// A non-first fragment carries no transport header: static entries translate it by
    /// address; dynamic ones use the first fragment's translation (RFC 4787 REQ-14).
    #[cold]
    #[inline(never)]
    fn later_fragment(
        &mut self,
        now: Time,
        pkt: &mut [u8],
        h: &Ipv4Header,
        c: &mut Counters,
    ) -> Result<bool, DropReason> {
        // RFC 3128 / RFC 4787 REQ-14 a: a later fragment may not overwrite the ports or the
        // TCP flags that the translation (and the receiver's filter) decided on.
        let l4_min: u16 = match h.proto {
            ipproto::TCP => 20,
            ipproto::UDP => 8,
            _ => 0,
        };
        if u32::from(h.frag_offset) * 8 < u32::from(l4_min) {
            return Err(DropReason::FragmentOverlap);
        }
        let static_src = self.static_in.get(&h.src).copied();
        let static_dst = self.static_out.get(&h.dst).copied();
        let to_pool = self.napt.is_pool(h.dst);
        let dynamic_src = static_src.is_none() && self.is_inside(h.src);
        if !to_pool && !dynamic_src {
            if static_src.is_none() && static_dst.is_none() {
                return Err(DropReason::NotOurs);
            }
            // Static 1:1 (also static-to-static hairpin): address only, no state.
            if let Some(a) = static_src {
                ipv4::rewrite_src(pkt, a);
            }
            if let Some(a) = static_dst {
                ipv4::rewrite_dst(pkt, a);
            }
            c.event(Event::Fragments);
            c.event(Event::StaticTranslated);
            return Ok(true);
        }
        let key = FragId::of4(h);
        let later = self.frags.later4(h, now, false);
        match later.rewrite {
            Some(Rewrite::To4 { src, dst }) => {
                ipv4::rewrite_src(pkt, src);
                ipv4::rewrite_dst(pkt, dst);
                c.event(Event::Fragments);
                Ok(true)
            }
            // NAT44 records only IPv4 rewrites: another kind would be a broken invariant.
            Some(Rewrite::To6 { .. }) => Err(DropReason::Internal),
            None => {
                self.frags.hold(key, pkt, now)?;
                c.event(Event::FragmentsHeld);
                Ok(false)
            }
        }
    }

    /// Inside -> outside (RFC 3022 4.1; RFC 4787 4.1; RFC 5508 3).
    fn outbound(
        &mut self,
        now: Time,
        pkt: &mut [u8],
        h: &Ipv4Header,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        let l4 = parse_l4(pkt, h)?;
        if let L4::IcmpError = l4 {
            return self.icmp_error(now, pkt, h, Dir::Out, c);
        }
        if let Some(&out) = self.static_in.get(&h.src) {
            // RFC 2663 4.1.1: static 1:1, address only, any protocol.
            rewrite_addr_only(pkt, h, Side::Src, out);
            c.event(Event::StaticTranslated);
            return Ok(());
        }
        let L4::Flow(f) = l4 else {
            return Err(DropReason::UnsupportedProtocol);
        };
        if self.cfg.mode == Nat44Mode::Static {
            return Err(DropReason::NoStaticMapping);
        }
        let ext = self
            .napt
            .outbound(now, f.proto, f.src, f.dst, f.tcp_flags, c)?;
        rewrite_endpoint(pkt, h.header_len, f.proto, Side::Src, f.src.port, ext)
    }

    /// Outside -> inside (RFC 3022 4.1; RFC 4787 5 filtering; RFC 5508 3).
    fn inbound(
        &mut self,
        now: Time,
        pkt: &mut [u8],
        h: &Ipv4Header,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        let l4 = parse_l4(pkt, h)?;
        if let L4::IcmpError = l4 {
            return self.icmp_error(now, pkt, h, Dir::In, c);
        }
        if let Some(&int) = self.static_out.get(&h.dst) {
            rewrite_addr_only(pkt, h, Side::Dst, int);
            c.event(Event::StaticTranslated);
            return Ok(());
        }
        let L4::Flow(f) = l4 else {
            return Err(DropReason::UnsupportedProtocol);
        };
        let int = self
            .napt
            .inbound(now, f.proto, f.dst, f.src, f.tcp_flags, c)?;
        rewrite_endpoint(pkt, h.header_len, f.proto, Side::Dst, f.dst.port, int)
    }

    /// RFC 5508 4 (REQ-3, REQ-4): translates an ICMP error -- the outer header, and the
    /// embedded packet's address, port (or identifier) and checksums -- using the session of
    /// the embedded packet. `Dir::In`: an error sent to an outside address about a packet we
    /// sent out (the embedded source is ours). `Dir::Out`: an error from the inside about a
    /// packet we delivered (the embedded destination is the inside endpoint).
    fn icmp_error(
        &mut self,
        now: Time,
        pkt: &mut [u8],
        h: &Ipv4Header,
        dir: Dir,
        c: &mut Counters,
    ) -> Result<(), DropReason> {
        if h.is_fragment() {
            return Err(DropReason::FragmentedIcmpError);
        }
        let icmp_off = h.header_len;
        let inner_off = icmp_off + icmp::HEADER;
        let inner = pkt
            .get(inner_off..)
            .and_then(Inner::parse)
            .ok_or(DropReason::IcmpErrorMalformed)?;
        // RFC 5508 REQ-3 a: an error whose ICMP checksum or embedded IP header checksum fails
        // is dropped (both are cheap here: errors are rare and short).
        let icmp_ok = pkt
            .get(icmp_off..)
            .is_some_and(xlat_wire::checksum::verifies);
        let inner_ok = pkt
            .get(inner_off..inner_off + inner.header_len)
            .is_some_and(xlat_wire::checksum::verifies);
        if !icmp_ok || !inner_ok {
            return Err(DropReason::IcmpErrorBadChecksum);
        }
        let proto = Proto::from_ip(inner.proto).ok_or(DropReason::IcmpErrorMalformed)?;
        let inner_l4 = inner_off + inner.header_len;
        // The embedded side that is ours: its source when the error comes in, its
        // destination when it goes out.
        let (addr_field, port_field, remote_addr_field, remote_port_field) = match dir {
            Dir::In => (
                ipv4::off::SRC,
                proto.src_port_off(),
                ipv4::off::DST,
                proto.dst_port_off(),
            ),
            Dir::Out => (
                ipv4::off::DST,
                proto.dst_port_off(),
                ipv4::off::SRC,
                proto.src_port_off(),
            ),
        };
        let rd32 = |off| u32_at(pkt, off).ok_or(DropReason::IcmpErrorMalformed);
        let rd16 = |off| u16_at(pkt, off).ok_or(DropReason::IcmpErrorMalformed);
        let our = Endpoint {
            addr: rd32(inner_off + addr_field)?,
            port: rd16(inner_l4 + port_field)?,
        };
        let remote = Endpoint {
            addr: rd32(inner_off + remote_addr_field)?,
            port: rd16(inner_l4 + remote_port_field)?,
        };
        if proto == Proto::Icmp {
            let t = u8_at(pkt, inner_l4).ok_or(DropReason::IcmpErrorMalformed)?;
            if !is_query(t) {
                return Err(DropReason::IcmpErrorMalformed);
            }
        }
        // The translated endpoint: static entries by address, others by their session.
        let statics = match dir {
            Dir::In => &self.static_out,
            Dir::Out => &self.static_in,
        };
        let new = if let Some(&a) = statics.get(&our.addr) {
            Endpoint {
                addr: a,
                port: our.port,
            }
        } else {
            match dir {
                Dir::In => self.napt.find_by_outside(now, proto, our, remote, c),
                Dir::Out => self.napt.find_by_inside(now, proto, our, remote, c),
            }
            .ok_or(DropReason::IcmpErrorNoSession)?
        };
        // Outer header: the error goes to the inside endpoint, or comes from the outside
        // address (also when an inside router, not the host, sent it).
        match dir {
            Dir::In => ipv4::rewrite_dst(pkt, new.addr),
            Dir::Out => ipv4::rewrite_src(pkt, new.addr),
        };
        // Embedded packet; every word changed inside the ICMP message feeds the outer ICMP
        // checksum (all offsets are even relative to the ICMP header, so RFC 1624 applies).
        let mut outer = Delta::ZERO;
        let d_addr = Delta::ZERO.addr(our.addr, new.addr);
        let d_port = Delta::ZERO.word(our.port, new.port);
        wrote(
            set_u32(pkt, inner_off + addr_field, new.addr)
                & set_u16(pkt, inner_l4 + port_field, new.port),
        )?;
        outer = outer.plus(d_addr);
        outer = outer.plus(update_cksum(
            pkt,
            inner_off + ipv4::off::CHECKSUM,
            d_addr,
            false,
        ));
        outer = outer.plus(d_port);
        outer = outer.plus(match proto {
            Proto::Tcp => update_cksum(pkt, inner_l4 + tcp::CHECKSUM, d_addr.plus(d_port), false),
            Proto::Udp => update_cksum(pkt, inner_l4 + udp::CHECKSUM, d_addr.plus(d_port), true),
            Proto::Icmp => update_cksum(pkt, inner_l4 + icmp::CHECKSUM, d_port, false),
        });
        update_cksum(pkt, icmp_off + icmp::CHECKSUM, outer, false);
        c.event(Event::IcmpErrorsTranslated);
        Ok(())
    }

    /// When [`Nat44::expire`] next has work ([`crate::Engine::poll_timeout`]).
    pub fn poll_timeout(&self, now: Time) -> Option<Time> {
        let ftp = self.ftp.as_ref().is_some_and(|f| f.controls() > 0);
        let sweep = (self.napt.needs_sweep() || ftp).then(|| crate::sweep_after(now));
        earliest(sweep, self.frags.next_due())
    }

    /// Whether [`crate::Engine::expire_step`] should sweep this translator now (see
    /// `Napt::wants_expiry_step`).
    pub fn wants_expiry_step(&self, now: Time) -> bool {
        self.napt.wants_expiry_step(now)
    }

    /// Removes expired sessions (up to `budget` slots looked at) and fragment state.
    pub fn expire(&mut self, now: Time, budget: usize, c: &mut Counters) -> usize {
        let removed = self.napt.expire(now, budget, c);
        if let Some(ftp) = &mut self.ftp {
            ftp.expire(now, self.cfg.timeouts.tcp_established);
            self.napt.expire_expects(now);
        }
        // NAT44 holds no ICMP first fragments (no checksum to complete): only held later
        // fragments can time out.
        let (held, _) = self.frags.expire(now);
        for _ in 0..held {
            c.drop(DropReason::FragmentNoFirst);
        }
        removed
    }

    /// Static entries first, then the live dynamic sessions, those `f` takes, at most
    /// `limit` in all.
    pub fn sessions(&self, now: Time, f: &SessionFilter, limit: usize) -> Vec<SessionInfo> {
        let mut out: Vec<SessionInfo> = self
            .cfg
            .statics
            .iter()
            .filter(|s| f.takes_static(s.inside.into(), s.outside))
            .take(limit)
            .map(|s| SessionInfo {
                inside: s.inside.into(),
                outside: s.outside,
                state: SessionState::Static,
                ..SessionInfo::default()
            })
            .collect();
        let left = limit.saturating_sub(out.len());
        self.napt.sessions(now, f, left, &mut out);
        out
    }

    /// A page of the static entries `f` takes, from entry `from` (see
    /// [`crate::Engine::sessions_page`]); `None` when they are done.
    pub fn statics_page(
        &self,
        f: &SessionFilter,
        from: u32,
        (rows, visits): (usize, usize),
        out: &mut Vec<SessionInfo>,
    ) -> Option<u32> {
        let mut taken = 0;
        let mut next = from as usize;
        for s in self.cfg.statics.iter().skip(next).take(visits) {
            next += 1;
            if !f.takes_static(s.inside.into(), s.outside) {
                continue;
            }
            out.push(SessionInfo {
                inside: s.inside.into(),
                outside: s.outside,
                state: SessionState::Static,
                ..SessionInfo::default()
            });
            taken += 1;
            if taken >= rows {
                break;
            }
        }
        (next < self.cfg.statics.len())
            .then(|| u32::try_from(next).ok())
            .flatten()
    }

    /// A page of the live dynamic sessions `f` takes (see [`crate::Engine::sessions_page`]).
    pub fn sessions_page(
        &self,
        now: Time,
        f: &SessionFilter,
        from: u32,
        budget: (usize, usize),
        out: &mut Vec<SessionInfo>,
    ) -> Option<u32> {
        self.napt.sessions_page(now, f, from, budget, out)
    }

    /// Removes the dynamic sessions `f` takes; returns how many.
    pub fn clear(&mut self, now: Time, f: &SessionFilter) -> u64 {
        self.napt.clear(now, f)
    }

    /// See [`crate::napt::Napt::end_some`].
    pub fn end_some(&mut self, now: Time, reason: crate::events::EndReason, max: usize) -> u64 {
        self.napt.end_some(now, reason, max)
    }

    /// Its NAPT state, for sessions synced from another gateway ([`crate::synced`]).
    pub(crate) fn napt_mut(&mut self) -> &mut Napt<u32> {
        &mut self.napt
    }

    /// Adds NAT44's table sizes and pool use to `st`.
    /// Lets NAPT sessions be handed to a fast path ([`crate::offload`]).
    pub fn set_offload(&mut self, on: bool) {
        self.napt.set_offload(on);
    }

    /// See [`crate::Engine::set_offload_after`].
    pub fn set_offload_after(&mut self, packets: u8) {
        self.napt.set_offload_after(packets);
    }

    /// See [`crate::Engine::hold_offload`].
    pub fn hold_offload(&mut self, now: Time, f: Option<SessionFilter>) -> u64 {
        self.napt.hold_offload(now, f)
    }

    /// Applies the live-changeable settings ([`crate::reconfigure`]).
    pub(crate) fn set_live(&mut self, l: crate::reconfigure::Live) {
        crate::reconfigure::Stateful::set_live(&mut self.cfg, l);
        self.napt.set_live(l);
    }

    /// Takes a new configuration [`crate::reconfigure`] checked: its inside prefixes, pool,
    /// static entries and port forwards, ending the dynamic sessions they no longer allow
    /// (`napt/repool.rs`: an address gone from the pool, a forward changed, an inside
    /// address no longer inside or now a static entry's). Returns how many ended.
    pub(crate) fn reshape(&mut self, now: Time, cfg: &Nat44Config) -> u64 {
        self.static_in = cfg
            .statics
            .iter()
            .map(|s| (u32::from(s.inside), u32::from(s.outside)))
            .collect();
        self.static_out = cfg
            .statics
            .iter()
            .map(|s| (u32::from(s.outside), u32::from(s.inside)))
            .collect();
        self.inside = PrefixSet4::new(&cfg.inside);
        let (inside, statics) = (&self.inside, &self.static_in);
        // A static entry's host is translated by its entry, never by a session.
        let keep = |a: u32| inside.contains(a) && !statics.contains_key(&a);
        let ended = self.napt.repool(now, &cfg.pool, &cfg.forwards, keep);
        self.cfg = cfg.clone();
        ended
    }

    /// Starts (`capacity` > 0) or stops the state-event stream ([`crate::events`]).
    pub fn set_events(&mut self, capacity: usize) {
        self.napt.set_events(capacity);
    }

    /// Appends the state events since the last call; returns those dropped since.
    pub fn drain_events(&mut self, out: &mut Vec<crate::events::StateEvent>) -> u64 {
        self.napt.drain_events(out)
    }

    /// The recipes of a NAT44 session's fast-path event ([`crate::events`]); `token` is
    /// the session id.
    pub fn offload_op(ev: &crate::events::StateEvent, kind: OffloadKind) -> Option<OffloadOp> {
        let std::net::IpAddr::V4(inside) = ev.inside else {
            return None;
        };
        let ep = |a: std::net::Ipv4Addr, port| Endpoint {
            addr: u32::from(a),
            port,
        };
        let (o, i) = offload::nat44_recipes(
            ev.proto,
            ep(inside, ev.inside_port),
            ep(ev.outside, ev.outside_port),
            ep(ev.remote, ev.remote_port),
        );
        Some(OffloadOp {
            kind,
            token: u64::from(ev.session?),
            recipes: offload::Recipes::Nat44 { out: o, inb: i },
        })
    }

    /// See [`Napt::offload_seen`].
    pub fn offload_seen(
        &mut self,
        now: Time,
        sid: u32,
        out_seen: Option<Time>,
        in_seen: Option<Time>,
        c: &mut Counters,
    ) -> bool {
        self.napt.offload_seen(now, sid, out_seen, in_seen, c)
    }

    pub fn fill_stats(&self, st: &mut Stats) {
        st.fragment_flows += self.frags.flows() as u64;
        st.fragments_held += self.frags.held() as u64;
        self.napt.fill_stats(st);
    }
}

/// ICMP query types with an identifier (RFC 792; RFC 5508 3.1).
fn is_query(t: u8) -> bool {
    matches!(
        t,
        icmp::ECHO_REQUEST | icmp::ECHO_REPLY | icmp::TIMESTAMP | icmp::TIMESTAMP_REPLY
    )
}

/// Reads the transport header of an unfragmented packet or first fragment.
fn parse_l4(pkt: &[u8], h: &Ipv4Header) -> Result<L4, DropReason> {
    let Some(proto) = Proto::from_ip(h.proto) else {
        return Ok(L4::Other);
    };
    let l4 = pkt.get(h.header_len..).unwrap_or(&[]);
    let need = match proto {
        Proto::Tcp => tcp::NEEDED,
        Proto::Udp => udp::HEADER,
        Proto::Icmp => icmp::HEADER,
    };
    if l4.len() < need {
        return Err(DropReason::TruncatedL4);
    }
    let rd = |off| u16_at(l4, off).ok_or(DropReason::TruncatedL4);
    let (sport, dport) = match proto {
        Proto::Icmp => {
            let t = u8_at(l4, icmp::TYPE).ok_or(DropReason::TruncatedL4)?;
            match t {
                icmp::DEST_UNREACH | icmp::TIME_EXCEEDED | icmp::PARAM_PROBLEM => {
                    return Ok(L4::IcmpError)
                }
                t if is_query(t) => {
                    let id = rd(icmp::IDENT)?;
                    (id, id)
                }
                _ => return Err(DropReason::UnsupportedIcmp),
            }
        }
        _ => (rd(0)?, rd(2)?),
    };
    Ok(L4::Flow(Flow {
        proto,
        src: Endpoint {
            addr: h.src,
            port: sport,
        },
        dst: Endpoint {
            addr: h.dst,
            port: dport,
        },
        tcp_flags: if proto == Proto::Tcp {
            u8_at(l4, tcp::FLAGS).unwrap_or(0)
        } else {
            0
        },
    }))
}

/// Applies `d` to the checksum at `off` (if present) and returns the change to that field
/// as a delta, for checksums that cover it. `udp`: zero means none and stays zero.
fn update_cksum(pkt: &mut [u8], off: usize, d: Delta, udp: bool) -> Delta {
    let Some(ck) = chunk_mut::<2>(pkt, off) else {
        return Delta::ZERO;
    };
    let old = u16::from_be_bytes(*ck);
    let new = if udp { d.apply_udp(old) } else { d.apply(old) };
    *ck = new.to_be_bytes();
    Delta::ZERO.word(old, new)
}

/// Rewrites an address and, for TCP/UDP, the pseudo-header part of the checksum (RFC 3022
/// 4.1). Later fragments have no transport header and get the address change only.
fn rewrite_addr_only(pkt: &mut [u8], h: &Ipv4Header, side: Side, new: u32) {
    let d = match side {
        Side::Src => ipv4::rewrite_src(pkt, new),
        Side::Dst => ipv4::rewrite_dst(pkt, new),
    };
    if h.is_later_fragment() {
        return;
    }
    let l4 = h.header_len;
    match h.proto {
        ipproto::TCP => {
            update_cksum(pkt, l4 + tcp::CHECKSUM, d, false);
        }
        ipproto::UDP => {
            update_cksum(pkt, l4 + udp::CHECKSUM, d, true);
        }
        _ => {}
    }
}

/// Rewrites address and port (ICMP: identifier) `old_port`, as the caller read it, with
/// incremental checksums (RFC 1624). The caller checked that the transport header is there:
/// a port field past the end is [`DropReason::Internal`].
#[inline(always)]
fn rewrite_endpoint(
    pkt: &mut [u8],
    l4: usize,
    proto: Proto,
    side: Side,
    old_port: u16,
    new: Endpoint,
) -> Result<(), DropReason> {
    let d_addr = match side {
        Side::Src => ipv4::rewrite_src(pkt, new.addr),
        Side::Dst => ipv4::rewrite_dst(pkt, new.addr),
    };
    let port_off = l4
        + match side {
            Side::Src => proto.src_port_off(),
            Side::Dst => proto.dst_port_off(),
        };
    wrote(set_u16(pkt, port_off, new.port))?;
    let d_port = Delta::ZERO.word(old_port, new.port);
    match proto {
        Proto::Tcp => {
            update_cksum(pkt, l4 + tcp::CHECKSUM, d_addr.plus(d_port), false);
        }
        Proto::Udp => {
            update_cksum(pkt, l4 + udp::CHECKSUM, d_addr.plus(d_port), true);
        }
        // ICMPv4 has no pseudo-header: only the identifier counts.
        Proto::Icmp => {
            update_cksum(pkt, l4 + icmp::CHECKSUM, d_port, false);
            // A whole message may have become all zero (RFC 1624 3).
            if u16_at(pkt, ipv4::off::FLAGS_FRAG).is_some_and(|f| f & 0x3fff == 0) {
                if let Some(m) = pkt.get_mut(l4..) {
                    checksum::fix_all_zero(m, icmp::CHECKSUM);
                }
            }
        }
    }
    Ok(())
}

/// The IPv4 header embedded in an ICMP error (RFC 792: header + at least 64 bits of data).
/// Unlike the outer header its total length may exceed the bytes present.
struct Inner {
    header_len: usize,
    proto: u8,
}

impl Inner {
    fn parse(b: &[u8]) -> Option<Inner> {
        let v = u8_at(b, 0)?;
        if v >> 4 != 4 {
            return None;
        }
        let header_len = usize::from(v & 0x0f) * 4;
        if header_len < ipv4::MIN_HEADER || b.len() < header_len + 8 {
            return None;
        }
        // Only a first fragment (or whole packet) carries the ports.
        if u16_at(b, ipv4::off::FLAGS_FRAG)? & 0x1fff != 0 {
            return None;
        }
        Some(Inner {
            header_len,
            proto: u8_at(b, ipv4::off::PROTO)?,
        })
    }
}
