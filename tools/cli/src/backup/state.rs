//! The state file an interrupted backup resumes from (`--continue`).
//!
//! JSON, rewritten whole (to a temporary name, then renamed) at every
//! commit: when a file is closed in a directory backup, every 64 MiB in a
//! single-file backup, and when the backup stops. It names the files that
//! are complete and, for each partition not yet finished, the digest of
//! the last record those files hold (records of a partition come in
//! descending digest order, so the rest of it comes after that digest).
//! A file the state does not name was being written when the backup
//! stopped: `--continue` removes it (or, for one output file, cuts the
//! file back to the length the state gives) and scans again from the
//! digests.

use base64::Engine;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const FORMAT: &str = "bolide-backup-state 1";

/// Where a partition stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cursor {
    /// Not in this backup.
    Out,
    /// To do, after this digest if any.
    Todo(Option<[u8; 20]>),
    Done,
}

#[derive(Clone, Debug)]
pub struct State {
    pub path: PathBuf,
    pub namespace: String,
    /// `directory:<path>` or `file:<path>`.
    pub output: String,
    /// The options that change what is written, which a resumed backup
    /// must repeat.
    pub options: String,
    pub prefix: String,
    pub next_file: u32,
    pub files: Vec<String>,
    /// Committed length of the single output file.
    pub file_length: u64,
    pub cursors: Vec<Cursor>,
    pub records: u64,
    pub bytes: u64,
}

impl State {
    pub fn save(&self) -> Result<(), String> {
        let encoder = &base64::engine::general_purpose::STANDARD;
        let partitions: Vec<Value> = self
            .cursors
            .iter()
            .enumerate()
            .filter_map(|(pid, cursor)| match cursor {
                Cursor::Todo(digest) => Some(json!([
                    pid,
                    digest
                        .map(|digest| encoder.encode(digest))
                        .unwrap_or_default()
                ])),
                _ => None,
            })
            .collect();
        let value = json!({
            "format": FORMAT,
            "namespace": self.namespace,
            "output": self.output,
            "options": self.options,
            "prefix": self.prefix,
            "next_file": self.next_file,
            "files": self.files,
            "file_length": self.file_length,
            "partitions": partitions,
            "records": self.records,
            "bytes": self.bytes,
        });
        let text = serde_json::to_string_pretty(&value).map_err(|error| error.to_string())?;
        let temporary = self.path.with_extension("state-new");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &self.path)
        };
        write().map_err(|error| {
            format!(
                "cannot save the state file {}: {error}",
                self.path.display()
            )
        })
    }

    pub fn load(path: &Path) -> Result<State, String> {
        let bad = |what: &str| format!("{}: not a backup state file ({what})", path.display());
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        let value: Value = serde_json::from_str(&text).map_err(|error| bad(&error.to_string()))?;
        if value["format"] != FORMAT {
            return Err(bad("unknown format"));
        }
        let string = |key: &str| {
            value[key]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad(key))
        };
        let number = |key: &str| value[key].as_u64().ok_or_else(|| bad(key));
        let mut cursors = vec![Cursor::Done; 4096];
        let decoder = &base64::engine::general_purpose::STANDARD;
        for entry in value["partitions"]
            .as_array()
            .ok_or_else(|| bad("partitions"))?
        {
            let pid = entry[0]
                .as_u64()
                .filter(|&pid| pid < 4096)
                .ok_or_else(|| bad("partition id"))?;
            let digest = match entry[1].as_str().ok_or_else(|| bad("digest"))? {
                "" => None,
                text => Some(
                    decoder
                        .decode(text)
                        .ok()
                        .and_then(|bytes| <[u8; 20]>::try_from(bytes).ok())
                        .ok_or_else(|| bad("digest"))?,
                ),
            };
            cursors[pid as usize] = Cursor::Todo(digest);
        }
        let files = value["files"]
            .as_array()
            .ok_or_else(|| bad("files"))?
            .iter()
            .map(|name| name.as_str().map(str::to_owned).ok_or_else(|| bad("files")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(State {
            path: path.to_owned(),
            namespace: string("namespace")?,
            output: string("output")?,
            options: string("options")?,
            prefix: string("prefix")?,
            next_file: u32::try_from(number("next_file")?).map_err(|_| bad("next_file"))?,
            files,
            file_length: number("file_length")?,
            cursors,
            records: number("records")?,
            bytes: number("bytes")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_and_loads() {
        let dir = std::env::temp_dir().join(format!("bolide-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut cursors = vec![Cursor::Out; 4096];
        cursors[1] = Cursor::Todo(None);
        cursors[2] = Cursor::Todo(Some([7; 20]));
        cursors[3] = Cursor::Done;
        let state = State {
            path: dir.join("test.asb.state"),
            namespace: "test".to_owned(),
            output: "directory:/x".to_owned(),
            options: "o".to_owned(),
            prefix: "test".to_owned(),
            next_file: 3,
            files: vec!["test_00000.asb".to_owned()],
            file_length: 0,
            cursors,
            records: 10,
            bytes: 100,
        };
        state.save().expect("save");
        let back = State::load(&state.path).expect("load");
        assert_eq!(back.cursors[1], Cursor::Todo(None));
        assert_eq!(back.cursors[2], Cursor::Todo(Some([7; 20])));
        // Partitions not to do (done or never in) load as done.
        assert_eq!(back.cursors[0], Cursor::Done);
        assert_eq!(back.files, state.files);
        assert_eq!(back.next_file, 3);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
