//! The engine's door for session sync (`[sync]`, docs/FAILOVER.md): a standby installs the
//! sessions its active peer made and removes those the peer ended, as the peer's state events
//! ([`crate::events`]) describe them, and starts their timers when it takes over.
//!
//! The events carry everything an install needs (inside, outside and remote endpoints,
//! protocol, translator), so the wire format of the sync channel is a compact encoding of
//! [`StateEvent`]s and nothing here knows about it. The rules a copy follows (frozen until
//! takeover, TCP established, the exact outside port) are in `napt/install.rs`.

use std::net::IpAddr;

use crate::events::{EndReason, EventKind, StateEvent, Translator};
use crate::flow::Endpoint;
pub use crate::napt::InstallRefused;
use crate::{Engine, Time};

impl Engine {
    /// Applies a peer's session event: `SessionCreated` installs a frozen copy (true if it
    /// was new), `SessionDeleted` removes the copy (true if there was one); other kinds are
    /// not synced (`Ok(false)`). A translator this engine does not run refuses with
    /// [`InstallRefused::NotInPool`] (the two gateways' configurations differ).
    pub fn apply_synced(&mut self, now: Time, ev: &StateEvent) -> Result<bool, InstallRefused> {
        let remote = Endpoint {
            addr: u32::from(ev.remote),
            port: ev.proto.remote_port(ev.remote_port),
        };
        let ext = Endpoint {
            addr: u32::from(ev.outside),
            port: ev.outside_port,
        };
        match (ev.translator, ev.inside) {
            (Translator::Nat44, IpAddr::V4(a)) => {
                let int = Endpoint {
                    addr: u32::from(a),
                    port: ev.inside_port,
                };
                let Some(n) = self.nat44.as_mut() else {
                    return Err(InstallRefused::NotInPool);
                };
                let napt = n.napt_mut();
                match ev.kind {
                    EventKind::SessionCreated => {
                        napt.install(now, ev.proto, int, ext, remote, &mut self.counters)
                    }
                    EventKind::SessionDeleted(why) => {
                        Ok(napt.remove_synced(now, ev.proto, int, remote, why))
                    }
                    _ => Ok(false),
                }
            }
            (Translator::Nat64, IpAddr::V6(a)) => {
                let int = Endpoint {
                    addr: u128::from(a),
                    port: ev.inside_port,
                };
                let Some(n) = self.nat64.as_mut() else {
                    return Err(InstallRefused::NotInPool);
                };
                let napt = n.napt_mut();
                match ev.kind {
                    EventKind::SessionCreated => {
                        napt.install(now, ev.proto, int, ext, remote, &mut self.counters)
                    }
                    EventKind::SessionDeleted(why) => {
                        Ok(napt.remove_synced(now, ev.proto, int, remote, why))
                    }
                    _ => Ok(false),
                }
            }
            _ => Err(InstallRefused::Conflict),
        }
    }

    /// Removes every synced copy (a full resync starts over); returns how many.
    pub fn clear_synced(&mut self, now: Time) -> u64 {
        let mut n = 0;
        if let Some(x) = self.nat44.as_mut() {
            n += x.napt_mut().clear_synced(now);
        }
        if let Some(x) = self.nat64.as_mut() {
            n += x.napt_mut().clear_synced(now);
        }
        n
    }

    /// Takeover: the synced copies' timers start now (`napt`'s `thaw`), and those
    /// the fast path may carry are handed to it through the state events. Returns how many.
    pub fn thaw_synced(&mut self, now: Time) -> u64 {
        let mut n = 0;
        if let Some(x) = self.nat44.as_mut() {
            n += x.napt_mut().thaw(now);
        }
        if let Some(x) = self.nat64.as_mut() {
            n += x.napt_mut().thaw(now);
        }
        n
    }
}

/// Is this a kind of event session sync carries? Sessions made and ended; mappings, host
/// pairings and port blocks follow from them on the standby.
pub fn synced_kind(k: EventKind) -> bool {
    matches!(k, EventKind::SessionCreated | EventKind::SessionDeleted(_))
}

/// [`EndReason`] as a byte on the sync channel, and back.
pub fn reason_code(r: EndReason) -> u8 {
    match r {
        EndReason::Expired => 0,
        EndReason::Evicted => 1,
        EndReason::Cleared => 2,
        EndReason::Reload => 3,
        EndReason::Stopped => 4,
    }
}

/// The [`EndReason`] of a byte from [`reason_code`]; `None` for any other.
pub fn reason_of(b: u8) -> Option<EndReason> {
    Some(match b {
        0 => EndReason::Expired,
        1 => EndReason::Evicted,
        2 => EndReason::Cleared,
        3 => EndReason::Reload,
        4 => EndReason::Stopped,
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::Nat44Config;
    use crate::EngineConfig;
    use std::net::Ipv4Addr;

    fn engine() -> Engine {
        let cfg = Nat44Config {
            inside: vec!["198.18.0.0/16".parse().unwrap()],
            pool: vec!["198.19.0.100/32".parse().unwrap()],
            ..Nat44Config::default()
        };
        Engine::new(EngineConfig {
            nat44: Some(cfg),
            seed: 7,
            ..EngineConfig::default()
        })
        .unwrap()
    }

    /// An active's events, applied to a standby, give it the active's sessions; the
    /// active's delete removes the copy.
    #[test]
    fn a_standby_follows_the_actives_events() {
        let mut active = engine();
        let mut standby = engine();
        active.set_events(1024);
        let now = Time::from_secs(5);
        let mut pkt = crate::lane_tests::udp4([198, 18, 0, 7], [203, 0, 113, 9], 40000, 53);
        assert!(active.process_vec(now, &mut pkt).transmit());
        let mut evs = Vec::new();
        active.drain_events(&mut evs);
        let created: Vec<_> = evs.iter().filter(|e| synced_kind(e.kind)).collect();
        assert_eq!(created.len(), 1);
        assert_eq!(standby.apply_synced(now, created[0]), Ok(true));
        let listed = standby.sessions(now);
        assert_eq!(listed.len(), 1);
        assert_eq!(
            listed[0].outside,
            IpAddr::V4(Ipv4Addr::new(198, 19, 0, 100))
        );
        assert_eq!(listed[0].outside_port, Some(created[0].outside_port));
        // After takeover the flow's next packet leaves from the same endpoint.
        assert_eq!(standby.thaw_synced(now), 1);
        let mut pkt = crate::lane_tests::udp4([198, 18, 0, 7], [203, 0, 113, 9], 40000, 53);
        assert!(standby.process_vec(now, &mut pkt).transmit());
        let sport = u16::from_be_bytes([pkt[20], pkt[21]]);
        assert_eq!(sport, created[0].outside_port);
        let del = StateEvent {
            kind: EventKind::SessionDeleted(EndReason::Expired),
            ..*created[0]
        };
        assert_eq!(standby.apply_synced(now, &del), Ok(true));
        assert!(standby.sessions(now).is_empty());
        for r in [
            EndReason::Expired,
            EndReason::Evicted,
            EndReason::Cleared,
            EndReason::Reload,
            EndReason::Stopped,
        ] {
            assert_eq!(reason_of(reason_code(r)), Some(r));
        }
        assert_eq!(reason_of(9), None);
    }

    /// A standby forwards nothing, also not in XDP: a copy goes to the fast path only when
    /// it thaws.
    #[test]
    fn copies_reach_the_fast_path_at_takeover_only() {
        let mut active = engine();
        active.set_events(1024);
        let now = Time::from_secs(5);
        let mut pkt = crate::lane_tests::udp4([198, 18, 0, 7], [203, 0, 113, 9], 40000, 53);
        assert!(active.process_vec(now, &mut pkt).transmit());
        let mut evs = Vec::new();
        active.drain_events(&mut evs);
        let created = *evs.iter().find(|e| synced_kind(e.kind)).unwrap();
        let mut standby = engine();
        standby.set_offload(true);
        standby.set_events(1024);
        assert_eq!(standby.apply_synced(now, &created), Ok(true));
        let fast = |e: &mut Engine| {
            let mut v = Vec::new();
            e.drain_events(&mut v);
            v.iter()
                .filter(|e| matches!(e.kind, EventKind::FastPath(_)))
                .count()
        };
        assert_eq!(fast(&mut standby), 0, "no recipe while standby");
        standby.thaw_synced(now);
        assert_eq!(fast(&mut standby), 1, "installed at takeover");
    }

    /// A NAT64 session's event (an IPv6 inside host) installs in the NAT64 translator,
    /// listed with its IPv6 host, the outside endpoint and the remote, established; an
    /// engine without NAT64 refuses it.
    #[test]
    fn nat64_sessions_install_too() {
        use crate::config::Nat64Config;
        let mut e = Engine::new(EngineConfig {
            nat64: Some(Nat64Config {
                prefix: "64:ff9b::/96".parse().unwrap(),
                pool4: vec!["198.19.0.100/32".parse().unwrap()],
                ..Nat64Config::default()
            }),
            seed: 7,
            ..EngineConfig::default()
        })
        .unwrap();
        let ev = StateEvent {
            at: Time(0),
            kind: EventKind::SessionCreated,
            translator: Translator::Nat64,
            session: None,
            proto: crate::flow::Proto::Tcp,
            inside: "2001:db8::7".parse::<std::net::Ipv6Addr>().unwrap().into(),
            inside_port: 40000,
            outside: Ipv4Addr::new(198, 19, 0, 100),
            outside_port: 2048,
            remote: Ipv4Addr::new(203, 0, 113, 9),
            remote_port: 443,
            with_mapping: false,
        };
        let now = Time::from_secs(1);
        assert_eq!(e.apply_synced(now, &ev), Ok(true));
        let rows = e.sessions(now);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].inside, ev.inside);
        assert_eq!(rows[0].outside_port, Some(2048));
        assert_eq!(rows[0].remote, Some(ev.remote));
        assert_eq!(
            rows[0].state,
            crate::SessionState::of_tcp(crate::tcp::TcpState::Established)
        );
        assert_eq!(
            engine().apply_synced(now, &ev),
            Err(InstallRefused::NotInPool)
        );
    }
}
