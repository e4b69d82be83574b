//! Users, roles and the session key as cluster metadata (module
//! `security`): what a secured node's admin commands change is shared like
//! truncations and index definitions, so every member, and a node that
//! joins later, converges on the same catalog. The security catalog keeps
//! its own versions (the later wins); the metadata only carries them.

use super::Context as Node;
use bolide_cluster::metadata::Item;
use bolide_security::catalog::Entry;

/// The metadata module the entries travel in.
pub const MODULE: &str = "security";

/// An entry from the cluster (or back from this node's own change):
/// taken by the catalog if newer, and written to the node's file.
pub fn apply(node: &Node, item: &Item) {
    let Some(security) = node.security.get() else {
        // An open node in a cluster of secured ones keeps no users.
        return;
    };
    let entry = Entry {
        key: item.key.clone(),
        value: item.value.clone(),
        generation: item.generation,
        timestamp_ms: item.timestamp_ms,
        deleted: item.deleted,
    };
    if let Err(error) = security.apply(entry) {
        tracing::warn!(target: "cluster", %error, "security entry from the cluster not applied");
    }
}

/// The entries this node holds, as the metadata it starts the cluster
/// state machine with: after a restart of every node, a node that joins
/// later still learns the users.
pub fn items(node: &Node) -> Vec<Item> {
    let Some(security) = node.security.get() else {
        return Vec::new();
    };
    security
        .entries()
        .into_iter()
        .map(|entry| Item {
            module: MODULE.to_owned(),
            key: entry.key,
            value: entry.value,
            generation: entry.generation,
            timestamp_ms: entry.timestamp_ms,
            deleted: entry.deleted,
        })
        .collect()
}
