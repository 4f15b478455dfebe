//! Counters and drop reasons. One macro list yields the enum, its stable snake_case name and
//! the operator-facing explanation (`xlat show stats --explain`), so the three never drift.

use serde::Serialize;

macro_rules! reasons {
    ($(#[$m:meta])* pub enum $name:ident { $( $(#[doc = $doc:literal])+ $variant:ident = $key:literal, )+ }) => {
        $(#[$m])*
        pub enum $name { $( $(#[doc = $doc])+ $variant, )+ }

        impl $name {
            /// Every variant, in declaration order (the index of the counter array).
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];
            /// Number of variants.
            pub const COUNT: usize = [$($key,)+].len();
            /// Stable snake_case name used in stats output and metrics.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $key,)+ }
            }
            /// What happened and what an operator can change (the variant's doc comment).
            pub fn explain(self) -> &'static str {
                match self { $($name::$variant => concat!($($doc, "\n"),+).trim_ascii(),)+ }
            }
        }
    };
}

reasons! {
    /// Why a packet was not translated. Every drop names one of these and bumps its counter.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum DropReason {
        /// Shorter than an IPv4 header. Malformed input; nothing to configure.
        Truncated = "truncated",
        /// Not an IPv4 packet (version nibble is not 4). Only IPv4 is translated by NAT44;
        /// check what routes IPv6 into the xlat interface.
        NotIpv4 = "not_ipv4",
        /// IPv4 header length (IHL) below 5 or beyond the packet. Malformed input.
        BadIhl = "bad_ihl",
        /// IPv4 total length below the header length or beyond the bytes received. Malformed input.
        BadTotalLength = "bad_total_length",
        /// The IPv4 header checksum does not verify (RFC 1812 5.2.2). Corrupt or forged input.
        BadIpChecksum = "bad_ip_checksum",
        /// The first fragment or unfragmented packet is too short for its TCP/UDP/ICMP header
        /// (ports, flags and checksum). Malformed or a tiny-fragment attack (RFC 1858).
        TruncatedL4 = "truncated_l4",
        /// Source is not an inside address and destination is not a pool or static outside
        /// address: the packet is not ours. Check the routes that lead into the xlat interface
        /// and the `nat44.inside` / `nat44.pool` lists.
        NotOurs = "not_ours",
        /// A protocol the NAPT cannot translate (it needs ports or an ICMP identifier).
        /// Only TCP, UDP and ICMP cross a dynamic NAT; static 1:1 entries carry any protocol.
        UnsupportedProtocol = "unsupported_protocol",
        /// An ICMP type the NAT does not translate (RFC 5508: redirects, source quench,
        /// router and information messages are not forwarded across the NAT).
        UnsupportedIcmp = "unsupported_icmp",
        /// Outbound from an inside host that has no static entry while `nat44.mode = "static"`.
        /// Add a static entry or use mode "pool" / "napt".
        NoStaticMapping = "no_static_mapping",
        /// Inbound to a pool address and port that has no mapping: unsolicited traffic
        /// (RFC 4787 5; RFC 5382 REQ-4 lets a NAT drop unsolicited SYNs silently).
        NoMapping = "no_mapping",
        /// Inbound to a mapped port from a remote the filtering policy does not admit
        /// (RFC 4787 5: address-dependent or address-and-port-dependent filtering). Use
        /// `nat44.filtering = "endpoint-independent"` to admit any remote.
        Filtered = "filtered",
        /// No free outside port (or, in pool mode, no free outside address) for a new
        /// mapping. Widen `nat44.pool` or `nat44.ports`, or shorten timeouts.
        PoolExhausted = "pool_exhausted",
        /// The session table is full (`limits.max_sessions`).
        SessionLimit = "session_limit",
        /// This inside host holds `limits.max_sessions_per_host` sessions already.
        HostSessionLimit = "host_session_limit",
        /// A TCP segment other than SYN that would open a new session (RFC 5382 / RFC 6146
        /// 3.5.2.2 create sessions only on SYN). Often late packets of an expired session.
        TcpNoSession = "tcp_no_session",
        /// An ICMP error whose embedded packet is too short or malformed to identify a session
        /// (RFC 5508 4).
        IcmpErrorMalformed = "icmp_error_malformed",
        /// An ICMP error whose ICMP checksum, or whose embedded IPv4 header checksum, does not
        /// verify (RFC 5508 REQ-3 a: silently dropped). Corrupt or forged input.
        IcmpErrorBadChecksum = "icmp_error_bad_checksum",
        /// An ICMP error about a flow that has no session here (RFC 5508 4: drop it).
        IcmpErrorNoSession = "icmp_error_no_session",
        /// A non-first fragment whose first fragment never arrived: held, then timed out
        /// (`timeouts.fragment`), or the held-fragment store was full (`limits.max_fragments_held`).
        FragmentNoFirst = "fragment_no_first",
        /// A non-first TCP/UDP fragment whose offset overlaps the transport header (RFC 3128
        /// overlapping-fragment attack; RFC 4787 REQ-14 a). Hostile input.
        FragmentOverlap = "fragment_overlap",
        /// The fragment tracking table is full (`limits.max_fragment_flows`).
        FragmentLimit = "fragment_limit",
        /// A fragmented ICMP error message: RFC 5508 requires none; dropped.
        FragmentedIcmpError = "fragmented_icmp_error",
    }
}

reasons! {
    /// Things that happened, counted.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Event {
        /// Packets handed to the engine.
        PacketsIn = "packets_in",
        /// Packets translated and handed back for transmission.
        PacketsOut = "packets_out",
        /// Outbound packets (inside -> outside) translated.
        Outbound = "outbound",
        /// Inbound packets (outside -> inside) translated.
        Inbound = "inbound",
        /// Packets translated twice because an inside host addressed another inside host by
        /// its outside address (hairpinning, RFC 4787 REQ-9).
        Hairpinned = "hairpinned",
        /// Packets translated by a static 1:1 entry.
        StaticTranslated = "static_translated",
        /// ICMP error messages translated with their embedded packet (RFC 5508 4).
        IcmpErrorsTranslated = "icmp_errors_translated",
        /// Fragments translated.
        Fragments = "fragments",
        /// Non-first fragments held until their first fragment arrived (out of order).
        FragmentsHeld = "fragments_held",
        /// Mappings (inside address and port -> outside address and port) created.
        MappingsCreated = "mappings_created",
        /// Source port or ICMP identifier kept unchanged in a new mapping (RFC 4787 4.1 port preservation).
        PortsPreserved = "ports_preserved",
        /// Sessions created.
        SessionsCreated = "sessions_created",
        /// Sessions removed because their idle timeout passed.
        SessionsExpired = "sessions_expired",
    }
}

/// Per-engine counters: plain arrays indexed by the enums (one engine per worker; the daemon
/// sums them when asked).
#[derive(Clone, Debug)]
pub struct Counters {
    pub drops: [u64; DropReason::COUNT],
    pub events: [u64; Event::COUNT],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            drops: [0; DropReason::COUNT],
            events: [0; Event::COUNT],
        }
    }
}

impl Counters {
    #[inline]
    pub fn drop(&mut self, r: DropReason) {
        if let Some(c) = self.drops.get_mut(r as usize) {
            *c = c.wrapping_add(1);
        }
    }
    #[inline]
    pub fn event(&mut self, e: Event) {
        self.add(e, 1);
    }
    #[inline]
    pub fn add(&mut self, e: Event, n: u64) {
        if let Some(c) = self.events.get_mut(e as usize) {
            *c = c.wrapping_add(n);
        }
    }
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops.get(r as usize).copied().unwrap_or(0)
    }
    pub fn count(&self, e: Event) -> u64 {
        self.events.get(e as usize).copied().unwrap_or(0)
    }
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
    /// Adds another worker's counters into these.
    pub fn merge(&mut self, o: &Counters) {
        for (a, b) in self.drops.iter_mut().zip(o.drops.iter()) {
            *a = a.wrapping_add(*b);
        }
        for (a, b) in self.events.iter_mut().zip(o.events.iter()) {
            *a = a.wrapping_add(*b);
        }
    }
}

/// A named counter value, for snapshots.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct NamedCount {
    pub name: String,
    pub value: u64,
    pub explain: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_name_and_explanation() {
        assert_eq!(DropReason::ALL.len(), DropReason::COUNT);
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            assert!(!r.explain().is_empty());
            assert!(r
                .name()
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()));
        }
        assert!(DropReason::Filtered.explain().contains("RFC 4787"));
    }
}
