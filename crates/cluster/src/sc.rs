//! Strong consistency: the roster, regimes and the availability rules, as
//! plain functions the cluster machine applies at every rebalance.
//!
//! * The **roster** is the operator's list of nodes that own an SC
//!   namespace (`node[@rack]`, comma-separated, `null` when empty).
//!   `roster-set` stages it (the *pending* roster, shared cluster-wide as a
//!   metadata item); the next rebalance makes it the *active* roster.
//! * A partition's **roster replicas** are the first RF nodes of its hash
//!   order computed over the whole roster (present or not), spread over the
//!   roster's racks as AP spreads replicas (`balance::spread_over_racks`);
//!   the first is the **roster master**, moved to the roster's active rack
//!   (`M<rack>|`) when it names one that holds a copy.
//! * A sub-cluster S serves a partition when it holds all its roster
//!   replicas, or is a strict majority of the roster with at least one roster
//!   replica, or is exactly half the roster with the roster master. Two
//!   disjoint sub-clusters never both qualify.
//! * The **regime** of an SC namespace is non-zero from the first answer,
//!   goes up by 2 at every rebalance past the highest any member reports,
//!   and never goes down (it is saved across restarts). Zero means AP.
//! * The rules hold only when the sub-cluster also holds the partition's
//!   **data**: a copy of the lineage of the last rebalance at which the
//!   partition was available anywhere. Every node keeps, per partition, a
//!   [`Witness`] of the last such rebalance it took part in (its regime
//!   and cluster key, saved before the map is used); two sub-clusters that
//!   each satisfy a rule always share a node, so the highest witness among
//!   the present nodes names that rebalance, and a full, trusted copy with
//!   its key holds every write acknowledged since ([`judge`]). Without
//!   one the partition is unavailable, or **dead** once every roster node
//!   is present; `revive:` (the `r` flag on a node's copies) accepts what
//!   is left.

use crate::balance::PartitionOrders;
use crate::version::Version;
use crate::NodeId;
use std::fmt;

/// Largest rack id (Aerospike's `MAX_RACK_ID`).
pub const RACK_ID_MAX: u32 = 1_000_000;
/// Longest roster entry (`node@rack`) accepted.
pub const ROSTER_ENTRY_CHARS_MAX: usize = 25;

/// One roster member: a node and its rack (0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RosterEntry {
    pub node: NodeId,
    pub rack: u32,
}

/// A roster: `[M<rack>|]node[@rack],...`, or `null`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roster {
    /// The SC active rack (`M<rack>|` prefix), if any.
    pub active_rack: Option<u32>,
    /// Members, sorted by node id descending (the order balance uses).
    pub entries: Vec<RosterEntry>,
}

impl Roster {
    /// Parses a roster as `roster-set` takes it. `null` and the empty
    /// string are the empty roster. Entries are upper- or lower-case hex
    /// node ids without `0x`, each optionally `@rack`; duplicates and
    /// malformed entries are errors naming the entry.
    pub fn parse(text: &str) -> Result<Roster, String> {
        let text = text.trim();
        let mut roster = Roster::default();
        if text.is_empty() || text == "null" {
            return Ok(roster);
        }
        for (index, entry) in text.split(',').enumerate() {
            let mut entry = entry.trim();
            if index == 0 {
                if let Some((prefix, rest)) = entry.split_once('|') {
                    let rack = prefix
                        .strip_prefix('M')
                        .and_then(|rack| rack.parse::<u32>().ok())
                        .filter(|&rack| rack <= RACK_ID_MAX)
                        .ok_or_else(|| format!("bad active rack '{prefix}'"))?;
                    roster.active_rack = Some(rack);
                    entry = rest;
                }
            }
            if entry.is_empty() || entry.len() > ROSTER_ENTRY_CHARS_MAX {
                return Err(format!("bad roster entry '{entry}'"));
            }
            let (node, rack) = match entry.split_once('@') {
                Some((node, rack)) => {
                    let rack = rack
                        .parse::<u32>()
                        .ok()
                        .filter(|&rack| rack <= RACK_ID_MAX)
                        .ok_or_else(|| format!("bad rack id in roster entry '{entry}'"))?;
                    (node, rack)
                }
                None => (entry, 0),
            };
            let hex = node.len() <= 16 && node.bytes().all(|b| b.is_ascii_hexdigit());
            let node = u64::from_str_radix(node, 16)
                .ok()
                .filter(|&node| hex && node != 0)
                .ok_or_else(|| format!("bad node id in roster entry '{entry}'"))?;
            if roster.entries.iter().any(|held| held.node == node) {
                return Err(format!("node {node:X} listed twice"));
            }
            roster.entries.push(RosterEntry { node, rack });
        }
        if roster.entries.len() > crate::CLUSTER_SIZE_MAX {
            return Err(format!(
                "a roster holds at most {} nodes",
                crate::CLUSTER_SIZE_MAX
            ));
        }
        roster.entries.sort_unstable_by(|a, b| b.cmp(a));
        Ok(roster)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.entries.iter().any(|entry| entry.node == node)
    }

    /// Member node ids, descending.
    pub fn nodes(&self) -> Vec<NodeId> {
        self.entries.iter().map(|entry| entry.node).collect()
    }
}

impl fmt::Display for Roster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("null");
        }
        if let Some(rack) = self.active_rack {
            write!(f, "M{rack}|")?;
        }
        for (index, entry) in self.entries.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{:X}", entry.node)?;
            if entry.rack != 0 {
                write!(f, "@{}", entry.rack)?;
            }
        }
        Ok(())
    }
}

/// Where a partition stands in one sub-cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// Some roster nodes are missing and no rule holds.
    Unavailable,
    /// Every roster node is present and still no rule holds (lost data:
    /// needs `revive`).
    Dead,
}

/// The roster's partition orders.
#[derive(Clone, Debug)]
pub struct RosterOrders {
    nodes: Vec<NodeId>,
    /// The roster rack of each of `nodes`.
    racks: Vec<u32>,
    orders: PartitionOrders,
}

impl RosterOrders {
    /// The roster's hash order, its first `replication_factor` nodes
    /// spread over the roster's racks, the master on the active rack.
    pub fn new(roster: &Roster, replication_factor: usize) -> RosterOrders {
        let nodes = roster.nodes();
        let racks: Vec<u32> = roster.entries.iter().map(|entry| entry.rack).collect();
        let replicas = replication_factor.max(1).min(nodes.len());
        let mut orders = PartitionOrders::compute(&nodes).rack_aware(&racks, replicas);
        if let Some(active) = roster.active_rack {
            orders = on_active_rack(&orders, &racks, active, replicas);
        }
        RosterOrders {
            nodes,
            racks,
            orders,
        }
    }

    /// The roster rack of `node` (None: not on the roster).
    pub fn rack_of(&self, node: NodeId) -> Option<u32> {
        self.nodes
            .iter()
            .position(|&held| held == node)
            .map(|index| self.racks[index])
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The whole roster in `pid`'s order, most preferred first.
    pub fn order(&self, pid: u16) -> impl Iterator<Item = NodeId> + '_ {
        self.orders
            .order(pid)
            .iter()
            .map(|&index| self.nodes[usize::from(index)])
    }

    /// The partition's roster replicas (the roster master first).
    pub fn replicas(&self, pid: u16, replication_factor: usize) -> Vec<NodeId> {
        self.order(pid).take(replication_factor.max(1)).collect()
    }

    /// Whether the sub-cluster `present` may serve `pid` (§ the three
    /// rules; the full-data condition is the caller's).
    pub fn availability(
        &self,
        pid: u16,
        replication_factor: usize,
        present: &dyn Fn(NodeId) -> bool,
    ) -> Availability {
        if self.nodes.is_empty() {
            return Availability::Unavailable;
        }
        let replicas = self.replicas(pid, replication_factor);
        let roster_present = self.nodes.iter().filter(|&&node| present(node)).count();
        if available(&replicas, self.nodes.len(), roster_present, present) {
            Availability::Available
        } else if roster_present == self.nodes.len() {
            Availability::Dead
        } else {
            Availability::Unavailable
        }
    }
}

/// Puts each partition's master on the active rack: the first of its
/// replicas on that rack moves to the front (the others keep their
/// order). A partition without a replica there (more racks than the
/// replication factor, or no roster node on the rack) keeps its order.
fn on_active_rack(
    orders: &PartitionOrders,
    racks: &[u32],
    active: u32,
    replicas: usize,
) -> PartitionOrders {
    let nodes = orders.nodes();
    let mut rows = Vec::with_capacity(bolide_types::PARTITION_COUNT * nodes);
    for pid in 0..bolide_types::PARTITION_COUNT as u16 {
        let mut row = orders.order(pid).to_vec();
        if let Some(at) = row[..replicas]
            .iter()
            .position(|&index| racks[usize::from(index)] == active)
        {
            row[..=at].rotate_right(1);
        }
        rows.extend_from_slice(&row);
    }
    PartitionOrders::from_rows(nodes, rows)
}

/// The availability rules for one partition: `replicas` its roster
/// replicas (roster master first), `roster_size` N, `roster_present` the
/// roster members in the sub-cluster.
pub fn available(
    replicas: &[NodeId],
    roster_size: usize,
    roster_present: usize,
    present: &dyn Fn(NodeId) -> bool,
) -> bool {
    let held = replicas.iter().filter(|&&node| present(node)).count();
    if !replicas.is_empty() && held == replicas.len() {
        return true;
    }
    if 2 * roster_present > roster_size && held >= 1 {
        return true;
    }
    2 * roster_present == roster_size && replicas.first().is_some_and(|&master| present(master))
}

/// The regime after a rebalance, from every member's regime. `None`: the
/// members disagree on the mode (some AP, some SC), and the exchange must
/// be abandoned.
pub fn next_regime(regimes: &[u32]) -> Option<u32> {
    let sc = regimes.iter().filter(|&&regime| regime != 0).count();
    if sc == 0 {
        return Some(0);
    }
    if sc != regimes.len() {
        return None;
    }
    regimes
        .iter()
        .max()
        .map(|&max| max.saturating_add(2).min(u32::MAX - 1))
}

/// The first regime of an SC namespace that has none saved.
pub const FIRST_REGIME: u32 = 1;

/// (SC) The last rebalance at which a node saw a partition available:
/// that rebalance's regime and cluster key (the key every copy complete
/// then carries in its version). Zero: never seen available. Ordered by
/// regime: a later rebalance that served the partition has a higher one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Witness {
    pub regime: u32,
    pub key: u64,
}

impl Witness {
    pub const NONE: Witness = Witness { regime: 0, key: 0 };
}

/// Decides one partition of an SC namespace at a rebalance, from the
/// three rules' verdict over the present nodes (`rule`), whether every
/// roster node is present, and each member's copy and witness. When the
/// partition is available, `copies` come back as the plan must see them:
/// a copy that may miss an acknowledged write (another lineage, a subset,
/// untrusted) is marked a subset, so it is merged but never served from.
///
/// * No member has a witness (the roster was never in force here): the
///   copies are taken as they are, untrusted ones as subsets.
/// * A member holds a *current* copy (full, trusted, with the key of the
///   highest witness): available.
/// * Else, if a member revived the partition: available with whatever
///   the copies hold (all merged; none, and the partition starts empty).
/// * Else the data is lost or elsewhere: dead when every roster node is
///   present, unavailable otherwise.
pub fn judge(
    rule: Availability,
    all_roster_present: bool,
    copies: &mut [Version],
    witnesses: &[Witness],
) -> Availability {
    if rule != Availability::Available {
        return rule;
    }
    let latest = witnesses.iter().copied().max().unwrap_or(Witness::NONE);
    let current = |copy: &Version| !copy.is_null() && copy.key == latest.key && copy.is_full();
    if latest.regime == 0 {
        for copy in copies.iter_mut().filter(|copy| copy.evade) {
            copy.subset = true;
        }
    } else if copies.iter().any(current) {
        for copy in copies.iter_mut() {
            if !copy.is_null() && !current(copy) {
                copy.subset = true;
                copy.master = false;
            }
        }
    } else if copies.iter().any(|copy| copy.revived) {
        for copy in copies.iter_mut().filter(|copy| !copy.is_null()) {
            copy.subset = true;
        }
    } else if all_roster_present {
        return Availability::Dead;
    } else {
        return Availability::Unavailable;
    }
    // Served from now on: a revive has done its work.
    for copy in copies.iter_mut() {
        copy.revived = false;
    }
    Availability::Available
}

/// The versions a node reports after a restart, from the versions it
/// saved (`saved`, NULL where none), whether its storage kept every write
/// it acknowledged (`trusted`: a clean shutdown, or commit-to-device),
/// and whether it holds records of each partition.
///
/// A saved copy keeps its lineage; untrusted, it is flagged `e` and never
/// counts as the partition's data. Records with no saved version (the
/// state was lost, or they arrived after the last save) are a lineage of
/// their own, `restart_key`, as a subset: merged, never served from.
pub fn restart_versions(
    saved: &[Version],
    trusted: bool,
    holds: impl Fn(usize) -> bool,
    restart_key: u64,
) -> Vec<Version> {
    assert!(restart_key != 0, "a restart key is a cluster key");
    (0..bolide_types::PARTITION_COUNT)
        .map(|pid| {
            let saved = saved.get(pid).copied().unwrap_or(Version::NULL);
            if saved.is_null() {
                return if holds(pid) {
                    Version::partial(restart_key)
                } else {
                    Version::NULL
                };
            }
            Version {
                evade: saved.evade || !trusted,
                ..saved
            }
        })
        .collect()
}

/// `auto-revive`: this node's untrusted (`e`) copies are revived (`r`),
/// as `revive:` would at once (Aerospike 7.1's `auto-revive`, which
/// revives only e-flagged partitions, at start). A revived copy matters
/// only where no member holds a current copy: the partition is then
/// served with what the copies hold instead of dead. Returns how many.
pub fn auto_revive(versions: &mut [Version]) -> usize {
    let mut revived = 0;
    for version in versions.iter_mut() {
        if version.evade && !version.is_null() {
            version.revived = true;
            revived += 1;
        }
    }
    revived
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roster_text_round_trips() {
        let roster = Roster::parse("BB9020016AE4202,bb9040016ae4202@2").expect("valid");
        assert_eq!(roster.to_string(), "BB9040016AE4202@2,BB9020016AE4202");
        assert_eq!(Roster::parse("null").expect("valid").to_string(), "null");
        let roster = Roster::parse("M1|A1@1,B2@0").expect("valid");
        assert_eq!(roster.active_rack, Some(1));
        assert_eq!(roster.to_string(), "M1|B2,A1@1");
        for bad in [
            "A1,A1",
            "xyz",
            "A1@x",
            "A1@1000001",
            "0",
            ",",
            "M|A1",
            "A1@",
        ] {
            assert!(Roster::parse(bad).is_err(), "{bad} accepted");
        }
    }

    fn roster(nodes: &[NodeId]) -> Roster {
        let text: Vec<String> = nodes.iter().map(|n| format!("{n:X}")).collect();
        Roster::parse(&text.join(",")).expect("valid")
    }

    #[test]
    fn the_three_rules() {
        // Roster {A..E}, RF 2.
        const A: NodeId = 0xA;
        const B: NodeId = 0xB;
        const C: NodeId = 0xC;
        const D: NodeId = 0xD;
        const E: NodeId = 0xE;
        let (a, b, c, d, e) = (A, B, C, D, E);
        fn in_set(set: &'static [NodeId]) -> impl Fn(NodeId) -> bool {
            move |n| set.contains(&n)
        }
        // Split {A,B,C} | {D,E}: (B,D) only on the majority; (D,E) only on
        // the minority (it holds all roster replicas).
        assert!(available(&[b, d], 5, 3, &in_set(&[A, B, C])));
        assert!(!available(&[b, d], 5, 2, &in_set(&[D, E])));
        assert!(available(&[d, e], 5, 2, &in_set(&[D, E])));
        assert!(!available(&[d, e], 5, 3, &in_set(&[A, B, C])));
        // Four split 2|2: only the roster master's side.
        assert!(available(&[a, c], 4, 2, &in_set(&[A, B])));
        assert!(!available(&[a, c], 4, 2, &in_set(&[C, D])));
    }

    #[test]
    fn no_partition_is_available_on_both_sides_of_any_split() {
        let nodes: Vec<NodeId> = (1..=5).map(|n| 0x1000 + n).collect();
        let plain = roster(&nodes);
        // The same roster in racks 1, 2, 1, 2, 3, and with active rack 1.
        let racked = Roster::parse("1001@1,1002@2,1003@1,1004@2,1005@3").expect("valid");
        let active = Roster::parse("M1|1001@1,1002@2,1003@1,1004@2,1005@3").expect("valid");
        for roster in [&plain, &racked, &active] {
            for rf in 1..=3 {
                let orders = RosterOrders::new(roster, rf);
                for mask in 0u32..32 {
                    let side = |n: NodeId| {
                        let i = nodes.iter().position(|&m| m == n).expect("member");
                        mask & (1 << i) != 0
                    };
                    let other = |n: NodeId| !side(n);
                    for pid in 0..bolide_types::PARTITION_COUNT as u16 {
                        let here = orders.availability(pid, rf, &side) == Availability::Available;
                        let there = orders.availability(pid, rf, &other) == Availability::Available;
                        assert!(!(here && there), "{roster} rf {rf} mask {mask:b} pid {pid}");
                    }
                }
                // Everyone present: everything available.
                assert!((0..4096u16)
                    .all(|pid| orders.availability(pid, rf, &|_| true) == Availability::Available));
            }
        }
    }

    #[test]
    fn rack_aware_roster_replicas_sit_on_distinct_racks() {
        // Two racks of two, RF 2 (docs/cluster.md's walk-through).
        let roster = Roster::parse("A1@1,A2@1,A3@2,A4@2").expect("valid");
        let orders = RosterOrders::new(&roster, 2);
        let plain = RosterOrders::new(&Roster::parse("A1,A2,A3,A4").expect("valid"), 2);
        let mut masters_on = [0usize; 3];
        for pid in 0..bolide_types::PARTITION_COUNT as u16 {
            let replicas = orders.replicas(pid, 2);
            let racks: Vec<u32> = replicas
                .iter()
                .map(|&node| orders.rack_of(node).expect("on the roster"))
                .collect();
            assert_ne!(racks[0], racks[1], "pid {pid}: {replicas:x?}");
            // Without an active rack the roster master is the hash order's.
            assert_eq!(replicas[0], plain.replicas(pid, 2)[0]);
            masters_on[racks[0] as usize] += 1;
        }
        assert!(
            masters_on[1] > 1800 && masters_on[2] > 1800,
            "{masters_on:?}"
        );
        assert_eq!(orders.rack_of(0xB1), None);
    }

    #[test]
    fn an_active_rack_masters_everything_and_survives_the_other_racks_loss() {
        let roster = Roster::parse("M1|A1@1,A2@1,A3@2,A4@2").expect("valid");
        let orders = RosterOrders::new(&roster, 2);
        let rack_one = |node: NodeId| node == 0xA1 || node == 0xA2;
        let rack_two = |node: NodeId| node == 0xA3 || node == 0xA4;
        for pid in 0..bolide_types::PARTITION_COUNT as u16 {
            let replicas = orders.replicas(pid, 2);
            assert_eq!(orders.rack_of(replicas[0]), Some(1), "pid {pid}");
            assert_eq!(orders.rack_of(replicas[1]), Some(2), "pid {pid}");
            // Rack 2 lost: half the roster with the roster master serves.
            assert_eq!(
                orders.availability(pid, 2, &rack_one),
                Availability::Available
            );
            // Rack 1 (the active rack) lost: nothing may be served.
            assert_eq!(
                orders.availability(pid, 2, &rack_two),
                Availability::Unavailable
            );
        }
        // Without the active rack, losing either rack loses about half.
        let even = RosterOrders::new(&Roster::parse("A1@1,A2@1,A3@2,A4@2").expect("valid"), 2);
        let served = (0..4096u16)
            .filter(|&pid| even.availability(pid, 2, &rack_one) == Availability::Available)
            .count();
        assert!((1500..2600).contains(&served), "{served}");
        // An active rack naming no roster rack changes nothing.
        let elsewhere =
            RosterOrders::new(&Roster::parse("M7|A1@1,A2@1,A3@2,A4@2").expect("valid"), 2);
        for pid in 0..4096u16 {
            assert_eq!(elsewhere.replicas(pid, 2), even.replicas(pid, 2));
        }
    }

    #[test]
    fn roster_replicas_follow_the_whole_roster() {
        let nodes = [0xA, 0xB, 0xC];
        let orders = RosterOrders::new(&roster(&nodes), 2);
        let full = crate::balance::PartitionOrders::compute(&[0xC, 0xB, 0xA]);
        for pid in 0..64u16 {
            let expect: Vec<NodeId> = full
                .order(pid)
                .iter()
                .take(2)
                .map(|&i| [0xC, 0xB, 0xA][usize::from(i)])
                .collect();
            assert_eq!(orders.replicas(pid, 2), expect);
        }
    }

    const K1: u64 = 0x111;
    const K2: u64 = 0x222;

    fn witness(regime: u32, key: u64) -> Witness {
        Witness { regime, key }
    }

    #[test]
    fn a_current_copy_is_the_partitions_data() {
        // A (old lineage K1, trusted), B (current K2), C nothing.
        let mut copies = [
            Version::full(K1).with_master(true),
            Version::full(K2),
            Version::NULL,
        ];
        let witnesses = [witness(5, K1), witness(7, K2), witness(7, K2)];
        let verdict = judge(Availability::Available, true, &mut copies, &witnesses);
        assert_eq!(verdict, Availability::Available);
        // The old copy is merged, never served: a subset, not a master.
        assert!(copies[0].subset && !copies[0].master);
        assert!(copies[1].is_full());
        assert!(copies[2].is_null());
    }

    #[test]
    fn untrusted_or_old_copies_alone_are_dead_or_unavailable() {
        let untrusted = Version {
            evade: true,
            ..Version::full(K2)
        };
        let witnesses = [witness(7, K2), witness(7, K2)];
        // Every roster node present, every copy lost: dead.
        let mut copies = [untrusted, Version::NULL];
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Dead
        );
        // The same with a roster node missing: unavailable (it may hold it).
        let mut copies = [untrusted, Version::NULL];
        assert_eq!(
            judge(Availability::Available, false, &mut copies, &witnesses),
            Availability::Unavailable
        );
        // A trusted copy of an older lineage is behind: not the data.
        let mut copies = [Version::full(K1).with_master(true), Version::NULL];
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Dead
        );
        // Being filled when it stopped: a subset of the current lineage.
        let mut copies = [Version::partial(K2), Version::NULL];
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Dead
        );
        // The rules come first.
        let mut copies = [Version::full(K2), Version::NULL];
        assert_eq!(
            judge(Availability::Unavailable, false, &mut copies, &witnesses),
            Availability::Unavailable
        );
    }

    #[test]
    fn revive_accepts_what_is_left() {
        let witnesses = [witness(7, K2), witness(7, K2)];
        let revived = Version {
            evade: true,
            revived: true,
            ..Version::full(K2)
        };
        let mut copies = [revived, Version::full(K1)];
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Available
        );
        assert!(copies.iter().all(|copy| copy.subset), "{copies:?}");
        assert!(copies.iter().all(|copy| !copy.revived), "{copies:?}");
        // A revive on a node without a copy revives it empty.
        let mut copies = [
            Version {
                revived: true,
                ..Version::NULL
            },
            Version::NULL,
        ];
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Available
        );
    }

    #[test]
    fn without_witnesses_copies_are_taken_as_they_are() {
        let mut copies = [
            Version {
                evade: true,
                ..Version::full(K1)
            },
            Version::NULL,
        ];
        let verdict = judge(
            Availability::Available,
            true,
            &mut copies,
            &[Witness::NONE; 2],
        );
        assert_eq!(verdict, Availability::Available);
        assert!(copies[0].subset);
    }

    #[test]
    fn restarts_keep_lineage_and_flag_untrusted_copies() {
        let mut saved = vec![Version::NULL; bolide_types::PARTITION_COUNT];
        saved[1] = Version::full(K2).with_master(true);
        saved[2] = Version::full(K2);
        let holds = |pid: usize| pid == 1 || pid == 3;
        let trusted = restart_versions(&saved, true, holds, 0x99);
        assert_eq!(trusted[0], Version::NULL);
        assert_eq!(trusted[1], saved[1]);
        // Saved with no record left: an empty partition, still its lineage.
        assert_eq!(trusted[2], saved[2]);
        // Records with no saved version: a lineage of their own, a subset.
        assert_eq!(trusted[3], Version::partial(0x99));
        let crashed = restart_versions(&saved, false, holds, 0x99);
        assert!(crashed[1].evade && crashed[2].evade);
        assert_eq!(crashed[1].key, K2);
        assert_eq!(crashed[0], Version::NULL);
    }

    #[test]
    fn auto_revive_revives_only_untrusted_copies() {
        let witnesses = [witness(7, K2), witness(7, K2)];
        let untrusted = Version {
            evade: true,
            ..Version::full(K2)
        };
        let mut versions = [untrusted, Version::full(K2), Version::NULL, untrusted];
        assert_eq!(auto_revive(&mut versions), 2);
        assert!(versions[0].revived && versions[3].revived);
        assert!(!versions[1].revived && versions[2].is_null());
        // Every copy untrusted: dead without auto-revive, served with it.
        let mut copies = [untrusted, untrusted];
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Dead
        );
        let mut copies = [untrusted, untrusted];
        auto_revive(&mut copies);
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Available
        );
        // A current copy elsewhere: it is the data; the revived one is
        // merged, never served from.
        let mut copies = [untrusted, Version::full(K2)];
        auto_revive(&mut copies);
        assert_eq!(
            judge(Availability::Available, true, &mut copies, &witnesses),
            Availability::Available
        );
        assert!(copies[0].subset && !copies[1].subset, "{copies:?}");
        assert!(copies.iter().all(|copy| !copy.revived), "{copies:?}");
    }

    #[test]
    fn regimes_only_go_up_and_never_mix() {
        assert_eq!(next_regime(&[0, 0]), Some(0));
        assert_eq!(next_regime(&[1, 5, 3]), Some(7));
        assert_eq!(next_regime(&[1, 0]), None);
        assert_eq!(next_regime(&[u32::MAX - 1]), Some(u32::MAX - 1));
    }
}
