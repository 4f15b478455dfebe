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

mod ports;

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use hashbrown::HashMap;
use xlat_wire::field::{set_u16, set_u32, u16_at, u32_at, u8_at};
use xlat_wire::ipv4::{self, proto as ipproto, Ipv4Error, Ipv4Header};
use xlat_wire::l4::{icmp, tcp, udp};
use xlat_wire::Delta;

use crate::config::{Filtering, Nat44Config, Nat44Mode};
use crate::counters::{Counters, DropReason, Event};
use crate::frag::{FragKey, FragRewrite, Frags};
use crate::rng::Rng;
use crate::snapshot::{PoolUse, SessionInfo, Stats};
use crate::tcp::{self as tcpsm, Dir, Lifetime, TcpState};
use crate::{PacketBuf, Time, Verdict};
use ports::PortMap;

/// Transport protocols with ports (or an identifier) that the NAPT tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    Tcp = 0,
    Udp = 1,
    Icmp = 2,
}

impl Proto {
    fn from_ip(p: u8) -> Option<Proto> {
        match p {
            ipproto::TCP => Some(Proto::Tcp),
            ipproto::UDP => Some(Proto::Udp),
            ipproto::ICMP => Some(Proto::Icmp),
            _ => None,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
        }
    }
    /// Offset of the source "port" in the transport header (ICMP: the query identifier).
    fn src_port_off(self) -> usize {
        match self {
            Proto::Tcp => tcp::SRC_PORT,
            Proto::Udp => udp::SRC_PORT,
            Proto::Icmp => icmp::IDENT,
        }
    }
    fn dst_port_off(self) -> usize {
        match self {
            Proto::Tcp => tcp::DST_PORT,
            Proto::Udp => udp::DST_PORT,
            Proto::Icmp => icmp::IDENT,
        }
    }
    /// The remote side's "port" in a session key: ICMP queries have only one identifier,
    /// which belongs to the inside host (RFC 5508 3.1).
    fn remote_port(self, port: u16) -> u16 {
        match self {
            Proto::Icmp => 0,
            _ => port,
        }
    }
}

/// An address and port (ICMP: identifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: u32,
    pub port: u16,
}

impl Endpoint {
    fn show(self, with_port: bool) -> String {
        if with_port {
            format!("{}:{}", Ipv4Addr::from(self.addr), self.port)
        } else {
            Ipv4Addr::from(self.addr).to_string()
        }
    }
}

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

struct Host {
    /// Pool index of the paired (NAPT) or bound (pool mode) outside address.
    pool: u32,
    mappings: u32,
    sessions: u32,
}

struct Mapping {
    proto: Proto,
    int: Endpoint,
    ext: Endpoint,
    sessions: u32,
    /// Latest expiry among its sessions: a mapping whose time has passed admits nothing
    /// inbound even if the sweep has not removed it yet.
    expires: Time,
}

#[derive(Clone, Copy)]
enum SessState {
    Udp,
    Icmp,
    Tcp(TcpState),
}

struct Session {
    map: u32,
    remote: Endpoint,
    state: SessState,
    expires: Time,
}

/// Remote addresses a mapping has sessions with: the address-dependent filter (RFC 4787 5).
struct RemoteRef {
    sessions: u32,
    expires: Time,
}

struct PoolAddr {
    addr: u32,
    hosts: u32,
    ports: [PortMap; 3],
}

/// A vector of slots with a free list; ids stay valid until removed.
struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
    fn insert(&mut self, v: T) -> u32 {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            if let Some(s) = self.slots.get_mut(i as usize) {
                *s = Some(v);
                return i;
            }
        }
        self.slots.push(Some(v));
        (self.slots.len() - 1) as u32
    }
    fn remove(&mut self, i: u32) -> Option<T> {
        let v = self.slots.get_mut(i as usize)?.take()?;
        self.free.push(i);
        self.len -= 1;
        Some(v)
    }
    fn get(&self, i: u32) -> Option<&T> {
        self.slots.get(i as usize)?.as_ref()
    }
    fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.slots.get_mut(i as usize)?.as_mut()
    }
    fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|v| (i as u32, v)))
    }
}

/// The NAT44 translator state.
pub struct Nat44 {
    cfg: Nat44Config,
    static_in: HashMap<u32, u32>,
    static_out: HashMap<u32, u32>,
    pool: Vec<PoolAddr>,
    pool_index: HashMap<u32, u32>,
    hosts: HashMap<u32, Host>,
    mappings: Slab<Mapping>,
    bib_in: HashMap<(Proto, Endpoint), u32>,
    bib_ext: HashMap<(Proto, Endpoint), u32>,
    sessions: Slab<Session>,
    session_index: HashMap<(u32, Endpoint), u32>,
    remotes: HashMap<(u32, u32), RemoteRef>,
    frags: Frags,
    ready: VecDeque<Vec<u8>>,
    rng: Rng,
    sweep_cursor: usize,
}

fn ipv4_drop(e: Ipv4Error) -> DropReason {
    match e {
        Ipv4Error::Truncated => DropReason::Truncated,
        Ipv4Error::Version(_) => DropReason::NotIpv4,
        Ipv4Error::BadIhl => DropReason::BadIhl,
        Ipv4Error::BadTotalLength => DropReason::BadTotalLength,
        Ipv4Error::BadChecksum => DropReason::BadIpChecksum,
    }
}

impl Nat44 {
    pub fn new(cfg: Nat44Config, seed: u64) -> Self {
        let mut pool = Vec::new();
        let mut pool_index = HashMap::new();
        for p in &cfg.pool {
            for i in 0..p.size() {
                let addr = p.nth(i);
                pool_index.insert(addr, pool.len() as u32);
                pool.push(PoolAddr {
                    addr,
                    hosts: 0,
                    ports: Default::default(),
                });
            }
        }
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
        let frags = Frags::new(
            cfg.limits.max_fragment_flows,
            cfg.limits.max_fragments_held,
            cfg.timeouts.fragment,
        );
        Nat44 {
            cfg,
            static_in,
            static_out,
            pool,
            pool_index,
            hosts: HashMap::new(),
            mappings: Slab::new(),
            bib_in: HashMap::new(),
            bib_ext: HashMap::new(),
            sessions: Slab::new(),
            session_index: HashMap::new(),
            remotes: HashMap::new(),
            frags,
            ready: VecDeque::new(),
            rng: Rng::new(seed),
            sweep_cursor: 0,
        }
    }

    fn is_inside(&self, a: u32) -> bool {
        self.static_in.contains_key(&a) || self.cfg.inside.iter().any(|p| p.contains(a))
    }

    /// An address this NAT answers for on the outside: a pool or static outside address.
    fn is_outside(&self, a: u32) -> bool {
        self.static_out.contains_key(&a) || self.pool_index.contains_key(&a)
    }

    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Translates one packet in place.
    pub fn process(&mut self, now: Time, buf: &mut PacketBuf, c: &mut Counters) -> Verdict {
        let h = match Ipv4Header::parse(buf.data(), self.cfg.verify_ip_checksum) {
            Ok(h) => h,
            Err(e) => return Verdict::Drop(ipv4_drop(e)),
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
            let h2 = Ipv4Header::parse(pkt, false).map_err(ipv4_drop)?;
            if self.is_outside(h2.dst) {
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
    fn first_fragment_done(
        &mut self,
        now: Time,
        pkt: &[u8],
        h: &Ipv4Header,
        c: &mut Counters,
    ) -> Result<bool, DropReason> {
        let key = FragKey {
            src: h.src,
            dst: h.dst,
            proto: h.proto,
            ident: h.ident,
        };
        let rewrite = FragRewrite {
            src: u32_at(pkt, ipv4::off::SRC).unwrap_or(h.src),
            dst: u32_at(pkt, ipv4::off::DST).unwrap_or(h.dst),
        };
        self.frags
            .record_first(key, rewrite, h.payload_len(), now)?;
        c.event(Event::Fragments);
        let mut held = Vec::new();
        self.frags.take_held(key, &mut held);
        for mut frag in held {
            if let Ok(fh) = Ipv4Header::parse(&frag, false) {
                if self
                    .frags
                    .later(
                        key,
                        fh.frag_offset,
                        fh.payload_len(),
                        fh.more_fragments,
                        now,
                    )
                    .is_some()
                {
                    ipv4::rewrite_src(&mut frag, rewrite.src);
                    ipv4::rewrite_dst(&mut frag, rewrite.dst);
                    c.event(Event::Fragments);
                    self.ready.push_back(frag);
                }
            }
        }
        Ok(true)
    }

    /// A non-first fragment carries no transport header: static entries translate it by
    /// address; dynamic ones use the first fragment's translation (RFC 4787 REQ-14).
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
        let to_pool = self.pool_index.contains_key(&h.dst);
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
        let key = FragKey {
            src: h.src,
            dst: h.dst,
            proto: h.proto,
            ident: h.ident,
        };
        match self
            .frags
            .later(key, h.frag_offset, h.payload_len(), h.more_fragments, now)
        {
            Some(rw) => {
                ipv4::rewrite_src(pkt, rw.src);
                ipv4::rewrite_dst(pkt, rw.dst);
                c.event(Event::Fragments);
                Ok(true)
            }
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
        let sid = self.session_out(now, &f, c)?;
        let ext = self
            .sessions
            .get(sid)
            .and_then(|s| self.mappings.get(s.map))
            .map(|m| m.ext)
            .ok_or(DropReason::NoMapping)?;
        rewrite_endpoint(pkt, h, f.proto, Side::Src, ext);
        Ok(())
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
        let sid = self.session_in(now, &f, c)?;
        let int = self
            .sessions
            .get(sid)
            .and_then(|s| self.mappings.get(s.map))
            .map(|m| m.int)
            .ok_or(DropReason::NoMapping)?;
        rewrite_endpoint(pkt, h, f.proto, Side::Dst, int);
        Ok(())
    }

    /// Finds or creates the session of an outbound flow (RFC 4787 REQ-1 endpoint-independent
    /// mapping: the mapping is keyed by the inside endpoint alone).
    fn session_out(&mut self, now: Time, f: &Flow, c: &mut Counters) -> Result<u32, DropReason> {
        let int = f.src;
        let remote = Endpoint {
            addr: f.dst.addr,
            port: f.proto.remote_port(f.dst.port),
        };
        let known = self.bib_in.get(&(f.proto, int)).copied();
        if let Some(sid) = known.and_then(|mid| self.session_of(mid, remote, now, c)) {
            self.touch(sid, now, Dir::Out, f.tcp_flags);
            return Ok(sid);
        }
        // RFC 6146 3.5.2.2 (and RFC 5382): only a SYN opens a TCP session.
        if f.proto == Proto::Tcp && f.tcp_flags & tcpsm::SYN == 0 {
            return Err(DropReason::TcpNoSession);
        }
        self.check_limits(int.addr)?;
        let host_new = !self.hosts.contains_key(&int.addr);
        let pool_ix = self.host_pool(int.addr)?;
        let mid = match self.bib_in.get(&(f.proto, int)).copied() {
            Some(mid) => mid,
            None => match self.create_mapping(f.proto, int, pool_ix, c) {
                Ok(mid) => mid,
                Err(e) => {
                    if host_new {
                        self.release_host(int.addr);
                    }
                    return Err(e);
                }
            },
        };
        Ok(self.create_session(mid, remote, f.proto, Dir::Out, now, c))
    }

    /// Finds or creates the session of an inbound flow, applying the filtering policy
    /// (RFC 4787 5, REQ-8).
    fn session_in(&mut self, now: Time, f: &Flow, c: &mut Counters) -> Result<u32, DropReason> {
        let ext = f.dst;
        let remote = Endpoint {
            addr: f.src.addr,
            port: f.proto.remote_port(f.src.port),
        };
        let mid = *self
            .bib_ext
            .get(&(f.proto, ext))
            .ok_or(DropReason::NoMapping)?;
        if let Some(sid) = self.session_of(mid, remote, now, c) {
            self.touch(sid, now, Dir::In, f.tcp_flags);
            return Ok(sid);
        }
        // The session may have expired and taken its mapping with it.
        let m = self.mappings.get(mid).ok_or(DropReason::NoMapping)?;
        if m.expires <= now {
            return Err(DropReason::NoMapping);
        }
        let int_addr = m.int.addr;
        let admitted = match self.cfg.filtering {
            Filtering::EndpointIndependent => true,
            Filtering::AddressDependent => self
                .remotes
                .get(&(mid, remote.addr))
                .is_some_and(|r| r.expires > now),
            Filtering::AddressAndPortDependent => false,
        };
        if !admitted {
            return Err(DropReason::Filtered);
        }
        if f.proto == Proto::Tcp && f.tcp_flags & tcpsm::SYN == 0 {
            return Err(DropReason::TcpNoSession);
        }
        self.check_limits(int_addr)?;
        Ok(self.create_session(mid, remote, f.proto, Dir::In, now, c))
    }

    fn session_of(
        &mut self,
        mid: u32,
        remote: Endpoint,
        now: Time,
        c: &mut Counters,
    ) -> Option<u32> {
        let sid = *self.session_index.get(&(mid, remote))?;
        let live = self.sessions.get(sid).is_some_and(|s| s.expires > now);
        if live {
            Some(sid)
        } else {
            self.remove_session(sid);
            c.event(Event::SessionsExpired);
            None
        }
    }

    fn check_limits(&self, int_addr: u32) -> Result<(), DropReason> {
        if self.sessions.len >= self.cfg.limits.max_sessions as usize {
            return Err(DropReason::SessionLimit);
        }
        if self
            .hosts
            .get(&int_addr)
            .is_some_and(|h| h.sessions >= self.cfg.limits.max_sessions_per_host)
        {
            return Err(DropReason::HostSessionLimit);
        }
        Ok(())
    }

    /// The pool address of an inside host, pairing it on first use (RFC 4787 REQ-2 paired
    /// pooling: one inside address always uses the same outside address). In pool mode the
    /// address is the host's alone (RFC 3022 2.1 Basic NAT).
    fn host_pool(&mut self, int_addr: u32) -> Result<u32, DropReason> {
        if let Some(h) = self.hosts.get(&int_addr) {
            return Ok(h.pool);
        }
        let n = self.pool.len() as u64;
        if n == 0 {
            return Err(DropReason::PoolExhausted);
        }
        let start = self.rng.below(n);
        let pick = match self.cfg.mode {
            Nat44Mode::Pool => (0..n)
                .map(|i| ((start + i) % n) as u32)
                .find(|&i| self.pool.get(i as usize).is_some_and(|p| p.hosts == 0))
                .ok_or(DropReason::PoolExhausted)?,
            _ => start as u32,
        };
        if let Some(p) = self.pool.get_mut(pick as usize) {
            p.hosts += 1;
        }
        self.hosts.insert(
            int_addr,
            Host {
                pool: pick,
                mappings: 0,
                sessions: 0,
            },
        );
        Ok(pick)
    }

    fn release_host(&mut self, int_addr: u32) {
        if let Some(h) = self.hosts.remove(&int_addr) {
            if let Some(p) = self.pool.get_mut(h.pool as usize) {
                p.hosts = p.hosts.saturating_sub(1);
            }
        }
    }

    /// Creates a mapping with a port chosen per RFC 4787 REQ-3 / RFC 6056: the inside port
    /// if free and in range, else from a random point in the range.
    fn create_mapping(
        &mut self,
        proto: Proto,
        int: Endpoint,
        pool_ix: u32,
        c: &mut Counters,
    ) -> Result<u32, DropReason> {
        // ICMP identifiers are not ports: any value may be kept or chosen (RFC 5508 3.1).
        let (lo, hi) = match proto {
            Proto::Icmp => (0, u16::MAX),
            _ => self.cfg.ports,
        };
        let span = u64::from(hi - lo) + 1;
        let start = lo.wrapping_add(self.rng.below(span) as u16);
        let mode = self.cfg.mode;
        let p = self
            .pool
            .get_mut(pool_ix as usize)
            .ok_or(DropReason::PoolExhausted)?;
        let ports = p
            .ports
            .get_mut(proto as usize)
            .ok_or(DropReason::PoolExhausted)?;
        let port = match mode {
            // Basic NAT keeps every port: the address is this host's alone.
            Nat44Mode::Pool if ports.take_exact(int.port) => int.port,
            _ => ports
                .take(int.port, lo, hi, start)
                .ok_or(DropReason::PoolExhausted)?,
        };
        if port == int.port {
            c.event(Event::PortsPreserved);
        }
        let ext = Endpoint { addr: p.addr, port };
        let mid = self.mappings.insert(Mapping {
            proto,
            int,
            ext,
            sessions: 0,
            expires: Time(0),
        });
        self.bib_in.insert((proto, int), mid);
        self.bib_ext.insert((proto, ext), mid);
        if let Some(h) = self.hosts.get_mut(&int.addr) {
            h.mappings += 1;
        }
        c.event(Event::MappingsCreated);
        Ok(mid)
    }

    fn create_session(
        &mut self,
        mid: u32,
        remote: Endpoint,
        proto: Proto,
        dir: Dir,
        now: Time,
        c: &mut Counters,
    ) -> u32 {
        let t = &self.cfg.timeouts;
        let (state, life) = match proto {
            Proto::Udp => (SessState::Udp, t.udp),
            Proto::Icmp => (SessState::Icmp, t.icmp),
            Proto::Tcp => (SessState::Tcp(tcpsm::initial(dir)), t.tcp_transitory),
        };
        let expires = now.plus_secs(life);
        let sid = self.sessions.insert(Session {
            map: mid,
            remote,
            state,
            expires,
        });
        self.session_index.insert((mid, remote), sid);
        let r = self.remotes.entry((mid, remote.addr)).or_insert(RemoteRef {
            sessions: 0,
            expires,
        });
        r.sessions += 1;
        r.expires = r.expires.max(expires);
        if let Some(m) = self.mappings.get_mut(mid) {
            m.sessions += 1;
            m.expires = m.expires.max(expires);
            if let Some(h) = self.hosts.get_mut(&m.int.addr) {
                h.sessions += 1;
            }
        }
        c.event(Event::SessionsCreated);
        sid
    }

    /// Updates state and lifetime for a packet of an existing session (RFC 4787 REQ-6:
    /// outbound refreshes; inbound does when `inbound_refresh`; RFC 6146 3.5.2.2 for TCP).
    fn touch(&mut self, sid: u32, now: Time, dir: Dir, flags: u8) {
        let t = self.cfg.timeouts;
        let inbound_refresh = self.cfg.inbound_refresh;
        let Some(s) = self.sessions.get_mut(sid) else {
            return;
        };
        let new_expiry = match s.state {
            SessState::Udp if dir == Dir::Out || inbound_refresh => Some(now.plus_secs(t.udp)),
            SessState::Icmp if dir == Dir::Out || inbound_refresh => Some(now.plus_secs(t.icmp)),
            SessState::Udp | SessState::Icmp => None,
            SessState::Tcp(st) => {
                let (next, life) = tcpsm::next(st, dir, flags);
                s.state = SessState::Tcp(next);
                match life {
                    Lifetime::Established => Some(now.plus_secs(t.tcp_established)),
                    Lifetime::Transitory => Some(now.plus_secs(t.tcp_transitory)),
                    Lifetime::Unchanged => None,
                }
            }
        };
        if let Some(e) = new_expiry {
            s.expires = e;
            let (mid, raddr) = (s.map, s.remote.addr);
            if let Some(m) = self.mappings.get_mut(mid) {
                m.expires = m.expires.max(e);
            }
            if let Some(r) = self.remotes.get_mut(&(mid, raddr)) {
                r.expires = r.expires.max(e);
            }
        }
    }

    fn remove_session(&mut self, sid: u32) {
        let Some(s) = self.sessions.remove(sid) else {
            return;
        };
        self.session_index.remove(&(s.map, s.remote));
        if let Some(r) = self.remotes.get_mut(&(s.map, s.remote.addr)) {
            r.sessions = r.sessions.saturating_sub(1);
            if r.sessions == 0 {
                self.remotes.remove(&(s.map, s.remote.addr));
            }
        }
        let Some(m) = self.mappings.get_mut(s.map) else {
            return;
        };
        m.sessions = m.sessions.saturating_sub(1);
        let (int_addr, empty) = (m.int.addr, m.sessions == 0);
        if let Some(h) = self.hosts.get_mut(&int_addr) {
            h.sessions = h.sessions.saturating_sub(1);
        }
        if empty {
            self.remove_mapping(s.map);
        }
    }

    fn remove_mapping(&mut self, mid: u32) {
        let Some(m) = self.mappings.remove(mid) else {
            return;
        };
        self.bib_in.remove(&(m.proto, m.int));
        self.bib_ext.remove(&(m.proto, m.ext));
        if let Some(&ix) = self.pool_index.get(&m.ext.addr) {
            if let Some(pm) = self
                .pool
                .get_mut(ix as usize)
                .and_then(|p| p.ports.get_mut(m.proto as usize))
            {
                pm.free(m.ext.port);
            }
        }
        let mut gone = false;
        if let Some(h) = self.hosts.get_mut(&m.int.addr) {
            h.mappings = h.mappings.saturating_sub(1);
            gone = h.mappings == 0;
        }
        if gone {
            self.release_host(m.int.addr);
        }
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
            port: proto.remote_port(rd16(inner_l4 + remote_port_field)?),
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
            let (table, key) = match dir {
                Dir::In => (&self.bib_ext, (proto, our)),
                Dir::Out => (&self.bib_in, (proto, our)),
            };
            let mid = *table.get(&key).ok_or(DropReason::IcmpErrorNoSession)?;
            self.session_of(mid, remote, now, c)
                .ok_or(DropReason::IcmpErrorNoSession)?;
            let m = self
                .mappings
                .get(mid)
                .ok_or(DropReason::IcmpErrorNoSession)?;
            match dir {
                Dir::In => m.int,
                Dir::Out => m.ext,
            }
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
        set_u32(pkt, inner_off + addr_field, new.addr);
        outer = outer.plus(d_addr);
        outer = outer.plus(update_cksum(
            pkt,
            inner_off + ipv4::off::CHECKSUM,
            d_addr,
            false,
        ));
        let d_port = Delta::ZERO.word(our.port, new.port);
        set_u16(pkt, inner_l4 + port_field, new.port);
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

    /// Removes expired sessions, looking at up to `budget` slots from where the last call
    /// stopped, and expires fragment state.
    pub fn expire(&mut self, now: Time, budget: usize, c: &mut Counters) -> usize {
        let n = self.sessions.slots.len();
        let mut removed = 0;
        for _ in 0..budget.min(n) {
            if self.sweep_cursor >= n {
                self.sweep_cursor = 0;
            }
            let sid = self.sweep_cursor as u32;
            self.sweep_cursor += 1;
            if self.sessions.get(sid).is_some_and(|s| s.expires <= now) {
                self.remove_session(sid);
                c.event(Event::SessionsExpired);
                removed += 1;
            }
        }
        let dropped = self.frags.expire(now);
        for _ in 0..dropped {
            c.drop(DropReason::FragmentNoFirst);
        }
        removed
    }

    pub fn sessions(&self, now: Time) -> Vec<SessionInfo> {
        let mut out: Vec<SessionInfo> = self
            .cfg
            .statics
            .iter()
            .map(|s| SessionInfo {
                proto: "any".into(),
                inside: s.inside.to_string(),
                outside: s.outside.to_string(),
                remote: String::new(),
                state: "static".into(),
                expires_in: None,
            })
            .collect();
        let mut dynamic: Vec<SessionInfo> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires > now)
            .filter_map(|(_, s)| {
                let m = self.mappings.get(s.map)?;
                let ports = true;
                Some(SessionInfo {
                    proto: m.proto.name().into(),
                    inside: m.int.show(ports),
                    outside: m.ext.show(ports),
                    remote: s.remote.show(m.proto != Proto::Icmp),
                    state: match s.state {
                        SessState::Udp => "udp".into(),
                        SessState::Icmp => "icmp".into(),
                        SessState::Tcp(t) => tcp_state_name(t).into(),
                    },
                    expires_in: Some(now.secs_until(s.expires)),
                })
            })
            .collect();
        dynamic.sort_by(|a, b| {
            (&a.proto, &a.inside, &a.remote).cmp(&(&b.proto, &b.inside, &b.remote))
        });
        out.extend(dynamic);
        out
    }

    pub fn stats(&self, now: Time, c: &Counters) -> Stats {
        let _ = now;
        let (lo, hi) = self.cfg.ports;
        let pool = [Proto::Tcp, Proto::Udp, Proto::Icmp]
            .iter()
            .map(|&p| PoolUse {
                proto: p.name().into(),
                ports_used: self
                    .pool
                    .iter()
                    .filter_map(|a| a.ports.get(p as usize))
                    .map(|m| u64::from(m.used()))
                    .sum(),
                ports_total: self.pool.len() as u64
                    * match p {
                        Proto::Icmp => 65536,
                        _ => u64::from(hi - lo) + 1,
                    },
            })
            .collect();
        Stats {
            sessions: self.sessions.len as u64,
            mappings: self.mappings.len as u64,
            hosts: self.hosts.len() as u64,
            fragment_flows: self.frags.flows() as u64,
            fragments_held: self.frags.held() as u64,
            pool_addresses: self.pool.len() as u64,
            pool_addresses_used: self.pool.iter().filter(|p| p.hosts > 0).count() as u64,
            pool,
            events: Event::ALL
                .iter()
                .map(|&e| crate::counters::NamedCount {
                    name: e.name().into(),
                    value: c.count(e),
                    explain: e.explain().into(),
                })
                .collect(),
            drops: DropReason::ALL
                .iter()
                .map(|&r| crate::counters::NamedCount {
                    name: r.name().into(),
                    value: c.dropped(r),
                    explain: r.explain().into(),
                })
                .collect(),
        }
    }
}

fn tcp_state_name(t: TcpState) -> &'static str {
    match t {
        TcpState::OutInit => "syn_out",
        TcpState::InInit => "syn_in",
        TcpState::Established => "established",
        TcpState::OutFinRcv => "fin_out",
        TcpState::InFinRcv => "fin_in",
        TcpState::BothFinRcv => "fin_both",
        TcpState::Trans => "transitory",
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
    let Some(old) = u16_at(pkt, off) else {
        return Delta::ZERO;
    };
    let new = if udp { d.apply_udp(old) } else { d.apply(old) };
    set_u16(pkt, off, new);
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

/// Rewrites address and port (ICMP: identifier) with incremental checksums (RFC 1624).
fn rewrite_endpoint(pkt: &mut [u8], h: &Ipv4Header, proto: Proto, side: Side, new: Endpoint) {
    let d_addr = match side {
        Side::Src => ipv4::rewrite_src(pkt, new.addr),
        Side::Dst => ipv4::rewrite_dst(pkt, new.addr),
    };
    let l4 = h.header_len;
    let port_off = l4
        + match side {
            Side::Src => proto.src_port_off(),
            Side::Dst => proto.dst_port_off(),
        };
    let old_port = u16_at(pkt, port_off).unwrap_or(new.port);
    set_u16(pkt, port_off, new.port);
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
        }
    }
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
