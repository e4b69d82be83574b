//! The durable position and commit-to-device (group commit).
//!
//! Every entry has a write-order position (block sequence << 24 | offset
//! just past it). The flusher publishes the position up to which
//! everything is on the device; a `commit-to-device` write is answered once
//! that passes its own position. Waiters ask the flusher for a round; all
//! writers waiting at that moment share its one write and one sync.

use super::{AppendError, Device};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A wait for one write to become durable (commit-to-device).
pub struct CommitWait {
    device: Arc<Device>,
    position: u64,
}

impl CommitWait {
    /// Whether both waits are on the same storage.
    pub fn same_device(&self, other: &CommitWait) -> bool {
        Arc::ptr_eq(&self.device, &other.device)
    }

    /// Extends this wait to cover `other` too (same device: the later
    /// position covers both).
    pub fn absorb(&mut self, other: CommitWait) {
        if self.same_device(&other) {
            self.position = self.position.max(other.position);
        }
    }

    pub fn is_durable(&self) -> bool {
        self.device.durable() >= self.position
    }

    /// The write-order position this waits for.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Waits on the calling thread.
    pub fn wait_blocking(&self) -> Result<(), AppendError> {
        self.device.wait_durable_blocking(self.position)
    }

    /// Waits without blocking a thread.
    pub async fn wait(self) -> Result<(), AppendError> {
        if self.is_durable() {
            return Ok(());
        }
        let mut watch = self.device.durable_watch.subscribe();
        self.device.request_commit();
        let position = self.position;
        let failed = &self.device.failed;
        let _ = watch
            .wait_for(|&durable| durable >= position || failed.load(Ordering::Relaxed))
            .await;
        if self.device.durable() >= position {
            Ok(())
        } else {
            Err(AppendError::Failed)
        }
    }
}

impl std::fmt::Debug for CommitWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommitWait({:#x})", self.position)
    }
}

impl Device {
    /// The write-order position up to which everything is on the device.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    pub(super) fn publish_durable(&self, reached: u64) {
        let previous = self.durable.fetch_max(reached, Ordering::AcqRel);
        if reached > previous {
            let _guard = self.durable_lock.lock();
            self.durable_signal.notify_all();
            self.durable_watch.send_replace(reached.max(previous));
        }
    }

    /// A wait for `position` (from a [`super::Placement`]), if the
    /// namespace acknowledges writes only once durable.
    pub fn commit_wait(self: &Arc<Self>, position: u64) -> Option<CommitWait> {
        self.config.commit_to_device.then(|| CommitWait {
            device: Arc::clone(self),
            position,
        })
    }

    pub(super) fn request_commit(&self) {
        let mut queue = self.queue.lock();
        if !queue.commit_requested {
            queue.commit_requested = true;
            self.queue_signal.notify_one();
        }
    }

    /// Blocks until `position` is durable (or the device failed).
    pub fn wait_durable_blocking(&self, position: u64) -> Result<(), AppendError> {
        if self.durable() >= position {
            return Ok(());
        }
        self.request_commit();
        let mut guard = self.durable_lock.lock();
        while self.durable() < position {
            if self.failed.load(Ordering::Relaxed) {
                return Err(AppendError::Failed);
            }
            self.durable_signal
                .wait_for(&mut guard, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Asks the flusher to write the open block now.
    pub fn flush_soon(&self) {
        self.request_commit();
    }
}
