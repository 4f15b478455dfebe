//! Typed, bounds-checked views over IPv4 and IPv6 packet bytes and the Internet checksum.
//!
//! Untrusted bytes enter only through [`ipv4::Ipv4Header::parse`], which validates the version,
//! header length, total length and (optionally) the header checksum (RFC 791 3.1), and
//! [`ipv6::Ipv6Header::parse`], which validates the version and payload length and walks the
//! extension headers (RFC 8200 3, 4). Field access
//! goes through [`field`], whose readers return `None` and whose writers do nothing outside the
//! buffer: no function in this crate panics on any input.
//!
//! Checksums follow RFC 1071 (full sum) and RFC 1624 (incremental update, eqn. 3), which the
//! translators use on the fast path so that a packet that arrives with a bad checksum leaves
//! with a bad checksum: it is never "repaired".

#![forbid(unsafe_code)]
#![warn(clippy::cast_possible_truncation)]
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub mod buf;
pub mod checksum;
pub mod field;
pub mod ipv4;
pub mod ipv6;
pub mod l4;
pub mod vnet;

pub use buf::{PacketBuf, HEADROOM};
pub use checksum::Delta;
pub use ipv4::{Ipv4Error, Ipv4Header};
pub use ipv6::{FragmentHeader, Ipv6Error, Ipv6Header};
