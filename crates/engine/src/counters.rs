//! Counters and drop reasons. One macro list yields the enum, its stable snake_case name and
//! the operator-facing explanation (`xlat show stats --explain`), so the three never drift.

// The variants' doc comments are that explanation, printed as written: `[nat64]` there names a
// configuration table, not a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

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
        /// and the `nat44.inside` / `nat44.pool` lists (with deterministic NAT64: a source
        /// outside `nat64.inside`).
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
        /// (`tun.mtu`; RFC 7915 4.1, 5.1), or an IPv6 packet is larger than the tunnel MTU
        /// (`tunnel.*.mtu`; RFC 4213 3.2). Fragmentation Needed / Packet Too Big went back
        /// with the MTU the sender should use.
        TooBig = "too_big",
        /// A packet whose kernel offloads do not fit it: a TCP super-packet that is not plain
        /// TCP over IPv4 or IPv6, or would be cut into more than 2,048 segments. The kernel
        /// makes neither; a driver bug or a hostile writer.
        UnusableOffload = "unusable_offload",
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
        /// Check `siit.prefix`, `siit.eam`, `siit.pool4` and `siit.rfc6791`. The sender is
        /// told with a Destination Unreachable unless `unreachable_errors = false` (RFC 7915
        /// 4.4, 5.4; counted in `icmp_errors_sent` too).
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
        /// 6to4: an IPv6 packet to a destination outside 2002::/16 and no relay router
        /// (`tunnel.6to4.relay`; RFC 3056 5.3) to send it to. Configure a relay or route
        /// only 2002::/16 into the tunnel.
        TunnelNoRelay = "tunnel_no_relay",
        /// 6to4: an IPv4 address RFC 3964 5.3.1 refuses -- 0.0.0.0/8, RFC 1918 private
        /// space, loopback, link-local, multicast, 240.0.0.0/4 and broadcast -- embedded in a
        /// 2002::/16 address, or as the outer source or destination of a 6to4 packet.
        Tunnel6to4AddressRefused = "tunnel_6to4_address_refused",
        /// The outer IPv4 source does not vouch for the IPv6 source: a 6to4 source that does
        /// not embed it (RFC 3964 5.3.1), a native source not from the configured relay
        /// (RFC 3964 5.2), an ISATAP source whose identifier does not embed it and that is
        /// not from a router of the potential router list (RFC 5214 7.3); or, sending, an
        /// IPv6 source outside this 6to4 site's 2002:V4ADDR::/48 (and no `relay_router`).
        /// Spoofed or misrouted traffic.
        TunnelSpoofedSource = "tunnel_spoofed_source",
        /// A decapsulated packet that is not for this endpoint: a 6to4 destination embedding
        /// another IPv4 address than the outer destination, a native destination while this
        /// endpoint is no relay router (`tunnel.6to4.relay_router`), an ISATAP host's packet
        /// to an address that is not its own, or another node's link-local address.
        TunnelWrongDestination = "tunnel_wrong_destination",
        /// An IPv6 address that never crosses these tunnels: unspecified, loopback,
        /// IPv4-compatible or -mapped, multicast (ISATAP has none, RFC 5214 6.3), link-local
        /// over 6to4 (RFC 3964 5.3.1). The kernel's own MLD reports on the TUN land here.
        TunnelBadInnerAddress = "tunnel_bad_inner_address",
        /// A protocol-41 packet whose payload is not a whole IPv6 packet (version, payload
        /// length; RFC 4213 3.6). Malformed input.
        TunnelBadInnerPacket = "tunnel_bad_inner_packet",
        /// The IPv4 next hop of an IPv6 packet is this endpoint itself (its own 6to4 prefix
        /// or ISATAP address routed back into the TUN): sending it would loop. Check routes.
        TunnelLoop = "tunnel_loop",
        /// ISATAP host: an off-link IPv6 destination and no default router yet (no Router
        /// Advertisement from a router of `tunnel.isatap.routers`, RFC 5214 8.3). Check that
        /// the routers answer.
        IsatapNoRouter = "isatap_no_router",
        /// ISATAP: an on-link destination whose interface identifier is not an ISATAP one
        /// (::0:5efe:V4 / ::200:5efe:V4, RFC 5214 6.1), so no IPv4 address to send it to; or,
        /// on a router, a destination off the ISATAP link.
        IsatapNoNextHop = "isatap_no_next_hop",
        /// ISATAP: a Router Solicitation or Advertisement that fails RFC 4861 6.1 (hop limit
        /// 255, code 0, checksum, length, options), an advertisement not from a router of
        /// the potential router list (RFC 5214 8.3.3), a solicitation to a host or an
        /// advertisement to a router.
        IsatapInvalidNd = "isatap_invalid_nd",
        /// An ICMPv4 error about one of this endpoint's protocol-41 packets that is not relayed
        /// to the IPv6 source (RFC 4213 3.4): a type or code without an ICMPv6 equivalent
        /// (parameter problem, source quench, reassembly time exceeded), an error about an
        /// IPv6 packet no error may be sent for (RFC 4443 2.4 e), or over the ICMPv6 error
        /// rate limit.
        TunnelIcmpNotRelayed = "tunnel_icmp_not_relayed",
        /// An ICMPv4 error about a tunnel packet that quotes less than the inner IPv6 header
        /// (RFC 4213 3.4: routers that quote only 8 bytes): the IPv6 source is unknown.
        TunnelIcmpTooShort = "tunnel_icmp_too_short",
        /// The outer header says Congestion Experienced but the inner packet is not
        /// ECN-capable: the mark cannot be passed on, so the packet is dropped (RFC 6040 4.2).
        TunnelEcnNotEct = "tunnel_ecn_not_ect",
        /// Fragments of a protocol-41 packet that cannot be reassembled: overlapping, not a
        /// multiple of 8 bytes, past 65535 bytes, or disagreeing about the end (RFC 791,
        /// RFC 4213 3.6). Hostile or broken input.
        TunnelReassemblyInvalid = "tunnel_reassembly_invalid",
        /// A fragmented protocol-41 packet that did not complete within 30 s (RFC 4213 3.6).
        TunnelReassemblyTimeout = "tunnel_reassembly_timeout",
        /// Already 64 fragmented protocol-41 packets in reassembly; a new one was refused.
        TunnelReassemblyLimit = "tunnel_reassembly_limit",
        /// The queue of packets the tunnel originates (Router Solicitations, reassembled
        /// packets) was full: the driver does not drain it.
        TunnelQueueFull = "tunnel_queue_full",
        /// A broken invariant of the engine's own tables (an index entry naming a session,
        /// mapping or host that is gone) or of its packet code (a field write past a buffer
        /// it had checked to be long enough): a bug in xlat, never the traffic's fault. The
        /// packet was dropped rather than translated wrongly. Please report it with the
        /// output of `xlat show stats --json`.
        Internal = "internal_error",
        /// An IPv6 packet whose IPv4 form would be longer than 65,535 bytes, which no IPv4
        /// total length can say (RFC 791): an IPv6 fragment of nearly 64 KB. Hostile or
        /// broken input; nothing a real path MTU produces.
        TranslatedTooLong = "translated_too_long",
        /// A source or destination no router forwards (RFC 1812 5.3.7, RFC 7915 4.1 and
        /// 5.1): IPv4 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16 (link-local), 255.255.255.255,
        /// 224.0.0.0/4 (multicast) as a source, 240.0.0.0/4 as a destination; IPv6
        /// unspecified, loopback, link-local, multicast sources. Spoofed or misrouted
        /// traffic.
        MartianAddress = "martian_address",
        /// The inside host has used its share of ports: with deterministic NAT
        /// (`nat44.deterministic`, RFC 7422) a mapping on every port of its fixed range, with
        /// port blocks every port of the `port_blocks_per_host` blocks it may hold. A new
        /// mapping has no port to take (an RFC 8158 quota-exceeded event is logged). Raise
        /// `nat44.ports_per_host` (the pool must have room: `xlat check` prints the numbers)
        /// or `port_blocks_per_host`, shorten timeouts, or find what opens so many flows on
        /// that host.
        PortQuota = "port_quota",
    }
}

/// `Ok` when every write of a group landed: the `bool`s of `xlat_wire`'s setters (false: the
/// buffer was too short and nothing was written), combined with a non-short-circuit `&` so
/// that each write happens. A false one is a broken invariant -- the caller checked the
/// length before writing -- and drops the packet as [`DropReason::Internal`].
#[inline(always)]
pub(crate) fn wrote(all: bool) -> Result<(), DropReason> {
    if all {
        Ok(())
    } else {
        Err(DropReason::Internal)
    }
}

/// An IPv4 header that does not parse is dropped for what is wrong with it.
impl From<xlat_wire::ipv4::Ipv4Error> for DropReason {
    fn from(e: xlat_wire::ipv4::Ipv4Error) -> DropReason {
        use xlat_wire::ipv4::Ipv4Error as E;
        match e {
            E::Truncated => DropReason::Truncated,
            E::Version(_) => DropReason::NotIpv4,
            E::BadIhl => DropReason::BadIhl,
            E::BadTotalLength => DropReason::BadTotalLength,
            E::BadChecksum => DropReason::BadIpChecksum,
        }
    }
}

/// An IPv6 header (or extension header chain) that does not parse is dropped for what is
/// wrong with it.
impl From<xlat_wire::ipv6::Ipv6Error> for DropReason {
    fn from(e: xlat_wire::ipv6::Ipv6Error) -> DropReason {
        use xlat_wire::ipv6::Ipv6Error as E;
        match e {
            E::Truncated => DropReason::TruncatedIpv6,
            E::Version(_) => DropReason::NotIpv4,
            E::BadPayloadLength => DropReason::BadPayloadLength,
            E::BadExtensionHeader => DropReason::BadExtensionHeader,
        }
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
        /// State events (session, mapping and host changes for NAT logging, session sync
        /// and metrics) lost because the engine's event queue was full when they happened:
        /// its consumer drains too slowly or too seldom. Translation went on; the consumer's
        /// record misses these changes.
        StateEventsDropped = "state_events_dropped",
        /// Sessions removed by the operator (`xlat clear sessions`).
        SessionsCleared = "sessions_cleared",
        /// Sessions a reload ended because the new configuration no longer allows them:
        /// their pool address was removed, their port forward changed, their inside address
        /// is no longer inside, or the NAT64 prefix changed (`xlat reload`, SIGHUP).
        SessionsRemovedByReload = "sessions_removed_by_reload",
        /// IPv4 packets translated to IPv6 (SIIT and NAT64; RFC 7915 4).
        Ipv4ToIpv6 = "ipv4_to_ipv6",
        /// IPv6 packets translated to IPv4 (SIIT and NAT64; RFC 7915 5).
        Ipv6ToIpv4 = "ipv6_to_ipv4",
        /// ICMP errors the translator sent itself (Time Exceeded, Fragmentation Needed,
        /// Packet Too Big, Parameter Problem; Destination Unreachable for discarded packets
        /// unless `unreachable_errors = false`; RFC 7915 4.4, 5.4). Each also counts its
        /// packet's drop reason.
        IcmpErrorsSent = "icmp_errors_sent",
        /// ICMP errors the translator would have sent but the rate limit held back (RFC 4443
        /// 2.4 f: 1000 per second, bursts of 50).
        IcmpErrorsRateLimited = "icmp_errors_rate_limited",
        /// IPv6 fragments made from IPv4 packets without DF that exceed the lowest IPv6 MTU
        /// (RFC 7915 4.1).
        FragmentsCreated = "fragments_created",
        /// Checksums computed for IPv4 UDP datagrams without one (RFC 7915 4.5).
        UdpChecksumsComputed = "udp_checksums_computed",
        /// TCP super-packets (segments the kernel merged, GRO, or a local sender's TSO)
        /// translated whole, their segmentation left to the kernel: one engine pass for up
        /// to 64 KB (`[tun] offload`).
        SuperPackets = "super_packets",
        /// TCP super-packets cut into segments here because their translator cannot keep
        /// the segmentation (a tunnel's outer header; IPv4 without DF on its way to IPv6,
        /// which may be fragmented, RFC 7915 4.1); the segments count as packets.
        SuperPacketsCut = "super_packets_cut",
        /// Partial transport checksums (the kernel left them to the transmitter) completed
        /// here because the packet's translator cannot keep them partial (the same cases).
        ChecksumsCompleted = "checksums_completed",
        /// IPv6 packets encapsulated in IPv4 protocol 41 (6to4, ISATAP; RFC 4213 3.5).
        TunnelEncapsulated = "tunnel_encapsulated",
        /// IPv6 packets decapsulated from protocol 41 and passed on (RFC 4213 3.6).
        TunnelDecapsulated = "tunnel_decapsulated",
        /// Fragmented protocol-41 packets reassembled (RFC 4213 3.6).
        TunnelReassembled = "tunnel_reassembled",
        /// ICMPv4 errors about tunnel packets relayed to the IPv6 source as ICMPv6 (RFC 4213 3.4).
        TunnelIcmpRelayed = "tunnel_icmp_relayed",
        /// ICMPv4 messages to a tunnel endpoint address that are not about its tunnel
        /// packets (echo, errors about the host's own traffic), handed back to the kernel.
        TunnelIcmpPassed = "tunnel_icmp_passed",
        /// ISATAP Router Solicitations sent to the potential routers (RFC 5214 8.3.4).
        IsatapRsSent = "isatap_rs_sent",
        /// ISATAP Router Advertisements sent in answer to solicitations (RFC 5214 8.2).
        IsatapRaSent = "isatap_ra_sent",
        /// ISATAP Router Advertisements accepted from a potential router (RFC 5214 8.3.3).
        IsatapRaReceived = "isatap_ra_received",
        /// Sessions handed to the fast path ([dataplane] fast_path): their recipes were
        /// installed, and their established packets no longer cross the engine.
        OffloadInstalled = "offload_installed",
        /// Fast-path recipes withdrawn (the session expired, or a TCP session left the
        /// established state and went back to the engine).
        OffloadRemoved = "offload_removed",
        /// Idle timeouts extended because the fast path had seen the session's packets.
        OffloadRefreshed = "offload_refreshed",
        /// SIIT address pairs whose fast-path recipe was withdrawn to make room for another
        /// (an engine offloads at most 65,536 pairs; the evicted pair's packets cross the
        /// engine until its recipe is installed again). Steady growth: more pairs are active
        /// than the table holds.
        SiitOffloadEvicted = "siit_offload_evicted",
        /// FTP control lines rewritten by the FTP ALG (`alg = ["ftp"]`): PORT, EPRT, 227 and
        /// 229 given the outside address and a mapped port, EPSV as PASV and 227 as 229
        /// (RFC 959, RFC 2428, RFC 6384).
        AlgFtpRewritten = "alg_ftp_rewritten",
        /// Data connections the FTP ALG admitted through the mapping it made for a PORT,
        /// EPRT, 227 or 229 (the expected connection arrived).
        AlgFtpDataOpened = "alg_ftp_data_opened",
        /// FTP commands or replies the ALG would rewrite that were split across TCP segments:
        /// passed unmodified (the data connection may fail; the client can retry or use EPSV).
        AlgFtpSplit = "alg_ftp_split",
        /// PORT, EPRT, 227 or 229 lines that did not parse, named another host than the
        /// control connection's (RFC 2577 bounce), or came with a bad TCP checksum: passed
        /// unmodified.
        AlgFtpMalformed = "alg_ftp_malformed",
        /// FTP lines the ALG could not rewrite for want of a port, buffer room or table
        /// space (see `limits`): passed unmodified.
        AlgFtpNoRoom = "alg_ftp_no_room",
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
