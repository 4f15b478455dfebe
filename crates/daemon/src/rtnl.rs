//! The routing changes xlat makes, as typed steps, made over rtnetlink (rtnetlink(7)) on one
//! blocking `NETLINK_ROUTE` socket, without spawning iproute2's `ip`.
//!
//! A [`Step`] is one change: a route (`RTM_NEWROUTE` with `NLM_F_CREATE | NLM_F_REPLACE`,
//! `RTM_DELROUTE`), a policy rule (`RTM_NEWRULE` with `NLM_F_CREATE | NLM_F_EXCL`,
//! `RTM_DELRULE`), a proxy neighbour entry (`RTM_NEWNEIGH` / `RTM_DELNEIGH` with `NTF_PROXY`)
//! or an interface address (`RTM_NEWADDR` / `RTM_DELADDR`). [`apply`] sends a batch of steps
//! as requests with `NLM_F_ACK`, many per `send` (up to [`CHUNK`] before reading their
//! answers), and maps each answer back to its step by sequence number, so a failure names
//! the step and the kernel's error. Without `force` it stops after the chunk in which a step
//! failed; with `force` (teardown, journal replay) it makes them all and counts.
//!
//! Each step also has a textual form, the words `ip` would take for the same change
//! (`route replace unreachable 198.19.0.0/24 metric 4294967295`,
//! `rule del from 198.18.0.0/24 lookup 4400 pref 4400`, `neigh add proxy 192.0.2.7 dev eth0`,
//! `-6 addr add 2002:c000:201::1/48 dev xlat0 nodad`): it is what the log and the errors show
//! and what the journal ([`crate::journal`]) stores, and [`Step::parse`] reads it back --
//! also the journals of older xlat versions, which ran those very words through `ip -batch`.
//!
//! Lookups: [`route_get`] asks `RTM_GETROUTE` of each address (the kernel's answer, as
//! `ip route get` prints it), many requests per `send`; [`proxy_neighbours`] dumps the
//! proxy-ARP entries (`RTM_GETNEIGH`, `NTF_PROXY`) and [`rules4`] the IPv4 policy rules
//! (`RTM_GETRULE`).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, IpProtocol, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// Requests sent before their answers are read: the answers of a chunk (acknowledgements of
/// `NETLINK_CAP_ACK` size, or route replies) fit the socket's receive buffer many times.
pub const CHUNK: usize = 256;
/// The main routing table (`RT_TABLE_MAIN`).
pub const TABLE_MAIN: u32 = 254;
/// The local routing table (`RT_TABLE_LOCAL`).
pub const TABLE_LOCAL: u32 = 255;
/// How long an answer may take before the request counts as failed.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Error acknowledgements carry only the request's header (`NETLINK_CAP_ACK`).
const CAP_ACK: bool = true;

/// An IPv4 or IPv6 prefix; length 0 is `default`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    pub addr: IpAddr,
    pub len: u8,
}

impl Net {
    pub fn v4(addr: u32, len: u8) -> Net {
        Net {
            addr: IpAddr::V4(Ipv4Addr::from(addr)),
            len,
        }
    }

    pub fn v6(addr: u128, len: u8) -> Net {
        Net {
            addr: IpAddr::V6(Ipv6Addr::from(addr)),
            len,
        }
    }

    /// `default` of IPv4 (`v6` false) or IPv6.
    pub fn default_route(v6: bool) -> Net {
        if v6 {
            Net::v6(0, 0)
        } else {
            Net::v4(0, 0)
        }
    }

    pub fn is_v6(&self) -> bool {
        self.addr.is_ipv6()
    }

    fn family(&self) -> AddressFamily {
        family(self.is_v6())
    }

    /// `P/L` (or `P` with the family's full length), or `default` for an address of the
    /// family given by `v6`.
    fn parse(s: &str, v6: bool) -> Result<Net, String> {
        if s == "default" || s == "all" {
            return Ok(Net::default_route(v6));
        }
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| format!("{s:?} is not an address"))?;
        let max = if addr.is_ipv6() { 128 } else { 32 };
        let len = match l {
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("{s:?} has a bad prefix length"))?,
            None => max,
        };
        Ok(Net { addr, len })
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.len == 0 && self.addr.is_unspecified() {
            f.write_str("default")
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

fn family(v6: bool) -> AddressFamily {
    if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    }
}

/// What a step does to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Creates it; one that exists already is an error (`EEXIST`).
    Add,
    /// Creates it or replaces the one with the same key (routes).
    Replace,
    /// Removes it; one that is missing is an error (`ENOENT`, `ESRCH`).
    Del,
}

impl Op {
    fn word(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Del => "del",
        }
    }
}

/// The kind of a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// Forwarded out of `dev`.
    Unicast,
    /// Refused with ICMP unreachable (the fail-closed twins).
    Unreachable,
    /// Not in this table: the lookup goes on with the next rule (`throw`).
    Throw,
}

/// The object a step changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Obj {
    Route {
        kind: RouteKind,
        dst: Net,
        dev: Option<String>,
        table: u32,
        metric: Option<u32>,
    },
    Rule {
        v6: bool,
        from: Option<Net>,
        to: Option<Net>,
        iif: Option<String>,
        ipproto: Option<u8>,
        table: u32,
        pref: u32,
    },
    /// A proxy neighbour entry: the gateway answers ARP (or ND) for `addr` on `dev`.
    ProxyNeigh { addr: IpAddr, dev: String },
    /// An interface address.
    Addr {
        addr: IpAddr,
        len: u8,
        dev: String,
        nodad: bool,
    },
}

/// One change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub op: Op,
    pub obj: Obj,
}

impl Step {
    pub fn new(op: Op, obj: Obj) -> Step {
        Step { op, obj }
    }

    /// A route into `dev` (unicast) or of `kind` without a device, in `table`.
    pub fn route(op: Op, kind: RouteKind, dst: Net, dev: Option<&str>, table: u32) -> Step {
        Step::new(
            op,
            Obj::Route {
                kind,
                dst,
                dev: dev.map(str::to_string),
                table,
                metric: None,
            },
        )
    }

    /// The same step with the route's `metric`.
    pub fn metric(mut self, m: u32) -> Step {
        if let Obj::Route { metric, .. } = &mut self.obj {
            *metric = Some(m);
        }
        self
    }

    /// Does the step name a device?
    pub fn has_dev(&self) -> bool {
        match &self.obj {
            Obj::Route { dev, .. } => dev.is_some(),
            Obj::Rule { .. } => false,
            Obj::ProxyNeigh { .. } | Obj::Addr { .. } => true,
        }
    }

    /// The same step doing `op`.
    pub fn with_op(&self, op: Op) -> Step {
        Step {
            op,
            obj: self.obj.clone(),
        }
    }

    /// The words of the step (`ip`'s syntax, without `ip`).
    pub fn to_args(&self) -> Vec<String> {
        self.to_string()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// Reads a step back from its words (module docs): the vocabulary of [`Step`]'s
    /// `Display`, in any order of the keyword arguments, with an optional leading `-4` / `-6`.
    pub fn parse(words: &[String]) -> Result<Step, String> {
        let mut w: Vec<&str> = words.iter().map(String::as_str).collect();
        let mut v6 = false;
        if let Some(f) = w.first().copied() {
            if f == "-4" || f == "-6" {
                v6 = f == "-6";
                w.remove(0);
            }
        }
        let (Some(object), Some(verb)) = (w.first().copied(), w.get(1).copied()) else {
            return Err("too few words".to_string());
        };
        let op = match verb {
            "add" => Op::Add,
            "replace" => Op::Replace,
            "del" | "delete" => Op::Del,
            v => return Err(format!("unknown verb {v:?}")),
        };
        let rest = w.get(2..).unwrap_or_default();
        let obj = match object {
            "route" => parse_route(rest, v6)?,
            "rule" => parse_rule(rest, v6)?,
            "neigh" => parse_neigh(rest, v6)?,
            "addr" | "address" => parse_addr(rest, v6)?,
            o => return Err(format!("unknown object {o:?}")),
        };
        Ok(Step { op, obj })
    }
}

/// Keyword-value pairs; a word without a value is an error unless `flags` names it.
fn pairs<'a>(
    w: &[&'a str],
    flags: &[&str],
) -> Result<(HashMap<&'a str, &'a str>, Vec<&'a str>), String> {
    let mut kv = HashMap::new();
    let mut set = Vec::new();
    let mut i = 0;
    while let Some(k) = w.get(i).copied() {
        if flags.contains(&k) {
            set.push(k);
            i += 1;
            continue;
        }
        let v = w
            .get(i + 1)
            .ok_or_else(|| format!("{k:?} without a value"))?;
        kv.insert(k, *v);
        i += 2;
    }
    Ok((kv, set))
}

fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{k} {v:?} is not a number"))
}

fn table_num(v: &str) -> Result<u32, String> {
    match v {
        "main" => Ok(TABLE_MAIN),
        "local" => Ok(TABLE_LOCAL),
        v => num("table", v),
    }
}

fn table_word(t: u32) -> String {
    match t {
        TABLE_MAIN => "main".to_string(),
        TABLE_LOCAL => "local".to_string(),
        t => t.to_string(),
    }
}

fn parse_route(w: &[&str], v6: bool) -> Result<Obj, String> {
    let mut w = w.to_vec();
    let kind = match w.first().copied() {
        Some("unreachable") => RouteKind::Unreachable,
        Some("throw") => RouteKind::Throw,
        Some("unicast") => RouteKind::Unicast,
        _ => RouteKind::Unicast,
    };
    if matches!(
        w.first().copied(),
        Some("unreachable" | "throw" | "unicast")
    ) {
        w.remove(0);
    }
    // `to` is optional before the destination.
    if w.first().copied() == Some("to") {
        w.remove(0);
    }
    let dst = w.first().ok_or("a route without a destination")?;
    let dst = Net::parse(dst, v6)?;
    let (kv, _) = pairs(w.get(1..).unwrap_or_default(), &[])?;
    if let Some(k) = kv.keys().find(|k| !["dev", "table", "metric"].contains(k)) {
        return Err(format!("unknown route keyword {k:?}"));
    }
    Ok(Obj::Route {
        kind,
        dst,
        dev: kv.get("dev").map(|d| d.to_string()),
        table: kv.get("table").map_or(Ok(TABLE_MAIN), |t| table_num(t))?,
        metric: kv.get("metric").map(|m| num("metric", m)).transpose()?,
    })
}

fn ipproto_num(v: &str) -> Result<u8, String> {
    match v {
        "icmp" => Ok(1),
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "ipv6-icmp" => Ok(58),
        v => num("ipproto", v),
    }
}

fn parse_rule(w: &[&str], v6: bool) -> Result<Obj, String> {
    let (kv, _) = pairs(w, &[])?;
    if let Some(k) = kv.keys().find(|k| {
        ![
            "from", "to", "iif", "ipproto", "lookup", "table", "pref", "priority",
        ]
        .contains(k)
    }) {
        return Err(format!("unknown rule keyword {k:?}"));
    }
    let from = kv.get("from").map(|p| Net::parse(p, v6)).transpose()?;
    let to = kv.get("to").map(|p| Net::parse(p, v6)).transpose()?;
    let v6 = v6 || from.is_some_and(|n| n.is_v6()) || to.is_some_and(|n| n.is_v6());
    let table = kv
        .get("lookup")
        .or(kv.get("table"))
        .ok_or("a rule without `lookup`")?;
    let pref = kv
        .get("pref")
        .or(kv.get("priority"))
        .ok_or("a rule without `pref`")?;
    Ok(Obj::Rule {
        v6,
        from,
        to,
        iif: kv.get("iif").map(|d| d.to_string()),
        ipproto: kv.get("ipproto").map(|p| ipproto_num(p)).transpose()?,
        table: table_num(table)?,
        pref: num("pref", pref)?,
    })
}

fn parse_neigh(w: &[&str], _v6: bool) -> Result<Obj, String> {
    let (kv, _) = pairs(w, &[])?;
    let addr = kv
        .get("proxy")
        .ok_or("only `neigh ... proxy ADDR` entries")?;
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an address"))?;
    let dev = kv.get("dev").ok_or("a neighbour entry without `dev`")?;
    Ok(Obj::ProxyNeigh {
        addr,
        dev: dev.to_string(),
    })
}

fn parse_addr(w: &[&str], v6: bool) -> Result<Obj, String> {
    let a = w.first().ok_or("an address without an address")?;
    let net = Net::parse(a, v6)?;
    let (kv, set) = pairs(w.get(1..).unwrap_or_default(), &["nodad"])?;
    let dev = kv.get("dev").ok_or("an address without `dev`")?;
    Ok(Obj::Addr {
        addr: net.addr,
        len: net.len,
        dev: dev.to_string(),
        nodad: set.contains(&"nodad"),
    })
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = self.op.word();
        match &self.obj {
            Obj::Route {
                kind,
                dst,
                dev,
                table,
                metric,
            } => {
                if dst.is_v6() {
                    f.write_str("-6 ")?;
                }
                write!(f, "route {verb} ")?;
                match kind {
                    RouteKind::Unicast => {}
                    RouteKind::Unreachable => f.write_str("unreachable ")?,
                    RouteKind::Throw => f.write_str("throw ")?,
                }
                write!(f, "{dst}")?;
                if let Some(d) = dev {
                    write!(f, " dev {d}")?;
                }
                if *table != TABLE_MAIN {
                    write!(f, " table {}", table_word(*table))?;
                }
                if let Some(m) = metric {
                    write!(f, " metric {m}")?;
                }
                Ok(())
            }
            Obj::Rule {
                v6,
                from,
                to,
                iif,
                ipproto,
                table,
                pref,
            } => {
                if *v6 {
                    f.write_str("-6 ")?;
                }
                write!(f, "rule {verb}")?;
                if let Some(p) = from {
                    write!(f, " from {p}")?;
                }
                if let Some(p) = to {
                    write!(f, " to {p}")?;
                }
                if let Some(d) = iif {
                    write!(f, " iif {d}")?;
                }
                match ipproto {
                    Some(1) => f.write_str(" ipproto icmp")?,
                    Some(p) => write!(f, " ipproto {p}")?,
                    None => {}
                }
                write!(f, " lookup {} pref {pref}", table_word(*table))
            }
            Obj::ProxyNeigh { addr, dev } => {
                if addr.is_ipv6() {
                    f.write_str("-6 ")?;
                }
                write!(f, "neigh {verb} proxy {addr} dev {dev}")
            }
            Obj::Addr {
                addr,
                len,
                dev,
                nodad,
            } => {
                if addr.is_ipv6() {
                    f.write_str("-6 ")?;
                }
                write!(f, "addr {verb} {addr}/{len} dev {dev}")?;
                if *nodad && self.op != Op::Del {
                    f.write_str(" nodad")?;
                }
                Ok(())
            }
        }
    }
}

/// Interface names and indexes (a `RTM_GETLINK` dump), both ways.
#[derive(Debug, Default, Clone)]
pub struct Links {
    by_name: HashMap<String, u32>,
    by_index: HashMap<u32, String>,
}

impl Links {
    pub fn new(pairs: impl IntoIterator<Item = (String, u32)>) -> Links {
        let mut l = Links::default();
        for (name, index) in pairs {
            l.by_index.insert(index, name.clone());
            l.by_name.insert(name, index);
        }
        l
    }

    /// The index of `dev`; `ENODEV` if there is none (a device that went with its routes).
    pub fn index(&self, dev: &str) -> Result<u32, i32> {
        self.by_name.get(dev).copied().ok_or(libc::ENODEV)
    }

    pub fn name(&self, index: u32) -> Option<&str> {
        self.by_index.get(&index).map(String::as_str)
    }
}

fn route_addr(a: IpAddr) -> RouteAddress {
    match a {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }
}

/// The request of `step` and its netlink flags; `Err(errno)` if it cannot be made (a device
/// that does not exist).
pub fn request(step: &Step, links: &Links) -> Result<(RouteNetlinkMessage, u16), i32> {
    let flags = NLM_F_REQUEST
        | NLM_F_ACK
        | match step.op {
            Op::Add => NLM_F_CREATE | NLM_F_EXCL,
            Op::Replace => NLM_F_CREATE | NLM_F_REPLACE,
            Op::Del => 0,
        };
    let del = step.op == Op::Del;
    let msg = match &step.obj {
        Obj::Route {
            kind,
            dst,
            dev,
            table,
            metric,
        } => {
            let mut m = RouteMessage::default();
            m.header.address_family = dst.family();
            m.header.destination_prefix_length = dst.len;
            m.header.table = u8::try_from(*table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
            m.header.kind = match kind {
                RouteKind::Unicast => RouteType::Unicast,
                RouteKind::Unreachable => RouteType::Unreachable,
                RouteKind::Throw => RouteType::Throw,
            };
            if del {
                // As `ip route del`: any scope, any protocol.
                m.header.scope = RouteScope::NoWhere;
                m.header.protocol = RouteProtocol::Unspec;
            } else {
                m.header.protocol = RouteProtocol::Boot;
                m.header.scope = if *kind == RouteKind::Unicast && dev.is_some() {
                    RouteScope::Link
                } else {
                    RouteScope::Universe
                };
            }
            if dst.len > 0 {
                m.attributes
                    .push(RouteAttribute::Destination(route_addr(dst.addr)));
            }
            m.attributes.push(RouteAttribute::Table(*table));
            if let Some(d) = dev {
                m.attributes.push(RouteAttribute::Oif(links.index(d)?));
            }
            if let Some(p) = metric {
                m.attributes.push(RouteAttribute::Priority(*p));
            }
            if del {
                RouteNetlinkMessage::DelRoute(m)
            } else {
                RouteNetlinkMessage::NewRoute(m)
            }
        }
        Obj::Rule {
            v6,
            from,
            to,
            iif,
            ipproto,
            table,
            pref,
        } => {
            let mut m = RuleMessage::default();
            m.header.family = family(*v6);
            m.header.table = u8::try_from(*table).unwrap_or(0);
            m.header.action = RuleAction::ToTable;
            m.attributes.push(RuleAttribute::Priority(*pref));
            if let Some(p) = from {
                m.header.src_len = p.len;
                m.attributes.push(RuleAttribute::Source(p.addr));
            }
            if let Some(p) = to {
                m.header.dst_len = p.len;
                m.attributes.push(RuleAttribute::Destination(p.addr));
            }
            if let Some(d) = iif {
                m.attributes.push(RuleAttribute::Iifname(d.clone()));
            }
            if let Some(p) = ipproto {
                m.attributes
                    .push(RuleAttribute::IpProtocol(IpProtocol::from(*p)));
            }
            m.attributes.push(RuleAttribute::Table(*table));
            if del {
                RouteNetlinkMessage::DelRule(m)
            } else {
                RouteNetlinkMessage::NewRule(m)
            }
        }
        Obj::ProxyNeigh { addr, dev } => {
            let mut m = NeighbourMessage::default();
            m.header.family = family(addr.is_ipv6());
            m.header.ifindex = links.index(dev)?;
            m.header.state = NeighbourState::Permanent;
            m.header.flags = NeighbourFlags::Proxy;
            m.attributes
                .push(NeighbourAttribute::Destination(match addr {
                    IpAddr::V4(a) => NeighbourAddress::Inet(*a),
                    IpAddr::V6(a) => NeighbourAddress::Inet6(*a),
                }));
            if del {
                RouteNetlinkMessage::DelNeighbour(m)
            } else {
                RouteNetlinkMessage::NewNeighbour(m)
            }
        }
        Obj::Addr {
            addr,
            len,
            dev,
            nodad,
        } => {
            let mut m = AddressMessage::default();
            m.header.family = family(addr.is_ipv6());
            m.header.prefix_len = *len;
            m.header.index = links.index(dev)?;
            m.attributes.push(AddressAttribute::Local(*addr));
            m.attributes.push(AddressAttribute::Address(*addr));
            if *nodad && !del {
                m.header.flags = AddressHeaderFlags::Nodad;
                m.attributes
                    .push(AddressAttribute::Flags(AddressFlags::Nodad));
            }
            if del {
                RouteNetlinkMessage::DelAddress(m)
            } else {
                RouteNetlinkMessage::NewAddress(m)
            }
        }
    };
    Ok((msg, flags))
}

/// The kernel's error of one step, with the step's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError {
    pub step: String,
    /// The errno (positive).
    pub errno: i32,
}

impl StepError {
    /// The object was there already (an add) or is gone already (a delete).
    pub fn is_benign(&self) -> bool {
        matches!(
            self.errno,
            libc::EEXIST | libc::ENOENT | libc::ESRCH | libc::ENODEV | libc::EADDRNOTAVAIL
        )
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = io::Error::from_raw_os_error(self.errno);
        write!(f, "netlink `{}` failed: {e}", self.step)
    }
}

impl std::error::Error for StepError {}

/// What [`apply`] got done: per step, `None` if it was not sent (an earlier failure without
/// `force`), else its result.
#[derive(Debug, Default)]
pub struct Applied {
    pub results: Vec<Option<Result<(), StepError>>>,
}

impl Applied {
    /// Steps that succeeded.
    pub fn ok(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r, Some(Ok(()))))
            .count()
    }

    /// The first failure, if any.
    pub fn first_error(&self) -> Option<&StepError> {
        self.results.iter().find_map(|r| match r {
            Some(Err(e)) => Some(e),
            _ => None,
        })
    }

    /// Failures that are not [`StepError::is_benign`].
    pub fn serious(&self) -> impl Iterator<Item = &StepError> {
        self.results.iter().filter_map(|r| match r {
            Some(Err(e)) if !e.is_benign() => Some(e),
            _ => None,
        })
    }
}

/// A `NETLINK_ROUTE` socket, blocking, with a timeout on answers.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

/// One answer: its sequence number and payload.
type Answer = (u32, NetlinkPayload<RouteNetlinkMessage>);

impl Rtnl {
    /// Opens the socket (in this thread's network namespace).
    pub fn open() -> io::Result<Rtnl> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // Best effort: a larger buffer for big dumps; small acknowledgements.
        let _ = sock.set_rx_buf_sz(1 << 20);
        let _ = sock.set_cap_ack(CAP_ACK);
        // Non-blocking, waited on with a deadline (the crate has no safe receive timeout):
        // the kernel answers route, rule, neighbour and address requests while it takes
        // them, so their answers are queued when `send` returns.
        sock.set_non_blocking(true)?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: Vec::with_capacity(1 << 16),
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `msgs` (with their flags) in one datagram; returns their sequence numbers.
    fn send(&mut self, msgs: Vec<(RouteNetlinkMessage, u16)>) -> io::Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut seqs = Vec::with_capacity(msgs.len());
        for (m, flags) in msgs {
            let seq = self.next_seq();
            let mut header = NetlinkHeader::default();
            header.flags = flags;
            header.sequence_number = seq;
            let mut nl = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(m));
            nl.finalize();
            let at = out.len();
            out.resize(at + nl.buffer_len(), 0);
            if let Some(b) = out.get_mut(at..) {
                nl.serialize(b);
            }
            // Messages start on 4-byte boundaries.
            out.resize(out.len().next_multiple_of(4), 0);
            seqs.push(seq);
        }
        if !out.is_empty() {
            self.sock.send(&out, 0)?;
        }
        Ok(seqs)
    }

    /// Reads one datagram of answers.
    fn recv(&mut self) -> io::Result<Vec<Answer>> {
        self.buf.clear();
        if self.buf.capacity() < 1 << 16 {
            self.buf.reserve(1 << 16);
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let n = loop {
            match self.sock.recv(&mut self.buf, 0) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(io::Error::from(io::ErrorKind::TimedOut));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        let data = self.buf.get(..n.min(self.buf.len())).unwrap_or_default();
        let mut answers = Vec::new();
        let mut off = 0;
        while let Some(rest) = data.get(off..).filter(|r| !r.is_empty()) {
            let Ok(b) = NetlinkBuffer::new_checked(rest) else {
                break;
            };
            let len = b.length() as usize;
            let seq = b.sequence_number();
            let one = rest.get(..len).unwrap_or_default();
            match NetlinkMessage::<RouteNetlinkMessage>::deserialize(one) {
                Ok(m) => answers.push((seq, m.payload)),
                // An answer the crate cannot decode still answers its request.
                Err(_) => answers.push((seq, NetlinkPayload::Overrun(Vec::new()))),
            }
            off += len.next_multiple_of(4).max(4);
        }
        Ok(answers)
    }

    /// The interfaces (`RTM_GETLINK` dump).
    pub fn links(&mut self) -> io::Result<Links> {
        let all = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        Ok(Links::new(all.into_iter().filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => {
                let name = l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                })?;
                Some((name, l.header.index))
            }
            _ => None,
        })))
    }

    /// Makes `steps` (module docs); answers map back to steps by sequence number.
    pub fn apply(&mut self, steps: &[Step], force: bool) -> Applied {
        let mut results: Vec<Option<Result<(), StepError>>> = vec![None; steps.len()];
        // Devices by name, once per batch (only if a step names one).
        let links = if steps.iter().any(Step::has_dev) {
            self.links().unwrap_or_default()
        } else {
            Links::default()
        };
        let fail = |i: usize, errno: i32| {
            Some(Err(StepError {
                step: steps.get(i).map(Step::to_string).unwrap_or_default(),
                errno,
            }))
        };
        let mut start = 0;
        while start < steps.len() {
            let end = (start + CHUNK).min(steps.len());
            let mut msgs = Vec::new();
            let mut index = Vec::new();
            for (i, s) in steps.iter().enumerate().take(end).skip(start) {
                match request(s, &links) {
                    Ok(m) => {
                        msgs.push(m);
                        index.push(i);
                    }
                    Err(errno) => results[i] = fail(i, errno),
                }
            }
            let by_seq: HashMap<u32, usize> = match self.send(msgs) {
                Ok(seqs) => seqs.into_iter().zip(index).collect(),
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    for i in index {
                        results[i] = fail(i, errno);
                    }
                    HashMap::new()
                }
            };
            let mut waiting = by_seq.len();
            while waiting > 0 {
                let answers = match self.recv() {
                    Ok(a) => a,
                    Err(e) => {
                        // A timeout or lost answers (ENOBUFS): the unanswered count as failed.
                        let errno = e.raw_os_error().unwrap_or(libc::EIO);
                        for i in by_seq.values() {
                            if results[*i].is_none() {
                                results[*i] = fail(*i, errno);
                            }
                        }
                        break;
                    }
                };
                for (seq, payload) in answers {
                    let Some(&i) = by_seq.get(&seq) else {
                        continue;
                    };
                    if results[i].is_some() {
                        continue;
                    }
                    results[i] = match payload {
                        NetlinkPayload::Error(e) if e.code.is_some() => fail(i, -e.raw_code()),
                        NetlinkPayload::Error(_) => Some(Ok(())),
                        _ => continue,
                    };
                    waiting -= 1;
                }
            }
            let failed = results
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .any(|r| matches!(r, Some(Err(_))));
            if failed && !force {
                break;
            }
            start = end;
        }
        Applied { results }
    }

    /// Sends one request per item and collects the single answer of each (an
    /// `RTM_GETROUTE`-style request without `NLM_F_ACK`): the reply, or `None` for an error.
    fn ask(
        &mut self,
        msgs: Vec<(RouteNetlinkMessage, u16)>,
    ) -> io::Result<Vec<Option<RouteNetlinkMessage>>> {
        let mut out: Vec<Option<RouteNetlinkMessage>> = Vec::with_capacity(msgs.len());
        let mut msgs = msgs.into_iter().peekable();
        while msgs.peek().is_some() {
            let chunk: Vec<_> = msgs.by_ref().take(CHUNK).collect();
            let n = chunk.len();
            let seqs = self.send(chunk)?;
            let by_seq: HashMap<u32, usize> =
                seqs.into_iter().enumerate().map(|(i, s)| (s, i)).collect();
            let mut got: Vec<Option<Option<RouteNetlinkMessage>>> = vec![None; n];
            let mut waiting = n;
            while waiting > 0 {
                for (seq, payload) in self.recv()? {
                    let Some(&i) = by_seq.get(&seq) else {
                        continue;
                    };
                    if got[i].is_some() {
                        continue;
                    }
                    got[i] = Some(match payload {
                        NetlinkPayload::InnerMessage(m) => Some(m),
                        _ => None,
                    });
                    waiting -= 1;
                }
            }
            out.extend(got.into_iter().map(Option::flatten));
        }
        Ok(out)
    }

    /// A dump (`NLM_F_DUMP`) of `msg`'s kind: every message until `NLMSG_DONE`.
    fn dump(&mut self, msg: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self
            .send(vec![(msg, NLM_F_REQUEST | NLM_F_DUMP)])?
            .first()
            .copied()
            .unwrap_or_default();
        let mut out = Vec::new();
        loop {
            for (s, payload) in self.recv()? {
                if s != seq {
                    continue;
                }
                match payload {
                    NetlinkPayload::InnerMessage(m) => out.push(m),
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                    _ => {}
                }
            }
        }
    }
}

/// [`Rtnl::apply`] on a socket of its own; a socket that cannot be opened fails every step.
pub fn apply(steps: &[Step], force: bool) -> Applied {
    if steps.is_empty() {
        return Applied::default();
    }
    match Rtnl::open() {
        Ok(mut r) => r.apply(steps, force),
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            let mut results: Vec<Option<Result<(), StepError>>> = vec![None; steps.len()];
            if let (Some(first), Some(r)) = (steps.first(), results.first_mut()) {
                *r = Some(Err(StepError {
                    step: first.to_string(),
                    errno,
                }));
            }
            if force {
                for (s, r) in steps.iter().zip(results.iter_mut()) {
                    *r = Some(Err(StepError {
                        step: s.to_string(),
                        errno,
                    }));
                }
            }
            Applied { results }
        }
    }
}

/// The interface through which the kernel would send to each address directly (no gateway),
/// as `ip route get` answers: `RTM_GETROUTE` of each. Local, broadcast, unreachable and
/// gateway routes, and the loopback device, give `None`. In the order given.
pub fn route_get(addrs: &[IpAddr]) -> Vec<Option<String>> {
    let msgs: Vec<(RouteNetlinkMessage, u16)> = addrs
        .iter()
        .map(|a| {
            let mut m = RouteMessage::default();
            m.header.address_family = family(a.is_ipv6());
            m.header.destination_prefix_length = if a.is_ipv6() { 128 } else { 32 };
            m.attributes
                .push(RouteAttribute::Destination(route_addr(*a)));
            (RouteNetlinkMessage::GetRoute(m), NLM_F_REQUEST)
        })
        .collect();
    let answers = Rtnl::open().and_then(|mut r| Ok((r.ask(msgs)?, r.links()?)));
    match answers {
        Ok((a, links)) => a
            .into_iter()
            .map(|m| match m {
                Some(RouteNetlinkMessage::NewRoute(r)) => connected(&r, &links),
                _ => None,
            })
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "RTM_GETROUTE");
            vec![None; addrs.len()]
        }
    }
}

/// The device of a directly connected unicast route (no gateway), not `lo`.
pub fn connected(r: &RouteMessage, links: &Links) -> Option<String> {
    if r.header.kind != RouteType::Unicast {
        return None;
    }
    let mut dev = None;
    for a in &r.attributes {
        match a {
            RouteAttribute::Gateway(_) | RouteAttribute::Via(_) => return None,
            RouteAttribute::Oif(i) => dev = Some(*i),
            _ => {}
        }
    }
    links.name(dev?).filter(|d| *d != "lo").map(str::to_string)
}

/// The IPv4 proxy-ARP entries (`ip -4 neigh show proxy`): address and device.
pub fn proxy_neighbours() -> io::Result<Vec<(Ipv4Addr, String)>> {
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.flags = NeighbourFlags::Proxy;
    let mut r = Rtnl::open()?;
    let all = r.dump(RouteNetlinkMessage::GetNeighbour(m))?;
    let links = r.links()?;
    Ok(all
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewNeighbour(n)
                if n.header.flags.contains(NeighbourFlags::Proxy) =>
            {
                let a = n.attributes.iter().find_map(|a| match a {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => Some(*a),
                    _ => None,
                })?;
                Some((a, links.name(n.header.ifindex)?.to_string()))
            }
            _ => None,
        })
        .collect())
}

/// One policy rule as [`rules4`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleInfo {
    pub pref: u32,
    pub table: u32,
    /// A rule with no selector (`from all`, no `to`, `iif`, `ipproto`...).
    pub plain: bool,
}

/// The IPv4 policy rules (`ip -4 rule show`).
pub fn rules4() -> io::Result<Vec<RuleInfo>> {
    let mut m = RuleMessage::default();
    m.header.family = AddressFamily::Inet;
    let all = Rtnl::open()?.dump(RouteNetlinkMessage::GetRule(m))?;
    Ok(all
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRule(r) => {
                let mut info = RuleInfo {
                    pref: 0,
                    table: u32::from(r.header.table),
                    plain: r.header.src_len == 0 && r.header.dst_len == 0,
                };
                for a in &r.attributes {
                    match a {
                        RuleAttribute::Priority(p) => info.pref = *p,
                        RuleAttribute::Table(t) => info.table = *t,
                        RuleAttribute::Iifname(_)
                        | RuleAttribute::Oifname(_)
                        | RuleAttribute::IpProtocol(_)
                        | RuleAttribute::FwMark(_) => info.plain = false,
                        _ => {}
                    }
                }
                (r.header.action == RuleAction::ToTable).then_some(info)
            }
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn parse(s: &str) -> Step {
        match Step::parse(&words(s)) {
            Ok(st) => st,
            Err(e) => panic!("{s:?}: {e}"),
        }
    }

    /// Every form older xlat versions wrote to their journals (as `ip` words) reads back,
    /// and prints as it will be journaled now.
    #[test]
    fn journal_words_of_older_versions_read_back() {
        let cases = [
            (
                "route del unreachable 198.19.0.0/24 metric 4294967295",
                "route del unreachable 198.19.0.0/24 metric 4294967295",
            ),
            (
                "route del unreachable default table 4400 metric 4294967295",
                "route del unreachable default table 4400 metric 4294967295",
            ),
            (
                "route del default dev xlat0 table 4400",
                "route del default dev xlat0 table 4400",
            ),
            (
                "route del throw 198.18.0.0/24 table 4400",
                "route del throw 198.18.0.0/24 table 4400",
            ),
            (
                "route del 198.19.0.10/32 dev xlat0",
                "route del 198.19.0.10/32 dev xlat0",
            ),
            (
                "-6 route del unreachable 64:ff9b::/96 metric 4294967295",
                "-6 route del unreachable 64:ff9b::/96 metric 4294967295",
            ),
            (
                "-6 route del 64:ff9b::/96 dev xlat0",
                "-6 route del 64:ff9b::/96 dev xlat0",
            ),
            (
                "rule del from 198.18.0.0/24 lookup 4400 pref 4400",
                "rule del from 198.18.0.0/24 lookup 4400 pref 4400",
            ),
            (
                "neigh del proxy 192.0.2.7 dev eth0",
                "neigh del proxy 192.0.2.7 dev eth0",
            ),
            (
                "-4 rule del pref 9 iif xlat0 lookup local",
                "rule del iif xlat0 lookup local pref 9",
            ),
            (
                "-4 route del 192.0.2.1/32 dev xlat0 table 4400",
                "route del 192.0.2.1/32 dev xlat0 table 4400",
            ),
            (
                "-4 rule del pref 10 to 192.0.2.1/32 ipproto 41 lookup 4400",
                "rule del to 192.0.2.1/32 ipproto 41 lookup 4400 pref 10",
            ),
            (
                "-4 rule del pref 10 to 192.0.2.1/32 ipproto icmp lookup 4400",
                "rule del to 192.0.2.1/32 ipproto icmp lookup 4400 pref 10",
            ),
            (
                "-4 rule add pref 0 lookup local",
                "rule add lookup local pref 0",
            ),
            (
                "-4 rule del pref 20 lookup local",
                "rule del lookup local pref 20",
            ),
            (
                "-6 addr del 2002:c000:201::1/48 dev xlat0",
                "-6 addr del 2002:c000:201::1/48 dev xlat0",
            ),
            (
                "-6 route del 2002::/16 dev xlat0",
                "-6 route del 2002::/16 dev xlat0",
            ),
            (
                "-6 route del default dev xlat0 metric 2002",
                "-6 route del default dev xlat0 metric 2002",
            ),
        ];
        for (old, now) in cases {
            let s = parse(old);
            assert_eq!(s.to_string(), now, "{old}");
            assert_eq!(parse(now), s, "{now} reads back to the same step");
        }
    }

    #[test]
    fn parsed_steps_are_typed() {
        assert_eq!(
            parse("-6 route replace default dev xlat0 metric 2002"),
            Step::route(
                Op::Replace,
                RouteKind::Unicast,
                Net::v6(0, 0),
                Some("xlat0"),
                TABLE_MAIN
            )
            .metric(2002)
        );
        assert_eq!(
            parse("-6 addr add fe80::5efe:c000:201/64 dev t nodad").obj,
            Obj::Addr {
                addr: "fe80::5efe:c000:201"
                    .parse()
                    .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                len: 64,
                dev: "t".into(),
                nodad: true
            }
        );
    }

    #[test]
    fn words_outside_the_vocabulary_are_refused() {
        for bad in [
            "",
            "route",
            "link set dev eth0 up",
            "route frobnicate 1.2.3.4/32",
            "route del 1.2.3.4/33",
            "route del 1.2.3.4/32 via 1.1.1.1",
            "rule del from 1.2.3.0/24 pref 1",
            "rule del from 1.2.3.0/24 lookup x pref 1",
            "neigh del 1.2.3.4 dev eth0",
            "route del unreachable",
            "route del 1.2.3.4/32 dev",
        ] {
            assert!(Step::parse(&words(bad)).is_err(), "{bad:?} accepted");
        }
    }

    fn test_links() -> Links {
        Links::new([("lo".to_string(), 1), ("xlat0".to_string(), 7)])
    }

    fn bytes(s: &Step) -> Vec<u8> {
        use netlink_packet_core::NetlinkSerializable;
        let (m, _) = request(s, &test_links())
            .unwrap_or((RouteNetlinkMessage::GetRoute(RouteMessage::default()), 0));
        let mut b = vec![0; m.buffer_len()];
        m.serialize(&mut b);
        b
    }

    #[test]
    fn route_requests_are_built_as_ip_builds_them() {
        // unreachable 198.19.0.0/24 metric MAX, table 4400 (above 255: RTA_TABLE only).
        let s = parse("route replace unreachable 198.19.0.0/24 table 4400 metric 4294967295");
        let (m, flags) = match request(&s, &test_links()) {
            Ok(x) => x,
            Err(e) => panic!("errno {e}"),
        };
        assert_eq!(
            flags,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
        );
        let RouteNetlinkMessage::NewRoute(r) = m else {
            panic!("not RTM_NEWROUTE");
        };
        assert_eq!(r.header.table, 0);
        assert_eq!(r.header.destination_prefix_length, 24);
        assert_eq!(r.header.kind, RouteType::Unreachable);
        assert!(r.attributes.contains(&RouteAttribute::Table(4400)));
        assert!(r.attributes.contains(&RouteAttribute::Priority(u32::MAX)));
        // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type.
        let b = bytes(&s);
        assert_eq!(b.get(..8), Some(&[2u8, 24, 0, 0, 0, 3, 0, 7][..]));
        // The delete matches any protocol and scope.
        let b = bytes(&s.with_op(Op::Del));
        assert_eq!(b.get(..8), Some(&[2u8, 24, 0, 0, 0, 0, 255, 7][..]));
        // `default` has no RTA_DST.
        let d = parse("route del unreachable default table 4400 metric 1");
        let Ok((RouteNetlinkMessage::DelRoute(r), f)) = request(&d, &test_links()) else {
            panic!("not RTM_DELROUTE");
        };
        assert_eq!(f, NLM_F_REQUEST | NLM_F_ACK);
        assert!(!r
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Destination(_))));
    }

    #[test]
    fn rule_and_neighbour_requests() {
        let s = parse("rule add from 198.18.0.0/24 lookup 4400 pref 4400");
        let Ok((RouteNetlinkMessage::NewRule(r), f)) = request(&s, &test_links()) else {
            panic!("not RTM_NEWRULE");
        };
        assert_eq!(f, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
        assert_eq!(r.header.src_len, 24);
        assert_eq!(r.header.action, RuleAction::ToTable);
        assert!(r.attributes.contains(&RuleAttribute::Priority(4400)));
        assert!(r.attributes.contains(&RuleAttribute::Table(4400)));
        // fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action.
        assert_eq!(bytes(&s).get(..8), Some(&[2u8, 0, 24, 0, 0, 0, 0, 1][..]));
        let local = parse("rule del lookup local pref 0");
        assert_eq!(
            bytes(&local).get(..8),
            Some(&[2u8, 0, 0, 0, 255, 0, 0, 1][..])
        );
        // A proxy entry on a known device builds; one on a missing device is ENODEV.
        let n = parse("neigh add proxy 192.0.2.7 dev lo");
        let Ok((RouteNetlinkMessage::NewNeighbour(m), _)) = request(&n, &test_links()) else {
            panic!("not RTM_NEWNEIGH");
        };
        assert!(m.header.flags.contains(NeighbourFlags::Proxy));
        assert_eq!(m.header.state, NeighbourState::Permanent);
        let gone = parse("neigh del proxy 192.0.2.7 dev xlat-no-such-dev");
        assert_eq!(request(&gone, &test_links()).err(), Some(libc::ENODEV));
    }

    /// Runs `args` (`ip` in the test's namespace set-up); must succeed.
    fn sh(args: &[&str]) {
        let st = std::process::Command::new(args[0])
            .args(&args[1..])
            .status();
        assert!(st.is_ok_and(|s| s.success()), "{args:?}");
    }

    /// The real kernel, in a network namespace of its own (root; `ip netns`): the test
    /// binary runs itself again inside it.
    #[test]
    #[ignore = "needs root: creates a network namespace"]
    fn batches_against_the_kernel_in_a_namespace() {
        const INNER: &str = "XLAT_RTNL_TEST_INNER";
        if std::env::var_os(INNER).is_none() {
            let ns = format!("xlat-rtnl-{}", std::process::id());
            sh(&["ip", "netns", "add", &ns]);
            let exe = std::env::current_exe().map(|p| p.to_string_lossy().into_owned());
            let st = exe.and_then(|exe| {
                std::process::Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &ns,
                        &exe,
                        "--exact",
                        "--include-ignored",
                        "--nocapture",
                    ])
                    .arg("rtnl::tests::batches_against_the_kernel_in_a_namespace")
                    .env(INNER, "1")
                    .status()
            });
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &ns])
                .status();
            assert!(
                st.is_ok_and(|s| s.success()),
                "the run inside the namespace failed"
            );
            return;
        }
        sh(&["ip", "link", "set", "lo", "up"]);
        sh(&[
            "ip", "link", "add", "xr0", "type", "veth", "peer", "name", "xr1",
        ]);
        sh(&["ip", "addr", "add", "198.18.0.1/24", "dev", "xr0"]);
        sh(&[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:2::1/64",
            "dev",
            "xr0",
            "nodad",
        ]);
        sh(&["ip", "link", "set", "xr0", "up"]);
        sh(&["ip", "link", "set", "xr1", "up"]);

        // Lookups.
        let got = route_get(&[
            "198.18.0.7"
                .parse()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            "203.0.113.1"
                .parse()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            "198.18.0.1"
                .parse()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            "2001:2::7"
                .parse()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        ]);
        assert_eq!(
            got,
            [Some("xr0".to_string()), None, None, Some("xr0".to_string())]
        );
        assert!(rules4().is_ok_and(|r| r
            .iter()
            .any(|x| x.pref == 0 && x.table == TABLE_LOCAL && x.plain)));

        // 2,000 routes and their fail-closed twins in one batch.
        let mut steps = Vec::new();
        for i in 0..2000u32 {
            let dst = Net::v4(0xc613_0000 | i, 32);
            steps.push(
                Step::route(Op::Replace, RouteKind::Unreachable, dst, None, TABLE_MAIN)
                    .metric(u32::MAX),
            );
            steps.push(Step::route(
                Op::Replace,
                RouteKind::Unicast,
                dst,
                Some("xr0"),
                TABLE_MAIN,
            ));
        }
        let t = Instant::now();
        let r = apply(&steps, false);
        eprintln!("4,000 routes added in {:?}", t.elapsed());
        assert_eq!(r.ok(), 4000, "{:?}", r.first_error());
        let shown = std::process::Command::new("ip")
            .args(["-4", "route", "show", "table", "main"])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| l.contains(" 198.19.") || l.starts_with("198.19."))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(shown, 4000);

        // A duplicate rule is EEXIST, named; a second delete is ENOENT; both benign.
        let rule = parse("rule add from 198.18.0.0/24 lookup 4400 pref 4400");
        assert_eq!(apply(std::slice::from_ref(&rule), false).ok(), 1);
        let again = apply(std::slice::from_ref(&rule), false);
        let e = again.first_error().cloned();
        assert!(
            e.as_ref()
                .is_some_and(|e| e.errno == libc::EEXIST && e.is_benign()),
            "{e:?}"
        );
        assert!(e.is_some_and(|e| e
            .to_string()
            .contains("rule add from 198.18.0.0/24 lookup 4400 pref 4400")));
        let del = rule.with_op(Op::Del);
        assert_eq!(apply(&[del.clone(), del.clone()], true).ok(), 1);

        // Without force, the batch stops after a failing chunk; with force it goes on.
        let missing = Step::route(
            Op::Del,
            RouteKind::Throw,
            Net::v4(0xc0000200, 24),
            None,
            4400,
        );
        let mut mixed = vec![missing.clone()];
        mixed.extend(std::iter::repeat_n(missing, CHUNK));
        mixed.push(parse("route replace throw 192.0.2.0/24 table 4400"));
        let r = apply(&mixed, false);
        assert!(
            r.results.last().is_some_and(Option::is_none),
            "sent after a failed chunk"
        );
        let r = apply(&mixed, true);
        assert_eq!(r.ok(), 1);

        // Proxy ARP, listed back; a step on a missing device fails alone.
        let proxy = parse("neigh add proxy 198.18.0.50 dev xr0");
        let gone = parse("neigh add proxy 198.18.0.51 dev xlat-no-such");
        let r = apply(&[gone, proxy.clone()], true);
        assert_eq!(r.first_error().map(|e| e.errno), Some(libc::ENODEV));
        assert_eq!(r.ok(), 1);
        assert!(proxy_neighbours()
            .is_ok_and(|p| p.contains(&(Ipv4Addr::new(198, 18, 0, 50), "xr0".to_string()))));
        assert_eq!(apply(&[proxy.with_op(Op::Del)], false).ok(), 1);

        // IPv6 address and routes, and the teardown of everything.
        let a = parse("-6 addr add 2001:2:0:1::1/64 dev xr0 nodad");
        assert_eq!(apply(std::slice::from_ref(&a), false).ok(), 1);
        assert_eq!(apply(&[a.with_op(Op::Del)], false).ok(), 1);
        let undo: Vec<Step> = steps.iter().rev().map(|s| s.with_op(Op::Del)).collect();
        let t = Instant::now();
        let r = apply(&undo, true);
        eprintln!("4,000 routes removed in {:?}", t.elapsed());
        assert_eq!(r.ok(), 4000, "{:?}", r.first_error());
    }
}
