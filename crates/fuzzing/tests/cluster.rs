//! The cluster checks on hand-made inputs: forged messages a formed cluster
//! must ignore, protocol paths that may change it (so the checks can fail),
//! and codec damage.

use bolide_cluster::codec;
use bolide_cluster::message::{Message, NamespaceSummary, ProposalId, Pulse, PROTOCOL};
use bolide_cluster::metadata::Item;
use bolide_cluster::{Endpoint, Envelope, NodeId};
use bolide_fuzzing::cluster_harness::{heartbeat_endpoint, Harness, CLUSTER_NAME, MEMBERS};
use bolide_fuzzing::{cluster_forged, cluster_frames};

const OUTSIDER: NodeId = 0x51;
const ABOVE: NodeId = 0xFFFF_0000_0000_0001;

fn truncation(from: NodeId) -> Envelope {
    Envelope {
        from,
        message: Message::Metadata {
            items: vec![Item {
                module: "truncate".into(),
                key: "test".into(),
                value: (1u64 << 62).to_string(),
                generation: u32::MAX,
                timestamp_ms: 1 << 62,
                deleted: false,
            }],
            sync: false,
            ticket: 0,
        },
    }
}

fn pulse(from: NodeId, cluster_name: &str, heartbeat: Endpoint, key: u64) -> Envelope {
    Envelope {
        from,
        message: Message::Pulse(Pulse {
            cluster_name: cluster_name.into(),
            protocol: PROTOCOL,
            boot_id: 5,
            heartbeat,
            fabric: heartbeat_endpoint(9),
            service: Vec::new(),
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

/// Records of the `cluster_forged` input format.
fn records(envelopes: &[(u8, Envelope)]) -> Vec<u8> {
    let mut input = Vec::new();
    for (selector, envelope) in envelopes {
        let mut frame = Vec::new();
        envelope.encode(&mut frame);
        let (header, body, _) = codec::split_frame(&frame).expect("valid").expect("whole");
        input.push(*selector);
        input.push(header.kind);
        input.extend_from_slice(&(body.len() as u16).to_le_bytes());
        input.extend_from_slice(body);
    }
    input
}

fn settle(harness: &mut Harness, steps: usize) {
    for _ in 0..steps {
        harness.step();
        harness.check_invariants();
    }
}

#[test]
fn the_harness_forms_one_cluster_of_three() {
    let harness = Harness::formed();
    let snapshot = harness.snapshot();
    assert!(snapshot
        .iter()
        .all(|node| node.0 != 0 && node.0 == snapshot[0].0));
    assert!(snapshot.iter().all(|node| node.1 == [0xA3, 0xA2, 0xA1]));
    assert_eq!(harness.principal(), 0xA3);
    harness.check_invariants();
}

#[test]
fn metadata_from_outside_the_cluster_is_ignored() {
    let mut harness = Harness::formed();
    let before = harness.snapshot();
    harness.deliver_forged(3, &truncation(OUTSIDER));
    // A node of the cluster's name that pulses (below the principal) is
    // heard, and still not a member.
    harness.deliver_forged(3, &pulse(OUTSIDER, CLUSTER_NAME, heartbeat_endpoint(7), 0));
    harness.deliver_forged(3, &truncation(OUTSIDER));
    settle(&mut harness, 50);
    assert_eq!(harness.changes_since_formed(), &[] as &[String]);
    assert_eq!(harness.snapshot(), before);
    // From a member it is applied (on the node it reaches): the check
    // sees changes.
    harness.deliver_forged(0, &truncation(MEMBERS[1]));
    assert_eq!(
        harness.changes_since_formed().len(),
        1,
        "{:?}",
        harness.changes_since_formed()
    );
}

#[test]
fn clustering_messages_from_outside_the_cluster_change_nothing() {
    let mut harness = Harness::formed();
    let before = harness.snapshot();
    let key = before[0].0;
    let members: Vec<NodeId> = vec![0xA3, 0xA2, 0xA1];
    let id = ProposalId {
        sequence: 1 << 40,
        proposer: ABOVE,
    };
    let mut with_above = vec![ABOVE];
    with_above.extend(&members);
    let forged = [
        pulse(ABOVE, "another-cluster", heartbeat_endpoint(7), 0x1234),
        Envelope {
            from: OUTSIDER,
            message: Message::JoinRequest,
        },
        Envelope {
            from: OUTSIDER,
            message: Message::Move { principal: ABOVE },
        },
        Envelope {
            from: ABOVE,
            message: Message::Propose {
                id,
                key: 0x77,
                succession: with_above.clone(),
            },
        },
        Envelope {
            from: ABOVE,
            message: Message::Commit {
                id,
                key: 0x77,
                succession: with_above,
            },
        },
        Envelope {
            from: OUTSIDER,
            message: Message::AllDone {
                key,
                namespace: "test".into(),
                pid: 7,
            },
        },
    ];
    for envelope in &forged {
        harness.deliver_forged(3, envelope);
        settle(&mut harness, 5);
    }
    settle(&mut harness, 300);
    assert_eq!(harness.snapshot(), before);
    assert_eq!(harness.changes_since_formed(), &[] as &[String]);
    // The same through the fuzz target's check.
    let input: Vec<(u8, Envelope)> = forged.into_iter().map(|e| (3 | (5 << 2), e)).collect();
    cluster_forged::check(&records(&input));
}

#[test]
fn a_compatible_principal_above_ours_takes_the_cluster_by_the_protocol() {
    // The merge rule: a principal that hears a higher one of a compatible
    // cluster dissolves its own. Forged pulses can do it; the checks must
    // see the change (and the fuzz target treats it as a real path).
    let mut harness = Harness::formed();
    let before = harness.snapshot();
    for _ in 0..30 {
        harness.deliver_forged(
            3,
            &pulse(ABOVE, CLUSTER_NAME, heartbeat_endpoint(7), 0x1234),
        );
        settle(&mut harness, 2);
    }
    assert_ne!(harness.snapshot(), before);
    // Silent again, the real nodes form a cluster of their own again.
    settle(&mut harness, 1500);
    assert!(harness.settled(), "{:?}", harness.snapshot());
}

#[test]
fn forged_pulses_under_many_ids_are_bounded() {
    let mut harness = Harness::formed();
    let before = harness.snapshot();
    for node in 0..600u64 {
        let name = if node % 2 == 0 { CLUSTER_NAME } else { "other" };
        let endpoint = Endpoint {
            host: "192.0.2.1".into(),
            port: node as u16,
        };
        // Orphans (nobody merges into them), all above the principal.
        harness.deliver_forged(
            3,
            &pulse(0x1_0000 + node * 0x1_0000_0000, name, endpoint, 0),
        );
    }
    harness.check_invariants();
    settle(&mut harness, 300);
    assert_eq!(harness.snapshot(), before);
}

#[test]
fn frames_checks_take_valid_damaged_and_cut_streams() {
    let mut stream = Vec::new();
    truncation(OUTSIDER).encode(&mut stream);
    pulse(OUTSIDER, CLUSTER_NAME, heartbeat_endpoint(1), 0).encode(&mut stream);
    cluster_frames::check(&stream);
    for cut in 0..stream.len() {
        cluster_frames::check(&stream[..cut]);
    }
    let mut damaged = stream.clone();
    damaged[20] ^= 1;
    cluster_frames::check(&damaged);
    damaged[4] = 9;
    cluster_frames::check(&damaged);
    cluster_frames::check(&[0xFF; 64]);
}

#[test]
fn seeds_pass_their_checks() {
    for seed in bolide_fuzzing::cluster_seeds::frames_seeds() {
        cluster_frames::check(&seed);
    }
    for seed in bolide_fuzzing::cluster_seeds::forged_seeds() {
        cluster_forged::check(&seed);
    }
}

/// Writes the seed inputs (see `bolide_fuzzing::cluster_seeds`).
#[test]
#[ignore = "writes files: run by hand with BOLIDE_SEEDS_DIR set"]
fn write_cluster_seeds() {
    let directory = std::env::var_os("BOLIDE_SEEDS_DIR").expect("BOLIDE_SEEDS_DIR");
    bolide_fuzzing::cluster_seeds::write_seeds(std::path::Path::new(&directory)).expect("written");
}

#[test]
fn a_fork_continues_as_the_original_does() {
    let mut original = Harness::new();
    original.form();
    let mut fork = original.fork();
    for harness in [&mut original, &mut fork] {
        // A merge into a forged principal, then back: new cluster keys
        // from each node's entropy.
        for _ in 0..30 {
            harness.deliver_forged(
                3,
                &pulse(ABOVE, CLUSTER_NAME, heartbeat_endpoint(7), 0x1234),
            );
            harness.step();
        }
        for _ in 0..1500 {
            harness.step();
        }
    }
    assert_eq!(original.snapshot(), fork.snapshot());
    assert!(original.settled());
    assert_ne!(original.snapshot(), Harness::formed().snapshot());
}

/// On how many nodes the item with `key` was applied since forming.
fn applied_everywhere(harness: &Harness, key: &str) -> usize {
    harness
        .changes_since_formed()
        .iter()
        .filter(|change| change.contains("applied metadata") && change.contains(key))
        .count()
}

#[test]
fn a_shared_item_is_settled_once_every_member_has_applied_it() {
    let mut harness = Harness::formed();
    let now = harness.now_ms;
    let ticket = harness.nodes[0]
        .machine
        .share_metadata("security", "user|zoe", "{}", false, 1_000, now);
    assert_ne!(ticket, 0);
    assert!(
        harness.shared.is_empty(),
        "settled before any member answered"
    );
    harness.step();
    // Applied on the three nodes, then settled on the node that set it.
    assert_eq!(applied_everywhere(&harness, "user|zoe"), 3);
    assert_eq!(harness.shared, vec![(0, ticket)]);
    // A plain set_metadata waits for nobody.
    harness.nodes[1]
        .machine
        .set_metadata("security", "user|yuri", "{}", false, 1_001);
    settle(&mut harness, 5);
    assert_eq!(applied_everywhere(&harness, "user|yuri"), 3);
    assert_eq!(harness.shared, vec![(0, ticket)]);
}

#[test]
fn a_shared_item_no_member_acknowledges_is_settled_at_its_deadline() {
    let mut harness = Harness::formed();
    harness.lose_metadata_acks = true;
    let start = harness.now_ms;
    let ticket = harness.nodes[0].machine.share_metadata(
        "security",
        "role|writer",
        "{}",
        false,
        1_000,
        start,
    );
    let deadline = start + bolide_cluster::node::SHARE_WAIT_MS;
    while harness.shared.is_empty() {
        assert!(harness.now_ms <= deadline, "not settled at its deadline");
        harness.step();
    }
    assert!(harness.now_ms >= deadline, "settled before its deadline");
    assert_eq!(harness.shared, vec![(0, ticket)]);
    assert_eq!(applied_everywhere(&harness, "role|writer"), 3);
    // Every member still there: the deadline settled it, nobody left.
    assert_eq!(harness.nodes[0].machine.succession().len(), 3);
}
