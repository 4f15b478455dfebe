//! The xlat daemon: everything between the configuration file and the engine.
//!
//! - [`config`]: the TOML file, checked into an engine configuration with errors that name the
//!   file and key.
//! - [`run`]: the gateway runtime (TUN device, packet loop, expiry, clean stop).
//! - [`routes`]: forwarding, policy routes and proxy ARP around the TUN device (iproute2).
//! - [`control`]: the control socket protocol, its server thread and the `xlat show` client.
//! - [`translate`]: offline translation of pcap files.
//! - [`tunnel_routes`]: policy rules, addresses and routes for the 6to4 / ISATAP endpoints.

pub mod config;
pub mod control;
pub mod routes;
pub mod run;
pub mod translate;
pub mod tunnel_routes;

pub use config::{Config, ConfigFileError};
