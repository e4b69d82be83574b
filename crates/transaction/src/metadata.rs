//! Node metadata kept on disk under the work directory (secondary index
//! definitions, UDF modules): files are replaced atomically, so a crash
//! leaves either the old or the new version, never a torn one.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same
/// directory: written, synced, renamed over `path`, directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = std::path::PathBuf::from(temporary);
    {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Removes `path` (no error if it is already gone) and syncs its directory.
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    }
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_files() {
        let dir = std::env::temp_dir().join(format!("bolide-metadata-{}", std::process::id()));
        let path = dir.join("smd").join("x.smd");
        write_atomic(&path, b"one").expect("write");
        write_atomic(&path, b"two").expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        remove(&path).expect("remove");
        remove(&path).expect("remove again");
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(dir);
    }
}
