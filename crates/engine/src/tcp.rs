//! The TCP session state machine of RFC 6146 3.5.2.2, which RFC 5382 (NAT44 TCP) leaves to the
//! implementation. "V6" there is our inside ("out": packets leaving the inside), "V4" our
//! outside ("in"). Only SYN creates a session; FINs from both sides or an RST lead to the
//! transitory lifetime (RFC 5382 REQ-5), everything else refreshes the established lifetime.

use serde::Serialize;

/// TCP session states (RFC 6146 3.5.2.2 names in the doc comments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TcpState {
    /// V6 INIT: SYN seen from the inside only.
    OutInit,
    /// V4 INIT: SYN seen from the outside only (simultaneous open or inbound to a mapping).
    InInit,
    /// ESTABLISHED.
    Established,
    /// V6 FIN RCV: FIN seen from the inside.
    OutFinRcv,
    /// V4 FIN RCV: FIN seen from the outside.
    InFinRcv,
    /// V4 FIN + V6 FIN RCV: both sides closed; transitory lifetime.
    BothFinRcv,
    /// TRANS: after an RST; transitory lifetime.
    Trans,
}

/// Which way a segment travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Inside to outside.
    Out,
    /// Outside to inside.
    In,
}

/// What to do with the session lifetime after a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifetime {
    Established,
    Transitory,
    Unchanged,
}

/// Flags of interest.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;

/// RFC 6146 3.5.2.2: the state a new session starts in, given the SYN that creates it.
pub fn initial(dir: Dir) -> TcpState {
    match dir {
        Dir::Out => TcpState::OutInit,
        Dir::In => TcpState::InInit,
    }
}

/// RFC 6146 3.5.2.2: next state and lifetime action for a segment with `flags` going `dir`.
pub fn next(state: TcpState, dir: Dir, flags: u8) -> (TcpState, Lifetime) {
    use Dir::*;
    use Lifetime::{Transitory, Unchanged};
    use TcpState::*;
    let syn = flags & SYN != 0;
    let fin = flags & FIN != 0;
    let rst = flags & RST != 0;
    match state {
        OutInit if dir == In && syn => (TcpState::Established, Lifetime::Established),
        OutInit if dir == Out && syn => (OutInit, Transitory),
        InInit if dir == Out && syn => (TcpState::Established, Lifetime::Established),
        OutInit | InInit => (state, Unchanged),
        TcpState::Established if rst => (Trans, Transitory),
        TcpState::Established if fin => (if dir == In { InFinRcv } else { OutFinRcv }, Unchanged),
        TcpState::Established => (state, Lifetime::Established),
        InFinRcv if dir == Out && fin => (BothFinRcv, Transitory),
        OutFinRcv if dir == In && fin => (BothFinRcv, Transitory),
        InFinRcv | OutFinRcv => (state, Lifetime::Established),
        BothFinRcv => (state, Unchanged),
        Trans if rst => (Trans, Unchanged),
        Trans => (TcpState::Established, Lifetime::Established),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dir::*;
    use TcpState::*;

    #[test]
    fn three_way_handshake_and_close() {
        let s = initial(Out);
        let (s, l) = next(s, In, SYN | 0x10);
        assert_eq!((s, l), (TcpState::Established, Lifetime::Established));
        let (s, _) = next(s, Out, 0x10);
        let (s, _) = next(s, Out, FIN | 0x10);
        assert_eq!(s, OutFinRcv);
        let (s, l) = next(s, In, FIN | 0x10);
        assert_eq!((s, l), (BothFinRcv, Lifetime::Transitory));
        assert_eq!(next(s, Out, 0x10), (BothFinRcv, Lifetime::Unchanged));
    }

    #[test]
    fn simultaneous_open() {
        // RFC 5382 REQ-2: both sides send SYN; the session becomes established.
        let s = initial(In);
        assert_eq!(next(s, Out, SYN).0, Established);
    }

    #[test]
    fn rst_is_transitory_and_traffic_revives() {
        let (s, l) = next(Established, In, RST);
        assert_eq!((s, l), (Trans, Lifetime::Transitory));
        assert_eq!(
            next(s, Out, 0x10),
            (TcpState::Established, Lifetime::Established)
        );
    }

    #[test]
    fn init_state_ignores_non_syn() {
        assert_eq!(next(OutInit, In, 0x10), (OutInit, Lifetime::Unchanged));
    }
}
