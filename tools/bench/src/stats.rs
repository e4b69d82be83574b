//! Latency histograms and counters per operation kind, the per-second report
//! line, Aerospike-style latency columns and the JSON summary.
//!
//! Latencies are microseconds in an HdrHistogram (1 µs to 60 s, 3
//! significant digits). Callers record each operation's latency from its
//! *intended* start, so a stalled server shows up as latency rather than
//! as fewer samples (no coordinated omission).

use crate::config::LatencyColumns;
use crate::workload::OpKind;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Highest latency tracked exactly; slower operations are recorded as this.
pub const LATENCY_MICROSECONDS_MAX: u64 = 60_000_000;
const KIND_COUNT: usize = OpKind::ALL.len();

/// How one operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// A read of a key that does not exist: not an error for a benchmark.
    NotFound,
    /// The server answered with an error (result code, or -1 for a Redis error reply).
    Error {
        code: i32,
    },
    /// No answer within the timeout, or the connection broke.
    Timeout,
}

/// Counters and a latency histogram for one operation kind.
#[derive(Clone, Debug)]
pub struct KindStats {
    pub latency: Histogram<u64>,
    pub ok: u64,
    pub not_found: u64,
    pub errors: u64,
    pub timeouts: u64,
    /// Records returned by scans.
    pub records: u64,
    pub error_codes: BTreeMap<i32, u64>,
}

impl Default for KindStats {
    fn default() -> KindStats {
        KindStats {
            latency: new_histogram(),
            ok: 0,
            not_found: 0,
            errors: 0,
            timeouts: 0,
            records: 0,
            error_codes: BTreeMap::new(),
        }
    }
}

impl KindStats {
    /// Completed operations of any outcome.
    pub fn count(&self) -> u64 {
        self.ok + self.not_found + self.errors + self.timeouts
    }

    fn add(&mut self, other: &KindStats) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        self.ok += other.ok;
        self.not_found += other.not_found;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
        self.records += other.records;
        for (code, count) in &other.error_codes {
            *self.error_codes.entry(*code).or_insert(0) += count;
        }
    }
}

/// Stats for every operation kind.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    kinds: [KindStats; KIND_COUNT],
}

impl Stats {
    /// Records one finished operation.
    // PERF: hot path
    #[inline]
    pub fn record(&mut self, kind: OpKind, outcome: Outcome, latency_microseconds: u64) {
        let stats = &mut self.kinds[kind.index()];
        stats
            .latency
            .saturating_record(latency_microseconds.clamp(1, LATENCY_MICROSECONDS_MAX));
        match outcome {
            Outcome::Ok => stats.ok += 1,
            Outcome::NotFound => stats.not_found += 1,
            Outcome::Error { code } => {
                stats.errors += 1;
                *stats.error_codes.entry(code).or_insert(0) += 1;
            }
            Outcome::Timeout => stats.timeouts += 1,
        }
    }

    /// Empties every histogram and counter, keeping the allocations.
    pub fn reset(&mut self) {
        for stats in &mut self.kinds {
            stats.latency.reset();
            stats.ok = 0;
            stats.not_found = 0;
            stats.errors = 0;
            stats.timeouts = 0;
            stats.records = 0;
            stats.error_codes.clear();
        }
    }

    pub fn add_records(&mut self, kind: OpKind, records: u64) {
        self.kinds[kind.index()].records += records;
    }

    pub fn kind(&self, kind: OpKind) -> &KindStats {
        &self.kinds[kind.index()]
    }

    pub fn add(&mut self, other: &Stats) {
        for (mine, theirs) in self.kinds.iter_mut().zip(other.kinds.iter()) {
            mine.add(theirs);
        }
    }

    pub fn total_count(&self) -> u64 {
        self.kinds.iter().map(KindStats::count).sum()
    }

    pub fn total_errors(&self) -> u64 {
        self.kinds.iter().map(|k| k.errors).sum()
    }

    pub fn total_timeouts(&self) -> u64 {
        self.kinds.iter().map(|k| k.timeouts).sum()
    }

    /// Kinds that ran at least once, in report order.
    pub fn active_kinds(&self) -> impl Iterator<Item = (OpKind, &KindStats)> {
        OpKind::ALL
            .into_iter()
            .map(|kind| (kind, self.kind(kind)))
            .filter(|(_, stats)| stats.count() > 0)
    }
}

fn new_histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, LATENCY_MICROSECONDS_MAX, 3) {
        Ok(histogram) => histogram,
        Err(error) => unreachable!("constant histogram bounds are valid: {error}"),
    }
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub max: u64,
    pub mean: f64,
}

impl Percentiles {
    pub fn of(histogram: &Histogram<u64>) -> Percentiles {
        Percentiles {
            p50: histogram.value_at_quantile(0.50),
            p90: histogram.value_at_quantile(0.90),
            p99: histogram.value_at_quantile(0.99),
            p99_9: histogram.value_at_quantile(0.999),
            max: histogram.max(),
            mean: (histogram.mean() * 10.0).round() / 10.0,
        }
    }
}

/// Column thresholds in milliseconds: 1, 2^shift, 2^(2·shift), …
fn column_thresholds_milliseconds(columns: LatencyColumns) -> Vec<u64> {
    (0..columns.columns - 1)
        .map(|i| 1u64 << (i * columns.shift))
        .collect()
}

/// The header line `<=1ms >1ms >2ms ...`.
pub fn latency_column_header(columns: LatencyColumns) -> String {
    let thresholds = column_thresholds_milliseconds(columns);
    let mut line = format!("{:<18}", "");
    let _ = write!(line, "{:>8}", "<=1ms");
    for threshold in thresholds {
        let _ = write!(line, "{:>8}", format!(">{threshold}ms"));
    }
    line
}

/// Cumulative percentages for the columns: share of operations at or
/// under 1 ms, then the share above each threshold.
pub fn latency_column_percents(histogram: &Histogram<u64>, columns: LatencyColumns) -> Vec<f64> {
    let total = histogram.len();
    if total == 0 {
        return vec![0.0; columns.columns as usize];
    }
    let above = |milliseconds: u64| -> f64 {
        let at_or_under = histogram.count_between(0, milliseconds * 1000);
        // count_between works on bucket edges; never report more than all.
        100.0 * total.saturating_sub(at_or_under) as f64 / total as f64
    };
    let thresholds = column_thresholds_milliseconds(columns);
    let mut percents = vec![100.0 - above(1)];
    percents.extend(thresholds.into_iter().map(above));
    percents
}

/// One line of latency columns for `label`.
pub fn latency_column_line(
    label: &str,
    histogram: &Histogram<u64>,
    columns: LatencyColumns,
) -> String {
    let mut line = format!("{label:<18}");
    for percent in latency_column_percents(histogram, columns) {
        let _ = write!(line, "{percent:>8.2}");
    }
    line
}

/// The once-a-second line: TPS per kind, errors and timeouts.
pub fn interval_line(elapsed_seconds: u64, interval: &Stats, interval_seconds: f64) -> String {
    let tps = |count: u64| (count as f64 / interval_seconds.max(1e-9)).round() as u64;
    let mut line = format!("[{elapsed_seconds:>4}s]");
    for (kind, stats) in interval.active_kinds() {
        let _ = write!(
            line,
            " {}(tps={} timeouts={} errors={})",
            kind.name(),
            tps(stats.count()),
            stats.timeouts,
            stats.errors
        );
    }
    let _ = write!(line, " total(tps={})", tps(interval.total_count()));
    line
}

/// One second (or the final part second) of the run, for the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct IntervalSummary {
    pub elapsed_seconds: f64,
    pub tps: BTreeMap<&'static str, f64>,
    pub total_tps: f64,
    pub errors: u64,
    pub timeouts: u64,
    pub p99_microseconds: u64,
}

impl IntervalSummary {
    pub fn of(elapsed_seconds: f64, interval: &Stats, interval_seconds: f64) -> IntervalSummary {
        let per_second = |count: u64| round1(count as f64 / interval_seconds.max(1e-9));
        let mut all = new_histogram();
        let mut tps = BTreeMap::new();
        for (kind, stats) in interval.active_kinds() {
            tps.insert(kind.name(), per_second(stats.count()));
            let _ = all.add(&stats.latency);
        }
        IntervalSummary {
            elapsed_seconds: round1(elapsed_seconds),
            tps,
            total_tps: per_second(interval.total_count()),
            errors: interval.total_errors(),
            timeouts: interval.total_timeouts(),
            p99_microseconds: all.value_at_quantile(0.99),
        }
    }
}

/// The end-of-run summary for one operation kind.
#[derive(Clone, Debug, Serialize)]
pub struct KindSummary {
    pub count: u64,
    pub tps: f64,
    pub ok: u64,
    pub not_found: u64,
    pub errors: u64,
    pub timeouts: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub records: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub error_codes: BTreeMap<String, u64>,
    pub latency_microseconds: Percentiles,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl KindSummary {
    pub fn of(stats: &KindStats, seconds: f64) -> KindSummary {
        KindSummary {
            count: stats.count(),
            tps: round1(stats.count() as f64 / seconds.max(1e-9)),
            ok: stats.ok,
            not_found: stats.not_found,
            errors: stats.errors,
            timeouts: stats.timeouts,
            records: stats.records,
            error_codes: stats
                .error_codes
                .iter()
                .map(|(code, count)| (code.to_string(), *count))
                .collect(),
            latency_microseconds: Percentiles::of(&stats.latency),
        }
    }
}

/// Totals over every kind.
#[derive(Clone, Debug, Serialize)]
pub struct TotalSummary {
    pub count: u64,
    pub tps: f64,
    pub errors: u64,
    pub timeouts: u64,
    pub latency_microseconds: Percentiles,
}

impl TotalSummary {
    pub fn of(stats: &Stats, seconds: f64) -> TotalSummary {
        let mut all = new_histogram();
        for (_, kind) in stats.active_kinds() {
            let _ = all.add(&kind.latency);
        }
        TotalSummary {
            count: stats.total_count(),
            tps: round1(stats.total_count() as f64 / seconds.max(1e-9)),
            errors: stats.total_errors(),
            timeouts: stats.total_timeouts(),
            latency_microseconds: Percentiles::of(&all),
        }
    }
}

pub fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// The human-readable end-of-run table.
pub fn summary_text(stats: &Stats, seconds: f64, columns: Option<LatencyColumns>) -> String {
    let mut text = format!(
        "{:<18}{:>10}{:>12}{:>8}{:>9}{:>10}{:>9}{:>9}{:>9}{:>10}{:>10}\n",
        "op",
        "count",
        "tps",
        "errors",
        "timeouts",
        "not_found",
        "p50(us)",
        "p90(us)",
        "p99(us)",
        "p99.9(us)",
        "max(us)"
    );
    for (kind, kind_stats) in stats.active_kinds() {
        let summary = KindSummary::of(kind_stats, seconds);
        let latency = summary.latency_microseconds;
        let _ = writeln!(
            text,
            "{:<18}{:>10}{:>12.1}{:>8}{:>9}{:>10}{:>9}{:>9}{:>9}{:>10}{:>10}",
            kind.name(),
            summary.count,
            summary.tps,
            summary.errors,
            summary.timeouts,
            summary.not_found,
            latency.p50,
            latency.p90,
            latency.p99,
            latency.p99_9,
            latency.max
        );
    }
    if let Some(columns) = columns {
        text.push_str(&latency_column_header(columns));
        text.push('\n');
        for (kind, kind_stats) in stats.active_kinds() {
            text.push_str(&latency_column_line(
                kind.name(),
                &kind_stats.latency,
                columns,
            ));
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_with_reads(latencies_microseconds: impl IntoIterator<Item = u64>) -> Stats {
        let mut stats = Stats::default();
        for latency in latencies_microseconds {
            stats.record(OpKind::Read, Outcome::Ok, latency);
        }
        stats
    }

    #[test]
    fn percentiles_of_known_latencies() {
        // 1..=10_000 µs, once each.
        let stats = stats_with_reads(1..=10_000);
        let p = Percentiles::of(&stats.kind(OpKind::Read).latency);
        let close = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 0.002;
        assert!(close(p.p50, 5_000), "p50 {}", p.p50);
        assert!(close(p.p90, 9_000), "p90 {}", p.p90);
        assert!(close(p.p99, 9_900), "p99 {}", p.p99);
        assert!(close(p.p99_9, 9_990), "p99.9 {}", p.p99_9);
        assert!(close(p.max, 10_000), "max {}", p.max);
        assert!((p.mean - 5_000.5).abs() < 10.0, "mean {}", p.mean);
    }

    #[test]
    fn outcomes_are_counted_apart() {
        let mut stats = Stats::default();
        stats.record(OpKind::Update, Outcome::Ok, 10);
        stats.record(OpKind::Update, Outcome::Error { code: 8 }, 10);
        stats.record(OpKind::Update, Outcome::Error { code: 8 }, 10);
        stats.record(OpKind::Read, Outcome::NotFound, 10);
        stats.record(OpKind::Read, Outcome::Timeout, 2_000_000);
        assert_eq!(stats.total_count(), 5);
        assert_eq!(stats.total_errors(), 2);
        assert_eq!(stats.total_timeouts(), 1);
        assert_eq!(stats.kind(OpKind::Read).not_found, 1);
        assert_eq!(stats.kind(OpKind::Update).error_codes.get(&8), Some(&2));
        let mut merged = Stats::default();
        merged.add(&stats);
        merged.add(&stats);
        assert_eq!(merged.total_count(), 10);
        assert_eq!(merged.kind(OpKind::Update).error_codes.get(&8), Some(&4));
        // Latencies beyond the histogram's range are clamped, not lost.
        let huge = stats_with_reads([LATENCY_MICROSECONDS_MAX * 10]);
        assert_eq!(huge.kind(OpKind::Read).count(), 1);
        assert!(huge.kind(OpKind::Read).latency.max() >= LATENCY_MICROSECONDS_MAX);
    }

    #[test]
    fn latency_columns_are_cumulative() {
        // 50% at 0.5 ms, 30% at 1.5 ms, 15% at 3 ms, 5% at 20 ms.
        let latencies = std::iter::repeat_n(500, 50)
            .chain(std::iter::repeat_n(1_500, 30))
            .chain(std::iter::repeat_n(3_000, 15))
            .chain(std::iter::repeat_n(20_000, 5));
        let stats = stats_with_reads(latencies);
        let columns = LatencyColumns {
            columns: 7,
            shift: 1,
        };
        let percents = latency_column_percents(&stats.kind(OpKind::Read).latency, columns);
        let expected = [50.0, 50.0, 20.0, 5.0, 5.0, 5.0, 0.0];
        assert_eq!(percents.len(), expected.len());
        for (got, want) in percents.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{percents:?}");
        }
        let header = latency_column_header(columns);
        assert!(header.contains("<=1ms"));
        assert!(header.trim_end().ends_with(">32ms"));
        let wide = LatencyColumns {
            columns: 4,
            shift: 3,
        };
        assert!(latency_column_header(wide).trim_end().ends_with(">64ms"));
    }

    #[test]
    fn interval_reporting() {
        let mut interval = Stats::default();
        for _ in 0..300 {
            interval.record(OpKind::Read, Outcome::Ok, 100);
        }
        for _ in 0..100 {
            interval.record(OpKind::Update, Outcome::Ok, 200);
        }
        interval.record(OpKind::Update, Outcome::Timeout, 1_000_000);
        interval.record(OpKind::Update, Outcome::Error { code: 4 }, 300);
        let line = interval_line(3, &interval, 0.5);
        assert_eq!(
            line,
            "[   3s] read(tps=600 timeouts=0 errors=0) update(tps=204 timeouts=1 errors=1) total(tps=804)"
        );
        let summary = IntervalSummary::of(3.0, &interval, 0.5);
        assert_eq!(summary.tps.get("read"), Some(&600.0));
        assert_eq!(summary.total_tps, 804.0);
        assert_eq!(summary.errors, 1);
        assert_eq!(summary.timeouts, 1);
        assert!((199..=201).contains(&summary.p99_microseconds));
        let text = summary_text(&interval, 1.0, None);
        assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("read")));
    }
}
