//! Expected data connections of an ALG ([`crate::alg`]): an inside endpoint a control
//! channel announced (RFC 959 4.1.2 PORT, RFC 2428 EPRT, a 227 reply to PASV), given an
//! outside port now, so the peer's connection to it finds a mapping -- and passes the
//! filter, whatever the filtering policy (RFC 4787 5), but only from the control
//! connection's remote address -- when it arrives.
//!
//! The port is taken from the host's pool address at once; the first SYN from the remote
//! address to it makes the mapping and its session, as a static BIB entry's first packet
//! does ([`Napt::create_forwarded`]), and the mapping is then ordinary (its port returns to
//! the pool with its last session). An expectation nobody used gives its port back when it
//! expires (the TCP transitory timeout, RFC 6146 3.5.2.2's 4 minutes by default).

use crate::counters::{Counters, DropReason, Event};
use crate::events::EventKind;
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::Time;

use super::{Napt, Translation};

/// Expectations held per translator (per worker); more are refused (the line passes
/// unmodified and is counted).
pub const MAX_EXPECTS: usize = 1024;

/// One announced data connection.
#[derive(Clone, Copy, Debug)]
pub(super) struct Expect<A> {
    int: Endpoint<A>,
    pub(super) ext: Endpoint,
    remote_addr: u32,
    pub(super) until: Time,
}

impl<A: InsideAddr> Napt<A> {
    /// Sessions of TCP port `port` (an ALG's control port; 0: none) never go to the fast
    /// path: the ALG rewrites their payload.
    pub fn set_alg_port(&mut self, port: u16) {
        self.alg_port = port;
    }

    /// The TCP established timeout (s): how long an ALG keeps an idle control connection.
    pub fn tcp_established(&self) -> u64 {
        self.cfg.timeouts.tcp_established
    }

    /// Maps the inside endpoint `int` an ALG saw announced on the control connection
    /// `ctl_ext` <-> `remote_addr` to an outside endpoint on the control connection's
    /// address, admitted from `remote_addr` (TCP). `None` when no port is free or the table
    /// is full.
    pub fn expect(
        &mut self,
        now: Time,
        int: Endpoint<A>,
        ctl_ext: u32,
        remote_addr: u32,
        c: &mut Counters,
    ) -> Option<Endpoint> {
        if self.expects.len() >= MAX_EXPECTS {
            self.expire_expects(now);
            if self.expects.len() >= MAX_EXPECTS {
                return None;
            }
        }
        let ix = *self.pool_index.get(&ctl_ext)?;
        let (ext, block) = self.take_port(Proto::Tcp, int, ix, None, now, c).ok()?;
        // A port block taken for it is logged as any other (RFC 7422; `xlat lookup`).
        if let (Some((first, last)), true) = (block, self.events.on()) {
            let kind = EventKind::PortBlockAllocated;
            self.block_event(now, kind, Proto::Tcp, int.addr, ext.addr, first, last);
        }
        let until = now.plus_secs(self.cfg.timeouts.tcp_transitory);
        self.expects.push(Expect {
            int,
            ext,
            remote_addr,
            until,
        });
        Some(ext)
    }

    /// An inbound packet to `ext` with no mapping: the expected data connection's first
    /// SYN makes its mapping and session (RFC 6146 3.5.2.2: only a SYN opens one).
    pub(super) fn create_expected(
        &mut self,
        now: Time,
        proto: Proto,
        ext: Endpoint,
        remote: Endpoint,
        tcp_flags: u8,
        c: &mut Counters,
    ) -> Result<Translation<A>, DropReason> {
        let found = self.expects.iter().position(|e| {
            proto == Proto::Tcp && e.ext == ext && e.remote_addr == remote.addr && e.until > now
        });
        let Some(i) = found else {
            return Err(DropReason::NoMapping);
        };
        let int = self.expects.get(i).ok_or(DropReason::Internal)?.int;
        let t = self.create_forwarded(now, proto, int, ext, remote, tcp_flags, c)?;
        self.expects.swap_remove(i);
        c.event(Event::AlgFtpDataOpened);
        Ok(t)
    }

    /// Gives back the ports of expectations that passed their time unused.
    pub fn expire_expects(&mut self, now: Time) {
        if self.expects.is_empty() {
            return;
        }
        let mut i = 0;
        while let Some(e) = self.expects.get(i).copied() {
            if e.until > now {
                i += 1;
                continue;
            }
            self.expects.swap_remove(i);
            let freed = match self.pool_index.get(&e.ext.addr) {
                Some(&ix) => self.free_port(ix, Proto::Tcp, e.ext.port, now),
                None => None,
            };
            if let (Some((first, last)), true) = (freed, self.events.on()) {
                let kind = EventKind::PortBlockReleased;
                self.block_event(now, kind, Proto::Tcp, e.int.addr, e.ext.addr, first, last);
            }
        }
    }
}
