//! Routing around the TUN device for the 6in4 tunnel endpoints (`[tunnel.6to4]`,
//! `[tunnel.isatap]`), set up by `xlat run` when `tun.auto_routes` is on and undone at exit.
//!
//! The endpoint's IPv4 address stays on the host's real interface. What is added (over
//! rtnetlink, as [`crate::rtnl`] steps; shown here in `ip`'s words):
//!
//! - IPv4, inbound: protocol-41 and ICMP packets to each endpoint address are steered into the
//!   TUN by policy rules, `ip rule add pref 10 to V4/32 ipproto 41 lookup T` (and `ipproto
//!   icmp`), T holding `V4/32 dev TUN`. The kernel's `local` rule (pref 0) would deliver them
//!   first, so it moves behind ours: `lookup local` is added at pref 20 and removed from pref
//!   0 (and put back at exit). ICMP that is not about the tunnel comes back out of the TUN
//!   unchanged and is delivered by `ip rule add pref 9 iif TUN lookup local`.
//!   `net.ipv4.ip_forward = 1` (the kernel forwards them into the
//!   TUN), and on the TUN `rp_filter = 0` and `accept_local = 1` (the engine's packets carry
//!   the local endpoint address as source).
//! - IPv6 on the TUN: its IPv6 MTU (`net.ipv6.conf.TUN.mtu`) is the tunnel MTU (RFC 4213
//!   3.2), while the link MTU carries that plus the outer header.
//!   - 6to4: address 2002:V4ADDR::1/48, route 2002::/16, and with a relay the IPv6 default
//!     route (metric 2002, so a native default route wins); IPv6 forwarding on (a 6to4 router).
//!   - ISATAP router: fe80::/64 and PREFIX/64 plus its ISATAP identifier; IPv6 forwarding on.
//!   - ISATAP host: the link-local ISATAP address; the global address and the default route
//!     follow what the engine learns from Router Advertisements ([`IsatapHostRoutes`]).

use std::net::IpAddr;

use anyhow::{bail, Result};
use tracing::info;
use xlat_engine::tunnel::{isatap, sixtofour, IsatapRole, TunnelConfig, TunnelStatus};

use crate::config::min_tunnel_mtu;
use crate::routes::Routes;
use crate::rtnl::{self, Net, Obj, Op, RouteKind, Step, TABLE_LOCAL, TABLE_MAIN};

/// Preference of the rule that delivers packets from the TUN to local addresses.
pub const RETURN_RULE_PREF: u32 = 9;
/// Preference of the rules that steer protocol 41 and ICMP into the TUN.
pub const TUNNEL_RULE_PREF: u32 = 10;
/// Preference `lookup local` moves to, behind [`TUNNEL_RULE_PREF`].
pub const LOCAL_RULE_PREF: u32 = 20;
/// Metric of the IPv6 default routes into the TUN (6to4 relay, ISATAP host's router).
pub const DEFAULT_METRIC: u32 = 2002;

fn v6(a: u128) -> std::net::Ipv6Addr {
    std::net::Ipv6Addr::from(a)
}

/// An IPv4 policy rule `pref P [to T] [iif D] [ipproto N] lookup TABLE`.
fn rule(
    op: Op,
    pref: u32,
    to: Option<Net>,
    iif: Option<&str>,
    ipproto: Option<u8>,
    table: u32,
) -> Step {
    Step::new(
        op,
        Obj::Rule {
            v6: false,
            from: None,
            to,
            iif: iif.map(str::to_string),
            ipproto,
            table,
            pref,
        },
    )
}

/// An IPv6 address `a/len` on `dev` (added without duplicate address detection).
fn addr6(op: Op, a: u128, len: u8, dev: &str) -> Step {
    Step::new(
        op,
        Obj::Addr {
            addr: IpAddr::V6(v6(a)),
            len,
            dev: dev.to_string(),
            nodad: true,
        },
    )
}

/// Removes every copy of `del` (leftovers of an earlier run), at most 16.
fn remove_leftovers(del: &Step) {
    for _ in 0..16 {
        if Routes::run_now(del).is_err() {
            break;
        }
    }
}

/// Sets up the tunnel routes; on error what was added is removed again (by the drop).
pub fn setup(t: &TunnelConfig, tun: &str, table: u32) -> Result<Routes> {
    let mut r = Routes::journaled(tun, "tunnel")?;
    r.sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
    r.sysctl(&format!("/proc/sys/net/ipv4/conf/{tun}/rp_filter"), "0")?;
    r.sysctl(&format!("/proc/sys/net/ipv4/conf/{tun}/accept_local"), "1")?;
    r.sysctl(&format!("/proc/sys/net/ipv6/conf/{tun}/disable_ipv6"), "0")?;
    r.sysctl(
        &format!("/proc/sys/net/ipv6/conf/{tun}/mtu"),
        &min_tunnel_mtu(t).to_string(),
    )?;
    let router = t.sixtofour.is_some()
        || t.isatap
            .as_ref()
            .is_some_and(|i| matches!(i.role, IsatapRole::Router { .. }));
    if router {
        r.sysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1")?;
    }

    // IPv4 from the TUN to a local address (ICMP the engine hands back) is delivered here,
    // before the steering rules could send it into the TUN again.
    let back = rule(
        Op::Add,
        RETURN_RULE_PREF,
        None,
        Some(tun),
        None,
        TABLE_LOCAL,
    );
    remove_leftovers(&back.with_op(Op::Del));
    r.add(back.clone(), back.with_op(Op::Del))?;
    // IPv4: steer protocol 41 and ICMP for the endpoint addresses into the TUN.
    for v4 in t.ipv4_addresses() {
        let host = Net::v4(u32::from(v4), 32);
        let route = Step::route(Op::Replace, RouteKind::Unicast, host, Some(tun), table);
        r.add(route.clone(), route.with_op(Op::Del))?;
        for proto in [41, libc::IPPROTO_ICMP as u8] {
            let steer = rule(
                Op::Add,
                TUNNEL_RULE_PREF,
                Some(host),
                None,
                Some(proto),
                table,
            );
            // Leftovers of an earlier run first (a duplicate rule would stay behind).
            remove_leftovers(&steer.with_op(Op::Del));
            r.add(steer.clone(), steer.with_op(Op::Del))?;
        }
    }
    move_local_rule(&mut r)?;

    // IPv6 on the TUN.
    if let Some(s) = &t.sixtofour {
        let a = sixtofour::address(u32::from(s.ipv4));
        r.add(addr6(Op::Add, a, 48, tun), addr6(Op::Del, a, 48, tun))?;
        let r6 = Step::route(
            Op::Replace,
            RouteKind::Unicast,
            Net::v6(0x2002u128 << 112, 16),
            Some(tun),
            TABLE_MAIN,
        );
        r.add(r6.clone(), r6.with_op(Op::Del))?;
        if s.relay.is_some() {
            let d = default6(Op::Replace, tun);
            r.add(d.clone(), d.with_op(Op::Del))?;
        }
    }
    if let Some(i) = &t.isatap {
        let v4 = u32::from(i.ipv4);
        let ll = isatap::link_local(v4);
        r.add(addr6(Op::Add, ll, 64, tun), addr6(Op::Del, ll, 64, tun))?;
        if let IsatapRole::Router { prefix, .. } = &i.role {
            let a = prefix.addr | u128::from(isatap::iid(v4));
            r.add(addr6(Op::Add, a, 64, tun), addr6(Op::Del, a, 64, tun))?;
        }
    }
    info!(tun, table, endpoints = ?t.ipv4_addresses(), "tunnel routes set up");
    Ok(r)
}

/// Moves the kernel's `lookup local` rule from pref 0 to [`LOCAL_RULE_PREF`], so that the
/// steering rules come first. Undone at exit (pref 0 restored before pref 20 goes).
fn move_local_rule(r: &mut Routes) -> Result<()> {
    let rules = rtnl::rules4().unwrap_or_else(|e| {
        tracing::debug!(error = %e, "listing IPv4 rules (RTM_GETRULE)");
        Vec::new()
    });
    let local = |pref: u32| rule(Op::Add, pref, None, None, None, TABLE_LOCAL);
    if rules
        .iter()
        .any(|x| x.pref == 0 && x.table == TABLE_LOCAL && x.plain)
    {
        r.add(
            local(LOCAL_RULE_PREF),
            local(LOCAL_RULE_PREF).with_op(Op::Del),
        )?;
        r.add(local(0).with_op(Op::Del), local(0))?;
        return Ok(());
    }
    // Moved already (an earlier run that did not finish, or the administrator): fine if it
    // comes after our rules.
    let behind = rules
        .iter()
        .any(|x| x.table == TABLE_LOCAL && x.pref > TUNNEL_RULE_PREF);
    if !behind {
        bail!("no `lookup local` IPv4 rule after pref {TUNNEL_RULE_PREF}: protocol 41 cannot be steered into the TUN (see `ip -4 rule show`)");
    }
    Ok(())
}

/// The IPv6 default route into `tun` at [`DEFAULT_METRIC`].
fn default6(op: Op, tun: &str) -> Step {
    Step::route(
        op,
        RouteKind::Unicast,
        Net::default_route(true),
        Some(tun),
        TABLE_MAIN,
    )
    .metric(DEFAULT_METRIC)
}

/// The ISATAP host's learned address and default route on the TUN, kept in step with
/// [`TunnelStatus`] and removed when dropped.
#[derive(Debug)]
pub struct IsatapHostRoutes {
    tun: String,
    addr: Option<u128>,
    default: bool,
}

impl IsatapHostRoutes {
    pub fn new(tun: &str) -> IsatapHostRoutes {
        IsatapHostRoutes {
            tun: tun.to_string(),
            addr: None,
            default: false,
        }
    }

    /// Adds or removes the address and the default route to match `st`.
    pub fn apply(&mut self, st: &TunnelStatus) {
        let tun = self.tun.clone();
        if st.isatap_address != self.addr {
            if let Some(old) = self.addr.take() {
                let _ = Routes::run_now(&addr6(Op::Del, old, 64, &tun));
            }
            if let Some(new) = st.isatap_address {
                match Routes::run_now(&addr6(Op::Add, new, 64, &tun)) {
                    Ok(_) => {
                        info!(address = %v6(new), "ISATAP address configured from a router advertisement");
                        self.addr = Some(new);
                    }
                    Err(e) => tracing::warn!(error = %e, "adding the ISATAP address"),
                }
            }
        }
        let want = st.isatap_router.is_some();
        if want != self.default {
            let op = if want { Op::Replace } else { Op::Del };
            match Routes::run_now(&default6(op, &tun)) {
                Ok(_) => {
                    info!(router = ?st.isatap_router, "ISATAP default route {}", if want { "added" } else { "removed" });
                    self.default = want;
                }
                Err(e) => tracing::warn!(error = %e, "ISATAP default route"),
            }
        }
    }
}

impl Drop for IsatapHostRoutes {
    fn drop(&mut self) {
        self.apply(&TunnelStatus::default());
    }
}
