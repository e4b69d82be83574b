//! Clock skew between the members of a cluster, as their heartbeats show
//! it (the way Aerospike's skew monitor measures it). Every pulse carries
//! its sender's wall clock; its difference from this node's wall clock
//! when the pulse arrives is smoothed per peer (a moving average, started
//! afresh when the peer restarts), and the cluster's skew is the spread of
//! those differences, this node's own being 0, across the current members.
//!
//! Strong consistency orders a record's versions by last-update time
//! within a regime, so clocks too far apart could order two writes wrong:
//! writes stop (22) while the skew is past [`SkewMonitor::stop_writes_ms`]
//! (20 s with the default heartbeat of 150 ms × 10, scaled with it, before
//! the 27 s at which Aerospike documents a loss). AP namespaces with nsup
//! running stop writes past [`AP_STOP_WRITES_MS`] (warning from
//! [`AP_WARN_MS`]), as Aerospike's nsup does.

use crate::NodeId;
use std::collections::BTreeMap;

/// (AP, nsup running) writes stop past this skew.
pub const AP_STOP_WRITES_MS: u64 = 40_000;
/// (AP, nsup running) a warning past this skew.
pub const AP_WARN_MS: u64 = 30_000;
/// (SC) the stop-writes skew with the default heartbeat (150 ms × 10).
pub const SC_STOP_WRITES_MS_DEFAULT: u64 = 20_000;
/// A peer not heard for this long no longer counts.
const SAMPLE_AGE_MAX_MS: u64 = 10_000;
/// Each new difference moves the average by 1/`SMOOTHING` of the way.
const SMOOTHING: i64 = 4;

#[derive(Clone, Copy, Debug)]
struct Sample {
    boot_id: u64,
    /// The peer's clock minus this node's, smoothed (ms).
    delta_ms: i64,
    seen_ms: u64,
}

/// The differences between this node's clock and its peers'.
#[derive(Clone, Debug)]
pub struct SkewMonitor {
    /// (monotonic ms, wall-clock ms) at this node's last tick.
    clock: Option<(u64, u64)>,
    peers: BTreeMap<NodeId, Sample>,
    stop_writes_ms: u64,
}

impl SkewMonitor {
    /// A monitor for a heartbeat of `interval_ms` × `timeout`.
    pub fn new(interval_ms: u64, timeout: u64) -> SkewMonitor {
        let heartbeat_ms = interval_ms.max(1).saturating_mul(timeout.max(1));
        let stop_writes_ms =
            (SC_STOP_WRITES_MS_DEFAULT.saturating_mul(heartbeat_ms) / 1500).max(1000);
        SkewMonitor {
            clock: None,
            peers: BTreeMap::new(),
            stop_writes_ms,
        }
    }

    /// (SC) writes stop at this skew.
    pub fn stop_writes_ms(&self) -> u64 {
        self.stop_writes_ms
    }

    /// This node's clocks now.
    pub fn tick(&mut self, now_ms: u64, clock_ms: u64) {
        self.clock = Some((now_ms, clock_ms));
    }

    /// A pulse from `node` (process `boot_id`) carried its wall clock
    /// `clock_ms`; it arrived at monotonic time `now_ms`.
    pub fn observe(&mut self, node: NodeId, boot_id: u64, clock_ms: u64, now_ms: u64) {
        let Some((ticked_ms, wall_ms)) = self.clock else {
            return;
        };
        let local_ms = wall_ms.saturating_add(now_ms.saturating_sub(ticked_ms));
        let delta_ms = clamp(i128::from(clock_ms) - i128::from(local_ms));
        let sample = match self.peers.get(&node) {
            Some(held) if held.boot_id == boot_id => Sample {
                delta_ms: held.delta_ms + (delta_ms - held.delta_ms) / SMOOTHING,
                boot_id,
                seen_ms: now_ms,
            },
            _ => Sample {
                boot_id,
                delta_ms,
                seen_ms: now_ms,
            },
        };
        self.peers.insert(node, sample);
    }

    /// The skew among `members` (this node, `me`, included), in ms, and
    /// the members farthest from the others' median.
    pub fn skew(&self, members: &[NodeId], me: NodeId, now_ms: u64) -> (u64, Vec<NodeId>) {
        let mut deltas: Vec<(i64, NodeId)> = members
            .iter()
            .filter_map(|&node| {
                if node == me {
                    return Some((0, node));
                }
                let sample = self.peers.get(&node)?;
                (now_ms.saturating_sub(sample.seen_ms) <= SAMPLE_AGE_MAX_MS)
                    .then_some((sample.delta_ms, node))
            })
            .collect();
        if deltas.len() < 2 {
            return (0, Vec::new());
        }
        deltas.sort_unstable();
        let low = deltas[0].0;
        let high = deltas[deltas.len() - 1].0;
        let skew = high.abs_diff(low);
        let median = deltas[deltas.len() / 2].0;
        let far = (median.abs_diff(low)).max(median.abs_diff(high));
        let outliers = deltas
            .iter()
            .filter(|(delta, _)| far > 0 && delta.abs_diff(median) == far)
            .map(|&(_, node)| node)
            .collect();
        (skew, outliers)
    }
}

fn clamp(value: i128) -> i64 {
    value.clamp(i128::from(i64::MIN / 2), i128::from(i64::MAX / 2)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_is_the_spread_of_smoothed_differences() {
        let mut monitor = SkewMonitor::new(150, 10);
        assert_eq!(monitor.stop_writes_ms(), 20_000);
        assert_eq!(SkewMonitor::new(300, 10).stop_writes_ms(), 40_000);
        // Before a tick nothing can be compared.
        monitor.observe(2, 1, 5_000, 0);
        assert_eq!(monitor.skew(&[1, 2], 1, 0).0, 0);
        monitor.tick(100, 1_000_000);
        // Node 2 runs 25 s ahead, node 3 with this node.
        monitor.observe(2, 1, 1_025_050, 150);
        monitor.observe(3, 7, 1_000_050, 150);
        let (skew, outliers) = monitor.skew(&[3, 2, 1], 1, 150);
        assert_eq!(skew, 25_000);
        assert_eq!(outliers, vec![2]);
        // Smoothed: one sample in line moves the average a quarter.
        monitor.observe(2, 1, 1_000_050, 150);
        assert_eq!(monitor.skew(&[2, 1], 1, 150).0, 18_750);
        // A restart (another boot id) starts afresh.
        monitor.observe(2, 2, 1_000_050, 150);
        assert_eq!(monitor.skew(&[2, 1], 1, 150).0, 0);
        // Only members count; old samples do not.
        monitor.observe(9, 1, 2_000_000, 150);
        assert_eq!(monitor.skew(&[2, 1], 1, 150).0, 0);
        assert_eq!(monitor.skew(&[9, 1], 1, 150 + 20_000).0, 0);
    }
}
