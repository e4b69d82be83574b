//! The node every check runs against: namespace `test` in memory with ten
//! records in set `demo` (user keys `k0`…`k9`, so requests captured from
//! the official clients for those keys find them), with integer, string,
//! float, blob, list, map, boolean and GeoJSON bins; and a frozen clock,
//! so an input answers the same bytes on every run.

use bolide_server::config::Config;
use bolide_server::node::Node;
use bolide_transaction::{execute, Outcome, Scratch};
use bolide_types::particle;
use bolide_wire::message::{encode_field, encode_header, encode_op, MsgHeader};
use bolide_wire::{field_type, info2, op_type};
use ripemd::{Digest as _, Ripemd160};

/// The frozen time: 2025-11-05 in milliseconds since 2010-01-01.
pub const FROZEN_MS: u64 = 500_000_000_000;
pub const NAMESPACE: &str = "test";
pub const SET: &str = "demo";
/// Records in the fixture.
pub const RECORDS: usize = 10;

/// A fresh node with the fixture's records, on a frozen clock (this thread).
pub fn node() -> Node {
    bolide_types::freeze_thread_clock(Some(FROZEN_MS));
    let node = Node::new(Config::default()).expect("fixture node");
    node.serve_alone();
    let mut out = Vec::new();
    let mut scratch = Scratch::default();
    for index in 0..RECORDS {
        out.clear();
        let outcome = execute_here(&node, &put_body(index), &mut out, &mut scratch);
        assert!(matches!(outcome, Outcome::Answered));
        assert_eq!(out.get(13), Some(&0), "fixture write {index} failed");
    }
    node
}

/// Runs a request on `node` as its connections do (the node serves every
/// partition itself).
pub fn execute_here(node: &Node, body: &[u8], out: &mut Vec<u8>, scratch: &mut Scratch) -> Outcome {
    let service = &node.cluster.cluster;
    let routing = service.routing.load_full();
    let cluster = bolide_transaction::Cluster::new(&routing, &service.gates);
    execute(
        node.store(),
        &cluster,
        &bolide_transaction::Caller::client(None),
        body,
        out,
        scratch,
    )
}

/// The digest of a string user key, as the clients compute it.
pub fn digest(set: &str, key: &str) -> [u8; 20] {
    let mut hasher = Ripemd160::new();
    hasher.update(set.as_bytes());
    hasher.update([particle::STRING]);
    hasher.update(key.as_bytes());
    hasher.finalize().into()
}

/// The write request of fixture record `index`.
pub fn put_body(index: usize) -> Vec<u8> {
    let key = format!("k{index}");
    let mut ops = Vec::new();
    let mut n_ops = 0u16;
    let mut op = |particle_type: u8, name: &[u8], value: &[u8]| {
        encode_op(&mut ops, op_type::WRITE, particle_type, name, value);
        n_ops += 1;
    };
    op(
        particle::INTEGER,
        b"i",
        &(index as i64 * 7 - 20).to_be_bytes(),
    );
    op(particle::STRING, b"s", format!("value-{index}").as_bytes());
    op(particle::FLOAT, b"f", &(index as f64 / 4.0).to_be_bytes());
    op(particle::BLOB, b"b", &[index as u8; 5]);
    // [index, "a", [1, 2]] and {"a": index, "b": ["x"]}; strings inside
    // lists and maps carry their particle type as a first byte.
    op(
        particle::LIST,
        b"l",
        &[0x93, index as u8, 0xa2, 3, b'a', 0x92, 1, 2],
    );
    op(
        particle::MAP,
        b"m",
        &[
            0x82,
            0xa2,
            3,
            b'a',
            index as u8,
            0xa2,
            3,
            b'b',
            0x91,
            0xa2,
            3,
            b'x',
        ],
    );
    op(particle::BOOL, b"t", &[u8::from(index.is_multiple_of(2))]);
    let point = format!(
        "{{\"type\":\"Point\",\"coordinates\":[{}.5,{}.25]}}",
        index, index
    );
    let mut geo = vec![0, 0, 0];
    geo.extend_from_slice(point.as_bytes());
    op(particle::GEOJSON, b"g", &geo);

    let mut body = Vec::new();
    let header = MsgHeader {
        info2: info2::WRITE,
        n_fields: 4,
        n_ops,
        ..MsgHeader::default()
    };
    encode_header(&mut body, &header);
    encode_field(&mut body, field_type::NAMESPACE, NAMESPACE.as_bytes());
    encode_field(&mut body, field_type::SET, SET.as_bytes());
    let mut user_key = vec![particle::STRING];
    user_key.extend_from_slice(key.as_bytes());
    encode_field(&mut body, field_type::KEY, &user_key);
    encode_field(&mut body, field_type::DIGEST, &digest(SET, &key));
    body.extend_from_slice(&ops);
    body
}
