//! Publish/subscribe on one node: channels, glob patterns and shard
//! channels (SSUBSCRIBE/SPUBLISH), each subscriber a mailbox its
//! connection drains (the connection is woken through [`Wake`]). Messages
//! are encoded for the subscriber's protocol when published: `[message,
//! channel, payload]`, `[pmessage, pattern, channel, payload]` and
//! `[smessage, channel, payload]`, as push frames in RESP3.

use crate::resp::Out;
use crate::session::glob;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// Wakes a subscriber's connection when a message arrives.
pub trait Wake: Send + Sync {
    fn wake(&self);
}

/// Messages published to one connection, not yet written.
pub struct Mailbox {
    pending: Mutex<Vec<u8>>,
    resp3: AtomicBool,
    wake: Arc<dyn Wake>,
}

/// The most a mailbox holds; a subscriber that reads slower loses the
/// connection (as Redis's pubsub output-buffer limit does).
pub const MAILBOX_BYTES_MAX: usize = 32 << 20;

impl Mailbox {
    pub fn new(wake: Arc<dyn Wake>) -> Mailbox {
        Mailbox {
            pending: Mutex::new(Vec::new()),
            resp3: AtomicBool::new(false),
            wake,
        }
    }

    pub fn set_resp3(&self, resp3: bool) {
        self.resp3.store(resp3, Relaxed);
    }

    fn deliver(&self, parts: &[&[u8]]) {
        {
            let mut pending = self.pending.lock();
            let mut out = Out::new(self.resp3.load(Relaxed));
            out.buf = std::mem::take(&mut *pending);
            if out.buf.len() <= MAILBOX_BYTES_MAX {
                out.push(parts.len());
                for part in parts {
                    out.bulk(part);
                }
            }
            *pending = out.buf;
        }
        self.wake.wake();
    }

    /// Moves the pending messages to `out`; false if the subscriber fell
    /// too far behind.
    pub fn drain(&self, out: &mut Vec<u8>) -> bool {
        let mut pending = self.pending.lock();
        let healthy = pending.len() <= MAILBOX_BYTES_MAX;
        out.append(&mut pending);
        healthy
    }
}

/// Channel (or pattern) → subscribing connection id → its mailbox.
type Subscriptions = HashMap<Vec<u8>, BTreeMap<u64, Arc<Mailbox>>>;

/// Every subscription of the node.
#[derive(Default)]
pub struct Hub {
    channels: Mutex<Subscriptions>,
    patterns: Mutex<Subscriptions>,
    /// Shard channels: a namespace of their own, as in Redis 7.0.
    shards: Mutex<Subscriptions>,
}

impl Hub {
    pub fn subscribe(&self, pattern: bool, name: &[u8], id: u64, mailbox: &Arc<Mailbox>) {
        let table = if pattern {
            &self.patterns
        } else {
            &self.channels
        };
        table
            .lock()
            .entry(name.to_vec())
            .or_default()
            .insert(id, Arc::clone(mailbox));
    }

    pub fn unsubscribe(&self, pattern: bool, name: &[u8], id: u64) {
        let table = if pattern {
            &self.patterns
        } else {
            &self.channels
        };
        let mut table = table.lock();
        if let Some(subscribers) = table.get_mut(name) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                table.remove(name);
            }
        }
    }

    /// Publishes: the number of subscriptions that received it.
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> usize {
        let mut receivers = 0;
        if let Some(subscribers) = self.channels.lock().get(channel) {
            for mailbox in subscribers.values() {
                mailbox.deliver(&[b"message", channel, message]);
                receivers += 1;
            }
        }
        for (pattern, subscribers) in self.patterns.lock().iter() {
            if glob(pattern, channel) {
                for mailbox in subscribers.values() {
                    mailbox.deliver(&[b"pmessage", pattern, channel, message]);
                    receivers += 1;
                }
            }
        }
        receivers
    }

    /// Channels with subscribers, matching `pattern` if given.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = self
            .channels
            .lock()
            .keys()
            .filter(|name| pattern.is_none_or(|p| glob(p, name)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    pub fn subscribers(&self, channel: &[u8]) -> usize {
        self.channels.lock().get(channel).map_or(0, BTreeMap::len)
    }

    pub fn pattern_count(&self) -> usize {
        self.patterns.lock().len()
    }

    pub fn subscribe_shard(&self, name: &[u8], id: u64, mailbox: &Arc<Mailbox>) {
        self.shards
            .lock()
            .entry(name.to_vec())
            .or_default()
            .insert(id, Arc::clone(mailbox));
    }

    pub fn unsubscribe_shard(&self, name: &[u8], id: u64) {
        let mut table = self.shards.lock();
        if let Some(subscribers) = table.get_mut(name) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                table.remove(name);
            }
        }
    }

    /// SPUBLISH: the number of shard subscribers that received it.
    pub fn publish_shard(&self, channel: &[u8], message: &[u8]) -> usize {
        let table = self.shards.lock();
        let Some(subscribers) = table.get(channel) else {
            return 0;
        };
        for mailbox in subscribers.values() {
            mailbox.deliver(&[b"smessage", channel, message]);
        }
        subscribers.len()
    }

    /// Shard channels with subscribers, matching `pattern` if given.
    pub fn shard_channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = self
            .shards
            .lock()
            .keys()
            .filter(|name| pattern.is_none_or(|p| glob(p, name)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    pub fn shard_subscribers(&self, channel: &[u8]) -> usize {
        self.shards.lock().get(channel).map_or(0, BTreeMap::len)
    }
}
