//! Transport header offsets the translators rewrite: UDP (RFC 768), TCP (RFC 9293 3.1),
//! ICMP (RFC 792). Offsets are relative to the start of the transport header.

/// UDP header fields (RFC 768).
pub mod udp {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LEN: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const HEADER: usize = 8;
}

/// TCP header fields (RFC 9293 3.1).
pub mod tcp {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const FLAGS: usize = 13;
    pub const CHECKSUM: usize = 16;
    /// Bytes needed to read the ports, flags and checksum.
    pub const NEEDED: usize = 18;
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const ACK: u8 = 0x10;
}

/// ICMP header fields and the types the translators handle (RFC 792, RFC 5508, RFC 7915 4.2).
pub mod icmp {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    /// Identifier of query messages (echo, timestamp).
    pub const IDENT: usize = 4;
    pub const HEADER: usize = 8;

    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACH: u8 = 3;
    pub const SOURCE_QUENCH: u8 = 4;
    pub const REDIRECT: u8 = 5;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAM_PROBLEM: u8 = 12;
    pub const TIMESTAMP: u8 = 13;
    pub const TIMESTAMP_REPLY: u8 = 14;

    /// Destination unreachable codes (RFC 792, RFC 1812 5.2.7.1).
    pub const CODE_NET_UNREACH: u8 = 0;
    pub const CODE_HOST_UNREACH: u8 = 1;
    pub const CODE_PROTO_UNREACH: u8 = 2;
    pub const CODE_PORT_UNREACH: u8 = 3;
    pub const CODE_FRAG_NEEDED: u8 = 4;
    pub const CODE_SOURCE_ROUTE_FAILED: u8 = 5;
    pub const CODE_ADMIN_PROHIBITED: u8 = 13;
    /// Time exceeded: TTL exceeded in transit.
    pub const CODE_TTL_EXCEEDED: u8 = 0;
}

/// ICMPv6 types and codes a translator handles (RFC 4443; RFC 7915 4.2, 5.2).
pub mod icmpv6 {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    /// Identifier of echo messages.
    pub const IDENT: usize = 4;
    /// The 32-bit field after the checksum: MTU (Packet Too Big), pointer (Parameter Problem).
    pub const MTU: usize = 4;
    pub const POINTER: usize = 4;
    pub const HEADER: usize = 8;

    // Error messages (RFC 4443 3).
    pub const DEST_UNREACH: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    // Informational messages (RFC 4443 4).
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;

    /// Destination Unreachable codes (RFC 4443 3.1).
    pub const CODE_NO_ROUTE: u8 = 0;
    pub const CODE_ADMIN_PROHIBITED: u8 = 1;
    pub const CODE_BEYOND_SCOPE: u8 = 2;
    pub const CODE_ADDR_UNREACH: u8 = 3;
    pub const CODE_PORT_UNREACH: u8 = 4;
    /// Time Exceeded: hop limit exceeded in transit (RFC 4443 3.3).
    pub const CODE_HOP_LIMIT: u8 = 0;
    /// Parameter Problem codes (RFC 4443 3.4).
    pub const CODE_ERRONEOUS_FIELD: u8 = 0;
    pub const CODE_UNRECOGNIZED_NEXT_HEADER: u8 = 1;
    pub const CODE_UNRECOGNIZED_OPTION: u8 = 2;

    /// True for an error message (types 0-127, RFC 4443 2.1).
    pub fn is_error(t: u8) -> bool {
        t < 128
    }
}
