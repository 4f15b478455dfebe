//! A [`Step`] as the rtnetlink request that makes it (rtnetlink(7)), with the interface
//! names resolved ([`Links`]).

use std::collections::HashMap;
use std::net::IpAddr;

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{IpProtocol, RouteNetlinkMessage};

use super::step::family;
use super::{Obj, Op, RouteKind, Step};

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

pub(super) fn route_addr(a: IpAddr) -> RouteAddress {
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
