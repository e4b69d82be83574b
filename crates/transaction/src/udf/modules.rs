//! Registered UDF modules: node-wide metadata, kept on disk under the work
//! directory (`udf/lua/<file name>`, one file per module, plus
//! `smd/udf.smd` with the generation), reloaded at start.
//!
//! [`UdfModules::modules`], [`UdfModules::apply_set`] and
//! [`UdfModules::apply_remove`] are the metadata interface the cluster
//! layer can use; `udf-put` and `udf-remove` go through them too.

use crate::metadata;
use bolide_udf::Sources;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest module accepted (the server's limit).
pub const MODULE_BYTES_MAX: usize = 1024 * 1024;
/// Longest module file name.
pub const FILE_NAME_BYTES_MAX: usize = 127;
const GENERATION_FILE: &str = "smd/udf.smd";
const MODULE_DIR: &str = "udf/lua";

/// One registered module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub name: String,
    pub source: Arc<[u8]>,
    /// SHA-1 of the source, as 40 hex digits (`udf-list`).
    pub hash: String,
}

/// The node's UDF modules.
pub struct UdfModules {
    dir: Option<PathBuf>,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    generation: u64,
    modules: BTreeMap<String, Module>,
}

/// Whether `name` may name a module: `<base>.<extension>`, at most
/// [`FILE_NAME_BYTES_MAX`] bytes of letters, digits, `_`, `-` and `.`,
/// not starting or ending with a dot.
pub fn valid_name(name: &str) -> bool {
    let Some(dot) = name.find('.') else {
        return false;
    };
    dot > 0
        && !name.ends_with('.')
        && name.len() <= FILE_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl UdfModules {
    /// Reads the modules kept in `work_directory` (none without one).
    pub fn open(work_directory: Option<&Path>) -> Result<UdfModules, String> {
        let mut state = State::default();
        if let Some(dir) = work_directory {
            let modules = dir.join(MODULE_DIR);
            match std::fs::read_dir(&modules) {
                Ok(entries) => {
                    for entry in entries {
                        let entry = entry.map_err(|e| format!("{}: {e}", modules.display()))?;
                        let name = entry.file_name().to_string_lossy().into_owned();
                        if !valid_name(&name) || name.ends_with(".tmp") {
                            continue;
                        }
                        let source = std::fs::read(entry.path())
                            .map_err(|e| format!("cannot read {}: {e}", entry.path().display()))?;
                        state.modules.insert(name.clone(), module(name, source));
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(format!("cannot read {}: {error}", modules.display())),
            }
            match std::fs::read_to_string(dir.join(GENERATION_FILE)) {
                Ok(text) => {
                    state.generation = text
                        .trim()
                        .strip_prefix("generation ")
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| format!("{}: bad generation", GENERATION_FILE))?
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(format!("cannot read {GENERATION_FILE}: {error}")),
            }
        }
        Ok(UdfModules {
            dir: work_directory.map(Path::to_path_buf),
            state: RwLock::new(state),
        })
    }

    /// The modules and their generation (metadata interface).
    pub fn modules(&self) -> (u64, Vec<Module>) {
        let state = self.state.read();
        (state.generation, state.modules.values().cloned().collect())
    }

    pub fn get(&self, name: &str) -> Option<Module> {
        self.state.read().modules.get(name).cloned()
    }

    /// Sets a module (metadata interface); kept on disk before it applies.
    pub fn apply_set(&self, name: &str, source: Vec<u8>) -> Result<(), String> {
        if !valid_name(name) {
            return Err(format!("bad module name '{name}'"));
        }
        let mut state = self.state.write();
        if let Some(dir) = &self.dir {
            let path = dir.join(MODULE_DIR).join(name);
            metadata::write_atomic(&path, &source)
                .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
            self.write_generation(dir, state.generation + 1)?;
        }
        state.generation += 1;
        state
            .modules
            .insert(name.to_owned(), module(name.to_owned(), source));
        tracing::info!(module = name, "UDF module registered");
        Ok(())
    }

    /// Removes a module (metadata interface).
    pub fn apply_remove(&self, name: &str) -> Result<(), String> {
        let mut state = self.state.write();
        if !state.modules.contains_key(name) {
            return Ok(());
        }
        if let Some(dir) = &self.dir {
            let path = dir.join(MODULE_DIR).join(name);
            metadata::remove(&path)
                .map_err(|error| format!("cannot remove {}: {error}", path.display()))?;
            self.write_generation(dir, state.generation + 1)?;
        }
        state.generation += 1;
        state.modules.remove(name);
        tracing::info!(module = name, "UDF module removed");
        Ok(())
    }

    fn write_generation(&self, dir: &Path, generation: u64) -> Result<(), String> {
        metadata::write_atomic(
            &dir.join(GENERATION_FILE),
            format!("generation {generation}\n").as_bytes(),
        )
        .map_err(|error| format!("cannot write {GENERATION_FILE}: {error}"))
    }
}

impl Sources for UdfModules {
    fn generation(&self) -> u64 {
        self.state.read().generation
    }

    fn source(&self, filename: &str) -> Option<Arc<[u8]>> {
        self.state
            .read()
            .modules
            .get(filename)
            .map(|module| module.source.clone())
    }
}

fn module(name: String, source: Vec<u8>) -> Module {
    let hash = sha1_hex(&source);
    Module {
        name,
        source: Arc::from(source),
        hash,
    }
}

/// SHA-1 as lower-case hex: `udf-list` reports module hashes with it.
pub fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_known_digests() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            sha1_hex(&[b'a'; 1000]),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
    }

    #[test]
    fn names_are_checked() {
        for good in ["a.lua", "my_mod-2.lua", "x.y"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "",
            "nodot",
            ".lua",
            "a.",
            "../x.lua",
            "a/b.lua",
            "a;b.lua",
            &"a".repeat(130),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn modules_survive_a_reopen() {
        let dir = std::env::temp_dir().join(format!("bolide-udf-modules-{}", std::process::id()));
        let modules = UdfModules::open(Some(&dir)).expect("open");
        modules
            .apply_set("a.lua", b"function f() end".to_vec())
            .expect("set");
        modules.apply_set("b.lua", b"-- b".to_vec()).expect("set");
        modules.apply_remove("b.lua").expect("remove");
        let again = UdfModules::open(Some(&dir)).expect("reopen");
        let (generation, list) = again.modules();
        assert_eq!(generation, 3);
        assert_eq!(list.len(), 1);
        assert_eq!(&*list[0].source, b"function f() end");
        assert!(modules.apply_set("../evil.lua", Vec::new()).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
