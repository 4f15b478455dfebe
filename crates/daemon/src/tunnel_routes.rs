//! Routing around the TUN device for the 6in4 tunnel endpoints (`[tunnel.6to4]`,
//! `[tunnel.isatap]`), set up by `xlat run` when `tun.auto_routes` is on and undone at exit.
//!
//! The endpoint's IPv4 address stays on the host's real interface. What is added:
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

use anyhow::{bail, Result};
use tracing::info;
use xlat_engine::tunnel::{isatap, sixtofour, IsatapRole, TunnelConfig, TunnelStatus};

use crate::config::min_tunnel_mtu;
use crate::routes::{args, ip, Routes};

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
    let back = format!("-4 rule del pref {RETURN_RULE_PREF} iif {tun} lookup local");
    for _ in 0..16 {
        if ip(&args(&back)).is_err() {
            break;
        }
    }
    r.add(
        &format!("-4 rule add pref {RETURN_RULE_PREF} iif {tun} lookup local"),
        &back,
    )?;
    // IPv4: steer protocol 41 and ICMP for the endpoint addresses into the TUN.
    for v4 in t.ipv4_addresses() {
        r.add(
            &format!("-4 route replace {v4}/32 dev {tun} table {table}"),
            &format!("-4 route del {v4}/32 dev {tun} table {table}"),
        )?;
        for proto in ["41", "icmp"] {
            let rule = format!(
                "-4 rule del pref {TUNNEL_RULE_PREF} to {v4}/32 ipproto {proto} lookup {table}"
            );
            // Leftovers of an earlier run first (a duplicate rule is not an error for ip,
            // but would stay behind).
            for _ in 0..16 {
                if ip(&args(&rule)).is_err() {
                    break;
                }
            }
            r.add(
                &format!(
                    "-4 rule add pref {TUNNEL_RULE_PREF} to {v4}/32 ipproto {proto} lookup {table}"
                ),
                &rule,
            )?;
        }
    }
    move_local_rule(&mut r)?;

    // IPv6 on the TUN.
    if let Some(s) = &t.sixtofour {
        let a = v6(sixtofour::address(u32::from(s.ipv4)));
        r.add(
            &format!("-6 addr add {a}/48 dev {tun} nodad"),
            &format!("-6 addr del {a}/48 dev {tun}"),
        )?;
        r.add(
            &format!("-6 route replace 2002::/16 dev {tun}"),
            &format!("-6 route del 2002::/16 dev {tun}"),
        )?;
        if s.relay.is_some() {
            r.add(
                &format!("-6 route replace default dev {tun} metric {DEFAULT_METRIC}"),
                &format!("-6 route del default dev {tun} metric {DEFAULT_METRIC}"),
            )?;
        }
    }
    if let Some(i) = &t.isatap {
        let v4 = u32::from(i.ipv4);
        let ll = v6(isatap::link_local(v4));
        r.add(
            &format!("-6 addr add {ll}/64 dev {tun} nodad"),
            &format!("-6 addr del {ll}/64 dev {tun}"),
        )?;
        if let IsatapRole::Router { prefix, .. } = &i.role {
            let a = v6(prefix.addr | u128::from(isatap::iid(v4)));
            r.add(
                &format!("-6 addr add {a}/64 dev {tun} nodad"),
                &format!("-6 addr del {a}/64 dev {tun}"),
            )?;
        }
    }
    info!(tun, table, endpoints = ?t.ipv4_addresses(), "tunnel routes set up");
    Ok(r)
}

/// Moves the kernel's `lookup local` rule from pref 0 to [`LOCAL_RULE_PREF`], so that the
/// steering rules come first. Undone at exit (pref 0 restored before pref 20 goes).
fn move_local_rule(r: &mut Routes) -> Result<()> {
    let at0 = ip(&args("-4 rule show pref 0")).unwrap_or_default();
    if at0.contains("lookup local") {
        r.add(
            &format!("-4 rule add pref {LOCAL_RULE_PREF} lookup local"),
            &format!("-4 rule del pref {LOCAL_RULE_PREF} lookup local"),
        )?;
        r.add(
            "-4 rule del pref 0 lookup local",
            "-4 rule add pref 0 lookup local",
        )?;
        return Ok(());
    }
    // Moved already (an earlier run that did not finish, or the administrator): fine if it
    // comes after our rules.
    let all = ip(&args("-4 rule show")).unwrap_or_default();
    let behind = all.lines().any(|l| {
        l.contains("lookup local")
            && l.split(':')
                .next()
                .and_then(|p| p.trim().parse::<u32>().ok())
                .is_some_and(|p| p > TUNNEL_RULE_PREF)
    });
    if !behind {
        bail!("no `lookup local` IPv4 rule after pref {TUNNEL_RULE_PREF}: protocol 41 cannot be steered into the TUN (see `ip -4 rule show`)");
    }
    Ok(())
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
                let _ = ip(&args(&format!("-6 addr del {}/64 dev {tun}", v6(old))));
            }
            if let Some(new) = st.isatap_address {
                match ip(&args(&format!(
                    "-6 addr add {}/64 dev {tun} nodad",
                    v6(new)
                ))) {
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
            let verb = if want { "replace" } else { "del" };
            match ip(&args(&format!(
                "-6 route {verb} default dev {tun} metric {DEFAULT_METRIC}"
            ))) {
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
