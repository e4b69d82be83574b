//! Latency histograms: per namespace `read`, `write`, `udf`, `pi-query`
//! (scans) and `si-query` (secondary-index queries), and the node's
//! `batch-index`, each measured from the arrival of the request to the
//! moment its answer is written to the socket.
//!
//! Recording costs two reads of the time-stamp counter per answered batch
//! of frames (arrival, written) and two counter additions per request, into the calling event
//! loop's own shard: no lock, no allocation, no locked instruction, no cache
//! line shared with another event loop. Readers (the `latencies:` info
//! command, `/metrics`, the console) add the shards up.
//!
//! Buckets are powers of two of a millisecond, so that the server's
//! `latencies:` columns (`>1ms`, `>2ms`, … `>65536ms`) are exact while
//! sub-millisecond latencies still get ten buckets of their own (a request
//! served from memory takes a few microseconds):
//!
//! ```text
//! bucket 0: [0, 1/1024 ms)   bucket k (1..=26): [2^(k-11), 2^(k-10)) ms   bucket 27: [65536 ms, ∞)
//! ```

use parking_lot::Mutex;
use std::cell::Cell;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Buckets per histogram.
pub const BUCKETS: usize = 28;
/// Bucket `k` holds latencies below `2^(k - BUCKET_MS_SHIFT)` ms.
pub const BUCKET_MS_SHIFT: i32 = 10;
/// `latencies:` threshold columns: `>1ms`, `>2ms`, … `>65536ms`.
pub const LATENCY_COLUMNS: usize = 17;
/// Per histogram in a shard: the bucket counts, then the sum in nanoseconds.
const STRIDE: usize = BUCKETS + 1;
/// Namespace histograms, in the order `latencies:` lists them.
pub const NAMESPACE_KINDS: [&str; 5] = ["read", "write", "udf", "pi-query", "si-query"];
const READ: usize = 0;
const WRITE: usize = 1;
const UDF: usize = 2;
const PI_QUERY: usize = 3;
const SI_QUERY: usize = 4;
/// The node-wide histogram of whole batches.
pub const BATCH_INDEX: &str = "batch-index";
/// Padding between shards, so two event loops never write one cache line.
const SHARD_PADDING: usize = 16;

/// Index of a histogram in [`Latencies`].
pub type HistogramId = u16;

thread_local! {
    /// The shard this thread records into (set by each event loop).
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Every histogram of the node.
pub struct Latencies {
    /// Histogram names: `batch-index`, then `{ns}-read`, `{ns}-write`, …
    names: Vec<String>,
    /// Namespace names, in the store's order.
    namespaces: Vec<Box<[u8]>>,
    shards: Box<[Box<[AtomicU64]>]>,
    ticker: Mutex<Vec<TickState>>,
    /// The request clock: the CPU's time-stamp counter where it is
    /// invariant (a few nanoseconds a read), else the monotonic clock.
    clock: quanta::Clock,
}

/// One histogram's figures, added over all shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    pub buckets: [u64; BUCKETS],
    pub sum_nanos: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// What the ticker remembers of a histogram between two slices.
#[derive(Default)]
struct TickState {
    /// When the previous slice ended (None: not yet active).
    previous: Option<(Instant, u64, [u64; LATENCY_COLUMNS])>,
    /// The last slice, as `latencies:` answers it (with its `;`).
    output: String,
}

impl Latencies {
    /// Histograms for `namespaces`, with one shard per event loop plus one
    /// shared by any other thread.
    pub fn new<'a>(namespaces: impl IntoIterator<Item = &'a str>, event_loops: usize) -> Self {
        let namespaces: Vec<Box<[u8]>> = namespaces
            .into_iter()
            .map(|name| name.as_bytes().into())
            .collect();
        let mut names = vec![BATCH_INDEX.to_owned()];
        for namespace in &namespaces {
            let namespace = String::from_utf8_lossy(namespace);
            for kind in NAMESPACE_KINDS {
                names.push(format!("{{{namespace}}}-{kind}"));
            }
        }
        let cells = names.len() * STRIDE + SHARD_PADDING;
        let shards = (0..=event_loops)
            .map(|_| (0..cells).map(|_| AtomicU64::new(0)).collect())
            .collect();
        let ticker = names
            .iter()
            .map(|_| TickState {
                previous: None,
                output: ";".to_owned(),
            })
            .collect();
        Latencies {
            names,
            namespaces,
            shards,
            ticker: Mutex::new(ticker),
            clock: quanta::Clock::new(),
        }
    }

    /// Makes the calling thread record into shard `index` (an event loop's
    /// number), which it must be the only one to write; other threads share
    /// the last shard.
    pub fn bind_thread(&self, index: usize) {
        SHARD.with(|shard| shard.set(index));
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Which histogram times an AS_MSG request (the body after the proto
    /// header), or None for one that names no known namespace.
    // PERF: hot path. Reads the header and walks the fields once.
    pub fn classify(&self, body: &[u8]) -> Option<HistogramId> {
        use bolide_wire::message::{decode_header, field_type, info1, info2, split_field};
        let (header, mut rest) = decode_header(body).ok()?;
        if header.info1 & info1::BATCH != 0 {
            return Some(0);
        }
        let mut namespace = None;
        let (mut digest, mut udf, mut index) = (false, false, false);
        for _ in 0..header.n_fields {
            let (kind, data, after) = split_field(rest).ok()?;
            rest = after;
            match kind {
                field_type::NAMESPACE => namespace = Some(data),
                field_type::DIGEST => digest = true,
                field_type::UDF_FILENAME => udf = true,
                field_type::INDEX_RANGE | field_type::INDEX_NAME => index = true,
                _ => {}
            }
        }
        let namespace = namespace?;
        let position = self
            .namespaces
            .iter()
            .position(|name| **name == *namespace)?;
        let kind = if !digest {
            if index {
                SI_QUERY
            } else {
                PI_QUERY
            }
        } else if udf {
            UDF
        } else if header.info2 & info2::WRITE != 0 {
            WRITE
        } else if header.info1 & info1::READ != 0 {
            READ
        } else {
            return None;
        };
        HistogramId::try_from(1 + position * NAMESPACE_KINDS.len() + kind).ok()
    }

    /// Adds one request that took `elapsed`.
    pub fn record(&self, id: HistogramId, elapsed: Duration) {
        self.record_nanos(id, u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds one request that took `nanos`.
    // PERF: hot path. Two relaxed additions into this thread's shard.
    pub fn record_nanos(&self, id: HistogramId, nanos: u64) {
        let shared = self.shards.len() - 1;
        let bound = SHARD.with(Cell::get);
        let (shard, owned) = if bound < shared {
            (bound, true)
        } else {
            (shared, false)
        };
        let Some(cells) = self.shards.get(shard) else {
            return;
        };
        let base = usize::from(id) * STRIDE;
        if let (Some(bucket), Some(sum)) = (
            cells.get(base + bucket_of(nanos)),
            cells.get(base + BUCKETS),
        ) {
            add(bucket, 1, owned);
            add(sum, nanos, owned);
        }
    }

    /// One histogram's counts since the node started.
    pub fn counts(&self, id: usize) -> Counts {
        let mut counts = Counts {
            buckets: [0; BUCKETS],
            sum_nanos: 0,
        };
        let base = id * STRIDE;
        for shard in self.shards.iter() {
            for (bucket, total) in counts.buckets.iter_mut().enumerate() {
                *total += shard.get(base + bucket).map_or(0, |c| c.load(Relaxed));
            }
            counts.sum_nanos = counts
                .sum_nanos
                .wrapping_add(shard.get(base + BUCKETS).map_or(0, |c| c.load(Relaxed)));
        }
        counts
    }

    /// Closes a time slice (every `ticker-interval`): each histogram that
    /// has seen a request gets its `latencies:` line for the slice, as the
    /// server writes it: `msec,<ops/sec>,<% over 1ms>,<% over 2ms>,…;`. A
    /// histogram's first slice after it became active is empty (`;`).
    pub fn tick(&self, now: Instant) {
        let mut states = self.ticker.lock();
        for (id, state) in states.iter_mut().enumerate() {
            let counts = self.counts(id);
            let total = counts.total();
            if total == 0 && state.previous.is_none() {
                continue;
            }
            let overs = overs(&counts);
            let mut output = String::new();
            if let Some((then, previous_total, previous_overs)) = state.previous {
                let slice = now.saturating_duration_since(then).as_secs_f64().max(1e-3);
                let operations = total.saturating_sub(previous_total);
                let _ = write!(output, "msec,{:.1}", operations as f64 / slice);
                for (over, previous) in overs.iter().zip(previous_overs) {
                    let percent = if operations == 0 {
                        0.0
                    } else {
                        over.saturating_sub(previous) as f64 * 100.0 / operations as f64
                    };
                    let _ = write!(output, ",{percent:.2}");
                }
            }
            output.push(';');
            state.output = output;
            state.previous = Some((now, total, overs));
        }
    }

    /// `latencies:[hist=NAME]`: the last slice of every histogram, or of the
    /// one named (`{test}-read`, `batch-index`).
    pub fn info_latencies(&self, hist: Option<&str>) -> String {
        let states = self.ticker.lock();
        let mut text = String::new();
        for (name, state) in self.names.iter().zip(states.iter()) {
            if hist.is_some_and(|wanted| wanted != name) {
                continue;
            }
            text.push_str(name);
            text.push(':');
            text.push_str(&state.output);
        }
        if text.is_empty() {
            if let Some(hist) = hist {
                return format!("ERROR:4:bad hist name {hist}");
            }
        }
        text
    }

    /// `latency-histograms:[hist=NAME]` (Bolide's own): the cumulative
    /// counts since start, for `/metrics` and the console:
    /// `NAME:count=N:sum-us=S:buckets=c0,c1,…,c27;` with bucket `k` below
    /// `2^(k-10)` ms (the last unbounded).
    pub fn info_histograms(&self, hist: Option<&str>) -> String {
        let mut text = String::new();
        for (id, name) in self.names.iter().enumerate() {
            if hist.is_some_and(|wanted| wanted != name) {
                continue;
            }
            let counts = self.counts(id);
            let _ = write!(
                text,
                "{name}:count={}:sum-us={}:buckets=",
                counts.total(),
                counts.sum_nanos / 1000
            );
            for (index, count) in counts.buckets.iter().enumerate() {
                if index > 0 {
                    text.push(',');
                }
                let _ = write!(text, "{count}");
            }
            text.push(';');
        }
        if text.is_empty() {
            if let Some(hist) = hist {
                return format!("ERROR:4:bad hist name {hist}");
            }
        }
        text
    }
}

/// Closes a `latencies:` slice every `ticker-interval` seconds, on a
/// thread of its own.
pub fn start_ticker(latencies: std::sync::Arc<Latencies>, interval_seconds: u64) {
    let interval = Duration::from_secs(interval_seconds.max(1));
    let spawned = std::thread::Builder::new()
        .name("ticker".into())
        .spawn(move || loop {
            latencies.tick(Instant::now());
            std::thread::sleep(interval);
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start ticker: latencies: will stay empty");
    }
}

/// Adds to a counter. An event loop's own shard has one writer, so a plain
/// load and store will do (no locked instruction; readers see either value);
/// the shard that other threads share needs the atomic addition.
#[inline]
fn add(counter: &AtomicU64, value: u64, owned: bool) {
    if owned {
        counter.store(counter.load(Relaxed).wrapping_add(value), Relaxed);
    } else {
        counter.fetch_add(value, Relaxed);
    }
}

/// The upper bound of bucket `index` in seconds (infinite for the last).
pub fn bucket_upper_seconds(index: usize) -> f64 {
    if index + 1 >= BUCKETS {
        return f64::INFINITY;
    }
    let exponent = i32::try_from(index).unwrap_or(0) - BUCKET_MS_SHIFT;
    2f64.powi(exponent) / 1000.0
}

/// Bucket of a latency: the highest set bit of the latency in units of
/// 1/1024 ms, capped (anything from about five hours on saturates).
#[inline]
fn bucket_of(nanos: u64) -> usize {
    let units = nanos.saturating_mul(1 << BUCKET_MS_SHIFT) / 1_000_000;
    let bit = (u64::BITS - units.leading_zeros()) as usize;
    bit.min(BUCKETS - 1)
}

/// Requests at or over 1, 2, 4, … 65536 ms.
fn overs(counts: &Counts) -> [u64; LATENCY_COLUMNS] {
    let mut overs = [0; LATENCY_COLUMNS];
    for (column, over) in overs.iter_mut().enumerate() {
        // `>2^c ms` starts at bucket 11 + c.
        let first = 1 + BUCKET_MS_SHIFT as usize + column;
        *over = counts
            .buckets
            .get(first..)
            .map_or(0, |tail| tail.iter().sum());
    }
    overs
}

/// The requests a connection has answered into its output buffer but not
/// yet written, with the time their bytes arrived. Reused for the
/// connection's life, so recording allocates nothing once warm.
pub struct Timing<'n> {
    latencies: &'n Latencies,
    /// Raw clock reading when the bytes arrived.
    arrived: u64,
    pending: Vec<HistogramId>,
    /// Whether the last request answered was timed (pushed to `pending`).
    last_timed: bool,
    streaming: Option<(HistogramId, u64)>,
}

impl<'n> Timing<'n> {
    pub fn new(latencies: &'n Latencies) -> Self {
        Timing {
            latencies,
            arrived: latencies.clock.raw(),
            pending: Vec::with_capacity(64),
            last_timed: false,
            streaming: None,
        }
    }

    /// Bytes just arrived: requests completed by them start now.
    pub fn arrived(&mut self) {
        self.arrived = self.latencies.clock.raw();
    }

    /// A request (AS_MSG body) was answered into the output buffer.
    pub fn answered(&mut self, body: &[u8]) {
        let id = self.latencies.classify(body);
        self.last_timed = id.is_some();
        if let Some(id) = id {
            self.pending.push(id);
        }
    }

    /// The last request answered is a stream job: its time runs until the
    /// job ends ([`Timing::stream_done`]).
    pub fn stream_started(&mut self) {
        if !std::mem::take(&mut self.last_timed) {
            return;
        }
        if let Some(id) = self.pending.pop() {
            self.streaming = Some((id, self.arrived));
        }
    }

    /// The output buffer was written: its requests are done.
    pub fn written(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let clock = &self.latencies.clock;
        let nanos = clock.delta_as_nanos(self.arrived, clock.raw());
        for id in self.pending.drain(..) {
            self.latencies.record_nanos(id, nanos);
        }
    }

    /// The stream job's last chunk was written.
    pub fn stream_done(&mut self) {
        if let Some((id, arrived)) = self.streaming.take() {
            let clock = &self.latencies.clock;
            self.latencies
                .record_nanos(id, clock.delta_as_nanos(arrived, clock.raw()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_wire::message::{encode_field, encode_header, field_type, info1, info2, MsgHeader};

    fn message(info1: u8, info2: u8, fields: &[(u8, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(
            &mut out,
            &MsgHeader {
                info1,
                info2,
                n_fields: fields.len() as u16,
                ..MsgHeader::default()
            },
        );
        for (kind, data) in fields {
            encode_field(&mut out, *kind, data);
        }
        out
    }

    #[test]
    fn buckets_are_powers_of_two_of_a_millisecond() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(976), 0);
        assert_eq!(bucket_of(977), 1);
        assert_eq!(bucket_of(3_000), 2);
        assert_eq!(bucket_of(999_999), 10);
        assert_eq!(bucket_of(1_000_000), 11);
        assert_eq!(bucket_of(1_999_999), 11);
        assert_eq!(bucket_of(2_000_000), 12);
        assert_eq!(bucket_of(65_535_999_999), 26);
        assert_eq!(bucket_of(65_536_000_000), 27);
        assert_eq!(bucket_of(u64::MAX), 27);
        assert_eq!(bucket_upper_seconds(10), 0.001);
        assert_eq!(bucket_upper_seconds(0), 0.001 / 1024.0);
        assert!(bucket_upper_seconds(27).is_infinite());
    }

    #[test]
    fn requests_are_classified_by_namespace_and_kind() {
        let latencies = Latencies::new(["test", "bar"], 2);
        let digest = [0u8; 20];
        let read = message(
            info1::READ,
            0,
            &[
                (field_type::NAMESPACE, b"bar"),
                (field_type::DIGEST, &digest),
            ],
        );
        assert_eq!(latencies.classify(&read), Some(6));
        assert_eq!(latencies.names()[6], "{bar}-read");
        let write = message(
            0,
            info2::WRITE,
            &[
                (field_type::NAMESPACE, b"test"),
                (field_type::DIGEST, &digest),
            ],
        );
        assert_eq!(
            latencies.names()[usize::from(latencies.classify(&write).unwrap())],
            "{test}-write"
        );
        let scan = message(info1::READ, 0, &[(field_type::NAMESPACE, b"test")]);
        assert_eq!(
            latencies.names()[usize::from(latencies.classify(&scan).unwrap())],
            "{test}-pi-query"
        );
        let query = message(
            info1::READ,
            0,
            &[
                (field_type::NAMESPACE, b"test"),
                (field_type::INDEX_RANGE, b"x"),
            ],
        );
        assert_eq!(
            latencies.names()[usize::from(latencies.classify(&query).unwrap())],
            "{test}-si-query"
        );
        let udf = message(
            0,
            info2::WRITE,
            &[
                (field_type::NAMESPACE, b"test"),
                (field_type::DIGEST, &digest),
                (field_type::UDF_FILENAME, b"m"),
            ],
        );
        assert_eq!(
            latencies.names()[usize::from(latencies.classify(&udf).unwrap())],
            "{test}-udf"
        );
        let batch = message(info1::READ | info1::BATCH, 0, &[]);
        assert_eq!(latencies.classify(&batch), Some(0));
        let unknown = message(
            info1::READ,
            0,
            &[
                (field_type::NAMESPACE, b"nope"),
                (field_type::DIGEST, &digest),
            ],
        );
        assert_eq!(latencies.classify(&unknown), None);
        assert_eq!(latencies.classify(&[1, 2, 3]), None);
        let truncated = &read[..read.len() - 3];
        assert_eq!(latencies.classify(truncated), None);
    }

    #[test]
    fn slices_report_rates_and_percentages_over_thresholds() {
        let latencies = Latencies::new(["test"], 1);
        assert_eq!(
            latencies.info_latencies(Some("{test}-read")),
            "{test}-read:;"
        );
        latencies.bind_thread(0);
        let start = Instant::now();
        latencies.record(1, Duration::from_micros(100));
        latencies.tick(start);
        // Active, but the first slice is empty, as on the real server.
        assert_eq!(
            latencies.info_latencies(Some("{test}-read")),
            "{test}-read:;"
        );
        for _ in 0..6 {
            latencies.record(1, Duration::from_micros(300));
        }
        latencies.record(1, Duration::from_micros(1500));
        latencies.record(1, Duration::from_millis(5));
        latencies.tick(start + Duration::from_secs(2));
        let answer = latencies.info_latencies(Some("{test}-read"));
        let values: Vec<&str> = answer
            .trim_start_matches("{test}-read:")
            .trim_end_matches(';')
            .split(',')
            .collect();
        assert_eq!(values.len(), 2 + LATENCY_COLUMNS);
        assert_eq!(values[0], "msec");
        assert_eq!(values[1], "4.0");
        assert_eq!(&values[2..6], ["25.00", "12.50", "12.50", "0.00"]);
        assert!(values[6..].iter().all(|value| *value == "0.00"));
        // Untouched histograms stay empty; unknown names are an error.
        assert!(latencies
            .info_latencies(None)
            .starts_with("batch-index:;{test}-read:msec,4.0,"));
        assert!(latencies
            .info_latencies(Some("nope"))
            .starts_with("ERROR:4:"));
        let raw = latencies.info_histograms(Some("{test}-read"));
        assert!(
            raw.starts_with(
                "{test}-read:count=9:sum-us=8400:buckets=0,0,0,0,0,0,0,1,0,6,0,1,0,1,0,"
            ),
            "{raw}"
        );
    }
}
