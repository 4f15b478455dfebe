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

//!
//! Files: `step.rs` (the steps, their words and parsing), `request.rs` (a step as a netlink
//! request), `socket.rs` (the socket: batches, answers matched to steps, lookups); here the
//! calls the daemon makes.

mod request;
mod socket;
mod step;

use request::route_addr;
pub use request::{request, Links};
pub use socket::{Applied, Rtnl, StepError};
use step::family;
pub use step::{Net, Obj, Op, RouteKind, Step};

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use netlink_packet_core::NLM_F_REQUEST;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage,
};
use netlink_packet_route::route::{RouteAttribute, RouteMessage, RouteType};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

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
                    why: None,
                }));
            }
            if force {
                for (s, r) in steps.iter().zip(results.iter_mut()) {
                    *r = Some(Err(StepError {
                        step: s.to_string(),
                        errno,
                        why: None,
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
mod tests;
