//! Counters: every query and every failure is counted, never logged one by one.
//!
//! [`Stats`] is shared by the listener and worker threads (relaxed atomics);
//! [`Dns64Counters`] is a plain snapshot the daemon serializes (`xlat show stats --json`,
//! key `"dns64"`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

macro_rules! counters {
    ($( $(#[doc = $doc:literal])* $name:ident ),* $(,)?) => {
        /// Live counters, updated by the service threads.
        #[derive(Debug, Default)]
        pub struct Stats {
            $( $(#[doc = $doc])* pub $name: AtomicU64, )*
        }

        /// A snapshot of [`Stats`].
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct Dns64Counters {
            $( $(#[doc = $doc])* pub $name: u64, )*
        }

        impl Stats {
            /// Reads every counter (each one atomically; the set is not one instant).
            pub fn snapshot(&self) -> Dns64Counters {
                Dns64Counters { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }
        }

        impl Dns64Counters {
            /// `(name, value)` for every counter, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($name), self.$name), )* ]
            }
        }
    };
}

counters! {
    /// Queries received (UDP and TCP), parseable or not.
    queries,
    /// Of those, over TCP.
    tcp_queries,
    /// AAAA queries answered with AAAA records synthesized from A records (RFC 6147 5.1.7).
    synthesized,
    /// Synthesized AAAA records, summed over those answers.
    synthesized_records,
    /// AAAA queries answered with the name's own AAAA records (RFC 6147 5.1.1).
    aaaa_real,
    /// AAAA records left out of answers because they were in the exclusion set (5.1.4).
    aaaa_excluded,
    /// AAAA queries whose A query gave nothing to synthesize from: the AAAA answer was
    /// returned (RFC 6147 5.4).
    aaaa_no_a,
    /// AAAA answers passed through with NXDOMAIN (RFC 6147 5.1.2).
    nxdomain,
    /// AAAA answers passed through as SERVFAIL, without synthesis, because an Extended DNS
    /// Error (RFC 8914) said DNSSEC validation failed upstream (RFC 6147 5.5).
    validation_failed,
    /// AAAA or pref64 PTR queries with CD and DO set, passed through unsynthesized (5.5).
    dnssec_passthrough,
    /// PTR queries in the pref64 reverse zone answered with a synthesized CNAME (5.3.1).
    ptr_synthesized,
    /// PTR queries in the pref64 reverse zone whose IPv4 name had no PTR data.
    ptr_no_data,
    /// Queries forwarded and answered unchanged (RFC 6147 5.3.3).
    passthrough,
    /// Upstream exchanges that failed: timeout, socket error, or no acceptable response,
    /// after trying every upstream.
    upstream_errors,
    /// Single upstream attempts that timed out.
    upstream_timeouts,
    /// Responses from an upstream that did not match the query (ID, question) or did not
    /// parse; ignored.
    upstream_bad_responses,
    /// Truncated UDP answers from an upstream retried over TCP.
    upstream_tcp_retries,
    /// SERVFAIL answers the DNS64 made itself (upstream failure).
    servfail_sent,
    /// Queries that did not parse (FORMERR sent when the header was readable).
    malformed,
    /// Answers truncated (TC) to fit the client's UDP size.
    truncated,
    /// UDP queries dropped because every worker was busy and the queue was full.
    dropped_overload,
    /// TCP connections closed at once because too many were open.
    tcp_refused,
    /// Answers that could not be sent to the client.
    send_errors,
    /// Answers that could not be encoded (a SERVFAIL went out instead).
    encode_errors,
}

/// Adds 1.
pub(crate) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds `n`.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
