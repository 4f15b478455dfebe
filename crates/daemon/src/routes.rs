//! Automatic routing around the TUN device (`[tun] auto_routes = true`), undone at exit.
//!
//! What is set up (over rtnetlink, see [`crate::rtnl`]; and by writing /proc/sys):
//!
//! - `net.ipv4.ip_forward = 1`, `net.ipv4.conf.<tun>.rp_filter = 0` and `accept_local = 1`, and `net.ipv4.neigh.<iface>.proxy_delay = 0` on interfaces with proxy ARP entries; each
//!   restored to its old value at exit.
//! - Outbound: `ip rule add from <inside prefix> lookup <table> pref <pref>` for each inside
//!   prefix (and each static inside address outside them); the table holds
//!   `default dev <tun>` plus `throw <inside prefix>` for each inside prefix, so traffic between
//!   inside hosts and the gateway's own traffic to inside hosts stay in the main table.
//! - Inbound: in the main table, `<pool prefix> dev <tun>` and `<static outside>/32 dev <tun>`.
//! - NAT64 and SIIT (IPv4 <-> IPv6): `net.ipv6.conf.all.forwarding = 1`; in the main tables,
//!   `<pref64> dev <tun>` (IPv6) and `<nat64.pool4 | siit.pool4> dev <tun>` (IPv4). An EAM
//!   entry (RFC 7757) maps hosts on one side; which side is found before our routes exist
//!   (`RTM_GETROUTE` of a host address of each prefix, as `ip route get` asks): an IPv6
//!   prefix on a directly connected subnet means IPv6 hosts, so the IPv4 prefix is routed
//!   into the tun; else an IPv4 prefix on a directly connected subnet means IPv4 hosts, so
//!   the IPv6 prefix is routed into the tun; else (neither connected) the IPv4 prefix is,
//!   RFC 7757's usual use (IPv4 addresses for IPv6 servers). Each decision is logged.
//! - Proxy ARP: each pool or static outside address that lies in a subnet directly connected to
//!   another interface (found with `RTM_GETROUTE` before our routes exist) gets a proxy
//!   neighbour entry (`RTM_NEWNEIGH` with `NTF_PROXY`, `ip neigh add proxy ADDR dev IFACE`),
//!   so the gateway answers ARP for it. At most
//!   [`MAX_PROXY_NEIGH`] addresses; beyond that a warning says which were left out.
//!
//! - Fail closed: a dead daemon must not turn the gateway into a plain router that forwards
//!   inside traffic untranslated (leaking inside addresses). When the daemon dies its
//!   non-persistent TUN device goes, and with it every route through it; so every route into
//!   the TUN has a twin `unreachable` route at [`FAIL_CLOSED_METRIC`] (the worst metric) that
//!   no live route loses to and that outlives the device: `unreachable default` in the policy
//!   table (the rule never falls through to `main`), and `unreachable <prefix>` in the main
//!   tables for the pool and pref64 prefixes. A clean exit removes them with the rest; after a
//!   SIGKILL they stay until the next start replaces them (see [`crate::journal`]).
//!
//! Everything added is recorded in [`Routes`] and removed when it is dropped, also when setup
//! fails halfway. It is also written down before it is made, in a [`Journal`] under
//! [`crate::journal::STATE_DIR`], so a run that could not clean up (SIGKILL, a crash) is
//! cleaned up by the next start, which also restores the sysctls' true original values.
//! Changes are [`Step`]s sent over one rtnetlink socket a phase at a time, many requests
//! before their acknowledgements are read ([`crate::rtnl::apply`]); no process is spawned.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, Result};
use tracing::{debug, info, warn};
use xlat_engine::{Eam, Nat44Config, Nat64Config, Prefix4, Prefix6, SiitConfig};

use crate::journal::{Journal, STATE_DIR};
use crate::rtnl::{self, Net, Op, RouteKind, Step, TABLE_MAIN};

mod update;
pub use update::RouteChange;

/// Most proxy-ARP entries created.
pub const MAX_PROXY_NEIGH: u64 = 4096;

/// Metric of the fail-closed `unreachable` routes (module docs): the worst there is.
pub const FAIL_CLOSED_METRIC: u32 = u32::MAX;

/// What to route, derived from the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutePlan {
    pub tun: String,
    pub table: u32,
    pub pref: u32,
    /// Sources sent to the tun (inside prefixes, plus static inside /32s not inside them).
    pub rule_sources: Vec<Prefix4>,
    /// Destinations kept in main by `throw` routes in our table.
    pub throws: Vec<Prefix4>,
    /// Destinations routed into the tun in the main table (pool prefixes, static outside /32s,
    /// NAT64 and SIIT pool4).
    pub inbound: Vec<Prefix4>,
    /// IPv6 destinations routed into the tun in the main table (the pref64s).
    pub inbound6: Vec<Prefix6>,
    /// EAM entries; one of their two prefixes is routed into the tun (see the module docs).
    pub eam: Vec<Eam>,
    /// An IPv6 translator is configured: IPv6 forwarding is turned on.
    pub ipv6: bool,
}

impl RoutePlan {
    /// The plan of a whole configuration file (at start, and at each reload).
    pub fn of(cfg: &crate::config::Config) -> RoutePlan {
        RoutePlan::new(
            &cfg.tun.name,
            cfg.tun.route_table,
            cfg.tun.rule_pref,
            cfg.nat44.as_ref(),
            cfg.nat64.as_ref(),
            cfg.siit.as_ref(),
        )
    }

    pub fn new(
        tun: &str,
        table: u32,
        pref: u32,
        nat44: Option<&Nat44Config>,
        nat64: Option<&Nat64Config>,
        siit: Option<&SiitConfig>,
    ) -> RoutePlan {
        let mut rule_sources = Vec::new();
        let mut throws = Vec::new();
        let mut inbound = Vec::new();
        if let Some(nat) = nat44 {
            rule_sources = nat.inside.clone();
            for s in &nat.statics {
                let a = u32::from(s.inside);
                if !rule_sources.iter().any(|p| p.contains(a)) {
                    rule_sources.push(Prefix4 { addr: a, len: 32 });
                }
            }
            throws = nat.inside.clone();
            inbound = nat.pool.clone();
            for s in &nat.statics {
                inbound.push(Prefix4 {
                    addr: u32::from(s.outside),
                    len: 32,
                });
            }
        }
        let mut inbound6 = Vec::new();
        let pref6 = |p: &xlat_engine::Pref64| Prefix6 {
            addr: p.addr(),
            len: p.len(),
        };
        if let Some(n) = nat64 {
            inbound6.push(pref6(&n.prefix));
            inbound.extend(n.pool4.iter().copied());
        }
        let mut eam = Vec::new();
        if let Some(s) = siit {
            inbound6.extend(s.prefix.as_ref().map(pref6));
            inbound.extend(s.pool4.iter().copied());
            eam = s.eam.clone();
        }
        RoutePlan {
            tun: tun.to_string(),
            table,
            pref,
            rule_sources,
            throws,
            inbound,
            inbound6,
            eam,
            ipv6: nat64.is_some() || siit.is_some(),
        }
    }
}

/// Routing state this process added; dropping it removes everything, newest first.
#[derive(Debug, Default)]
pub struct Routes {
    /// Steps that undo one addition each, in the order they were added.
    undo: Vec<Step>,
    /// /proc/sys files changed, with their old contents.
    sysctls: Vec<(String, String)>,
    /// The same, on disk before each change (none in unit tests of the planning).
    journal: Option<Journal>,
}

/// The interface through which `addr` is directly reachable (no gateway), if any, by
/// `RTM_GETROUTE`. Local, broadcast and unreachable results give `None`.
fn connected_dev(addr: IpAddr) -> Option<String> {
    rtnl::route_get(&[addr]).pop().flatten()
}

/// [`connected_dev`] of many addresses, asked in batches on one socket (2,000 static entries
/// were once 2,000 processes); in the order given.
fn connected_devs(addrs: &[Ipv4Addr]) -> Vec<Option<String>> {
    let addrs: Vec<IpAddr> = addrs.iter().map(|a| IpAddr::V4(*a)).collect();
    rtnl::route_get(&addrs)
}

fn net4(p: &Prefix4) -> Net {
    Net::v4(p.addr, p.len)
}

fn net6(p: &Prefix6) -> Net {
    Net::v6(p.addr, p.len)
}

/// (add, undo) of a route made with `replace`.
fn route_pair(kind: RouteKind, dst: Net, dev: Option<&str>, table: u32) -> (Step, Step) {
    let add = Step::route(Op::Replace, kind, dst, dev, table);
    let del = add.with_op(Op::Del);
    (add, del)
}

/// [`route_pair`] of a fail-closed `unreachable` route at [`FAIL_CLOSED_METRIC`].
fn unreachable_pair(dst: Net, table: u32) -> (Step, Step) {
    let add = Step::route(Op::Replace, RouteKind::Unreachable, dst, None, table)
        .metric(FAIL_CLOSED_METRIC);
    let del = add.with_op(Op::Del);
    (add, del)
}

/// The outside addresses of `inbound` that lie in a subnet directly connected to another
/// interface than `tun`, with that interface: they need proxy ARP. At most
/// [`MAX_PROXY_NEIGH`] (a warning says how many were left out). Ask before our own routes
/// change the answer.
fn proxies_for(inbound: &[Prefix4], tun: &str) -> Vec<(Ipv4Addr, String)> {
    let mut proxies: Vec<(Ipv4Addr, String)> = Vec::new();
    let mut wanted: u64 = 0;
    let firsts: Vec<Ipv4Addr> = inbound.iter().map(|p| Ipv4Addr::from(p.addr)).collect();
    for (p, dev) in inbound.iter().zip(connected_devs(&firsts)) {
        let Some(dev) = dev else {
            continue;
        };
        if dev == tun {
            continue;
        }
        wanted += p.size();
        for i in 0..p.size() {
            if proxies.len() as u64 >= MAX_PROXY_NEIGH {
                break;
            }
            proxies.push((Ipv4Addr::from(p.nth(i)), dev.clone()));
        }
    }
    if wanted > MAX_PROXY_NEIGH {
        warn!(
            wanted,
            added = MAX_PROXY_NEIGH,
            "more outside addresses in connected subnets than proxy ARP entries allowed; the rest get no ARP answers (route them to this host instead)"
        );
    }
    proxies
}

/// The prefix of each EAM entry (RFC 7757) routed into `tun`: the IPv4 one when its hosts
/// are on the IPv6 side, the IPv6 one when they are on the IPv4 side (module docs). Ask
/// before our own routes change the answer.
fn eam_routes(eams: &[Eam], tun: &str) -> (Vec<Prefix4>, Vec<Prefix6>) {
    let mut inbound = Vec::new();
    let mut inbound6 = Vec::new();
    for e in eams {
        // Host addresses of each prefix: not the first (the subnet-router anycast address of
        // IPv6, an IPv4 network address) and, failing the second, the last but one (the
        // second may be this gateway's own address, which is local, not connected).
        let h6 = !e.ipv6.mask();
        let h4 = !e.ipv4.mask();
        let on6 = [e.ipv6.addr | (1 & h6), e.ipv6.addr | (h6 & !1)]
            .into_iter()
            .find_map(|a| connected_dev(IpAddr::V6(Ipv6Addr::from(a))).filter(|d| d != tun));
        let on4 = [e.ipv4.addr | (1 & h4), e.ipv4.addr | (h4 & !1)]
            .into_iter()
            .find_map(|a| connected_dev(IpAddr::V4(Ipv4Addr::from(a))).filter(|d| d != tun));
        match (on6, on4) {
            (Some(dev), _) => {
                info!(eam = %format!("{} = {}", e.ipv4, e.ipv6), dev = %dev, "EAM hosts are on the IPv6 side: their IPv4 prefix goes into the tun");
                inbound.push(e.ipv4);
            }
            (None, Some(dev)) => {
                info!(eam = %format!("{} = {}", e.ipv4, e.ipv6), dev = %dev, "EAM hosts are on the IPv4 side: their IPv6 prefix goes into the tun");
                inbound6.push(e.ipv6);
            }
            (None, None) => {
                info!(eam = %format!("{} = {}", e.ipv4, e.ipv6), "EAM hosts on no connected subnet: taken as IPv6 hosts, their IPv4 prefix goes into the tun");
                inbound.push(e.ipv4);
            }
        }
    }
    (inbound, inbound6)
}

/// (add, undo) of the `throw` routes of `throws` in our table.
fn throw_steps(table: u32, throws: &[Prefix4]) -> Vec<(Step, Step)> {
    throws
        .iter()
        .map(|p| route_pair(RouteKind::Throw, net4(p), None, table))
        .collect()
}

/// (add, undo) of the policy rules of `sources`.
fn rule_steps(plan: &RoutePlan, sources: &[Prefix4]) -> Vec<(Step, Step)> {
    sources
        .iter()
        .map(|p| {
            let add = Step::new(
                Op::Add,
                rtnl::Obj::Rule {
                    v6: false,
                    from: Some(net4(p)),
                    to: None,
                    iif: None,
                    ipproto: None,
                    table: plan.table,
                    pref: plan.pref,
                },
            );
            let del = add.with_op(Op::Del);
            (add, del)
        })
        .collect()
}

/// (add, undo) of the main tables' routes into the tun, each after its fail-closed twin.
fn inbound_steps(tun: &str, inbound: &[Prefix4], inbound6: &[Prefix6]) -> Vec<(Step, Step)> {
    let mut steps = Vec::new();
    let nets = inbound.iter().map(net4).chain(inbound6.iter().map(net6));
    for n in nets {
        steps.push(unreachable_pair(n, TABLE_MAIN));
        steps.push(route_pair(RouteKind::Unicast, n, Some(tun), TABLE_MAIN));
    }
    steps
}

impl Routes {
    /// Sets up everything in `plan`. On error, what was already added is removed again.
    pub fn setup(plan: &RoutePlan) -> Result<Routes> {
        let mut r = Routes::journaled(&plan.tun, "routes")?;
        r.setup_inner(plan)?;
        Ok(r)
    }

    /// No routes yet, journaled (module docs) for `tun` under `purpose`; the leftovers of a
    /// run that did not clean up are undone first, and logged.
    pub fn journaled(tun: &str, purpose: &str) -> Result<Routes> {
        let (journal, recovered) = Journal::open(Path::new(STATE_DIR), tun, purpose)?;
        if let Some(r) = recovered {
            warn!(
                tun,
                purpose,
                pid = r.pid,
                undone = r.undone,
                of = r.undo_total,
                sysctls_restored = r.sysctls,
                "found the leftovers of an xlat run that did not exit cleanly (killed or crashed): undone, original sysctls restored"
            );
        }
        Ok(Routes {
            undo: Vec::new(),
            sysctls: Vec::new(),
            journal: Some(journal),
        })
    }

    fn setup_inner(&mut self, plan: &RoutePlan) -> Result<()> {
        let tun = &plan.tun;
        self.sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
        self.sysctl(&format!("/proc/sys/net/ipv4/conf/{tun}/rp_filter"), "0")?;
        // Our policy rule makes every packet the kernel routes in from the TUN pay a second,
        // reverse FIB lookup through the rules (`fib_validate_source` does the full check
        // whenever custom rules exist, rp_filter 0 or not) unless the device accepts local
        // sources: 5 % of the DUT core at 50,000 packets/s in the lab (docs/PERFORMANCE-LOG.md
        // step 39). Only the daemon writes to the TUN, and a pool address the host also holds is
        // then a source the kernel accepts from it.
        self.sysctl(&format!("/proc/sys/net/ipv4/conf/{tun}/accept_local"), "1")?;
        if plan.ipv6 {
            self.sysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1")?;
        }

        // Which side each EAM entry's hosts are on: ask before our own routes change the
        // answer (module docs).
        let mut inbound = plan.inbound.clone();
        let mut inbound6 = plan.inbound6.clone();
        let (eam4, eam6) = eam_routes(&plan.eam, tun);
        inbound.extend(eam4);
        inbound6.extend(eam6);

        // Which outside addresses need proxy ARP: ask before our own routes change the answer.
        let proxies = proxies_for(&inbound, tun);

        // Table: default into the tun, inside prefixes thrown back to main (NAT44 only), and
        // behind the tun's default the fail-closed one, made first: no moment when the rule
        // could lead traffic past an empty table into `main`.
        let table = plan.table;
        if !plan.rule_sources.is_empty() {
            let default = Net::default_route(false);
            let mut steps = vec![
                unreachable_pair(default, table),
                route_pair(RouteKind::Unicast, default, Some(tun), table),
            ];
            steps.extend(throw_steps(table, &plan.throws));
            self.add_all(steps)?;
        }
        // Rules: remove leftovers of an earlier run first (a duplicate rule is an error).
        // (A leftover without a journal: an xlat older than the journal, or one whose
        // /run was lost.)
        let mut steps = rule_steps(plan, &plan.rule_sources);
        let dels: Vec<Step> = steps.iter().map(|(_, d)| d.clone()).collect();
        for _ in 0..64 {
            let removed = rtnl::apply(&dels, true).ok();
            if removed == 0 {
                break;
            }
            debug!(removed, "removed leftover rules");
        }
        // Main tables: outside addresses (IPv4) and the pref64s and IPv4-side EAM prefixes
        // (IPv6) into the tun, each with its fail-closed twin made first.
        steps.extend(inbound_steps(tun, &inbound, &inbound6));
        self.add_all(steps)?;
        let added = self.add_proxies(&proxies)?;
        info!(
            tun = %tun,
            table,
            rules = plan.rule_sources.len(),
            inbound_routes = inbound.len(),
            inbound6_routes = inbound6.len(),
            proxy_arp = added,
            "routes set up"
        );
        Ok(())
    }

    /// Proxy ARP entries for `proxies`, skipping entries that exist already (they are not
    /// ours to remove), with `proxy_delay` 0 on their interfaces. Returns how many it added.
    fn add_proxies(&mut self, proxies: &[(Ipv4Addr, String)]) -> Result<usize> {
        if proxies.is_empty() {
            return Ok(0);
        }
        let existing = rtnl::proxy_neighbours().unwrap_or_else(|e| {
            debug!(error = %e, "listing proxy neighbours (RTM_GETNEIGH)");
            Vec::new()
        });
        let mut devs: Vec<&str> = proxies.iter().map(|(_, d)| d.as_str()).collect();
        devs.sort_unstable();
        devs.dedup();
        for dev in devs {
            // Answer proxied ARP at once instead of after a random delay of up to 0.8 s.
            self.sysctl(&format!("/proc/sys/net/ipv4/neigh/{dev}/proxy_delay"), "0")?;
        }
        let steps: Vec<(Step, Step)> = proxies
            .iter()
            .filter(|(addr, dev)| !existing.iter().any(|(a, d)| a == addr && d == dev))
            .map(|(addr, dev)| {
                let add = Step::new(
                    Op::Add,
                    rtnl::Obj::ProxyNeigh {
                        addr: IpAddr::V4(*addr),
                        dev: dev.clone(),
                    },
                );
                let del = add.with_op(Op::Del);
                (add, del)
            })
            .collect();
        let added = steps.len();
        self.add_all(steps)?;
        Ok(added)
    }

    /// Makes one change, journaled with its undo first.
    pub(crate) fn add(&mut self, add: Step, undo: Step) -> Result<()> {
        self.add_all(vec![(add, undo)])
    }

    /// Makes a phase of changes (`(add, undo)` pairs) in one netlink batch, their undos
    /// journaled first. On a failure, those made are kept for the teardown and the error
    /// names the step that failed and the kernel's error.
    pub(crate) fn add_all(&mut self, steps: Vec<(Step, Step)>) -> Result<()> {
        if steps.is_empty() {
            return Ok(());
        }
        if let Some(j) = self.journal.as_mut() {
            j.undo(steps.iter().map(|(_, u)| u.to_args()))?;
        }
        let adds: Vec<Step> = steps.iter().map(|(a, _)| a.clone()).collect();
        let r = rtnl::apply(&adds, false);
        for ((a, u), res) in steps.into_iter().zip(&r.results) {
            if let Some(Ok(())) = res {
                debug!(step = %a, "netlink");
                self.undo.push(u);
            }
        }
        match r.first_error() {
            Some(e) => Err(anyhow::Error::new(e.clone())),
            None => Ok(()),
        }
    }

    /// Runs `step` now, not journaled (a leftover's removal, a probe); its result.
    pub(crate) fn run_now(step: &Step) -> Result<(), rtnl::StepError> {
        match rtnl::apply(std::slice::from_ref(step), true)
            .results
            .into_iter()
            .next()
            .flatten()
        {
            Some(r) => r,
            None => Ok(()),
        }
    }

    /// Writes `value` to the /proc/sys file `path`, keeping (and journaling) its old value.
    pub(crate) fn sysctl(&mut self, path: &str, value: &str) -> Result<()> {
        let old = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
        let old = old.trim().to_string();
        if old == value {
            return Ok(());
        }
        if let Some(j) = self.journal.as_mut() {
            j.sysctl(path, &old)?;
        }
        std::fs::write(path, value).with_context(|| format!("cannot write {value} to {path}"))?;
        info!(path, from = %old, to = value, "sysctl set");
        self.sysctls.push((path.to_string(), old));
        Ok(())
    }

    /// Removes everything added, newest first, restores the sysctls and closes the journal;
    /// failures are counted (an entry that is gone already, e.g. with its interface, is not
    /// an error).
    pub fn teardown(&mut self) {
        let undo: Vec<Step> = self.undo.drain(..).rev().collect();
        let n = undo.len();
        let r = rtnl::apply(&undo, true);
        if let Some(e) = r.first_error() {
            debug!(error = %e, failed = n.saturating_sub(r.ok()), "undo");
        }
        for e in r.serious() {
            warn!(error = %e, "removing a route at exit");
        }
        while let Some((path, old)) = self.sysctls.pop() {
            if let Err(e) = std::fs::write(&path, &old) {
                debug!(path, error = %e, "restoring sysctl");
            }
        }
        if let Some(j) = self.journal.take() {
            j.close();
        }
        if n > 0 {
            info!(entries = n, removed = r.ok(), "routes removed");
        }
    }
}

impl Drop for Routes {
    fn drop(&mut self) {
        self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xlat_engine::StaticEntry;

    #[test]
    fn plan_from_config() {
        let nat = Nat44Config {
            inside: vec!["198.18.0.0/24"
                .parse()
                .unwrap_or(Prefix4 { addr: 0, len: 0 })],
            pool: vec!["198.19.0.100/31"
                .parse()
                .unwrap_or(Prefix4 { addr: 0, len: 0 })],
            statics: vec![
                StaticEntry {
                    inside: Ipv4Addr::new(198, 18, 0, 10),
                    outside: Ipv4Addr::new(198, 19, 0, 10),
                },
                StaticEntry {
                    inside: Ipv4Addr::new(198, 18, 5, 1),
                    outside: Ipv4Addr::new(198, 19, 0, 11),
                },
            ],
            ..Nat44Config::default()
        };
        let p = RoutePlan::new("xlat0", 4400, 4400, Some(&nat), None, None);
        let s = |v: &[Prefix4]| v.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(s(&p.rule_sources), ["198.18.0.0/24", "198.18.5.1/32"]);
        assert_eq!(s(&p.throws), ["198.18.0.0/24"]);
        assert_eq!(
            s(&p.inbound),
            ["198.19.0.100/31", "198.19.0.10/32", "198.19.0.11/32"]
        );
    }

    #[test]
    fn plan_for_nat64_and_siit() {
        let nat64 = Nat64Config {
            prefix: "2001:2:0:64::/96"
                .parse()
                .unwrap_or(xlat_engine::rfc6052::WELL_KNOWN),
            pool4: vec!["198.19.0.101/32"
                .parse()
                .unwrap_or(Prefix4 { addr: 0, len: 0 })],
            ..Nat64Config::default()
        };
        let siit = SiitConfig {
            prefix: "2001:2:0:46::/96".parse().ok(),
            pool4: vec!["203.0.113.0/24"
                .parse()
                .unwrap_or(Prefix4 { addr: 0, len: 0 })],
            ..SiitConfig::default()
        };
        let p = RoutePlan::new("xlat0", 4400, 4400, None, Some(&nat64), Some(&siit));
        assert!(p.rule_sources.is_empty() && p.throws.is_empty());
        assert!(p.ipv6);
        let s6: Vec<String> = p.inbound6.iter().map(|p| p.to_string()).collect();
        assert_eq!(s6, ["2001:2:0:64::/96", "2001:2:0:46::/96"]);
        let s4: Vec<String> = p.inbound.iter().map(|p| p.to_string()).collect();
        assert_eq!(s4, ["198.19.0.101/32", "203.0.113.0/24"]);
    }

    #[test]
    fn setup_steps_pair_each_route_with_its_fail_closed_twin() {
        let p = |s: &str| s.parse().unwrap_or(Prefix4 { addr: 0, len: 0 });
        let steps = inbound_steps("xlat0", &[p("198.19.0.100/31")], &[]);
        let words: Vec<(String, String)> = steps
            .iter()
            .map(|(a, u)| (a.to_string(), u.to_string()))
            .collect();
        assert_eq!(
            words,
            [
                (
                    "route replace unreachable 198.19.0.100/31 metric 4294967295".to_string(),
                    "route del unreachable 198.19.0.100/31 metric 4294967295".to_string()
                ),
                (
                    "route replace 198.19.0.100/31 dev xlat0".to_string(),
                    "route del 198.19.0.100/31 dev xlat0".to_string()
                ),
            ]
        );
        let plan = RoutePlan::new("xlat0", 4400, 4401, None, None, None);
        let r = rule_steps(&plan, &[p("198.18.0.0/24")]);
        assert_eq!(
            r.first().map(|(a, _)| a.to_string()).as_deref(),
            Some("rule add from 198.18.0.0/24 lookup 4400 pref 4401")
        );
    }
}
