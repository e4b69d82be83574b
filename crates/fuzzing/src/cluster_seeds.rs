//! Seed inputs for the `cluster_frames` and `cluster_forged` targets, made
//! from real traffic: the frames three state machines send each other while
//! they form a cluster ([`Harness`] with `record_traffic`), fabric messages
//! of every kind, and forged variants of both (other senders, other cluster
//! names, damaged and cut frames).
//!
//! `BOLIDE_SEEDS_DIR=/tmp/seeds cargo test -p bolide-fuzzing --test cluster
//! -- --ignored write_cluster_seeds` writes them to
//! `/tmp/seeds/{cluster_frames,cluster_forged}`; a fuzzing run started from
//! there and merged (`-merge=1`) into `fuzz/corpus/<target>` keeps what adds
//! coverage (see docs/robustness.md).

use crate::cluster_harness::{heartbeat_endpoint, Harness, CLUSTER_NAME, MEMBERS};
use bolide_cluster::codec;
use bolide_cluster::fabric::{Channel, Fabric, Image, ProxyFraming};
use bolide_cluster::message::{Message, NamespaceSummary, Pulse, PROTOCOL};
use bolide_cluster::metadata::Item;
use bolide_cluster::{Envelope, NodeId};
use std::collections::BTreeMap;

const OUTSIDER: NodeId = 0x51;
const ABOVE: NodeId = 0xFFFF_0000_0000_0001;

/// The frames the three nodes sent while forming, a few of each kind.
fn formation_frames() -> Vec<Vec<u8>> {
    let mut harness = Harness::new();
    harness.record_traffic = true;
    harness.form();
    let mut by_kind: BTreeMap<u8, Vec<Vec<u8>>> = BTreeMap::new();
    for frame in harness.traffic {
        let kind = frame[5];
        let kept = by_kind.entry(kind).or_default();
        if kept.len() < 3 && !kept.contains(&frame) {
            kept.push(frame);
        }
    }
    by_kind.into_values().flatten().collect()
}

fn fabric_frames() -> Vec<Vec<u8>> {
    let image = Image {
        digest: [7; 20],
        generation: 3,
        last_update_ms: 1_700_000_000_000,
        void_time: 0,
        set_name: b"demo",
        record: Some(b"\x00\x01bin"),
    };
    let messages = [
        Fabric::Hello {
            node: MEMBERS[0],
            cluster_name: CLUSTER_NAME,
            channel: Channel::Requests,
        },
        Fabric::Hello {
            node: OUTSIDER,
            cluster_name: "other",
            channel: Channel::Bulk,
        },
        Fabric::ReplicaWrite {
            id: 1,
            namespace: "test",
            cluster_key: 0x55,
            regime: 0,
            image,
        },
        Fabric::Ack { id: 1, code: 0 },
        Fabric::Proxy {
            id: 2,
            timeout_ms: 1000,
            framing: ProxyFraming::Row(3),
            body: b"\x16\x03\x00\x00",
        },
        Fabric::ProxyAnswer {
            id: 2,
            redirect: Some(MEMBERS[1]),
            answer: b"answer",
        },
        Fabric::Fetch {
            id: 3,
            namespace: "test",
            digest: [9; 20],
            cluster_key: 0x1234,
        },
        Fabric::FetchAnswer {
            id: 3,
            image: Some(Image {
                record: None,
                ..image
            }),
        },
        Fabric::MigrateStart {
            id: 4,
            namespace: "test",
            pid: 4095,
            key: 0x55,
        },
        Fabric::MigrateRecords {
            id: 5,
            namespace: "test",
            pid: 1,
            key: 0x55,
            images: vec![image, image],
        },
        Fabric::MigrateDone {
            id: 6,
            namespace: "test",
            pid: 1,
            key: 0x55,
        },
    ];
    messages
        .iter()
        .map(|message| {
            let mut frame = Vec::new();
            message.encode(&mut frame);
            frame
        })
        .collect()
}

fn decode(frame: &[u8]) -> Option<Envelope> {
    let (header, body, _) = codec::split_frame(frame).ok()??;
    Envelope::decode(header.kind, body).ok()
}

fn forged_pulse(from: NodeId, cluster_name: &str, key: u64) -> Envelope {
    Envelope {
        from,
        message: Message::Pulse(Pulse {
            cluster_name: cluster_name.into(),
            protocol: PROTOCOL,
            boot_id: 5,
            heartbeat: heartbeat_endpoint(7),
            fabric: heartbeat_endpoint(8),
            service: vec![heartbeat_endpoint(9)],
            redis: Vec::new(),
            adjacency: MEMBERS
                .iter()
                .enumerate()
                .map(|(index, &node)| (node, heartbeat_endpoint(index)))
                .collect(),
            cluster_key: key,
            succession: if key == 0 { Vec::new() } else { vec![from] },
            namespaces: vec![NamespaceSummary {
                name: "test".into(),
                replication_factor: 2,
            }],
            clock_ms: 0,
        }),
    }
}

/// One `cluster_forged` record.
fn record(selector: u8, envelope: &Envelope) -> Vec<u8> {
    let mut frame = Vec::new();
    envelope.encode(&mut frame);
    let body = &frame[codec::FRAME_HEADER_BYTES..];
    let mut out = vec![selector, frame[5]];
    out.extend_from_slice(&(body.len() as u16).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// `cluster_frames` seeds: single frames, streams, cut and damaged ones.
pub fn frames_seeds() -> Vec<Vec<u8>> {
    let mut frames = formation_frames();
    frames.extend(fabric_frames());
    let mut seeds: Vec<Vec<u8>> = frames.clone();
    seeds.push(frames.concat());
    for frame in frames.iter().step_by(3) {
        seeds.push(frame[..frame.len() / 2].to_vec());
        let mut damaged = frame.clone();
        let at = damaged.len() - 1;
        damaged[at] ^= 0x40;
        seeds.push(damaged);
        let mut version = frame.clone();
        version[4] = 2;
        seeds.push(version);
    }
    let mut huge = frames[0][..codec::FRAME_HEADER_BYTES].to_vec();
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    seeds.push(huge);
    seeds
}

/// `cluster_forged` seeds: the cluster's own messages from other senders,
/// and forged messages of every kind.
pub fn forged_seeds() -> Vec<Vec<u8>> {
    let formed = Harness::formed();
    let key = formed.snapshot()[0].0;
    let mut seeds = Vec::new();
    for frame in formation_frames() {
        let Some(envelope) = decode(&frame) else {
            continue;
        };
        for from in [OUTSIDER, ABOVE, MEMBERS[2]] {
            let forged = Envelope {
                from,
                message: envelope.message.clone(),
            };
            seeds.push(record(3 | (4 << 2), &forged));
        }
    }
    let truncation = Envelope {
        from: OUTSIDER,
        message: Message::Metadata {
            items: vec![Item {
                module: "truncate".into(),
                key: "test".into(),
                value: (1u64 << 62).to_string(),
                generation: 9,
                timestamp_ms: 1 << 62,
                deleted: false,
            }],
            sync: true,
            ticket: 0,
        },
    };
    let all_done = Envelope {
        from: OUTSIDER,
        message: Message::AllDone {
            key,
            namespace: "test".into(),
            pid: 7,
        },
    };
    let join = Envelope {
        from: OUTSIDER,
        message: Message::JoinRequest,
    };
    seeds.push(record(3, &truncation));
    seeds.push(record(1 | (10 << 2), &all_done));
    seeds.push(
        [
            record(3 | (2 << 2), &forged_pulse(OUTSIDER, CLUSTER_NAME, 0)),
            record(3 | (2 << 2), &truncation),
            record(2 | (20 << 2), &join),
        ]
        .concat(),
    );
    seeds.push(
        [
            record(3 | (2 << 2), &forged_pulse(ABOVE, "other", 0x77)),
            record(3 | (63 << 2), &forged_pulse(ABOVE, CLUSTER_NAME, 0x77)),
        ]
        .concat(),
    );
    seeds
}

/// Writes both targets' seeds under `directory`, one file each.
pub fn write_seeds(directory: &std::path::Path) -> std::io::Result<()> {
    for (target, seeds) in [
        ("cluster_frames", frames_seeds()),
        ("cluster_forged", forged_seeds()),
    ] {
        let dir = directory.join(target);
        std::fs::create_dir_all(&dir)?;
        for (index, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{index:03}")), seed)?;
        }
    }
    Ok(())
}
