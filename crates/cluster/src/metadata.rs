//! Cluster-wide metadata: small named items (truncation points, and later
//! index definitions and UDF modules) that every member keeps and every
//! member converges on. An item set anywhere is sent to every member; at
//! every cluster change every member sends all its items to every other.
//! Of two versions of an item the later (timestamp, then generation) wins,
//! so any order of delivery converges.

use crate::codec::{CodecError, Reader, Writer};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Which subsystem owns it (`truncate`, ...).
    pub module: String,
    pub key: String,
    pub value: String,
    pub generation: u32,
    /// Wall-clock ms when it was last set on its origin node.
    pub timestamp_ms: u64,
    pub deleted: bool,
}

impl Item {
    fn newer_than(&self, other: &Item) -> bool {
        (self.timestamp_ms, self.generation) > (other.timestamp_ms, other.generation)
    }

    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        w.str(&self.module);
        w.str(&self.key);
        w.str(&self.value);
        w.u32(self.generation);
        w.u64(self.timestamp_ms);
        w.bool(self.deleted);
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Item, CodecError> {
        let item = Item {
            module: r.str()?.to_owned(),
            key: r.str()?.to_owned(),
            value: r.str()?.to_owned(),
            generation: r.u32()?,
            timestamp_ms: r.u64()?,
            deleted: r.bool()?,
        };
        if item.module.len() > 64 || item.key.len() > 1024 {
            return Err(CodecError::Invalid("metadata item"));
        }
        Ok(item)
    }
}

/// Every item this node knows, by (module, key).
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    items: BTreeMap<(String, String), Item>,
}

impl Metadata {
    pub fn new(items: Vec<Item>) -> Metadata {
        let mut metadata = Metadata::default();
        for item in items {
            metadata.merge(item);
        }
        metadata
    }

    /// Takes `item` if it is newer than what is held; returns whether it
    /// changed anything.
    pub fn merge(&mut self, item: Item) -> bool {
        let slot = (item.module.clone(), item.key.clone());
        match self.items.get(&slot) {
            Some(held) if !item.newer_than(held) => false,
            _ => {
                self.items.insert(slot, item);
                true
            }
        }
    }

    /// A new local version of (module, key).
    pub fn set(
        &mut self,
        module: &str,
        key: &str,
        value: &str,
        deleted: bool,
        now_ms: u64,
    ) -> Item {
        let slot = (module.to_owned(), key.to_owned());
        let (generation, floor) = self.items.get(&slot).map_or((1, 0), |held| {
            (held.generation.wrapping_add(1), held.timestamp_ms + 1)
        });
        let item = Item {
            module: module.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            generation,
            timestamp_ms: now_ms.max(floor),
            deleted,
        };
        self.items.insert(slot, item.clone());
        item
    }

    pub fn items(&self) -> impl Iterator<Item = &Item> {
        self.items.values()
    }

    pub fn get(&self, module: &str, key: &str) -> Option<&Item> {
        self.items.get(&(module.to_owned(), key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_wins_in_any_order() {
        let mut a = Metadata::default();
        let first = a.set("truncate", "test", "100", false, 1000);
        let second = a.set("truncate", "test", "200", false, 900);
        // The clock went back: the second still wins (timestamp floor).
        assert!(second.timestamp_ms > first.timestamp_ms);
        let mut b = Metadata::default();
        assert!(b.merge(second.clone()));
        assert!(!b.merge(first.clone()));
        assert_eq!(
            b.get("truncate", "test").map(|i| i.value.as_str()),
            Some("200")
        );
        let mut c = Metadata::default();
        assert!(c.merge(first));
        assert!(c.merge(second));
        assert_eq!(
            c.get("truncate", "test").map(|i| i.value.as_str()),
            Some("200")
        );
    }
}
