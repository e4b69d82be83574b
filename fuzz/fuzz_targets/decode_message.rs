//! Any bytes as an AS_MSG body: the node answers with exactly one
//! well-formed response frame and never panics.
#![no_main]

use bolide_store::{NamespaceConfig, Store};
use bolide_transaction::{execute, Scratch};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static STORE: OnceLock<Store> = OnceLock::new();

fuzz_target!(|body: &[u8]| {
    let store = STORE.get_or_init(|| Store::new(vec![NamespaceConfig::with_name("test")]));
    let mut out = Vec::new();
    execute(store, body, &mut out, &mut Scratch::default());
    let (_, total) = bolide_wire::frame_length(&out).expect("valid frame").expect("complete frame");
    assert_eq!(total, out.len());
    assert!(bolide_wire::Message::decode(&out[8..]).is_ok());
    // Frames, too: arbitrary bytes never panic the frame decoder.
    let _ = bolide_wire::frame_length(body);
});
