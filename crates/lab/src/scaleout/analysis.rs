//! Analysis of a run's record (pure: unit tested): which node carried each stream when, who
//! moved, what was lost.

use super::*;

impl Record {
    /// Node of stream (s, f) at time t: the source the server last saw at or before t.
    pub fn node_at(&self, s: usize, f: usize, t: f64, nodes: usize) -> Option<usize> {
        self.seen[s][f]
            .changes
            .iter()
            .take_while(|c| c.0 <= t)
            .last()
            .and_then(|c| node_of(c.1, nodes))
    }

    /// Node of subscriber s at time t when all its streams agree; None when they do not (or
    /// none arrived yet).
    pub fn sub_node_at(&self, s: usize, t: f64, nodes: usize) -> Option<usize> {
        let v: BTreeSet<Option<usize>> = (0..self.seen[s].len())
            .map(|f| self.node_at(s, f, t, nodes))
            .collect();
        if v.len() == 1 {
            v.into_iter().next().flatten()
        } else {
            None
        }
    }

    /// Packets of subscriber s's streams sent in [a, b) that got no reply.
    pub fn lost(&self, s: usize, a: f64, b: f64) -> u64 {
        let mut n = 0;
        for r in &self.replied[s] {
            for (seq, t) in self.ticks.iter().enumerate() {
                if *t >= a && *t < b && !r.replied.get(seq).copied().unwrap_or(false) {
                    n += 1;
                }
            }
        }
        n
    }

    /// Packets of subscriber s's streams sent in [a, b).
    pub fn sent(&self, s: usize, a: f64, b: f64) -> u64 {
        let per = self.ticks.iter().filter(|t| **t >= a && **t < b).count() as u64;
        per * self.replied[s].len() as u64
    }

    /// Time from `t` until every stream of subscriber s arrived through a node other than
    /// `old` (None if that never happened).
    pub fn recovered_after(&self, s: usize, old: usize, t: f64, nodes: usize) -> Option<f64> {
        let mut worst: f64 = 0.0;
        for st in &self.seen[s] {
            let c = st
                .changes
                .iter()
                .find(|c| c.0 > t && node_of(c.1, nodes).is_some_and(|n| n != old))?;
            worst = worst.max(c.0 - t);
        }
        Some(worst)
    }

    /// Packets the server received from each node's pool in [a, b).
    pub fn packets_per_node(&self, a: f64, b: f64, nodes: usize) -> Vec<u64> {
        let mut v = vec![0; nodes];
        for (t, src) in &self.server_rx {
            if *t >= a && *t < b {
                if let Some(n) = node_of(*src, nodes) {
                    v[n] += 1;
                }
            }
        }
        v
    }
}
