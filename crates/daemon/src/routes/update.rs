//! The routing of a reload ([`Routes::update`]): when a reload changes what is routed into
//! the TUN device -- NAT44 `inside` prefixes and `pool`, static entries, NAT64 `pool4` and
//! `prefix`, SIIT `pool4`, `prefix` and EAM entries -- the difference is made, not the whole set-up again: the routes, rules,
//! `throw` routes and proxy-ARP entries that come are added (journaled first, as at start),
//! those that go are removed (and forgotten by the journal), and everything else is left
//! alone, so no packet of a surviving session meets a missing route.
//!
//! Order: what comes first (a new pool address's route and its fail-closed twin, then its
//! proxy-ARP entry; a new inside prefix's `throw` route before its rule), what goes last
//! (an inside prefix's rule before its `throw` route; a pool address's proxy-ARP entry and
//! route after the engines ended its sessions, which the reload did before this).

use std::net::IpAddr;

use anyhow::Result;
use tracing::info;
use xlat_engine::{Prefix4, Prefix6};

use super::{eam_routes, inbound_steps, proxies_for, rule_steps, throw_steps, RoutePlan, Routes};
use crate::rtnl::{self, Obj, Step};

/// `a` without what is in `b`.
fn minus<T: PartialEq + Copy>(a: &[T], b: &[T]) -> Vec<T> {
    a.iter().filter(|x| !b.contains(x)).copied().collect()
}

/// What [`Routes::update`] did, as counts for the log and the reload's answer.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RouteChange {
    pub added: usize,
    pub removed: usize,
}

impl Routes {
    /// Turns the routing set up for `old` into that of `new` (module docs). A failure to
    /// add leaves what was made in place (removed at exit) and names the command.
    pub fn update(&mut self, old: &RoutePlan, new: &RoutePlan) -> Result<RouteChange> {
        let tun = &new.tun;
        let mut come4 = minus(&new.inbound, &old.inbound);
        let mut gone4 = minus(&old.inbound, &new.inbound);
        let mut come6: Vec<Prefix6> = minus(&new.inbound6, &old.inbound6);
        let mut gone6: Vec<Prefix6> = minus(&old.inbound6, &new.inbound6);
        // EAM entries (RFC 7757): a new one's side is asked as at start; a removed one's
        // route is whichever of its two prefixes was routed (only recorded undos run).
        let (eam4, eam6) = eam_routes(&minus(&new.eam, &old.eam), tun);
        come4.extend(eam4);
        come6.extend(eam6);
        for e in minus(&old.eam, &new.eam) {
            gone4.push(e.ipv4);
            gone6.push(e.ipv6);
        }
        let come_rules = minus(&new.rule_sources, &old.rule_sources);
        let gone_rules = minus(&old.rule_sources, &new.rule_sources);
        let come_throws = minus(&new.throws, &old.throws);
        let gone_throws = minus(&old.throws, &new.throws);
        let mut change = RouteChange::default();

        // What comes. Proxy ARP is asked before our own routes change the answer.
        let proxies = proxies_for(&come4, tun);
        let mut steps = inbound_steps(tun, &come4, &come6);
        steps.extend(throw_steps(new.table, &come_throws));
        steps.extend(rule_steps(new, &come_rules));
        change.added += steps.len();
        self.add_all(steps)?;
        change.added += self.add_proxies(&proxies)?;

        // What goes: the undo commands recorded for it, newest first.
        let mut undo: Vec<Step> = Vec::new();
        undo.extend(rule_steps(old, &gone_rules).into_iter().map(|(_, u)| u));
        undo.extend(
            throw_steps(old.table, &gone_throws)
                .into_iter()
                .map(|(_, u)| u),
        );
        undo.extend(self.proxies_in(&gone4));
        undo.extend(
            inbound_steps(tun, &gone4, &gone6)
                .into_iter()
                .rev()
                .map(|(_, u)| u),
        );
        change.removed = self.undo_now(&undo);
        if change.added + change.removed > 0 {
            info!(
                added = change.added,
                removed = change.removed,
                inbound = ?come4.iter().chain(&gone4).map(Prefix4::to_string).collect::<Vec<_>>(),
                "routes follow the reload"
            );
        }
        Ok(change)
    }

    /// The recorded undo steps of proxy-ARP entries for addresses in `prefixes`.
    fn proxies_in(&self, prefixes: &[Prefix4]) -> Vec<Step> {
        self.undo
            .iter()
            .filter(|u| match &u.obj {
                Obj::ProxyNeigh {
                    addr: IpAddr::V4(a),
                    ..
                } => prefixes.iter().any(|p| p.contains(u32::from(*a))),
                _ => false,
            })
            .cloned()
            .collect()
    }

    /// Runs `undo` (steps recorded by [`Routes::add_all`]) now and forgets them, here and
    /// in the journal; returns how many succeeded. One that fails is gone already.
    fn undo_now(&mut self, undo: &[Step]) -> usize {
        // Only what this run made: an entry it did not add is not its to remove.
        let undo: Vec<Step> = undo
            .iter()
            .filter(|u| self.undo.contains(u))
            .cloned()
            .collect();
        if undo.is_empty() {
            return 0;
        }
        let done = rtnl::apply(&undo, true).ok();
        self.undo.retain(|u| !undo.contains(u));
        if let Some(j) = self.journal.as_mut() {
            let words: Vec<Vec<String>> = undo.iter().map(Step::to_args).collect();
            if let Err(e) = j.forget(&words) {
                tracing::warn!(error = %e, "cannot update the state file");
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::minus;

    #[test]
    fn minus_keeps_order_and_drops_what_the_other_has() {
        assert_eq!(minus(&[1, 2, 3, 4], &[2, 4, 5]), vec![1, 3]);
        assert!(minus::<u8>(&[], &[1]).is_empty());
    }
}
