//! Dependencies point down: each crate may use only the crates below it
//! (ARCHITECTURE.md, "Layers"). This test fails on an upward or sideways
//! dependency between Bolide crates.

use std::path::Path;

const LAYERS: &[(&str, &[&str])] = &[
    ("types", &[]),
    ("wire", &["bolide-types"]),
    ("store", &["bolide-types"]),
    // Beside the store: neither knows the other.
    ("cluster", &["bolide-types"]),
    // The value algebra: values in, values out; no store, no locks.
    ("particles", &["bolide-types", "bolide-wire"]),
    ("udf", &["bolide-types", "bolide-wire"]),
    // Access control: beside the transaction layer, which it knows nothing of.
    ("security", &["bolide-types", "bolide-wire"]),
    (
        "transaction",
        &[
            "bolide-types",
            "bolide-wire",
            "bolide-store",
            "bolide-cluster",
            "bolide-particles",
            "bolide-udf",
        ],
    ),
    // The Redis front end: typed requests, no sockets.
    (
        "redis",
        &[
            "bolide-types",
            "bolide-wire",
            "bolide-store",
            "bolide-transaction",
        ],
    ),
    (
        "server",
        &[
            "bolide-types",
            "bolide-wire",
            "bolide-store",
            "bolide-cluster",
            "bolide-particles",
            "bolide-udf",
            "bolide-transaction",
            "bolide-security",
            "bolide-redis",
        ],
    ),
    // The simulator drives the cluster state machine alone.
    ("sim", &["bolide-types", "bolide-cluster"]),
    (
        "fuzzing",
        &[
            "bolide-types",
            "bolide-wire",
            "bolide-store",
            "bolide-cluster",
            "bolide-transaction",
            "bolide-server",
            "bolide-security",
            "bolide-redis",
        ],
    ),
];

#[test]
fn dependencies_point_down() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, allowed) in LAYERS {
        let manifest =
            std::fs::read_to_string(crates.join(name).join("Cargo.toml")).expect("manifest");
        let mut section = String::new();
        for line in manifest.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_owned();
                continue;
            }
            if section != "[dependencies]" {
                continue;
            }
            let Some(dependency) = line.split(['=', '.', ' ']).next() else {
                continue;
            };
            if dependency.starts_with("bolide-") {
                assert!(
                    allowed.contains(&dependency),
                    "crate {name} must not depend on {dependency}"
                );
            }
        }
    }
}

#[test]
fn tools_talk_to_the_server_through_the_wire_crate_only() {
    for tool in ["bench", "cli"] {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tools")
            .join(tool)
            .join("Cargo.toml");
        let manifest = std::fs::read_to_string(manifest).expect("tool manifest");
        for forbidden in ["bolide-store", "bolide-transaction", "bolide-server"] {
            assert!(
                !manifest.contains(forbidden),
                "tools/{tool} must not depend on {forbidden}"
            );
        }
    }
}

#[test]
fn nothing_depends_on_the_fuzzing_checks() {
    for (name, allowed) in LAYERS {
        assert!(
            !allowed.contains(&"bolide-fuzzing"),
            "crate {name} must not depend on bolide-fuzzing"
        );
    }
}

#[test]
fn every_crate_is_checked() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for entry in std::fs::read_dir(crates).expect("crates dir") {
        let name = entry
            .expect("entry")
            .file_name()
            .into_string()
            .expect("utf-8");
        assert!(
            LAYERS.iter().any(|(layer, _)| *layer == name),
            "crate {name} has no place in LAYERS"
        );
    }
}
