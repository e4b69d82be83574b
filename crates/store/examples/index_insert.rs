//! Index insert rate as a cold start sees it: random digests into 4096
//! presized device-layout tables, with and without prefetching ahead.
//!
//! `cargo run --release -p bolide-store --example index_insert -- [records] [ahead]`

use bolide_store::index::{Data, Extent, IndexTable, Layout, RecordMeta};
use bolide_types::Digest;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let records: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let ahead: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let digests: Vec<Digest> = (0..records)
        .map(|_| {
            let mut bytes = [0u8; 20];
            for chunk in bytes.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
            Digest(bytes)
        })
        .collect();
    let mut tables: Vec<IndexTable> = (0..4096)
        .map(|_| {
            let mut t = IndexTable::with_layout(Layout::Device);
            t.reserve(records / 4096 + 4 * (records / 4096).isqrt() + 1);
            t
        })
        .collect();
    let meta = RecordMeta {
        generation: 1,
        ..RecordMeta::default()
    };
    let started = Instant::now();
    for (i, digest) in digests.iter().enumerate() {
        if ahead > 0 {
            if let Some(next) = digests.get(i + ahead) {
                if let Some(t) = tables.get(next.partition_id().index()) {
                    t.slot_addresses().prefetch(next);
                }
            }
        }
        if let Some(table) = tables.get_mut(digest.partition_id().index()) {
            table.upsert_at(
                digest,
                meta,
                Data::OnDevice(Extent {
                    offset: 64,
                    bytes: 160,
                }),
                i as u32,
            );
        }
    }
    let elapsed = started.elapsed();
    let bytes: usize = tables.iter().map(IndexTable::index_bytes).sum();
    println!(
        "{records} inserts, prefetch {ahead} ahead: {:.0} ns each, {:.1} index bytes/record",
        elapsed.as_nanos() as f64 / records as f64,
        bytes as f64 / records as f64
    );
}
