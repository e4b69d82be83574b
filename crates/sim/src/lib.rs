//! A deterministic simulator of a Bolide cluster.
//!
//! Every node runs the real cluster state machine (`bolide-cluster`); the
//! network, the clocks, the disks and the clients are simulated, all driven
//! by one seed. A model data path sits beside each state machine: it keeps
//! records per partition, applies client writes at the working master and
//! replicates them synchronously to the copies the routing names, proxies
//! requests a node does not serve, and runs migrations (with the handoff of
//! mastership) when the state machine asks. Faults come one at a time:
//! kill -9 and restart (with or without the node's data), SIGSTOP and
//! SIGCONT, a node cut off by a network split, a new node joining, bursts
//! of lost heartbeat messages. After every step the simulator checks that
//! no two nodes of one settled cluster accept writes for the same
//! partition; after every fault heals it checks that the maps converge
//! (every partition claimed exactly once per column); at the end, that
//! every acknowledged write is still there.
//!
//! `cargo run --release -p bolide-sim -- SEED` replays a seed exactly.

mod world;

pub use world::{run, Failure, Options, Outcome};
