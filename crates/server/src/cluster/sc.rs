//! Strong consistency on this node: where a namespace's active roster,
//! regime, pending roster, partition versions and witnesses are kept
//! across restarts, whether the last shutdown was clean, and the
//! unreplicated records a restart must copy again. The rules themselves
//! are `bolide_cluster::sc`'s.
//!
//! The state of namespace `ns` lives in `<dir>/<ns>.sc`, `dir` being the
//! `work-directory`, else the directory of the namespace's first storage
//! file; a memory namespace without a work directory keeps it only while
//! the process runs (a warning says so at start). `<dir>/<ns>.unreplicated`
//! lists the records whose last write here has not reached every replica.
//!
//! ```text
//! roster=A3,A2,A1            the active roster
//! regime=9
//! pending=A3,A2,A1           the staged roster (metadata item), its
//! pending-generation=1       generation and time
//! pending-timestamp=1795..
//! clean=false                true only from a clean shutdown to the next start
//! versions=<bits>*<n>,...    partition versions, 4096 in runs (hex bits)
//! witnesses=<regime>:<key>*<n>,...   per partition (hex key), in runs
//! ```

use bolide_cluster::metadata::Item;
use bolide_cluster::node::ROSTER_MODULE;
use bolide_cluster::sc::{Roster, Witness};
use bolide_cluster::Version;
use bolide_types::{DIGEST_BYTES, PARTITION_COUNT};
use std::path::{Path, PathBuf};

/// What a namespace's state file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub roster: Roster,
    pub regime: u32,
    /// The staged roster as a metadata item (value, generation, time).
    pub pending: Option<Item>,
    /// Set by a clean shutdown (after the storage was flushed), cleared
    /// at start: a restart without it may have lost acknowledged writes.
    pub clean: bool,
    /// The partition versions as last saved (empty: none).
    pub versions: Vec<Version>,
    /// The witnesses as last saved (empty: none).
    pub witnesses: Vec<Witness>,
}

/// The state file of a namespace, if it has a place to live.
pub fn state_path(
    work_directory: Option<&Path>,
    namespace: &bolide_store::NamespaceConfig,
) -> Option<PathBuf> {
    let dir = match work_directory {
        Some(dir) => dir.to_path_buf(),
        None => namespace
            .device
            .as_ref()
            .and_then(|device| device.files.first())
            .and_then(|file| file.parent())
            .map(Path::to_path_buf)?,
    };
    Some(dir.join(format!("{}.sc", namespace.name)))
}

/// Reads a state file; a missing file is the empty state. A damaged file
/// is an error naming the file and the line: a regime must never be
/// guessed.
pub fn load(path: &Path, namespace: &str) -> Result<Saved, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Saved::default()),
        Err(error) => return Err(format!("{}: {error}", path.display())),
    };
    let mut saved = Saved::default();
    let mut pending = Item {
        module: ROSTER_MODULE.to_owned(),
        key: namespace.to_owned(),
        value: String::new(),
        generation: 0,
        timestamp_ms: 0,
        deleted: false,
    };
    for (number, line) in text.lines().enumerate() {
        let bad = |what: &str| format!("{} line {}: {what}", path.display(), number + 1);
        let Some((key, value)) = line.split_once('=') else {
            return Err(bad("not key=value"));
        };
        match key {
            "roster" => saved.roster = Roster::parse(value).map_err(|e| bad(&e))?,
            "regime" => saved.regime = value.parse().map_err(|_| bad("bad regime"))?,
            "pending" => {
                Roster::parse(value).map_err(|e| bad(&e))?;
                pending.value = value.to_owned();
            }
            "pending-generation" => {
                pending.generation = value.parse().map_err(|_| bad("bad generation"))?
            }
            "pending-timestamp" => {
                pending.timestamp_ms = value.parse().map_err(|_| bad("bad timestamp"))?
            }
            "clean" => saved.clean = value.parse().map_err(|_| bad("bad clean flag"))?,
            "versions" => {
                saved.versions = parse_runs(value, |bits| {
                    let bits = u64::from_str_radix(bits, 16).ok()?;
                    let version = Version::from_bits(bits);
                    (version.to_bits() == bits).then_some(version)
                })
                .ok_or_else(|| bad("bad versions"))?
            }
            "witnesses" => {
                saved.witnesses = parse_runs(value, |text| {
                    let (regime, key) = text.split_once(':')?;
                    Some(Witness {
                        regime: regime.parse().ok()?,
                        key: u64::from_str_radix(key, 16).ok()?,
                    })
                })
                .ok_or_else(|| bad("bad witnesses"))?
            }
            _ => return Err(bad("unknown key")),
        }
    }
    if pending.generation > 0 {
        saved.pending = Some(pending);
    }
    Ok(saved)
}

/// Writes a state file whole (temporary file, sync, rename).
pub fn store(path: &Path, saved: &Saved) -> std::io::Result<()> {
    let mut text = format!("roster={}\nregime={}\n", saved.roster, saved.regime);
    if let Some(item) = &saved.pending {
        text.push_str(&format!(
            "pending={}\npending-generation={}\npending-timestamp={}\n",
            item.value, item.generation, item.timestamp_ms
        ));
    }
    text.push_str(&format!("clean={}\n", saved.clean));
    if !saved.versions.is_empty() {
        let versions = runs(&saved.versions, |v| format!("{:x}", v.to_bits()));
        text.push_str(&format!("versions={versions}\n"));
    }
    if !saved.witnesses.is_empty() {
        let witnesses = runs(&saved.witnesses, |w| format!("{}:{:x}", w.regime, w.key));
        text.push_str(&format!("witnesses={witnesses}\n"));
    }
    write_whole(path, "sc.tmp", text.as_bytes())
}

/// Writes a file whole: a temporary file, synced, renamed over it, and
/// the directory synced.
fn write_whole(path: &Path, temporary_extension: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let temporary = path.with_extension(temporary_extension);
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// Updates part of a state file, keeping the rest.
pub fn update(path: &Path, namespace: &str, change: impl FnOnce(&mut Saved)) {
    let mut saved = match load(path, namespace) {
        Ok(saved) => saved,
        Err(error) => {
            tracing::error!(%error, "strong-consistency state not readable; rewritten");
            Saved::default()
        }
    };
    change(&mut saved);
    if let Err(error) = store(path, &saved) {
        tracing::error!(%error, path = %path.display(), "strong-consistency state not saved");
    }
}

/// `item*count,...` for runs of equal items.
fn runs<T: PartialEq + Copy>(items: &[T], show: impl Fn(&T) -> String) -> String {
    let mut out = String::new();
    let mut at = 0;
    while at < items.len() {
        let run = items[at..]
            .iter()
            .take_while(|item| **item == items[at])
            .count();
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("{}*{run}", show(&items[at])));
        at += run;
    }
    out
}

/// Reads [`runs`]' text: exactly one item per partition.
fn parse_runs<T: Copy>(text: &str, parse: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    let mut items = Vec::with_capacity(PARTITION_COUNT);
    for run in text.split(',') {
        let (item, count) = run.rsplit_once('*')?;
        let count: usize = count.parse().ok()?;
        if count == 0 || items.len() + count > PARTITION_COUNT {
            return None;
        }
        let item = parse(item)?;
        items.extend(std::iter::repeat_n(item, count));
    }
    (items.len() == PARTITION_COUNT).then_some(items)
}

/// The unreplicated records of a namespace as last saved: every write
/// applied here before `watermark_ms` (last-update time, ms since 2010)
/// has reached every replica, except those of `digests`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unreplicated {
    pub watermark_ms: u64,
    pub digests: Vec<[u8; DIGEST_BYTES]>,
}

/// Where a namespace's unreplicated records are saved (beside its state).
pub fn unreplicated_path(state: &Path) -> PathBuf {
    state.with_extension("unreplicated")
}

/// Reads a saved list. None: no list was saved (a node that never saved
/// one has no record written under this code: nothing to copy again).
pub fn load_unreplicated(path: &Path) -> Result<Option<Unreplicated>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("{}: {error}", path.display())),
    };
    let mut saved = Unreplicated::default();
    for (number, line) in text.lines().enumerate() {
        let bad = |what: &str| format!("{} line {}: {what}", path.display(), number + 1);
        if let Some(watermark) = line.strip_prefix("watermark=") {
            saved.watermark_ms = watermark.parse().map_err(|_| bad("bad watermark"))?;
            continue;
        }
        let mut digest = [0u8; DIGEST_BYTES];
        if line.len() != 2 * DIGEST_BYTES {
            return Err(bad("not a digest"));
        }
        for (at, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&line[2 * at..2 * at + 2], 16)
                .map_err(|_| bad("not a digest"))?;
        }
        saved.digests.push(digest);
    }
    Ok(Some(saved))
}

/// Saves a list whole.
pub fn store_unreplicated(path: &Path, saved: &Unreplicated) -> std::io::Result<()> {
    let mut text = format!("watermark={}\n", saved.watermark_ms);
    for digest in &saved.digests {
        for byte in digest {
            text.push_str(&format!("{byte:02x}"));
        }
        text.push('\n');
    }
    write_whole(path, "unreplicated.tmp", text.as_bytes())
}

/// A clean shutdown, first step: the cluster thread stops serving
/// (requests get 11, copies from other nodes are refused) and hands back
/// each SC namespace's state. None if it does not answer in time (the
/// next start is then unclean).
pub fn stop_serving(node: &super::Context) -> Option<Vec<(usize, Saved)>> {
    let (answer, answered) = std::sync::mpsc::channel();
    node.cluster.send(super::Event::Shutdown { answer });
    let states = answered
        .recv_timeout(std::time::Duration::from_secs(2))
        .ok()?;
    // Writes that passed the routing before it changed reach the store
    // within a moment (they run to completion on their threads).
    std::thread::sleep(std::time::Duration::from_millis(100));
    Some(states)
}

/// A clean shutdown, last step (the storage is flushed): each SC
/// namespace's state is saved as clean, with its unreplicated records.
/// Namespaces without persistent storage stay unclean: their data is gone.
pub fn save_clean(node: &super::Context, states: Vec<(usize, Saved)>) {
    let work_directory = node.cluster.work_directory.as_deref();
    let now_ms = bolide_types::now_citrusleaf_milliseconds();
    let mut last = Vec::new();
    save_unreplicated(node, now_ms, true, &mut last);
    for (index, state) in states {
        let Some(ns) = node.store.namespaces().get(index) else {
            continue;
        };
        let Some(path) = state_path(work_directory, &ns.config) else {
            continue;
        };
        let persistent = ns.config.device.is_some();
        update(&path, &ns.config.name, |saved| {
            saved.roster = state.roster;
            saved.regime = state.regime;
            saved.versions = state.versions;
            saved.witnesses = state.witnesses;
            saved.clean = persistent;
        });
    }
}

use bolide_cluster::datapath::rereplicate::WATERMARK_SLACK_MS;

/// (At start, before the cluster machine) lists again, in the gates, the
/// records of each persistent SC namespace whose last write here may not
/// have reached every replica: the saved list, and every record written
/// from its watermark on (a crash may have cut off their copies). They are
/// copied to the replicas before they are next served, or in the
/// background. A node that never saved a list copies everything again.
pub fn restore_unreplicated(node: &super::Context) {
    let work_directory = node.cluster.work_directory.as_deref();
    let gates = &node.cluster.gates;
    for (index, ns) in node.store.namespaces().iter().enumerate() {
        if !ns.config.strong_consistency || ns.config.device.is_none() {
            continue;
        }
        let Some(path) = state_path(work_directory, &ns.config) else {
            continue;
        };
        let list = unreplicated_path(&path);
        let saved = match load_unreplicated(&list) {
            Ok(Some(saved)) => saved,
            Ok(None) => Unreplicated::default(),
            Err(error) => {
                tracing::warn!(%error, "unreplicated records unreadable: every record is copied again");
                Unreplicated::default()
            }
        };
        let from_ms = saved.watermark_ms.saturating_sub(WATERMARK_SLACK_MS);
        let mut listed = 0u64;
        for pid in 0..PARTITION_COUNT {
            let Some(table) = ns.read_partition(pid) else {
                continue;
            };
            let saved_here: Vec<[u8; DIGEST_BYTES]> = saved
                .digests
                .iter()
                .filter(|digest| usize::from(bolide_cluster::datapath::pid_of(digest)) == pid)
                .copied()
                .collect();
            let mut held = Vec::new();
            table.for_each(|entry| {
                held.push((
                    *entry.digest,
                    stamp(entry.meta.generation, entry.meta.last_update_ms),
                ));
            });
            held.extend(
                table
                    .tombstones()
                    .map(|(digest, t)| (digest.0, stamp(t.generation, t.last_update_ms))),
            );
            drop(table);
            let marks = bolide_cluster::datapath::rereplicate::restart_list(
                &saved_here,
                from_ms,
                held.into_iter(),
            );
            for (digest, stamp) in marks {
                // Dropped at once: the record stays listed until copied.
                drop(gates.mark_unreplicated(index, pid, digest, stamp));
            }
        }
        listed += gates.unreplicated_count(index);
        if listed > 0 {
            tracing::info!(
                namespace = ns.name(),
                "{{{}}} {listed} records may not be on every replica: copied again before they are served",
                ns.name()
            );
        }
    }
}

fn stamp(generation: u16, last_update_ms: u64) -> bolide_cluster::conflict::Stamp {
    bolide_cluster::conflict::Stamp {
        generation,
        last_update_ms,
    }
}

/// Saves each persistent SC namespace's unreplicated records with the
/// watermark `now_ms` (last-update ms since 2010, read before the list):
/// `last` holds what was saved before, and the list is written when it
/// changed or `refresh` asks to move the watermark on.
pub fn save_unreplicated(
    node: &super::Context,
    now_ms: u64,
    refresh: bool,
    last: &mut Vec<Option<Vec<[u8; DIGEST_BYTES]>>>,
) {
    let work_directory = node.cluster.work_directory.as_deref();
    let gates = &node.cluster.gates;
    let namespaces = node.store.namespaces();
    last.resize(namespaces.len(), None);
    for (index, ns) in namespaces.iter().enumerate() {
        if !ns.config.strong_consistency || ns.config.device.is_none() {
            continue;
        }
        let Some(path) = state_path(work_directory, &ns.config) else {
            continue;
        };
        let mut digests = Vec::new();
        if gates.unreplicated_count(index) > 0 {
            for pid in 0..PARTITION_COUNT {
                digests.extend(gates.unreplicated(index, pid));
            }
        }
        if !refresh && last[index].as_ref() == Some(&digests) {
            continue;
        }
        let saved = Unreplicated {
            watermark_ms: now_ms,
            digests,
        };
        match store_unreplicated(&unreplicated_path(&path), &saved) {
            Ok(()) => last[index] = Some(saved.digests),
            Err(error) => tracing::error!(%error, "unreplicated records not saved"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_damage_is_named() {
        let dir = std::env::temp_dir().join(format!("bolide-sc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("test.sc");
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            load(&path, "test").expect("missing is empty"),
            Saved::default()
        );
        let saved = Saved {
            roster: Roster::parse("A1,A2@3").expect("valid"),
            regime: 9,
            pending: Some(Item {
                module: ROSTER_MODULE.to_owned(),
                key: "test".to_owned(),
                value: "A1,A2@3,A3".to_owned(),
                generation: 2,
                timestamp_ms: 1234,
                deleted: false,
            }),
            clean: true,
            versions: (0..PARTITION_COUNT)
                .map(|pid| match pid % 3 {
                    0 => Version::NULL,
                    1 => Version::full(0xABC).with_master(true),
                    _ => Version {
                        evade: true,
                        ..Version::partial(0xDEF)
                    },
                })
                .collect(),
            witnesses: (0..PARTITION_COUNT)
                .map(|pid| Witness {
                    regime: 7 + (pid / 1000) as u32,
                    key: 0xABC,
                })
                .collect(),
        };
        store(&path, &saved).expect("stored");
        assert_eq!(load(&path, "test").expect("loads"), saved);
        std::fs::write(&path, "roster=A1\nregime=nine\n").expect("write");
        let error = load(&path, "test").expect_err("damaged");
        assert!(error.contains("line 2"), "{error}");
        // Versions must cover every partition.
        std::fs::write(&path, "roster=A1\nregime=3\nversions=0*4095\n").expect("write");
        let error = load(&path, "test").expect_err("short");
        assert!(
            error.contains("line 3") && error.contains("versions"),
            "{error}"
        );
        // The unreplicated list round-trips; a missing one is None.
        let list = unreplicated_path(&path);
        assert_eq!(load_unreplicated(&list).expect("missing"), None);
        let saved = Unreplicated {
            watermark_ms: 123_456,
            digests: vec![[7u8; DIGEST_BYTES], [0xAB; DIGEST_BYTES]],
        };
        store_unreplicated(&list, &saved).expect("stored");
        assert_eq!(load_unreplicated(&list).expect("loads"), Some(saved));
        std::fs::write(&list, "watermark=1\nxyz\n").expect("write");
        assert!(load_unreplicated(&list)
            .expect_err("damaged")
            .contains("line 2"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
