//! Strong consistency on this node: where a namespace's active roster,
//! regime and pending roster are kept across restarts, and the roster info
//! commands. The rules themselves are `bolide_cluster::sc`'s.
//!
//! The state of namespace `ns` lives in `<dir>/<ns>.sc`, `dir` being the
//! `work-directory`, else the directory of the namespace's first storage
//! file; a memory namespace without a work directory keeps it only while
//! the process runs (a warning says so at start).

use bolide_cluster::metadata::Item;
use bolide_cluster::node::ROSTER_MODULE;
use bolide_cluster::sc::Roster;
use std::path::{Path, PathBuf};

/// What a namespace's state file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub roster: Roster,
    pub regime: u32,
    /// The staged roster as a metadata item (value, generation, time).
    pub pending: Option<Item>,
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
    use std::io::Write;
    let mut text = format!("roster={}\nregime={}\n", saved.roster, saved.regime);
    if let Some(item) = &saved.pending {
        text.push_str(&format!(
            "pending={}\npending-generation={}\npending-timestamp={}\n",
            item.value, item.generation, item.timestamp_ms
        ));
    }
    let temporary = path.with_extension("sc.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(text.as_bytes())?;
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
        };
        store(&path, &saved).expect("stored");
        assert_eq!(load(&path, "test").expect("loads"), saved);
        std::fs::write(&path, "roster=A1\nregime=nine\n").expect("write");
        let error = load(&path, "test").expect_err("damaged");
        assert!(error.contains("line 2"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
