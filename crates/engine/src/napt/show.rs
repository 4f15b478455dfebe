//! What `xlat show` reads: the session listing and the table sizes and pool use.

use crate::flow::{InsideAddr, Proto};
use crate::snapshot::{PoolUse, SessionInfo, Stats};
use crate::tcp::TcpState;
use crate::Time;

use super::session::SessState;
use super::Napt;

fn tcp_state_name(t: TcpState) -> &'static str {
    match t {
        TcpState::OutInit => "syn_out",
        TcpState::InInit => "syn_in",
        TcpState::Established => "established",
        TcpState::OutFinRcv => "fin_out",
        TcpState::InFinRcv => "fin_in",
        TcpState::BothFinRcv => "fin_both",
        TcpState::Trans => "transitory",
    }
}

impl<A: InsideAddr> Napt<A> {
    /// Appends the live sessions, sorted, to `out`.
    pub fn sessions(&self, now: Time, out: &mut Vec<SessionInfo>) {
        let mut dynamic: Vec<SessionInfo> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires > now || s.offloaded)
            .map(|(_, s)| SessionInfo {
                proto: s.proto().name().into(),
                inside: s.int(&self.hosts).map(|e| e.show(true)).unwrap_or_default(),
                outside: s.ext().show(true),
                remote: s.remote().show(s.proto() != Proto::Icmp),
                state: match s.state {
                    SessState::Udp => "udp".into(),
                    SessState::Icmp => "icmp".into(),
                    SessState::Tcp(t) => tcp_state_name(t).into(),
                },
                expires_in: Some(now.secs_until(s.expires)),
                fast_path: s.offloaded,
                ..SessionInfo::default()
            })
            .collect();
        dynamic.sort_by(|a, b| {
            (&a.proto, &a.inside, &a.remote).cmp(&(&b.proto, &b.inside, &b.remote))
        });
        out.extend(dynamic);
    }

    /// Fills the table sizes and pool use of `st`.
    pub fn fill_stats(&self, st: &mut Stats) {
        let (lo, hi) = self.cfg.ports;
        let (ilo, ihi) = self.icmp_ids;
        st.sessions += self.sessions.len as u64;
        st.mappings += (self.mappings.len + self.folded) as u64;
        st.hosts += self.hosts.len() as u64;
        st.pool_addresses += self.pool.len() as u64;
        st.pool_addresses_used += self.pool.iter().filter(|p| p.hosts > 0).count() as u64;
        st.pool
            .extend([Proto::Tcp, Proto::Udp, Proto::Icmp].iter().map(|&p| {
                PoolUse {
                    proto: p.name().into(),
                    ports_used: self
                        .pool
                        .iter()
                        .filter_map(|a| a.ports.get(p as usize))
                        .map(|m| u64::from(m.used()))
                        .sum(),
                    ports_total: self.pool.len() as u64
                        * match p {
                            Proto::Icmp => u64::from(ihi - ilo) + 1,
                            _ => u64::from(hi - lo) + 1,
                        },
                }
            }));
    }
}
