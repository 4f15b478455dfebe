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

/// ICMP header fields and the types the NAT handles (RFC 792, RFC 5508).
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

    /// Destination unreachable codes.
    pub const CODE_PORT_UNREACH: u8 = 3;
    pub const CODE_FRAG_NEEDED: u8 = 4;
}
