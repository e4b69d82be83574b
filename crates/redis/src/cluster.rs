//! Redis Cluster over a Bolide cluster: key slots (CRC16 with hash tags),
//! how slots sit on partitions, and the `CLUSTER` replies built from the
//! partition map the server hands over ([`ClusterMap`]).
//!
//! Slot → partition: `partition = slot >> 2`, so slots `4p … 4p+3` live in
//! partition `p`. A Redis key's record is placed by its slot: its digest is
//! the one an Aerospike client computes for the key in its set, with the 12
//! partition bits replaced by `slot >> 2` (see [`place`]). Keys with the
//! same hash tag therefore share a partition, and the `CLUSTER SLOTS` map is
//! exactly where the records are.

use crate::resp::Out;
use bolide_types::{Digest, PARTITION_COUNT};

/// Slots in Redis Cluster.
pub const SLOTS: usize = 16_384;
/// Slots per partition.
pub const SLOTS_PER_PARTITION: usize = SLOTS / PARTITION_COUNT;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster hashes.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: only the hash tag (the bytes between the first `{`
/// and the next `}`, when there is at least one) counts.
pub fn key_slot(key: &[u8]) -> usize {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    usize::from(crc16(hashed)) & (SLOTS - 1)
}

/// The partition a slot lives in.
pub fn slot_partition(slot: usize) -> usize {
    slot / SLOTS_PER_PARTITION
}

/// Places a record digest in partition `slot >> 2`: the low 12 bits of the
/// little-endian u32 at the digest's start are the partition id.
pub fn place(digest: &mut Digest, slot: usize) {
    let pid = slot_partition(slot) as u32;
    digest.0[0] = (pid & 0xFF) as u8;
    digest.0[1] = (digest.0[1] & 0xF0) | ((pid >> 8) & 0x0F) as u8;
}

/// One node as Redis Cluster clients see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    /// 40 hex characters, from the Bolide node id (stable across restarts).
    pub id: String,
    /// Where clients reach its RESP port.
    pub host: String,
    pub port: u16,
    /// The "cluster bus" port reported (Bolide's fabric port).
    pub cport: u16,
}

/// No node serves the partition.
pub const NOBODY: u8 = u8::MAX;

/// The partition map as the Redis port serves it: who masters each
/// partition of the Redis namespace and who holds replicas, and what this
/// node serves.
#[derive(Clone, Debug)]
pub struct ClusterMap {
    /// Index of this node in `nodes`.
    pub me: u8,
    pub nodes: Vec<ClusterNode>,
    /// Per partition: the working master's index in `nodes` (NOBODY: not
    /// served, or the master has no RESP port).
    pub masters: Vec<u8>,
    /// Per partition: replica indices in `nodes`.
    pub replicas: Vec<Vec<u8>>,
    /// Per partition: this node takes writes (it is the working master).
    pub writes_here: Vec<bool>,
    /// Per partition: this node holds complete data (reads after READONLY).
    pub reads_here: Vec<bool>,
    /// The cluster's configuration epoch (Bolide's partition generation).
    pub epoch: u64,
}

impl ClusterMap {
    fn node(&self, index: u8) -> Option<&ClusterNode> {
        self.nodes.get(usize::from(index))
    }

    /// Where a client must send a command on `slot`: None when this node
    /// serves it (`write`: it changes the key; `readonly`: the connection
    /// sent READONLY), else the redirection error.
    pub fn redirect(&self, slot: usize, write: bool, readonly: bool) -> Option<String> {
        let pid = slot_partition(slot);
        if self.writes_here.get(pid).copied().unwrap_or(false) {
            return None;
        }
        if !write && readonly && self.reads_here.get(pid).copied().unwrap_or(false) {
            return None;
        }
        match self.masters.get(pid).and_then(|&master| self.node(master)) {
            Some(node) => Some(format!("MOVED {slot} {}", endpoint(&node.host, node.port))),
            None => Some("CLUSTERDOWN Hash slot not served".to_owned()),
        }
    }

    /// Runs of consecutive partitions with the same master and replicas:
    /// (first partition, last partition).
    fn runs(&self) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for pid in 0..self.masters.len() {
            if self.masters[pid] == NOBODY {
                continue;
            }
            match runs.last_mut() {
                Some((first, last))
                    if *last + 1 == pid
                        && self.masters[*first] == self.masters[pid]
                        && self.replicas[*first] == self.replicas[pid] =>
                {
                    *last = pid;
                }
                _ => runs.push((pid, pid)),
            }
        }
        runs
    }

    /// Runs of consecutive partitions mastered by `master`.
    fn ranges_of(&self, master: u8) -> Vec<(usize, usize)> {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for (pid, &owner) in self.masters.iter().enumerate() {
            if owner != master {
                continue;
            }
            match ranges.last_mut() {
                Some((_, last)) if *last + 1 == pid => *last = pid,
                _ => ranges.push((pid, pid)),
            }
        }
        ranges
    }

    fn served_slots(&self) -> usize {
        self.masters.iter().filter(|&&m| m != NOBODY).count() * SLOTS_PER_PARTITION
    }

    /// `CLUSTER SLOTS`.
    pub fn slots(&self, out: &mut Out) {
        let runs = self.runs();
        out.array(runs.len());
        for (first, last) in runs {
            let replicas = &self.replicas[first];
            let holders: Vec<&ClusterNode> = std::iter::once(self.masters[first])
                .chain(replicas.iter().copied())
                .filter_map(|index| self.node(index))
                .collect();
            out.array(2 + holders.len());
            out.int((first * SLOTS_PER_PARTITION) as i64);
            out.int((last * SLOTS_PER_PARTITION + SLOTS_PER_PARTITION - 1) as i64);
            for node in holders {
                out.array(4);
                out.bulk(node.host.as_bytes());
                out.int(i64::from(node.port));
                out.bulk(node.id.as_bytes());
                out.map(0);
            }
        }
    }

    /// `CLUSTER SHARDS`: one shard per node that masters slots, its
    /// replicas being every node holding a copy of one of them.
    pub fn shards(&self, out: &mut Out) {
        let masters: Vec<u8> = (0..self.nodes.len() as u8)
            .filter(|&index| self.masters.contains(&index))
            .collect();
        out.array(masters.len());
        for master in masters {
            let ranges = self.ranges_of(master);
            let mut replicas: Vec<u8> = Vec::new();
            for (pid, &owner) in self.masters.iter().enumerate() {
                if owner == master {
                    for &replica in &self.replicas[pid] {
                        if !replicas.contains(&replica) {
                            replicas.push(replica);
                        }
                    }
                }
            }
            replicas.sort_unstable();
            out.map(2);
            out.bulk(b"slots");
            out.array(ranges.len() * 2);
            for (first, last) in &ranges {
                out.int((first * SLOTS_PER_PARTITION) as i64);
                out.int((last * SLOTS_PER_PARTITION + SLOTS_PER_PARTITION - 1) as i64);
            }
            out.bulk(b"nodes");
            let members: Vec<(u8, &str)> = std::iter::once((master, "master"))
                .chain(replicas.iter().map(|&r| (r, "replica")))
                .collect();
            out.array(members.len());
            for (index, role) in members {
                let Some(node) = self.node(index) else {
                    out.null();
                    continue;
                };
                out.map(7);
                out.bulk(b"id");
                out.bulk(node.id.as_bytes());
                out.bulk(b"port");
                out.int(i64::from(node.port));
                out.bulk(b"ip");
                out.bulk(node.host.as_bytes());
                out.bulk(b"endpoint");
                out.bulk(node.host.as_bytes());
                out.bulk(b"role");
                out.bulk(role.as_bytes());
                out.bulk(b"replication-offset");
                out.int(0);
                out.bulk(b"health");
                out.bulk(b"online");
            }
        }
    }

    /// `CLUSTER NODES`: every node as a master of the slots it masters (a
    /// Bolide node masters some partitions and holds replicas of others,
    /// which Redis's one-role-per-node text cannot say; `CLUSTER SLOTS`
    /// lists the replicas).
    pub fn nodes_text(&self) -> String {
        let mut text = String::new();
        for (index, node) in self.nodes.iter().enumerate() {
            let index = index as u8;
            let flags = if index == self.me {
                "myself,master"
            } else {
                "master"
            };
            text.push_str(&format!(
                "{} {}@{} {flags} - 0 0 {} connected",
                node.id,
                endpoint(&node.host, node.port),
                node.cport,
                self.epoch,
            ));
            for (first, last) in self.ranges_of(index) {
                let (start, end) = (
                    first * SLOTS_PER_PARTITION,
                    last * SLOTS_PER_PARTITION + SLOTS_PER_PARTITION - 1,
                );
                text.push_str(&format!(" {start}-{end}"));
            }
            text.push('\n');
        }
        text
    }

    /// `CLUSTER INFO`.
    pub fn info_text(&self) -> String {
        let served = self.served_slots();
        let size = (0..self.nodes.len() as u8)
            .filter(|index| self.masters.contains(index))
            .count();
        format!(
            "cluster_state:{}\r\ncluster_slots_assigned:{served}\r\ncluster_slots_ok:{served}\r\n\
             cluster_slots_pfail:0\r\ncluster_slots_fail:{}\r\ncluster_known_nodes:{}\r\n\
             cluster_size:{size}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{}\r\n\
             cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
             total_cluster_links_buffer_limit_exceeded:0\r\n",
            if served == SLOTS { "ok" } else { "fail" },
            SLOTS - served,
            self.nodes.len(),
            self.epoch,
            self.epoch,
        )
    }

    pub fn my_id(&self) -> &str {
        self.node(self.me).map_or("", |node| node.id.as_str())
    }
}

/// `host:port`, with brackets around an IPv6 host.
fn endpoint(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        for (key, slot) in [
            (b"foo".as_slice(), 12182),
            (b"bar", 5061),
            (b"hello", 866),
            (b"{user1000}.following", 3443),
            (b"{user1000}.followers", 3443),
            (b"user1000", 3443),
            (b"foo{}{bar}", 8363),
            (b"foo{{bar}}zap", 4015),
            (b"foo{bar}{zap}", 5061),
            (b"", 0),
        ] {
            assert_eq!(key_slot(key), slot, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn placed_digests_land_in_the_slot_partition() {
        for slot in [0, 1, 3, 4, 5061, 12182, 16383] {
            let mut digest = Digest([0xAB; 20]);
            place(&mut digest, slot);
            let pid = (u32::from_le_bytes([digest.0[0], digest.0[1], digest.0[2], digest.0[3]])
                & 0x0FFF) as usize;
            assert_eq!(pid, slot >> 2);
            assert_eq!(digest.0[1] & 0xF0, 0xA0, "other bits kept");
            assert_eq!(&digest.0[2..], &[0xAB; 18]);
        }
    }

    fn two_nodes() -> ClusterMap {
        let node = |n: u8| ClusterNode {
            id: format!("{n:040x}"),
            host: "127.0.0.1".to_owned(),
            port: 7000 + u16::from(n),
            cport: 17000 + u16::from(n),
        };
        let masters: Vec<u8> = (0..PARTITION_COUNT).map(|p| u8::from(p >= 2048)).collect();
        ClusterMap {
            me: 0,
            nodes: vec![node(0), node(1)],
            replicas: masters.iter().map(|&m| vec![1 - m]).collect(),
            writes_here: masters.iter().map(|&m| m == 0).collect(),
            reads_here: vec![true; PARTITION_COUNT],
            masters,
            epoch: 3,
        }
    }

    #[test]
    fn redirects_name_the_master() {
        let map = two_nodes();
        assert_eq!(map.redirect(5061, true, false), None);
        assert_eq!(
            map.redirect(12182, false, false).as_deref(),
            Some("MOVED 12182 127.0.0.1:7001")
        );
        assert_eq!(map.redirect(12182, false, true), None, "READONLY reads");
        assert_eq!(
            map.redirect(12182, true, true).as_deref(),
            Some("MOVED 12182 127.0.0.1:7001")
        );
        let text = map.nodes_text();
        assert!(text.contains("127.0.0.1:7000@17000 myself,master - 0 0 3 connected 0-8191\n"));
        assert!(text.contains("127.0.0.1:7001@17001 master - 0 0 3 connected 8192-16383\n"));
        assert!(map.info_text().starts_with("cluster_state:ok\r\n"));
        let mut out = Out {
            buf: Vec::new(),
            resp3: false,
        };
        map.slots(&mut out);
        let text = String::from_utf8_lossy(&out.buf).into_owned();
        assert!(text.starts_with("*2\r\n*4\r\n:0\r\n:8191\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n"));
    }
}
