//! Secondary indexes: their definitions (node-wide metadata, kept on disk),
//! the live indexes of each namespace, kept exact through the store's
//! record observer, and their background population.
//!
//! The definitions sit behind a small metadata interface
//! ([`Sindexes::definitions`], [`Sindexes::apply_set`],
//! [`Sindexes::apply_remove`]) so that the layer that spreads metadata over
//! a cluster can call it; `sindex-create` and `sindex-delete` go through
//! the same calls.

pub mod cells;
pub mod definition;
pub mod index;
pub mod keys;
pub mod tree;

use crate::metadata;
use bolide_store::{Namespace, RecordChange, RecordMeta, RecordObserver, RecordView, Store};
use bolide_types::ResultCode;
use definition::{Collection, Definition, InfoError, KeyType};
pub use index::SecondaryIndex;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

/// Most indexes a namespace may have (the server's `MAX_N_SINDEXES`).
pub const INDEXES_PER_NAMESPACE_MAX: usize = 256;
/// The definitions file, under the work directory.
const FILE_NAME: &str = "smd/sindex.smd";
/// The first line of the definitions file.
const FILE_HEADER: &str = "bolide-sindex 1";

/// What a background job runs first on its thread (the server lowers the
/// thread's priority there).
pub type Background = Arc<dyn Fn() + Send + Sync>;

/// Every secondary index of the node.
pub struct Sindexes {
    namespaces: HashMap<String, Arc<NamespaceIndexes>>,
    catalog: Mutex<Catalog>,
    file: Option<PathBuf>,
    background: Background,
}

/// The definitions and their generation (bumped by every change).
#[derive(Default)]
struct Catalog {
    generation: u64,
    definitions: Vec<Definition>,
}

/// The indexes of one namespace; the namespace's record observer.
pub struct NamespaceIndexes {
    namespace: Weak<Namespace>,
    indexes: RwLock<Vec<Arc<SecondaryIndex>>>,
}

impl Sindexes {
    /// Installs the record observers of `store`'s namespaces, reads the
    /// definitions kept in `work_directory` (if any) and starts populating
    /// them in the background (the cold start of the indexes).
    pub fn open(
        store: &Store,
        work_directory: Option<&Path>,
        background: Background,
    ) -> Result<Arc<Sindexes>, String> {
        let mut namespaces = HashMap::new();
        for namespace in store.namespaces() {
            let indexes = Arc::new(NamespaceIndexes {
                namespace: Arc::downgrade(namespace),
                indexes: RwLock::new(Vec::new()),
            });
            namespace.set_observer(indexes.clone());
            namespaces.insert(namespace.name().to_owned(), indexes);
        }
        let file = work_directory.map(|dir| dir.join(FILE_NAME));
        let sindexes = Arc::new(Sindexes {
            namespaces,
            catalog: Mutex::new(Catalog::default()),
            file,
            background,
        });
        let (generation, definitions) = sindexes.read_file()?;
        let mut catalog = sindexes.catalog.lock();
        catalog.generation = generation;
        for definition in definitions {
            if sindexes.namespaces.contains_key(&definition.namespace) {
                sindexes.start(&definition);
            } else {
                tracing::warn!(
                    namespace = definition.namespace,
                    index = definition.name,
                    "secondary index of an unknown namespace kept but not built"
                );
            }
            catalog.definitions.push(definition);
        }
        drop(catalog);
        Ok(sindexes)
    }

    /// `sindex-create`: checks the request against the definitions and
    /// applies it. The same definition under its own name is "ok"; under
    /// another name it renames the index.
    pub fn create(&self, definition: Definition) -> Result<(), InfoError> {
        if !self.namespaces.contains_key(&definition.namespace) {
            return Err(InfoError::new(ResultCode::Parameter, "namespace not found"));
        }
        let mut catalog = self.catalog.lock();
        let key = definition.key();
        let same_name: Vec<&Definition> = catalog
            .definitions
            .iter()
            .filter(|d| d.namespace == definition.namespace && d.name == definition.name)
            .collect();
        if let Some(existing) = same_name.first() {
            return if existing.key() == key {
                Ok(())
            } else {
                Err(InfoError::new(
                    ResultCode::IndexFound,
                    "'indexname' already exists with different definition",
                ))
            };
        }
        let renames = catalog.definitions.iter().any(|d| d.key() == key);
        let count = catalog
            .definitions
            .iter()
            .filter(|d| d.namespace == definition.namespace)
            .count();
        if !renames && count >= INDEXES_PER_NAMESPACE_MAX {
            return Err(InfoError::new(
                ResultCode::IndexMaxCount,
                "already at sindex definition limit",
            ));
        }
        self.set_locked(&mut catalog, definition)
            .map_err(|error| InfoError::new(ResultCode::Unknown, error))
    }

    /// `sindex-delete`: removes the index named `name` ("ok" if there is
    /// none, as on the server).
    pub fn delete(&self, namespace: &str, name: &str) -> Result<(), InfoError> {
        let mut catalog = self.catalog.lock();
        let key = catalog
            .definitions
            .iter()
            .find(|d| d.namespace == namespace && d.name == name)
            .map(Definition::key);
        match key {
            Some(key) => self
                .remove_locked(&mut catalog, &key)
                .map_err(|error| InfoError::new(ResultCode::Unknown, error)),
            None => Ok(()),
        }
    }

    /// The definitions and their generation (metadata interface).
    pub fn definitions(&self) -> (u64, Vec<Definition>) {
        let catalog = self.catalog.lock();
        (catalog.generation, catalog.definitions.clone())
    }

    /// Sets a definition (metadata interface): adds the index, or renames
    /// the index of the same definition. Kept on disk before it applies.
    pub fn apply_set(&self, definition: Definition) -> Result<(), String> {
        let mut catalog = self.catalog.lock();
        self.set_locked(&mut catalog, definition)
    }

    fn set_locked(&self, catalog: &mut Catalog, definition: Definition) -> Result<(), String> {
        let key = definition.key();
        if let Some(existing) = catalog.definitions.iter_mut().find(|d| d.key() == key) {
            if existing.name == definition.name {
                return Ok(());
            }
            existing.name = definition.name.clone();
            catalog.generation += 1;
            self.write_file(catalog)?;
            if let Some(index) = self.find_by_key(&definition.namespace, &key) {
                index.rename(&definition.name);
            }
            return Ok(());
        }
        catalog.definitions.push(definition.clone());
        catalog.generation += 1;
        if let Err(error) = self.write_file(catalog) {
            catalog.definitions.pop();
            catalog.generation -= 1;
            return Err(error);
        }
        tracing::info!(
            namespace = definition.namespace,
            index = definition.name,
            "secondary index created"
        );
        if self.namespaces.contains_key(&definition.namespace) {
            self.start(&definition);
        }
        Ok(())
    }

    /// Removes the definition with key `key` (metadata interface) and
    /// drops its index.
    pub fn apply_remove(&self, key: &str) -> Result<(), String> {
        let mut catalog = self.catalog.lock();
        self.remove_locked(&mut catalog, key)
    }

    fn remove_locked(&self, catalog: &mut Catalog, key: &str) -> Result<(), String> {
        let Some(position) = catalog.definitions.iter().position(|d| d.key() == key) else {
            return Ok(());
        };
        let definition = catalog.definitions.remove(position);
        catalog.generation += 1;
        if let Err(error) = self.write_file(catalog) {
            catalog.definitions.insert(position, definition);
            catalog.generation -= 1;
            return Err(error);
        }
        if let Some(indexes) = self.namespaces.get(&definition.namespace) {
            indexes.remove(key);
        }
        tracing::info!(
            namespace = definition.namespace,
            index = definition.name,
            "secondary index dropped"
        );
        Ok(())
    }

    /// The live index named `name` in `namespace`.
    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<SecondaryIndex>> {
        self.namespaces
            .get(namespace)?
            .indexes
            .read()
            .iter()
            .find(|index| index.name() == name)
            .cloned()
    }

    /// The live index a query names by bin, type, collection type and
    /// context (and set: an index of the query's set, else one of no set).
    pub fn find_for_query(
        &self,
        namespace: &str,
        set: Option<&str>,
        bin: &str,
        key_type: KeyType,
        collection: Collection,
        context: Option<&[u8]>,
    ) -> Option<Arc<SecondaryIndex>> {
        let indexes = self.namespaces.get(namespace)?.indexes.read();
        let matches = |index: &&Arc<SecondaryIndex>, wanted_set: Option<&str>| {
            let d = &index.definition;
            d.expression.is_none()
                && d.bin == bin
                && d.key_type == key_type
                && d.collection == collection
                && d.context.as_deref() == context
                && d.set.as_deref() == wanted_set
        };
        indexes
            .iter()
            .find(|index| set.is_some() && matches(index, set))
            .or_else(|| indexes.iter().find(|index| matches(index, None)))
            .cloned()
    }

    /// The live expression index a query names by its expression, value
    /// type and collection type.
    pub fn find_by_expression(
        &self,
        namespace: &str,
        expression: &[u8],
        key_type: KeyType,
        collection: Collection,
    ) -> Option<Arc<SecondaryIndex>> {
        self.namespaces
            .get(namespace)?
            .indexes
            .read()
            .iter()
            .find(|index| {
                let d = &index.definition;
                d.expression.as_deref() == Some(expression)
                    && d.key_type == key_type
                    && d.collection == collection
            })
            .cloned()
    }

    /// The live indexes of `namespace` (every namespace if None), in
    /// creation order.
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<SecondaryIndex>> {
        let mut names: Vec<&String> = self.namespaces.keys().collect();
        names.sort();
        names
            .into_iter()
            .filter(|name| namespace.is_none_or(|wanted| wanted == name.as_str()))
            .filter_map(|name| self.namespaces.get(name))
            .flat_map(|indexes| indexes.indexes.read().clone())
            .collect()
    }

    /// Whether `namespace` is one of the node's.
    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains_key(namespace)
    }

    fn find_by_key(&self, namespace: &str, key: &str) -> Option<Arc<SecondaryIndex>> {
        self.namespaces
            .get(namespace)?
            .indexes
            .read()
            .iter()
            .find(|index| index.definition.key() == key)
            .cloned()
    }

    /// Adds a live index for `definition` and populates it on a thread of
    /// its own.
    fn start(&self, definition: &Definition) {
        let Some(indexes) = self.namespaces.get(&definition.namespace) else {
            return;
        };
        let Some(namespace) = indexes.namespace.upgrade() else {
            return;
        };
        let index = Arc::new(SecondaryIndex::new(definition.clone()));
        indexes.add(index.clone());
        let background = self.background.clone();
        let spawned = std::thread::Builder::new()
            .name("sindex-load".into())
            .spawn(move || {
                background();
                index.populate(&namespace);
                tracing::info!(
                    namespace = namespace.name(),
                    index = index.name(),
                    entries = index.entries(),
                    load_time_ms = index.load_time_ms(),
                    "secondary index ready"
                );
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start populating a secondary index");
        }
    }

    /// Reads the definitions file: its generation and definitions (none
    /// if there is no file yet).
    fn read_file(&self) -> Result<(u64, Vec<Definition>), String> {
        let Some(path) = &self.file else {
            return Ok((0, Vec::new()));
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok((0, Vec::new()))
            }
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let mut lines = text.lines();
        if lines.next() != Some(FILE_HEADER) {
            return Err(format!("{}: not a secondary index file", path.display()));
        }
        let generation = lines
            .next()
            .and_then(|line| line.strip_prefix("generation "))
            .and_then(|number| number.parse().ok())
            .ok_or_else(|| format!("{}: bad generation line", path.display()))?;
        let mut definitions = Vec::new();
        for line in lines.filter(|line| !line.is_empty()) {
            let command = bolide_wire::info::InfoCommand::parse(line);
            let definition = Definition::from_create(&command).map_err(|error| {
                format!(
                    "{}: bad definition '{line}': {}",
                    path.display(),
                    error.message
                )
            })?;
            definitions.push(definition);
        }
        Ok((generation, definitions))
    }

    fn write_file(&self, catalog: &Catalog) -> Result<(), String> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let mut text = format!("{FILE_HEADER}\ngeneration {}\n", catalog.generation);
        for definition in &catalog.definitions {
            text.push_str("sindex-create:");
            text.push_str(&definition.to_command());
            text.push('\n');
        }
        metadata::write_atomic(path, text.as_bytes())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    }
}

impl NamespaceIndexes {
    fn add(&self, index: Arc<SecondaryIndex>) {
        let mut indexes = self.indexes.write();
        indexes.push(index);
        if let Some(namespace) = self.namespace.upgrade() {
            namespace.set_observed(true);
        }
    }

    fn remove(&self, key: &str) {
        let mut indexes = self.indexes.write();
        indexes.retain(|index| {
            let keep = index.definition.key() != key;
            if !keep {
                index.drop_index();
            }
            keep
        });
        if indexes.is_empty() {
            if let Some(namespace) = self.namespace.upgrade() {
                namespace.set_observed(false);
            }
        }
    }
}

impl RecordObserver for NamespaceIndexes {
    fn record_changed(&self, change: &RecordChange<'_>) {
        let indexes = self.indexes.read();
        if indexes.is_empty() {
            return;
        }
        let Some(namespace) = self.namespace.upgrade() else {
            return;
        };
        fn parse(
            record: bolide_store::StoredRecord<'_>,
        ) -> Option<(RecordMeta, RecordView<'_>, usize)> {
            Some((
                record.meta,
                RecordView::parse(record.bytes)?,
                record.bytes.len(),
            ))
        }
        let old = change.old.and_then(parse);
        let new = change.new.and_then(parse);
        let bvals = |index: &SecondaryIndex,
                     record: &Option<(RecordMeta, RecordView<'_>, usize)>| {
            record
                .as_ref()
                .map(|(meta, view, bytes)| {
                    index.bvals_of(&namespace, change.digest, meta, view, *bytes)
                })
                .unwrap_or_default()
        };
        for index in indexes.iter() {
            let old_bvals = bvals(index, &old);
            let new_bvals = bvals(index, &new);
            index.update(change.partition, change.digest, &old_bvals, &new_bvals);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_store::{record, Copy, NamespaceConfig};
    use bolide_types::{particle, Digest, DIGEST_BYTES, PARTITION_COUNT};
    use std::time::{Duration, Instant};

    /// Record `n`'s digest: spread over every partition, distinct.
    fn digest(n: u32) -> Digest {
        let mut d = [0u8; DIGEST_BYTES];
        let pid = (n.wrapping_mul(2_654_435_761) >> 7) as u16 % PARTITION_COUNT as u16;
        d[..2].copy_from_slice(&pid.to_le_bytes());
        d[4..8].copy_from_slice(&n.to_be_bytes());
        Digest(d)
    }

    /// A record with integer bin `v` (none if `v` is None).
    fn record_bytes(v: Option<i64>) -> Vec<u8> {
        let mut bytes = Vec::new();
        let value = v.unwrap_or(0).to_be_bytes();
        let bins = v.map(|_| record::Bin {
            name: b"v",
            particle_type: particle::INTEGER,
            value: &value,
        });
        record::encode(&mut bytes, None, bins.into_iter());
        bytes
    }

    fn put(namespace: &Namespace, n: u32, v: Option<i64>, last_update_ms: u64) {
        let d = digest(n);
        let meta = RecordMeta {
            generation: 1,
            last_update_ms,
            ..RecordMeta::default()
        };
        namespace
            .write(&d)
            .put(&d, meta, &record_bytes(v))
            .expect("memory put");
    }

    fn definition() -> Definition {
        Definition {
            namespace: "test".into(),
            name: "v".into(),
            set: None,
            bin: "v".into(),
            key_type: KeyType::Numeric,
            collection: Collection::Default,
            context: None,
            expression: None,
        }
    }

    /// The live index must hold exactly what an index built afresh over
    /// the namespace holds, and count its entries and bytes right.
    fn assert_consistent(namespace: &Namespace, live: &SecondaryIndex) -> usize {
        let fresh = SecondaryIndex::new(definition());
        fresh.populate(namespace);
        let want = fresh.checked_entries();
        let got = live.checked_entries();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the live index differs from a fresh build");
        got.len()
    }

    /// Writes, updates, deletes, partitions dropped (a migration away),
    /// copies applied (a migration in, records and tombstones), and a
    /// truncation swept: after each, the index is what a fresh build over
    /// the records gives, and an empty index holds no leaf.
    #[test]
    fn the_index_follows_every_way_a_record_changes() {
        let store = Store::new(vec![NamespaceConfig::with_name("test")]);
        let sindexes = Sindexes::open(&store, None, Arc::new(|| {})).expect("open");
        let namespace = store.namespace(b"test").expect("namespace").clone();
        // Records from before the index exists, and the index built over
        // them in the background.
        for n in 0..3000 {
            put(&namespace, n, Some(i64::from(n % 97) - 40), 1000);
        }
        sindexes.create(definition()).expect("create");
        let index = sindexes.find("test", "v").expect("index");
        let started = Instant::now();
        while !index.is_readable() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "index never readable"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let empty_bytes = SecondaryIndex::new(definition()).used_bytes();
        assert_eq!(assert_consistent(&namespace, &index), 3000);

        // Writes after: new records, moved values, a bin removed, deletes.
        for n in 3000..5000 {
            put(&namespace, n, Some(i64::from(n % 13)), 1000);
        }
        for n in (0..5000).step_by(7) {
            put(&namespace, n, Some(1_000_000 + i64::from(n)), 1000);
        }
        for n in (1..5000).step_by(11) {
            put(&namespace, n, None, 1000);
        }
        for n in (2..5000).step_by(5) {
            let d = digest(n);
            namespace.write(&d).delete(&d).expect("delete");
        }
        let after_writes = assert_consistent(&namespace, &index);
        assert!(after_writes > 2500, "{after_writes}");

        // A migration away: the node forgets 1,000 partitions.
        for pid in (0..PARTITION_COUNT).step_by(4) {
            namespace.drop_partition(pid);
        }
        let after_drops = assert_consistent(&namespace, &index);
        assert!(after_drops < after_writes * 4 / 5, "{after_drops}");

        // A migration in: records copied from another node (some new,
        // some replacing), and tombstones deleting records.
        let newer = |n: u32, v: Option<i64>| (n, record_bytes(v));
        let copies: Vec<(u32, Vec<u8>)> = (0..4000)
            .step_by(3)
            .map(|n| newer(n, Some(-i64::from(n))))
            .collect();
        for (n, bytes) in &copies {
            let copy = Copy {
                digest: digest(*n),
                generation: 9,
                last_update_ms: 2000,
                void_time: 0,
                set_name: b"",
                record: Some(bytes),
            };
            namespace
                .write(&copy.digest)
                .apply_copy(&copy, |_, _| true)
                .expect("copy");
        }
        for n in (0..4000).step_by(17) {
            let copy = Copy {
                digest: digest(n),
                generation: 10,
                last_update_ms: 2001,
                void_time: 0,
                set_name: b"",
                record: None,
            };
            namespace
                .write(&copy.digest)
                .apply_copy(&copy, |_, _| true)
                .expect("tombstone");
        }
        assert!(assert_consistent(&namespace, &index) > after_drops);

        // A truncation of everything written before 1500 ms, then its
        // sweep: only the copies (at 2000 ms) stay.
        namespace.truncate(None, 1500).expect("truncate");
        namespace.sweep(0);
        let after_truncate = assert_consistent(&namespace, &index);
        assert!(index
            .checked_entries()
            .iter()
            .all(|entry| entry.bval() <= 0));
        assert!(after_truncate > 0);

        // Every record gone: no entry and no leaf left.
        namespace.truncate(None, 10_000).expect("truncate");
        namespace.sweep(0);
        assert_eq!(assert_consistent(&namespace, &index), 0);
        assert_eq!(index.entries(), 0);
        assert_eq!(index.used_bytes(), empty_bytes);
    }
}
