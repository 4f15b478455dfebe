//! `xlat lab run failover`: a pair of NAT44 gateways, one active and one standby, loses the
//! active while established flows and new ones cross it (issue 23, docs/FAILOVER.md).
//!
//! ```text
//!  cli 198.18.0.7 ---[swi bridge]--- a 198.18.0.2 / b 198.18.0.3   (VIP 198.18.0.1)
//!                                    a 198.18.1.2 / b 198.18.1.3   (VIP 198.18.1.1)
//!  srv 198.18.1.10 --[swo bridge]---/          pool 198.19.0.100 routed via 198.18.1.1
//!                  sync link: a 198.18.254.1 --- b 198.18.254.2 (its own veth)
//! ```
//!
//! keepalived (VRRP v3, 100 ms adverts, unicast over the inside LAN) runs in both gateways and
//! owns the two virtual addresses; its notify hook is a script the lab writes, which stamps
//! the time and then runs the device's takeover. Three devices are measured the same way:
//!
//! - `xlat-nat44`: `xlat run` with `[sync]` over the sync link; the hook runs
//!   `xlat sync role active|standby`.
//! - `kernel-nat44`: nftables `snat to` the pool address, conntrackd (FTFW over the sync link)
//!   keeping the standby's external cache, and the hook of conntrackd's primary-backup.sh:
//!   `-c` commit, `-f` flush, `-R` resync, `-B` bulk send when it becomes master; `-t`
//!   shorten timers and `-n` request a resync when it becomes backup.
//! - `kernel-nat44-random`: the same with `snat ... random`, so a gateway without the session
//!   picks another outside port.
//!
//! Workload: N UDP flows (distinct source ports, a numbered datagram per flow every interval,
//! echoed by the server), a rate-limited HTTP download (sha256 checked) and an iperf3 TCP
//! stream, and new sessions arriving all the time (one datagram each to a new destination
//! port, counted and dropped by the server's firewall). Before the failure the new-session
//! rate steps through `new_rates` and the sync link, the sync counters and the sync CPU are
//! measured at each. Then the active fails: `kill` SIGKILLs its processes and downs its links
//! (a box losing power), `link-down` only downs its links. Every device/variant pair gets a
//! fresh testbed.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::results::{Experiment, Machine, Row, RunResults, Settings, SCHEMA};
use crate::stats::Spread;
use crate::sys;
use crate::topo::destroy_ns;

const CLI: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 7);
const VIP_IN: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const VIP_OUT: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const SRV: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 10);
const POOL: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 100);
const ECHO_PORT: u16 = 7000;
const HTTP_PORT: u16 = 8080;
const IPERF_PORT: u16 = 5201;
/// New sessions go to destination ports NEW_BASE .. NEW_BASE + NEW_SPAN.
const NEW_BASE: u16 = 20000;
const NEW_SPAN: u16 = 40000;
/// The UDP flows' source ports start here: below 1024, outside xlat's `[nat44] ports`, so
/// xlat chooses their outside ports (the kernel keeps a free one unless `random`), and only a
/// standby that holds the session sends them on from the same outside port.
const FLOW_PORT: u16 = 100;
const SYNC_PORT: u16 = 4790;
const CONNTRACKD_PORT: u16 = 3780;
const KEY: &str = "xlat-lab-failover-shared-key-0123456789";
const MAGIC: [u8; 4] = *b"XFO1";
const PAYLOAD: usize = 32;
pub const MAX_FLOWS: usize = 900;
pub const MAX_NEW_RATE: f64 = 200_000.0;
/// Seconds each new-session rate is measured for.
const SYNC_WINDOW: f64 = 1.0;
/// Source sockets of the new sessions: NEW_SOCKETS x NEW_SPAN distinct 5-tuples before one
/// repeats (more than `[limits] max_sessions`).
const NEW_SOCKETS: usize = 32;

/// The device pair under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dev {
    /// xlat NAT44 with `[sync]`.
    Xlat,
    /// nftables snat, conntrackd FTFW.
    Kernel,
    /// The same with `snat ... random`: the outside port is chosen at random, so a gateway
    /// that does not hold the session picks another one.
    KernelRandom,
}

impl Dev {
    pub fn name(self) -> &'static str {
        match self {
            Dev::Xlat => "xlat-nat44",
            Dev::Kernel => "kernel-nat44",
            Dev::KernelRandom => "kernel-nat44-random",
        }
    }
    /// The kernel's NAT with conntrackd.
    pub fn kernel(self) -> bool {
        self != Dev::Xlat
    }
    pub fn parse(s: &str) -> Result<Dev> {
        match s {
            "xlat-nat44" => Ok(Dev::Xlat),
            "kernel-nat44" => Ok(Dev::Kernel),
            "kernel-nat44-random" => Ok(Dev::KernelRandom),
            _ => bail!(
                "failover: unknown device {s:?}; known: xlat-nat44, kernel-nat44, kernel-nat44-random"
            ),
        }
    }
}

/// How the active fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variant {
    /// SIGKILL of its processes and its links down: a box losing power.
    Kill,
    /// Its links down, its processes alive.
    LinkDown,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Kill => "kill",
            Variant::LinkDown => "link-down",
        }
    }
    pub fn parse(s: &str) -> Result<Variant> {
        match s {
            "kill" => Ok(Variant::Kill),
            "link-down" => Ok(Variant::LinkDown),
            _ => bail!("failover: unknown variant {s:?}; known: kill, link-down"),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FailOpts {
    pub devices: Vec<Dev>,
    pub variants: Vec<Variant>,
    /// Established UDP flows.
    pub flows: usize,
    /// Datagrams per second of each flow.
    pub flow_pps: f64,
    /// New sessions per second to measure sync at; the first is kept through the failover.
    pub new_rates: Vec<f64>,
    /// Seconds of traffic after the failure (at least 2).
    pub after: f64,
    /// Download rate limit, bytes/s (the file is sized to outlast the failover).
    pub download_rate: u64,
    /// Run iperf3 beside the download.
    pub iperf: bool,
    pub dir: PathBuf,
    /// The xlat binary; None = [`crate::device::xlat_bin`].
    pub xlat_bin: Option<PathBuf>,
}

impl FailOpts {
    pub fn validate(&self) -> Result<()> {
        if self.devices.is_empty() || self.variants.is_empty() {
            bail!("failover: no device or no variant to run");
        }
        if !(1..=MAX_FLOWS).contains(&self.flows) {
            bail!("--flows: {} is outside 1..={MAX_FLOWS}", self.flows);
        }
        if !(1.0..=1000.0).contains(&self.flow_pps) {
            bail!(
                "--rate: {} datagrams/s per flow is outside 1..=1000",
                self.flow_pps
            );
        }
        if self.new_rates.is_empty()
            || self
                .new_rates
                .iter()
                .any(|r| !(0.0..=MAX_NEW_RATE).contains(r))
        {
            bail!(
                "--new-rates: {:?}: one or more rates in 0..={MAX_NEW_RATE} new sessions/s",
                self.new_rates
            );
        }
        if self.new_rates.len() > 8 {
            bail!("--new-rates: at most 8 rates");
        }
        if !(2.0..=600.0).contains(&self.after) {
            bail!(
                "--duration: {} s after the failure is outside 2..=600",
                self.after
            );
        }
        if !(10_000..=100_000_000).contains(&self.download_rate) {
            bail!(
                "download rate {} B/s is outside 10k..100M",
                self.download_rate
            );
        }
        Ok(())
    }

    /// Seconds from the start of traffic to the failure: a second of warm-up, then a window
    /// per new-session rate, then a second more so every flow is older than a second.
    pub fn before(&self) -> f64 {
        1.0 + self.new_rates.len() as f64 * (SYNC_WINDOW + 0.3) + 1.0
    }
}

// ---------------------------------------------------------------------------------------
// Configuration texts.

/// xlat's configuration in gateway `k` (0 = a, 1 = b).
pub fn xlat_config(k: usize, tun: &str, socket: &str) -> String {
    let (me, peer) = sync_addrs(k);
    format!(
        r#"# written by xlat lab failover: gateway {k}
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[nat44]
inside = ["198.18.0.0/24"]
pool = ["{POOL}/32"]
mode = "napt"

[limits]
# Every new session of the lab comes from the one client host.
max_sessions_per_host = 1000000

[control]
socket = "{socket}"

[sync]
listen = "{me}:{SYNC_PORT}"
peer = "{peer}:{SYNC_PORT}"
role = "auto"
key = "{KEY}"
"#
    )
}

fn sync_addrs(k: usize) -> (Ipv4Addr, Ipv4Addr) {
    let a = Ipv4Addr::new(198, 18, 254, 1);
    let b = Ipv4Addr::new(198, 18, 254, 2);
    if k == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// The kernel device's NAT: inside hosts leaving by the outside link get the pool address
/// (`random`: and a random port, not their own when it is free).
pub fn nft_snat(random: bool) -> String {
    format!(
        "table ip xlatlab {{\n  chain post {{\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname \"out\" ip saddr 198.18.0.0/24 snat to {POOL}{}\n  }}\n}}\n",
        if random { " random" } else { "" }
    )
}

/// conntrackd in FTFW mode over the sync link (after the package's
/// examples/sync/ftfw/conntrackd.conf, unicast UDP, UDP and ICMP synced too).
pub fn conntrackd_config(k: usize, dir: &Path) -> String {
    let (me, peer) = sync_addrs(k);
    let f = |x: &str| {
        dir.join(format!("conntrackd-{k}.{x}"))
            .display()
            .to_string()
    };
    format!(
        r#"# written by xlat lab failover: gateway {k}
Sync {{
    Mode FTFW {{
        DisableExternalCache Off
    }}
    UDP {{
        IPv4_address {me}
        IPv4_Destination_Address {peer}
        Port {CONNTRACKD_PORT}
        Interface sy
        SndSocketBuffer 1249280
        RcvSocketBuffer 1249280
        Checksum on
    }}
}}
General {{
    HashSize 32768
    HashLimit 262144
    LogFile {log}
    Syslog off
    LockFile {lock}
    UNIX {{
        Path {ctl}
    }}
    NetlinkBufferSize 2097152
    NetlinkBufferSizeMaxGrowth 8388608
    Filter From Userspace {{
        Protocol Accept {{
            TCP
            UDP
            ICMP
        }}
        Address Ignore {{
            IPv4_address 127.0.0.1
            IPv4_address {VIP_IN}
            IPv4_address {VIP_OUT}
            IPv4_address 198.18.0.2
            IPv4_address 198.18.0.3
            IPv4_address 198.18.1.2
            IPv4_address 198.18.1.3
            IPv4_address 198.18.254.0/24
        }}
    }}
}}
"#,
        log = f("log"),
        lock = f("lock"),
        ctl = f("ctl"),
    )
}

/// The keepalived notify script of gateway `k`: stamps the time, runs the device's part of
/// the role change, stamps again (`<state> <begin|end> <unix seconds>` lines in `log`).
pub fn notify_script(dev: Dev, k: usize, dir: &Path, xlat: &Path, socket: &Path) -> String {
    let log = dir.join(format!("notify-{k}.log")).display().to_string();
    let (master, backup, fault) = match dev {
        Dev::Xlat => {
            let x = format!("{} sync role", xlat.display());
            let s = socket.display();
            (
                format!("{x} active --socket {s}"),
                format!("{x} standby --socket {s}"),
                format!("{x} standby --socket {s}"),
            )
        }
        Dev::Kernel | Dev::KernelRandom => {
            let c = format!(
                "conntrackd -C {}",
                dir.join(format!("conntrackd-{k}.conf")).display()
            );
            (
                // conntrackd's primary-backup.sh, "primary".
                format!("{c} -c; {c} -f; {c} -R; {c} -B"),
                // "backup" (its restart of a dead conntrackd left out: the lab started it).
                format!("{c} -t; {c} -n"),
                format!("{c} -t"),
            )
        }
    };
    format!(
        r#"#!/bin/sh
# written by xlat lab failover: keepalived's notify hook of gateway {k}
echo "$1 begin $(date +%s.%N)" >> {log}
case "$1" in
  master) {master} ;;
  backup) {backup} ;;
  fault) {fault} ;;
esac
echo "$1 end $(date +%s.%N)" >> {log}
"#
    )
}

/// keepalived of gateway `k` (a preferred, nopreempt, 100 ms adverts), as in docs/FAILOVER.md.
pub fn keepalived_config(k: usize, notify: &Path) -> String {
    let me = Ipv4Addr::new(198, 18, 0, 2 + k as u8);
    let peer = Ipv4Addr::new(198, 18, 0, 3 - k as u8);
    let n = notify.display();
    format!(
        r#"global_defs {{
    router_id xlat-lab-{k}
    vrrp_version 3
    script_user root
    vrrp_garp_master_delay 0
    vrrp_garp_master_repeat 3
}}
vrrp_instance XLAT {{
    state BACKUP
    interface in
    virtual_router_id 51
    priority {prio}
    advert_int 0.1
    nopreempt
    unicast_src_ip {me}
    unicast_peer {{
        {peer}
    }}
    virtual_ipaddress {{
        {VIP_IN}/24 dev in
        {VIP_OUT}/24 dev out
    }}
    notify_master "{n} master"
    notify_backup "{n} backup"
    notify_fault "{n} fault"
}}
"#,
        prio = if k == 0 { 150 } else { 100 },
    )
}

/// Parses a notify log: (state, begin or end, unix seconds) per line; bad lines skipped.
pub fn parse_notify_log(text: &str) -> Vec<(String, bool, f64)> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() != 3 {
                return None;
            }
            let begin = match w[1] {
                "begin" => true,
                "end" => false,
                _ => return None,
            };
            Some((w[0].to_string(), begin, w[2].parse().ok()?))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The testbed.

static COUNTER: AtomicUsize = AtomicUsize::new(0);

struct Proc {
    name: String,
    child: Child,
}

/// The namespaces and processes of one device/variant run; dropping it removes them all.
pub struct Testbed {
    dev: Dev,
    cli: String,
    srv: String,
    gw: [String; 2],
    namespaces: Vec<String>,
    procs: Vec<Proc>,
    dir: PathBuf,
    xlat: PathBuf,
    sock: [PathBuf; 2],
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        for ns in self.namespaces.iter().rev() {
            destroy_ns(ns);
        }
    }
}

fn ip(ns: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["ip", "-n", ns];
    v.extend_from_slice(args);
    sys::cmd_ok(&v)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Testbed {
    pub fn new(dev: Dev, dir: &Path, xlat: PathBuf) -> Result<Testbed> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("failover needs root (network namespaces, TUN devices): run it with sudo");
        }
        let mut need = vec!["ip", "keepalived", "curl", "python3", "sha256sum", "nft"];
        if dev.kernel() {
            need.push("conntrackd");
        }
        let missing: Vec<&str> = need.into_iter().filter(|p| !sys::have(p)).collect();
        if !missing.is_empty() {
            bail!(
                "failover needs {missing:?}: apt-get install iproute2 keepalived curl python3 nftables conntrackd"
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // x<pid>f<n>-...: the names scripts/test.sh checks for leftovers.
        let id = format!("x{:x}f{n}", std::process::id());
        let mut t = Testbed {
            dev,
            cli: format!("{id}-cli"),
            srv: format!("{id}-srv"),
            gw: [format!("{id}-a"), format!("{id}-b")],
            namespaces: Vec::new(),
            procs: Vec::new(),
            dir: dir.to_path_buf(),
            xlat,
            sock: [dir.join("a.sock"), dir.join("b.sock")],
        };
        t.build(&id)?;
        Ok(t)
    }

    fn add_ns(&mut self, ns: &str) -> Result<()> {
        let _ = sys::cmd(10, &["ip", "netns", "del", ns]);
        sys::cmd_ok(&["ip", "netns", "add", ns])?;
        self.namespaces.push(ns.to_string());
        ip(ns, &["link", "set", "lo", "up"])?;
        sys::ns_sh(
            ns,
            "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
             net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
        )?;
        Ok(())
    }

    /// Port `p` of bridge `br` in switch namespace `sw`, its other end `dev` in `ns`.
    fn port(sw: &str, p: &str, ns: &str, dev: &str, addr: &str) -> Result<()> {
        ip(
            sw,
            &[
                "link", "add", p, "type", "veth", "peer", "name", dev, "netns", ns,
            ],
        )?;
        ip(sw, &["link", "set", p, "master", "sw0"])?;
        ip(sw, &["link", "set", p, "up"])?;
        ip(ns, &["addr", "add", addr, "dev", dev])?;
        offloads_off(ns, dev);
        ip(ns, &["link", "set", dev, "up"])?;
        Ok(())
    }

    fn build(&mut self, id: &str) -> Result<()> {
        let (swi, swo) = (format!("{id}-swi"), format!("{id}-swo"));
        let (cli, srv, gw) = (self.cli.clone(), self.srv.clone(), self.gw.clone());
        for ns in [&cli, &srv, &gw[0], &gw[1], &swi, &swo] {
            self.add_ns(ns)?;
        }
        for sw in [&swi, &swo] {
            ip(sw, &["link", "add", "name", "sw0", "type", "bridge"])?;
            ip(sw, &["link", "set", "sw0", "up"])?;
        }
        Self::port(&swi, "pc", &cli, "eth0", &format!("{CLI}/24"))?;
        Self::port(&swo, "ps", &srv, "eth0", &format!("{SRV}/24"))?;
        for (k, g) in gw.iter().enumerate() {
            let n = k + 2;
            Self::port(&swi, &format!("p{n}"), g, "in", &format!("198.18.0.{n}/24"))?;
            Self::port(
                &swo,
                &format!("p{n}"),
                g,
                "out",
                &format!("198.18.1.{n}/24"),
            )?;
            sys::ns_ok(g, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        }
        // The sync link.
        ip(
            &gw[0],
            &[
                "link", "add", "sy", "type", "veth", "peer", "name", "sy", "netns", &gw[1],
            ],
        )?;
        for (k, g) in gw.iter().enumerate() {
            let (me, _) = sync_addrs(k);
            ip(g, &["addr", "add", &format!("{me}/24"), "dev", "sy"])?;
            ip(g, &["link", "set", "sy", "up"])?;
        }
        ip(
            &cli,
            &["route", "add", "default", "via", &VIP_IN.to_string()],
        )?;
        ip(
            &srv,
            &[
                "route",
                "add",
                &format!("{POOL}/32"),
                "via",
                &VIP_OUT.to_string(),
            ],
        )?;
        // The server drops (and counts) the new sessions' datagrams; the client counts the
        // TCP resets it receives.
        sys::nft_load(
            &srv,
            &format!(
                "table inet xlatlab {{\n  chain in {{\n    type filter hook input priority 0; policy accept;\n    udp dport {NEW_BASE}-{} counter drop\n  }}\n}}\n",
                NEW_BASE + NEW_SPAN - 1
            ),
            &self.dir,
        )?;
        sys::nft_load(
            &cli,
            "table inet xlatlab {\n  chain in {\n    type filter hook input priority 0; policy accept;\n    tcp flags & rst == rst counter\n  }\n}\n",
            &self.dir,
        )?;
        Ok(())
    }

    fn spawn(&mut self, ns: &str, name: &str, args: &[&str]) -> Result<u32> {
        let out = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let err = out.try_clone()?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("starting {name}: {}", args.join(" ")))?;
        let pid = child.id();
        self.procs.push(Proc {
            name: name.to_string(),
            child,
        });
        Ok(pid)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits for process `name` to exit (at most `limit`); its exit status, None on timeout.
    fn wait_proc(&mut self, name: &str, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        let p = self.procs.iter_mut().find(|p| p.name == name)?;
        loop {
            if let Ok(Some(st)) = p.child.try_wait() {
                return Some(st);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_proc(&mut self, name: &str) {
        if let Some(p) = self.procs.iter_mut().find(|p| p.name == name) {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    fn pid(&self, name: &str) -> Option<i32> {
        self.procs
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.child.id() as i32)
    }

    /// The device's own process(es) in gateway k, then keepalived.
    fn start_gateway(&mut self, k: usize) -> Result<()> {
        let g = self.gw[k].clone();
        match self.dev {
            Dev::Xlat => {
                let conf = self.dir.join(format!("xlat-{k}.toml"));
                let sock = self.sock[k].clone();
                let _ = std::fs::remove_file(&sock);
                std::fs::write(
                    &conf,
                    xlat_config(k, &format!("xl{k}"), &sock.display().to_string()),
                )?;
                let bin = self.xlat.display().to_string();
                let c = conf.display().to_string();
                self.spawn(&g, &format!("xlat-{k}"), &[&bin, "run", "-c", &c])?;
                let name = format!("xlat-{k}");
                let start = Instant::now();
                while self.xlat_sync(k).is_err() {
                    if self.wait_proc(&name, Duration::from_millis(1)).is_some() {
                        bail!("xlat in gateway {k} exited: {}", self.log(&name));
                    }
                    if start.elapsed() > Duration::from_secs(20) {
                        bail!("xlat in gateway {k} did not answer within 20 s");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Dev::Kernel | Dev::KernelRandom => {
                sys::nft_load(&g, &nft_snat(self.dev == Dev::KernelRandom), &self.dir)?;
                let conf = self.dir.join(format!("conntrackd-{k}.conf"));
                std::fs::write(&conf, conntrackd_config(k, &self.dir))?;
                let _ = std::fs::remove_file(self.dir.join(format!("conntrackd-{k}.lock")));
                let c = conf.display().to_string();
                let name = format!("conntrackd-{k}");
                self.spawn(&g, &name, &["conntrackd", "-C", &c])?;
                let start = Instant::now();
                while sys::ns_ok(&g, &["conntrackd", "-C", &c, "-s"]).is_err() {
                    if self.wait_proc(&name, Duration::from_millis(1)).is_some() {
                        bail!(
                            "conntrackd in gateway {k} exited: {}{}",
                            self.log(&name),
                            std::fs::read_to_string(self.dir.join(format!("conntrackd-{k}.log")))
                                .unwrap_or_default()
                        );
                    }
                    if start.elapsed() > Duration::from_secs(10) {
                        bail!("conntrackd in gateway {k} did not answer within 10 s");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        Ok(())
    }

    fn start_keepalived(&mut self, k: usize) -> Result<()> {
        let notify = self.dir.join(format!("notify-{k}.sh"));
        std::fs::write(
            &notify,
            notify_script(self.dev, k, &self.dir, &self.xlat, &self.sock[k]),
        )?;
        std::fs::set_permissions(&notify, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let conf = self.dir.join(format!("keepalived-{k}.conf"));
        std::fs::write(&conf, keepalived_config(k, &notify))?;
        let pid = |n: &str| {
            self.dir
                .join(format!("keepalived-{k}-{n}.pid"))
                .display()
                .to_string()
        };
        let (pm, pv, c) = (pid("main"), pid("vrrp"), conf.display().to_string());
        let g = self.gw[k].clone();
        self.spawn(
            &g,
            &format!("keepalived-{k}"),
            &[
                "keepalived",
                "--dont-fork",
                "--log-console",
                "--vrrp",
                "--use-file",
                &c,
                "--pid",
                &pm,
                "--vrrp_pid",
                &pv,
            ],
        )?;
        Ok(())
    }

    fn notify_log(&self, k: usize) -> Vec<(String, bool, f64)> {
        parse_notify_log(
            &std::fs::read_to_string(self.dir.join(format!("notify-{k}.log"))).unwrap_or_default(),
        )
    }

    /// Waits until gateway k's notify hook finished `state` (after unix time `since`).
    fn wait_state(&self, k: usize, state: &str, since: f64, limit: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if self
                .notify_log(k)
                .iter()
                .any(|(s, begin, t)| s == state && !begin && *t >= since)
            {
                return Ok(());
            }
            if start.elapsed() > limit || sys::stopped() {
                bail!(
                    "gateway {k}'s notify hook for {state} did not finish within {limit:?}; its log:\n{}\nkeepalived said:\n{}",
                    std::fs::read_to_string(self.dir.join(format!("notify-{k}.log")))
                        .unwrap_or_default(),
                    tail(&self.log(&format!("keepalived-{k}")), 15)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn xlat_sync(&self, k: usize) -> Result<serde_json::Value> {
        let bin = self.xlat.display().to_string();
        let sock = self.sock[k].display().to_string();
        let o = sys::cmd(10, &[&bin, "show", "sync", "--json", "--socket", &sock])?;
        if !o.ok {
            bail!("xlat show sync: {}", o.stderr.trim());
        }
        serde_json::from_str(&o.stdout).context("xlat show sync --json")
    }

    /// Starts both gateways: a first and master, then b, standby and (xlat) in sync.
    pub fn start(&mut self) -> Result<()> {
        self.start_gateway(0)?;
        self.start_gateway(1)?;
        let t = unix_now() - 1.0;
        self.start_keepalived(0)?;
        self.wait_state(0, "master", t, Duration::from_secs(10))?;
        self.start_keepalived(1)?;
        self.wait_state(1, "backup", t, Duration::from_secs(10))?;
        if self.dev == Dev::Xlat {
            let start = Instant::now();
            loop {
                let s = self.xlat_sync(1)?;
                if s["role"] == "standby" && s["in_sync"] == true {
                    break;
                }
                if start.elapsed() > Duration::from_secs(15) {
                    bail!("gateway b did not get in sync within 15 s: {s}");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            // conntrackd's FTFW handshake; b asked for a resync in its backup hook.
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
    }

    /// The sync link's transmit counters on gateway k (bytes, packets).
    fn sync_tx(&self, k: usize) -> (u64, u64) {
        let read = |f: &str| {
            sys::ns_ok(
                &self.gw[k],
                &["cat", &format!("/sys/class/net/sy/statistics/{f}")],
            )
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
        };
        (read("tx_bytes"), read("tx_packets"))
    }

    /// CPU nanoseconds of the sync work on gateway k and of the rest of the process (xlat:
    /// the `xlat-sync` thread, and every other thread: the packet path with its control
    /// threads; the kernel device: conntrackd, its data path being softirq work that is not
    /// its own).
    fn cpu_ns(&self, k: usize) -> (u64, Option<u64>) {
        match self.dev {
            Dev::Xlat => {
                let Some(pid) = self.pid(&format!("xlat-{k}")) else {
                    return (0, None);
                };
                let (mut sync, mut rest) = (0, 0);
                for (comm, ns) in thread_cpu(pid) {
                    if comm == "xlat-sync" {
                        sync += ns;
                    } else {
                        rest += ns;
                    }
                }
                (sync, Some(rest))
            }
            Dev::Kernel | Dev::KernelRandom => (
                self.pid(&format!("conntrackd-{k}"))
                    .and_then(sys::proc_cpu_ns)
                    .unwrap_or(0),
                None,
            ),
        }
    }

    /// The failure of gateway a: its three links down at once (one `ip -batch`), then, for
    /// `kill`, its processes SIGKILLed.
    fn fail_active(&mut self, v: Variant) -> Result<()> {
        let batch = self.dir.join("fail.batch");
        std::fs::write(
            &batch,
            "link set in down\nlink set out down\nlink set sy down\n",
        )?;
        let g = self.gw[0].clone();
        ip(&g, &["-batch", &batch.display().to_string()])?;
        if v == Variant::Kill {
            let own = match self.dev {
                Dev::Xlat => "xlat-0",
                Dev::Kernel | Dev::KernelRandom => "conntrackd-0",
            };
            self.kill_proc(own);
            self.kill_proc("keepalived-0");
        }
        Ok(())
    }

    /// Sessions gateway b holds as the active's copies (also saved to the run directory).
    fn standby_entries(&self) -> Option<u64> {
        match self.dev {
            Dev::Xlat => {
                let s = self.xlat_sync(1).ok()?;
                let _ = std::fs::write(self.dir.join("b-sync-before.json"), s.to_string());
                let c = &s["counters"];
                Some(
                    c["installed"]
                        .as_u64()?
                        .saturating_sub(c["removed"].as_u64()?),
                )
            }
            Dev::Kernel | Dev::KernelRandom => {
                let c = self.dir.join("conntrackd-1.conf").display().to_string();
                let s = sys::ns_ok(&self.gw[1], &["conntrackd", "-C", &c, "-s"]).ok()?;
                let _ = std::fs::write(self.dir.join("b-conntrackd-stats-before.txt"), &s);
                conntrackd_external_active(&s)
            }
        }
    }

    fn nft_counter(&self, ns: &str) -> u64 {
        sys::ns_ok(ns, &["nft", "list", "chain", "inet", "xlatlab", "in"])
            .ok()
            .and_then(|s| {
                let w: Vec<&str> = s.split_whitespace().collect();
                let p = w.iter().position(|x| *x == "packets")?;
                w.get(p + 1)?.parse().ok()
            })
            .unwrap_or(0)
    }
}

fn offloads_off(ns: &str, dev: &str) {
    let _ = sys::cmd(
        10,
        &[
            "ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro",
            "off",
        ],
    );
}

fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

/// (thread name, CPU nanoseconds) of every thread of `pid` (from schedstat).
fn thread_cpu(pid: i32) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return v;
    };
    for e in rd.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        v.push((comm.trim().to_string(), ns));
    }
    v
}

// ---------------------------------------------------------------------------------------
// Traffic: the UDP flows, their echo server, the new sessions.

/// What happened to one established flow: (send time, reply time or None) per sequence
/// number, and the source endpoints the server saw it from with the first time of each.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FlowRecord {
    pub sent: Vec<f64>,
    pub replied: Vec<Option<f64>>,
    pub sources: Vec<(f64, String)>,
}

struct Shared {
    t0: Instant,
    stop: AtomicBool,
    /// New sessions per second now (f64 bits).
    new_rate: AtomicU64,
    new_sent: AtomicU64,
    flows: Mutex<Vec<FlowRecord>>,
}

/// Running traffic; `finish` stops it.
pub struct Traffic {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

fn payload(flow: usize, seq: u32) -> [u8; PAYLOAD] {
    let mut b = [0u8; PAYLOAD];
    b[..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&(flow as u16).to_be_bytes());
    b[6..10].copy_from_slice(&seq.to_be_bytes());
    b
}

/// (flow, seq) of a flow datagram, None for anything else.
pub fn parse_payload(b: &[u8]) -> Option<(usize, u32)> {
    if b.len() != PAYLOAD || b[..4] != MAGIC {
        return None;
    }
    Some((
        u16::from_be_bytes([b[4], b[5]]) as usize,
        u32::from_be_bytes([b[6], b[7], b[8], b[9]]),
    ))
}

impl Traffic {
    /// Starts the echo server, the flows and the new-session sender; all stop by themselves
    /// after `max_secs`.
    pub fn start(t: &Testbed, flows: usize, pps: f64, rate: f64, max_secs: f64) -> Result<Traffic> {
        let shared = Arc::new(Shared {
            t0: Instant::now(),
            stop: AtomicBool::new(false),
            new_rate: AtomicU64::new(rate.to_bits()),
            new_sent: AtomicU64::new(0),
            flows: Mutex::new(vec![FlowRecord::default(); flows]),
        });
        let deadline = Instant::now() + Duration::from_secs_f64(max_secs);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let mut threads = Vec::new();
        // Echo server.
        let (sh, ns, rtx) = (shared.clone(), t.srv.clone(), ready_tx.clone());
        threads.push(std::thread::spawn(move || -> Result<()> {
            let s = sys::enter_netns(&ns).and_then(|_| {
                let s = UdpSocket::bind(SocketAddrV4::new(SRV, ECHO_PORT)).context("bind")?;
                s.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(s)
            });
            let s = ready(s, &rtx)?;
            echo(&s, &sh, deadline)
        }));
        // Flows.
        let (sh, ns, rtx) = (shared.clone(), t.cli.clone(), ready_tx.clone());
        threads.push(std::thread::spawn(move || -> Result<()> {
            let socks = sys::enter_netns(&ns).and_then(|_| {
                (0..flows)
                    .map(|f| {
                        let u = UdpSocket::bind(SocketAddrV4::new(
                            Ipv4Addr::UNSPECIFIED,
                            FLOW_PORT + f as u16,
                        ))
                        .with_context(|| format!("binding flow {f}"))?;
                        u.set_nonblocking(true)?;
                        Ok(u)
                    })
                    .collect::<Result<Vec<_>>>()
            });
            let socks = ready(socks, &rtx)?;
            run_flows(&socks, &sh, Duration::from_secs_f64(1.0 / pps), deadline)
        }));
        // New sessions.
        let (sh, ns, rtx) = (shared.clone(), t.cli.clone(), ready_tx);
        threads.push(std::thread::spawn(move || -> Result<()> {
            let s = sys::enter_netns(&ns).and_then(|_| {
                (0..NEW_SOCKETS)
                    .map(|_| {
                        let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
                        s.set_nonblocking(true)?;
                        Ok(s)
                    })
                    .collect::<Result<Vec<_>>>()
            });
            let s = ready(s, &rtx)?;
            new_sessions(&s, &sh, deadline)
        }));
        let tr = Traffic { shared, threads };
        for _ in 0..3 {
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => bail!("traffic: {e}"),
                Err(_) => bail!("the traffic threads did not start within 10 s"),
            }
        }
        Ok(tr)
    }

    pub fn now(&self) -> f64 {
        self.shared.t0.elapsed().as_secs_f64()
    }

    pub fn set_new_rate(&self, r: f64) {
        self.shared.new_rate.store(r.to_bits(), Ordering::SeqCst);
    }

    pub fn new_sent(&self) -> u64 {
        self.shared.new_sent.load(Ordering::SeqCst)
    }

    /// Stops sending, lets the last replies come back, returns the flows' records.
    pub fn finish(mut self) -> Result<Vec<FlowRecord>> {
        self.shared.stop.store(true, Ordering::SeqCst);
        for h in self.threads.drain(..) {
            match h.join() {
                Ok(r) => r?,
                Err(_) => bail!("a traffic thread panicked"),
            }
        }
        let v = std::mem::take(
            &mut *self
                .shared
                .flows
                .lock()
                .map_err(|_| anyhow::anyhow!("lock"))?,
        );
        Ok(v)
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

fn ready<T>(
    r: Result<T>,
    tx: &std::sync::mpsc::Sender<std::result::Result<(), String>>,
) -> Result<T> {
    match r {
        Ok(x) => {
            let _ = tx.send(Ok(()));
            Ok(x)
        }
        Err(e) => {
            let _ = tx.send(Err(format!("{e:#}")));
            Err(e)
        }
    }
}

/// Answers every flow datagram; records each flow's source endpoints. Runs until stopped
/// (plus 300 ms for replies in flight) or the deadline.
fn echo(sock: &UdpSocket, sh: &Shared, deadline: Instant) -> Result<()> {
    let mut buf = [0u8; 2048];
    let mut stop_seen: Option<Instant> = None;
    loop {
        if sh.stop.load(Ordering::SeqCst) || Instant::now() > deadline {
            let t = *stop_seen.get_or_insert_with(Instant::now);
            if t.elapsed() > Duration::from_millis(300) {
                return Ok(());
            }
        }
        let (len, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("echo recv"),
        };
        let Some((flow, _)) = parse_payload(&buf[..len]) else {
            continue;
        };
        {
            let Ok(mut g) = sh.flows.lock() else {
                bail!("flows lock poisoned");
            };
            if let Some(r) = g.get_mut(flow) {
                let src = from.to_string();
                if r.sources.last().map(|s| &s.1) != Some(&src) {
                    r.sources.push((sh.t0.elapsed().as_secs_f64(), src));
                }
            }
        }
        let _ = sock.send_to(&buf[..len], from);
    }
}

/// Every interval, one datagram on every flow's socket; replies recorded by sequence number.
fn run_flows(
    socks: &[UdpSocket],
    sh: &Shared,
    interval: Duration,
    deadline: Instant,
) -> Result<()> {
    let dst = SocketAddr::V4(SocketAddrV4::new(SRV, ECHO_PORT));
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|u| libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(u),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let mut tick: u32 = 0;
    let mut drain_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if drain_until.is_none() && (sh.stop.load(Ordering::SeqCst) || now > deadline) {
            drain_until = Some(now + Duration::from_millis(200));
        }
        if let Some(d) = drain_until {
            if now >= d {
                return Ok(());
            }
        } else if now >= start + interval * tick {
            let t = sh.t0.elapsed().as_secs_f64();
            {
                let Ok(mut g) = sh.flows.lock() else {
                    bail!("flows lock poisoned");
                };
                for r in g.iter_mut() {
                    r.sent.push(t);
                    r.replied.push(None);
                }
            }
            for (f, u) in socks.iter().enumerate() {
                // A refused send (no neighbour for a moment) is an unreplied datagram.
                let _ = u.send_to(&payload(f, tick), dst);
            }
            tick = tick.saturating_add(1);
        }
        let next = if drain_until.is_some() {
            Duration::from_millis(20)
        } else {
            (start + interval * tick).saturating_duration_since(Instant::now())
        };
        let ms = next.as_millis().clamp(0, 50) as libc::c_int;
        // SAFETY: fds is a valid array of pollfd of the given length for the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r <= 0 {
            continue;
        }
        let t = sh.t0.elapsed().as_secs_f64();
        let Ok(mut g) = sh.flows.lock() else {
            bail!("flows lock poisoned");
        };
        for (k, p) in fds.iter_mut().enumerate() {
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
            p.revents = 0;
            for _ in 0..64 {
                match socks[k].recv_from(&mut buf) {
                    Ok((len, _)) => {
                        if let Some((f, seq)) = parse_payload(&buf[..len]) {
                            if f == k {
                                if let Some(x) = g[k].replied.get_mut(seq as usize) {
                                    x.get_or_insert(t);
                                }
                            }
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    }
}

/// One datagram per new session (a new destination port each, then the next source socket),
/// at the shared rate, sent in 1 ms rounds of at most 1,000.
fn new_sessions(socks: &[UdpSocket], sh: &Shared, deadline: Instant) -> Result<()> {
    let mut k: u64 = 0;
    let mut owed = 0.0f64;
    let mut last = Instant::now();
    let data = [0u8; 16];
    while !sh.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        let now = Instant::now();
        let rate = f64::from_bits(sh.new_rate.load(Ordering::SeqCst));
        owed = (owed + rate * (now - last).as_secs_f64()).min(1000.0);
        last = now;
        while owed >= 1.0 {
            let port = NEW_BASE + (k % u64::from(NEW_SPAN)) as u16;
            let sock = &socks[(k / u64::from(NEW_SPAN)) as usize % socks.len()];
            if sock.send_to(&data, SocketAddrV4::new(SRV, port)).is_ok() {
                sh.new_sent.fetch_add(1, Ordering::SeqCst);
            }
            k += 1;
            owed -= 1.0;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Analysis (pure: unit tested).

/// What the flows say about one failure at time `kill` (the record's clock).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowOutcome {
    /// Flows older than 1 s at the failure.
    pub established: usize,
    /// Of those, flows lost: stopped or remapped (the session the server knew, its outside
    /// endpoint, sends nothing more either way).
    pub established_lost: usize,
    /// Flows with no reply to anything sent in the last second of sending.
    pub established_stopped: usize,
    /// Flows the server saw from another outside endpoint after the failure.
    pub established_remapped: usize,
    /// The longest silence of a flow across the failure, ms: the largest gap between two
    /// consecutive replies it received from half a second before the failure on (flows not
    /// lost; includes up to one sending interval).
    pub failover_ms: Option<f64>,
    /// Median of the same.
    pub failover_ms_median: Option<f64>,
    /// Datagrams sent after the failure without a reply, and sent after it.
    pub lost_after: u64,
    pub sent_after: u64,
}

/// Judges the flows' records for a failure at `kill`.
pub fn analyse(flows: &[FlowRecord], kill: f64) -> FlowOutcome {
    let mut o = FlowOutcome::default();
    let mut gaps = Vec::new();
    for r in flows {
        let Some(first) = r.sent.first() else {
            continue;
        };
        if kill - first < 1.0 {
            continue;
        }
        o.established += 1;
        let end = r.sent.last().copied().unwrap_or(0.0);
        let mut tail_replied = false;
        let mut got: Vec<f64> = Vec::new();
        for (s, rep) in r.sent.iter().zip(&r.replied) {
            if *s >= kill {
                o.sent_after += 1;
                if rep.is_none() {
                    o.lost_after += 1;
                }
            }
            if let Some(t) = rep {
                if *t >= kill - 0.5 {
                    got.push(*t);
                }
            }
            if *s > end - 1.0 && rep.is_some() {
                tail_replied = true;
            }
        }
        let before = r.sources.iter().rev().find(|s| s.0 < kill).map(|s| &s.1);
        let remapped = r
            .sources
            .iter()
            .any(|s| s.0 >= kill && Some(&s.1) != before);
        if remapped {
            o.established_remapped += 1;
        }
        if !tail_replied {
            o.established_stopped += 1;
        } else {
            got.sort_by(|a, b| a.total_cmp(b));
            let gap = got.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
            gaps.push(gap * 1e3);
        }
        if remapped || !tail_replied {
            o.established_lost += 1;
        }
    }
    if !gaps.is_empty() {
        o.failover_ms = gaps.iter().copied().reduce(f64::max);
        o.failover_ms_median = Some(Spread::of(&gaps).median);
    }
    o
}

/// Sync cost at one new-session rate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SyncSample {
    /// The asked rate, and what was sent.
    pub new_rate: f64,
    pub new_per_s: f64,
    /// Session events the device said it sent (xlat), per second.
    pub events_per_s: Option<f64>,
    /// Sync payload bytes per session event: xlat's own counters; the kernel device: UDP
    /// payload on the sync link per new session.
    pub bytes_per_event: Option<f64>,
    /// Packets and bytes per second on the sync link (the active's transmit side, frames).
    pub link_pps: f64,
    pub link_bytes_per_s: f64,
    /// CPU of the sync work on the active, % of one CPU.
    pub cpu_pct: f64,
    /// ... and as % of the active's data-path CPU (xlat only).
    pub cpu_pct_of_datapath: Option<f64>,
    /// xlat's events_dropped in the window.
    pub events_dropped: Option<u64>,
    /// xlat's datagrams_sent and datagrams_resent in the window (bytes_sent counts both).
    pub datagrams_sent: Option<u64>,
    pub datagrams_resent: Option<u64>,
}

/// One device/variant run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outcome {
    pub device: String,
    pub variant: String,
    pub flows: FlowOutcome,
    /// keepalived's part: failure to the start of b's notify_master hook, ms.
    pub vrrp_ms: Option<f64>,
    /// The device's part: b's notify_master hook (xlat sync role active / conntrackd -c ...), ms.
    pub takeover_ms: Option<f64>,
    pub tcp_resets: u64,
    pub download_ok: bool,
    pub download_bytes: u64,
    pub iperf_ok: Option<bool>,
    pub iperf_retransmits: Option<u64>,
    pub new_sent: u64,
    pub new_arrived: u64,
    /// New sessions sent after the failure, and how many of them reached the server.
    pub new_sent_after: u64,
    pub new_arrived_after: u64,
    /// Sessions the standby held as copies just before the failure (xlat: installed minus
    /// removed; conntrackd: its external cache's active entries).
    pub standby_entries: Option<u64>,
    pub sync: Vec<SyncSample>,
    pub notes: Vec<String>,
}

/// The external cache's "current active connections" in `conntrackd -s` output.
pub fn conntrackd_external_active(stats: &str) -> Option<u64> {
    let mut section = "";
    for l in stats.lines() {
        let l = l.trim();
        if l.ends_with(':') {
            section = l;
        } else if section == "cache external:" {
            if let Some(v) = l.strip_prefix("current active connections:") {
                return v.trim().parse().ok();
            }
        }
    }
    None
}

/// (ok, received bytes, retransmits) from iperf3's --json output; None when unreadable.
pub fn parse_iperf(json: &str) -> Option<(bool, u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    if v.get("error").is_some() {
        return Some((false, 0, 0));
    }
    let end = v.get("end")?;
    let rx = end["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let re = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    Some((rx > 0, rx, re))
}

// ---------------------------------------------------------------------------------------
// One run.

fn measure_sync(t: &Testbed, tr: &Traffic, rate: f64) -> Result<SyncSample> {
    tr.set_new_rate(rate);
    sys::sleep_interruptible(Duration::from_millis(300));
    let xl = |t: &Testbed| -> Option<serde_json::Value> {
        (t.dev == Dev::Xlat).then(|| t.xlat_sync(0).ok()).flatten()
    };
    let (x0, l0, c0, n0, w0) = (
        xl(t),
        t.sync_tx(0),
        t.cpu_ns(0),
        tr.new_sent(),
        Instant::now(),
    );
    sys::sleep_interruptible(Duration::from_secs_f64(SYNC_WINDOW));
    let (x1, l1, c1, n1) = (xl(t), t.sync_tx(0), t.cpu_ns(0), tr.new_sent());
    let secs = w0.elapsed().as_secs_f64().max(1e-3);
    let new = n1.saturating_sub(n0);
    let d =
        |a: &Option<serde_json::Value>, b: &Option<serde_json::Value>, k: &str| -> Option<u64> {
            let a = a.as_ref()?["counters"][k].as_u64()?;
            let b = b.as_ref()?["counters"][k].as_u64()?;
            Some(b.saturating_sub(a))
        };
    let (lb, lp) = (l1.0.saturating_sub(l0.0), l1.1.saturating_sub(l0.1));
    let ev = d(&x0, &x1, "events_sent");
    let bytes_per_event = match t.dev {
        Dev::Xlat => match (d(&x0, &x1, "bytes_sent"), ev) {
            (Some(b), Some(e)) if e > 0 => Some(b as f64 / e as f64),
            _ => None,
        },
        // Frames minus Ethernet, IPv4 and UDP headers.
        Dev::Kernel | Dev::KernelRandom => {
            (new > 0).then(|| lb.saturating_sub(42 * lp) as f64 / new as f64)
        }
    };
    let cpu = c1.0.saturating_sub(c0.0) as f64;
    let data = match (c0.1, c1.1) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64),
        _ => None,
    };
    Ok(SyncSample {
        new_rate: rate,
        new_per_s: new as f64 / secs,
        events_per_s: ev.map(|e| e as f64 / secs),
        bytes_per_event,
        link_pps: lp as f64 / secs,
        link_bytes_per_s: lb as f64 / secs,
        cpu_pct: 100.0 * cpu / (secs * 1e9),
        cpu_pct_of_datapath: data.map(|d| 100.0 * cpu / d),
        events_dropped: d(&x0, &x1, "events_dropped"),
        datagrams_sent: d(&x0, &x1, "datagrams_sent"),
        datagrams_resent: d(&x0, &x1, "datagrams_resent"),
    })
}

/// Runs one device through one failure; the testbed is removed on return.
pub fn run_one(o: &FailOpts, dev: Dev, v: Variant) -> Result<Outcome> {
    let dir = o.dir.join(format!("{}-{}", dev.name(), v.name()));
    let bin = match &o.xlat_bin {
        Some(b) => b.clone(),
        None => crate::device::xlat_bin()?,
    };
    let mut t = Testbed::new(dev, &dir, bin)?;
    t.start()?;
    let before = o.before();
    let total = before + o.after;
    let mut out = Outcome {
        device: dev.name().into(),
        variant: v.name().into(),
        ..Outcome::default()
    };
    // The download: sized to outlast the failure at the rate limit.
    let www = dir.join("www");
    std::fs::create_dir_all(&www)?;
    let blob = www.join("blob.bin");
    let size = (o.download_rate as f64 * (total - 0.5)) as u64;
    sys::cmd_ok(&[
        "sh",
        "-c",
        &format!("head -c {size} /dev/urandom > {}", blob.display()),
    ])?;
    out.download_bytes = size;
    let (srv, cli) = (t.srv.clone(), t.cli.clone());
    let w = www.display().to_string();
    t.spawn(
        &srv,
        "http",
        &[
            "python3",
            "-m",
            "http.server",
            &HTTP_PORT.to_string(),
            "--bind",
            &SRV.to_string(),
            "--directory",
            &w,
        ],
    )?;
    let iperf = o.iperf && sys::have("iperf3");
    if iperf {
        t.spawn(
            &srv,
            "iperf3-server",
            &[
                "iperf3",
                "-s",
                "-1",
                "-B",
                &SRV.to_string(),
                "-p",
                &IPERF_PORT.to_string(),
            ],
        )?;
    }
    // Both servers listening.
    let start = Instant::now();
    loop {
        let s = sys::ns_ok(&srv, &["ss", "-Hltn"]).unwrap_or_default();
        if s.contains(&format!(":{HTTP_PORT}")) && (!iperf || s.contains(&format!(":{IPERF_PORT}")))
        {
            break;
        }
        if start.elapsed() > Duration::from_secs(10) {
            bail!("the HTTP / iperf3 servers did not listen within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = dir.join("download.bin");
    let tr = Traffic::start(&t, o.flows, o.flow_pps, o.new_rates[0], total + 5.0)?;
    let g = got.display().to_string();
    let (rate_s, max_s) = (
        o.download_rate.to_string(),
        format!("{}", (total * 3.0 + 20.0) as u64),
    );
    t.spawn(
        &cli,
        "curl",
        &[
            "curl",
            "-sS",
            "--fail",
            "--limit-rate",
            &rate_s,
            "--max-time",
            &max_s,
            "-o",
            &g,
            &format!("http://{SRV}:{HTTP_PORT}/blob.bin"),
        ],
    )?;
    if iperf {
        let secs = format!("{}", total.ceil() as u64);
        t.spawn(
            &cli,
            "iperf3",
            &[
                "iperf3",
                "-c",
                &SRV.to_string(),
                "-p",
                &IPERF_PORT.to_string(),
                "-t",
                &secs,
                "-b",
                "20M",
                "--connect-timeout",
                "3000",
                "-J",
            ],
        )?;
    }
    sys::sleep_interruptible(Duration::from_secs(1));
    for &r in &o.new_rates {
        sys::check_stop()?;
        out.sync.push(measure_sync(&t, &tr, r)?);
    }
    tr.set_new_rate(o.new_rates[0]);
    let left = before - tr.now();
    if left > 0.0 {
        sys::sleep_interruptible(Duration::from_secs_f64(left));
    }
    sys::check_stop()?;
    out.standby_entries = t.standby_entries();
    let (sent0, arrived0) = (tr.new_sent(), t.nft_counter(&srv));
    // The failure.
    let kill_unix = unix_now();
    let kill = tr.now();
    t.fail_active(v)?;
    let took = t.wait_state(1, "master", kill_unix - 0.05, Duration::from_secs(10));
    let left = total - tr.now();
    if left > 0.0 {
        sys::sleep_interruptible(Duration::from_secs_f64(left));
    }
    out.new_sent = tr.new_sent();
    let flows = tr.finish()?;
    // A hook still running (conntrackd's commit) gets 30 s more to finish.
    if took.is_err() {
        match t.wait_state(1, "master", kill_unix - 0.05, Duration::from_secs(30)) {
            Ok(()) => out
                .notes
                .push("b's notify_master hook ran for more than 10 s".into()),
            Err(e) => out.notes.push(format!("{e:#}")),
        }
    }
    let log = t.notify_log(1);
    let begin = log
        .iter()
        .find(|(s, b, tm)| s == "master" && *b && *tm >= kill_unix - 0.05)
        .map(|x| x.2);
    let end = log
        .iter()
        .find(|(s, b, tm)| s == "master" && !*b && *tm >= kill_unix - 0.05)
        .map(|x| x.2);
    out.vrrp_ms = begin.map(|b| (b - kill_unix).max(0.0) * 1e3);
    out.takeover_ms = match (begin, end) {
        (Some(b), Some(e)) => Some((e - b).max(0.0) * 1e3),
        _ => None,
    };
    out.flows = analyse(&flows, kill);
    out.new_arrived = t.nft_counter(&srv);
    // The counter was read after the failure began: datagrams in flight then count as after.
    out.new_sent_after = out.new_sent.saturating_sub(sent0);
    out.new_arrived_after = out.new_arrived.saturating_sub(arrived0);
    // The TCP transfers end by themselves (bounded by their own time limits).
    let st = t.wait_proc("curl", Duration::from_secs_f64(total * 3.0 + 25.0));
    let sum = |p: &Path| -> Option<String> {
        let o = sys::cmd(60, &["sha256sum", &p.display().to_string()]).ok()?;
        o.ok.then(|| o.stdout.split_whitespace().next().map(str::to_string))
            .flatten()
    };
    out.download_ok =
        st.is_some_and(|s| s.success()) && sum(&blob).is_some() && sum(&blob) == sum(&got);
    if !out.download_ok {
        out.notes.push(format!(
            "download failed ({st:?}): {}",
            tail(&t.log("curl"), 3)
        ));
    }
    if iperf {
        let st = t.wait_proc("iperf3", Duration::from_secs_f64(total + 20.0));
        let p = parse_iperf(&t.log("iperf3"));
        out.iperf_ok = Some(st.is_some_and(|s| s.success()) && p.is_some_and(|p| p.0));
        out.iperf_retransmits = p.map(|p| p.2);
    }
    out.tcp_resets = t.nft_counter(&cli);
    std::fs::write(
        dir.join("flows.json"),
        serde_json::to_string(&flows).context("encoding flows")?,
    )?;
    let _ = std::fs::remove_file(&blob);
    let _ = std::fs::remove_file(&got);
    drop(t);
    Ok(out)
}

/// Runs every device through every variant.
pub fn run(o: &FailOpts) -> Result<Vec<Outcome>> {
    o.validate()?;
    let mut v = Vec::new();
    for &var in &o.variants {
        for &dev in &o.devices {
            sys::check_stop()?;
            eprintln!("failover: {} / {}", dev.name(), var.name());
            v.push(
                run_one(o, dev, var).with_context(|| format!("{} / {}", dev.name(), var.name()))?,
            );
        }
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------
// `xlat lab run failover`: results.json and the report.

fn one(v: f64) -> Spread {
    Spread::of(&[v])
}

/// The lab's tables: the failures, and the sync cost by new-session rate.
pub fn experiments(outs: &[Outcome], o: &FailOpts) -> Vec<Experiment> {
    let mut rows = Vec::new();
    for x in outs {
        let mut m = BTreeMap::new();
        let f = &x.flows;
        m.insert("established".into(), one(f.established as f64));
        m.insert("established_lost".into(), one(f.established_lost as f64));
        m.insert(
            "established_stopped".into(),
            one(f.established_stopped as f64),
        );
        m.insert(
            "established_remapped".into(),
            one(f.established_remapped as f64),
        );
        if let Some(v) = f.failover_ms {
            m.insert("failover_ms".into(), one(v));
        }
        if let Some(v) = f.failover_ms_median {
            m.insert("failover_ms_median".into(), one(v));
        }
        if let Some(v) = x.vrrp_ms {
            m.insert("vrrp_ms".into(), one(v));
        }
        if let Some(v) = x.takeover_ms {
            m.insert("takeover_ms".into(), one(v));
        }
        m.insert("udp_lost_after".into(), one(f.lost_after as f64));
        m.insert("udp_sent_after".into(), one(f.sent_after as f64));
        m.insert("tcp_resets".into(), one(x.tcp_resets as f64));
        m.insert(
            "download_ok".into(),
            one(f64::from(u8::from(x.download_ok))),
        );
        if let Some(ok) = x.iperf_ok {
            m.insert("iperf3_ok".into(), one(f64::from(u8::from(ok))));
        }
        if let Some(r) = x.iperf_retransmits {
            m.insert("iperf3_retransmits".into(), one(r as f64));
        }
        m.insert("new_sent".into(), one(x.new_sent as f64));
        if let Some(v) = x.standby_entries {
            m.insert("standby_entries".into(), one(v as f64));
        }
        m.insert("new_arrived".into(), one(x.new_arrived as f64));
        m.insert("new_sent_after".into(), one(x.new_sent_after as f64));
        m.insert("new_arrived_after".into(), one(x.new_arrived_after as f64));
        if let Some(s) = x.sync.first() {
            if let Some(b) = s.bytes_per_event {
                m.insert("sync_bytes_per_event".into(), one(b));
            }
            m.insert("sync_pps".into(), one(s.link_pps));
            m.insert("sync_cpu_pct".into(), one(s.cpu_pct));
        }
        rows.push(Row {
            device: format!("{} ({})", x.device, x.variant),
            size: "UDP + TCP".into(),
            metrics: m,
            notes: x.notes.clone(),
            ..Row::default()
        });
    }
    let mut sync_rows = Vec::new();
    for x in outs.iter().filter(|x| x.variant == o.variants[0].name()) {
        for s in &x.sync {
            let mut m = BTreeMap::new();
            m.insert("new_per_s".into(), one(s.new_per_s));
            if let Some(v) = s.events_per_s {
                m.insert("events_per_s".into(), one(v));
            }
            if let Some(v) = s.bytes_per_event {
                m.insert("sync_bytes_per_event".into(), one(v));
            }
            m.insert("sync_pps".into(), one(s.link_pps));
            m.insert("sync_link_bytes_per_s".into(), one(s.link_bytes_per_s));
            m.insert("sync_cpu_pct".into(), one(s.cpu_pct));
            if let Some(v) = s.cpu_pct_of_datapath {
                m.insert("sync_cpu_pct_of_datapath".into(), one(v));
            }
            if let Some(v) = s.events_dropped {
                m.insert("events_dropped".into(), one(v as f64));
            }
            if let Some(v) = s.datagrams_resent {
                m.insert("datagrams_resent".into(), one(v as f64));
            }
            sync_rows.push(Row {
                device: x.device.clone(),
                size: "UDP".into(),
                x: Some(s.new_rate),
                metrics: m,
                ..Row::default()
            });
        }
    }
    let method = format!(
        "Two gateways (a active, b standby) between a client and a server, keepalived (VRRP v3, 100 ms \
         adverts, unicast) in both owning the inside gateway address and the address the server routes \
         the pool to. xlat-nat44: xlat with [sync]; kernel-nat44: nftables snat to the pool address, \
         conntrackd FTFW, the notify hooks of conntrackd's primary-backup.sh. Established: {} UDP flows \
         ({} datagrams/s each, distinct source ports, echoed), a rate-limited HTTP download \
         (sha256 compared) and an iperf3 stream, all older than 1 s at the failure; new sessions \
         (one datagram to a new destination port) keep arriving at {} /s. kill = the active's \
         processes SIGKILLed and its links down; link-down = its links down only. \
         established_lost = flows stopped (no reply in the last second of sending) or remapped \
         (the server saw them from another outside endpoint after the failure: the session it \
         knew ended); failover_ms = the \
         longest time from the failure to a flow's first echo of a datagram sent after it; \
         vrrp_ms = failure to b's notify_master hook starting (keepalived's detection); \
         takeover_ms = that hook's run time (the gateway's own part); tcp_resets = RSTs the \
         client received (an nft counter); new_arrived = new-session datagrams the server \
         received (an nft counter), _after = of those sent after the failure.",
        o.flows, o.flow_pps, o.new_rates[0]
    );
    let sync_method = format!(
        "Each new-session rate for {SYNC_WINDOW} s before the failure. sync_bytes_per_event: \
         xlat: bytes_sent / events_sent of `xlat show sync --json` on the active (UDP payload, \
         HMAC included); kernel-nat44: UDP payload bytes on the sync link per new session (frames \
         minus 42 bytes each, conntrackd's acknowledgements and alive messages included). \
         sync_pps: frames the active sent on the sync link per second. sync_cpu_pct: CPU time \
         of the active's xlat-sync thread (schedstat) or of conntrackd (the whole process) in \
         % of one CPU; sync_cpu_pct_of_datapath: xlat-sync over the xlat-worker threads. The \
         kernel's NAT runs in softirq and is not attributed."
    );
    vec![
        Experiment {
            name: "failover".into(),
            title: "Failover: the active gateway fails under established flows".into(),
            x_label: None,
            method,
            rows,
        },
        Experiment {
            name: "failover-sync".into(),
            title: "Failover: the cost of sync by new-session rate".into(),
            x_label: Some("new sessions/s".into()),
            method: sync_method,
            rows: sync_rows,
        },
    ]
}

/// The options from the command line (defaults: both devices, both variants, 50 flows at
/// 100/s, new sessions at 1,000 and 10,000/s, 4 s after the failure).
pub fn opts_from(o: &crate::RunOpts, dir: PathBuf) -> Result<FailOpts> {
    let devices = match &o.devices {
        Some(v) => v
            .iter()
            .map(|d| Dev::parse(d))
            .collect::<Result<Vec<_>>>()?,
        None => vec![Dev::Xlat, Dev::Kernel, Dev::KernelRandom],
    };
    let variants = match &o.variants {
        Some(v) => v
            .iter()
            .map(|d| Variant::parse(d))
            .collect::<Result<Vec<_>>>()?,
        None => vec![Variant::Kill, Variant::LinkDown],
    };
    let f = FailOpts {
        devices,
        variants,
        flows: o.flows.map(|f| f as usize).unwrap_or(50),
        flow_pps: o.rate.unwrap_or(100.0),
        new_rates: o
            .new_rates
            .clone()
            .unwrap_or_else(|| vec![1000.0, 10_000.0]),
        after: o.duration.unwrap_or(4.0),
        download_rate: 500_000,
        iperf: true,
        dir,
        xlat_bin: None,
    };
    f.validate()?;
    Ok(f)
}

/// `xlat lab run failover`: runs, writes `results/<stamp>-failover/`, prints the tables.
pub fn main_run(o: &crate::RunOpts) -> Result<PathBuf> {
    sys::install_stop_handler();
    let base = o.out.clone().unwrap_or_else(|| PathBuf::from("results"));
    let stamp = sys::utc_stamp();
    let dir = base.join(format!("{stamp}-failover"));
    let opts = opts_from(o, dir.join("runs"))?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let started = Instant::now();
    eprintln!(
        "xlat lab failover: {:?} x {:?}, {} flows; results in {}",
        opts.devices.iter().map(|d| d.name()).collect::<Vec<_>>(),
        opts.variants.iter().map(|d| d.name()).collect::<Vec<_>>(),
        opts.flows,
        dir.display()
    );
    let mut res = RunResults {
        schema: SCHEMA,
        name: "failover".into(),
        command_line: std::env::args().collect(),
        started_utc: stamp,
        machine: Machine::read(),
        settings: Settings {
            devices: opts.devices.iter().map(|d| d.name().to_string()).collect(),
            sizes: vec!["UDP + TCP".into()],
            trial_secs: opts.before() + opts.after,
            repeats: 1,
            flows: opts.flows as u32,
            ..Settings::default()
        },
        placement: format!(
            "both gateways, keepalived, conntrackd and the traffic share this machine's {} CPUs (no pinning)",
            sys::ncpus()
        ),
        ..RunResults::default()
    };
    res.versions
        .insert("xlat-lab".into(), env!("CARGO_PKG_VERSION").to_string());
    for (k, args) in [
        ("keepalived", &["keepalived", "--version"][..]),
        ("conntrackd", &["conntrackd", "-v"][..]),
    ] {
        if let Ok(v) = sys::cmd(5, args) {
            let s = format!("{}{}", v.stdout, v.stderr);
            if let Some(l) = s.lines().next() {
                res.versions.insert(k.into(), l.trim().to_string());
            }
        }
    }
    let outcome = run(&opts);
    res.wall_secs = started.elapsed().as_secs_f64();
    match &outcome {
        Ok(outs) => {
            res.experiments = experiments(outs, &opts);
            let p = dir.join("outcome.json");
            std::fs::write(
                &p,
                serde_json::to_string_pretty(outs).context("encoding the outcome")?,
            )
            .with_context(|| format!("writing {}", p.display()))?;
        }
        Err(e) => res.incomplete = Some(format!("{e:#}")),
    }
    let p = dir.join("results.json");
    std::fs::write(
        &p,
        serde_json::to_string_pretty(&res).context("encoding results")?,
    )
    .with_context(|| format!("writing {}", p.display()))?;
    crate::report::write(&dir, &res)?;
    print!("{}", crate::report::text(&res));
    println!(
        "\nresults: {}/results.json (and outcome.json)\nreport:  {}/report.md",
        dir.display(),
        dir.display()
    );
    outcome.map(|_| dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(sent: &[f64], replied: &[Option<f64>], sources: &[(f64, &str)]) -> FlowRecord {
        FlowRecord {
            sent: sent.to_vec(),
            replied: replied.to_vec(),
            sources: sources.iter().map(|(t, s)| (*t, s.to_string())).collect(),
        }
    }

    #[test]
    fn analysis_counts_lost_remapped_and_the_gap() {
        let sent: Vec<f64> = (0..40).map(|i| i as f64 * 0.1).collect();
        // Survives: replies stop at 2.0..2.3, come back from 2.3.
        let ok: Vec<Option<f64>> = sent
            .iter()
            .map(|s| (*s < 2.0 || *s >= 2.3).then_some(s + 0.01))
            .collect();
        // Lost: nothing after the failure at 2.0.
        let lost: Vec<Option<f64>> = sent
            .iter()
            .map(|s| (*s < 2.0).then_some(s + 0.01))
            .collect();
        let flows = vec![
            flow(&sent, &ok, &[(0.0, "198.19.0.100:40000")]),
            flow(
                &sent,
                &ok,
                &[(0.0, "198.19.0.100:40001"), (2.35, "198.19.0.100:9999")],
            ),
            flow(&sent, &lost, &[(0.0, "198.19.0.100:40002")]),
            // Too young at the failure: not established.
            flow(&[1.5, 1.6], &[Some(1.51), None], &[]),
        ];
        let o = analyse(&flows, 2.0);
        assert_eq!(o.established, 3);
        assert_eq!(o.established_stopped, 1);
        assert_eq!(o.established_remapped, 1);
        // The remapped flow is lost to the server too.
        assert_eq!(o.established_lost, 2);
        // Last reply before the failure at 1.91, the next at 2.31.
        let g = o.failover_ms.unwrap();
        assert!((g - 400.0).abs() < 1e-6, "{g}");
        assert_eq!(o.sent_after, 60);
        assert_eq!(o.lost_after, 3 + 3 + 20);
    }

    #[test]
    fn nothing_established_gives_no_gap() {
        let o = analyse(&[], 1.0);
        assert_eq!(o, FlowOutcome::default());
    }

    #[test]
    fn payload_round_trips_and_rejects_others() {
        let p = payload(7, 123_456);
        assert_eq!(parse_payload(&p), Some((7, 123_456)));
        assert_eq!(parse_payload(&p[..10]), None);
        let mut q = p;
        q[0] = b'Y';
        assert_eq!(parse_payload(&q), None);
    }

    #[test]
    fn notify_log_and_iperf_output_are_read() {
        let l = parse_notify_log(
            "master begin 1700000000.100\nmaster end 1700000000.150\nnoise\nbackup start 1\n",
        );
        assert_eq!(l.len(), 2);
        assert!(l[0].1 && !l[1].1);
        assert!((l[1].2 - 1_700_000_000.15).abs() < 1e-3);
        let j = r#"{"end":{"sum_received":{"bytes":1000},"sum_sent":{"retransmits":3}}}"#;
        assert_eq!(parse_iperf(j), Some((true, 1000, 3)));
        assert_eq!(parse_iperf(r#"{"error":"x"}"#), Some((false, 0, 0)));
        assert_eq!(parse_iperf("garbage"), None);
        let st = "cache internal:\ncurrent active connections:\t 0\n\ncache external:\n\
                  current active connections:\t        2165\nconnections created:\t 2165\n";
        assert_eq!(conntrackd_external_active(st), Some(2165));
        assert_eq!(
            conntrackd_external_active("cache internal:\ncurrent active connections: 5\n"),
            None
        );
    }

    #[test]
    fn options_are_checked() {
        let ok = FailOpts {
            devices: vec![Dev::Xlat],
            variants: vec![Variant::Kill],
            flows: 10,
            flow_pps: 100.0,
            new_rates: vec![1000.0],
            after: 3.0,
            download_rate: 500_000,
            iperf: false,
            dir: PathBuf::from("/tmp/x"),
            xlat_bin: None,
        };
        ok.validate().unwrap();
        for bad in [
            FailOpts {
                flows: 0,
                ..ok.clone()
            },
            FailOpts {
                flows: 1001,
                ..ok.clone()
            },
            FailOpts {
                new_rates: vec![],
                ..ok.clone()
            },
            FailOpts {
                new_rates: vec![1e9],
                ..ok.clone()
            },
            FailOpts {
                after: 1.0,
                ..ok.clone()
            },
            FailOpts {
                devices: vec![],
                ..ok.clone()
            },
            FailOpts {
                flow_pps: 0.0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(Dev::parse("tayga").is_err() && Variant::parse("reboot").is_err());
    }

    #[test]
    fn configs_name_their_gateway() {
        let d = Path::new("/tmp/f");
        let x = xlat_config(1, "xl1", "/tmp/f/b.sock");
        assert!(
            x.contains("listen = \"198.18.254.2:4790\"")
                && x.contains("peer = \"198.18.254.1:4790\"")
        );
        let c = conntrackd_config(0, d);
        assert!(
            c.contains("IPv4_Destination_Address 198.18.254.2")
                && c.contains("/tmp/f/conntrackd-0.ctl")
        );
        let n = notify_script(Dev::Kernel, 1, d, Path::new("/x"), Path::new("/s"));
        assert!(n.contains("-c; ") && n.contains("-n"));
        let k = keepalived_config(0, Path::new("/tmp/f/notify-0.sh"));
        assert!(k.contains("priority 150") && k.contains("advert_int 0.1"));
        assert!(nft_snat(false).ends_with("snat to 198.19.0.100\n  }\n}\n"));
        assert!(nft_snat(true).contains("snat to 198.19.0.100 random\n"));
    }
}
