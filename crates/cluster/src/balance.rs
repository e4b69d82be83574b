//! The partition map: for every partition, the order in which the cluster's
//! nodes hold it, computed exactly as Aerospike CE computes it.
//!
//! It is rendezvous hashing: a node's weight for a partition depends only on
//! the node id and the partition id, so adding or removing a node inserts or
//! removes it in each partition's order and leaves everyone else's relative
//! order alone. The low three bits of each weight are replaced with the
//! node's index in the succession list (CE's eight-node tie-break), which
//! makes every weight unique.

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
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = 0x0BB9_0200_11AC_4202;
    const B: NodeId = 0x0BB9_0300_11AC_4202;
    const C: NodeId = 0x0BB9_0400_11AC_4202;

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
