//! `xlat lab run scale-out`: N xlat NAT44 nodes behind ECMP with no shared state (issue 24).
//!
//! ```text
//!  tester            inside router (ir)              nodes                 outside router (or)
//!  198.18.1.1..M --- 198.18.0.1   resilient group -- n0: xlat + BIRD ---- BGP: pool0 via n0
//!  (subscribers)     default nhid 100 over nodes  -- n1: xlat + BIRD ---- BGP: pool1 via n1
//!                    hash: L3 (source, dest)       -- ...                  server 198.19.0.2
//! ```
//!
//! Each node runs a real `xlat run` doing NAPT of the subscribers (198.18.1.0/24) to its own
//! pool prefix (198.19.(16+i).0/28). xlat routes its pool into its TUN device in the main table
//! while it runs (`xlat_daemon`'s auto routes); BIRD in the node learns exactly that route
//! from the kernel (`learn`, filtered to unicast routes on the TUN device: the fail-closed
//! `unreachable` twin xlat leaves behind is not exported) and announces it by BGP to BIRD in
//! the outside router, which installs it. A node whose xlat dies loses the route with its TUN
//! device, BIRD withdraws the prefix, and return traffic can no longer be steered to it.
//! Without BIRD (`--routing static`, or bird not installed) the outside router gets static
//! routes and the lab itself withdraws a dead node's route when xlat's route is gone.
//!
//! The inside router spreads subscribers with a Linux resilient nexthop group hashing on the
//! source address (`fib_multipath_hash_policy = 0`, with a fixed hash seed so runs repeat).
//! Its members are kept by the health check operators run, docs/scale-out/xlat-ecmp-health.sh
//! ([`HEALTH_SCRIPT`]): each node also announces its pool by BGP to BIRD in the inside router,
//! which puts the pools into kernel table 200; the script keeps the group to the nodes whose
//! pool is there (a node that leaves loses only its buckets; one that joins gets idle ones).
//! With static routing the lab fills table 200 itself.
//!
//! Events: a node's xlat SIGKILLed, restarted, then a new node added (N -> N+1, its own
//! namespace, pool, BIRD and BGP neighbours on both routers) and new subscribers started.
//! Load steps: every stream faster, per node carried packets and xlat CPU per packet.
//!
//! Traffic: every subscriber runs `flows` UDP streams to an echo server in the outside
//! router's namespace, one packet per stream every `interval`, each carrying subscriber, flow
//! and sequence number. The server records which source address (so which node's pool) each
//! stream arrived from and when that changed; the client records which sequence numbers came
//! back. From those two records: the distribution over nodes, who moved when a node left or
//! came back, how long the moved subscribers were cut off, and what the other streams lost.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::results::{Experiment, Machine, Row, RunResults, Settings, SCHEMA};
use crate::stats::Spread;
use crate::sys;
use crate::topo::destroy_ns;

/// Most nodes: node ASNs are the documentation ASNs 64497..64511 (RFC 5398), the outside
/// router is 64496.
pub const MAX_NODES: usize = 12;
/// Most subscribers: 198.18.1.1 ..= 198.18.1.250.
pub const MAX_SUBSCRIBERS: usize = 250;
/// Most streams per subscriber.
pub const MAX_FLOWS: usize = 16;
/// The server every stream goes to, on the outside router's loopback.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
pub const SERVER_PORT: u16 = 7000;
/// The subscribers' prefix, xlat's `inside`.
pub const INSIDE: &str = "198.18.1.0/24";
/// Resilient group id on the inside router; node i's nexthop is id i + 1.
const GROUP_ID: u32 = 100;
/// The inside router's hash seed (fixed, so a run's spread repeats).
const HASH_SEED: u32 = 24;
const MAGIC: [u8; 4] = *b"XSO1";
/// Payload bytes of every stream packet.
pub const PAYLOAD: usize = 64;
/// The outside router's ASN; node i has 64497 + i.
const OR_ASN: u32 = 64496;
/// The inside router's ASN (its BIRD learns which nodes announce their pool).
const IR_ASN: u32 = 64511;
/// The inside router's kernel table where its BIRD puts the pools the nodes announce: the
/// health check's signal, used by no rule.
const NODES_TABLE: u32 = 200;
/// The inside router's health check, the one docs/SCALE-OUT.md tells operators to run.
pub const HEALTH_SCRIPT: &str = include_str!("../../../docs/scale-out/xlat-ecmp-health.sh");

/// How the outside router learns the pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Routing {
    /// BIRD in every node and in the outside router, eBGP.
    Bgp,
    /// Static routes on the outside router, maintained by the lab.
    Static,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ScaleOpts {
    pub nodes: usize,
    pub subscribers: usize,
    pub flows: usize,
    /// Packet interval of each stream.
    pub interval: Duration,
    /// Steady-state window for the distribution table, and the wait after a node comes back.
    pub settle: Duration,
    pub routing: Routing,
    /// Resilient group size.
    pub buckets: u16,
    /// Seconds a bucket must be unused before the group may move it to another nexthop.
    pub idle_timer: u32,
    /// Where configs, logs and control sockets go.
    pub dir: PathBuf,
    /// Node whose xlat is killed; None = the node with most subscribers.
    pub kill: Option<usize>,
    /// The xlat binary; None = next to this executable or XLAT_BIN ([`crate::device::xlat_bin`]).
    pub xlat_bin: Option<PathBuf>,
    /// After the rejoin, add a genuinely new node (index `nodes`, its own pool).
    pub add_node: bool,
    /// Subscribers that start sending only once the added node is in the group (indexes
    /// `subscribers..`): where new subscribers land.
    pub late_subscribers: usize,
    /// Stream intervals of the load steps after the steady state (empty: none), each held
    /// for `settle`.
    pub load_steps: Vec<Duration>,
}

impl ScaleOpts {
    pub fn validate(&self) -> Result<()> {
        if !(2..=MAX_NODES).contains(&self.nodes) {
            bail!("--nodes: {} is outside 2..={MAX_NODES}", self.nodes);
        }
        if !(1..=MAX_SUBSCRIBERS).contains(&self.subscribers) {
            bail!(
                "--subscribers: {} is outside 1..={MAX_SUBSCRIBERS}",
                self.subscribers
            );
        }
        if !(1..=MAX_FLOWS).contains(&self.flows) {
            bail!(
                "--flows: {} streams per subscriber is outside 1..={MAX_FLOWS}",
                self.flows
            );
        }
        if self.interval < Duration::from_millis(1) || self.interval > Duration::from_secs(1) {
            bail!("stream interval {:?} is outside 1 ms..1 s", self.interval);
        }
        if self.settle < Duration::from_millis(200) || self.settle > Duration::from_secs(600) {
            bail!("--duration: {:?} is outside 0.2..600 s", self.settle);
        }
        if !(self.nodes as u32..=4096).contains(&u32::from(self.buckets)) {
            bail!("buckets: {} is outside nodes..4096", self.buckets);
        }
        if self.add_node && self.nodes + 1 > MAX_NODES {
            bail!(
                "--nodes: {} plus the added node is more than {MAX_NODES}",
                self.nodes
            );
        }
        if self.late_subscribers > 0 && !self.add_node {
            bail!("late subscribers start after a node is added: add_node is off");
        }
        if self.subscribers + self.late_subscribers > MAX_SUBSCRIBERS {
            bail!(
                "--subscribers: {} plus {} late ones is more than {MAX_SUBSCRIBERS}",
                self.subscribers,
                self.late_subscribers
            );
        }
        if self.load_steps.len() > 4
            || self
                .load_steps
                .iter()
                .any(|d| *d < Duration::from_millis(1) || *d > Duration::from_secs(1))
        {
            bail!(
                "load steps {:?}: at most 4 stream intervals of 1 ms..1 s",
                self.load_steps
            );
        }
        if let Some(k) = self.kill {
            if k >= self.nodes {
                bail!(
                    "node {k} to stop does not exist (nodes 0..{})",
                    self.nodes - 1
                );
            }
        }
        Ok(())
    }
}

/// Node i's pool prefix.
pub fn pool_of(i: usize) -> (Ipv4Addr, u8) {
    (Ipv4Addr::new(198, 19, 16 + i as u8, 0), 28)
}

/// Which node's pool holds `a`.
pub fn node_of(a: Ipv4Addr, nodes: usize) -> Option<usize> {
    (0..nodes).find(|&i| {
        let (p, len) = pool_of(i);
        let mask = u32::MAX << (32 - u32::from(len));
        u32::from(a) & mask == u32::from(p)
    })
}

/// Node indexes of the members of a group as `ip nexthop show id G` prints it
/// ("id 100 group 1/3 type resilient ..."; nexthop id = node + 1), sorted.
pub fn parse_group(line: &str) -> Vec<usize> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let Some(p) = w.iter().position(|x| *x == "group") else {
        return Vec::new();
    };
    let mut v: Vec<usize> = w
        .get(p + 1)
        .map(|g| {
            g.split('/')
                .filter_map(|m| m.split(',').next()?.parse::<usize>().ok())
                .filter(|id| *id > 0)
                .map(|id| id - 1)
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// Subscriber s's address (s from 0).
pub fn subscriber(s: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 1, 1 + s as u8)
}

/// The per-node xlat configuration (one template for every node).
pub fn node_config(tun: &str, pool: &str, socket: &str) -> String {
    format!(
        r#"# written by xlat lab scale-out: one node of N, its own pool
[tun]
name = "{tun}"
mtu = 1500
auto_routes = true

[nat44]
inside = ["{INSIDE}"]
pool = ["{pool}"]
mode = "napt"
filtering = "endpoint-independent"
ports = "1024-65535"

[control]
socket = "{socket}"
"#
    )
}

/// BIRD for a node: learn xlat's inbound pool route from the kernel and announce it by eBGP
/// while it exists. The same text is docs/scale-out/bird-node.conf with placeholders filled.
pub fn bird_node_config(
    router_id: Ipv4Addr,
    asn: u32,
    peer: Ipv4Addr,
    peer_asn: u32,
    inside_peer: Ipv4Addr,
    pool: &str,
    tun: &str,
) -> String {
    format!(
        r#"# BIRD 2 on an xlat node: announce the node's pool while xlat runs.
router id {router_id};

# Interfaces (the kernel protocol needs them to read routes through the TUN device).
protocol device {{ scan time 10; }}

# xlat adds "<pool> dev <tun>" to the main table while it runs; after a crash only its
# fail-closed "unreachable <pool>" twin stays. Learn routes made by other programs, keep
# only the unicast one through the TUN device, never write to the kernel.
protocol kernel xlat_pool {{
    learn;
    scan time 5;
    ipv4 {{
        import filter {{
            if net ~ [ {pool} ] && dest = RTD_UNICAST && ifname = "{tun}" then accept;
            reject;
        }};
        export none;
    }};
}}

protocol bgp upstream {{
    local as {asn};
    neighbor {peer} as {peer_asn};
    connect delay time 1;
    connect retry time 2;
    error wait time 1, 4;
    ipv4 {{
        import none;
        export where proto = "xlat_pool";
    }};
}}

# The same announcement to the inside router, whose health check (xlat-ecmp-health.sh) keeps
# this node in its nexthop group only while the pool is announced.
protocol bgp inside {{
    local as {asn};
    neighbor {inside_peer} as {IR_ASN};
    connect delay time 1;
    connect retry time 2;
    error wait time 1, 4;
    ipv4 {{
        import none;
        export where proto = "xlat_pool";
    }};
}}
"#
    )
}

/// BIRD for the outside router: one eBGP session per node, pools into the kernel. The device
/// scan every second also wakes BIRD's loop: without it a new session's first UPDATE waited
/// up to 3 s in about half the runs (the packets show no loss; BIRD sent it at its next
/// wake-up). Several sessions could announce the same prefix only if pools overlapped, which
/// `xlat check` rules out per node and the cluster plan must rule out between nodes.
pub fn bird_outside_config(router_id: Ipv4Addr, peers: &[(Ipv4Addr, u32)]) -> String {
    bird_router_config(
        &format!(
            r#"# BIRD 2 on the outside (upstream) router: learn each xlat node's pool by eBGP.
router id {router_id};
protocol device {{ scan time 1; }}
protocol kernel {{
    ipv4 {{ import none; export all; }};
}}
"#
        ),
        OR_ASN,
        peers,
    )
}

/// BIRD for the inside router: one eBGP session per node, the pools they announce into
/// kernel table `NODES_TABLE` only (no rule uses it), which the health check
/// ([`HEALTH_SCRIPT`]) turns into the nexthop group's members. docs/scale-out/bird-inside.conf.
pub fn bird_inside_config(router_id: Ipv4Addr, peers: &[(Ipv4Addr, u32)]) -> String {
    bird_router_config(
        &format!(
            r#"# BIRD 2 on the inside router: which nodes announce their pool (the health signal).
router id {router_id};
protocol device {{ scan time 1; }}
protocol kernel node_pools {{
    kernel table {NODES_TABLE};
    ipv4 {{ import none; export all; }};
}}
"#
        ),
        IR_ASN,
        peers,
    )
}

fn bird_router_config(head: &str, local_asn: u32, peers: &[(Ipv4Addr, u32)]) -> String {
    let mut s = head.to_string();
    for (i, (peer, asn)) in peers.iter().enumerate() {
        s.push_str(&format!(
            r#"protocol bgp node{i} {{
    local as {local_asn};
    neighbor {peer} as {asn};
    passive on;
    connect delay time 1;
    connect retry time 2;
    error wait time 1, 4;
    ipv4 {{ import all; export none; }};
}}
"#
        ));
    }
    s
}

// ---------------------------------------------------------------------------------------
// The testbed.

static COUNTER: AtomicUsize = AtomicUsize::new(0);

struct Node {
    ns: String,
    tun: String,
    pool: String,
    conf: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    xlat: Option<Child>,
    /// Inside link: node side address; ir side is .1.
    in_addr: Ipv4Addr,
    ir_addr: Ipv4Addr,
    out_addr: Ipv4Addr,
    or_addr: Ipv4Addr,
}

/// The namespaces and processes of one scale-out run; dropping it removes them all.
pub struct Cluster {
    id: String,
    ns_t: String,
    ns_ir: String,
    ns_or: String,
    nodes: Vec<Node>,
    namespaces: Vec<String>,
    routing: Routing,
    dir: PathBuf,
    opts: ScaleOpts,
    /// The inside router's health check (docs/scale-out/xlat-ecmp-health.sh) and its node list.
    health: Option<Child>,
    nodes_file: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.xlat.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some(mut c) = self.health.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // destroy_ns kills what is left in each namespace (BIRD, `ip monitor`) and deletes it.
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

fn bird_ctl(dir: &Path, ns: &str) -> PathBuf {
    dir.join(format!("{ns}.bird.ctl"))
}

impl Cluster {
    /// Builds the namespaces, links, routes and starts xlat (and BIRD) on every node and the
    /// inside router's health check; waits until the outside router has a route to every pool
    /// and the inside router's group holds every node.
    pub fn new(opts: &ScaleOpts) -> Result<Cluster> {
        opts.validate()?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("scale-out needs root (network namespaces, TUN devices): run it with sudo");
        }
        if !sys::have("ip") || !sys::have("bash") {
            bail!("scale-out needs `ip` and `bash` (apt-get install iproute2 bash)");
        }
        if opts.routing == Routing::Bgp && !(sys::have("bird") && sys::have("birdc")) {
            bail!("--routing bgp needs BIRD 2 (apt-get install bird2)");
        }
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("s{:x}{n}", std::process::id());
        std::fs::create_dir_all(&opts.dir)
            .with_context(|| format!("creating {}", opts.dir.display()))?;
        let mut c = Cluster {
            ns_t: format!("{id}-t"),
            ns_ir: format!("{id}-ir"),
            ns_or: format!("{id}-or"),
            id,
            nodes: Vec::new(),
            namespaces: Vec::new(),
            routing: opts.routing,
            dir: opts.dir.clone(),
            opts: opts.clone(),
            health: None,
            nodes_file: opts.dir.join("nodes"),
        };
        c.build()?;
        Ok(c)
    }

    fn add_ns(&mut self, ns: &str) -> Result<()> {
        let _ = sys::cmd(10, &["ip", "netns", "del", ns]);
        sys::cmd_ok(&["ip", "netns", "add", ns])?;
        self.namespaces.push(ns.to_string());
        ip(ns, &["link", "set", "lo", "up"])?;
        sys::ns_sh(
            ns,
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
             net.ipv4.conf.default.rp_filter=0 net.ipv6.conf.all.disable_ipv6=1 \
             net.ipv6.conf.default.disable_ipv6=1",
        )?;
        Ok(())
    }

    /// A veth pair `a`@`ns_a` -- `b`@`ns_b`, up, with addresses (prefix length 24).
    fn link(
        ns_a: &str,
        a: &str,
        addr_a: Ipv4Addr,
        ns_b: &str,
        b: &str,
        addr_b: Ipv4Addr,
    ) -> Result<()> {
        ip(
            ns_a,
            &[
                "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b,
            ],
        )?;
        ip(ns_a, &["addr", "add", &format!("{addr_a}/24"), "dev", a])?;
        ip(ns_b, &["addr", "add", &format!("{addr_b}/24"), "dev", b])?;
        ip(ns_a, &["link", "set", "dev", a, "up"])?;
        ip(ns_b, &["link", "set", "dev", b, "up"])?;
        Ok(())
    }

    fn build(&mut self) -> Result<()> {
        let (t, ir, or) = (self.ns_t.clone(), self.ns_ir.clone(), self.ns_or.clone());
        for ns in [&t, &ir, &or] {
            self.add_ns(ns)?;
        }
        // Tester: the subscribers (and those that start late) on its one port.
        let gw_t = Ipv4Addr::new(198, 18, 0, 1);
        Self::link(&t, "ir", Ipv4Addr::new(198, 18, 0, 2), &ir, "t", gw_t)?;
        for s in 0..self.opts.subscribers + self.opts.late_subscribers {
            ip(
                &t,
                &["addr", "add", &format!("{}/32", subscriber(s)), "dev", "ir"],
            )?;
        }
        ip(&t, &["route", "add", "default", "via", &gw_t.to_string()])?;
        ip(&ir, &["route", "add", INSIDE, "via", "198.18.0.2"])?;
        // The outside router: the server on its loopback.
        ip(&or, &["addr", "add", &format!("{SERVER}/32"), "dev", "lo"])?;
        // L3 hash (source, destination) with a fixed seed.
        sys::ns_sh(
            &ir,
            &format!(
                "sysctl -qw net.ipv4.fib_multipath_hash_policy=0 && \
                 (sysctl -qw net.ipv4.fib_multipath_hash_seed={HASH_SEED} 2>/dev/null || true)"
            ),
        )?;
        std::fs::write(&self.nodes_file, "# <nexthop id> <via> <dev> <pool>\n")
            .with_context(|| format!("writing {}", self.nodes_file.display()))?;
        for i in 0..self.opts.nodes {
            self.create_node(i)?;
        }
        if self.routing == Routing::Bgp {
            self.start_bird()?;
        }
        for i in 0..self.nodes.len() {
            self.start_xlat(i)?;
        }
        for i in 0..self.nodes.len() {
            self.list_node(i)?;
            if self.routing == Routing::Static {
                self.static_route(i, true)?;
            }
        }
        // The health check starts once every pool is in the inside router's table, so the
        // group is made with all nodes at once and the spread repeats from run to run.
        let t0 = Instant::now();
        while (0..self.nodes.len()).any(|i| !self.nodes_table_has(i)) {
            if t0.elapsed() > Duration::from_secs(40) || sys::stopped() {
                bail!("not every node's pool reached the inside router within 40 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.start_health()?;
        for i in 0..self.nodes.len() {
            self.wait_outside_route(i, true, Duration::from_secs(40))
                .with_context(|| format!("node {i}'s pool never reached the outside router"))?;
        }
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.wait_group(&all, Duration::from_secs(20))
            .context("the health check never put every node in the group")?;
        Ok(())
    }

    /// Node i's namespace, links, routes and xlat configuration (nothing started).
    fn create_node(&mut self, i: usize) -> Result<()> {
        let ir = self.ns_ir.clone();
        let or = self.ns_or.clone();
        let ns = format!("{}-n{i}", self.id);
        self.add_ns(&ns)?;
        let in_addr = Ipv4Addr::new(198, 18, 16 + i as u8, 2);
        let ir_addr = Ipv4Addr::new(198, 18, 16 + i as u8, 1);
        let out_addr = Ipv4Addr::new(198, 19, 64 + i as u8, 2);
        let or_addr = Ipv4Addr::new(198, 19, 64 + i as u8, 1);
        Self::link(&ir, &format!("n{i}"), ir_addr, &ns, "in", in_addr)?;
        Self::link(&ns, "out", out_addr, &or, &format!("n{i}"), or_addr)?;
        ip(&ns, &["route", "add", INSIDE, "via", &ir_addr.to_string()])?;
        ip(
            &ns,
            &["route", "add", "default", "via", &or_addr.to_string()],
        )?;
        let (p, len) = pool_of(i);
        let tun = "xlat0".to_string();
        let socket = self.dir.join(format!("n{i}.sock"));
        let conf = self.dir.join(format!("n{i}.toml"));
        let pool = format!("{p}/{len}");
        std::fs::write(
            &conf,
            node_config(&tun, &pool, &socket.display().to_string()),
        )
        .with_context(|| format!("writing {}", conf.display()))?;
        self.nodes.push(Node {
            ns,
            tun,
            pool,
            conf,
            socket,
            log: self.dir.join(format!("n{i}.xlat.log")),
            xlat: None,
            in_addr,
            ir_addr,
            out_addr,
            or_addr,
        });
        Ok(())
    }

    /// Puts node i in the health check's node list (the operator's step "tell the inside
    /// router about the node"); the check adds its nexthop to the group once its pool is
    /// announced.
    fn list_node(&self, i: usize) -> Result<()> {
        use std::io::Write;
        let n = &self.nodes[i];
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.nodes_file)
            .with_context(|| format!("opening {}", self.nodes_file.display()))?;
        writeln!(f, "{} {} n{i} {}", i + 1, n.in_addr, n.pool)?;
        Ok(())
    }

    /// Starts docs/scale-out/xlat-ecmp-health.sh in the inside router.
    fn start_health(&mut self) -> Result<()> {
        let script = self.dir.join("xlat-ecmp-health.sh");
        std::fs::write(&script, HEALTH_SCRIPT)
            .with_context(|| format!("writing {}", script.display()))?;
        let log = self.dir.join("inside-health.log");
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns_ir, "bash"])
            .arg(&script)
            .arg(&self.nodes_file)
            .env("GROUP", GROUP_ID.to_string())
            .env("TABLE", NODES_TABLE.to_string())
            .env("BUCKETS", self.opts.buckets.to_string())
            .env("IDLE_TIMER", self.opts.idle_timer.to_string())
            // Bounded: no run lasts an hour; the cluster's drop ends it anyway.
            .env("MAX_SECONDS", "3600")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("starting the inside router's health check")?;
        self.health = Some(child);
        Ok(())
    }

    /// The health check's log so far.
    pub fn health_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("inside-health.log")).unwrap_or_default()
    }

    fn peers(&self, addr: impl Fn(&Node) -> Ipv4Addr) -> Vec<(Ipv4Addr, u32)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (addr(n), 64497 + i as u32))
            .collect()
    }

    /// Writes the two routers' BIRD configurations for the current nodes.
    fn write_router_birds(&self) -> Result<(PathBuf, PathBuf)> {
        let oc = self.dir.join("outside.bird.conf");
        std::fs::write(
            &oc,
            self.bird_logged(
                "outside",
                &bird_outside_config(SERVER, &self.peers(|n| n.out_addr)),
            ),
        )?;
        let ic = self.dir.join("inside.bird.conf");
        std::fs::write(
            &ic,
            self.bird_logged(
                "inside",
                &bird_inside_config(Ipv4Addr::new(198, 18, 0, 1), &self.peers(|n| n.in_addr)),
            ),
        )?;
        Ok((oc, ic))
    }

    /// A BIRD configuration with a log file in the run directory (`<name>.bird.log`: sessions,
    /// routes in and out), for the lab only.
    fn bird_logged(&self, name: &str, conf: &str) -> String {
        format!(
            "log \"{}\" all;\ndebug protocols all;\n{conf}",
            self.dir.join(format!("{name}.bird.log")).display()
        )
    }

    fn start_bird(&mut self) -> Result<()> {
        let (oc, ic) = self.write_router_birds()?;
        self.bird(&self.ns_or, &oc)?;
        self.bird(&self.ns_ir, &ic)?;
        for i in 0..self.nodes.len() {
            self.start_node_bird(i)?;
        }
        Ok(())
    }

    fn start_node_bird(&self, i: usize) -> Result<()> {
        let n = &self.nodes[i];
        let c = bird_node_config(
            n.out_addr,
            64497 + i as u32,
            n.or_addr,
            OR_ASN,
            n.ir_addr,
            &n.pool,
            &n.tun,
        );
        let conf = self.dir.join(format!("n{i}.bird.conf"));
        std::fs::write(&conf, self.bird_logged(&format!("n{i}"), &c))?;
        self.bird(&n.ns, &conf)
    }

    fn bird(&self, ns: &str, conf: &Path) -> Result<()> {
        let ctl = bird_ctl(&self.dir, ns);
        let pid = self.dir.join(format!("{ns}.bird.pid"));
        let (c, s, p) = (
            conf.display().to_string(),
            ctl.display().to_string(),
            pid.display().to_string(),
        );
        // BIRD forks into the background; it stays in the namespace, which destroy_ns empties.
        sys::ns_ok(ns, &["bird", "-c", &c, "-s", &s, "-P", &p])
            .with_context(|| format!("starting BIRD in {ns}"))?;
        Ok(())
    }

    /// `birdc configure` in `ns` (the routers after a node was added to their config).
    fn bird_configure(&self, ns: &str) -> Result<()> {
        let ctl = bird_ctl(&self.dir, ns).display().to_string();
        let o = sys::cmd(10, &["birdc", "-s", &ctl, "configure"])?;
        if !o.ok || !o.stdout.contains("Reconfigur") {
            bail!(
                "birdc configure in {ns}: {}{}",
                o.stdout.trim(),
                o.stderr.trim()
            );
        }
        Ok(())
    }

    /// Adds a new node (index = the number of nodes so far) the way an operator does:
    /// its namespace and links, its xlat config (own pool), BIRD on it, a BGP neighbour on
    /// both routers, xlat started, the node in the health check's list. Returns its index;
    /// it joins the group when its pool is announced.
    pub fn add_node(&mut self) -> Result<usize> {
        let i = self.nodes.len();
        if i >= MAX_NODES {
            bail!("a cluster has at most {MAX_NODES} nodes");
        }
        self.create_node(i)?;
        if self.routing == Routing::Bgp {
            // The routers listen (passive sessions) before the node's BIRD connects.
            self.write_router_birds()?;
            self.bird_configure(&self.ns_or)?;
            self.bird_configure(&self.ns_ir)?;
            self.start_node_bird(i)?;
        }
        self.start_xlat(i)?;
        self.list_node(i)?;
        Ok(i)
    }

    /// Starts node i's `xlat run` and waits until its pool route is in the node's kernel.
    pub fn start_xlat(&mut self, i: usize) -> Result<()> {
        let bin = self.bin()?;
        let n = &mut self.nodes[i];
        let _ = std::fs::remove_file(&n.socket);
        let log = std::fs::File::create(&n.log)
            .with_context(|| format!("creating {}", n.log.display()))?;
        let log2 = log.try_clone()?;
        let child = Command::new("ip")
            .args(["netns", "exec", &n.ns])
            .arg(&bin)
            .args(["run", "-c"])
            .arg(&n.conf)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        n.xlat = Some(child);
        let start = Instant::now();
        for _ in 0..400 {
            if let Some(c) = self.nodes[i].xlat.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    bail!(
                        "node {i}'s xlat exited ({st}) during start; log {}:\n{}",
                        self.nodes[i].log.display(),
                        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
                    );
                }
            }
            if self.node_has_route(i) {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(20) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "node {i}'s xlat did not route its pool within 20 s; log {}",
            self.nodes[i].log.display()
        )
    }

    fn bin(&self) -> Result<PathBuf> {
        match &self.opts.xlat_bin {
            Some(b) => Ok(b.clone()),
            None => crate::device::xlat_bin(),
        }
    }

    /// SIGKILLs node i's xlat; returns when the process is gone.
    pub fn kill_xlat(&mut self, i: usize) -> Result<()> {
        let Some(mut c) = self.nodes[i].xlat.take() else {
            bail!("node {i}'s xlat is not running");
        };
        c.kill().context("SIGKILL")?;
        c.wait().context("waiting for the killed xlat")?;
        Ok(())
    }

    /// xlat's own inbound route (`<pool> dev <tun>`) is in node i's main table.
    pub fn node_has_route(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        ip(
            &n.ns,
            &["-4", "route", "show", "exact", &n.pool, "dev", &n.tun],
        )
        .map(|s| !s.trim().is_empty())
        .unwrap_or(false)
    }

    /// The outside router routes node i's pool to node i.
    pub fn outside_has_route(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        ip(&self.ns_or, &["-4", "route", "show", "exact", &n.pool])
            .map(|s| s.contains(&format!("via {} ", n.out_addr)))
            .unwrap_or(false)
    }

    /// Polls (every 2 ms, at most `limit`) until the outside router's route to node i's pool
    /// is `present`; returns the time it took.
    pub fn wait_outside_route(&self, i: usize, present: bool, limit: Duration) -> Result<Duration> {
        let start = Instant::now();
        let max = limit.as_millis() as usize / 2 + 1;
        for _ in 0..max {
            if self.outside_has_route(i) == present {
                return Ok(start.elapsed());
            }
            if self.routing == Routing::Static && self.node_has_route(i) == present {
                // The lab is the routing protocol: follow xlat's route.
                self.static_route(i, present)?;
                continue;
            }
            if start.elapsed() > limit || sys::stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!(
            "node {i}'s pool route at the outside router did not {} within {limit:?}",
            if present { "appear" } else { "go" }
        )
    }

    /// Static routing: the pool route on the outside router and, for the health check, in
    /// the inside router's nodes table (what BIRD does with `--routing bgp`).
    fn static_route(&self, i: usize, add: bool) -> Result<()> {
        let n = &self.nodes[i];
        let (via, via_in) = (n.out_addr.to_string(), n.in_addr.to_string());
        let table = NODES_TABLE.to_string();
        if add {
            ip(&self.ns_or, &["route", "replace", &n.pool, "via", &via])?;
            ip(
                &self.ns_ir,
                &["route", "replace", &n.pool, "via", &via_in, "table", &table],
            )?;
        } else {
            let _ = ip(&self.ns_or, &["route", "del", &n.pool, "via", &via]);
            let _ = ip(&self.ns_ir, &["route", "del", &n.pool, "table", &table]);
        }
        Ok(())
    }

    /// The inside router's nodes table (the health check's signal) routes node i's pool.
    fn nodes_table_has(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        let table = NODES_TABLE.to_string();
        ip(
            &self.ns_ir,
            &["-4", "route", "show", "exact", &n.pool, "table", &table],
        )
        .map(|s| !s.trim().is_empty())
        .unwrap_or(false)
    }

    /// The inside router's group members now, as node indexes (empty without a group).
    pub fn group_members(&self) -> Vec<usize> {
        let Ok(o) = ip(
            &self.ns_ir,
            &["nexthop", "show", "id", &GROUP_ID.to_string()],
        ) else {
            return Vec::new();
        };
        parse_group(&o)
    }

    /// Polls (every 2 ms, at most `limit`) until the group's members are exactly `members`;
    /// returns the time it took.
    pub fn wait_group(&self, members: &[usize], limit: Duration) -> Result<Duration> {
        let start = Instant::now();
        let max = limit.as_millis() as usize / 2 + 1;
        let mut last = Vec::new();
        for _ in 0..max {
            last = self.group_members();
            if last == members {
                return Ok(start.elapsed());
            }
            if start.elapsed() > limit || sys::stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!(
            "the inside router's group did not become nodes {members:?} within {limit:?} (it is {last:?}); health check log:\n{}",
            self.health_log()
        )
    }

    /// Polls (every 2 ms, at most `limit`) until the outside router routes node i's pool and
    /// the group's members are `members`; returns when each happened, from the call.
    pub fn wait_joined(
        &self,
        i: usize,
        members: &[usize],
        limit: Duration,
    ) -> Result<(Duration, Duration)> {
        let start = Instant::now();
        let (mut routed, mut grouped) = (None, None);
        for _ in 0..limit.as_millis() as usize / 2 + 1 {
            if self.routing == Routing::Static && routed.is_none() && self.node_has_route(i) {
                // The lab is the routing protocol: follow xlat's route.
                self.static_route(i, true)?;
            }
            if routed.is_none() && self.outside_has_route(i) {
                routed = Some(start.elapsed());
            }
            if grouped.is_none() && self.group_members() == members {
                grouped = Some(start.elapsed());
            }
            if let (Some(r), Some(g)) = (routed, grouped) {
                return Ok((r, g));
            }
            if start.elapsed() > limit || sys::stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!(
            "node {i} did not join within {limit:?}: outside route {routed:?}, group {grouped:?} (members {:?}); health check log:\n{}",
            self.group_members(),
            self.health_log()
        )
    }

    /// Node i's UDP sessions to the server as (inside, outside) addresses, from `xlat show
    /// sessions` (its own table); an error when the daemon does not answer.
    pub fn sessions(&self, i: usize) -> Result<BTreeSet<(Ipv4Addr, Ipv4Addr)>> {
        let bin = self.bin()?.display().to_string();
        let sock = self.nodes[i].socket.display().to_string();
        let server = SERVER.to_string();
        let o = sys::cmd(
            10,
            &[
                &bin, "show", "sessions", "--json", "--proto", "udp", "--remote", &server,
                "--limit", "100000", "--socket", &sock,
            ],
        )?;
        if !o.ok {
            bail!("node {i}: xlat show sessions failed: {}", o.stderr.trim());
        }
        let rows: Vec<serde_json::Value> = serde_json::from_str(&o.stdout).with_context(|| {
            format!("node {i}: xlat show sessions --json printed {:?}", o.stdout)
        })?;
        let mut v = BTreeSet::new();
        for r in rows {
            let a = r["inside"].as_str().and_then(|x| x.parse().ok());
            let b = r["outside"].as_str().and_then(|x| x.parse().ok());
            if let (Some(a), Some(b)) = (a, b) {
                v.insert((a, b));
            }
        }
        Ok(v)
    }

    pub fn xlat_pid(&self, i: usize) -> Option<i32> {
        self.nodes[i].xlat.as_ref().map(|c| c.id() as i32)
    }

    pub fn routing(&self) -> Routing {
        self.routing
    }

    /// The outside router's BGP summary (for the run directory), or "" without BIRD.
    pub fn bird_show(&self) -> String {
        if self.routing != Routing::Bgp {
            return String::new();
        }
        let ctl = bird_ctl(&self.dir, &self.ns_or).display().to_string();
        let mut s = String::new();
        for q in [&["show", "protocols"][..], &["show", "route"][..]] {
            let mut v = vec!["birdc", "-s", &ctl];
            v.extend_from_slice(q);
            if let Ok(o) = sys::cmd(10, &v) {
                s.push_str(&o.stdout);
            }
        }
        s
    }

    /// The resilient group's bucket count per nexthop id.
    pub fn buckets(&self) -> BTreeMap<u32, usize> {
        let mut m = BTreeMap::new();
        if let Ok(o) = ip(
            &self.ns_ir,
            &["nexthop", "bucket", "show", "id", &GROUP_ID.to_string()],
        ) {
            for l in o.lines() {
                let w: Vec<&str> = l.split_whitespace().collect();
                if let Some(p) = w.iter().position(|x| *x == "nhid") {
                    if let Some(id) = w.get(p + 1).and_then(|x| x.parse().ok()) {
                        *m.entry(id).or_insert(0) += 1;
                    }
                }
            }
        }
        m
    }
}

// ---------------------------------------------------------------------------------------
// Traffic: streams and the echo server.

/// What the server saw of one stream.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamSeen {
    /// (seconds since the start, source address) each time the source address changed.
    pub changes: Vec<(f64, Ipv4Addr)>,
    /// Packets per source address.
    pub per_source: BTreeMap<Ipv4Addr, u64>,
}

/// What the client saw of one stream.
#[derive(Debug, Clone, Default)]
struct StreamBack {
    /// Replied sequence numbers.
    replied: Vec<bool>,
}

/// Everything both ends recorded.
#[derive(Debug, Default)]
pub struct Record {
    /// Send time (seconds since the start) of each tick; every stream sends seq = tick.
    pub ticks: Vec<f64>,
    /// `[subscriber][flow]`
    pub seen: Vec<Vec<StreamSeen>>,
    replied: Vec<Vec<StreamBack>>,
    /// (seconds since the start, source address) of every stream packet the server received.
    pub server_rx: Vec<(f64, Ipv4Addr)>,
}

/// The server's record: per stream what it saw, and (time, source) of every packet.
type ServerRecord = (Vec<Vec<StreamSeen>>, Vec<(f64, Ipv4Addr)>);

struct Shared {
    t0: Instant,
    stop: AtomicBool,
    /// Subscribers sending now (0..active); the late ones join when it grows.
    active: AtomicUsize,
    /// The streams' packet interval now, ns.
    interval_ns: AtomicU64,
    server: Mutex<ServerRecord>,
    client: Mutex<(Vec<f64>, Vec<Vec<StreamBack>>)>,
}

/// Running streams; `finish` stops them and returns the record.
pub struct Traffic {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

fn payload(sub: usize, flow: usize, seq: u32) -> [u8; PAYLOAD] {
    let mut b = [0u8; PAYLOAD];
    b[..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&(sub as u16).to_be_bytes());
    b[6..8].copy_from_slice(&(flow as u16).to_be_bytes());
    b[8..12].copy_from_slice(&seq.to_be_bytes());
    b
}

/// (subscriber, flow, seq) of a stream packet, None for anything else.
pub fn parse_payload(b: &[u8]) -> Option<(usize, usize, u32)> {
    if b.len() != PAYLOAD || b[..4] != MAGIC {
        return None;
    }
    let sub = u16::from_be_bytes([b[4], b[5]]) as usize;
    let flow = u16::from_be_bytes([b[6], b[7]]) as usize;
    let seq = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    Some((sub, flow, seq))
}

impl Traffic {
    /// Starts the echo server in the outside router and the streams in the tester: the
    /// subscribers send, the late ones wait for [`Traffic::start_late`]. At most `max_secs`
    /// of sending (the streams stop by themselves then).
    pub fn start(c: &Cluster, max_secs: f64) -> Result<Traffic> {
        let (m, f) = (c.opts.subscribers + c.opts.late_subscribers, c.opts.flows);
        let max_secs = max_secs.clamp(1.0, 7200.0);
        let shared = Arc::new(Shared {
            t0: Instant::now(),
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(c.opts.subscribers),
            interval_ns: AtomicU64::new(c.opts.interval.as_nanos() as u64),
            server: Mutex::new((vec![vec![StreamSeen::default(); f]; m], Vec::new())),
            client: Mutex::new((Vec::new(), vec![vec![StreamBack::default(); f]; m])),
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let sh = shared.clone();
        let ns = c.ns_or.clone();
        let rtx = ready_tx.clone();
        let server = std::thread::spawn(move || -> Result<()> {
            let sock = (|| -> Result<UdpSocket> {
                sys::enter_netns(&ns)?;
                let s = UdpSocket::bind(SocketAddrV4::new(SERVER, SERVER_PORT))
                    .context("server bind")?;
                s.set_read_timeout(Some(Duration::from_millis(50)))?;
                Ok(s)
            })();
            let sock = match sock {
                Ok(s) => {
                    let _ = rtx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = rtx.send(Err(anyhow::anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            serve(&sock, &sh)
        });
        let sh = shared.clone();
        let ns = c.ns_t.clone();
        let client = std::thread::spawn(move || -> Result<()> {
            let socks = (|| -> Result<Vec<Vec<UdpSocket>>> {
                sys::enter_netns(&ns)?;
                let mut v = Vec::new();
                for s in 0..m {
                    let mut row = Vec::new();
                    for _ in 0..f {
                        let u = UdpSocket::bind(SocketAddrV4::new(subscriber(s), 0))
                            .with_context(|| format!("binding {}", subscriber(s)))?;
                        u.set_nonblocking(true)?;
                        row.push(u);
                    }
                    v.push(row);
                }
                Ok(v)
            })();
            let socks = match socks {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            stream(&socks, &sh, Duration::from_secs_f64(max_secs))
        });
        let t = Traffic {
            shared,
            threads: vec![server, client],
        };
        for _ in 0..2 {
            match ready_rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    t.shared.stop.store(true, Ordering::SeqCst);
                    return Err(e);
                }
                Err(_) => {
                    t.shared.stop.store(true, Ordering::SeqCst);
                    bail!("the traffic threads did not start within 10 s");
                }
            }
        }
        Ok(t)
    }

    /// The late subscribers start sending; returns the record's time of that moment (every
    /// tick at or after it includes them).
    pub fn start_late(&self, total: usize) -> f64 {
        self.shared.active.store(total, Ordering::SeqCst);
        self.now()
    }

    /// Sets the streams' packet interval.
    pub fn set_interval(&self, d: Duration) {
        self.shared
            .interval_ns
            .store(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Seconds since the streams started (the record's clock).
    pub fn now(&self) -> f64 {
        self.shared.t0.elapsed().as_secs_f64()
    }

    /// A copy of what the server has seen so far.
    pub fn seen(&self) -> Vec<Vec<StreamSeen>> {
        self.shared
            .server
            .lock()
            .map(|g| g.0.clone())
            .unwrap_or_default()
    }

    /// Stops sending, waits `drain` for the last replies, stops the server.
    pub fn finish(mut self, drain: Duration) -> Result<Record> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let client = self.threads.pop();
        if let Some(h) = client {
            match h.join() {
                Ok(r) => r.context("stream client")?,
                Err(_) => bail!("the stream client thread panicked"),
            }
        }
        // The client drains before it returns; the server keeps answering meanwhile.
        std::thread::sleep(drain.min(Duration::from_secs(2)));
        if let Some(h) = self.threads.pop() {
            match h.join() {
                Ok(r) => r.context("echo server")?,
                Err(_) => bail!("the echo server thread panicked"),
            }
        }
        let (seen, rx) = std::mem::take(
            &mut *self
                .shared
                .server
                .lock()
                .map_err(|_| anyhow::anyhow!("lock"))?,
        );
        let (ticks, replied) = std::mem::take(
            &mut *self
                .shared
                .client
                .lock()
                .map_err(|_| anyhow::anyhow!("lock"))?,
        );
        Ok(Record {
            ticks,
            seen,
            replied,
            server_rx: rx,
        })
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

/// The echo server: records sources, sends every stream packet back. Stops when the client
/// has stopped and 300 ms passed (its replies may still be in flight).
fn serve(sock: &UdpSocket, sh: &Shared) -> Result<()> {
    let mut buf = [0u8; 2048];
    let mut stop_seen: Option<Instant> = None;
    loop {
        if sh.stop.load(Ordering::SeqCst) {
            let t = *stop_seen.get_or_insert_with(Instant::now);
            if t.elapsed() > Duration::from_millis(800) {
                return Ok(());
            }
        }
        let (len, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("server recv"),
        };
        let Some((sub, flow, _seq)) = parse_payload(&buf[..len]) else {
            continue;
        };
        let std::net::SocketAddr::V4(from4) = from else {
            continue;
        };
        let now = sh.t0.elapsed().as_secs_f64();
        {
            let Ok(mut g) = sh.server.lock() else {
                bail!("server state lock poisoned");
            };
            let Some(st) = g.0.get_mut(sub).and_then(|r| r.get_mut(flow)) else {
                continue;
            };
            let src = *from4.ip();
            if st.changes.last().map(|c| c.1) != Some(src) {
                st.changes.push((now, src));
            }
            *st.per_source.entry(src).or_insert(0) += 1;
            if g.1.len() < 20_000_000 {
                g.1.push((now, src));
            }
        }
        let _ = sock.send_to(&buf[..len], from);
    }
}

/// The streams: every interval (`sh.interval_ns`, which may change), one packet on every
/// socket of the active subscribers; replies counted by sequence. A sender that falls more
/// than 50 ms behind skips the missed ticks (the offered rate is what the ticks record).
fn stream(socks: &[Vec<UdpSocket>], sh: &Shared, max: Duration) -> Result<()> {
    let dst = SocketAddrV4::new(SERVER, SERVER_PORT);
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut who: Vec<(usize, usize)> = Vec::new();
    for (s, row) in socks.iter().enumerate() {
        for (f, u) in row.iter().enumerate() {
            fds.push(libc::pollfd {
                fd: u.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            who.push((s, f));
        }
    }
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let mut tick: usize = 0;
    let mut due = start;
    let mut drain_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if drain_until.is_none()
            && (sh.stop.load(Ordering::SeqCst) || now >= start + max || tick >= 5_000_000)
        {
            drain_until = Some(now + Duration::from_millis(500));
        }
        if let Some(d) = drain_until {
            if now >= d {
                return Ok(());
            }
        } else if now >= due {
            let t = sh.t0.elapsed().as_secs_f64();
            let active = sh.active.load(Ordering::SeqCst);
            {
                let Ok(mut g) = sh.client.lock() else {
                    bail!("client state lock poisoned");
                };
                g.0.push(t);
                for r in g.1.iter_mut() {
                    for b in r.iter_mut() {
                        b.replied.push(false);
                    }
                }
            }
            for (s, row) in socks.iter().enumerate().take(active) {
                for (f, u) in row.iter().enumerate() {
                    // A refused send (a route or neighbour missing for a moment) is a lost
                    // packet: counted as unreplied.
                    let _ = u.send_to(&payload(s, f, tick as u32), dst);
                }
            }
            tick += 1;
            due += Duration::from_nanos(sh.interval_ns.load(Ordering::SeqCst).max(1_000_000));
            let now = Instant::now();
            if due + Duration::from_millis(50) < now {
                due = now;
            }
        }
        let next = if drain_until.is_some() {
            Duration::from_millis(20)
        } else {
            due.saturating_duration_since(Instant::now())
        };
        let next = next.min(Duration::from_millis(100));
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: next.subsec_nanos() as libc::c_long,
        };
        // SAFETY: fds is a valid array of pollfd of the given length; ts is a valid timespec;
        // a null signal mask leaves the thread's mask alone.
        let r = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if r <= 0 {
            continue;
        }
        let Ok(mut g) = sh.client.lock() else {
            bail!("client state lock poisoned");
        };
        for (k, p) in fds.iter_mut().enumerate() {
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
            p.revents = 0;
            let (s, f) = who[k];
            // Bounded: at most 64 datagrams per socket per wakeup.
            for _ in 0..64 {
                match socks[s][f].recv_from(&mut buf) {
                    Ok((len, _)) => {
                        if let Some((rs, rf, seq)) = parse_payload(&buf[..len]) {
                            if (rs, rf) == (s, f) {
                                if let Some(x) = g.1[s][f].replied.get_mut(seq as usize) {
                                    *x = true;
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

// ---------------------------------------------------------------------------------------
// Analysis (pure: unit tested).

impl Record {
    /// Node of stream (s, f) at time t: the source the server last saw at or before t.
    pub fn node_at(&self, s: usize, f: usize, t: f64, nodes: usize) -> Option<usize> {
        self.seen[s][f]
            .changes
            .iter()
            .take_while(|c| c.0 <= t)
            .last()
            .and_then(|c| node_of(c.1, nodes))
    }

    /// Node of subscriber s at time t when all its streams agree; None when they do not (or
    /// none arrived yet).
    pub fn sub_node_at(&self, s: usize, t: f64, nodes: usize) -> Option<usize> {
        let v: BTreeSet<Option<usize>> = (0..self.seen[s].len())
            .map(|f| self.node_at(s, f, t, nodes))
            .collect();
        if v.len() == 1 {
            v.into_iter().next().flatten()
        } else {
            None
        }
    }

    /// Packets of subscriber s's streams sent in [a, b) that got no reply.
    pub fn lost(&self, s: usize, a: f64, b: f64) -> u64 {
        let mut n = 0;
        for r in &self.replied[s] {
            for (seq, t) in self.ticks.iter().enumerate() {
                if *t >= a && *t < b && !r.replied.get(seq).copied().unwrap_or(false) {
                    n += 1;
                }
            }
        }
        n
    }

    /// Packets of subscriber s's streams sent in [a, b).
    pub fn sent(&self, s: usize, a: f64, b: f64) -> u64 {
        let per = self.ticks.iter().filter(|t| **t >= a && **t < b).count() as u64;
        per * self.replied[s].len() as u64
    }

    /// Time from `t` until every stream of subscriber s arrived through a node other than
    /// `old` (None if that never happened).
    pub fn recovered_after(&self, s: usize, old: usize, t: f64, nodes: usize) -> Option<f64> {
        let mut worst: f64 = 0.0;
        for st in &self.seen[s] {
            let c = st
                .changes
                .iter()
                .find(|c| c.0 > t && node_of(c.1, nodes).is_some_and(|n| n != old))?;
            worst = worst.max(c.0 - t);
        }
        Some(worst)
    }

    /// Packets the server received from each node's pool in [a, b).
    pub fn packets_per_node(&self, a: f64, b: f64, nodes: usize) -> Vec<u64> {
        let mut v = vec![0; nodes];
        for (t, src) in &self.server_rx {
            if *t >= a && *t < b {
                if let Some(n) = node_of(*src, nodes) {
                    v[n] += 1;
                }
            }
        }
        v
    }
}

/// One node-leaves or node-joins event, measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Event {
    pub what: String,
    pub node: usize,
    /// Time until the outside router's route changed (withdrawn or back), ms.
    pub routing_ms: f64,
    /// Time until the inside router's health check had changed the group, ms (from the same
    /// start as `routing_ms`).
    #[serde(default)]
    pub group_ms: Option<f64>,
    /// Add only: setting the node up (namespace, links, configs, BIRD, the routers' new
    /// neighbours, xlat until its pool route is up), ms; routing_ms and group_ms count from
    /// its end.
    #[serde(default)]
    pub setup_ms: Option<f64>,
    /// Subscribers whose node changed across the event (of those sending before it).
    pub moved: Vec<usize>,
    /// Those of them that were not on (leave) / did not go to (join) the event's node.
    pub moved_other: Vec<usize>,
    pub moved_pct: f64,
    /// Stream packets of subscribers that did not move, lost in the event's window.
    pub other_flows_lost: u64,
    pub other_flows_sent: u64,
    /// Lost packets of the moved subscribers' streams.
    pub moved_flows_lost: u64,
    /// Longest time from the kill until a moved subscriber's every stream arrived through
    /// another node, ms (leave only).
    pub recover_ms: Option<f64>,
}

/// Subscribers that started after a node was added: where they landed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Late {
    /// Their indexes (subscriber(s) is the address).
    pub subscribers: Vec<usize>,
    /// Node of each at the end (None: its streams disagreed or none arrived).
    pub node: Vec<Option<usize>>,
    /// How many landed on the added node.
    pub on_new_node: usize,
    /// Their stream packets sent after they started, and those without an echo.
    pub sent: u64,
    pub lost: u64,
    /// Echoes received of the streams of those on the added node (its return traffic).
    pub new_node_replied: u64,
    /// The added node's own UDP sessions to the server at the end, (inside, outside).
    pub new_node_sessions: Vec<(Ipv4Addr, Ipv4Addr)>,
}

/// One load step: every stream at a higher rate through all nodes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoadStep {
    pub interval_ms: f64,
    pub secs: f64,
    /// Stream packets per second offered by all subscribers (the ticks actually sent).
    pub offered_pps: f64,
    /// Per node: stream packets per second the server received from its pool.
    pub carried_pps: Vec<f64>,
    /// Share of the offered packets whose echo came back.
    pub replied_pct: f64,
    /// Per node: xlat CPU ns per packet crossing it (out or back).
    pub cpu_ns_per_pkt: Vec<Option<f64>>,
    /// Per node: xlat CPU time over wall time, percent of one core.
    pub cpu_pct: Vec<Option<f64>>,
}

/// What a scale-out run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outcome {
    pub nodes: usize,
    pub subscribers: usize,
    pub flows: usize,
    pub routing: String,
    /// Pools of the nodes, the added one last.
    pub pools: Vec<String>,
    /// Node of each subscriber in the steady state (None: its streams disagreed or none
    /// arrived).
    pub before: Vec<Option<usize>>,
    /// Each subscriber's streams' source addresses at the server in the steady state.
    pub sources_before: Vec<Vec<Ipv4Addr>>,
    pub packets_per_node: Vec<u64>,
    pub cpu_ns_per_pkt: Vec<Option<f64>>,
    /// Each node's UDP sessions to the server at the end of the steady state, (inside,
    /// outside) addresses, from the node's own `xlat show sessions`.
    pub node_sessions: Vec<Vec<(Ipv4Addr, Ipv4Addr)>>,
    pub buckets_before: BTreeMap<u32, usize>,
    pub steady_lost: u64,
    pub steady_sent: u64,
    /// The load steps after the steady state (all nodes up).
    #[serde(default)]
    pub load: Vec<LoadStep>,
    pub leave: Event,
    pub after_leave: Vec<Option<usize>>,
    pub join: Event,
    pub after_join: Vec<Option<usize>>,
    pub buckets_after_join: BTreeMap<u32, usize>,
    /// A new node added (index `nodes`): the established subscribers' figures.
    #[serde(default)]
    pub add: Option<Event>,
    #[serde(default)]
    pub after_add: Vec<Option<usize>>,
    #[serde(default)]
    pub late: Option<Late>,
    #[serde(default)]
    pub buckets_after_add: BTreeMap<u32, usize>,
    pub bird: String,
    /// The inside router's health check's log (every group change).
    #[serde(default)]
    pub health_log: String,
}

fn sources_at(r: &Record, s: usize, t: f64) -> Vec<Ipv4Addr> {
    r.seen[s]
        .iter()
        .filter_map(|st| {
            st.changes
                .iter()
                .take_while(|c| c.0 <= t)
                .last()
                .map(|c| c.1)
        })
        .collect()
}

fn cpu_of(c: &Cluster, nodes: usize) -> Vec<Option<u64>> {
    (0..nodes)
        .map(|i| c.xlat_pid(i).and_then(sys::proc_cpu_ns))
        .collect()
}

/// CPU ns per crossing: each stream packet crosses its node twice (out and back).
fn ns_per_pkt(cpu0: &[Option<u64>], cpu1: &[Option<u64>], packets: &[u64]) -> Vec<Option<f64>> {
    (0..packets.len())
        .map(|i| match (cpu0[i], cpu1[i]) {
            (Some(x), Some(y)) if packets[i] > 0 => {
                Some((y.saturating_sub(x)) as f64 / (2 * packets[i]) as f64)
            }
            _ => None,
        })
        .collect()
}

/// The record's tick times in [a, b).
fn ticks_in(r: &Record, a: f64, b: f64) -> usize {
    r.ticks.iter().filter(|t| **t >= a && **t < b).count()
}

/// Runs the whole experiment: steady state, load steps, one node killed, the node back, a
/// new node added and late subscribers.
pub fn run(opts: &ScaleOpts) -> Result<Outcome> {
    let mut c = Cluster::new(opts)?;
    let nodes = opts.nodes;
    // node_of over every pool the run may use (the added node's included).
    let all = nodes + usize::from(opts.add_node);
    let settle = opts.settle.as_secs_f64();
    let limit = Duration::from_secs(30);
    // Enough sending for every phase's worst case; the streams stop by themselves then.
    let traffic = Traffic::start(
        &c,
        (5.0 + opts.load_steps.len() as f64) * (settle + 1.0)
            + 4.0 * limit.as_secs_f64()
            + 3.0 * f64::from(opts.idle_timer)
            + 10.0,
    )?;
    // Warm-up: every stream has a session and has been seen.
    sys::sleep_interruptible(Duration::from_secs(1));
    sys::check_stop()?;
    let a = traffic.now();
    let cpu0 = cpu_of(&c, nodes);
    sys::sleep_interruptible(opts.settle);
    sys::check_stop()?;
    let cpu1 = cpu_of(&c, nodes);
    let b = traffic.now();
    let buckets_before = c.buckets();
    let mut node_sessions = Vec::new();
    for i in 0..nodes {
        node_sessions.push(c.sessions(i)?.into_iter().collect());
    }

    // Load steps: every stream faster, through all nodes; per window the nodes' CPU.
    let mut load_windows = Vec::new();
    for &iv in &opts.load_steps {
        traffic.set_interval(iv);
        sys::sleep_interruptible(Duration::from_millis(500));
        sys::check_stop()?;
        let (t0, c0) = (traffic.now(), cpu_of(&c, nodes));
        sys::sleep_interruptible(opts.settle);
        sys::check_stop()?;
        let (t1, c1) = (traffic.now(), cpu_of(&c, nodes));
        load_windows.push((iv, t0, t1, c0, c1));
    }
    if !opts.load_steps.is_empty() {
        traffic.set_interval(opts.interval);
        // Let the queues of the last step drain before the events.
        sys::sleep_interruptible(Duration::from_secs(1));
        sys::check_stop()?;
    }

    // Which node to stop: the one given, else the one with most subscribers now.
    let seen = traffic.seen();
    let mut count = vec![0usize; nodes];
    for row in seen.iter().take(opts.subscribers) {
        if let Some(n) = row
            .first()
            .and_then(|st| st.changes.last())
            .and_then(|x| node_of(x.1, nodes))
        {
            count[n] += 1;
        }
    }
    let k = opts.kill.unwrap_or_else(|| {
        (0..nodes)
            .max_by_key(|&i| (count[i], std::cmp::Reverse(i)))
            .unwrap_or(0)
    });
    let others: Vec<usize> = (0..nodes).filter(|&i| i != k).collect();
    let everyone: Vec<usize> = (0..nodes).collect();

    // A node leaves: SIGKILL its xlat; BIRD withdraws its pool from both routers; the inside
    // router's health check takes the node out of the group.
    let t_kill = traffic.now();
    let kill_at = Instant::now();
    c.kill_xlat(k)?;
    let withdraw = c.wait_outside_route(k, false, limit)?;
    c.wait_group(&others, limit)?;
    let leave_group = kill_at.elapsed();
    // Until every stream of the node's subscribers arrives through another node (bounded).
    let deadline = Instant::now() + limit;
    loop {
        let s = traffic.seen();
        let waiting = s.iter().any(|row| {
            row.iter()
                .any(|st| st.changes.last().and_then(|x| node_of(x.1, nodes)) == Some(k))
        });
        if !waiting || Instant::now() > deadline || sys::stopped() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    sys::sleep_interruptible(Duration::from_secs(1));
    sys::check_stop()?;
    let t_left = traffic.now();

    // The node comes back: xlat restarted, the route returns, the health check puts it back.
    let t_start = traffic.now();
    let start_at = Instant::now();
    c.start_xlat(k)?;
    let announce = c.wait_outside_route(k, true, limit)?;
    c.wait_group(&everyone, limit)?;
    let join_group = start_at.elapsed();
    sys::sleep_interruptible(opts.settle + Duration::from_secs(opts.idle_timer.into()));
    sys::check_stop()?;
    let t_end = traffic.now();
    let buckets_after_join = c.buckets();

    // A new node: N -> N+1 the way an operator adds one; then new subscribers.
    let mut add_times = None;
    let mut add_setup = Duration::ZERO;
    if opts.add_node {
        let t_add = traffic.now();
        let add_at = Instant::now();
        let j = c.add_node()?;
        add_setup = add_at.elapsed();
        let with_new: Vec<usize> = (0..=nodes).collect();
        let (announced, grouped) = c.wait_joined(j, &with_new, limit)?;
        // Idle buckets move to the new node after the idle timer; then new subscribers.
        sys::sleep_interruptible(
            Duration::from_secs(opts.idle_timer.into()) + Duration::from_millis(500),
        );
        sys::check_stop()?;
        let t_late = traffic.start_late(opts.subscribers + opts.late_subscribers);
        sys::sleep_interruptible(opts.settle);
        sys::check_stop()?;
        let t_add_end = traffic.now();
        let new_sessions: Vec<(Ipv4Addr, Ipv4Addr)> = c.sessions(j)?.into_iter().collect();
        add_times = Some((
            t_add,
            t_late,
            t_add_end,
            announced,
            grouped,
            new_sessions,
            c.buckets(),
        ));
    }
    let bird = c.bird_show();
    let health_log = c.health_log();
    let routing = match c.routing() {
        Routing::Bgp => "bgp (BIRD)",
        Routing::Static => "static",
    };
    let rec = traffic.finish(Duration::from_millis(500))?;
    drop(c);

    let m = opts.subscribers;
    let before: Vec<Option<usize>> = (0..m).map(|s| rec.sub_node_at(s, b, nodes)).collect();
    let after_leave: Vec<Option<usize>> =
        (0..m).map(|s| rec.sub_node_at(s, t_left, nodes)).collect();
    let after_join: Vec<Option<usize>> = (0..m).map(|s| rec.sub_node_at(s, t_end, nodes)).collect();
    let packets = rec.packets_per_node(a, b, nodes);
    let cpu_ns_per_pkt = ns_per_pkt(&cpu0, &cpu1, &packets);
    let mut steady_lost = 0;
    let mut steady_sent = 0;
    for s in 0..m {
        steady_lost += rec.lost(s, a, b);
        steady_sent += rec.sent(s, a, b);
    }
    let load = load_windows
        .iter()
        .map(|(iv, t0, t1, c0, c1)| {
            let secs = (t1 - t0).max(1e-9);
            let pk = rec.packets_per_node(*t0, *t1, nodes);
            let offered = (ticks_in(&rec, *t0, *t1) * m * opts.flows) as f64;
            let lost: u64 = (0..m).map(|s| rec.lost(s, *t0, *t1)).sum();
            LoadStep {
                interval_ms: iv.as_secs_f64() * 1e3,
                secs,
                offered_pps: offered / secs,
                carried_pps: pk.iter().map(|p| *p as f64 / secs).collect(),
                replied_pct: if offered > 0.0 {
                    100.0 * (offered - lost as f64) / offered
                } else {
                    0.0
                },
                cpu_ns_per_pkt: ns_per_pkt(c0, c1, &pk),
                cpu_pct: (0..nodes)
                    .map(|i| match (c0[i], c1[i]) {
                        (Some(x), Some(y)) => Some(100.0 * y.saturating_sub(x) as f64 / 1e9 / secs),
                        _ => None,
                    })
                    .collect(),
            }
        })
        .collect();

    // `node_at` with `all` pools: the added node's pool is disjoint from the others.
    let event = |what: &str,
                 node: usize,
                 from: &[Option<usize>],
                 to: &[Option<usize>],
                 t0: f64,
                 t1: f64,
                 routing_ms: f64,
                 group_ms: f64,
                 leave: bool| {
        let moved: Vec<usize> = (0..m).filter(|&s| from[s] != to[s]).collect();
        let moved_other: Vec<usize> = moved
            .iter()
            .copied()
            .filter(|&s| {
                if leave {
                    from[s] != Some(node)
                } else {
                    to[s] != Some(node)
                }
            })
            .collect();
        let (mut ol, mut os, mut ml) = (0, 0, 0);
        for s in 0..m {
            if moved.contains(&s) {
                ml += rec.lost(s, t0, t1);
            } else {
                ol += rec.lost(s, t0, t1);
                os += rec.sent(s, t0, t1);
            }
        }
        let recover_ms = if leave && !moved.is_empty() {
            moved
                .iter()
                .map(|&s| rec.recovered_after(s, node, t0, all))
                .try_fold(0.0f64, |acc, x| x.map(|v| acc.max(v)))
                .map(|v| v * 1e3)
        } else {
            None
        };
        Event {
            what: what.to_string(),
            node,
            routing_ms,
            group_ms: Some(group_ms),
            setup_ms: None,
            moved_pct: 100.0 * moved.len() as f64 / m as f64,
            moved,
            moved_other,
            other_flows_lost: ol,
            other_flows_sent: os,
            moved_flows_lost: ml,
            recover_ms,
        }
    };
    let leave = event(
        "leave",
        k,
        &before,
        &after_leave,
        t_kill,
        t_left,
        withdraw.as_secs_f64() * 1e3,
        leave_group.as_secs_f64() * 1e3,
        true,
    );
    let join = event(
        "join",
        k,
        &after_leave,
        &after_join,
        t_start,
        t_end,
        announce.as_secs_f64() * 1e3,
        join_group.as_secs_f64() * 1e3,
        false,
    );
    let (mut add, mut after_add, mut late, mut buckets_after_add) =
        (None, Vec::new(), None, BTreeMap::new());
    if let Some((t_add, t_late, t_add_end, announced, grouped, new_sessions, bk)) = add_times {
        let j = nodes;
        let at_add: Vec<Option<usize>> = (0..m).map(|s| rec.sub_node_at(s, t_add, all)).collect();
        after_add = (0..m).map(|s| rec.sub_node_at(s, t_add_end, all)).collect();
        add = Some(event(
            "add",
            j,
            &at_add,
            &after_add,
            t_add,
            t_add_end,
            announced.as_secs_f64() * 1e3,
            grouped.as_secs_f64() * 1e3,
            false,
        ));
        if let Some(e) = add.as_mut() {
            e.setup_ms = Some(add_setup.as_secs_f64() * 1e3);
        }
        let subs: Vec<usize> = (m..m + opts.late_subscribers).collect();
        let node: Vec<Option<usize>> = subs
            .iter()
            .map(|&s| rec.sub_node_at(s, t_add_end, all))
            .collect();
        let on_new: Vec<usize> = subs
            .iter()
            .zip(&node)
            .filter(|(_, n)| **n == Some(j))
            .map(|(s, _)| *s)
            .collect();
        let (mut sent, mut lost, mut replied) = (0, 0, 0);
        for &s in &subs {
            let (x, l) = (
                rec.sent(s, t_late, t_add_end),
                rec.lost(s, t_late, t_add_end),
            );
            sent += x;
            lost += l;
            if on_new.contains(&s) {
                replied += x - l;
            }
        }
        late = Some(Late {
            subscribers: subs,
            node,
            on_new_node: on_new.len(),
            sent,
            lost,
            new_node_replied: replied,
            new_node_sessions: new_sessions,
        });
        buckets_after_add = bk;
    }
    Ok(Outcome {
        nodes,
        subscribers: m,
        flows: opts.flows,
        routing: routing.to_string(),
        pools: (0..all)
            .map(|i| {
                let (p, l) = pool_of(i);
                format!("{p}/{l}")
            })
            .collect(),
        sources_before: (0..m).map(|s| sources_at(&rec, s, b)).collect(),
        before,
        packets_per_node: packets,
        cpu_ns_per_pkt,
        node_sessions,
        buckets_before,
        steady_lost,
        steady_sent,
        load,
        leave,
        after_leave,
        join,
        after_join,
        buckets_after_join,
        add,
        after_add,
        late,
        buckets_after_add,
        bird,
        health_log,
    })
}

// ---------------------------------------------------------------------------------------
// `xlat lab run scale-out`: the run directory, results.json and the report.

fn one(v: f64) -> Spread {
    Spread::of(&[v])
}

/// The lab's tables for an outcome: the distribution over nodes and the two events.
pub fn experiments(o: &Outcome, settle: f64) -> Vec<Experiment> {
    let label = format!("UDP {PAYLOAD} B");
    let total: u64 = o.packets_per_node.iter().sum();
    let mut dist = Vec::new();
    for i in 0..o.nodes {
        let subs = o.before.iter().filter(|n| **n == Some(i)).count();
        let mut metrics = BTreeMap::new();
        metrics.insert("subscribers".into(), one(subs as f64));
        metrics.insert(
            "subscribers_pct".into(),
            one(100.0 * subs as f64 / o.subscribers.max(1) as f64),
        );
        metrics.insert("streams".into(), one((subs * o.flows) as f64));
        metrics.insert("packets".into(), one(o.packets_per_node[i] as f64));
        metrics.insert(
            "packets_pct".into(),
            one(if total > 0 {
                100.0 * o.packets_per_node[i] as f64 / total as f64
            } else {
                0.0
            }),
        );
        let b = o.buckets_before.get(&(i as u32 + 1)).copied().unwrap_or(0);
        metrics.insert("buckets".into(), one(b as f64));
        if let Some(ns) = o.cpu_ns_per_pkt[i] {
            metrics.insert("xlat_ns_per_pkt".into(), one(ns));
        }
        dist.push(Row {
            device: format!("node {i} (pool {})", o.pools[i]),
            size: label.clone(),
            metrics,
            ..Row::default()
        });
    }
    let unassigned = o.before.iter().filter(|n| n.is_none()).count();
    let mut ev_rows = Vec::new();
    for e in [&o.leave, &o.join].into_iter().chain(o.add.as_ref()) {
        let mut metrics = BTreeMap::new();
        metrics.insert("routing_ms".into(), one(e.routing_ms));
        if let Some(g) = e.group_ms {
            metrics.insert("group_ms".into(), one(g));
        }
        if let Some(x) = e.setup_ms {
            metrics.insert("setup_ms".into(), one(x));
        }
        metrics.insert("moved".into(), one(e.moved.len() as f64));
        metrics.insert("moved_pct".into(), one(e.moved_pct));
        metrics.insert("moved_other".into(), one(e.moved_other.len() as f64));
        metrics.insert("other_flows_lost".into(), one(e.other_flows_lost as f64));
        metrics.insert("other_flows_sent".into(), one(e.other_flows_sent as f64));
        metrics.insert("moved_flows_lost".into(), one(e.moved_flows_lost as f64));
        if let Some(r) = e.recover_ms {
            metrics.insert("recover_ms".into(), one(r));
        }
        let device = match e.what.as_str() {
            "leave" => format!("node {} leaves (xlat SIGKILLed)", e.node),
            "add" => format!(
                "node {} added (new, pool {})",
                e.node,
                o.pools.get(e.node).map(String::as_str).unwrap_or("?")
            ),
            _ => format!("node {} rejoins (xlat restarted)", e.node),
        };
        let mut notes = Vec::new();
        if let (true, Some(l)) = (e.what == "add", &o.late) {
            metrics.insert("late_subscribers".into(), one(l.subscribers.len() as f64));
            metrics.insert("late_on_new_node".into(), one(l.on_new_node as f64));
            metrics.insert("late_flows_sent".into(), one(l.sent as f64));
            metrics.insert("late_flows_lost".into(), one(l.lost as f64));
            notes.push(format!(
                "{} new subscribers started after the node joined: {} landed on it ({} echoes came back through it), the others on nodes {}",
                l.subscribers.len(),
                l.on_new_node,
                l.new_node_replied,
                l.node
                    .iter()
                    .filter(|n| **n != Some(e.node))
                    .map(|n| n.map_or("none".to_string(), |x| x.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !e.moved_other.is_empty() {
            notes.push(format!(
                "subscribers moved that were not node {}'s: {:?}",
                e.node, e.moved_other
            ));
        }
        ev_rows.push(Row {
            device,
            size: label.clone(),
            metrics,
            notes,
            ..Row::default()
        });
    }
    let mut method = format!(
        "{} xlat NAT44 nodes, each with its own pool prefix; the inside router spreads {} subscribers \
         ({} UDP streams each, one {PAYLOAD}-byte packet per stream every interval, echoed by the server) \
         over them with a resilient nexthop group hashing on the source address; the outside router \
         learns the pools by {}. Distribution: where each subscriber's streams arrived at the server \
         (by the pool their source address is in), packets the server received per node over {settle:.1} s \
         of steady state, and xlat's CPU time per packet crossing it (each packet crosses twice; \
         the nodes share this machine's CPUs and the load is light, so this includes wake-ups). \
         Leave: the node's xlat is SIGKILLed; routing = time until the outside router's route to its \
         pool is gone, then the inside router's health check (the lab) deletes its nexthop; recover = \
         until every stream of its subscribers arrived through another node. Rejoin: xlat restarted; \
         routing = time until the route is back, then the nexthop rejoins the group (only buckets idle \
         for the idle timer move to it, so established subscribers stay). Lost = stream packets sent in \
         the event's window without an echo.",
        o.nodes,
        o.subscribers,
        o.flows,
        o.routing
    );
    if unassigned > 0 {
        method.push_str(&format!(
            " {unassigned} subscribers had no single node in the steady state."
        ));
    }
    let mut load_rows = Vec::new();
    for st in &o.load {
        let size = format!("every {:.0} ms per stream", st.interval_ms);
        let mut projected = 0.0;
        let mut all_cap = true;
        for i in 0..o.nodes {
            let mut metrics = BTreeMap::new();
            metrics.insert("carried_pps".into(), one(st.carried_pps[i]));
            if let Some(ns) = st.cpu_ns_per_pkt[i] {
                metrics.insert("xlat_ns_per_pkt".into(), one(ns));
                // One dedicated core: 1e9 ns / cost per crossing, halved (out and back).
                let cap = 1e9 / ns / 2.0;
                metrics.insert("capacity_pps_projected".into(), one(cap));
                projected += cap;
            } else {
                all_cap = false;
            }
            if let Some(p) = st.cpu_pct[i] {
                metrics.insert("xlat_cpu_pct".into(), one(p));
            }
            load_rows.push(Row {
                device: format!("node {i}"),
                size: size.clone(),
                metrics,
                ..Row::default()
            });
        }
        let mut metrics = BTreeMap::new();
        metrics.insert("offered_pps".into(), one(st.offered_pps));
        metrics.insert("carried_pps".into(), one(st.carried_pps.iter().sum()));
        metrics.insert("replied_pct".into(), one(st.replied_pct));
        if all_cap {
            metrics.insert("capacity_pps_projected".into(), one(projected));
        }
        load_rows.push(Row {
            device: format!("all {} nodes", o.nodes),
            size,
            metrics,
            notes: vec![format!(
                "capacity_pps_projected is a projection, not a measurement: each node on its own dedicated core at the CPU cost per packet measured here ({} nodes x 1e9 / (2 x ns per crossing) round trips/s); in this run all nodes, the routers and the generator share {} CPUs",
                o.nodes,
                sys::ncpus()
            )],
            ..Row::default()
        });
    }
    let mut out = vec![
        Experiment {
            name: "scale-out-distribution".into(),
            title: format!(
                "Scale-out: {} subscribers x {} streams over {} nodes ({})",
                o.subscribers, o.flows, o.nodes, o.routing
            ),
            x_label: None,
            method,
            rows: dist,
        },
        Experiment {
            name: "scale-out-events".into(),
            title: if o.add.is_some() {
                "Scale-out: a node leaves and rejoins, then a new node is added".into()
            } else {
                "Scale-out: a node leaves and rejoins".into()
            },
            x_label: None,
            method: "The inside router's group follows the health check docs/scale-out/xlat-ecmp-health.sh \
                (BIRD on the inside router learns which nodes announce their pool); group_ms = time from \
                the event until the group changed. Add: a new namespace with xlat and BIRD, its own pool, \
                BGP neighbours added on both routers (birdc configure), the node in the health check's \
                list; moved/other_flows_* count the subscribers sending before it; then new subscribers \
                start (late_*)."
                .into(),
            rows: ev_rows,
        },
    ];
    if !load_rows.is_empty() {
        out.push(Experiment {
            name: "scale-out-load".into(),
            title: format!(
                "Scale-out: aggregate load through {} nodes, CPU per node (capacity is a projection)",
                o.nodes
            ),
            x_label: None,
            method: format!(
                "Every stream of the {} subscribers sends one {PAYLOAD}-byte packet per interval, echoed by \
                 the server; carried = packets per second the server received from each node's pool; \
                 xlat CPU from /proc of each node's xlat per packet crossing it (each packet crosses twice). \
                 capacity_pps_projected = 1e9 / (2 x ns per crossing): round trips per second one node \
                 would carry on a dedicated core; the aggregate is the sum over nodes. It is a projection: \
                 on this machine the nodes, routers, BIRD and the generator share {} CPUs.",
                o.subscribers,
                sys::ncpus()
            ),
            rows: load_rows,
        });
    }
    out
}

/// `xlat lab run scale-out`: runs, writes `results/<stamp>-scale-out/`, prints the tables.
pub fn main_run(o: &crate::RunOpts) -> Result<PathBuf> {
    sys::install_stop_handler();
    let base = o.out.clone().unwrap_or_else(|| PathBuf::from("results"));
    let stamp = sys::utc_stamp();
    let dir = base.join(format!("{stamp}-scale-out"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let routing = match o.routing.as_deref() {
        Some("static") => Routing::Static,
        Some(_) => Routing::Bgp,
        None if sys::have("bird") && sys::have("birdc") => Routing::Bgp,
        None => Routing::Static,
    };
    let nodes = o.nodes.unwrap_or(3);
    let opts = ScaleOpts {
        nodes,
        subscribers: o.subscribers.unwrap_or(24),
        flows: o.flows.map(|f| f as usize).unwrap_or(4),
        interval: Duration::from_millis(20),
        settle: Duration::from_secs_f64(o.duration.unwrap_or(3.0).clamp(0.0, 600.0)),
        routing,
        buckets: 128,
        idle_timer: 2,
        dir: dir.join("cluster"),
        kill: None,
        xlat_bin: None,
        add_node: nodes < MAX_NODES,
        late_subscribers: if nodes < MAX_NODES {
            let subs = o.subscribers.unwrap_or(24);
            (subs / 3)
                .clamp(1, 16)
                .min(MAX_SUBSCRIBERS.saturating_sub(subs))
        } else {
            0
        },
        load_steps: vec![
            Duration::from_millis(5),
            Duration::from_millis(2),
            Duration::from_millis(1),
        ],
    };
    opts.validate()?;
    let started = Instant::now();
    eprintln!(
        "xlat lab scale-out: {nodes} nodes, {} subscribers x {} streams, routing {routing:?}; results in {}",
        opts.subscribers,
        opts.flows,
        dir.display()
    );
    let mut res = RunResults {
        schema: SCHEMA,
        name: "scale-out".into(),
        command_line: std::env::args().collect(),
        started_utc: stamp,
        machine: Machine::read(),
        settings: Settings {
            devices: vec![format!("xlat-nat44 x {nodes}")],
            sizes: vec![format!("UDP {PAYLOAD} B")],
            trial_secs: opts.settle.as_secs_f64(),
            repeats: 1,
            flows: opts.flows as u32,
            ..Settings::default()
        },
        placement: format!(
            "{nodes} xlat nodes, BIRD, the routers and the streams all share this machine's {} CPUs (no pinning)",
            sys::ncpus()
        ),
        ..RunResults::default()
    };
    res.versions
        .insert("xlat-lab".into(), env!("CARGO_PKG_VERSION").to_string());
    if routing == Routing::Bgp {
        if let Ok(v) = sys::cmd(5, &["bird", "--version"]) {
            res.versions.insert(
                "bird".into(),
                format!("{}{}", v.stdout, v.stderr).trim().to_string(),
            );
        }
    } else {
        res.notes.push("BIRD was not used: the outside router got static routes, which the lab removes when a node's xlat route goes".into());
    }
    let outcome = run(&opts);
    res.wall_secs = started.elapsed().as_secs_f64();
    match &outcome {
        Ok(out) => {
            res.experiments = experiments(out, opts.settle.as_secs_f64());
            res.notes.push(format!(
                "steady state: {} of {} stream packets unanswered; buckets per nexthop id before {:?}, after the rejoin {:?}",
                out.steady_lost, out.steady_sent, out.buckets_before, out.buckets_after_join
            ));
            crate::save_outcome(&dir, out)?;
        }
        Err(e) => res.incomplete = Some(format!("{e:#}")),
    }
    crate::finish(&dir, &res)?;
    outcome.map(|_| dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> Record {
        let p0 = Ipv4Addr::new(198, 19, 16, 1);
        let p1 = Ipv4Addr::new(198, 19, 17, 3);
        let seen = vec![
            vec![StreamSeen {
                changes: vec![(0.1, p0), (5.0, p1)],
                ..Default::default()
            }],
            vec![StreamSeen {
                changes: vec![(0.1, p1)],
                ..Default::default()
            }],
        ];
        let replied = vec![
            vec![StreamBack {
                replied: vec![true, false, true, true],
            }],
            vec![StreamBack {
                replied: vec![true, true, true],
            }],
        ];
        Record {
            ticks: vec![0.0, 1.0, 2.0, 3.0],
            seen,
            replied,
            server_rx: vec![
                (0.1, p0),
                (0.2, p1),
                (0.3, p1),
                (9.0, Ipv4Addr::new(192, 0, 2, 1)),
            ],
        }
    }

    #[test]
    fn pools_are_distinct_and_nodes_found_by_pool() {
        for i in 0..MAX_NODES {
            assert_eq!(node_of(pool_of(i).0, MAX_NODES), Some(i));
            let last = Ipv4Addr::from(u32::from(pool_of(i).0) + 15);
            assert_eq!(node_of(last, MAX_NODES), Some(i));
        }
        assert_eq!(node_of(Ipv4Addr::new(198, 19, 16, 16), 1), None);
        assert_eq!(node_of(Ipv4Addr::new(198, 18, 1, 1), MAX_NODES), None);
        assert_eq!(subscriber(0), Ipv4Addr::new(198, 18, 1, 1));
        assert_eq!(
            subscriber(MAX_SUBSCRIBERS - 1),
            Ipv4Addr::new(198, 18, 1, 250)
        );
    }

    #[test]
    fn payload_round_trips_and_rejects_others() {
        let p = payload(7, 3, 123_456);
        assert_eq!(parse_payload(&p), Some((7, 3, 123_456)));
        assert_eq!(parse_payload(&p[..10]), None);
        let mut q = p;
        q[0] = b'Y';
        assert_eq!(parse_payload(&q), None);
        assert_eq!(parse_payload(&[]), None);
    }

    #[test]
    fn record_answers_who_where_and_what_was_lost() {
        let r = rec();
        assert_eq!(r.sub_node_at(0, 1.0, 2), Some(0));
        assert_eq!(r.sub_node_at(0, 6.0, 2), Some(1));
        assert_eq!(r.sub_node_at(0, 0.0, 2), None);
        assert_eq!(r.sub_node_at(1, 1.0, 2), Some(1));
        assert_eq!(r.lost(0, 0.0, 10.0), 1);
        assert_eq!(r.lost(0, 2.0, 10.0), 0);
        // A tick the client never recorded as replied (short vector) counts as lost.
        assert_eq!(r.lost(1, 0.0, 10.0), 1);
        assert_eq!(r.sent(0, 0.0, 2.0), 2);
        let rec_s = r.recovered_after(0, 0, 2.0, 2).unwrap();
        assert!((rec_s - 3.0).abs() < 1e-9);
        assert_eq!(r.recovered_after(1, 1, 2.0, 2), None);
        assert_eq!(r.packets_per_node(0.0, 10.0, 2), vec![1, 2]);
    }

    #[test]
    fn options_are_checked() {
        let ok = ScaleOpts {
            nodes: 3,
            subscribers: 24,
            flows: 4,
            interval: Duration::from_millis(20),
            settle: Duration::from_secs(3),
            routing: Routing::Bgp,
            buckets: 128,
            idle_timer: 2,
            dir: PathBuf::from("/tmp/x"),
            kill: None,
            xlat_bin: None,
            add_node: true,
            late_subscribers: 8,
            load_steps: vec![Duration::from_millis(5)],
        };
        ok.validate().unwrap();
        for bad in [
            ScaleOpts {
                nodes: 1,
                ..ok.clone()
            },
            ScaleOpts {
                nodes: 13,
                ..ok.clone()
            },
            ScaleOpts {
                subscribers: 0,
                ..ok.clone()
            },
            ScaleOpts {
                subscribers: 251,
                ..ok.clone()
            },
            ScaleOpts {
                flows: 17,
                ..ok.clone()
            },
            ScaleOpts {
                kill: Some(3),
                ..ok.clone()
            },
            ScaleOpts {
                buckets: 2,
                ..ok.clone()
            },
            ScaleOpts {
                nodes: 12,
                ..ok.clone()
            },
            ScaleOpts {
                add_node: false,
                ..ok.clone()
            },
            ScaleOpts {
                subscribers: 245,
                ..ok.clone()
            },
            ScaleOpts {
                load_steps: vec![Duration::from_micros(100)],
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn configs_name_the_pool_and_tun() {
        let c = bird_node_config(
            Ipv4Addr::new(198, 19, 64, 2),
            64497,
            Ipv4Addr::new(198, 19, 64, 1),
            64496,
            Ipv4Addr::new(198, 18, 16, 1),
            "198.19.16.0/28",
            "xlat0",
        );
        assert!(c.contains("net ~ [ 198.19.16.0/28 ]") && c.contains("ifname = \"xlat0\""));
        assert!(c.contains("dest = RTD_UNICAST"));
        let x = node_config("xlat0", "198.19.16.0/28", "/tmp/s");
        assert!(x.contains("pool = [\"198.19.16.0/28\"]"));
        let o = bird_outside_config(
            Ipv4Addr::new(198, 19, 0, 2),
            &[(Ipv4Addr::new(198, 19, 64, 2), 64497)],
        );
        assert!(o.contains("neighbor 198.19.64.2 as 64497"));
        assert!(c.contains("neighbor 198.18.16.1 as 64511"));
        let i = bird_inside_config(
            Ipv4Addr::new(198, 18, 0, 1),
            &[(Ipv4Addr::new(198, 18, 16, 2), 64497)],
        );
        assert!(i.contains("kernel table 200") && i.contains("neighbor 198.18.16.2 as 64497"));
        assert!(i.contains("local as 64511"));
    }

    #[test]
    fn group_members_are_parsed_from_ip_nexthop() {
        assert_eq!(
            parse_group("id 100 group 1/3 type resilient buckets 128 idle_timer 2"),
            vec![0, 2]
        );
        assert_eq!(parse_group("id 100 group 3,2/1 type resilient"), vec![0, 2]);
        assert_eq!(
            parse_group("id 1 via 198.18.16.2 dev n0 scope link"),
            Vec::<usize>::new()
        );
        assert_eq!(parse_group(""), Vec::<usize>::new());
    }

    #[test]
    fn the_health_check_is_the_documented_script() {
        assert!(HEALTH_SCRIPT.starts_with("#!/bin/bash"));
        assert!(HEALTH_SCRIPT.contains("unbalanced_timer 0"));
        assert!(HEALTH_SCRIPT.contains("MAX_SECONDS"));
    }
}
