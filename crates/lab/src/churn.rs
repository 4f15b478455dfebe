//! The churn experiment's schedule and its per-group accounting: a trial that sends to a fixed
//! set of established flows at one rate and, interleaved with them, to flows the device has
//! never seen (one frame each) at another, and counts loss and latency for each group from the
//! receive side.
//!
//! Frame number `s` of a trial (its sequence number) belongs to a group by an exact integer
//! schedule: of the first `s` frames, `s x new_pps / (established_pps + new_pps)` (rounded
//! down) went to new flows. So the number sent to each group follows from the number of
//! sequence numbers used, which the sender already reports (a frame the device's port refused
//! used its sequence number and is lost in its group). New-flow frame `j` goes to flow
//! `established + j` of the trial's flow list, so no new flow is sent twice; established frame
//! `k` goes to flow `k mod established`. The receiver puts a frame in a group by its flow index.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::tester::Latency;

/// How a churn trial's frames are shared between established flows and new ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    /// Flows 0..established of the trial's flow list are the established ones.
    pub established: u32,
    /// Frames per second to the established flows, together.
    pub established_pps: u64,
    /// Frames per second to new flows (= new flows per second: one frame each).
    pub new_pps: u64,
}

impl Mix {
    /// A schedule; None when it sends nothing, or sends to established flows that do not exist.
    pub fn new(established: u32, established_pps: u64, new_pps: u64) -> Option<Mix> {
        let m = Mix {
            established,
            established_pps,
            new_pps,
        };
        let ok = m.total() > 0 && (established > 0 || established_pps == 0);
        ok.then_some(m)
    }

    /// Offered load of the trial, frames per second.
    pub fn total(&self) -> u64 {
        self.established_pps + self.new_pps
    }

    /// Frames to new flows among the first `s` frames.
    pub fn new_before(&self, s: u64) -> u64 {
        let t = u128::from(self.total().max(1));
        (u128::from(s) * u128::from(self.new_pps) / t) as u64
    }

    /// The flow index (into the trial's flow list) of frame number `s`.
    pub fn flow_of(&self, s: u64) -> usize {
        let n = self.new_before(s);
        if self.new_before(s + 1) > n {
            (u64::from(self.established) + n) as usize
        } else {
            ((s - n) % u64::from(self.established.max(1))) as usize
        }
    }

    /// Frames (to established flows, to new flows) among the first `s`.
    pub fn split(&self, s: u64) -> (u64, u64) {
        let n = self.new_before(s);
        (s - n, n)
    }

    /// The most frames a trial may send without needing more than `new_flows` new flows
    /// (None: the schedule sends to no new flow, so any number).
    pub fn max_frames(&self, new_flows: u64) -> Option<u64> {
        // The largest S with new_before(S) <= new_flows: S x new < (new_flows + 1) x total.
        (self.new_pps > 0).then(|| {
            let t = u128::from(self.total());
            (((u128::from(new_flows) + 1) * t - 1) / u128::from(self.new_pps)) as u64
        })
    }

    /// The group of a received frame's flow index: 0 established, 1 new.
    pub fn group_of(&self, flow: u32) -> usize {
        usize::from(flow >= self.established)
    }
}

/// Loss and latency of one group of a churn trial.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Group {
    pub sent: u64,
    /// Distinct frames received (duplicates are not counted).
    pub received: u64,
    pub lost: u64,
    pub loss: f64,
    pub latency: Latency,
}

/// A churn trial's two groups.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Groups {
    pub established: Group,
    pub new: Group,
}

/// What the receiver counts per group (distinct frames and their latencies).
#[derive(Debug, Clone)]
pub struct RxGroups {
    mix: Mix,
    received: [u64; 2],
    hist: [Histogram<u64>; 2],
}

impl RxGroups {
    pub fn new(mix: Mix) -> anyhow::Result<RxGroups> {
        let h = || {
            Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
                .map_err(|e| anyhow::anyhow!("histogram: {e}"))
        };
        Ok(RxGroups {
            mix,
            received: [0; 2],
            hist: [h()?, h()?],
        })
    }

    /// One distinct frame of flow `flow`, `lat_ns` after it was sent.
    pub fn record(&mut self, flow: u32, lat_ns: u64) {
        let g = self.mix.group_of(flow);
        self.received[g] += 1;
        let h = &mut self.hist[g];
        let _ = h.record(lat_ns.max(1).min(h.high()));
    }

    /// The groups of a trial that used `sent` sequence numbers.
    pub fn finish(&self, sent: u64) -> Groups {
        let (se, sn) = self.mix.split(sent);
        let group = |sent: u64, g: usize| {
            let received = self.received[g];
            let lost = sent.saturating_sub(received);
            Group {
                sent,
                received,
                lost,
                loss: if sent == 0 {
                    0.0
                } else {
                    lost as f64 / sent as f64
                },
                latency: Latency::of(&self.hist[g]),
            }
        };
        Groups {
            established: group(se, 0),
            new: group(sn, 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_interleaves_exactly_and_never_repeats_a_new_flow() {
        // 1,000 established flows at 100,000 pps, 25,000 new flows/s: one frame in five is new.
        let m = Mix::new(1000, 100_000, 25_000).unwrap();
        let mut new_seen = std::collections::HashSet::new();
        let mut per_flow = vec![0u32; 1000];
        for s in 0..125_000u64 {
            let f = m.flow_of(s);
            if f >= 1000 {
                assert!(new_seen.insert(f), "new flow {f} sent twice");
                assert_eq!(m.group_of(f as u32), 1);
            } else {
                per_flow[f] += 1;
                assert_eq!(m.group_of(f as u32), 0);
            }
            // Never more than one frame ahead of the exact share.
            let (e, n) = m.split(s + 1);
            assert_eq!(e + n, s + 1);
            assert!((n as f64 - (s + 1) as f64 / 5.0).abs() <= 1.0);
        }
        assert_eq!(new_seen.len(), 25_000);
        // New flows are numbered in order after the established ones.
        assert_eq!(new_seen.iter().max(), Some(&(1000 + 24_999)));
        // Established frames go round robin: every flow got the same share.
        assert!(per_flow.iter().all(|&c| c == 100));
        // The budget for 25,000 new flows: up to the frame before the 25,001st new one.
        assert_eq!(m.max_frames(25_000), Some(125_004));
        assert_eq!(m.flow_of(125_004), 1000 + 25_000);
        assert_eq!(m.split(125_000), (100_000, 25_000));
    }

    #[test]
    fn schedule_edges() {
        // No new flows: every frame established, no budget.
        let m = Mix::new(10, 1000, 0).unwrap();
        assert!((0..100).all(|s| m.flow_of(s) == (s % 10) as usize));
        assert_eq!(m.max_frames(5), None);
        // No established flows: every frame is a new flow.
        let m = Mix::new(0, 0, 500).unwrap();
        assert!((0..100).all(|s| m.flow_of(s) == s as usize));
        assert_eq!(m.group_of(0), 1);
        assert_eq!(m.max_frames(7), Some(7));
        assert_eq!(m.max_frames(0), Some(0));
        // Nothing to send, or a rate for flows that do not exist.
        assert!(Mix::new(10, 0, 0).is_none());
        assert!(Mix::new(0, 100, 10).is_none());
        // A rate that does not divide: the budget never reaches past the last new flow.
        let m = Mix::new(3, 700, 300).unwrap();
        let max = m.max_frames(1000).unwrap();
        let last_new = (0..max).map(|s| m.flow_of(s)).max().unwrap();
        assert_eq!(last_new, 3 + 999);
        assert_eq!(m.split(max).1, 1000);
        assert_eq!(m.flow_of(max), 3 + 1000);
    }

    #[test]
    fn groups_count_loss_and_latency_per_group() {
        let m = Mix::new(4, 800, 200).unwrap();
        let mut rx = RxGroups::new(m).unwrap();
        // 100 frames: 80 established, 20 new. Deliver all established ones at 10 us and
        // every other new one at 500 us.
        let mut new_k = 0;
        for s in 0..100u64 {
            let f = m.flow_of(s) as u32;
            if m.group_of(f) == 0 {
                rx.record(f, 10_000);
            } else {
                if new_k % 2 == 0 {
                    rx.record(f, 500_000);
                }
                new_k += 1;
            }
        }
        let g = rx.finish(100);
        assert_eq!((g.established.sent, g.established.received), (80, 80));
        assert_eq!(g.established.lost, 0);
        assert_eq!(g.established.loss, 0.0);
        assert_eq!((g.new.sent, g.new.received, g.new.lost), (20, 10, 10));
        assert!((g.new.loss - 0.5).abs() < 1e-12);
        assert!((g.established.latency.p50_us - 10.0).abs() < 0.1);
        assert!((g.new.latency.p50_us - 500.0).abs() < 1.0);
        assert_eq!(g.new.latency.samples, 10);
        // Nothing sent, nothing lost.
        let g = RxGroups::new(m).unwrap().finish(0);
        assert_eq!(g.new.loss, 0.0);
        assert_eq!(g.established.latency.samples, 0);
    }
}
