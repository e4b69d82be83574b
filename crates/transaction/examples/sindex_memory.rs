//! Heap bytes a secondary index holds per entry, counted by a global
//! allocator (no other allocation happens while it is measured):
//!
//! - built over existing records (`populate`, the background build and the
//!   cold start), and
//! - kept up to date write by write (entries inserted one at a time, as the
//!   record observer does for writes after the index exists).
//!
//! Each figure is printed beside the index's `used_bytes` statistic.
//!
//! `cargo run --release -p bolide-transaction --example sindex_memory [records]`

use bolide_store::{record, Namespace, NamespaceConfig, RecordMeta};
use bolide_transaction::sindex::definition::{Collection, Definition, KeyType};
use bolide_transaction::sindex::SecondaryIndex;
use bolide_types::Digest;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is only a statistic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn definition() -> Definition {
    Definition {
        namespace: "test".into(),
        name: "v".into(),
        set: None,
        bin: "v".into(),
        key_type: KeyType::Numeric,
        collection: Collection::Default,
        context: None,
        expression: None,
    }
}

/// A digest spread like a real one.
fn digest(n: u64) -> Digest {
    let mut bytes = [0u8; 20];
    let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    bytes[..8].copy_from_slice(&h.to_le_bytes());
    bytes[8..16].copy_from_slice(&n.to_le_bytes());
    Digest(bytes)
}

fn main() {
    let records: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let namespace = Namespace::new(NamespaceConfig::with_name("test"));
    let mut bytes = Vec::new();
    for n in 0..records {
        let d = digest(n);
        bytes.clear();
        let value = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64).to_be_bytes();
        record::encode(
            &mut bytes,
            None,
            [record::Bin {
                name: b"v",
                particle_type: bolide_types::particle::INTEGER,
                value: &value,
            }]
            .into_iter(),
        );
        let meta = RecordMeta {
            generation: 1,
            ..RecordMeta::default()
        };
        namespace
            .write(&d)
            .put(&d, meta, &bytes)
            .expect("memory put");
    }

    let before = ALLOCATED.load(Relaxed);
    let built = SecondaryIndex::new(definition());
    built.populate(&namespace);
    let bulk = ALLOCATED.load(Relaxed) - before;
    assert_eq!(built.entries(), records);
    let bulk_reported = built.used_bytes();
    drop(built);

    let before = ALLOCATED.load(Relaxed);
    let kept = SecondaryIndex::new(definition());
    for n in 0..records {
        let d = digest(n);
        let bval = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64;
        kept.update(d.partition_id().index(), &d, &[], &[bval]);
    }
    let incremental = ALLOCATED.load(Relaxed) - before;
    assert_eq!(kept.entries(), records);
    let incremental_reported = kept.used_bytes();

    println!("records {records}");
    println!(
        "built over existing records: {bulk} bytes, {:.1} bytes per entry (used_bytes {bulk_reported}, {:+.1}%)",
        bulk as f64 / records as f64,
        (bulk_reported as f64 / bulk as f64 - 1.0) * 100.0
    );
    println!(
        "entries inserted one by one: {incremental} bytes, {:.1} bytes per entry (used_bytes {incremental_reported}, {:+.1}%)",
        incremental as f64 / records as f64,
        (incremental_reported as f64 / incremental as f64 - 1.0) * 100.0
    );
}
