//! The pool: inside hosts paired with pool addresses (RFC 4787 REQ-2 paired pooling; RFC
//! 3022 2.1 Basic NAT gives each host an address of its own) and the ports of new mappings
//! taken from them (RFC 4787 REQ-3 / RFC 6056 3.3: the inside port if free, else from a
//! random start in the range).

use crate::config::Nat44Mode;
use crate::counters::{Counters, DropReason, Event};
use crate::flow::{Endpoint, InsideAddr, Proto};
use crate::ports::PortMap;
use crate::rng::Rng;
use crate::Time;

use super::Napt;

pub(super) struct PoolAddr {
    pub(super) addr: u32,
    pub(super) hosts: u32,
    pub(super) ports: [PortMap; 3],
    /// Port blocks per protocol (`limits.port_block_size`; empty when off).
    pub(super) blocks: [Blocks; 3],
    /// Removed from the pool by a reload (`repool.rs`): no new host is paired with it.
    pub(super) retired: bool,
}

impl PoolAddr {
    pub(super) fn new(addr: u32) -> PoolAddr {
        PoolAddr {
            addr,
            hosts: 0,
            ports: Default::default(),
            blocks: Default::default(),
            retired: false,
        }
    }
}

/// The port blocks of one pool address and protocol (RFC 7422 2): block `b` holds the ports
/// `lo + b * size ..= min(lo + (b + 1) * size - 1, hi)` of the range `lo..=hi`. Sized on
/// first use.
#[derive(Default)]
pub(super) struct Blocks {
    list: Vec<Block>,
}

/// One port block: its host, its count of ports in use, when it was last freed, and where
/// the search for a free port in it starts. One record a block, so a new mapping's port
/// reads one place (16 bytes) for its block.
#[derive(Clone, Copy, Default)]
struct Block {
    /// The host that holds it (its number + 1; 0: free).
    owner: u32,
    /// Its ports in use (mappings').
    used: u16,
    /// How many of its first ports are all in use: the search for a free port in the
    /// block starts after them. A host's block fills from its first port, so without it
    /// each new mapping's search stepped again over the ports the block's earlier mappings
    /// hold (half a block on average). Raised when the port at the mark is taken, lowered
    /// when a port below it is freed ([`Block::freed`]): the port found is the block's
    /// first free one, as a search from its first port finds.
    full_below: u16,
    /// When its last port was freed (`limits.port_block_hold`: no host takes it again
    /// before the hold has passed, so no packet of its old host's flows is seen from the
    /// next one); 0: never held.
    freed_at: Time,
}

impl Blocks {
    /// Sized for `n` blocks (the first use of an address and protocol).
    #[inline]
    fn size_for(&mut self, n: usize) {
        if self.list.len() != n {
            self.list = vec![Block::default(); n];
        }
    }

    /// The two tries of [`take_in_blocks`] that nearly always give the port: the inside
    /// port's own block, then the host's latest (`hint`), each when the host holds it and
    /// it has a port free. Inlined into the new-session path; `None` (blocks not sized yet,
    /// or neither try gave a port) leaves the rest to `take_in_blocks`. Returns the port
    /// and its block.
    #[inline(always)]
    fn take_own(
        &mut self,
        ports: &mut PortMap,
        (lo, hi): (u16, u16),
        size: u16,
        owner: u32,
        want: u16,
        hint: Option<usize>,
    ) -> Option<(u16, usize)> {
        let ends = |b: usize| block_ports(lo, hi, size, b);
        let own = (lo..=hi)
            .contains(&want)
            .then(|| usize::from(want - lo) / usize::from(size));
        if let Some(b) = own {
            if let Some(port) = self
                .list
                .get_mut(b)
                .and_then(|k| k.take_for(ports, owner, want, ends(b)))
            {
                return Some((port, b));
            }
        }
        let b = hint.filter(|&h| Some(h) != own)?;
        let port = self
            .list
            .get_mut(b)?
            .take_for(ports, owner, want, ends(b))?;
        Some((port, b))
    }

    fn get(&self, b: usize) -> Option<&Block> {
        self.list.get(b)
    }

    fn get_mut(&mut self, b: usize) -> Option<&mut Block> {
        self.list.get_mut(b)
    }
}

impl Block {
    /// Where the search for a free port of this block (ports `first..=last`) starts.
    #[inline]
    fn search_from(&self, first: u16, last: u16) -> u16 {
        first.saturating_add(self.full_below).min(last)
    }

    /// Port `port` of this block (from `first`) was taken.
    #[inline]
    fn taken(&mut self, first: u16, port: u16) {
        if port.wrapping_sub(first) == self.full_below {
            self.full_below += 1;
        }
    }

    /// Port `port` of this block (from `first`) is free again.
    #[inline]
    fn freed(&mut self, first: u16, port: u16) {
        self.full_below = self.full_below.min(port.wrapping_sub(first));
    }

    /// A port of this block (`first..=last`) for host `owner` if the block is its and has
    /// one free: `want` if it is free here, else the first free one.
    #[inline(always)]
    fn take_for(
        &mut self,
        ports: &mut PortMap,
        owner: u32,
        want: u16,
        (first, last): (u16, u16),
    ) -> Option<u16> {
        if self.owner != owner || u32::from(self.used) > u32::from(last - first) {
            return None; // another's, or full
        }
        let port = ports.take_near(want, first, last, self.search_from(first, last))?;
        self.taken(first, port);
        self.used += 1;
        Some(port)
    }
}

/// A block's first and last port in `lo..=hi`.
#[expect(
    clippy::cast_possible_truncation,
    reason = "b is a block of lo..=hi, and both ends are capped at hi"
)]
fn block_ports(lo: u16, hi: u16, size: u16, b: usize) -> (u16, u16) {
    let first = u32::from(lo) + b as u32 * u32::from(size);
    let last = (first + u32::from(size) - 1).min(u32::from(hi));
    (first.min(u32::from(hi)) as u16, last as u16)
}

/// What taking a port from a block did: the block the host got for it, if it is new.
pub(super) type NewBlock = Option<(u16, u16)>;

/// What [`Napt::host_for`] tells about the host of a new session.
pub(super) struct HostUse {
    /// Pool index of its outside address.
    pub(super) pool: u32,
    /// How sessions hold its address ([`Hosts`](crate::hosts::Hosts)).
    pub(super) held: u32,
    /// It was made for this session.
    pub(super) new: bool,
    /// Its number ([`Hosts`](crate::hosts::Hosts)).
    pub(super) num: u32,
}

impl<A: InsideAddr> Napt<A> {
    /// The pool address of an inside host, with one more session and `new_maps` more
    /// mappings counted for it, and whether the host is new: one table lookup for the
    /// host's session limit, its address and its counts ([`Napt::unhost`] takes them back).
    /// A new host is paired with a pool address (RFC 4787 REQ-2 paired pooling: one inside
    /// address always uses the same outside address); in pool mode the address is the
    /// host's alone (RFC 3022 2.1 Basic NAT).
    ///
    /// Inlined, a host that has sessions already (nearly every new session's); a new host
    /// is paired out of line ([`Napt::new_host`]).
    #[inline(always)]
    pub(super) fn host_for(&mut self, int_addr: A, new_maps: u32) -> Result<HostUse, DropReason> {
        let limit = self.cfg.limits.max_sessions_per_host;
        let Some(num) = self.hosts.number(int_addr) else {
            return self.new_host(int_addr, new_maps);
        };
        let held = int_addr.as_held().unwrap_or(num);
        let h = self.hosts.get_mut(num).ok_or(DropReason::Internal)?;
        if h.sessions >= limit {
            return Err(DropReason::HostSessionLimit);
        }
        h.sessions += 1;
        h.mappings += new_maps;
        Ok(HostUse {
            pool: h.pool,
            held,
            new: false,
            num,
        })
    }

    /// [`Napt::host_for`] of an inside host with no session: paired with a pool address
    /// now (RFC 4787 REQ-2; RFC 3022 2.1 in pool mode; RFC 7422 2 when deterministic).
    #[inline(never)]
    fn new_host(&mut self, int_addr: A, new_maps: u32) -> Result<HostUse, DropReason> {
        // New hosts are paired with the addresses in the pool now (a reload may have
        // retired some, `repool.rs`), the least loaded first (`spread.rs`).
        let pick = match (&self.cfg.det, self.cfg.mode) {
            // RFC 7422 2: the address is a function of the inside address.
            (Some(d), _) => det_slice(d, int_addr)?.pool_ix,
            // RFC 3022 2.1: an address of its own, one no host holds.
            (None, Nat44Mode::Pool) => match self.spread.least(&mut self.rng) {
                Some((slot, 0)) => slot,
                _ => return Err(DropReason::PoolExhausted),
            },
            (None, _) => {
                self.spread
                    .least(&mut self.rng)
                    .ok_or(DropReason::PoolExhausted)?
                    .0
            }
        };
        // No more hosts than sessions: `limits.max_sessions` was checked before.
        let num = self
            .hosts
            .insert(int_addr, pick, new_maps, 1)
            .ok_or(DropReason::SessionLimit)?;
        self.paired(pick, 1);
        Ok(HostUse {
            pool: pick,
            held: int_addr.as_held().unwrap_or(num),
            new: true,
            num,
        })
    }

    /// Takes back what [`Napt::host_for`] (or `create_in`) counted for a session that was
    /// not made: the host itself when it was new.
    #[cold]
    pub(super) fn unhost(&mut self, int_addr: A, host_new: bool, new_maps: u32) {
        let Some(num) = self.hosts.number(int_addr) else {
            return;
        };
        if host_new {
            self.release_host(num);
        } else if let Some(h) = self.hosts.get_mut(num) {
            h.sessions = h.sessions.saturating_sub(1);
            h.mappings = h.mappings.saturating_sub(new_maps);
        }
    }

    /// Releases host `num` and its pool address pairing.
    pub(super) fn release_host(&mut self, num: u32) {
        if let Some(pool) = self.hosts.get(num).map(|h| h.pool) {
            self.hosts.remove(num);
            self.paired(pool, -1);
        }
    }

    /// Pool slot `slot` has one host more (`change` 1) or one fewer (-1): its count and its
    /// place among the loads new hosts are paired by ([`super::spread`]).
    pub(super) fn paired(&mut self, slot: u32, change: i32) {
        if let Some(p) = self.pool.get_mut(slot as usize) {
            p.hosts = p.hosts.saturating_add_signed(change);
            self.spread.moved(slot, p.hosts);
        }
    }

    /// The outside endpoint of a new mapping of `int`, its port taken from the pool address
    /// `pool_ix` per RFC 4787 REQ-3 / RFC 6056: the inside port if free and in range, else
    /// from a random point in the range. The host has counted the mapping already
    /// ([`Napt::host_for`], which gives its number: `host`, else it is looked up). Inlined:
    /// the new-session path is its caller that counts (an ALG's expectation, `expect.rs`, is
    /// the other).
    #[inline(always)]
    pub(super) fn take_port(
        &mut self,
        proto: Proto,
        int: Endpoint<A>,
        pool_ix: u32,
        host: Option<u32>,
        now: Time,
        c: &mut Counters,
    ) -> Result<(Endpoint, NewBlock), DropReason> {
        if self.cfg.det.is_some() {
            return self.take_det_port(proto, int, c);
        }
        // ICMP identifiers are not ports: any value may be kept or chosen (RFC 5508 3.1).
        let (lo, hi) = match proto {
            Proto::Icmp => self.icmp_ids,
            _ => self.cfg.ports,
        };
        let span = u64::from(hi - lo) + 1;
        #[expect(
            clippy::cast_possible_truncation,
            reason = "below(span) < span <= 65536"
        )]
        let start = lo.wrapping_add(self.rng.below(span) as u16);
        let mode = self.cfg.mode;
        let size = self.cfg.limits.port_block_size;
        let hold = self.cfg.limits.port_block_hold;
        // The host's number names its blocks (port-block allocation only).
        let owner = match size {
            0 => 0,
            _ => host
                .or_else(|| self.hosts.number(int.addr))
                .map_or(0, |n| n + 1),
        };
        let p = self
            .pool
            .get_mut(pool_ix as usize)
            .ok_or(DropReason::PoolExhausted)?;
        let (ports, blocks) = match (
            p.ports.get_mut(proto as usize),
            p.blocks.get_mut(proto as usize),
        ) {
            (Some(ports), Some(blocks)) => (ports, blocks),
            _ => return Err(DropReason::PoolExhausted),
        };
        let mut new_block = None;
        let port = if size > 0 && owner > 0 {
            let host = self.hosts.get_mut(owner - 1);
            let hint = host.as_ref().map(|h| usize::from(h.block));
            let own = blocks.take_own(ports, (lo, hi), size, owner, int.port, hint);
            let (port, fresh, b) = match own {
                Some((port, b)) => (port, None, b),
                None => take_in_blocks(
                    ports,
                    blocks,
                    BlockAsk {
                        range: (lo, hi),
                        size,
                        owner,
                        want: int.port,
                        hint,
                        rng: &mut self.rng,
                        held: (now, hold),
                        most: self.cfg.limits.port_blocks_per_host,
                    },
                )?,
            };
            if let (Some(h), Ok(b)) = (host, u16::try_from(b)) {
                h.block = b;
            }
            new_block = fresh;
            port
        } else {
            match mode {
                // Basic NAT keeps every port: the address is this host's alone.
                Nat44Mode::Pool if ports.take_exact(int.port) => int.port,
                _ => ports
                    .take(int.port, lo, hi, start)
                    .ok_or(DropReason::PoolExhausted)?,
            }
        };
        if port == int.port {
            c.event(Event::PortsPreserved);
        }
        Ok((Endpoint { addr: p.addr, port }, new_block))
    }

    /// [`Napt::take_port`] with deterministic NAT (RFC 7422 2): the port (or ICMP
    /// identifier) from the host's own range on its own address -- the inside port if it
    /// lies there and is free, else from a random point of the range (RFC 6056 3.3 within
    /// the range). A full range is the host's quota reached (`port_quota`).
    fn take_det_port(
        &mut self,
        proto: Proto,
        int: Endpoint<A>,
        c: &mut Counters,
    ) -> Result<(Endpoint, NewBlock), DropReason> {
        let s = match &self.cfg.det {
            Some(d) => det_slice(d, int.addr)?,
            None => return Err(DropReason::Internal),
        };
        let span = u64::from(s.last - s.first) + 1;
        #[expect(
            clippy::cast_possible_truncation,
            reason = "below(span) < span <= 65536"
        )]
        let start = s.first.wrapping_add(self.rng.below(span) as u16);
        let p = self
            .pool
            .get_mut(s.pool_ix as usize)
            .ok_or(DropReason::Internal)?;
        let ports = p
            .ports
            .get_mut(proto as usize)
            .ok_or(DropReason::Internal)?;
        let port = ports
            .take(int.port, s.first, s.last, start)
            .ok_or(DropReason::PortQuota)?;
        if port == int.port {
            c.event(Event::PortsPreserved);
        }
        Ok((Endpoint { addr: p.addr, port }, None))
    }

    /// Takes port `port` of pool address `ix` for a mapping of host `int_addr` whose outside
    /// endpoint is given (a synced session, `install.rs`); with port blocks, the block that
    /// holds it becomes the host's if free. False if the port or its block is another's.
    pub(super) fn take_exact_port(
        &mut self,
        ix: u32,
        proto: Proto,
        int_addr: A,
        port: u16,
    ) -> bool {
        let (lo, hi) = match proto {
            Proto::Icmp => self.icmp_ids,
            _ => self.cfg.ports,
        };
        let size = self.cfg.limits.port_block_size;
        let owner = self.hosts.number(int_addr).map_or(0, |n| n + 1);
        let Some(p) = self.pool.get_mut(ix as usize) else {
            return false;
        };
        let (Some(ports), Some(blocks)) = (
            p.ports.get_mut(proto as usize),
            p.blocks.get_mut(proto as usize),
        ) else {
            return false;
        };
        if size == 0 || owner == 0 || port < lo || port > hi {
            return ports.take_exact(port);
        }
        let n = (usize::from(hi - lo) + 1).div_ceil(usize::from(size));
        blocks.size_for(n);
        let b = usize::from((port - lo) / size);
        let (first, _) = block_ports(lo, hi, size, b);
        let Some(blk) = blocks.get_mut(b) else {
            return false;
        };
        if blk.owner != 0 && blk.owner != owner {
            return false;
        }
        if !ports.take_exact(port) {
            return false;
        }
        blk.taken(first, port);
        blk.owner = owner;
        blk.used += 1;
        true
    }

    /// Gives back port `port` of pool address `addr` held by no mapping (a static BIB
    /// entry's that a reload removes, `repool.rs`); with port blocks, the search mark of
    /// the block it lies in ([`Blocks::freed`]), whose count never held it.
    pub(super) fn free_static_port(&mut self, addr: u32, proto: Proto, port: u16) {
        let (lo, hi) = match proto {
            Proto::Icmp => self.icmp_ids,
            _ => self.cfg.ports,
        };
        let size = self.cfg.limits.port_block_size;
        let Some(&ix) = self.pool_index.get(&addr) else {
            return;
        };
        let Some(p) = self.pool.get_mut(ix as usize) else {
            return;
        };
        if let Some(pm) = p.ports.get_mut(proto as usize) {
            pm.free(port);
        }
        if size == 0 || port < lo || port > hi {
            return;
        }
        let b = usize::from((port - lo) / size);
        if let Some(blk) = p.blocks.get_mut(proto as usize).and_then(|k| k.get_mut(b)) {
            blk.freed(block_ports(lo, hi, size, b).0, port);
        }
    }

    /// Gives back a mapping's port on pool address `ix`; with port blocks, its block's count
    /// too. Returns the block's ports when that was its last port in use (the block is free
    /// again).
    pub(super) fn free_port(&mut self, ix: u32, proto: Proto, port: u16, now: Time) -> NewBlock {
        let (lo, hi) = match proto {
            Proto::Icmp => self.icmp_ids,
            _ => self.cfg.ports,
        };
        let size = self.cfg.limits.port_block_size;
        let p = self.pool.get_mut(ix as usize)?;
        if let Some(pm) = p.ports.get_mut(proto as usize) {
            pm.free(port);
        }
        if size == 0 || port < lo || port > hi {
            return None;
        }
        let b = usize::from((port - lo) / size);
        let (first, last) = block_ports(lo, hi, size, b);
        let blk = p.blocks.get_mut(proto as usize)?.get_mut(b)?;
        blk.freed(first, port);
        blk.used = blk.used.saturating_sub(1);
        if blk.used > 0 {
            return None;
        }
        blk.owner = 0;
        blk.freed_at = now;
        blk.full_below = 0;
        Some((first, last))
    }
}

/// The deterministic slice of an inside host; an address in no inside prefix has none:
/// NAT44 admits only inside sources, so that is not reached there; deterministic NAT64 drops
/// a source outside `nat64.inside` as not ours.
fn det_slice<A: InsideAddr>(
    d: &crate::deterministic::Deterministic,
    a: A,
) -> Result<crate::deterministic::Slice, DropReason> {
    d.of_inside_ip(a.ip()).ok_or(DropReason::NotOurs)
}

/// What [`take_in_blocks`] is asked for.
struct BlockAsk<'a> {
    /// The protocol's port (identifier) range.
    range: (u16, u16),
    /// Ports a block.
    size: u16,
    /// The host's number + 1.
    owner: u32,
    /// The port the host used (kept if free in its block).
    want: u16,
    /// The block the host last took a port from (any protocol: checked against `owner`).
    hint: Option<usize>,
    /// Draws where the search for a new block starts (only when one is needed).
    rng: &'a mut Rng,
    /// Now, and how long a freed block waits.
    held: (Time, u32),
    /// The most blocks the host may hold (0: no limit).
    most: u16,
}

/// A port for host `ask.owner` (its number + 1) from its blocks in `range`: the inside port
/// `want` if its block is the host's and it is free there (RFC 4787 REQ-3), else the first
/// free port of the block the host last took a port from (`hint`), else of another of its
/// blocks, else of a new block when they are full: the first free block from a random one on whose
/// hold has passed (`held` = now and the hold in seconds: a block freed at `t` is free again
/// from `t + hold`; RFC 7422 2; paired pooling keeps the host on one address). Returns the
/// port, the new block's ports if one was taken, and the block; `None` when every block is
/// full, owned or held. The want and hint tries make a port of a host with blocks two
/// lookups, not a walk over the address's blocks (a /22 of 1,024-65,535 in blocks of 512 is
/// 126 a protocol).
/// Errors: `port_quota` when its blocks are full and it holds `ask.most` already,
/// `pool_exhausted` when no block is free. Out of line: [`Napt::take_port`] makes the two
/// usual tries inline first ([`Blocks::take_own`]) and calls this when they find nothing
/// (they fail again here: nothing changed in between).
#[inline(never)]
fn take_in_blocks(
    ports: &mut PortMap,
    blocks: &mut Blocks,
    ask: BlockAsk<'_>,
) -> Result<(u16, NewBlock, usize), DropReason> {
    let BlockAsk {
        range: (lo, hi),
        size,
        owner,
        want,
        hint,
        rng,
        held,
        most,
    } = ask;
    let n = (usize::from(hi - lo) + 1).div_ceil(usize::from(size));
    blocks.size_for(n);
    let ends = |b: usize| block_ports(lo, hi, size, b);
    // The inside port's own block, then the host's latest.
    if let Some((port, b)) = blocks.take_own(ports, (lo, hi), size, owner, want, hint) {
        return Ok((port, None, b));
    }
    // The host's other blocks.
    let mut holds = 0usize;
    for (b, k) in blocks.list.iter_mut().enumerate() {
        if k.owner != owner {
            continue;
        }
        holds += 1;
        if let Some(port) = k.take_for(ports, owner, want, ends(b)) {
            return Ok((port, None, b));
        }
    }
    if most > 0 && holds >= usize::from(most) {
        return Err(DropReason::PortQuota);
    }
    // A new block: the first free one from a random block on whose hold has passed,
    // wrapping. A block never freed has `freed_at` 0 and is free at once.
    let pick = usize::try_from(rng.below(n as u64)).unwrap_or(0);
    let (now, hold) = held;
    let b = (0..n)
        .map(|i| (pick + i) % n)
        .find(|&b| {
            blocks.get(b).is_some_and(|k| {
                k.owner == 0
                    && (k.freed_at == Time(0) || k.freed_at.plus_secs(u64::from(hold)) <= now)
            })
        })
        .ok_or(DropReason::PoolExhausted)?;
    let (first, last) = ends(b);
    let k = blocks.get_mut(b).ok_or(DropReason::PoolExhausted)?;
    let port = ports
        .take(want, first, last, k.search_from(first, last))
        .ok_or(DropReason::PoolExhausted)?;
    k.taken(first, port);
    k.owner = owner;
    k.used = 1;
    Ok((port, Some((first, last)), b))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A block's search mark (`full_below`) changes which port is searched first, never
        /// which port is found: through takes (the inside port or any), frees, and ports
        /// taken and freed outside the block's count (a static BIB entry's), each port a
        /// block gives is the one a search from the block's first port gives.
        #[test]
        fn the_search_mark_finds_the_blocks_first_free_port(
            ops in proptest::collection::vec((0u8..4, 0u16..140), 1..400),
        ) {
            let (first, last) = (1000u16, 1129u16); // 130 ports: three words of the map
            let mut k = Block { owner: 1, ..Block::default() };
            let (mut ports, mut model) = (PortMap::default(), PortMap::default());
            let mut held: Vec<u16> = Vec::new();
            for (op, x) in ops {
                let port = first.saturating_add(x).min(last);
                match op {
                    // A mapping's port, `x` its inside port (in the block or not).
                    0 | 1 => {
                        let want = 990 + x;
                        let expect = if u32::from(k.used) > u32::from(last - first) {
                            None
                        } else {
                            model.take(want, first, last, first)
                        };
                        let got = k.take_for(&mut ports, 1, want, (first, last));
                        proptest::prop_assert_eq!(got, expect);
                        held.extend(got);
                    }
                    // A mapping ends.
                    2 => {
                        if let Some(p) = held.pop() {
                            ports.free(p);
                            model.free(p);
                            k.freed(first, p);
                            k.used -= 1;
                        }
                    }
                    // A static entry's port, taken and given back outside the count.
                    _ => {
                        if ports.take_exact(port) {
                            proptest::prop_assert!(model.take_exact(port));
                            k.taken(first, port);
                            ports.free(port);
                            model.free(port);
                            k.freed(first, port);
                        }
                    }
                }
            }
        }
    }
}
