//! The xlat daemon: everything between the configuration file and the engine.
//!
//! - [`config`]: the TOML file, checked into an engine configuration with errors that name the
//!   file and key.
//! - [`run`]: the gateway runtime (TUN device, routes, workers, clean stop).
//! - [`routes`]: forwarding, policy routes and proxy ARP around the TUN device, failing
//!   closed when the daemon dies.
//! - [`rtnl`]: the routing changes as typed steps, made over rtnetlink in batches.
//! - [`journal`]: what the daemon changed on the machine, on disk before each change, so a
//!   killed run's leftovers are undone and the true originals restored on the next start.
//! - [`eventlog`]: NAT event logging, the engine's state events as syslog lines and IPFIX.
//! - [`ipfix`]: the IPFIX encoding of NAT events (RFC 7011, RFC 8158).
//! - [`control`]: the control socket protocol, its server thread and the `xlat show` client.
//! - [`metrics`]: the Prometheus text of the daemon's counters (docs/METRICS.md).
//! - [`notify`]: systemd's READY/WATCHDOG/STOPPING notifications (`Type=notify`).
//! - [`http`]: the `[metrics]` listener: `/metrics`, `/stats.json` and the live page.
//! - [`translate`]: offline translation of pcap files.
//! - [`tunnel_routes`]: policy rules, addresses and routes for the 6to4 / ISATAP endpoints.
//! - [`worker`]: the packet workers (one engine shard and one TUN queue each), their handoff
//!   rings and the fragment-owner table.

#![forbid(unsafe_code)]

pub mod afxdp;
pub mod cluster;
pub mod config;
pub mod control;
pub mod eventlog;
pub mod http;
pub mod inbox;
pub mod ipfix;
pub mod journal;
pub mod listing;
pub mod live;
pub mod metrics;
pub mod notify;
pub mod routes;
pub mod rtnl;
pub mod run;
pub mod sync;
pub mod sync_wire;
pub mod translate;
pub mod tunnel_routes;
pub mod worker;

pub use config::{Config, ConfigFileError};
