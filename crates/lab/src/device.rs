//! Devices under test. Each adapter sets itself up inside the DUT namespace, tears itself down,
//! and says how to read its memory, sessions and CPU (its processes; kernel devices have none,
//! and their cost is the DUT CPU's softirq time, which the tester reads from /proc/stat).
//!
//! | device | what runs in the DUT namespace |
//! |---|---|
//! | forward4, forward6 | plain kernel routing (the "no NAT" baseline of S4/S5) |
//! | kernel-nat44 | nftables SNAT to 198.19.4.0/24 with conntrack (S1/S3's netfilter NAT) |
//! | kernel-nat44-heavy | the same plus a distribution-style firewall: extra tables, hooks, sets (S4's contrast) |
//! | xlat-nat44 | `xlat run` (NAPT over 198.19.4.0/24), the binary next to this one |
//! | xlat-nat44-segments, xlat-nat64-segments | xlat-nat44, xlat-nat64 with `[tun] offload = false`: TCP crosses the TUN device segment by segment, as before super-packets |
//! | xlat-nat44-log | the same with NAT event logging on: every session (and its mapping) an IPFIX record to a socat sink on the DUT's loopback (`[logging] events = "sessions"`) |
//! | xlat-nat44-pba-log | xlat-nat44-log with port blocks of 512 (`port_block_size`) logged one record a block (`events = "port-blocks"`) |
//! | xlat-nat64-xdp | xlat-nat64 with the same fast path (IPv6<->IPv4 header swap in XDP) |
//! | xlat-nat44-xdp | the same with `[dataplane] fast_path = "xdp"` on the DUT's two ports: established flows are rewritten by the XDP program, the rest crosses the TUN |
//! | xlat-nat44-xdp-afxdp | xlat-nat44-xdp's recipes with the AF_XDP slow path for the rest, no policer |
//! | xlat-nat44-afxdp, xlat-nat64-afxdp, xlat-siit-afxdp | xlat-nat44, xlat-nat64, xlat-siit with `[dataplane] slow_path = "af_xdp"` on the DUT's two ports (no recipes): every packet the engine translates comes from an AF_XDP socket and leaves through one, not the TUN |
//! | tayga-nat64 | TAYGA, prefix 2001:2:0:64::/96, dynamic pool 198.19.1.0/24 (S2's NAT64) |
//! | xlat-nat64 | `xlat run` with stateful NAT64, the same prefix, pool4 198.19.4.0/24 |
//! | xlat-siit | `xlat run` with SIIT: the same prefix, an EAM 198.19.2.0/24 = 2001:2:0:1::1:0/120 |
//! | xlat-siit-xdp | xlat-siit with `[dataplane] fast_path = "xdp"`: SIIT's address-pair recipes rewrite TCP/UDP in XDP (issue 25), the rest crosses the TUN |
//! | xlat-6to4 | `xlat run` as a 6to4 relay router on 198.18.0.1 (RFC 3056): the tester's inside hosts are 6to4 sites |
//! | xlat-6to4-xdp | xlat-6to4 with `[dataplane] fast_path = "xdp"`: the XDP program encapsulates and decapsulates 6to4 from the endpoint's configuration (issue 25) |
//! | xlat-isatap | `xlat run` as an ISATAP router on 198.18.0.1, prefix 2001:2:0:5::/64 (RFC 5214): the inside hosts are ISATAP hosts |
//! | xlat-isatap-xdp | xlat-isatap with `[dataplane] fast_path = "xdp"`: the XDP program encapsulates and decapsulates for the ISATAP router from its configuration (issue 25) |
//!
//! The tunnel devices take IPv6 in IPv4 protocol 41 on the inside port, from the tester acting
//! as the far tunnel endpoint (S2's client was the tunnel host, its router the endpoint), and
//! forward the decapsulated IPv6 natively to the outside port: one DUT, one endpoint's work
//! per packet (steering, the RFC 3964 / RFC 5214 7.3 checks, decapsulation), as NAT64 does
//! one translation per packet.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::addressing::{
    A6_ADDR, A_ADDR, D6_ADDR, D_ADDR, INSIDE4, ISATAP_PREFIX, POOL, PREF64, SIIT_EAM4, SIIT_EAM6,
    TAYGA_POOL, TUNNEL_ENDPOINT,
};
use crate::packet::Flow;
use crate::sys;
use crate::topo::Topo;

/// One device `--devices` accepts: its name, what `xlat lab list` says of it, and its adapter.
pub struct DeviceDef {
    pub name: &'static str,
    pub about: &'static str,
    /// Builds the adapter (not yet set up).
    pub make: fn() -> Result<Box<dyn Device>>,
}

/// Every device, in the order `xlat lab list` shows them: the one place a device is named.
pub const DEVICES: &[DeviceDef] = &[
    DeviceDef {
        name: "forward4",
        about: "kernel IPv4 routing, no NAT (baseline)",
        make: || Ok(Box::new(Forward { v6: false })),
    },
    DeviceDef {
        name: "kernel-nat44",
        about: "nftables SNAT + conntrack",
        make: || Ok(Box::new(KernelNat44 { heavy: false })),
    },
    DeviceDef {
        name: "kernel-nat44-heavy",
        about: "nftables SNAT + conntrack + a distribution-style firewall ruleset",
        make: || Ok(Box::new(KernelNat44 { heavy: true })),
    },
    DeviceDef {
        name: "xlat-nat44",
        about: "xlat run (NAPT, TUN driver)",
        make: || Ok(Box::new(Daemon::xlat())),
    },
    DeviceDef {
        name: "xlat-nat44-segments",
        about: "xlat-nat44 with [tun] offload = false: every TCP segment crosses the TUN device on its own (no super-packets)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatSegments,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat44-log",
        about: "xlat-nat44 with NAT event logging on ([logging] events = \"sessions\", IPFIX to a collector on the DUT's loopback): what logging every session costs",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatLog,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat44-pba-log",
        about: "xlat-nat44-log with port blocks ([nat44] port_block_size = 512) logged one IPFIX record a block ([logging] events = \"port-blocks\"): the log volume port blocks save",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatPbaLog,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat44-2w",
        about: "xlat-nat44 on two packet workers ([dataplane] workers = 2: a two-queue TUN device, packets handed between workers), both on the DUT CPU",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::Xlat2w,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat44-xdp",
        about: "xlat run (NAPT) with the XDP fast path on the DUT's ports (established flows in XDP)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatXdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat44-afxdp",
        about: "xlat run (NAPT) with the AF_XDP slow path on the DUT's ports (no recipes: every packet through AF_XDP sockets, not the TUN)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatAfxdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat44-xdp-afxdp",
        about: "xlat run (NAPT) with the XDP fast path and the AF_XDP slow path for what has no recipe (no policer)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatXdpAfxdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat64-afxdp",
        about: "xlat run (stateful NAT64) with the AF_XDP slow path on the DUT's ports",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::Xlat64Afxdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-siit-afxdp",
        about: "xlat run (SIIT) with the AF_XDP slow path on the DUT's ports",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatSiitAfxdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "forward6",
        about: "kernel IPv6 routing, no translation (baseline)",
        make: || Ok(Box::new(Forward { v6: true })),
    },
    DeviceDef {
        name: "forward4-softirq",
        about: "forward4 with the DUT's ports in veth's default receive mode (softirq on the sender's CPU)",
        make: || softirq("forward4-softirq"),
    },
    DeviceDef {
        name: "kernel-nat44-softirq",
        about: "kernel-nat44 with the DUT's ports in veth's default receive mode",
        make: || softirq("kernel-nat44-softirq"),
    },
    DeviceDef {
        name: "forward6-softirq",
        about: "forward6 with the DUT's ports in veth's default receive mode",
        make: || softirq("forward6-softirq"),
    },
    DeviceDef {
        name: "xlat-nat44-xdp-softirq",
        about: "xlat-nat44-xdp with the DUT's ports in veth's default receive mode (XDP in softirq on the sender's CPU)",
        make: || softirq("xlat-nat44-xdp-softirq"),
    },
    DeviceDef {
        name: "xlat-nat64-xdp-softirq",
        about: "xlat-nat64-xdp with the DUT's ports in veth's default receive mode",
        make: || softirq("xlat-nat64-xdp-softirq"),
    },
    DeviceDef {
        name: "tayga-nat64",
        about: "TAYGA stateless NAT64 with a dynamic pool (TUN)",
        make: || Ok(Box::new(Daemon::tayga())),
    },
    DeviceDef {
        name: "xlat-nat64",
        about: "xlat run (stateful NAT64, TUN driver)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::Xlat64,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat64-segments",
        about: "xlat-nat64 with [tun] offload = false: every TCP segment crosses the TUN device on its own (no super-packets)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::Xlat64Segments,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-nat64-xdp",
        about: "xlat run (stateful NAT64) with the XDP fast path on the DUT's ports",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::Xlat64Xdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-siit",
        about: "xlat run (stateless SIIT with an EAM for the tester's hosts, TUN driver)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatSiit,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-siit-xdp",
        about: "xlat run (SIIT) with the XDP fast path on the DUT's ports (address-pair recipes in XDP)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatSiitXdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-6to4",
        about: "xlat run (6to4 relay router: IPv6 in IPv4 protocol 41 from 6to4 sites, TUN driver)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::Xlat6to4,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-6to4-xdp",
        about: "xlat run (6to4 relay router) with the XDP fast path on the DUT's ports (encapsulation and decapsulation in XDP)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::Xlat6to4Xdp,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-isatap",
        about: "xlat run (ISATAP router: IPv6 in IPv4 protocol 41 from ISATAP hosts, TUN driver)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatIsatap,
            ..Daemon::xlat()
        })),
    },
    DeviceDef {
        name: "xlat-isatap-xdp",
        about: "xlat run (ISATAP router) with the XDP fast path on the DUT's ports (encapsulation and decapsulation in XDP)",
        make: || Ok(Box::new(Daemon {
            kind: DaemonKind::XlatIsatapXdp,
            ..Daemon::xlat()
        })),
    },
];

/// Memory held by the device, with what was measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Memory {
    pub bytes: u64,
    pub source: String,
}

/// A device under test.
pub trait Device {
    fn name(&self) -> &'static str;
    /// Does the tester send IPv6 on the inside port?
    fn v6_in(&self) -> bool {
        false
    }
    /// Flows for `n` sessions (seeded: different seeds give new sessions).
    fn flows(&self, n: u32, seed: u32) -> Vec<Flow> {
        self.flows_at(0, n, seed)
    }
    /// Flows `first..first + n` of the same sequence (churn: flows never sent before).
    fn flows_at(&self, first: u32, n: u32, seed: u32) -> Vec<Flow> {
        crate::packet::flows_v4_at(first, n, seed, D_ADDR.octets())
    }
    /// Flows of the return direction, sent on the tester's outside port to the inside
    /// (`cpu-return`), for devices that forward them with no session made from the inside
    /// first: plain IPv6 forwarding and the 6to4 and ISATAP endpoints (their encapsulation).
    /// None for the others.
    fn return_flows(&self, _n: u32, _seed: u32) -> Option<Vec<Flow>> {
        None
    }
    fn setup(&mut self, topo: &Topo) -> Result<()>;
    fn teardown(&mut self, topo: &Topo);
    /// Processes whose CPU time and memory belong to the device.
    fn pids(&self) -> Vec<i32> {
        Vec::new()
    }
    fn memory(&self, topo: &Topo) -> Option<Memory>;
    fn sessions(&self, topo: &Topo) -> Option<u64>;
    fn version(&self) -> String;
    /// Is the device still alive (processes running)?
    fn check_alive(&mut self) -> Result<()> {
        Ok(())
    }
    /// A counter of the device's XDP fast path by name, as `xlat show stats` lists it (None:
    /// no fast path, or no such counter).
    fn fast_path_counter(&self, _name: &str) -> Option<u64> {
        None
    }
    /// A counter of the daemon's packet workers by name, summed over them (`xlat show stats`'
    /// `workers[].counters`, e.g. `afxdp_kernel_drops`; None: not an xlat device, or no such
    /// counter).
    fn worker_counter(&self, _name: &str) -> Option<u64> {
        None
    }
    /// A counter of the device's NAT event log by name (`xlat show stats`' "log" list, e.g.
    /// `ipfix_records_sent`; None: no such log).
    fn log_counter(&self, _name: &str) -> Option<u64> {
        None
    }
    /// Frames the XDP fast path rewrote and redirected so far (None: no fast path).
    fn fast_path_redirected(&self) -> Option<u64> {
        self.fast_path_counter("xdp_redirected")
    }
    /// Does the device's receive work run on the sending CPU (veth's default mode, no NAPI
    /// thread)? Its cost is then measured by difference (see `SoftirqRx`).
    fn rx_on_sender(&self) -> bool {
        false
    }
    /// An `xlat run` device's configuration file and control socket, once set up (the reload
    /// experiment rewrites the one and asks the other); None for other devices.
    fn xlat_files(&self) -> Option<(PathBuf, PathBuf)> {
        None
    }
}

/// Builds a device adapter by name.
pub fn make(name: &str) -> Result<Box<dyn Device>> {
    match DEVICES.iter().find(|d| d.name == name) {
        Some(d) => (d.make)(),
        None => bail!(
            "unknown device {name:?}; known: {}",
            DEVICES
                .iter()
                .map(|d| d.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `name` (a `-softirq` device) as its inner device in veth's default receive mode.
fn softirq(name: &'static str) -> Result<Box<dyn Device>> {
    Ok(Box::new(SoftirqRx {
        inner: make(name.trim_end_matches("-softirq"))?,
        name,
    }))
}

/// A kernel device with the DUT's ports in veth's default receive mode: no GRO (so no NAPI),
/// no threaded NAPI, no RPS. veth then hands each frame to the receiving port's backlog on the
/// CPU that sent it, so the device's routing and NAT run in softirq on the tester's CPU, next
/// to the tester's own work, and the DUT CPU sees none of it. What can be measured is the
/// whole: (tester CPU + the device's DUT CPU time) per packet, minus the tester's own per
/// packet sent to itself (CA -> CD) at the same rate right after; the experiments do that for
/// devices whose [`Device::rx_on_sender`] is true. The DUT's ports go back to threaded NAPI
/// when the device is torn down. An XDP device still gets NAPI on its ports (veth runs XDP
/// only there), but not threaded: its program runs in softirq on the sending CPU, like the
/// kernel's work here, and its daemon (the slow path) stays on the DUT CPU.
struct SoftirqRx {
    inner: Box<dyn Device>,
    name: &'static str,
}

impl Device for SoftirqRx {
    fn name(&self) -> &'static str {
        self.name
    }
    fn v6_in(&self) -> bool {
        self.inner.v6_in()
    }
    fn flows_at(&self, first: u32, n: u32, seed: u32) -> Vec<Flow> {
        self.inner.flows_at(first, n, seed)
    }
    fn return_flows(&self, n: u32, seed: u32) -> Option<Vec<Flow>> {
        self.inner.return_flows(n, seed)
    }
    fn setup(&mut self, topo: &Topo) -> Result<()> {
        topo.dut_rx_softirq()?;
        self.inner.setup(topo)
    }
    fn teardown(&mut self, topo: &Topo) {
        self.inner.teardown(topo);
        if let Err(e) = topo.dut_rx_threaded() {
            eprintln!("warning: the DUT's ports did not go back to threaded NAPI: {e:#}");
        }
    }
    fn memory(&self, topo: &Topo) -> Option<Memory> {
        self.inner.memory(topo)
    }
    fn sessions(&self, topo: &Topo) -> Option<u64> {
        self.inner.sessions(topo)
    }
    fn version(&self) -> String {
        self.inner.version()
    }
    fn pids(&self) -> Vec<i32> {
        self.inner.pids()
    }
    fn check_alive(&mut self) -> Result<()> {
        self.inner.check_alive()
    }
    fn fast_path_counter(&self, name: &str) -> Option<u64> {
        self.inner.fast_path_counter(name)
    }
    fn worker_counter(&self, name: &str) -> Option<u64> {
        self.inner.worker_counter(name)
    }
    fn log_counter(&self, name: &str) -> Option<u64> {
        self.inner.log_counter(name)
    }
    fn rx_on_sender(&self) -> bool {
        true
    }
    fn xlat_files(&self) -> Option<(PathBuf, PathBuf)> {
        self.inner.xlat_files()
    }
}

fn kernel_version() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| "Linux".into())
}

struct Forward {
    v6: bool,
}

impl Device for Forward {
    fn name(&self) -> &'static str {
        if self.v6 {
            "forward6"
        } else {
            "forward4"
        }
    }
    fn v6_in(&self) -> bool {
        self.v6
    }
    fn flows_at(&self, first: u32, n: u32, seed: u32) -> Vec<Flow> {
        if self.v6 {
            crate::packet::flows_v6_at(first, n, seed, D6_ADDR.octets())
        } else {
            crate::packet::flows_v4_at(first, n, seed, D_ADDR.octets())
        }
    }
    fn return_flows(&self, n: u32, seed: u32) -> Option<Vec<Flow>> {
        self.v6
            .then(|| crate::packet::flows_v6_return(n, seed, A6_ADDR.octets()))
    }
    fn setup(&mut self, _topo: &Topo) -> Result<()> {
        Ok(())
    }
    fn teardown(&mut self, _topo: &Topo) {}
    fn memory(&self, _topo: &Topo) -> Option<Memory> {
        None
    }
    fn sessions(&self, _topo: &Topo) -> Option<u64> {
        None
    }
    fn version(&self) -> String {
        kernel_version()
    }
}

struct KernelNat44 {
    heavy: bool,
}

/// SNAT of the inside range to the pool on the outside port.
pub fn nat_ruleset(out_dev: &str) -> String {
    format!(
        "table ip labnat {{\n\
         \tchain postrouting {{\n\
         \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\tip saddr {inside4} oifname \"{out_dev}\" snat to {range}\n\
         \t}}\n\
         }}\n",
        inside4 = INSIDE4,
        range = POOL.range(),
    )
}

/// A distribution-style firewall in front of the NAT: raw, mangle, filter (input, forward
/// with sets, jumps and conntrack state), a DNAT port forward and an IPv6 table. Every
/// forwarded test packet walks the prerouting, forward and postrouting hooks of several tables.
pub fn heavy_ruleset(in_dev: &str, out_dev: &str) -> String {
    format!(
        r#"table inet labfw {{
	set blocklist4 {{
		type ipv4_addr
		flags interval
		elements = {{ 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 }}
	}}
	set mgmt_ports {{
		type inet_service
		elements = {{ 22, 53, 80, 443, 8080 }}
	}}
	chain raw_prerouting {{
		type filter hook prerouting priority raw; policy accept;
		iifname "lo" accept
		fib saddr . iif oif missing drop
		ip saddr @blocklist4 drop
	}}
	chain mangle_prerouting {{
		type filter hook prerouting priority mangle; policy accept;
		meta mark set ct mark
		ip dscp cs1 meta priority set 1:1
	}}
	chain input {{
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		ct state invalid drop
		iifname "lo" accept
		meta l4proto icmp accept
		meta l4proto ipv6-icmp accept
		tcp dport @mgmt_ports accept
		udp dport 67 accept
		counter drop
	}}
	chain forward {{
		type filter hook forward priority filter; policy drop;
		ct state invalid drop
		ip daddr @blocklist4 drop
		ct state established,related accept
		iifname "{in_dev}" oifname "{out_dev}" jump inside_out
		iifname "{out_dev}" oifname "{in_dev}" ct status dnat accept
		counter drop
	}}
	chain inside_out {{
		ip saddr != 198.18.0.0/16 drop
		meta l4proto tcp tcp flags & (fin | syn | rst | ack) == syn accept
		meta l4proto {{ udp, icmp }} accept
		counter drop
	}}
	chain output {{
		type filter hook output priority filter; policy accept;
	}}
	chain mangle_postrouting {{
		type filter hook postrouting priority mangle; policy accept;
		ct mark set meta mark
	}}
}}
table ip labdnat {{
	chain prerouting {{
		type nat hook prerouting priority dstnat; policy accept;
		iifname "{out_dev}" tcp dport 8080 dnat to 198.18.0.50:80
	}}
}}
"#
    )
}

impl Device for KernelNat44 {
    fn name(&self) -> &'static str {
        if self.heavy {
            "kernel-nat44-heavy"
        } else {
            "kernel-nat44"
        }
    }
    fn setup(&mut self, topo: &Topo) -> Result<()> {
        let mut rs = nat_ruleset(&topo.ud.dev);
        if self.heavy {
            rs.push_str(&heavy_ruleset(&topo.ua.dev, &topo.ud.dev));
        }
        sys::nft_load(&topo.ns_dut, &rs, &topo.dir)?;
        Ok(())
    }
    fn teardown(&mut self, topo: &Topo) {
        let _ = topo.dut(&["nft", "flush", "ruleset"]);
        let _ = topo.dut(&["conntrack", "-F"]);
    }
    fn memory(&self, _topo: &Topo) -> Option<Memory> {
        // The conntrack slab is machine-wide: the baseline taken before the sessions exist
        // removes other namespaces' entries, as long as they do not change meanwhile.
        let (active, objsize) = sys::slab_bytes("nf_conntrack")?;
        Some(Memory {
            bytes: active * objsize,
            source: format!(
                "nf_conntrack slab, active objects x {objsize} B (/proc/slabinfo); NAT extensions and the hash table are not included"
            ),
        })
    }
    fn sessions(&self, topo: &Topo) -> Option<u64> {
        topo.dut_read("/proc/sys/net/netfilter/nf_conntrack_count")?
            .trim()
            .parse()
            .ok()
    }
    fn version(&self) -> String {
        let nft = sys::cmd(5, &["nft", "--version"])
            .map(|o| o.stdout.trim().to_string())
            .unwrap_or_default();
        format!("{}, {nft}", kernel_version())
    }
}

/// A device that is a process: xlat or TAYGA.
struct Daemon {
    kind: DaemonKind,
    child: Option<Child>,
    socket: PathBuf,
    config: PathBuf,
    log: PathBuf,
    extra_routes: Vec<Vec<String>>,
    /// xlat-nat44-log's IPFIX collector: a UDP sink in the DUT's namespace, on the
    /// tester's CPU (the device pays for encoding and sending, not for receiving).
    sink: Option<Child>,
}

#[derive(Clone, Copy, PartialEq)]
enum DaemonKind {
    Xlat,
    /// NAT44 with `[tun] offload = false`.
    XlatSegments,
    /// NAT64 with `[tun] offload = false`.
    Xlat64Segments,
    /// NAT44 with every session logged as IPFIX ([`LOG_COLLECTOR`]).
    XlatLog,
    /// NAT44 with port blocks, each block logged as IPFIX.
    XlatPbaLog,
    /// NAT44 on two packet workers.
    Xlat2w,
    /// NAT44 with `[dataplane] fast_path = "xdp"` on the DUT's two ports.
    XlatXdp,
    /// NAT64 with the same fast path.
    Xlat64Xdp,
    /// NAT44, NAT64, SIIT with `[dataplane] slow_path = "af_xdp"` (no recipes).
    XlatAfxdp,
    /// NAT44 with the fast path's recipes and the AF_XDP slow path.
    XlatXdpAfxdp,
    Xlat64Afxdp,
    XlatSiitAfxdp,
    /// SIIT with the fast path's address-pair recipes.
    XlatSiitXdp,
    Xlat64,
    XlatSiit,
    Xlat6to4,
    /// 6to4 with the XDP fast path (no recipes: the endpoint's configuration).
    Xlat6to4Xdp,
    XlatIsatap,
    /// ISATAP router with the XDP fast path (no recipes: the router's configuration).
    XlatIsatapXdp,
    Tayga,
}

impl DaemonKind {
    /// Is this `xlat run` (not TAYGA)?
    fn is_xlat(self) -> bool {
        self != DaemonKind::Tayga
    }
    /// Is it xlat's NAT44 (IPv4 in on the inside)?
    fn is_nat44(self) -> bool {
        matches!(
            self,
            DaemonKind::Xlat
                | DaemonKind::XlatSegments
                | DaemonKind::XlatLog
                | DaemonKind::XlatPbaLog
                | DaemonKind::Xlat2w
                | DaemonKind::XlatXdp
                | DaemonKind::XlatAfxdp
                | DaemonKind::XlatXdpAfxdp
        )
    }
    /// Does it run the XDP program (the fast path's recipes or the AF_XDP slow path's
    /// redirect)?
    fn is_xdp(self) -> bool {
        matches!(
            self,
            DaemonKind::XlatXdp
                | DaemonKind::Xlat64Xdp
                | DaemonKind::XlatAfxdp
                | DaemonKind::XlatXdpAfxdp
                | DaemonKind::Xlat64Afxdp
                | DaemonKind::XlatSiitAfxdp
                | DaemonKind::XlatSiitXdp
                | DaemonKind::Xlat6to4Xdp
                | DaemonKind::XlatIsatapXdp
        )
    }
}

/// `[dataplane]` of the AF_XDP devices: the slow path on the DUT's two ports, no recipes, no
/// policer (as xlat-nat44 over the TUN device, which it replaces).
fn dataplane_afxdp(topo: &Topo) -> String {
    format!(
        "\n[dataplane]\nslow_path = \"af_xdp\"\ninterfaces = [\"{}\", \"{}\"]\n",
        topo.ua.dev, topo.ud.dev
    )
}

/// `[dataplane]` of the XDP devices: the fast path on the DUT's two ports, room for 4M
/// sessions, and the slow path policed at [`XDP_SLOW_PATH_PPS`].
fn dataplane_xdp(topo: &Topo) -> String {
    format!(
        "\n[dataplane]\nfast_path = \"xdp\"\ninterfaces = [\"{}\", \"{}\"]\n{LAB_TABLE_SIZE}slow_path_pps = {XDP_SLOW_PATH_PPS}\n{}",
        topo.ua.dev,
        topo.ud.dev,
        workers_line(topo)
    )
}

/// `workers = N` for `[dataplane]` when the device has several cores ([`Topo::set_dut_cores`],
/// `--dut-cpus`): one packet worker per core; nothing on one core (the default, 1).
fn workers_line(topo: &Topo) -> String {
    match topo.cores.borrow().workers {
        0 | 1 => String::new(),
        w => format!("workers = {w}\n"),
    }
}

/// The XDP devices' slow-path policer (packets a second). Their daemon runs one real-time
/// priority above the DUT's receive threads (see `Daemon::spawn`), so what the policer lets
/// through is what the daemon may take of the DUT core: 100,000 new flows/s at about 4 us
/// each in the daemon is under half of it, and the receive thread keeps the rest for the
/// established flows. Measured (churn, 2026-11-26, busy machine): at 100,000 / 200,000 /
/// 400,000 new flows/s offered it delivered 99,980 / 100,972 / 102,058 new flows/s and lost
/// 0.019 / 1.7 / 4.0 % of the established frames (kernel-nat44 in the same run: 0.026 /
/// 0.056 / 25 %); at 150,000 the established flows lost 10-38 % at 200,000/s. The price is
/// the setup rate: the policer's 100,000/s (at 50,000, until 2026-11-26, setup-rate
/// measured the policer at 50,550/s).
pub const XDP_SLOW_PATH_PPS: u32 = 100_000;

/// The ISATAP prefix's first 64 bits, as the tester builds its hosts' addresses.
const ISATAP_PREFIX64: [u8; 8] = {
    let o = ISATAP_PREFIX.addr.octets();
    [o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]]
};

/// The tester's tunnel hosts for a tunnel device (None for other devices).
pub fn tunnel_of(device: &str) -> Option<crate::packet::Tunnel6in4> {
    match device {
        "xlat-6to4" | "xlat-6to4-xdp" => Some(crate::packet::Tunnel6in4::SixToFour),
        "xlat-isatap" | "xlat-isatap-xdp" => Some(crate::packet::Tunnel6in4::Isatap {
            prefix64: ISATAP_PREFIX64,
        }),
        _ => None,
    }
}

/// Where xlat-nat44-log sends its IPFIX: a sink on the DUT namespace's loopback.
const LOG_COLLECTOR: &str = "127.0.0.1:4739";

/// xlat-nat44-log's collector: socat reading and discarding [`LOG_COLLECTOR`]'s datagrams in
/// the DUT's namespace, pinned to the tester's CPU.
fn log_sink(topo: &Topo) -> Result<Child> {
    if !sys::have("socat") {
        bail!("xlat-nat44-log needs socat for its IPFIX collector: apt-get install socat");
    }
    let cpu = topo.tester_cpu.to_string();
    Command::new("ip")
        .args(["netns", "exec", &topo.ns_dut, "taskset", "-c", &cpu])
        .args([
            "socat",
            "-u",
            "UDP4-RECV:4739,bind=127.0.0.1,rcvbuf=8388608",
            "/dev/null",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the IPFIX sink (socat) of xlat-nat44-log")
}

/// The `xlat` binary: next to the running executable (cargo puts test binaries one level
/// down, in deps/, so the parent directory is tried too), or XLAT_BIN.
pub fn xlat_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("XLAT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    let mut tried = Vec::new();
    let mut dir = exe.parent().map(|p| p.to_path_buf());
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let c = d.join("xlat");
        if c.is_file() {
            return Ok(c);
        }
        tried.push(c.display().to_string());
        dir = d.parent().map(|p| p.to_path_buf());
    }
    bail!(
        "cannot find the xlat binary (tried {}); build it (cargo build --release -p xlat) or set XLAT_BIN",
        tried.join(", ")
    )
}

impl Daemon {
    fn xlat() -> Daemon {
        Daemon {
            kind: DaemonKind::Xlat,
            child: None,
            socket: PathBuf::new(),
            config: PathBuf::new(),
            log: PathBuf::new(),
            extra_routes: Vec::new(),
            sink: None,
        }
    }
    fn tayga() -> Daemon {
        Daemon {
            kind: DaemonKind::Tayga,
            ..Daemon::xlat()
        }
    }

    fn spawn(&mut self, topo: &Topo, args: &[String]) -> Result<()> {
        let log = topo.dir.join(format!("{}.log", self.name()));
        let f = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let f2 = f.try_clone().context("log file")?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &topo.ns_dut])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .env("RUST_LOG", "warn");
        let cpus = topo.device_cpus();
        // A device's daemon (xlat, TAYGA) runs one real-time priority above the DUT's receive
        // threads ([`sys::RT_PRIO_SLOW_PATH`]): a real-time thread never yields to one of its
        // own or a lower priority, so below or beside them the daemon got no CPU whenever more
        // frames arrived than the receive thread could take, and its path collapsed. Measured
        // 2026-11-26 (setup-rate, 64 B): the XDP device one below delivered 769-1,734 new
        // sessions/s at 0.77-1.5M offered, one above 151,000/s at 1.7M; the TUN device beside
        // them 607/s at 1.2M, one above 281,900/s at 1.8M, and its loss-free setup rate went
        // 170,717 -> 273,388/s (kernel-nat44 180,201 / 244,610 in the same runs) at the same
        // CPU per packet (cpu at 100,000 pps: 4,360 / 4,272 ns). Above them, the daemon
        // preempts the receive work when it has packets; an XDP device's policer
        // ([`XDP_SLOW_PATH_PPS`]) bounds how much that can be.
        let rt = sys::RT_PRIO_SLOW_PATH;
        // SAFETY: the closure only calls sched_setaffinity and sched_setscheduler (plain
        // syscalls) between fork and exec; the DUT process and its threads inherit both.
        unsafe {
            c.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &cpu in &cpus {
                    libc::CPU_SET(cpu, &mut set);
                }
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                let p = libc::sched_param { sched_priority: rt };
                libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
                Ok(())
            });
        }
        let child = c
            .spawn()
            .with_context(|| format!("starting {}", args.join(" ")))?;
        self.child = Some(child);
        self.log = log;
        Ok(())
    }

    fn log_tail(&self) -> String {
        let t = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn xlat_stats(&self) -> Option<serde_json::Value> {
        let bin = xlat_bin().ok()?;
        let sock = self.socket.display().to_string();
        let b = bin.display().to_string();
        let o = sys::cmd(10, &[&b, "show", "stats", "--json", "--socket", &sock]).ok()?;
        if !o.ok {
            return None;
        }
        serde_json::from_str(&o.stdout).ok()
    }

    fn wait_ready(&mut self, topo: &Topo) -> Result<()> {
        let start = Instant::now();
        let limit = Duration::from_secs(15);
        for _ in 0..300 {
            self.check_alive()?;
            let ready = match self.kind {
                k if k.is_xlat() => self.socket.exists() && self.xlat_stats().is_some(),
                _ => sys::ns_ok(
                    &topo.ns_dut,
                    &[
                        "ip",
                        "-o",
                        "link",
                        "show",
                        "dev",
                        &tun_name(topo, self.kind),
                    ],
                )
                .map(|s| s.contains("UP") || s.contains("UNKNOWN"))
                .unwrap_or(false),
            };
            if ready {
                return Ok(());
            }
            if start.elapsed() > limit || sys::stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "{} not ready after {limit:?}; log:\n{}",
            self.name(),
            self.log_tail()
        )
    }
}

/// Kernel memory of the BPF maps a process holds: the `memlock` line of each map descriptor's
/// fdinfo (the kernel's own accounting of the map's memory since Linux 6.4).
fn bpf_map_memory(pid: i32) -> u64 {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .filter(|t| t.contains("map_type:"))
        .filter_map(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("memlock:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

fn tun_name(topo: &Topo, kind: DaemonKind) -> String {
    match kind {
        DaemonKind::Tayga => format!("{}t", topo.id),
        _ => format!("{}x", topo.id),
    }
}

/// `cfg` ([`lab_config`]) with the TUN device's kernel offloads off (`[tun] offload =
/// false`): the path every TCP segment took before super-packets.
fn without_offloads(cfg: &str) -> String {
    cfg.replacen(
        "auto_routes = true\n",
        "auto_routes = true\noffload = false\n",
        1,
    )
}

/// An `xlat run` configuration for the lab: the TUN device, `sections` (the translator), the
/// control socket and a fixed seed (runs repeat).
fn lab_config(tun: &str, socket: &str, sections: &str) -> String {
    format!(
        r#"# written by xlat lab
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

{sections}
[control]
socket = "{socket}"

[engine]
seed = 1
"#
    )
}

/// Sessions an xlat device of the lab holds unless an experiment asks for more
/// ([`Topo::session_capacity`]): enough for every experiment but RFC 9693's 10M tables, and
/// small enough that a daemon started for each setup-rate trial prefaults quickly.
pub const LAB_MAX_SESSIONS: u64 = 4_000_000;

/// Session limits high enough for the session experiments, the tables made resident at start
/// (`prefault`: no packet waits for the kernel to zero a huge page; measured: 100,000 new flows
/// at 20,000/s lost 0.1-6% without, none with). memory-per-session turns it off.
const LAB_LIMITS: &str =
    "[limits]\nmax_sessions = 4000000\nmax_sessions_per_host = 4000000\nprefault = true\n";

/// The XDP devices' recipe tables: two recipes a session of [`LAB_MAX_SESSIONS`].
const LAB_TABLE_SIZE: &str = "table_size = 8388608\n";

/// `config` (the lab's, with its `[limits]` and maybe its XDP `table_size` line) sized for
/// `sessions`: `max_sessions` and, for an XDP device, recipe tables of two entries a session
/// (a power of two, as the kernel sizes a hash map's buckets). Unchanged at the lab's default.
pub(crate) fn with_capacity(config: &str, sessions: u64) -> String {
    if sessions == LAB_MAX_SESSIONS {
        return config.to_string();
    }
    let table = (sessions * 2).next_power_of_two();
    config
        .replace(
            "max_sessions = 4000000\n",
            &format!("max_sessions = {sessions}\n"),
        )
        .replace(LAB_TABLE_SIZE, &format!("table_size = {table}\n"))
}

/// The lab's xlat configuration: NAPT of the tester's inside range over the pool,
/// endpoint-independent filtering, limits high enough for the session experiments.
pub fn xlat_config(tun: &str, socket: &str) -> String {
    xlat_config_with(tun, socket, "")
}

/// [`xlat_config`] with more `[nat44]` keys (`extra`: whole lines).
fn xlat_config_with(tun: &str, socket: &str, extra: &str) -> String {
    let nat44 = format!(
        r#"[nat44]
inside = ["{INSIDE4}"]
pool = ["{POOL}"]
mode = "napt"
filtering = "endpoint-independent"
ports = "1024-65535"
{extra}
{LAB_LIMITS}"#
    );
    lab_config(tun, socket, &nat44)
}

/// The lab's xlat NAT64 configuration: the same prefix as TAYGA's, pool4 = the NAT pool.
pub fn xlat64_config(tun: &str, socket: &str) -> String {
    let nat64 = format!(
        r#"[nat64]
prefix = "{PREF64}"
pool4 = ["{POOL}"]
filtering = "endpoint-independent"

{LAB_LIMITS}"#
    );
    lab_config(tun, socket, &nat64)
}

/// The lab's SIIT configuration: destinations by the pref64, the tester's IPv6 hosts
/// (2001:2:0:1::1:N, flows::flows_v6) by an EAM to 198.19.2.N (RFC 7757).
pub fn siit_config(tun: &str, socket: &str) -> String {
    let siit = format!(
        r#"[siit]
prefix = "{PREF64}"
eam = [{{ ipv4 = "{SIIT_EAM4}", ipv6 = "{SIIT_EAM6}" }}]
"#
    );
    lab_config(tun, socket, &siit)
}

/// The lab's 6to4 endpoint: a relay router (RFC 3056 5) on the DUT's inside address, so that
/// the tester's inside hosts (6to4 sites 2002:V4ADDR::/48) reach the native IPv6 outside.
pub fn sixtofour_config(tun: &str, socket: &str) -> String {
    let [a, b, c, d] = TUNNEL_ENDPOINT.octets();
    let t = format!("[tunnel.6to4]\nipv4 = \"{a}.{b}.{c}.{d}\"\nrelay_router = true\n");
    lab_config(tun, socket, &t)
}

/// The lab's ISATAP endpoint: a router (RFC 5214 8.2) on the DUT's inside address advertising
/// 2001:2:0:5::/64 to the tester's inside hosts.
pub fn isatap_config(tun: &str, socket: &str) -> String {
    let [a, b, c, d] = TUNNEL_ENDPOINT.octets();
    let t = format!(
        "[tunnel.isatap]\nrole = \"router\"\nipv4 = \"{a}.{b}.{c}.{d}\"\nprefix = \"{ISATAP_PREFIX}\"\n"
    );
    lab_config(tun, socket, &t)
}

/// TAYGA as in S2: a NAT64 prefix (2001:2:0:64::/96, RFC 6052 3.1 forbids the well-known
/// prefix for these non-global addresses) and a dynamic IPv4 pool.
pub fn tayga_config(tun: &str, data_dir: &str) -> String {
    format!(
        "tun-device {tun}\n\
         ipv4-addr 198.19.1.1\n\
         ipv6-addr 2001:2:0:1::64\n\
         prefix {PREF64}\n\
         dynamic-pool {TAYGA_POOL}\n\
         data-dir {data_dir}\n"
    )
}

impl Device for Daemon {
    fn name(&self) -> &'static str {
        match self.kind {
            DaemonKind::Xlat => "xlat-nat44",
            DaemonKind::XlatSegments => "xlat-nat44-segments",
            DaemonKind::Xlat64Segments => "xlat-nat64-segments",
            DaemonKind::XlatLog => "xlat-nat44-log",
            DaemonKind::XlatPbaLog => "xlat-nat44-pba-log",
            DaemonKind::Xlat2w => "xlat-nat44-2w",
            DaemonKind::XlatXdp => "xlat-nat44-xdp",
            DaemonKind::Xlat64Xdp => "xlat-nat64-xdp",
            DaemonKind::XlatAfxdp => "xlat-nat44-afxdp",
            DaemonKind::XlatXdpAfxdp => "xlat-nat44-xdp-afxdp",
            DaemonKind::Xlat64Afxdp => "xlat-nat64-afxdp",
            DaemonKind::XlatSiitAfxdp => "xlat-siit-afxdp",
            DaemonKind::XlatSiitXdp => "xlat-siit-xdp",
            DaemonKind::Xlat64 => "xlat-nat64",
            DaemonKind::XlatSiit => "xlat-siit",
            DaemonKind::Xlat6to4 => "xlat-6to4",
            DaemonKind::Xlat6to4Xdp => "xlat-6to4-xdp",
            DaemonKind::XlatIsatap => "xlat-isatap",
            DaemonKind::XlatIsatapXdp => "xlat-isatap-xdp",
            DaemonKind::Tayga => "tayga-nat64",
        }
    }
    fn v6_in(&self) -> bool {
        !self.kind.is_nat44()
    }
    fn flows_at(&self, first: u32, n: u32, seed: u32) -> Vec<Flow> {
        match self.kind {
            DaemonKind::Xlat
            | DaemonKind::XlatSegments
            | DaemonKind::XlatLog
            | DaemonKind::XlatPbaLog
            | DaemonKind::Xlat2w
            | DaemonKind::XlatXdp
            | DaemonKind::XlatAfxdp
            | DaemonKind::XlatXdpAfxdp => {
                crate::packet::flows_v4_at(first, n, seed, D_ADDR.octets())
            }
            DaemonKind::Xlat6to4
            | DaemonKind::Xlat6to4Xdp
            | DaemonKind::XlatIsatap
            | DaemonKind::XlatIsatapXdp => {
                let t = tunnel_of(self.name()).unwrap_or(crate::packet::Tunnel6in4::SixToFour);
                let dst = D6_ADDR.octets();
                crate::packet::flows_6in4_at(first, n, seed, dst, TUNNEL_ENDPOINT.octets(), t)
            }
            DaemonKind::Tayga
            | DaemonKind::Xlat64
            | DaemonKind::Xlat64Segments
            | DaemonKind::Xlat64Xdp
            | DaemonKind::Xlat64Afxdp
            | DaemonKind::XlatSiitAfxdp
            | DaemonKind::XlatSiitXdp
            | DaemonKind::XlatSiit => {
                // RFC 6052 2.2: /96 prefix, IPv4 address in the last 32 bits.
                let mut dst = PREF64.addr.octets();
                dst[12..].copy_from_slice(&D_ADDR.octets());
                crate::packet::flows_v6_at(first, n, seed, dst)
            }
        }
    }
    /// The tunnel endpoints' encapsulation: native IPv6 from the outside to a host behind the
    /// tester's inside port as a tunnel end (6to4 site 2002:C612:0002::/48 or ISATAP host
    /// ::0:5efe:198.18.0.2), which the device sends on in IPv4 protocol 41 to 198.18.0.2.
    fn return_flows(&self, n: u32, seed: u32) -> Option<Vec<Flow>> {
        let t = tunnel_of(self.name())?;
        Some(crate::packet::flows_v6_return(
            n,
            seed,
            t.host(A_ADDR.octets()),
        ))
    }
    fn setup(&mut self, topo: &Topo) -> Result<()> {
        let tun = tun_name(topo, self.kind);
        match self.kind {
            k if k.is_xlat() => {
                let bin = xlat_bin()?;
                self.socket = topo.dir.join("xlat.sock");
                let cfg = topo.dir.join("xlat.toml");
                let sock = self.socket.display().to_string();
                let text = match self.kind {
                    DaemonKind::Xlat64 => xlat64_config(&tun, &sock),
                    DaemonKind::XlatSegments => without_offloads(&xlat_config(&tun, &sock)),
                    DaemonKind::Xlat64Segments => without_offloads(&xlat64_config(&tun, &sock)),
                    DaemonKind::XlatSiit => siit_config(&tun, &sock),
                    DaemonKind::Xlat6to4 => sixtofour_config(&tun, &sock),
                    DaemonKind::Xlat6to4Xdp => {
                        format!("{}{}", sixtofour_config(&tun, &sock), dataplane_xdp(topo))
                    }
                    DaemonKind::XlatIsatap => isatap_config(&tun, &sock),
                    DaemonKind::XlatIsatapXdp => {
                        format!("{}{}", isatap_config(&tun, &sock), dataplane_xdp(topo))
                    }
                    DaemonKind::XlatXdp => {
                        format!("{}{}", xlat_config(&tun, &sock), dataplane_xdp(topo))
                    }
                    DaemonKind::Xlat64Xdp => {
                        format!("{}{}", xlat64_config(&tun, &sock), dataplane_xdp(topo))
                    }
                    DaemonKind::XlatAfxdp => {
                        format!("{}{}", xlat_config(&tun, &sock), dataplane_afxdp(topo))
                    }
                    DaemonKind::XlatXdpAfxdp => format!(
                        "{}\n[dataplane]\nfast_path = \"xdp\"\nslow_path = \"af_xdp\"\ninterfaces = [\"{}\", \"{}\"]\n{LAB_TABLE_SIZE}",
                        xlat_config(&tun, &sock),
                        topo.ua.dev,
                        topo.ud.dev
                    ),
                    DaemonKind::Xlat64Afxdp => {
                        format!("{}{}", xlat64_config(&tun, &sock), dataplane_afxdp(topo))
                    }
                    DaemonKind::XlatSiitAfxdp => {
                        format!("{}{}", siit_config(&tun, &sock), dataplane_afxdp(topo))
                    }
                    DaemonKind::XlatSiitXdp => {
                        format!("{}{}", siit_config(&tun, &sock), dataplane_xdp(topo))
                    }
                    DaemonKind::Xlat2w => {
                        format!("{}\n[dataplane]\nworkers = 2\n", xlat_config(&tun, &sock))
                    }
                    DaemonKind::XlatLog => {
                        self.sink = Some(log_sink(topo)?);
                        format!(
                            "{}\n[logging]\nipfix = [\"{LOG_COLLECTOR}\"]\nevents = \"sessions\"\n",
                            xlat_config(&tun, &sock)
                        )
                    }
                    DaemonKind::XlatPbaLog => {
                        self.sink = Some(log_sink(topo)?);
                        format!(
                            "{}\n[logging]\nipfix = [\"{LOG_COLLECTOR}\"]\nevents = \"port-blocks\"\n",
                            xlat_config_with(&tun, &sock, "port_block_size = 512\n")
                        )
                    }
                    DaemonKind::Xlat if !workers_line(topo).is_empty() => format!(
                        "{}\n[dataplane]\n{}",
                        xlat_config(&tun, &sock),
                        workers_line(topo)
                    ),
                    _ => xlat_config(&tun, &sock),
                };
                if self.kind.is_xdp() {
                    // The tester's inside port gets the replies XDP redirects (tcp, owd): a
                    // veth delivers redirected frames only with NAPI running, which GRO turns on.
                    let _ = sys::cmd(
                        10,
                        &[
                            "ip",
                            "netns",
                            "exec",
                            &topo.ns_tester,
                            "ethtool",
                            "-K",
                            &topo.a.dev,
                            "gro",
                            "on",
                        ],
                    );
                }
                let text = if topo.lazy_tables.get() {
                    text.replace("prefault = true", "prefault = false")
                } else {
                    text
                };
                let text = with_capacity(&text, topo.session_capacity.get());
                let text = format!("{text}{}", topo.xlat_extra.borrow());
                fs::write(&cfg, text).with_context(|| format!("writing {}", cfg.display()))?;
                self.config = cfg.clone();
                let args = vec![
                    bin.display().to_string(),
                    "run".into(),
                    "-c".into(),
                    cfg.display().to_string(),
                ];
                self.spawn(topo, &args)?;
            }
            _ => {
                if !sys::have("tayga") {
                    bail!("tayga-nat64 needs TAYGA: apt-get install tayga");
                }
                let data = topo.dir.join("tayga");
                fs::create_dir_all(&data).context("tayga data dir")?;
                let cfg = topo.dir.join("tayga.conf");
                fs::write(&cfg, tayga_config(&tun, &data.display().to_string()))
                    .with_context(|| format!("writing {}", cfg.display()))?;
                let c = cfg.display().to_string();
                topo.dut(&["tayga", "-c", &c, "--mktun"])?;
                let (pool, pref64) = (TAYGA_POOL.to_string(), PREF64.to_string());
                for r in [
                    vec!["ip", "link", "set", &tun, "up"],
                    vec!["ip", "route", "add", &pool, "dev", &tun],
                    vec!["ip", "-6", "route", "add", &pref64, "dev", &tun],
                ] {
                    topo.dut(&r)?;
                }
                self.extra_routes.clear();
                let args = vec!["tayga".into(), "-c".into(), c, "--nodetach".into()];
                self.spawn(topo, &args)?;
            }
        }
        self.wait_ready(topo)?;
        if self.kind.is_xdp()
            && self
                .xlat_stats()
                .is_none_or(|s| s.get("fast_path").is_none())
        {
            bail!(
                "{}: the XDP fast path did not attach (needs clang-14 at build time and XDP on the DUT's veth); log:\n{}",
                self.name(),
                self.log_tail()
            );
        }
        Ok(())
    }
    fn teardown(&mut self, topo: &Topo) {
        if let Some(mut s) = self.sink.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            for _ in 0..100 {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                if start.elapsed() > Duration::from_secs(3) {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        }
        if self.kind == DaemonKind::Tayga {
            let tun = tun_name(topo, self.kind);
            let _ = topo.dut(&["ip", "link", "del", &tun]);
        }
        if self.kind.is_xdp() {
            let _ = sys::cmd(
                10,
                &[
                    "ip",
                    "netns",
                    "exec",
                    &topo.ns_tester,
                    "ethtool",
                    "-K",
                    &topo.a.dev,
                    "gro",
                    "off",
                ],
            );
        }
    }
    fn pids(&self) -> Vec<i32> {
        self.child.iter().map(|c| c.id() as i32).collect()
    }
    fn memory(&self, _topo: &Topo) -> Option<Memory> {
        let pid = *self.pids().first()?;
        let rss = sys::proc_rss(pid)?;
        if self.kind.is_xdp() {
            // The recipes live in kernel memory (BPF maps), which RSS does not count.
            let maps = bpf_map_memory(pid);
            return Some(Memory {
                bytes: rss + maps,
                source: format!(
                    "VmRSS of {} (pid {pid}) plus the memlock of its BPF maps ({maps} B)",
                    self.name()
                ),
            });
        }
        Some(Memory {
            bytes: rss,
            source: format!("VmRSS of {} (pid {pid})", self.name()),
        })
    }
    fn sessions(&self, _topo: &Topo) -> Option<u64> {
        match self.kind {
            // Tunnels keep no sessions.
            DaemonKind::Xlat6to4
            | DaemonKind::Xlat6to4Xdp
            | DaemonKind::XlatIsatap
            | DaemonKind::XlatIsatapXdp
            | DaemonKind::Tayga => None,
            _ => self.xlat_stats()?.get("sessions")?.as_u64(),
        }
    }
    fn version(&self) -> String {
        match self.kind {
            k if k.is_xlat() => xlat_bin()
                .ok()
                .and_then(|b| {
                    let b = b.display().to_string();
                    sys::cmd(5, &[&b, "--version"]).ok()
                })
                .map(|o| o.stdout.trim().to_string())
                .unwrap_or_else(|| "xlat".into()),
            _ => {
                let v = sys::cmd(5, &["dpkg-query", "-W", "-f", "${Version}", "tayga"])
                    .map(|o| o.stdout.trim().to_string())
                    .unwrap_or_default();
                format!("tayga {v}")
            }
        }
    }
    fn fast_path_counter(&self, name: &str) -> Option<u64> {
        if !self.kind.is_xdp() {
            return None;
        }
        self.xlat_stats()?
            .get("fast_path")?
            .get("counters")?
            .as_array()?
            .iter()
            .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(name))?
            .get("value")?
            .as_u64()
    }
    fn worker_counter(&self, name: &str) -> Option<u64> {
        if !self.kind.is_xlat() {
            return None;
        }
        let stats = self.xlat_stats()?;
        let found: Vec<u64> = stats
            .get("workers")?
            .as_array()?
            .iter()
            .filter_map(|w| w.get("counters")?.as_array())
            .flatten()
            .filter(|c| c.get("name").and_then(|n| n.as_str()) == Some(name))
            .filter_map(|c| c.get("value")?.as_u64())
            .collect();
        (!found.is_empty()).then(|| found.iter().sum())
    }
    fn log_counter(&self, name: &str) -> Option<u64> {
        if !matches!(self.kind, DaemonKind::XlatLog | DaemonKind::XlatPbaLog) {
            return None;
        }
        self.xlat_stats()?
            .get("log")?
            .as_array()?
            .iter()
            .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(name))?
            .get("value")?
            .as_u64()
    }
    fn xlat_files(&self) -> Option<(PathBuf, PathBuf)> {
        (self.kind.is_xlat() && self.child.is_some())
            .then(|| (self.config.clone(), self.socket.clone()))
    }
    fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                let tail = self.log_tail();
                self.child = None;
                bail!("{} exited ({st}); log:\n{tail}", self.name());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_builds_each_device_under_its_own_name() {
        let mut seen = std::collections::BTreeSet::new();
        for d in DEVICES {
            assert!(seen.insert(d.name), "{} listed twice", d.name);
            let dev = make(d.name).unwrap();
            assert_eq!(dev.name(), d.name);
            assert!(!d.about.is_empty());
        }
        assert_eq!(seen.len(), 29);
        assert!(make("forward5").is_err());
        // Every NAT44 device takes IPv4 on the inside.
        for n in [
            "xlat-nat44",
            "xlat-nat44-segments",
            "xlat-nat44-log",
            "xlat-nat44-pba-log",
            "xlat-nat44-2w",
            "xlat-nat44-xdp",
        ] {
            assert!(!make(n).unwrap().v6_in(), "{n}");
        }
        // The softirq devices wrap their inner device and keep its direction.
        assert!(make("forward6-softirq").unwrap().v6_in());
        assert!(make("xlat-nat64-segments").unwrap().v6_in());
        assert!(make("forward4-softirq").unwrap().rx_on_sender());
    }

    #[test]
    fn configurations_carry_the_addressing_plan() {
        assert!(nat_ruleset("ud")
            .contains("ip saddr 198.18.0.0/16 oifname \"ud\" snat to 198.19.4.0-198.19.4.255\n"));
        let x = xlat_config("t", "s");
        assert!(x.contains("inside = [\"198.18.0.0/16\"]\npool = [\"198.19.4.0/24\"]\n"));
        let x = xlat64_config("t", "s");
        assert!(x.contains("prefix = \"2001:2:0:64::/96\"\npool4 = [\"198.19.4.0/24\"]\n"));
        assert!(siit_config("t", "s").contains(
            "prefix = \"2001:2:0:64::/96\"\neam = [{ ipv4 = \"198.19.2.0/24\", ipv6 = \"2001:2:0:1::1:0/120\" }]\n"
        ));
        let t = tayga_config("t", "/d");
        assert!(t.contains("prefix 2001:2:0:64::/96\ndynamic-pool 198.19.1.0/24\n"));
        assert!(sixtofour_config("t", "s").contains("ipv4 = \"198.18.0.1\"\n"));
        assert!(isatap_config("t", "s").contains("prefix = \"2001:2:0:5::/64\"\n"));
        assert_eq!(ISATAP_PREFIX64, [0x20, 0x01, 0, 0x02, 0, 0, 0, 0x05]);
    }
}
