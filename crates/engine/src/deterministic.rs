//! Deterministic NAT44 and NAT64 (RFC 7422 section 2): every subscriber owns one fixed
//! outside address and one fixed range of ports on it, computed from the configuration alone, so
//! the question "who had 198.19.0.7 port 40312?" is answered by arithmetic over the config
//! that was in force, with no per-session or per-block log (RFC 7422 section 1's aim).
//!
//! The algorithm's inputs are the ones RFC 7422 section 2 names: the inside address range
//! (`nat44.inside`, every address of every prefix a subscriber), the outside address range
//! (`nat44.pool`), the ports reserved from use (everything outside `nat44.ports`, 0-1023 by
//! default), and the ports each subscriber gets (`nat44.ports_per_host`, or as many as the
//! range divided among the subscribers that share an address allows). The compression ratio
//! is the number of subscribers per outside address, `ceil(subscribers / pool addresses)`.
//! Assignment is sequential (as VPP's det44 does it): inside address number `i` (counting
//! through the inside prefixes in the order the config lists them) gets pool address number
//! `i / share` and the `i % share`-th range of `ports_per_host` ports from the low end of
//! `nat44.ports`. The inverse ([`Deterministic::of_outside`]) is the same arithmetic
//! backwards; `xlat lookup` and the workers' steering ([`crate::shard`]) use it.
//!
//! NAT64 (`[nat64] deterministic`, [`Deterministic::new64`]) uses the same arithmetic with
//! IPv6 subscribers: `nat64.inside` lists their prefixes and `nat64.subscriber_prefix_len`
//! says how long one subscriber's prefix is (128: each address; 64 or 56: a customer's
//! delegated prefix, all of whose addresses share one range). RFC 7422 is written for CGN
//! (NAT444); nothing in its algorithm depends on the inside family, and the port choice
//! within a range follows RFC 6146 3.5.1.1 as dynamic NAT64's does.
//!
//! A subscriber whose range is full gets no further mapping (RFC 7422 section 2 leaves an
//! overflow pool optional; xlat has none, so the mapping stays a function of the config):
//! the packet is dropped as `port_quota` and an RFC 8158 quota-exceeded event is queued.
//! ICMP query identifiers come from the same range as the ports, so an echo's outside
//! identifier names its subscriber the same way.
//!
//! RFC 7422 section 3 asks that the algorithm's configuration be kept (logged) for as long
//! as the answers are needed: the daemon logs it at start and on every reload
//! (docs/LOGGING.md); the configuration files themselves must be kept with their dates.

use crate::config::{ConfigError, Prefix4, Prefix6};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A subscriber's outside address and ports ([`Deterministic::of_inside`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// The outside address's number in the pool (pool prefixes in config order).
    pub pool_ix: u32,
    /// The outside address.
    pub addr: u32,
    /// First and last port (and ICMP identifier) of the subscriber's range, inclusive.
    pub first: u16,
    pub last: u16,
}

/// One prefix of the inside or pool list: its first address, the subscribers (or pool
/// addresses) in it, each `1 << shift` addresses wide, and the number of those before it in
/// the list. IPv4 addresses are held in the low 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    base: u128,
    shift: u8,
    size: u64,
    before: u64,
}

/// Which table's keys errors name: the arithmetic is the same for both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    Nat44,
    Nat64,
}

impl Table {
    fn inside(self) -> &'static str {
        match self {
            Table::Nat44 => "nat44.inside",
            Table::Nat64 => "nat64.inside",
        }
    }
    fn pool(self) -> &'static str {
        match self {
            Table::Nat44 => "nat44.pool",
            Table::Nat64 => "nat64.pool4",
        }
    }
    fn ports(self) -> &'static str {
        match self {
            Table::Nat44 => "nat44.ports",
            Table::Nat64 => "nat64.ports",
        }
    }
    fn ports_per_host(self) -> &'static str {
        match self {
            Table::Nat44 => "nat44.ports_per_host",
            Table::Nat64 => "nat64.ports_per_host",
        }
    }
    fn deterministic(self) -> &'static str {
        match self {
            Table::Nat44 => "nat44.deterministic",
            Table::Nat64 => "nat64.deterministic",
        }
    }
}

/// The deterministic mapping of one `[nat44]` or `[nat64]` configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deterministic {
    table: Table,
    inside: Vec<Run>,
    /// Prefix length of one subscriber: 32 for NAT44, `nat64.subscriber_prefix_len`.
    sub_len: u8,
    pool: Vec<Run>,
    /// First and last port of the table's `ports`.
    lo: u16,
    hi: u16,
    /// Ports each subscriber gets.
    per_host: u16,
    /// Subscribers per outside address (the compression ratio).
    share: u64,
    /// Subscribers in all.
    hosts: u64,
}

/// Numbers an operator sizes a deployment by (`xlat check`, the start-up log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub subscribers: u64,
    pub pool_addresses: u64,
    /// Subscribers per outside address.
    pub per_address: u64,
    pub ports_per_host: u16,
    /// Ports of the table's `ports` no subscriber gets (the range's end past the last slice).
    pub ports_unused: u64,
}

/// Runs of one address each over IPv4 prefixes, and how many addresses they hold.
fn runs4(prefixes: &[Prefix4]) -> (Vec<Run>, u64) {
    let mut before = 0u64;
    let v = prefixes
        .iter()
        .map(|p| {
            let r = Run {
                base: u128::from(p.addr),
                shift: 0,
                size: p.size(),
                before,
            };
            before += p.size();
            r
        })
        .collect();
    (v, before)
}

/// The number of `a` in `runs` (its prefix's `before` plus its subscriber's offset there).
fn number_of(runs: &[Run], a: u128) -> Option<u64> {
    runs.iter().find_map(|r| {
        let off = a.checked_sub(r.base)? >> r.shift;
        let off = u64::try_from(off).ok()?;
        (off < r.size).then_some(r.before + off)
    })
}

/// The first address of the subscriber (or pool address) numbered `i` in `runs`.
fn address_of(runs: &[Run], i: u64) -> Option<u128> {
    runs.iter()
        .find(|r| i >= r.before && i - r.before < r.size)
        .map(|r| r.base + (u128::from(i - r.before) << r.shift))
}

/// The most subscribers one inside prefix may hold: every port of 2^32 pool addresses is
/// 2^48, so a config past this cannot fit, and the count stays far from overflow.
const MOST_SUBSCRIBER_BITS: u8 = 48;

impl Deterministic {
    /// The NAT44 mapping of inside prefixes `inside` onto pool `pool` with the ports
    /// `ports`, `per_host` ports each (`None`: as many as fit); each inside address is a
    /// subscriber. Refused, with the numbers and the fix, when the subscribers do not fit
    /// or the inside prefixes overlap.
    pub fn new(
        inside: &[Prefix4],
        pool: &[Prefix4],
        ports: (u16, u16),
        per_host: Option<u16>,
    ) -> Result<Deterministic, ConfigError> {
        let mut sorted: Vec<&Prefix4> = inside.iter().collect();
        sorted.sort_by_key(|p| p.addr);
        let overlap = sorted.windows(2).find_map(|w| match w {
            [a, b] if a.overlaps(b) => Some((a.to_string(), b.to_string())),
            _ => None,
        });
        let (runs, hosts) = runs4(inside);
        Self::build(
            Table::Nat44,
            overlap,
            (runs, hosts, 32),
            pool,
            ports,
            per_host,
        )
    }

    /// The NAT64 mapping: each `/subscriber_len` of the IPv6 prefixes `inside` is one
    /// subscriber (128: every address; 64 or 56: a customer's whole prefix), mapped as
    /// [`Deterministic::new`] maps IPv4 addresses. RFC 7422 is written for NAT444; the
    /// arithmetic does not depend on the inside address family, and RFC 6146 3.5.1's port
    /// allocation stays within the subscriber's range.
    pub fn new64(
        inside: &[Prefix6],
        subscriber_len: u8,
        pool: &[Prefix4],
        ports: (u16, u16),
        per_host: Option<u16>,
    ) -> Result<Deterministic, ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if !(1..=128).contains(&subscriber_len) {
            return err(
                "nat64.subscriber_prefix_len",
                format!("{subscriber_len} is not a prefix length; expected 1 to 128, like 128 (each address a subscriber) or 64 (each /64)"),
            );
        }
        let mut before = 0u64;
        let mut runs = Vec::with_capacity(inside.len());
        for p in inside {
            let Some(bits) = subscriber_len.checked_sub(p.len) else {
                return err(
                    "nat64.subscriber_prefix_len",
                    format!("{p} is longer than one subscriber's /{subscriber_len}: its addresses would share a subscriber with addresses outside it; list the /{subscriber_len} that holds it, or lengthen subscriber_prefix_len to at least {}", p.len),
                );
            };
            if bits > MOST_SUBSCRIBER_BITS {
                return err(
                    "nat64.inside",
                    format!("{p} holds 2^{bits} subscribers of /{subscriber_len}, more than every port of every IPv4 address could serve; list the prefixes in use, or shorten subscriber_prefix_len"),
                );
            }
            let size = 1u64 << bits;
            runs.push(Run {
                base: p.addr,
                shift: 128 - subscriber_len,
                size,
                before,
            });
            before = before.saturating_add(size);
        }
        let mut sorted: Vec<&Prefix6> = inside.iter().collect();
        sorted.sort_by_key(|p| p.addr);
        let overlap = sorted.windows(2).find_map(|w| match w {
            [a, b] if a.overlaps(b) => Some((a.to_string(), b.to_string())),
            _ => None,
        });
        Self::build(
            Table::Nat64,
            overlap,
            (runs, before, subscriber_len),
            pool,
            ports,
            per_host,
        )
    }

    /// The arithmetic both tables share: subscribers (`inside`: runs, count, prefix length
    /// of one) per pool address and ports each, checked against the ports there are.
    fn build(
        table: Table,
        overlap: Option<(String, String)>,
        inside: (Vec<Run>, u64, u8),
        pool: &[Prefix4],
        ports: (u16, u16),
        per_host: Option<u16>,
    ) -> Result<Deterministic, ConfigError> {
        let err = |key, problem: String| Err(ConfigError { key, problem });
        if let Some((a, b)) = overlap {
            return err(
                table.inside(),
                format!(
                    "{a} and {b} overlap; with deterministic = true every inside address must be counted once: list each prefix once"
                ),
            );
        }
        let (inside, hosts, sub_len) = inside;
        let (pool, addrs) = runs4(pool);
        if hosts == 0 || addrs == 0 {
            return err(
                table.deterministic(),
                format!(
                    "needs inside prefixes ({}) and pool addresses ({})",
                    table.inside(),
                    table.pool()
                ),
            );
        }
        let span = u64::from(ports.1.saturating_sub(ports.0)) + 1;
        let share = hosts.div_ceil(addrs);
        let fit = span / share;
        let per_host = match per_host {
            _ if fit == 0 => {
                return err(
                    table.inside(),
                    format!(
                        "{hosts} subscribers on {addrs} pool addresses is {share} per address, more than the {span} ports of {} {}-{}: give each at least one port by widening {} to at least {} addresses or narrowing {}",
                        table.ports(),
                        ports.0,
                        ports.1,
                        table.pool(),
                        hosts.div_ceil(span),
                        table.inside()
                    ),
                );
            }
            None => u16::try_from(fit).unwrap_or(u16::MAX),
            Some(0) => {
                return err(
                    table.ports_per_host(),
                    "0 ports: expected at least 1, like 1008".into(),
                );
            }
            Some(n) if u64::from(n) > fit => {
                // Subscribers one address holds at `n` ports each (0: not even one).
                let fits = span / u64::from(n);
                let widen = match fits {
                    0 => String::new(),
                    f => format!(
                        ", or widen {} to at least {} addresses",
                        table.pool(),
                        hosts.div_ceil(f)
                    ),
                };
                return err(
                    table.ports_per_host(),
                    format!(
                        "{n} ports for each of {hosts} subscribers on {addrs} pool addresses ({share} per address) needs {} ports per address, more than the {span} of {} {}-{}: set ports_per_host to at most {}{widen}",
                        u64::from(n) * share,
                        table.ports(),
                        ports.0,
                        ports.1,
                        fit
                    ),
                );
            }
            Some(n) => n,
        };
        Ok(Deterministic {
            table,
            inside,
            sub_len,
            pool,
            lo: ports.0,
            hi: ports.1,
            per_host,
            share,
            hosts,
        })
    }

    /// The sizing numbers.
    pub fn plan(&self) -> Plan {
        let addrs = self.pool.iter().map(|r| r.size).sum();
        Plan {
            subscribers: self.hosts,
            pool_addresses: addrs,
            per_address: self.share,
            ports_per_host: self.per_host,
            ports_unused: (u64::from(self.hi - self.lo) + 1)
                .saturating_sub(self.share * u64::from(self.per_host)),
        }
    }

    /// Ports each subscriber gets.
    pub fn ports_per_host(&self) -> u16 {
        self.per_host
    }

    /// Prefix length of one subscriber: 32 (NAT44), or `nat64.subscriber_prefix_len`.
    pub fn subscriber_len(&self) -> u8 {
        self.sub_len
    }

    /// The outside address and ports of subscriber number `i`.
    fn slice_of(&self, i: u64) -> Option<Slice> {
        let pool_ix = i / self.share;
        let slot = i % self.share;
        let first = u64::from(self.lo) + slot * u64::from(self.per_host);
        let last = first + u64::from(self.per_host) - 1;
        Some(Slice {
            pool_ix: u32::try_from(pool_ix).ok()?,
            addr: u32::try_from(address_of(&self.pool, pool_ix)?).ok()?,
            first: u16::try_from(first).ok()?,
            last: u16::try_from(last).ok()?,
        })
    }

    /// The number of the subscriber whose range holds outside address `addr` and port (or
    /// ICMP identifier) `port`.
    fn subscriber_at(&self, addr: u32, port: u16) -> Option<u64> {
        let j = number_of(&self.pool, u128::from(addr))?;
        let slot = u64::from(port.checked_sub(self.lo)?) / u64::from(self.per_host);
        if slot >= self.share {
            return None;
        }
        let i = j * self.share + slot;
        (i < self.hosts).then_some(i)
    }

    /// The outside address and ports of inside IPv4 address `a` (NAT44); `None` when `a`
    /// is in no inside prefix (or this is a NAT64 mapping).
    pub fn of_inside(&self, a: u32) -> Option<Slice> {
        if self.table != Table::Nat44 {
            return None;
        }
        self.slice_of(number_of(&self.inside, u128::from(a))?)
    }

    /// The outside address and ports of the subscriber inside IPv6 address `a` belongs to
    /// (NAT64); `None` when it is in no inside prefix (or this is a NAT44 mapping).
    pub fn of_inside6(&self, a: u128) -> Option<Slice> {
        if self.table != Table::Nat64 {
            return None;
        }
        self.slice_of(number_of(&self.inside, a)?)
    }

    /// [`Deterministic::of_inside`] or [`Deterministic::of_inside6`], by `a`'s family.
    pub fn of_inside_ip(&self, a: IpAddr) -> Option<Slice> {
        match a {
            IpAddr::V4(a) => self.of_inside(u32::from(a)),
            IpAddr::V6(a) => self.of_inside6(u128::from(a)),
        }
    }

    /// The inside address whose range holds outside address `addr` and port (or ICMP
    /// identifier) `port` (NAT44); `None` when no subscriber's does (a port below the range
    /// or past the last slice, an address outside the pool or past the last subscriber).
    pub fn of_outside(&self, addr: u32, port: u16) -> Option<u32> {
        match self.of_outside_ip(addr, port)? {
            IpAddr::V4(a) => Some(u32::from(a)),
            IpAddr::V6(_) => None,
        }
    }

    /// The subscriber whose range holds outside `addr` and `port`: an IPv4 address (NAT44),
    /// or the first address of an IPv6 subscriber's prefix, `subscriber_len()` long
    /// (NAT64).
    pub fn of_outside_ip(&self, addr: u32, port: u16) -> Option<IpAddr> {
        let a = address_of(&self.inside, self.subscriber_at(addr, port)?)?;
        Some(match self.table {
            Table::Nat44 => IpAddr::V4(Ipv4Addr::from(u32::try_from(a).ok()?)),
            Table::Nat64 => IpAddr::V6(Ipv6Addr::from(a)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Prefix4 {
        s.parse().unwrap()
    }

    /// RFC 7422 section 2's arithmetic on a small example: 1,024 subscribers on 4
    /// addresses share each address 256 ways; 64,512 ports / 256 = 252 ports each.
    #[test]
    fn rfc7422_2_ports_per_subscriber_from_the_compression_ratio() {
        let d = Deterministic::new(
            &[p("198.18.0.0/22")],
            &[p("198.19.0.0/30")],
            (1024, 65535),
            None,
        )
        .unwrap();
        let plan = d.plan();
        assert_eq!(
            (plan.subscribers, plan.pool_addresses, plan.per_address),
            (1024, 4, 256)
        );
        assert_eq!(d.ports_per_host(), 252);
        assert_eq!(plan.ports_unused, 0);
        // Sequential: the first 256 inside addresses share the first pool address.
        let s = d.of_inside(0xc612_0000).unwrap();
        assert_eq!(
            (s.pool_ix, s.addr, s.first, s.last),
            (0, 0xc613_0000, 1024, 1275)
        );
        let s = d.of_inside(0xc612_0001).unwrap();
        assert_eq!((s.addr, s.first, s.last), (0xc613_0000, 1276, 1527));
        let s = d.of_inside(0xc612_0100).unwrap();
        assert_eq!((s.pool_ix, s.addr, s.first), (1, 0xc613_0001, 1024));
        let s = d.of_inside(0xc612_03ff).unwrap();
        assert_eq!(
            (s.addr, s.first, s.last),
            (0xc613_0003, 1024 + 255 * 252, 65535)
        );
        assert_eq!(
            d.of_outside(0xc613_0003, 1024 + 255 * 252 + 7),
            Some(0xc612_03ff)
        );
        // Reserved ports and other addresses belong to nobody.
        assert_eq!(d.of_outside(0xc613_0000, 80), None);
        assert_eq!(d.of_outside(0xc613_0004, 2000), None);
        assert_eq!(d.of_inside(0xc612_0400), None);
        // Fewer ports each than fit: the end of the range is nobody's.
        let d = Deterministic::new(
            &[p("198.18.0.0/22")],
            &[p("198.19.0.0/30")],
            (1024, 65535),
            Some(200),
        )
        .unwrap();
        assert_eq!(d.plan().ports_unused, 64_512 - 256 * 200);
        assert_eq!(
            d.of_outside(0xc613_0000, 1024 + 256 * 200 - 1),
            Some(0xc612_00ff)
        );
        assert_eq!(d.of_outside(0xc613_0000, 1024 + 256 * 200), None);
    }

    #[test]
    fn refuses_what_does_not_fit_with_the_numbers() {
        let e = Deterministic::new(
            &[p("10.0.0.0/8")],
            &[p("198.19.0.0/24")],
            (1024, 65535),
            None,
        )
        .unwrap_err();
        assert_eq!(e.key, "nat44.inside");
        assert!(
            e.problem
                .contains("16777216 subscribers on 256 pool addresses is 65536 per address"),
            "{}",
            e.problem
        );
        let e = Deterministic::new(
            &[p("198.18.0.0/22")],
            &[p("198.19.0.0/30")],
            (1024, 65535),
            Some(1000),
        )
        .unwrap_err();
        assert_eq!(e.key, "nat44.ports_per_host");
        assert!(e.problem.contains("at most 252"), "{}", e.problem);
        assert!(e.problem.contains("at least 16 addresses"), "{}", e.problem);
        let e = Deterministic::new(
            &[p("198.18.0.0/24"), p("198.18.0.128/25")],
            &[p("198.19.0.0/30")],
            (1024, 65535),
            None,
        )
        .unwrap_err();
        assert_eq!(e.key, "nat44.inside");
        assert!(e.problem.contains("overlap"), "{}", e.problem);
    }

    proptest! {
        /// Every subscriber's range lies in `nat44.ports` on a pool address, no two
        /// subscribers' ranges share a port, and the lookup inverts the allocation.
        #[test]
        fn ranges_are_disjoint_in_range_and_inverted_by_lookup(
            inside_len in 20u8..=30,
            second in proptest::option::of(22u8..=30),
            pool_len in 28u8..=32,
            lo in 1u16..=40_000,
            width in 0u16..=25_000,
            per_host in proptest::option::of(1u16..=2000),
        ) {
            let hi = lo.saturating_add(width);
            let mut inside = vec![Prefix4 { addr: 0xc612_0000 & !((1u32 << (32 - inside_len)) - 1), len: inside_len }];
            if let Some(l) = second {
                inside.push(Prefix4 { addr: 0x0a00_0000, len: l });
            }
            let pool = [Prefix4 { addr: 0xc613_0000 & !((1u32 << (32 - pool_len)).wrapping_sub(1)), len: pool_len }];
            let Ok(d) = Deterministic::new(&inside, &pool, (lo, hi), per_host) else {
                return Ok(());
            };
            let mut seen = std::collections::HashSet::new();
            let mut n = 0u64;
            for pre in &inside {
                // Every address of small prefixes, a sample of big ones.
                let step = (pre.size() / 512).max(1);
                let mut i = 0;
                while i < pre.size() {
                    let a = pre.nth(i);
                    let s = d.of_inside(a).expect("an inside address has a slice");
                    prop_assert!(pool[0].contains(s.addr));
                    prop_assert!(lo <= s.first && s.first <= s.last && s.last <= hi, "{:?} outside {}-{}", s, lo, hi);
                    prop_assert_eq!(s.last - s.first + 1, d.ports_per_host());
                    prop_assert!(seen.insert((s.addr, s.first)), "two subscribers share {:?}", s);
                    for port in [s.first, s.last, s.first + (s.last - s.first) / 2] {
                        prop_assert_eq!(d.of_outside(s.addr, port), Some(a));
                    }
                    n += 1;
                    i += step;
                }
            }
            prop_assert!(n > 0);
            // Ports below the range belong to nobody.
            if lo > 1 {
                prop_assert_eq!(d.of_outside(pool[0].addr, lo - 1), None);
            }
        }
    }

    proptest! {
        /// NAT64: every address of a subscriber prefix gets the subscriber's one range, no
        /// two subscribers share a port, and the lookup names the subscriber's prefix.
        #[test]
        fn nat64_subscribers_are_disjoint_and_inverted_by_lookup(
            inside_len in 40u8..=64,
            extra in 0u8..=10,
            pool_len in 28u8..=32,
            lo in 1u16..=40_000,
            width in 0u16..=25_000,
            host in any::<u64>(),
        ) {
            let sub_len = (inside_len + extra).min(128);
            let base: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0000;
            let inside = [Prefix6 { addr: base & (u128::MAX << (128 - u32::from(inside_len))), len: inside_len }];
            let pool = [Prefix4 { addr: 0xc613_0000 & !((1u32 << (32 - pool_len)).wrapping_sub(1)), len: pool_len }];
            let hi = lo.saturating_add(width);
            let Ok(d) = Deterministic::new64(&inside, sub_len, &pool, (lo, hi), None) else {
                return Ok(());
            };
            prop_assert_eq!(d.plan().subscribers, 1u64 << extra);
            let shift = 128 - u32::from(sub_len);
            let mut seen = std::collections::HashSet::new();
            for i in 0..d.plan().subscribers.min(300) {
                let prefix = inside[0].addr | (u128::from(i) << shift);
                let low = if shift == 0 { 0 } else { u128::from(host) & ((1u128 << shift.min(64)) - 1) };
                let s = d.of_inside6(prefix | low).expect("an inside address has a slice");
                prop_assert_eq!(d.of_inside6(prefix), Some(s), "one range per subscriber");
                prop_assert!(pool[0].contains(s.addr));
                prop_assert!(lo <= s.first && s.first <= s.last && s.last <= hi);
                prop_assert!(seen.insert((s.addr, s.first)), "two subscribers share {:?}", s);
                for port in [s.first, s.last] {
                    prop_assert_eq!(
                        d.of_outside_ip(s.addr, port),
                        Some(IpAddr::V6(Ipv6Addr::from(prefix)))
                    );
                    prop_assert_eq!(d.of_outside(s.addr, port), None, "not a NAT44 answer");
                }
            }
            // Outside the inside prefix: no subscriber; NAT44 lookups answer nothing.
            prop_assert_eq!(d.of_inside6(inside[0].addr ^ (1u128 << 127)), None);
            prop_assert_eq!(d.of_inside(0xc612_0001), None);
        }
    }
}
