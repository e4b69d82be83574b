//! Replays the fuzz corpora in `fuzz/corpus/` on stable Rust with the same
//! property checks as the fuzz targets, so an input that once passed and
//! now fails breaks `cargo test`.

use bolide_fuzzing::{
    admin, cluster_forged, cluster_frames, config, connection, execute, replay_corpus, resp, tls,
};

/// Each corpus must hold at least this many inputs: an emptied or moved
/// corpus must fail here, not pass by checking nothing.
const INPUTS_MIN: usize = 20;

#[test]
fn execute_corpus() {
    let inputs = replay_corpus("execute", execute::check);
    assert!(inputs >= INPUTS_MIN, "execute corpus has {inputs} inputs");
}

#[test]
fn connection_corpus() {
    let inputs = replay_corpus("connection", connection::check);
    assert!(
        inputs >= INPUTS_MIN,
        "connection corpus has {inputs} inputs"
    );
}

#[test]
fn config_corpus() {
    let inputs = replay_corpus("config", config::check);
    assert!(inputs >= INPUTS_MIN, "config corpus has {inputs} inputs");
}

#[test]
fn cluster_frames_corpus() {
    let inputs = replay_corpus("cluster_frames", cluster_frames::check);
    assert!(
        inputs >= INPUTS_MIN,
        "cluster_frames corpus has {inputs} inputs"
    );
}

#[test]
fn cluster_forged_corpus() {
    let inputs = replay_corpus("cluster_forged", cluster_forged::check);
    assert!(
        inputs >= INPUTS_MIN,
        "cluster_forged corpus has {inputs} inputs"
    );
}

#[test]
fn admin_corpus() {
    let inputs = replay_corpus("admin", admin::check);
    assert!(inputs >= INPUTS_MIN, "admin corpus has {inputs} inputs");
}

#[test]
fn tls_corpus() {
    let inputs = replay_corpus("tls", tls::check);
    assert!(inputs >= INPUTS_MIN, "tls corpus has {inputs} inputs");
}

#[test]
fn resp_corpus() {
    let inputs = replay_corpus("resp", resp::check);
    assert!(inputs >= INPUTS_MIN, "resp corpus has {inputs} inputs");
}
