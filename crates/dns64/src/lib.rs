//! DNS64 (RFC 6147): a DNS proxy that gives IPv6-only clients AAAA records for names that
//! have only A records, by embedding the IPv4 addresses in the pref64 (RFC 6052), so that a
//! NAT64 or SIIT translator can carry the traffic.
//!
//! - [`policy`]: what to do with one query (RFC 6147 5.1 AAAA synthesis, 5.1.4 exclusion set,
//!   5.3 PTR for the pref64 reverse zone, 5.5 DNSSEC bits, pass-through of the rest).
//! - [`upstream`]: the configured resolvers, over UDP and TCP.
//! - [`server`]: UDP and TCP listeners (RFC 7766), worker threads, counters.
//! - [`pref64`]: the pref64 and the RFC 6052 2.2 embedding this crate uses.
//!
//! The wire format is hickory-proto's; the DNS64 policy is ours. This DNS64 does not
//! validate DNSSEC (RFC 6147 5.5 describes what that implies; see [`policy`]).

#![forbid(unsafe_code)]

pub mod policy;
pub mod pref64;
pub mod server;
pub mod stats;
pub mod upstream;

use std::net::SocketAddr;
use std::time::Duration;

pub use policy::{Exchange, Policy, Transport, Upstream, UpstreamError};
pub use pref64::{Pref64, Prefix6, WELL_KNOWN_PREFIX};
pub use server::{Dns64Error, Dns64Service, Dns64Update};
pub use stats::{Dns64Counters, Stats};

/// Default time one upstream attempt may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default number of UDP worker threads (queries in progress at once).
pub const DEFAULT_WORKERS: usize = 8;
/// Default number of UDP queries waiting for a worker.
pub const DEFAULT_QUEUE: usize = 256;
/// Default limit on open TCP connections.
pub const DEFAULT_MAX_TCP: usize = 32;

/// The DNS64 service's settings (`[dns64]` in the xlat config file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dns64Config {
    /// Addresses to answer on, UDP and TCP.
    pub listen: Vec<SocketAddr>,
    /// Resolvers to ask, in order.
    pub upstream: Vec<SocketAddr>,
    /// Where synthesized addresses live (RFC 6147 5.2).
    pub prefix: Pref64,
    /// RFC 6147 5.1.4: AAAA records in these prefixes are treated as absent; `::ffff:0:0/96`
    /// is always among them.
    pub exclude: Vec<Prefix6>,
    /// One upstream attempt's limit.
    pub timeout: Duration,
    pub workers: usize,
    pub queue: usize,
    pub max_tcp_connections: usize,
}

impl Dns64Config {
    /// A configuration with the default limits.
    pub fn new(
        listen: Vec<SocketAddr>,
        upstream: Vec<SocketAddr>,
        prefix: Pref64,
        exclude: Vec<Prefix6>,
    ) -> Dns64Config {
        Dns64Config {
            listen,
            upstream,
            prefix,
            exclude,
            timeout: DEFAULT_TIMEOUT,
            workers: DEFAULT_WORKERS,
            queue: DEFAULT_QUEUE,
            max_tcp_connections: DEFAULT_MAX_TCP,
        }
    }
}
