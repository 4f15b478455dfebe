//! The vocabulary the translators share: transport protocols with ports ([`Proto`]),
//! endpoints ([`Endpoint`]), inside address types ([`InsideAddr`]: IPv4 for NAT44, IPv6 for
//! NAT64), the tuple a packet carries ([`FlowKey`]), and the seeded hashes of tuples and BIB
//! keys the session index and the BIB are keyed by.
//!
//! Stateless code (SIIT, the offload recipes) and stateful code (the NAPT, its host table)
//! both speak it; it depends on neither.

use std::fmt::Debug;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

use xlat_wire::ipv4::proto as ipproto;
use xlat_wire::l4::{icmp, tcp, udp};

use crate::index::KeyHasher;

/// Transport protocols with ports (or an identifier) that the NAPT tracks.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp = 0,
    Udp = 1,
    Icmp = 2,
}

impl Proto {
    pub fn from_ip(p: u8) -> Option<Proto> {
        match p {
            ipproto::TCP => Some(Proto::Tcp),
            ipproto::UDP => Some(Proto::Udp),
            ipproto::ICMP => Some(Proto::Icmp),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Icmp => "icmp",
        }
    }
    /// Offset of the source "port" in the transport header (ICMP: the query identifier).
    pub fn src_port_off(self) -> usize {
        match self {
            Proto::Tcp => tcp::SRC_PORT,
            Proto::Udp => udp::SRC_PORT,
            Proto::Icmp => icmp::IDENT,
        }
    }
    pub fn dst_port_off(self) -> usize {
        match self {
            Proto::Tcp => tcp::DST_PORT,
            Proto::Udp => udp::DST_PORT,
            Proto::Icmp => icmp::IDENT,
        }
    }
    /// The remote side's "port" in a session key: ICMP queries have only one identifier,
    /// which belongs to the inside host (RFC 5508 3.1).
    pub fn remote_port(self, port: u16) -> u16 {
        match self {
            Proto::Icmp => 0,
            _ => port,
        }
    }
}

/// Which stateful translator a session, mapping or event belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Translator {
    Nat44,
    Nat64,
}

/// An inside address type: `u32` (IPv4) or `u128` (IPv6).
pub trait InsideAddr: Copy + Eq + Hash + Debug {
    /// The translator whose inside hosts have this type.
    const TRANSLATOR: Translator;
    /// The address as two words, for the tuple hash.
    fn words(self) -> (u64, u64);
    /// Text form for `xlat show`.
    fn show(self) -> String;
    /// Text form followed by a port.
    fn show_port(self, port: u16) -> String;
    /// The address as sessions and mappings hold it when it fits their 4 bytes (IPv4:
    /// itself); `None`: they hold its host's number (`Hosts`).
    fn as_held(self) -> Option<u32>;
    /// The address a held value is, if addresses are held as themselves.
    fn from_held(v: u32) -> Option<Self>;
    /// The address as a value of its family.
    fn ip(self) -> std::net::IpAddr;
}

impl InsideAddr for u32 {
    const TRANSLATOR: Translator = Translator::Nat44;
    #[inline]
    fn words(self) -> (u64, u64) {
        (u64::from(self), 0)
    }
    fn show(self) -> String {
        Ipv4Addr::from(self).to_string()
    }
    fn show_port(self, port: u16) -> String {
        format!("{}:{port}", Ipv4Addr::from(self))
    }
    #[inline(always)]
    fn as_held(self) -> Option<u32> {
        Some(self)
    }
    #[inline(always)]
    fn from_held(v: u32) -> Option<u32> {
        Some(v)
    }
    fn ip(self) -> std::net::IpAddr {
        Ipv4Addr::from(self).into()
    }
}

impl InsideAddr for u128 {
    const TRANSLATOR: Translator = Translator::Nat64;
    #[inline]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the address's two 64-bit halves"
    )]
    fn words(self) -> (u64, u64) {
        (self as u64, (self >> 64) as u64)
    }
    fn show(self) -> String {
        Ipv6Addr::from(self).to_string()
    }
    fn show_port(self, port: u16) -> String {
        format!("[{}]:{port}", Ipv6Addr::from(self))
    }
    #[inline(always)]
    fn as_held(self) -> Option<u32> {
        None
    }
    #[inline(always)]
    fn from_held(_: u32) -> Option<u128> {
        None
    }
    fn ip(self) -> std::net::IpAddr {
        Ipv6Addr::from(self).into()
    }
}

/// An address and port (ICMP: identifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint<A = u32> {
    pub addr: A,
    pub port: u16,
}

impl<A: InsideAddr> Endpoint<A> {
    /// Text form for `xlat show`, with the port or without (an ICMP remote has none).
    pub fn show(self, with_port: bool) -> String {
        if with_port {
            self.addr.show_port(self.port)
        } else {
            self.addr.show()
        }
    }
}

/// Index of sessions by the tuple a packet carries: (protocol, inside endpoint, remote) going
/// out, (protocol, outside endpoint, remote) coming in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowKey<A> {
    Out(Proto, Endpoint<A>, Endpoint),
    In(Proto, Endpoint, Endpoint),
}

/// The tuple packed into words for [`KeyHasher`]: addresses, ports, protocol, direction.
#[inline]
pub(crate) fn flow_hash<A: InsideAddr>(hasher: &KeyHasher, key: &FlowKey<A>) -> u64 {
    let (dir, p, (a0, a1), port, r) = match *key {
        FlowKey::Out(p, int, r) => (0u64, p, int.addr.words(), int.port, r),
        FlowKey::In(p, ext, r) => (1u64, p, (u64::from(ext.addr), 0), ext.port, r),
    };
    let w3 = u64::from(port) | u64::from(r.port) << 16 | (p as u64) << 32 | dir << 40;
    hasher.hash([a0, a1, u64::from(r.addr), w3])
}

/// Hash of a BIB key: a mapping's inside (`outside = false`) or outside endpoint.
#[inline]
pub(crate) fn bib_hash(
    hasher: &KeyHasher,
    proto: Proto,
    addr: (u64, u64),
    port: u16,
    outside: bool,
) -> u64 {
    let w3 = u64::from(port) | (proto as u64) << 32 | (2 + u64::from(outside)) << 40;
    hasher.hash([addr.0, addr.1, 0, w3])
}

/// The BIB key's hash of a mapping with these endpoints, by the inside (`outside = false`)
/// or outside one.
#[inline]
pub(crate) fn ends_bib_hash<A: InsideAddr>(
    hasher: &KeyHasher,
    proto: Proto,
    int: Endpoint<A>,
    ext: Endpoint,
    outside: bool,
) -> u64 {
    if outside {
        bib_hash(hasher, proto, (u64::from(ext.addr), 0), ext.port, true)
    } else {
        bib_hash(hasher, proto, int.addr.words(), int.port, false)
    }
}
