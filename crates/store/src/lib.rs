//! The store: namespaces, their 4096 partitions, the primary index of each
//! partition, record bytes, expiry and eviction.
//!
//! It knows nothing of sockets or the wire format; it depends on
//! `bolide-types` only. The transaction layer above decides what a request
//! does and calls into partitions here.
#![deny(unsafe_code)]
#![deny(clippy::unwrap_used)]

pub mod blob;
pub mod copies;
#[cfg(test)]
mod crash_tests;
pub mod device;
pub mod index;
pub mod namespace;
mod persist;
pub mod record;

pub use blob::RecordBlob;
pub use copies::{Copy, CopyError, OwnedCopy, Stamp};
pub use device::{AppendError, CommitWait, Compression, DeviceConfig, Method};
pub use index::{Entry, IndexTable, RecordMeta, Tombstone, SLOT_BYTES};
pub use namespace::{
    Namespace, NamespaceConfig, PartitionWriter, RecordChange, RecordObserver, SetError,
    StorageEngine, StoredRecord, SweepReport,
};
pub use persist::{ColdStart, StorageThreads};
pub use record::{Bin, RecordView};

use std::sync::Arc;

/// All namespaces of a node.
pub struct Store {
    namespaces: Vec<Arc<Namespace>>,
}

impl Store {
    /// Opens every namespace; persistent ones are rebuilt from storage.
    /// Errors name the namespace.
    pub fn open(configs: Vec<NamespaceConfig>) -> Result<Store, String> {
        let mut namespaces = Vec::new();
        for config in configs {
            let name = config.name.clone();
            let namespace =
                Namespace::open(config).map_err(|error| format!("namespace {name}: {error}"))?;
            namespaces.push(Arc::new(namespace));
        }
        Ok(Store { namespaces })
    }

    /// Starts the storage threads of persistent namespaces.
    /// `background` runs first on each defragmenter thread (the server
    /// lowers its priority there).
    pub fn start_storage(&self, background: Arc<dyn Fn() + Send + Sync>) -> Vec<StorageThreads> {
        self.namespaces
            .iter()
            .filter_map(|ns| ns.start_storage_with(Arc::clone(&background)))
            .collect()
    }

    /// Namespaces in memory only (any storage files are ignored).
    pub fn new(configs: Vec<NamespaceConfig>) -> Store {
        Store {
            namespaces: configs
                .into_iter()
                .map(|c| Arc::new(Namespace::new(c)))
                .collect(),
        }
    }

    /// The namespace named `name` (raw bytes from the wire).
    #[inline]
    pub fn namespace(&self, name: &[u8]) -> Option<&Arc<Namespace>> {
        self.namespaces
            .iter()
            .find(|ns| ns.name().as_bytes() == name)
    }

    /// The namespace named `name` and its index (its place in the
    /// configuration, which the cluster's routing shares).
    #[inline]
    pub fn namespace_index(&self, name: &[u8]) -> Option<(usize, &Arc<Namespace>)> {
        self.namespaces
            .iter()
            .enumerate()
            .find(|(_, ns)| ns.name().as_bytes() == name)
    }

    pub fn namespaces(&self) -> &[Arc<Namespace>] {
        &self.namespaces
    }
}
