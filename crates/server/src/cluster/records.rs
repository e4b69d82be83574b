//! The record store as the cluster's data path sees it
//! ([`bolide_cluster::datapath::RecordStore`]): copies applied by conflict
//! resolution, a record's copy for duplicate resolution, partition
//! snapshots and drops, over `bolide-store`.

use bolide_cluster::conflict::{self, Stamp};
use bolide_cluster::datapath::{Applied, OwnedImage, RecordStore, StoreFailed};
use bolide_cluster::fabric::Image;
use bolide_cluster::routing::ConflictPolicy;
use bolide_store::{CommitWait, Copy, OwnedCopy, Store};
use bolide_types::{now_citrusleaf_seconds, Digest, DIGEST_BYTES};

/// The node's store, borrowed for one data-path step.
#[derive(Clone, Copy)]
pub struct Records<'a>(pub &'a Store);

impl RecordStore for Records<'_> {
    type Wait = CommitWait;

    fn apply(
        &self,
        namespace: usize,
        image: &Image<'_>,
        policy: ConflictPolicy,
    ) -> Result<Applied<CommitWait>, StoreFailed> {
        let ns = self.0.namespaces().get(namespace).ok_or(StoreFailed)?;
        let copy = copy_of(image);
        let mut writer = ns.write(&copy.digest);
        match writer.apply_copy(&copy, |held, incoming| wins(policy, held, incoming)) {
            Ok((applied, wait)) => Ok(Applied { applied, wait }),
            Err(error) => {
                tracing::warn!(target: "cluster", ?error, "a copy of a record refused by storage");
                Err(StoreFailed)
            }
        }
    }

    fn fetch(&self, namespace: usize, digest: &[u8; DIGEST_BYTES]) -> Option<OwnedImage> {
        let ns = self.0.namespaces().get(namespace)?;
        bolide_transaction::cluster::held_image(ns, &Digest(*digest))
    }

    fn snapshot(&self, namespace: usize, pid: u16, skipped: &mut u64) -> Vec<OwnedImage> {
        let Some(ns) = self.0.namespaces().get(namespace) else {
            return Vec::new();
        };
        ns.snapshot_partition(usize::from(pid), now_citrusleaf_seconds(), skipped)
            .into_iter()
            .map(image_of_owned)
            .collect()
    }

    fn drop_partition(&self, namespace: usize, pid: u16) -> u64 {
        let Some(ns) = self.0.namespaces().get(namespace) else {
            return 0;
        };
        let dropped = ns.drop_partition(usize::from(pid));
        tracing::debug!(target: "cluster", namespace = ns.name(), pid, dropped, "dropped extra copy");
        dropped
    }
}

/// Whether an incoming copy beats the held one under `policy`.
pub fn wins(policy: ConflictPolicy, held: Option<(u16, u64)>, incoming: (u16, u64)) -> bool {
    let stamp = |(generation, last_update_ms): (u16, u64)| Stamp {
        generation,
        last_update_ms,
    };
    conflict::incoming_wins(policy, held.map(stamp), stamp(incoming))
}

pub fn copy_of<'a>(image: &Image<'a>) -> Copy<'a> {
    Copy {
        digest: Digest(image.digest),
        generation: image.generation,
        last_update_ms: image.last_update_ms,
        void_time: image.void_time,
        set_name: image.set_name,
        record: image.record,
    }
}

/// The image of a stored copy, moved (no allocation).
pub fn image_of_owned(copy: OwnedCopy) -> OwnedImage {
    OwnedImage {
        digest: copy.digest.0,
        generation: copy.generation,
        last_update_ms: copy.last_update_ms,
        void_time: copy.void_time,
        set_name: copy.set_name,
        record: copy.record,
    }
}
