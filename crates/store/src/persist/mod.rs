//! A persistent namespace's life: opening it (the cold start that rebuilds
//! the index from storage, `cold_start.rs`), the persisted truncation
//! table, its background threads, and the defragmenter (`defrag.rs`).

mod cold_start;
mod defrag;
#[cfg(test)]
mod tests;

pub use cold_start::ColdStart;

use crate::device::{Device, Disks, Files, TruncateTable};
use crate::namespace::{Namespace, NamespaceConfig};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Background threads of a persistent namespace.
pub struct StorageThreads {
    device: Arc<Device>,
    stop: Arc<AtomicBool>,
    flusher: Option<JoinHandle<()>>,
    defrag: Option<JoinHandle<()>>,
}

impl StorageThreads {
    /// Stops the defragmenter, then lets the flusher write and sync
    /// everything and waits for it.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(defrag) = self.defrag.take() {
            let _ = defrag.join();
        }
        self.device.shutdown();
        if let Some(flusher) = self.flusher.take() {
            let _ = flusher.join();
        }
    }
}

impl Drop for StorageThreads {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

impl Namespace {
    /// Opens a namespace: for a persistent one, opens its files and
    /// rebuilds the index from them.
    pub fn open(config: NamespaceConfig) -> Result<Namespace, String> {
        Namespace::open_on(config, &Files)
    }

    /// [`Namespace::open`] on the disks `disks` opens (tests inject faults).
    pub fn open_on(config: NamespaceConfig, disks: &dyn Disks) -> Result<Namespace, String> {
        let Some(device_config) = config.device.clone() else {
            return Ok(Namespace::new(config));
        };
        let name = config.name.clone();
        let (device, used) = Device::open_with(device_config, &name, disks)?;
        let namespace = Namespace::with_device(config, Some(Arc::new(device)));
        namespace.cold_start(&used)?;
        Ok(namespace)
    }

    /// Writes the truncation points to storage (no-op in memory).
    pub(crate) fn persist_truncation(&self) -> Result<(), String> {
        let Some(device) = &self.device else {
            return Ok(());
        };
        // The table is read under the device's table lock, so of two
        // concurrent truncations the later write holds both.
        device
            .write_truncate_table_with(|| TruncateTable {
                namespace_lut_ms: self.truncate_lut_ms(),
                sets: self
                    .sets()
                    .map(|(name, stats)| (name.to_owned(), stats.truncate_lut_ms.load(Relaxed)))
                    .filter(|&(_, lut)| lut > 0)
                    .collect(),
            })
            .map_err(|error| {
                tracing::error!(namespace = self.name(), %error, "cannot persist truncation");
                format!("cannot persist truncation: {error}")
            })
    }

    /// Starts the flusher and the defragmenter of a persistent namespace.
    pub fn start_storage(self: &Arc<Self>) -> Option<StorageThreads> {
        self.start_storage_with(Arc::new(|| {}))
    }

    /// As [`Namespace::start_storage`]; `background` runs first on the
    /// defragmenter's thread.
    pub fn start_storage_with(
        self: &Arc<Self>,
        background: Arc<dyn Fn() + Send + Sync>,
    ) -> Option<StorageThreads> {
        let device = self.device.clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flusher = {
            let device = Arc::clone(&device);
            std::thread::Builder::new()
                .name(format!("flush-{}", self.name()))
                .spawn(move || device.run_flusher())
                .ok()
        };
        let defrag = {
            let namespace = Arc::clone(self);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("defrag-{}", self.name()))
                .spawn(move || {
                    background();
                    namespace.run_defrag(&stop)
                })
                .ok()
        };
        Some(StorageThreads {
            device,
            stop,
            flusher,
            defrag,
        })
    }
}
