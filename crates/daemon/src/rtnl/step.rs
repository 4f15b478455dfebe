//! A routing change as a typed step ([`Step`]), its `ip` words and how they parse back
//! (journals of older versions were written as those words).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_route::AddressFamily;

use super::{TABLE_LOCAL, TABLE_MAIN};

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

    pub(super) fn family(&self) -> AddressFamily {
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

pub(super) fn family(v6: bool) -> AddressFamily {
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
