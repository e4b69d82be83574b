//! (Strong consistency) The background half of re-replication: every
//! [`SWEEP_EVERY_MS`] a node looks at the records left unreplicated on it
//! (a write whose copies timed out, or one a restart may have cut off) and
//! copies up to [`SWEEP_BUDGET`] of them to their partitions' other
//! holders again, in partitions it is the working master of; where
//! another node is, it forgets them (the new master's copies are the
//! regime's, and this node's copy reaches them by migration). Those of a
//! partition nobody serves now are kept: this copy may be the one served
//! when it comes back. The first read or
//! write of such a record copies it first anyway (`Need::Rereplicate`).
//!
//! The server's fabric thread and the simulator run the same sweep: it
//! leaves the copies as [`Replication`]s, each driven by a `Work` started
//! with `Need::Rereplicate { then_run: false }`.

use super::{Nodes, RecordStore, Replication};
use crate::routing::{Gates, Routing};
use bolide_types::PARTITION_COUNT;
use std::sync::Arc;

/// How often the unreplicated records are looked for.
pub const SWEEP_EVERY_MS: u64 = 500;
/// Most records copied again per sweep.
pub const SWEEP_BUDGET: usize = 256;
/// At a restart, records last written up to this long before the saved
/// watermark are listed again too (a wall-clock step, a last-update time
/// ahead of the clock).
pub const WATERMARK_SLACK_MS: u64 = 1000;

/// One sweep over the strong-consistency namespaces `namespaces` (indices
/// in `routing`): the copies to send now. Nothing while the map is being
/// exchanged.
pub fn sweep<S: RecordStore>(
    store: &S,
    routing: &Routing,
    gates: &Arc<Gates>,
    namespaces: &[usize],
    budget: usize,
) -> Vec<Replication> {
    let mut copies = Vec::new();
    if !routing.settled() {
        return copies;
    }
    let mut budget = budget;
    for &index in namespaces {
        if gates.unreplicated_count(index) == 0 {
            continue;
        }
        let Some(routes) = routing.namespaces.get(index) else {
            continue;
        };
        for pid in 0..PARTITION_COUNT {
            if budget == 0 {
                return copies;
            }
            let digests = gates.unreplicated(index, pid);
            if digests.is_empty() {
                continue;
            }
            let route = routes.route(pid);
            if route.unavailable() {
                // Nobody serves it now; this copy may be the one served
                // when it comes back: still unreplicated.
                continue;
            }
            if !route.writes_here() {
                gates.forget_unreplicated(index, pid);
                continue;
            }
            for digest in digests.into_iter().take(budget) {
                let Some(mark) = gates.rereplication_mark(index, pid, &digest) else {
                    continue;
                };
                let Some(image) = store.fetch(index, &digest) else {
                    // Nothing held any more: nothing to copy (the mark,
                    // dropped, leaves it listed until the partition goes).
                    continue;
                };
                budget -= 1;
                copies.push(Replication {
                    namespace: index,
                    pid: pid as u16,
                    cluster_key: routing.cluster_key,
                    regime: routes.regime,
                    to: Nodes::of_members(routing, route.destinations()),
                    image,
                    commit_master: false,
                    guard: None,
                    mark: Some(mark),
                });
            }
        }
    }
    copies
}

/// The records a restart must list as unreplicated again: those saved in
/// the last list, and every record or tombstone last written at or after
/// `from_ms` (the saved watermark, less some slack), each with the stamp
/// it is held with.
pub fn restart_list(
    saved: &[[u8; bolide_types::DIGEST_BYTES]],
    from_ms: u64,
    held: impl Iterator<Item = ([u8; bolide_types::DIGEST_BYTES], crate::conflict::Stamp)>,
) -> Vec<([u8; bolide_types::DIGEST_BYTES], crate::conflict::Stamp)> {
    held.filter(|(digest, stamp)| stamp.last_update_ms >= from_ms || saved.contains(digest))
        .collect()
}
