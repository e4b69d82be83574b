//! A deterministic simulator of a Bolide cluster.
//!
//! Every node runs the code the server ships: the cluster state machine
//! (`bolide_cluster::ClusterNode`) and the data-path machines
//! (`bolide_cluster::datapath`: `Work` for each request that needs other
//! nodes — the proxy hop rule, waiting for the map, duplicate resolution,
//! a write's copies to every other holder — and `Emigrator`/`Immigrator`
//! for migrations, with the receivers of replica writes, fetches and
//! proxies). Every message between nodes is encoded by the real codec,
//! delivered as bytes over a seeded network and decoded at the receiver.
//! The simulator supplies only what the server's transaction layer and
//! store do on one node: the routing rule is the shared
//! `datapath::decide`, then a register read or write on an in-memory
//! store (`store.rs`, behind `datapath::RecordStore`). It keeps no model
//! of replication, resolution or migration of its own.
//!
//! The network, clocks and clients are simulated, all driven by one seed.
//! Faults come one at a time: kill -9 and restart (with or without the
//! node's data), SIGSTOP and SIGCONT, a node cut off by a network split, a
//! new node joining, bursts of lost heartbeat messages. After every step
//! the simulator checks that no two nodes of one settled cluster accept
//! writes for the same partition; after every fault heals it checks that
//! the maps converge (every partition claimed exactly once per column);
//! at the end, that a settled cluster times out no request and that every
//! acknowledged write is still there.
//!
//! `cargo run --release -p bolide-sim -- SEED --verbose` replays a seed
//! exactly.

mod datapath;
mod store;
mod world;

pub use world::{run, Failure, Options, Outcome};
