//! The cluster: heartbeat membership, the partition map, partition
//! versions, the rebalance plan, and the bookkeeping of migrations and
//! replication, as a deterministic state machine.
//!
//! Nothing here does I/O. Time arrives as milliseconds in every call,
//! randomness through [`Entropy`], messages as values in and actions out;
//! the server wires it to sockets and clocks, the simulator (`bolide-sim`)
//! to a seeded network. Node-to-node messages have their own versioned,
//! checksummed encoding ([`codec`]).
//!
//! Depends on `bolide-types` only. It sits beside `bolide-store`, under the
//! transaction layer, which asks it (through [`routing`]) who serves each
//! partition.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used)]

pub mod balance;
pub mod codec;
pub mod conflict;
pub mod datapath;
pub mod fabric;
pub mod membership;
pub mod message;
pub mod metadata;
pub mod node;
pub mod partitions;
pub mod plan;
pub mod routing;
pub mod sc;
pub mod skew;
pub mod version;

pub use message::{Endpoint, Envelope, Message};
pub use node::{Action, ClusterNode, Config, DataEvent, Entropy, Level, NamespaceConfig, Status};
pub use routing::{ConflictPolicy, Route, Routing, CLUSTER_SIZE_MAX};
pub use version::Version;

/// A node's 64-bit identity. Printed in upper-case hex without leading
/// zeros, as Aerospike prints it.
pub type NodeId = u64;

/// A node id as clients and tools see it.
pub fn node_name(node: NodeId) -> String {
    format!("{node:X}")
}
