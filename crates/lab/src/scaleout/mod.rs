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
//!
//! One file per concern: `configs` (xlat's and BIRD's configurations), `testbed` (routers,
//! nodes, the group, the events), `traffic` (streams, echo server, record), `analysis` (the
//! record read back, pure), `run` (the sequence of events and load steps), `report`
//! (results.json and the tables) and `tests`.

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

pub use crate::addressing::scale_out::{pool_of, subscriber, INSIDE, SERVER};
use crate::results::{Experiment, Machine, Row, RunResults, Settings, SCHEMA};
use crate::stats::Spread;
use crate::sys;
use crate::topo::destroy_ns;

mod analysis;
mod configs;
mod report;
mod run;
mod testbed;
#[cfg(test)]
mod tests;
mod traffic;

pub use configs::*;
pub use report::*;
pub use run::*;
pub use testbed::*;
pub use traffic::*;

/// Most nodes: node ASNs are the documentation ASNs 64497..64511 (RFC 5398), the outside
/// router is 64496.
pub const MAX_NODES: usize = 12;
/// Most subscribers: 198.18.1.1 ..= 198.18.1.250.
pub const MAX_SUBSCRIBERS: usize = 250;
/// Most streams per subscriber.
pub const MAX_FLOWS: usize = 16;
pub const SERVER_PORT: u16 = 7000;
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
pub const HEALTH_SCRIPT: &str = include_str!("../../../../docs/scale-out/xlat-ecmp-health.sh");

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
