//! Property checks for hostile input, shared by the fuzz targets under
//! `fuzz/` (run with cargo-fuzz on nightly) and the corpus replay test
//! (`tests/corpus.rs`, stable, part of `cargo test`), so both check exactly
//! the same things:
//!
//! - [`execute::check`]: any AS_MSG body, decoded and executed against a
//!   node with a few records; stream jobs (scans, large batches) run to
//!   the end. The answer is well-formed frames of well-formed messages with
//!   known result codes; a batch answers every row and ends with LAST; a
//!   scan ends with LAST.
//! - [`connection::check`]: any byte stream a client could send on one
//!   connection, answered by the server's own frame loop, once whole and
//!   once split at every byte boundary; both give the same answers and the
//!   same end, and the answers are well-formed.
//! - [`config::check`]: any configuration text either parses into a
//!   configuration that keeps the documented bounds or fails with an error
//!   naming a line of the text.
//! - [`admin::check`]: any admin (proto type 2) message bodies, answered
//!   by a secured node's access control on an anonymous connection and on
//!   one logged in as `admin`: every answer is well-formed with a known
//!   code, nothing but LOGIN and AUTHENTICATE works without a session, and
//!   the users and roles stay reloadable.
//! - [`tls::check`]: any bytes a client sends to a TLS listener, fed to a
//!   rustls connection with the node's own context (each kind of
//!   listener: standard, mutual, names and blacklist, between nodes), or
//!   a certificate chain put to its verifier and to PKI login: whole
//!   records back, no handshake completed without the keys, only genuine
//!   admitted certificates accepted.
//! - [`resp::check`]: any bytes on the Redis port, taken off the front by
//!   the RESP parser: each request takes bytes and stays within Redis's
//!   limits, a prefix of a request is no other request, and a request
//!   re-encoded parses back the same; the end is a protocol error or an
//!   incomplete request.
//! - [`cluster_frames::check`]: any bytes as a stream of node-to-node
//!   frames: refused headers name the rule they break, whatever decodes
//!   round-trips, and a damaged checksum is always refused.
//! - [`cluster_forged::check`]: messages from a forged peer delivered to a
//!   formed three-node cluster (real state machines on an in-memory
//!   network, [`cluster_harness`]): no panic, every node's membership and
//!   routing stay well-formed, and unless the forged peer took one of the
//!   protocol's own paths (a member's id, a pulse of a compatible node),
//!   the cluster, its metadata and its partitions do not change.
//!
//! The top of the layers: depends on every Bolide crate, and nothing
//! depends on it.
#![forbid(unsafe_code)]

pub mod admin;
pub mod answers;
pub mod cluster_forged;
pub mod cluster_frames;
pub mod cluster_harness;
pub mod cluster_seeds;
pub mod config;
pub mod connection;
pub mod execute;
pub mod fixture;
pub mod resp;
pub mod tls;

/// Runs `check` over every file of `fuzz/corpus/<target>` and returns how
/// many there were.
pub fn replay_corpus(target: &str, check: impl Fn(&[u8])) -> usize {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .collect();
    paths.sort();
    for path in &paths {
        let bytes = std::fs::read(path).expect("corpus file");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&bytes)));
        if let Err(panic) = result {
            eprintln!("corpus file {} fails its check", path.display());
            std::panic::resume_unwind(panic);
        }
    }
    paths.len()
}
