//! The workload engine: which operation comes next and on which key.
//!
//! Protocol-free: it yields [`Operation`]s that the Aerospike and Redis
//! codecs turn into requests, so both servers see the same sequence shape.
//! Workloads are Aerospike's `I` and `RU,<read%>` and YCSB core workloads
//! A–F with their request distributions (zipfian, uniform, latest).

use rand::{Rng, RngExt};
use rand_distr::{Distribution as _, Zipf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Kinds of operation, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl OpKind {
    pub const ALL: [OpKind; 5] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "read_modify_write",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Share of each operation kind, in whole percent (they add up to 100).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    pub read_percent: u32,
    pub update_percent: u32,
    pub insert_percent: u32,
    pub scan_percent: u32,
    pub read_modify_write_percent: u32,
}

impl Mix {
    /// Inserts only (the `I` load phase).
    pub const INSERT_ALL: Mix = Mix::new(0, 0, 100, 0, 0);

    const fn new(read: u32, update: u32, insert: u32, scan: u32, rmw: u32) -> Mix {
        Mix {
            read_percent: read,
            update_percent: update,
            insert_percent: insert,
            scan_percent: scan,
            read_modify_write_percent: rmw,
        }
    }

    fn total(&self) -> u32 {
        self.read_percent
            + self.update_percent
            + self.insert_percent
            + self.scan_percent
            + self.read_modify_write_percent
    }

    /// The kind for a uniform draw in 0..100.
    fn pick(&self, draw: u32) -> OpKind {
        let mut bound = 0;
        for (kind, percent) in [
            (OpKind::Read, self.read_percent),
            (OpKind::Update, self.update_percent),
            (OpKind::Insert, self.insert_percent),
            (OpKind::Scan, self.scan_percent),
            (OpKind::ReadModifyWrite, self.read_modify_write_percent),
        ] {
            bound += percent;
            if draw < bound {
                return kind;
            }
        }
        OpKind::Read
    }
}

/// How existing keys are chosen for reads, updates and scans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// YCSB's scrambled zipfian: a few hot keys, spread over the key space.
    Zipfian,
    /// YCSB's latest: recently inserted keys are the hot ones.
    Latest,
    /// Each key once, in order (the `I` load phase).
    Sequential,
}

/// A parsed `-w` workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    pub mix: Mix,
    pub distribution: Distribution,
    pub zipfian_constant: f64,
    pub scan_length_max: u32,
}

impl Workload {
    /// `I`, `RU[,<read%>]`, or YCSB `A`–`F` (also `ycsb-a` …).
    pub fn parse(
        text: &str,
        zipfian_constant: f64,
        scan_length_max: u32,
    ) -> Result<Workload, String> {
        if !(zipfian_constant > 0.0 && zipfian_constant < 100.0) {
            return Err(format!(
                "zipfian constant {zipfian_constant} must be above 0"
            ));
        }
        if scan_length_max == 0 {
            return Err("scan length max must be at least 1".to_string());
        }
        let upper = text.trim().to_ascii_uppercase();
        let name = upper.strip_prefix("YCSB-").unwrap_or(&upper);
        let mut parts = name.split(',');
        let head = parts.next().unwrap_or("");
        let argument = parts.next();
        if parts.next().is_some() {
            return Err("too many comma-separated values".to_string());
        }
        let (mix, distribution) = match (head, argument) {
            ("I", None) => (Mix::INSERT_ALL, Distribution::Sequential),
            ("RU", read) => {
                let read = match read {
                    Some(read) => read
                        .trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|r| *r <= 100)
                        .ok_or("read percent must be 0 to 100")?,
                    None => 50,
                };
                (Mix::new(read, 100 - read, 0, 0, 0), Distribution::Uniform)
            }
            ("A", None) => (Mix::new(50, 50, 0, 0, 0), Distribution::Zipfian),
            ("B", None) => (Mix::new(95, 5, 0, 0, 0), Distribution::Zipfian),
            ("C", None) => (Mix::new(100, 0, 0, 0, 0), Distribution::Zipfian),
            ("D", None) => (Mix::new(95, 0, 5, 0, 0), Distribution::Latest),
            ("E", None) => (Mix::new(0, 0, 5, 95, 0), Distribution::Zipfian),
            ("F", None) => (Mix::new(50, 0, 0, 0, 50), Distribution::Zipfian),
            _ => {
                return Err("expected I, RU,<read%> or a YCSB workload A, B, C, D, E, F".to_string())
            }
        };
        debug_assert_eq!(mix.total(), 100);
        Ok(Workload {
            mix,
            distribution,
            zipfian_constant,
            scan_length_max,
        })
    }

    /// The load phase: insert every key once, then stop.
    pub fn is_load(&self) -> bool {
        self.distribution == Distribution::Sequential
    }
}

/// One operation to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operation {
    pub kind: OpKind,
    pub key: u64,
    /// Records wanted, for scans; 0 otherwise.
    pub scan_length: u32,
}

/// Keys inserted so far, shared by every connection of a run.
#[derive(Debug, Default)]
pub struct InsertCursor {
    inserted: AtomicU64,
}

impl InsertCursor {
    pub fn inserted(&self) -> u64 {
        self.inserted.load(Ordering::Relaxed)
    }
}

/// Draws operations for one connection.
pub struct Generator {
    workload: Workload,
    key_start: u64,
    key_count: u64,
    zipf: Option<Zipf<f64>>,
    inserts: Arc<InsertCursor>,
}

impl Generator {
    pub fn new(
        workload: Workload,
        key_start: u64,
        key_count: u64,
        inserts: Arc<InsertCursor>,
    ) -> Generator {
        assert!(key_count > 0);
        let zipf = (workload.distribution == Distribution::Zipfian)
            .then(|| Zipf::new(key_count as f64, workload.zipfian_constant).ok())
            .flatten();
        Generator {
            workload,
            key_start,
            key_count,
            zipf,
            inserts,
        }
    }

    /// The next operation, or `None` once a load phase has inserted every key.
    // PERF: hot path
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Option<Operation> {
        let kind = self.workload.mix.pick(rng.random_range(0..100));
        let key = match kind {
            OpKind::Insert => self.insert_key()?,
            _ => self.existing_key(rng),
        };
        let scan_length = match kind {
            OpKind::Scan => rng.random_range(1..=self.workload.scan_length_max),
            _ => 0,
        };
        Some(Operation {
            kind,
            key,
            scan_length,
        })
    }

    fn insert_key(&mut self) -> Option<u64> {
        let offset = self.inserts.inserted.fetch_add(1, Ordering::Relaxed);
        if self.workload.is_load() {
            // The load phase fills exactly key_start..key_start+key_count.
            (offset < self.key_count).then_some(self.key_start + offset)
        } else {
            // Run-phase inserts (D, E) add keys after the loaded ones.
            Some(self.key_start + self.key_count + offset)
        }
    }

    fn existing_key<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        let offset = match self.workload.distribution {
            Distribution::Uniform | Distribution::Sequential => rng.random_range(0..self.key_count),
            Distribution::Zipfian => match &self.zipf {
                Some(zipf) => {
                    let rank = zipf.sample(rng) as u64;
                    fnv1a_64(rank) % self.key_count
                }
                None => rng.random_range(0..self.key_count),
            },
            Distribution::Latest => {
                let known = self.key_count + self.inserts.inserted();
                match Zipf::new(known as f64, self.workload.zipfian_constant) {
                    // rank 1 is the newest key.
                    Ok(zipf) => known - (zipf.sample(rng) as u64).clamp(1, known),
                    Err(_) => rng.random_range(0..known),
                }
            }
        };
        self.key_start + offset
    }
}

/// FNV-1a over the eight bytes of `value`, as YCSB scrambles zipfian ranks.
fn fnv1a_64(value: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value.to_le_bytes().iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use std::collections::HashMap;

    const SAMPLES: usize = 200_000;

    fn generator(text: &str, key_count: u64) -> Generator {
        let workload = Workload::parse(text, 0.99, 100).expect("workload");
        Generator::new(workload, 1000, key_count, Arc::default())
    }

    fn kind_shares(text: &str) -> HashMap<OpKind, f64> {
        let mut generator = generator(text, 10_000);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = HashMap::new();
        for _ in 0..SAMPLES {
            let op = generator.next(&mut rng).expect("run phase never ends");
            *counts.entry(op.kind).or_insert(0usize) += 1;
        }
        counts
            .into_iter()
            .map(|(kind, count)| (kind, count as f64 / SAMPLES as f64))
            .collect()
    }

    fn assert_share(shares: &HashMap<OpKind, f64>, kind: OpKind, expected: f64) {
        let got = shares.get(&kind).copied().unwrap_or(0.0);
        assert!(
            (got - expected).abs() < 0.01,
            "{kind:?}: {got} vs {expected}"
        );
    }

    #[test]
    fn mixes_match_their_ratios() {
        let shares = kind_shares("RU,80");
        assert_share(&shares, OpKind::Read, 0.80);
        assert_share(&shares, OpKind::Update, 0.20);
        let shares = kind_shares("B");
        assert_share(&shares, OpKind::Read, 0.95);
        assert_share(&shares, OpKind::Update, 0.05);
        let shares = kind_shares("D");
        assert_share(&shares, OpKind::Read, 0.95);
        assert_share(&shares, OpKind::Insert, 0.05);
        let shares = kind_shares("E");
        assert_share(&shares, OpKind::Scan, 0.95);
        assert_share(&shares, OpKind::Insert, 0.05);
        let shares = kind_shares("ycsb-f");
        assert_share(&shares, OpKind::Read, 0.50);
        assert_share(&shares, OpKind::ReadModifyWrite, 0.50);
        assert_share(&kind_shares("C"), OpKind::Read, 1.0);
    }

    fn key_counts(text: &str, key_count: u64) -> Vec<usize> {
        let mut generator = generator(text, key_count);
        let mut rng = SmallRng::seed_from_u64(11);
        let mut counts = vec![0usize; key_count as usize];
        for _ in 0..SAMPLES {
            let op = generator.next(&mut rng).expect("op");
            if op.kind == OpKind::Read {
                let offset = op.key.checked_sub(1000).expect("key above start");
                counts[offset as usize] += 1;
            }
        }
        counts
    }

    #[test]
    fn uniform_keys_are_flat() {
        let counts = key_counts("RU,100", 100);
        let expected = SAMPLES as f64 / 100.0;
        for (key, count) in counts.iter().enumerate() {
            let deviation = (*count as f64 - expected).abs() / expected;
            assert!(deviation < 0.1, "key {key}: {count} vs {expected}");
        }
    }

    #[test]
    fn zipfian_keys_are_skewed_and_scrambled() {
        let counts = key_counts("C", 1000);
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top_ten: usize = sorted.iter().take(10).sum();
        // Zipf(1000, 0.99): the 10 hottest of 1000 keys take about 38% of reads.
        let share = top_ten as f64 / SAMPLES as f64;
        assert!((0.30..0.46).contains(&share), "top-10 share {share}");
        // Scrambled: the hottest key is not simply the first one.
        let hottest = counts
            .iter()
            .enumerate()
            .max_by_key(|(_, c)| **c)
            .map(|(k, _)| k);
        assert_ne!(hottest, Some(0));
    }

    #[test]
    fn latest_prefers_new_keys() {
        let mut generator = generator("D", 1000);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut newest_tenth = 0usize;
        let mut reads = 0usize;
        for _ in 0..SAMPLES {
            let op = generator.next(&mut rng).expect("op");
            let known = 1000 + generator.inserts.inserted();
            match op.kind {
                OpKind::Insert => assert_eq!(op.key, 1000 + known - 1),
                _ => {
                    assert!(op.key >= 1000 && op.key < 1000 + known);
                    reads += 1;
                    if op.key - 1000 >= known - known / 10 {
                        newest_tenth += 1;
                    }
                }
            }
        }
        let share = newest_tenth as f64 / reads as f64;
        assert!(share > 0.6, "newest 10% of keys got {share} of reads");
    }

    #[test]
    fn load_inserts_each_key_once_then_stops() {
        let cursor = Arc::new(InsertCursor::default());
        let workload = Workload::parse("I", 0.99, 100).expect("I");
        let mut first = Generator::new(workload, 50, 100, cursor.clone());
        let mut second = Generator::new(workload, 50, 100, cursor);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut keys = Vec::new();
        for turn in 0..1000 {
            let generator = if turn % 2 == 0 {
                &mut first
            } else {
                &mut second
            };
            match generator.next(&mut rng) {
                Some(op) => {
                    assert_eq!(op.kind, OpKind::Insert);
                    keys.push(op.key);
                }
                None => break,
            }
        }
        keys.sort_unstable();
        assert_eq!(keys, (50..150).collect::<Vec<u64>>());
        assert_eq!(first.next(&mut rng), None);
    }

    #[test]
    fn scans_have_bounded_lengths() {
        let mut generator = generator("E", 1000);
        let mut rng = SmallRng::seed_from_u64(5);
        for _ in 0..10_000 {
            let op = generator.next(&mut rng).expect("op");
            if op.kind == OpKind::Scan {
                assert!((1..=100).contains(&op.scan_length));
            }
        }
    }

    #[test]
    fn rejects_unknown_workloads() {
        assert!(Workload::parse("G", 0.99, 100).is_err());
        assert!(Workload::parse("RU,101", 0.99, 100).is_err());
        assert!(Workload::parse("I,5", 0.99, 100).is_err());
        assert!(Workload::parse("RU", 0.99, 100).is_ok());
    }
}
