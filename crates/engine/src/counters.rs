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
        /// Neither IPv4 nor IPv6 (version nibble), or IPv6 while no IPv6 translator ([nat64],
        /// [siit]) is configured. Check what routes such packets into the xlat interface.
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
        /// Shorter than an IPv6 header (40 bytes). Malformed input.
        TruncatedIpv6 = "truncated_ipv6",
        /// IPv6 payload length beyond the bytes received, or a jumbogram (RFC 8200 3,
        /// RFC 2675). Malformed input.
        BadPayloadLength = "bad_payload_length",
        /// An IPv6 extension header cut short, a Hop-by-Hop header that is not first, or more
        /// than 8 extension headers (RFC 8200 4). Malformed or hostile input.
        BadExtensionHeader = "bad_extension_header",
        /// A fragmented IPv6 packet with extension headers after the Fragment header: they
        /// are part of the fragmented data and cannot be removed (RFC 7915 5.1).
        UntranslatableExtensionHeader = "untranslatable_extension_header",
        /// An IPv6 packet with a Routing header whose Segments Left is not zero: it is not at
        /// its final destination (RFC 7915 5.1). An ICMPv6 Parameter Problem went back.
        RoutingHeader = "routing_header",
        /// An IPv4 packet with an unexpired source route option (RFC 7915 4.1). An ICMPv4
        /// Source Route Failed went back.
        SourceRoute = "source_route",
        /// The TTL or hop limit would reach zero in the translator (RFC 7915 4.1, 5.1: it is
        /// a router). A Time Exceeded went back, unless the packet was itself an ICMP error.
        HopLimitExceeded = "hop_limit_exceeded",
        /// A packet that may not be fragmented is too big for the next hop after translation
        /// (`tun.mtu`; RFC 7915 4.1, 5.1). Fragmentation Needed / Packet Too Big went back
        /// with the MTU the sender should use.
        TooBig = "too_big",
        /// An IPv4 UDP datagram without checksum (zero) that cannot get one on its way to
        /// IPv6: a fragment, or `udp_zero_checksum = "drop"` (RFC 7915 4.5).
        UdpZeroChecksum = "udp_zero_checksum",
        /// An ICMP or ICMPv6 message RFC 7915 4.2 / 5.2 says not to translate: timestamp,
        /// information and address mask requests, router and neighbor discovery, MLD,
        /// redirects, source quench, unknown types, Parameter Problem codes without an
        /// equivalent or pointing at a field the other header lacks.
        IcmpNotTranslated = "icmp_not_translated",
        /// An ICMP error quoting another ICMP error: translation stops at the first embedded
        /// header (RFC 7915 4.3, 5.3).
        IcmpErrorNested = "icmp_error_nested",
        /// An address has no form in the other family: not in an EAM entry, not in the
        /// pref64 (IPv6), not in siit.pool4 / the EAM table (IPv4 destinations), or an IPv6
        /// source of something other than an ICMPv6 error without an RFC 6791 address.
        /// Check `siit.prefix`, `siit.eam`, `siit.pool4` and `siit.rfc6791`.
        UntranslatableAddress = "untranslatable_address",
        /// An IPv4 address that is not global with the well-known prefix 64:ff9b::/96, which
        /// must not carry it (RFC 6052 3.1). Use a network-specific prefix.
        WellKnownPrefixNonGlobal = "well_known_prefix_non_global",
        /// The first fragment of a fragmented ICMP message, held until its last fragment told
        /// the message's length (the checksum covers it), whose last fragment did not come in
        /// time (`timeouts.fragment`).
        FragmentIncomplete = "fragment_incomplete",
        /// The packet buffer had no room in front of the packet for a longer header. Drivers
        /// leave `HEADROOM` bytes; seeing this is a bug in the driver.
        NoHeadroom = "no_headroom",
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
        /// IPv4 packets translated to IPv6 (SIIT and NAT64; RFC 7915 4).
        Ipv4ToIpv6 = "ipv4_to_ipv6",
        /// IPv6 packets translated to IPv4 (SIIT and NAT64; RFC 7915 5).
        Ipv6ToIpv4 = "ipv6_to_ipv4",
        /// ICMP errors the translator sent itself (Time Exceeded, Fragmentation Needed,
        /// Packet Too Big, Parameter Problem; RFC 7915 4.4, 5.4).
        IcmpErrorsSent = "icmp_errors_sent",
        /// ICMP errors the translator would have sent but the rate limit held back (RFC 4443
        /// 2.4 f: 1000 per second, bursts of 50).
        IcmpErrorsRateLimited = "icmp_errors_rate_limited",
        /// IPv6 fragments made from IPv4 packets without DF that exceed the lowest IPv6 MTU
        /// (RFC 7915 4.1).
        FragmentsCreated = "fragments_created",
        /// Checksums computed for IPv4 UDP datagrams without one (RFC 7915 4.5).
        UdpChecksumsComputed = "udp_checksums_computed",
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
