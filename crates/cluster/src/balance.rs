//! The partition map: for every partition, the order in which the cluster's
//! nodes hold it, computed exactly as Aerospike CE computes it.
//!
//! It is rendezvous hashing: a node's weight for a partition depends only on
//! the node id and the partition id, so adding or removing a node inserts or
//! removes it in each partition's order and leaves everyone else's relative
//! order alone. The low three bits of each weight are replaced with the
//! node's index in the succession list (CE's eight-node tie-break), which
//! makes every weight unique.
//!
//! **Racks.** A namespace whose nodes name more than one `rack-id` spreads
//! each partition's replicas over racks ([`PartitionOrders::rack_aware`]):
//! the master stays the hash order's first node, and each further replica
//! is the next node in hash order on a rack that holds no copy yet; once
//! every rack holds one, the rest follow the hash order. With RF ≤ racks
//! every copy is on its own rack, with more copies than racks every rack
//! has one, and with one rack the order is the plain one. A node's place
//! still depends only on its own weight and the racks before it, so a node
//! that leaves changes only the partitions it held a replica of.

use crate::NodeId;
use bolide_types::PARTITION_COUNT;

/// Nodes a CE-compatible balance distinguishes in the weight's low bits.
const TIE_BREAK_NODES: u64 = 8;

/// FNV-1a over `bytes`, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Jenkins one-at-a-time over `bytes`, on 64-bit words.
pub fn jenkins_one_at_a_time64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0;
    for &byte in bytes {
        hash = hash.wrapping_add(u64::from(byte));
        hash = hash.wrapping_add(hash << 10);
        hash ^= hash >> 6;
    }
    hash = hash.wrapping_add(hash << 3);
    hash ^= hash >> 11;
    hash.wrapping_add(hash << 15)
}

/// The hash of a partition id (its four little-endian bytes).
pub fn partition_hash(pid: u16) -> u64 {
    fnv1a64(&u32::from(pid).to_le_bytes())
}

/// The hash of a node id (its eight little-endian bytes).
pub fn node_hash(node: NodeId) -> u64 {
    fnv1a64(&node.to_le_bytes())
}

/// A node's weight for a partition, before the tie-break bits.
pub fn weight(node_hash: u64, partition_hash: u64) -> u64 {
    let mut block = [0u8; 16];
    block[..8].copy_from_slice(&node_hash.to_le_bytes());
    block[8..].copy_from_slice(&partition_hash.to_le_bytes());
    jenkins_one_at_a_time64(&block)
}

/// Every partition's node order over one succession list.
///
/// `succession` is sorted by node id, descending (the principal first); the
/// result holds, per partition, indices into it, most preferred first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOrders {
    nodes: usize,
    /// `PARTITION_COUNT * nodes` succession indices.
    orders: Vec<u8>,
}

impl PartitionOrders {
    /// Computes the orders. At most 255 nodes.
    pub fn compute(succession: &[NodeId]) -> PartitionOrders {
        assert!(succession.len() <= usize::from(u8::MAX));
        assert!(succession.windows(2).all(|pair| pair[0] > pair[1]));
        let nodes = succession.len();
        let node_hashes: Vec<u64> = succession.iter().map(|&node| node_hash(node)).collect();
        let mut orders = Vec::with_capacity(PARTITION_COUNT * nodes);
        let mut keys: Vec<(u64, u8)> = Vec::with_capacity(nodes);
        for pid in 0..PARTITION_COUNT as u16 {
            let partition = partition_hash(pid);
            keys.clear();
            for (index, &hash) in node_hashes.iter().enumerate() {
                let tie_break = index as u64 % TIE_BREAK_NODES;
                let key = (weight(hash, partition) & !(TIE_BREAK_NODES - 1)) + tie_break;
                keys.push((key, index as u8));
            }
            // Descending key; equal keys (possible only past 8 nodes) keep
            // the lower succession index first.
            keys.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            orders.extend(keys.iter().map(|&(_, index)| index));
        }
        PartitionOrders { nodes, orders }
    }

    /// Orders given row by row (`nodes` indices per partition, each row a
    /// permutation of `0..nodes`).
    pub fn from_rows(nodes: usize, orders: Vec<u8>) -> PartitionOrders {
        assert_eq!(orders.len(), PARTITION_COUNT * nodes);
        PartitionOrders { nodes, orders }
    }

    /// The succession indices holding `pid`, most preferred first.
    pub fn order(&self, pid: u16) -> &[u8] {
        let start = usize::from(pid) * self.nodes;
        &self.orders[start..start + self.nodes]
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// These orders with each partition's first `replicas` nodes spread
    /// over racks; `racks[i]` is the rack of succession index `i`. The
    /// master (column 0) and the relative hash order of everything not
    /// moved are kept. Unchanged when every node is on one rack.
    pub fn rack_aware(&self, racks: &[u32], replicas: usize) -> PartitionOrders {
        assert_eq!(racks.len(), self.nodes);
        let mut adjusted = self.clone();
        if distinct_racks(racks) < 2 {
            return adjusted;
        }
        let nodes = self.nodes;
        for row in adjusted.orders.chunks_exact_mut(nodes) {
            spread_over_racks(row, |index| racks[usize::from(index)], replicas, 1);
        }
        adjusted
    }
}

/// How many different racks `racks` names.
pub fn distinct_racks(racks: &[u32]) -> usize {
    let mut seen: Vec<u32> = racks.to_vec();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Spreads the first `replicas` entries of one partition's order over
/// racks, leaving `row[..start]` where it is: each column from `start` on
/// takes the first node further down the row whose rack holds no copy yet
/// (the nodes it passes over keep their order behind it). Once no such
/// node is left, the row stays in its order. `row` stays a permutation of
/// itself.
pub fn spread_over_racks(
    row: &mut [u8],
    rack_of: impl Fn(u8) -> u32,
    replicas: usize,
    start: usize,
) {
    let replicas = replicas.min(row.len());
    for column in start..replicas {
        let used = |rack: u32| row[..column].iter().any(|&held| rack_of(held) == rack);
        let Some(offset) = row[column..].iter().position(|&node| !used(rack_of(node))) else {
            // Every rack present holds a copy: the rest in hash order.
            return;
        };
        row[column..=column + offset].rotate_right(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = 0x0BB9_0200_11AC_4202;
    const B: NodeId = 0x0BB9_0300_11AC_4202;
    const C: NodeId = 0x0BB9_0400_11AC_4202;
    const D: NodeId = 0x0BB9_0500_11AC_4202;

    #[test]
    fn hash_vectors() {
        assert_eq!(partition_hash(0), 0x4d25_767f_9dce_13f5);
        assert_eq!(partition_hash(1), 0xad2a_ca77_4798_5764);
        assert_eq!(node_hash(A), 0x5b9d_0038_b91d_d6e8);
        assert_eq!(node_hash(B), 0x64ac_7138_be5c_77c7);
        assert_eq!(node_hash(C), 0x9368_9638_d9cd_48a6);
        let p0 = partition_hash(0);
        assert_eq!(weight(node_hash(C), p0), 0x6a9c_9a87_cb25_cbcc);
        assert_eq!(weight(node_hash(B), p0), 0xa1a6_86cb_215d_99f7);
        assert_eq!(weight(node_hash(A), p0), 0x663d_f414_1411_ed65);
    }

    fn named(orders: &PartitionOrders, succession: &[NodeId], pid: u16) -> Vec<NodeId> {
        orders
            .order(pid)
            .iter()
            .map(|&i| succession[usize::from(i)])
            .collect()
    }

    #[test]
    fn worked_example_three_nodes() {
        let succession = [C, B, A];
        let orders = PartitionOrders::compute(&succession);
        let expected = [
            [B, C, A],
            [B, A, C],
            [C, A, B],
            [C, A, B],
            [A, B, C],
            [B, A, C],
            [C, B, A],
            [A, C, B],
        ];
        for (pid, row) in expected.iter().enumerate() {
            assert_eq!(
                named(&orders, &succession, pid as u16),
                row.to_vec(),
                "pid {pid}"
            );
        }
        // Masters and proles with RF 2 over all partitions.
        let mut masters = [0usize; 3];
        let mut proles = [0usize; 3];
        for pid in 0..PARTITION_COUNT as u16 {
            let order = orders.order(pid);
            masters[usize::from(order[0])] += 1;
            proles[usize::from(order[1])] += 1;
        }
        assert_eq!(masters, [1375, 1377, 1344]);
        assert_eq!(proles, [1371, 1317, 1408]);
    }

    #[test]
    fn worked_example_two_nodes() {
        let succession = [B, A];
        let orders = PartitionOrders::compute(&succession);
        assert_eq!(named(&orders, &succession, 0), vec![B, A]);
        assert_eq!(named(&orders, &succession, 2), vec![A, B]);
        let b_masters = (0..PARTITION_COUNT as u16)
            .filter(|&pid| orders.order(pid)[0] == 0)
            .count();
        assert_eq!(b_masters, 2063);
        assert_eq!(PARTITION_COUNT - b_masters, 2033);
    }

    /// A few node ids, spread like real ones (MAC bytes and a port).
    fn nodes(count: usize, salt: u64) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = (0..count as u64)
            .map(|i| {
                let mac = fnv1a64(&(i * 7919 + salt).to_le_bytes()) & 0xFFFF_FFFF_FFFF;
                (0x0BB9 << 48) | mac
            })
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.dedup();
        ids
    }

    /// Each partition's first `n` nodes, as ids.
    fn replicas(
        orders: &PartitionOrders,
        succession: &[NodeId],
        pid: u16,
        n: usize,
    ) -> Vec<NodeId> {
        named(orders, succession, pid).into_iter().take(n).collect()
    }

    #[test]
    fn one_rack_is_plain_balance() {
        let succession = nodes(5, 1);
        let plain = PartitionOrders::compute(&succession);
        for rack in [0, 7] {
            assert_eq!(plain.rack_aware(&[rack; 5], 2), plain);
        }
    }

    #[test]
    fn two_racks_rf2_every_partition_on_both_racks_masters_unmoved() {
        // Two racks of two nodes (the walk-through's cluster).
        let succession = [D, C, B, A];
        let racks = [2, 2, 1, 1];
        let rack =
            |node: NodeId| racks[succession.iter().position(|&n| n == node).expect("member")];
        let plain = PartitionOrders::compute(&succession);
        let aware = plain.rack_aware(&racks, 2);
        let mut masters = [0usize; 4];
        for pid in 0..PARTITION_COUNT as u16 {
            let copies = replicas(&aware, &succession, pid, 2);
            assert_ne!(rack(copies[0]), rack(copies[1]), "pid {pid}: {copies:x?}");
            // Column 0 is the hash order's master.
            assert_eq!(aware.order(pid)[0], plain.order(pid)[0]);
            masters[usize::from(aware.order(pid)[0])] += 1;
            // Still a permutation of the members.
            let mut row = aware.order(pid).to_vec();
            row.sort_unstable();
            assert_eq!(row, vec![0, 1, 2, 3]);
        }
        assert!(masters.iter().all(|&m| m > 800), "{masters:?}");
    }

    #[test]
    fn copies_spread_over_racks_in_every_shape() {
        // (nodes per rack, RF): more racks than RF, as many, fewer,
        // uneven racks.
        let shapes: &[(&[usize], usize)] = &[
            (&[2, 2], 2),
            (&[2, 2, 2], 2),
            (&[2, 2, 2], 3),
            (&[3, 1], 2),
            (&[3, 1], 3),
            (&[1, 1, 1, 1], 3),
            (&[2, 3], 4),
            (&[4, 1, 2], 3),
        ];
        for (salt, &(per_rack, rf)) in shapes.iter().enumerate() {
            let count: usize = per_rack.iter().sum();
            let succession = nodes(count, salt as u64 + 10);
            assert_eq!(succession.len(), count);
            // Racks 1..=k handed out round the succession list.
            let mut racks = Vec::new();
            for (rack, &n) in per_rack.iter().enumerate() {
                racks.extend(std::iter::repeat_n(rack as u32 + 1, n));
            }
            let orders = PartitionOrders::compute(&succession).rack_aware(&racks, rf);
            let n_racks = per_rack.len();
            for pid in 0..PARTITION_COUNT as u16 {
                let row = orders.order(pid);
                let mut held: Vec<u32> = row[..rf].iter().map(|&i| racks[usize::from(i)]).collect();
                held.sort_unstable();
                held.dedup();
                assert_eq!(
                    held.len(),
                    rf.min(n_racks),
                    "{per_rack:?} rf {rf} pid {pid}"
                );
            }
        }
    }

    #[test]
    fn rack_aware_orders_are_deterministic() {
        let succession = nodes(6, 3);
        let racks = [1, 2, 3, 1, 2, 3];
        let first = PartitionOrders::compute(&succession).rack_aware(&racks, 3);
        let second = PartitionOrders::compute(&succession).rack_aware(&racks, 3);
        assert_eq!(first, second);
        // Pinned: a change of the rule moves data in every cluster at
        // its next rebalance, and nodes of two versions would disagree.
        let rows: Vec<Vec<u8>> = (0..4).map(|pid| first.order(pid).to_vec()).collect();
        assert_eq!(
            rows,
            [
                [3, 2, 4, 5, 0, 1],
                [3, 1, 2, 0, 4, 5],
                [3, 5, 1, 0, 4, 2],
                [1, 5, 3, 2, 0, 4]
            ]
        );
        let plain = PartitionOrders::compute(&succession);
        for pid in 0..4u16 {
            assert_eq!(rows[usize::from(pid)][0], plain.order(pid)[0]);
        }
    }

    #[test]
    fn a_node_leaving_moves_only_the_partitions_it_held() {
        for (salt, (count, per_rack, rf)) in [
            (6usize, 2usize, 2usize),
            (6, 3, 2),
            (9, 3, 3),
            (8, 4, 3),
            (7, 2, 3),
            (8, 2, 4),
        ]
        .into_iter()
        .enumerate()
        {
            let all = nodes(count, salt as u64 + 100);
            let rack_of = |node: NodeId| (node % per_rack as u64) as u32 + 1;
            for leaving in all.clone() {
                let rest: Vec<NodeId> = all.iter().copied().filter(|&n| n != leaving).collect();
                let racks_all: Vec<u32> = all.iter().map(|&n| rack_of(n)).collect();
                let racks_rest: Vec<u32> = rest.iter().map(|&n| rack_of(n)).collect();
                let before = PartitionOrders::compute(&all).rack_aware(&racks_all, rf);
                let after = PartitionOrders::compute(&rest).rack_aware(&racks_rest, rf);
                let mut moved = 0;
                let mut held = 0;
                for pid in 0..PARTITION_COUNT as u16 {
                    let old = replicas(&before, &all, pid, rf);
                    let new = replicas(&after, &rest, pid, rf);
                    if !old.contains(&leaving) {
                        assert_eq!(old, new, "pid {pid}: a partition it did not hold moved");
                        continue;
                    }
                    held += 1;
                    // Every other holder keeps its copy: one new copy.
                    for node in old.iter().filter(|&&n| n != leaving) {
                        assert!(new.contains(node), "pid {pid}: {node:x} lost its copy");
                    }
                    moved += new.iter().filter(|n| !old.contains(n)).count();
                }
                assert_eq!(moved, held);
            }
        }
    }

    #[test]
    fn spreading_keeps_the_fixed_columns() {
        // Columns before `start` stay even when they share a rack.
        let mut row = [0u8, 1, 2, 3];
        let racks = [1u32, 1, 1, 2];
        spread_over_racks(&mut row, |i| racks[usize::from(i)], 3, 2);
        assert_eq!(row, [0, 1, 3, 2]);
        let mut row = [0u8, 1, 2, 3];
        spread_over_racks(&mut row, |i| racks[usize::from(i)], 3, 1);
        assert_eq!(row, [0, 3, 1, 2]);
    }

    #[test]
    fn removing_a_node_keeps_the_others_order() {
        let three = [C, B, A];
        let two = [C, A];
        let with = PartitionOrders::compute(&three);
        let without = PartitionOrders::compute(&two);
        for pid in 0..PARTITION_COUNT as u16 {
            let mut expected = named(&with, &three, pid);
            expected.retain(|&node| node != B);
            assert_eq!(named(&without, &two, pid), expected);
        }
    }
}
