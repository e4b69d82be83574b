//! What timing a request costs on the event loop: classifying an AS_MSG
//! (header and fields), one clock read per answered batch and the three
//! relaxed additions into the shard, in nanoseconds per request.
//!
//!     cargo run --release -p bolide-server --example latency_cost
//!
//! Prints the best of several rounds (the machine is shared; the best round
//! is the one least disturbed), for batches of 1 and of 16 requests (the
//! pipelined case shares one clock read per batch).

use bolide_server::latency::{Latencies, Timing};
use bolide_wire::message::{encode_field, encode_header, field_type, info1, MsgHeader};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 7;
const REQUESTS: usize = 2_000_000;

fn read_message() -> Vec<u8> {
    let mut body = Vec::new();
    encode_header(
        &mut body,
        &MsgHeader {
            info1: info1::READ | info1::GET_ALL,
            n_fields: 3,
            ..MsgHeader::default()
        },
    );
    encode_field(&mut body, field_type::NAMESPACE, b"test");
    encode_field(&mut body, field_type::SET, b"testset");
    encode_field(&mut body, field_type::DIGEST, &[7u8; 20]);
    body
}

fn main() {
    let latencies = Latencies::new(["test", "bar"], 1);
    latencies.bind_thread(0);
    let body = read_message();
    for batch in [1usize, 16] {
        let mut best = f64::MAX;
        for _ in 0..ROUNDS {
            let mut timing = Timing::new(&latencies);
            let started = Instant::now();
            for _ in 0..REQUESTS / batch {
                timing.arrived();
                for _ in 0..batch {
                    timing.answered(black_box(&body));
                }
                timing.written();
            }
            let nanos = started.elapsed().as_nanos() as f64 / REQUESTS as f64;
            best = best.min(nanos);
        }
        println!("batch of {batch:>2}: {best:.1} ns per request (classify + clock + record), best of {ROUNDS} rounds of {REQUESTS}");
    }
    parts(&latencies, &body);
    let raw = latencies.info_histograms(Some("{test}-read"));
    let counted: u64 = raw
        .split(':')
        .find_map(|field| field.strip_prefix("count="))
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    assert!(
        counted >= (ROUNDS * REQUESTS * 2) as u64,
        "every request counted"
    );
}

#[allow(dead_code)]
fn parts(latencies: &Latencies, body: &[u8]) {
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let mut sum = 0usize;
        for _ in 0..REQUESTS {
            sum += latencies.classify(black_box(body)).map_or(0, usize::from);
        }
        black_box(sum);
        best = best.min(started.elapsed().as_nanos() as f64 / REQUESTS as f64);
    }
    println!("classify alone: {best:.1} ns");
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..REQUESTS {
            latencies.record(
                black_box(1),
                black_box(std::time::Duration::from_nanos(40_000)),
            );
        }
        best = best.min(started.elapsed().as_nanos() as f64 / REQUESTS as f64);
    }
    println!("record alone: {best:.1} ns");
}
