//! Automatic routing around the TUN device (`[tun] auto_routes = true`), undone at exit.
//!
//! What is set up (by running iproute2's `ip`, which must be installed; and by writing
//! /proc/sys):
//!
//! - `net.ipv4.ip_forward = 1`, `net.ipv4.conf.<tun>.rp_filter = 0`, and `net.ipv4.neigh.<iface>.proxy_delay = 0` on interfaces with proxy ARP entries; each
//!   restored to its old value at exit.
//! - Outbound: `ip rule add from <inside prefix> lookup <table> pref <pref>` for each inside
//!   prefix (and each static inside address outside them); the table holds
//!   `default dev <tun>` plus `throw <inside prefix>` for each inside prefix, so traffic between
//!   inside hosts and the gateway's own traffic to inside hosts stay in the main table.
//! - Inbound: in the main table, `<pool prefix> dev <tun>` and `<static outside>/32 dev <tun>`.
//! - NAT64 and SIIT (IPv4 <-> IPv6): `net.ipv6.conf.all.forwarding = 1`; in the main tables,
//!   `<pref64> dev <tun>` (IPv6) and `<nat64.pool4 | siit.pool4> dev <tun>` (IPv4). An EAM
//!   entry (RFC 7757) maps hosts on one side; which side is found before our routes exist
//!   (`ip -j route get` of a host address of each prefix): an IPv6 prefix on a directly
//!   connected subnet means IPv6 hosts, so the IPv4 prefix is routed into the tun; else an
//!   IPv4 prefix on a directly connected subnet means IPv4 hosts, so the IPv6 prefix is routed
//!   into the tun; else (neither connected) the IPv4 prefix is, RFC 7757's usual use (IPv4
//!   addresses for IPv6 servers). Each decision is logged.
//! - Proxy ARP: each pool or static outside address that lies in a subnet directly connected to
//!   another interface (found with `ip -j route get ADDR` before our routes exist) gets
//!   `ip neigh add proxy ADDR dev IFACE`, so the gateway answers ARP for it. At most
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
//! Commands go to `ip -batch` a phase at a time, not one process per route.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};
use tracing::{debug, info, warn};
use xlat_engine::{Eam, Nat44Config, Nat64Config, Prefix4, Prefix6, SiitConfig};

use crate::journal::{Journal, STATE_DIR};

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
    /// `ip` argument lists that undo one addition each, in the order they were added.
    undo: Vec<Vec<String>>,
    /// /proc/sys files changed, with their old contents.
    sysctls: Vec<(String, String)>,
    /// The same, on disk before each change (none in unit tests of the planning).
    journal: Option<Journal>,
}

/// What [`ip_batch`] got done.
#[derive(Debug)]
pub struct BatchResult {
    /// Commands that succeeded (with `force`: of all; without: those before the failure).
    pub ok: usize,
    /// The first failure, naming the command and ip's message.
    pub error: Option<anyhow::Error>,
}

/// Runs `lines` (ip argument lists) through `ip -batch -`, a process per run of lines with
/// the same leading family option (`-4`, `-6` or none: batch lines cannot carry it). Without
/// `force` it stops at the first failure; with `force` it runs them all and counts.
pub fn ip_batch(lines: &[Vec<String>], force: bool) -> BatchResult {
    let mut ok = 0;
    let mut first_error = None;
    let mut rest = lines;
    while let Some(first) = rest.first() {
        let fam = first.first().filter(|w| *w == "-4" || *w == "-6").cloned();
        let n = rest
            .iter()
            .take_while(|l| l.first().filter(|w| *w == "-4" || *w == "-6") == fam.as_ref())
            .count();
        let (group, tail) = rest.split_at(n);
        rest = tail;
        let skip = usize::from(fam.is_some());
        let text: String = group
            .iter()
            .map(|l| l.iter().skip(skip).cloned().collect::<Vec<_>>().join(" ") + "\n")
            .collect();
        let mut argv: Vec<&str> = fam.iter().map(String::as_str).collect();
        if force {
            argv.push("-force");
        }
        argv.extend(["-batch", "-"]);
        let (done, err) = run_batch(&argv, &text, group);
        ok += done;
        if let Some(e) = err {
            if first_error.is_none() {
                first_error = Some(e);
            }
            if !force {
                break;
            }
        }
    }
    BatchResult {
        ok,
        error: first_error,
    }
}

/// Writes `text` to the child's stdin on a thread of its own and closes it: ip answers while
/// it reads, and a writer that waited for all of its input to be taken before reading the
/// answers would deadlock with an ip waiting for its full stdout or stderr pipe to be read.
fn feed(child: &mut std::process::Child, text: &str) -> Option<std::thread::JoinHandle<()>> {
    let mut stdin = child.stdin.take()?;
    let text = text.to_string();
    std::thread::Builder::new()
        .name("xlat-ip-batch".to_string())
        .spawn(move || {
            // A write error means ip exited early; its status and output say why.
            let _ = stdin.write_all(text.as_bytes());
        })
        .ok()
}

/// One `ip ... -batch -` process over `group`: how many lines succeeded, and the first error.
fn run_batch(argv: &[&str], text: &str, group: &[Vec<String>]) -> (usize, Option<anyhow::Error>) {
    let child = Command::new("ip")
        .args(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return (
                0,
                Some(anyhow!("cannot run `ip` (is iproute2 installed?): {e}")),
            )
        }
    };
    let writer = feed(&mut child, text);
    let out = child.wait_with_output();
    let _ = writer.map(std::thread::JoinHandle::join);
    let out = match out {
        Ok(o) => o,
        Err(e) => return (0, Some(anyhow!("waiting for `ip -batch`: {e}"))),
    };
    if out.status.success() {
        return (group.len(), None);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // "Command failed -:N" after each failed line (1-based); a line ip cannot parse makes it
    // exit at once without one.
    let failed: Vec<usize> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("Command failed -:"))
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let first = failed.first().copied();
    let cmd = first
        .and_then(|n: usize| group.get(n.wrapping_sub(1)))
        .map(|l| l.join(" "))
        .unwrap_or_else(|| "(a batch)".to_string());
    let msg = stderr
        .lines()
        .filter(|l| !l.starts_with("Command failed"))
        .collect::<Vec<_>>()
        .join("; ");
    let err = anyhow!("`ip {cmd}` failed: {}", msg.trim());
    let is_force = argv.contains(&"-force");
    let done = match (is_force, first) {
        (true, Some(_)) => group.len().saturating_sub(failed.len()),
        (false, Some(n)) => n.saturating_sub(1),
        (_, None) => 0,
    };
    (done, Some(err))
}

/// Runs `ip ARGS`, returning stdout; the error carries the command and ip's stderr.
pub(crate) fn ip(args: &[String]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run `ip` (is iproute2 installed?)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// The interface through which `addr` is directly reachable (no gateway), if any, by
/// `ip -j route get`. Local, broadcast and unreachable results give `None`.
fn connected_dev(addr: Ipv4Addr) -> Option<String> {
    let out = ip(&args(&format!("-j -4 route get {addr}"))).ok()?;
    parse_route_get(&out)
}

/// [`connected_dev`] for IPv6.
fn connected_dev6(addr: std::net::Ipv6Addr) -> Option<String> {
    let out = ip(&args(&format!("-j -6 route get {addr}"))).ok()?;
    parse_route_get(&out)
}

/// [`connected_dev`] of many addresses, asked of one `ip -j -batch` process (2,000 static
/// entries were 2,000 processes); in the order given.
fn connected_devs(addrs: &[Ipv4Addr]) -> Vec<Option<String>> {
    let text: String = addrs.iter().map(|a| format!("route get {a}\n")).collect();
    let out = Command::new("ip")
        .args(["-j", "-4", "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .and_then(|mut c| {
            let writer = feed(&mut c, &text);
            let out = c.wait_with_output();
            let _ = writer.map(std::thread::JoinHandle::join);
            out
        });
    let stdout = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    // One JSON array per answered line (unreachable ones print none): matched by "dst".
    let mut found = std::collections::HashMap::new();
    for v in serde_json::Deserializer::from_str(&stdout)
        .into_iter::<serde_json::Value>()
        .map_while(Result::ok)
    {
        let dst = v
            .as_array()
            .and_then(|a| a.first())
            .and_then(|r| r.get("dst"))
            .and_then(|d| d.as_str())
            .map(str::to_string);
        if let (Some(dst), Some(dev)) = (dst, parse_route(&v)) {
            found.insert(dst, dev);
        }
    }
    addrs
        .iter()
        .map(|a| found.get(&a.to_string()).cloned())
        .collect()
}

/// Parses `ip -j route get` output: the `dev` of a unicast route without a `gateway`.
fn parse_route_get(json: &str) -> Option<String> {
    parse_route(&serde_json::from_str(json).ok()?)
}

/// [`parse_route_get`] of the parsed answer.
fn parse_route(v: &serde_json::Value) -> Option<String> {
    let r = v.as_array()?.first()?;
    if r.get("gateway").is_some() {
        return None;
    }
    if let Some(t) = r.get("type").and_then(|t| t.as_str()) {
        if t != "unicast" {
            return None;
        }
    }
    let dev = r.get("dev")?.as_str()?;
    if dev == "lo" {
        return None;
    }
    Some(dev.to_string())
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
            .find_map(|a| connected_dev6(std::net::Ipv6Addr::from(a)).filter(|d| d != tun));
        let on4 = [e.ipv4.addr | (1 & h4), e.ipv4.addr | (h4 & !1)]
            .into_iter()
            .find_map(|a| connected_dev(Ipv4Addr::from(a)).filter(|d| d != tun));
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
fn throw_steps(table: u32, throws: &[Prefix4]) -> Vec<(String, String)> {
    throws
        .iter()
        .map(|p| {
            (
                format!("route replace throw {p} table {table}"),
                format!("route del throw {p} table {table}"),
            )
        })
        .collect()
}

/// (add, undo) of the policy rules of `sources`.
fn rule_steps(plan: &RoutePlan, sources: &[Prefix4]) -> Vec<(String, String)> {
    let (table, pref) = (plan.table, plan.pref);
    sources
        .iter()
        .map(|p| {
            (
                format!("rule add from {p} lookup {table} pref {pref}"),
                format!("rule del from {p} lookup {table} pref {pref}"),
            )
        })
        .collect()
}

/// (add, undo) of the main tables' routes into the tun, each after its fail-closed twin.
fn inbound_steps(tun: &str, inbound: &[Prefix4], inbound6: &[Prefix6]) -> Vec<(String, String)> {
    let m = FAIL_CLOSED_METRIC;
    let mut steps = Vec::new();
    for p in inbound {
        steps.push((
            format!("route replace unreachable {p} metric {m}"),
            format!("route del unreachable {p} metric {m}"),
        ));
        steps.push((
            format!("route replace {p} dev {tun}"),
            format!("route del {p} dev {tun}"),
        ));
    }
    for p in inbound6 {
        steps.push((
            format!("-6 route replace unreachable {p} metric {m}"),
            format!("-6 route del unreachable {p} metric {m}"),
        ));
        steps.push((
            format!("-6 route replace {p} dev {tun}"),
            format!("-6 route del {p} dev {tun}"),
        ));
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
        let m = FAIL_CLOSED_METRIC;
        if !plan.rule_sources.is_empty() {
            let mut steps = vec![
                (
                    format!("route replace unreachable default table {table} metric {m}"),
                    format!("route del unreachable default table {table} metric {m}"),
                ),
                (
                    format!("route replace default dev {tun} table {table}"),
                    format!("route del default dev {tun} table {table}"),
                ),
            ];
            steps.extend(throw_steps(table, &plan.throws));
            self.add_all(steps)?;
        }
        // Rules: remove leftovers of an earlier run first (a duplicate rule is an error).
        // (A leftover without a journal: an xlat older than the journal, or one whose
        // /run was lost.)
        let mut steps = rule_steps(plan, &plan.rule_sources);
        let dels: Vec<Vec<String>> = steps.iter().map(|(_, d)| args(d)).collect();
        for _ in 0..64 {
            let removed = ip_batch(&dels, true).ok;
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
        let existing = ip(&args("-4 neigh show proxy")).unwrap_or_default();
        let existing: Vec<(String, String)> = existing
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let addr = w.next()?.to_string();
                let dev = w.skip_while(|x| *x != "dev").nth(1)?.to_string();
                Some((addr, dev))
            })
            .collect();
        let mut devs: Vec<&str> = proxies.iter().map(|(_, d)| d.as_str()).collect();
        devs.sort_unstable();
        devs.dedup();
        for dev in devs {
            // Answer proxied ARP at once instead of after a random delay of up to 0.8 s.
            self.sysctl(&format!("/proc/sys/net/ipv4/neigh/{dev}/proxy_delay"), "0")?;
        }
        let steps: Vec<(String, String)> = proxies
            .iter()
            .filter(|(addr, dev)| {
                !existing
                    .iter()
                    .any(|(a, d)| *a == addr.to_string() && d == dev)
            })
            .map(|(addr, dev)| {
                (
                    format!("neigh add proxy {addr} dev {dev}"),
                    format!("neigh del proxy {addr} dev {dev}"),
                )
            })
            .collect();
        let added = steps.len();
        self.add_all(steps)?;
        Ok(added)
    }

    /// Makes one change (`ip ADD`), journaled with its undo first.
    pub(crate) fn add(&mut self, add: &str, undo: &str) -> Result<()> {
        self.add_all(vec![(add.to_string(), undo.to_string())])
    }

    /// Makes a phase of changes (`(add, undo)` pairs) in one `ip -batch`, their undos
    /// journaled first. On a failure, those made are kept for the teardown and the error
    /// names the command that failed.
    pub(crate) fn add_all(&mut self, steps: Vec<(String, String)>) -> Result<()> {
        if steps.is_empty() {
            return Ok(());
        }
        if let Some(j) = self.journal.as_mut() {
            j.undo(steps.iter().map(|(_, u)| args(u)))?;
        }
        let adds: Vec<Vec<String>> = steps.iter().map(|(a, _)| args(a)).collect();
        let r = ip_batch(&adds, false);
        for (a, u) in steps.iter().take(r.ok) {
            debug!(cmd = %a, "ip");
            self.undo.push(args(u));
        }
        match r.error {
            Some(e) => Err(e),
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
        let undo: Vec<Vec<String>> = self.undo.drain(..).rev().collect();
        let n = undo.len();
        let r = ip_batch(&undo, true);
        if let Some(e) = r.error {
            debug!(error = %e, failed = n.saturating_sub(r.ok), "undo");
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
            info!(entries = n, removed = r.ok, "routes removed");
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
    fn route_get_parsing() {
        let connected = r#"[{"dst":"192.0.2.7","dev":"eth0","prefsrc":"192.0.2.2","flags":[],"uid":0,"cache":[]}]"#;
        assert_eq!(parse_route_get(connected).as_deref(), Some("eth0"));
        let via = r#"[{"dst":"8.8.8.8","gateway":"192.0.2.1","dev":"eth0","prefsrc":"192.0.2.2","flags":[],"uid":0,"cache":[]}]"#;
        assert_eq!(parse_route_get(via), None);
        let local = r#"[{"type":"local","dst":"192.0.2.2","dev":"lo","prefsrc":"192.0.2.2","flags":[],"uid":0,"cache":["local"]}]"#;
        assert_eq!(parse_route_get(local), None);
        assert_eq!(parse_route_get("garbage"), None);
        assert_eq!(parse_route_get("[]"), None);
    }
}
