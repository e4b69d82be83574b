//! The rebalance plan: from the succession list, the replication factor and
//! every member's partition versions, what each partition's working master
//! is, which copies must be merged into the final master, which replicas
//! must be filled, and which extra copies are dropped at the end.
//!
//! A pure function of its inputs: every member computes the same plan.
//!
//! Records are merged copy into copy by conflict resolution (the newer
//! version of each record wins, deletes travel as tombstones), so a merge is
//! idempotent and commutative. The plan therefore errs on the side of
//! merging: any copy that may hold something the working master lacks is
//! sent to the final master. Only full copies of the working master's own
//! lineage are known to hold nothing more.

use crate::balance::PartitionOrders;
use crate::version::Version;
use bolide_types::PARTITION_COUNT;

/// Index of a node in a namespace's member list.
pub type Member = u8;

/// The plan for one partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionPlan {
    /// Members holding the partition, most preferred first: `order[0]` is
    /// the final master, `order[1..n_replicas]` the proles.
    pub order: Vec<Member>,
    /// The member that serves writes until the final master has its data.
    pub working_master: Member,
    /// No member had any data: every replica starts empty and complete.
    pub fresh: bool,
    /// Members other than the working master whose copies must be merged
    /// into the final master (the final master itself is never listed).
    pub duplicates: Vec<Member>,
    /// Proles the final master fills once it has everything.
    pub fills: Vec<Member>,
    /// Members outside the replicas that hold a copy; they drop it when the
    /// final master signals that every replica is complete.
    pub extra_holders: Vec<Member>,
    /// The final master's own copy may hold records the working master
    /// lacks (it is merged where it is, so it is not in `duplicates`).
    pub final_master_divergent: bool,
}

impl PartitionPlan {
    pub fn final_master(&self) -> Member {
        self.order[0]
    }

    /// Whether `member` is one of the first `n_replicas` in the order.
    pub fn replica_position(&self, member: Member, n_replicas: usize) -> Option<usize> {
        self.order
            .iter()
            .take(n_replicas)
            .position(|&candidate| candidate == member)
    }

    /// Members whose copies a working master must consult before it writes
    /// a record (duplicate resolution), until the merge is over: copies that
    /// may hold a newer version of the record than its own.
    pub fn resolve_against(&self, master: Member) -> Vec<Member> {
        let mut members: Vec<Member> = self
            .duplicates
            .iter()
            .copied()
            .filter(|&m| m != master)
            .collect();
        if self.final_master_divergent && self.final_master() != master {
            members.push(self.final_master());
        }
        members
    }

    /// [`Self::resolve_against`] as a members mask (no allocation: the
    /// routing is computed for every partition at each publish).
    pub fn resolve_against_mask(&self, master: Member) -> u64 {
        let mut mask = 0u64;
        for &member in &self.duplicates {
            if member != master {
                mask |= 1u64 << member;
            }
        }
        if self.final_master_divergent && self.final_master() != master {
            mask |= 1u64 << self.final_master();
        }
        mask
    }

    /// [`Self::final_master_sources`] as a members mask.
    pub fn final_master_sources_mask(&self) -> u64 {
        let final_master = self.final_master();
        let mut mask = 0u64;
        if self.working_master != final_master {
            mask |= 1u64 << self.working_master;
        }
        for &member in &self.duplicates {
            if member != final_master {
                mask |= 1u64 << member;
            }
        }
        mask
    }

    /// The members the final master must receive a copy from before it is
    /// complete: the working master (if another member) and the duplicates.
    pub fn final_master_sources(&self) -> Vec<Member> {
        let final_master = self.final_master();
        let mut sources = Vec::new();
        if self.working_master != final_master {
            sources.push(self.working_master);
        }
        sources.extend(
            self.duplicates
                .iter()
                .copied()
                .filter(|&member| member != final_master),
        );
        sources
    }
}

/// One namespace's plan at one cluster key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespacePlan {
    pub key: u64,
    pub replication_factor: usize,
    /// Effective replication factor: min(configured, members).
    pub n_replicas: usize,
    pub partitions: Vec<PartitionPlan>,
}

/// Computes a namespace's plan. `versions[m][pid]` is member `m`'s version
/// of partition `pid` as exchanged; `orders` covers exactly the members.
pub fn plan_namespace(
    key: u64,
    replication_factor: usize,
    orders: &PartitionOrders,
    versions: &[Vec<Version>],
) -> NamespacePlan {
    assert_eq!(orders.nodes(), versions.len());
    assert!(replication_factor >= 1);
    let n_replicas = replication_factor.min(versions.len());
    let partitions = (0..PARTITION_COUNT)
        .map(|pid| {
            let order = orders.order(pid as u16);
            let copies: Vec<Version> = order
                .iter()
                .map(|&m| versions[usize::from(m)][pid])
                .collect();
            plan_partition(order, &copies, n_replicas)
        })
        .collect();
    NamespacePlan {
        key,
        replication_factor,
        n_replicas,
        partitions,
    }
}

/// Plans one partition. `copies[i]` is the version held by `order[i]`.
pub fn plan_partition(order: &[Member], copies: &[Version], n_replicas: usize) -> PartitionPlan {
    assert_eq!(order.len(), copies.len());
    assert!(n_replicas >= 1 && n_replicas <= order.len());
    let Some(master_at) = choose_working_master(copies) else {
        return PartitionPlan {
            order: order.to_vec(),
            working_master: order[0],
            fresh: true,
            ..PartitionPlan::default()
        };
    };
    let master_copy = copies[master_at];
    let master_full = master_copy.is_full();
    // Copies that may hold records the working master lacks. The final
    // master's own copy is already where the merge happens; of identical
    // full copies only one needs to be sent.
    let mut divergent = false;
    let mut final_master_divergent = false;
    let mut duplicates: Vec<Member> = Vec::new();
    let mut kept: Vec<Version> = Vec::new();
    for (at, copy) in copies.iter().enumerate() {
        if at == master_at || copy.is_null() {
            continue;
        }
        if master_full && copy.same_full_lineage(&master_copy) {
            continue;
        }
        divergent = true;
        if at == 0 {
            final_master_divergent = true;
        }
        let identical_kept = kept.iter().any(|other| other.same_full_lineage(copy));
        kept.push(*copy);
        if at != 0 && !identical_kept {
            duplicates.push(order[at]);
        }
    }
    let merging = divergent || !master_full;
    let mut fills = Vec::new();
    for (at, copy) in copies.iter().enumerate().take(n_replicas).skip(1) {
        let complete = !merging && (at == master_at || copy.same_full_lineage(&master_copy));
        if !complete {
            fills.push(order[at]);
        }
    }
    let extra_holders = copies
        .iter()
        .enumerate()
        .skip(n_replicas)
        .filter(|(_, copy)| !copy.is_null())
        .map(|(at, _)| order[at])
        .collect();
    PartitionPlan {
        order: order.to_vec(),
        working_master: order[master_at],
        fresh: false,
        duplicates,
        fills,
        extra_holders,
        final_master_divergent,
    }
}

/// The working master among the copies (by position in the order): the
/// first full copy that was a master, moved to an earlier identical full
/// copy if there is one; else the best copy, earliest on ties. None when no
/// member has data.
fn choose_working_master(copies: &[Version]) -> Option<usize> {
    if let Some(master) = copies.iter().position(|c| c.master && c.is_full()) {
        let earliest = copies[..master]
            .iter()
            .position(|c| c.same_full_lineage(&copies[master]))
            .unwrap_or(master);
        return Some(earliest);
    }
    let best = copies.iter().map(Version::score).max()?;
    if best == 0 {
        return None;
    }
    copies.iter().position(|c| c.score() == best)
}

/// The version `member` holds once the plan at `key` takes effect (before
/// any migration ends). Members outside the replicas keep what they had:
/// they receive no writes from now on, so their copy belongs to the old
/// lineage.
pub fn version_after(
    plan: &PartitionPlan,
    n_replicas: usize,
    key: u64,
    member: Member,
    before: Version,
) -> Version {
    if plan.fresh {
        return match plan.replica_position(member, n_replicas) {
            Some(0) => Version::full(key).with_master(true),
            Some(_) => Version::full(key),
            None => Version::NULL,
        };
    }
    if member == plan.working_master {
        // A master that had only a partial copy stays partial until the
        // merge into the final master completes.
        return Version {
            subset: !before.is_full(),
            ..Version::full(key).with_master(true)
        };
    }
    match plan.replica_position(member, n_replicas) {
        Some(0) => Version::partial(key),
        Some(_) if plan.fills.contains(&member) => Version::partial(key),
        Some(_) => Version::full(key),
        None => before,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: u64 = 0x1111;
    const K2: u64 = 0x2222;

    fn order(n: u8) -> Vec<Member> {
        (0..n).collect()
    }

    fn mask(members: &[Member]) -> u64 {
        members.iter().fold(0, |mask, &m| mask | 1u64 << m)
    }

    #[test]
    fn masks_name_the_same_members_as_the_lists() {
        for (working_master, duplicates, divergent) in [
            (0, vec![], false),
            (2, vec![3, 5], false),
            (1, vec![0, 1, 4], true),
            (0, vec![2], true),
        ] {
            let plan = PartitionPlan {
                order: vec![0, 1, 2],
                working_master,
                duplicates,
                final_master_divergent: divergent,
                ..PartitionPlan::default()
            };
            assert_eq!(
                plan.final_master_sources_mask(),
                mask(&plan.final_master_sources())
            );
            for master in 0..6 {
                assert_eq!(
                    plan.resolve_against_mask(master),
                    mask(&plan.resolve_against(master))
                );
            }
        }
    }

    #[test]
    fn fresh_partition() {
        let plan = plan_partition(&order(3), &[Version::NULL; 3], 2);
        assert!(plan.fresh);
        assert_eq!(plan.working_master, 0);
        assert!(plan.duplicates.is_empty() && plan.fills.is_empty());
        assert_eq!(
            version_after(&plan, 2, K2, 0, Version::NULL),
            Version::full(K2).with_master(true)
        );
        assert_eq!(
            version_after(&plan, 2, K2, 1, Version::NULL),
            Version::full(K2)
        );
        assert_eq!(version_after(&plan, 2, K2, 2, Version::NULL), Version::NULL);
    }

    #[test]
    fn steady_state_moves_nothing() {
        let copies = [
            Version::full(K1).with_master(true),
            Version::full(K1),
            Version::NULL,
        ];
        let plan = plan_partition(&order(3), &copies, 2);
        assert_eq!(plan.working_master, 0);
        assert!(plan.duplicates.is_empty());
        assert!(plan.fills.is_empty());
        assert!(plan.extra_holders.is_empty());
        assert!(plan.final_master_sources().is_empty());
    }

    #[test]
    fn master_dies_prole_takes_over_and_new_prole_fills() {
        // Order after the master left: old prole, then a node with nothing.
        let copies = [Version::full(K1), Version::NULL];
        let plan = plan_partition(&order(2), &copies, 2);
        assert_eq!(plan.working_master, 0);
        assert_eq!(plan.fills, vec![1]);
        assert_eq!(
            version_after(&plan, 2, K2, 0, copies[0]),
            Version::full(K2).with_master(true)
        );
        assert_eq!(
            version_after(&plan, 2, K2, 1, copies[1]),
            Version::partial(K2)
        );
    }

    #[test]
    fn newcomer_final_master_immigrates_from_acting_master() {
        // A new node (nothing) sorts first; the old master second; the old
        // prole drops out of the replicas.
        let copies = [
            Version::NULL,
            Version::full(K1).with_master(true),
            Version::full(K1),
        ];
        let plan = plan_partition(&order(3), &copies, 2);
        assert_eq!(plan.working_master, 1);
        assert!(plan.duplicates.is_empty());
        assert_eq!(plan.final_master_sources(), vec![1]);
        assert!(plan.fills.is_empty());
        assert_eq!(plan.extra_holders, vec![2]);
        assert_eq!(
            version_after(&plan, 2, K2, 0, copies[0]),
            Version::partial(K2)
        );
        // The old prole keeps its old version: it gets no more writes.
        assert_eq!(version_after(&plan, 2, K2, 2, copies[2]), copies[2]);
    }

    #[test]
    fn earlier_identical_copy_takes_mastership() {
        let copies = [Version::full(K1), Version::full(K1).with_master(true)];
        let plan = plan_partition(&order(2), &copies, 2);
        assert_eq!(plan.working_master, 0);
        assert!(plan.fills.is_empty());
    }

    #[test]
    fn split_brain_copies_are_merged_and_every_prole_refilled() {
        let copies = [
            Version::full(K1).with_master(true),
            Version::full(K2).with_master(true),
        ];
        let plan = plan_partition(&order(2), &copies, 2);
        assert_eq!(plan.working_master, 0);
        assert_eq!(plan.duplicates, vec![1]);
        assert_eq!(plan.fills, vec![1]);
    }

    #[test]
    fn subset_copies_are_always_merged() {
        // A prole that was being filled keeps records the master may lack
        // (it took writes at another key); it is merged, then refilled.
        let copies = [Version::full(K1).with_master(true), Version::partial(K1)];
        let plan = plan_partition(&order(2), &copies, 2);
        assert_eq!(plan.duplicates, vec![1]);
        assert_eq!(plan.fills, vec![1]);
    }

    #[test]
    fn no_master_copy_best_copy_serves() {
        let copies = [Version::partial(K1), Version::full(K1), Version::NULL];
        let plan = plan_partition(&order(3), &copies, 2);
        assert_eq!(plan.working_master, 1);
        // The final master's own partial copy stays where it is.
        assert!(plan.duplicates.is_empty());
        assert_eq!(plan.final_master_sources(), vec![1]);
        assert_eq!(plan.fills, vec![1]);
    }

    #[test]
    fn identical_duplicates_send_once() {
        let copies = [
            Version::full(K1).with_master(true),
            Version::full(K2),
            Version::full(K2),
        ];
        let plan = plan_partition(&order(3), &copies, 3);
        assert_eq!(plan.duplicates, vec![1]);
    }
}
