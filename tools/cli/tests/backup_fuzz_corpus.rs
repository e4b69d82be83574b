//! Replays the `asb` fuzz corpus (`fuzz/corpus/asb/`) on stable Rust with
//! the fuzz target's own checks (`bolide_backup_format::fuzz::check`), so an
//! input that passed once and fails now breaks `cargo test`.

use std::path::Path;

/// An emptied or moved corpus must fail here, not pass by checking nothing.
const INPUTS_MIN: usize = 20;

#[test]
fn asb_corpus() {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/asb");
    let mut paths: Vec<_> = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .collect();
    paths.sort();
    for path in &paths {
        let input = std::fs::read(path).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| bolide_backup_format::fuzz::check(&input));
        assert!(outcome.is_ok(), "{} fails the checks", path.display());
    }
    assert!(
        paths.len() >= INPUTS_MIN,
        "asb corpus has {} inputs",
        paths.len()
    );
}
