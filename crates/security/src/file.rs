//! The node's copy of the catalog: `security.json` in `work-directory`.
//!
//! ```text
//! bolide-security 1 <crc32c of the rest, 8 hex digits>\n
//! [{"key":…,"value":…,"generation":…,"timestamp_ms":…,"deleted":…}, …]\n
//! ```
//!
//! Written whole on every change: to a temporary file in the same
//! directory (mode 0600: it holds password hashes and the session key),
//! synced, renamed over the old one, and the directory synced, so a crash
//! leaves either the old file or the new one. A file that does not read
//! back exactly (header, checksum, every entry) stops the node: falling
//! back to a fresh catalog would bring back `admin`/`admin`.

use crate::catalog::Entry;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "security.json";
const MAGIC: &str = "bolide-security";
const VERSION: u32 = 1;
/// The largest file read (10,000 users and roles fit many times over).
pub const FILE_BYTES_MAX: u64 = 256 << 20;

pub fn path_in(work_directory: &Path) -> PathBuf {
    work_directory.join(FILE_NAME)
}

/// The entries in `path`; None if there is no file.
pub fn read(path: &Path) -> Result<Option<Vec<Entry>>, String> {
    let bytes = match std::fs::metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("{}: {error}", path.display())),
        Ok(metadata) if metadata.len() > FILE_BYTES_MAX => {
            return Err(format!(
                "{}: larger than {FILE_BYTES_MAX} bytes",
                path.display()
            ))
        }
        Ok(_) => std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?,
    };
    decode(&bytes)
        .map(Some)
        .map_err(|reason| format!("{}: {reason}", path.display()))
}

/// Writes `entries` to `path` atomically.
pub fn write<'e>(path: &Path, entries: impl IntoIterator<Item = &'e Entry>) -> std::io::Result<()> {
    let bytes = encode(entries);
    let directory = path.parent().unwrap_or(Path::new("."));
    let temporary = directory.join(format!(".{FILE_NAME}.tmp"));
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temporary)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(directory)?.sync_all()
}

pub fn encode<'e>(entries: impl IntoIterator<Item = &'e Entry>) -> Vec<u8> {
    let list: Vec<Value> = entries
        .into_iter()
        .map(|entry| {
            json!({
                "key": entry.key,
                "value": entry.value,
                "generation": entry.generation,
                "timestamp_ms": entry.timestamp_ms,
                "deleted": entry.deleted,
            })
        })
        .collect();
    let mut body = Value::Array(list).to_string();
    body.push('\n');
    let mut text = format!(
        "{MAGIC} {VERSION} {:08x}\n",
        crc32c::crc32c(body.as_bytes())
    );
    text.push_str(&body);
    text.into_bytes()
}

pub fn decode(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    let (header, body) = text
        .split_once('\n')
        .ok_or_else(|| "no header line".to_owned())?;
    let mut words = header.split(' ');
    if words.next() != Some(MAGIC) {
        return Err("not a Bolide security file".to_owned());
    }
    let version = words.next().and_then(|v| v.parse::<u32>().ok());
    if version != Some(VERSION) {
        return Err(format!("unknown format version {version:?}"));
    }
    let checksum = words
        .next()
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or_else(|| "bad checksum field".to_owned())?;
    if words.next().is_some() {
        return Err("bad header line".to_owned());
    }
    if crc32c::crc32c(body.as_bytes()) != checksum {
        return Err("checksum mismatch (damaged file)".to_owned());
    }
    let list: Value = serde_json::from_str(body).map_err(|error| error.to_string())?;
    let list = list.as_array().ok_or_else(|| "not a list".to_owned())?;
    list.iter()
        .enumerate()
        .map(|(index, item)| entry(item).ok_or_else(|| format!("entry {index} is malformed")))
        .collect()
}

fn entry(item: &Value) -> Option<Entry> {
    Some(Entry {
        key: item.get("key")?.as_str()?.to_owned(),
        value: item.get("value")?.as_str()?.to_owned(),
        generation: u32::try_from(item.get("generation")?.as_u64()?).ok()?,
        timestamp_ms: item.get("timestamp_ms")?.as_u64()?,
        deleted: item.get("deleted")?.as_bool()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::password::client_hash;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "bolide-security-{name}-{}-{}",
            std::process::id(),
            crate::random_u64()
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn writes_and_reads_back_exactly() {
        let dir = scratch("roundtrip");
        let path = path_in(&dir);
        assert_eq!(read(&path), Ok(None));
        let catalog = Catalog::bootstrap(&client_hash("admin"), 5);
        write(&path, catalog.entries()).expect("write");
        let entries = read(&path).expect("read").expect("present");
        assert_eq!(entries, catalog.entries().cloned().collect::<Vec<_>>());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!dir.join(format!(".{FILE_NAME}.tmp")).exists());
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn damage_is_an_error_never_a_fresh_start() {
        let catalog = Catalog::bootstrap(&client_hash("admin"), 5);
        let bytes = encode(catalog.entries());
        assert!(decode(&bytes).is_ok());
        for at in [0, 5, 20, 40, bytes.len() / 2, bytes.len() - 3] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x01;
            assert!(decode(&bad).is_err(), "flip at {at}");
        }
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 2] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode(b"bolide-security 2 00000000\n[]\n").is_err());
        let empty_body = "[]\n";
        let good_empty = format!(
            "bolide-security 1 {:08x}\n{empty_body}",
            crc32c::crc32c(empty_body.as_bytes())
        );
        assert_eq!(decode(good_empty.as_bytes()), Ok(Vec::new()));
    }
}
