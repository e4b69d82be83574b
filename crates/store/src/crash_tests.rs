//! Fault injection and power loss, on simulated disks, driven one step at
//! a time from a seed (`device::faults`).
//!
//! Each seed runs a namespace through a few hundred random steps: writes
//! of compressible and random records, deletes, flusher rounds, defrag
//! passes, changes of the compression method, injected faults (short
//! writes, write errors, `ENOSPC`, failing syncs that lose the unsynced
//! writes), power cuts that drop or tear the unsynced writes at any byte,
//! and reopens. A model keeps every version of every record with its
//! write-order position; after a cut, each record must read back as the
//! last version that was durable at the cut or a later one, never an older
//! one, never bytes that were not written. The block accounting is checked
//! against the index as it goes. A failure prints its seed; replay it with
//! `BOLIDE_SEED=<seed> cargo test -p bolide-store power_loss`.

use crate::device::faults::{Faults, SimDisks};
use crate::device::format::{self, EntryIter, FILE_HEADER_BYTES};
use crate::device::Round;
use crate::device::{AppendError, Compression, Device, DeviceConfig, Method};
use crate::index::Stored;
use crate::namespace::tests::digest;
use crate::{Namespace, NamespaceConfig, RecordMeta, StorageEngine};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const KEYS: u32 = 40;
const BLOCK: u32 = 4096;
const BLOCKS: u64 = 48;
const STEPS: usize = 400;
const SEEDS: u64 = 100;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// One version of a record: its bytes (None: deleted) and where in write
/// order it went.
#[derive(Clone, Debug)]
struct Version {
    value: Option<Vec<u8>>,
    position: u64,
}

/// What the harness saw across seeds (to show each path was exercised).
#[derive(Default, Debug)]
struct Seen {
    cuts: u64,
    torn: u64,
    damaged_entries: u64,
    refused_failing: u64,
    refused_full: u64,
    failed_rounds: u64,
    defrag_blocks: u64,
    compressed: u64,
    recovered_newer: u64,
}

struct Harness {
    seed: u64,
    rng: Rng,
    disks: SimDisks,
    config: NamespaceConfig,
    namespace: Arc<Namespace>,
    history: HashMap<u32, Vec<Version>>,
    counter: u64,
    log: Vec<String>,
    compressed_before_cut: u64,
}

fn config(path: PathBuf, data_in_memory: bool) -> NamespaceConfig {
    let mut config = NamespaceConfig::with_name("crash");
    let mut device = DeviceConfig::new(vec![path], FILE_HEADER_BYTES + BLOCKS * u64::from(BLOCK));
    device.write_block_size = BLOCK;
    device.commit_to_device = true;
    device.data_in_memory = data_in_memory;
    device.max_write_cache = 6 * u64::from(BLOCK);
    device.defrag_lwm_pct = 50;
    config.device = Some(device);
    config.storage_engine = StorageEngine::Device;
    config
}

impl Harness {
    fn new(seed: u64) -> Harness {
        let mut rng = Rng(seed);
        let disks = SimDisks::new(seed ^ 0xD15C);
        let config = config(PathBuf::from("/sim/crash.dat"), rng.percent(30));
        let namespace = Arc::new(Namespace::open_on(config.clone(), &disks).expect("open"));
        Harness {
            seed,
            rng,
            disks,
            config,
            namespace,
            history: HashMap::new(),
            counter: 0,
            log: Vec::new(),
            compressed_before_cut: 0,
        }
    }

    fn device(&self) -> &Arc<Device> {
        self.namespace.device().expect("persistent")
    }

    fn note(&mut self, what: String) {
        self.log.push(what);
        if self.log.len() > 40 {
            self.log.remove(0);
        }
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {}: {what}\nlast steps:\n  {}\nreplay: BOLIDE_SEED={} cargo test -p bolide-store power_loss",
            self.seed,
            self.log.join("\n  "),
            self.seed
        );
    }

    fn value(&mut self, key: u32) -> Vec<u8> {
        self.counter += 1;
        let mut value = format!("k{key}v{}|", self.counter).into_bytes();
        match self.rng.below(3) {
            0 => {
                let n = self.rng.below(700) as usize;
                value.extend((0..n).map(|_| self.rng.next() as u8));
            }
            1 => {
                let n = self.rng.below(120) as usize;
                for i in 0..n {
                    value.extend_from_slice(format!("{{\"id\":{i},\"ok\":true}},").as_bytes());
                }
            }
            _ => value.extend(std::iter::repeat_n(
                b'a' + (key % 26) as u8,
                self.rng.below(1500) as usize,
            )),
        }
        value
    }

    /// The error a refused write must carry while the device is failing.
    fn check_refusal(&mut self, error: AppendError, seen: &mut Seen) {
        let failing = self.device().is_failing();
        match error {
            AppendError::Failing if failing => seen.refused_failing += 1,
            AppendError::DeviceFull if failing => seen.refused_full += 1,
            AppendError::OutOfSpace | AppendError::Overload if !failing => {}
            other => self.fail(&format!("refused with {other:?} (failing: {failing})")),
        }
    }

    fn put(&mut self, key: u32, seen: &mut Seen) {
        let value = self.value(key);
        let meta = RecordMeta {
            generation: (self.counter % 60_000) as u16 + 1,
            last_update_ms: 1_000 + self.counter,
            ..RecordMeta::default()
        };
        let d = digest(key);
        let result = self.namespace.write(&d).put(&d, meta, &value);
        match result {
            Ok(wait) => {
                let position = wait.expect("commit-to-device").position();
                self.note(format!(
                    "put {key} ({} bytes) at {position:#x}",
                    value.len()
                ));
                self.history.entry(key).or_default().push(Version {
                    value: Some(value),
                    position,
                });
            }
            Err(error) => {
                self.note(format!("put {key} refused: {error:?}"));
                self.check_refusal(error, seen);
            }
        }
    }

    fn delete(&mut self, key: u32, seen: &mut Seen) {
        let d = digest(key);
        let present_in_model = self
            .history
            .get(&key)
            .and_then(|v| v.last())
            .is_some_and(|v| v.value.is_some());
        let result = self.namespace.write(&d).delete(&d);
        match result {
            Ok((present, wait)) => {
                if present != present_in_model {
                    self.fail(&format!(
                        "delete {key}: present {present}, model {present_in_model}"
                    ));
                }
                if let Some(wait) = wait {
                    self.note(format!("delete {key} at {:#x}", wait.position()));
                    self.history.entry(key).or_default().push(Version {
                        value: None,
                        position: wait.position(),
                    });
                }
            }
            Err(error) => {
                self.note(format!("delete {key} refused: {error:?}"));
                self.check_refusal(error, seen);
            }
        }
    }

    fn flush(&mut self, seen: &mut Seen) {
        let round = self.device().flush_round(&mut Vec::new(), true);
        self.note(format!(
            "flush: {round:?}, durable {:#x}",
            self.device().durable()
        ));
        if round == Round::Failed {
            seen.failed_rounds += 1;
            // Refused from now on, with the code that says why.
            let faults = self.disks.faults();
            let want = if faults.write_error == Some(libc::ENOSPC) {
                AppendError::DeviceFull
            } else {
                AppendError::Failing
            };
            let refusal = self.device().refusal();
            if refusal != Some(want) {
                self.fail(&format!(
                    "after a failed round ({faults:?}) appends get {refusal:?}"
                ));
            }
        }
    }

    fn read(&self, key: u32) -> Option<Vec<u8>> {
        let d = digest(key);
        let table = self.namespace.read(&d);
        let entry = table.get(&d)?;
        let mut buf = Vec::new();
        match self.namespace.record_bytes(&entry, &mut buf) {
            Ok(bytes) => Some(bytes.to_vec()),
            Err(error) => self.fail(&format!("record {key} unreadable: {error:?}")),
        }
    }

    /// Cuts the power, reopens, and checks every record against what was
    /// durable at the cut.
    fn power_cut(&mut self, seen: &mut Seen) {
        let durable = self.device().durable();
        self.compressed_before_cut = self.device().stats.compressed_records.load(Relaxed);
        let cut = self.disks.power_cut();
        self.note(format!("power cut at durable {durable:#x}: {cut:?}"));
        seen.cuts += 1;
        seen.torn += u64::from(cut.torn + cut.sectors);
        self.reopen(durable, seen);
    }

    fn reopen(&mut self, durable: u64, seen: &mut Seen) {
        let namespace = match Namespace::open_on(self.config.clone(), &self.disks) {
            Ok(namespace) => Arc::new(namespace),
            Err(error) => self.fail(&format!("reopen failed: {error}")),
        };
        self.namespace = namespace;
        seen.damaged_entries += self.device().stats.cold_start_corrupt_entries.load(Relaxed);
        seen.compressed += self.compressed_before_cut;
        let mut objects = 0;
        for key in 0..KEYS {
            let got = self.read(key);
            let versions = self.history.get(&key).cloned().unwrap_or_default();
            // The last version durable at the cut, or any later one.
            let floor = versions.iter().rposition(|v| v.position <= durable);
            let allowed = match floor {
                Some(i) => &versions[i..],
                None => &versions[..],
            };
            let ok = allowed.iter().any(|v| v.value == got) || (floor.is_none() && got.is_none());
            if !ok {
                let want: Vec<String> = allowed
                    .iter()
                    .map(|v| match &v.value {
                        Some(bytes) => {
                            String::from_utf8_lossy(&bytes[..bytes.len().min(16)]).into_owned()
                        }
                        None => "deleted".into(),
                    })
                    .collect();
                let got = got.map(|b| String::from_utf8_lossy(&b[..b.len().min(16)]).into_owned());
                self.fail(&format!(
                    "record {key} after the cut is {got:?}; allowed {want:?} (floor {floor:?})"
                ));
            }
            if floor.is_some_and(|i| i + 1 < versions.len())
                && versions.last().map(|v| &v.value) == Some(&got)
            {
                seen.recovered_newer += 1;
            }
            objects += i64::from(got.is_some());
            // What was read back is durable now.
            let recovered = Version {
                value: got,
                position: 0,
            };
            self.history.insert(key, vec![recovered]);
        }
        if self.namespace.stats.objects.load(Relaxed) != objects {
            self.fail("the object count does not match the records read back");
        }
        self.check_accounting();
    }

    /// Every used block's live bytes are exactly its current records'
    /// entries plus the tombstones it counts.
    fn check_accounting(&self) {
        let device = self.device();
        let (sum, total) = device.live_bytes_total();
        if sum as i64 != total {
            self.fail(&format!(
                "blocks hold {sum} live bytes, the total says {total}"
            ));
        }
        let mut expected: HashMap<u32, u64> = HashMap::new();
        for p in 0..bolide_types::PARTITION_COUNT {
            let Some(table) = self.namespace.read_partition(p) else {
                continue;
            };
            table.for_each(|entry| {
                let d = bolide_types::Digest(*entry.digest);
                let (block, bytes) = match entry.record {
                    Stored::OnDevice { block, extent } => (block, extent.bytes),
                    Stored::InMemory(_) => (
                        table.location(&d).unwrap_or(u32::MAX),
                        table.stored_bytes(&d).unwrap_or(0),
                    ),
                };
                *expected.entry(block).or_default() += u64::from(bytes);
            });
        }
        let mut buf = Vec::new();
        for block in 0..device.block_count() {
            if !device.is_used(block) {
                continue;
            }
            let mut want = expected.get(&block).copied().unwrap_or(0);
            if device.read_block(block, &mut buf).is_ok() {
                for entry in EntryIter::new(&buf, device.block_seq(block)) {
                    if entry.head.kind == format::KIND_TOMBSTONE
                        && device.tombstone_counted(block, entry.deleted_seq())
                    {
                        want += entry.bytes as u64;
                    }
                }
            }
            let live = u64::from(device.live_bytes_of(block));
            if live != want {
                self.fail(&format!(
                    "block {block} counts {live} live bytes, holds {want}"
                ));
            }
        }
    }

    fn faults(&mut self) {
        let faults = match self.rng.below(6) {
            0 => Faults {
                short_writes: true,
                ..Faults::default()
            },
            1 => Faults {
                write_error: Some(libc::EIO),
                ..Faults::default()
            },
            2 => Faults {
                write_error: Some(libc::ENOSPC),
                ..Faults::default()
            },
            3 => Faults {
                fail_syncs: true,
                ..Faults::default()
            },
            _ => Faults::default(),
        };
        self.note(format!("faults: {faults:?}"));
        self.disks.set_faults(faults);
    }

    fn step(&mut self, seen: &mut Seen) {
        match self.rng.below(100) {
            0..=49 => {
                let key = self.rng.below(u64::from(KEYS)) as u32;
                self.put(key, seen);
            }
            50..=59 => {
                let key = self.rng.below(u64::from(KEYS)) as u32;
                self.delete(key, seen);
            }
            60..=74 => self.flush(seen),
            75..=81 => {
                let emptied = self.namespace.defrag_now();
                seen.defrag_blocks += emptied as u64;
                self.note(format!("defrag: {emptied} blocks"));
            }
            82..=87 => self.faults(),
            88..=93 => {
                let method = Method::ALL[self.rng.below(4) as usize];
                let setting = Compression {
                    method,
                    level: self.rng.below(10) as u32,
                    acceleration: self.rng.below(3) as u32,
                };
                self.device().set_compression(setting);
                if let Some(device) = self.config.device.as_mut() {
                    device.compression = setting;
                }
                self.note(format!("compression {method:?}"));
            }
            94..=97 => self.power_cut(seen),
            _ => {
                // A clean stop: healthy disks, everything flushed, then a
                // cut that finds nothing unsynced.
                self.disks.set_faults(Faults::default());
                for _ in 0..4 {
                    self.flush(seen);
                }
                if self.device().is_failing() {
                    self.fail("healthy disks, still failing");
                }
                self.power_cut(seen);
            }
        }
    }
}

fn run_seed(seed: u64, seen: &mut Seen) {
    let mut harness = Harness::new(seed);
    for _ in 0..STEPS {
        harness.step(seen);
        if harness.rng.percent(10) {
            harness.check_accounting();
        }
    }
    harness.power_cut(seen);
}

#[test]
fn power_loss_never_loses_what_was_durable() {
    let seeds: Vec<u64> = match std::env::var("BOLIDE_SEED") {
        Ok(seed) => vec![seed.parse().expect("BOLIDE_SEED is a number")],
        Err(_) => (1..=SEEDS).collect(),
    };
    let mut seen = Seen::default();
    for seed in &seeds {
        run_seed(*seed, &mut seen);
    }
    eprintln!("{} seeds: {seen:?}", seeds.len());
    if seeds.len() > 1 {
        // Every path the test exists for was taken.
        assert!(seen.cuts > seeds.len() as u64);
        assert!(seen.torn > 0, "{seen:?}");
        assert!(seen.damaged_entries > 0, "{seen:?}");
        assert!(seen.refused_failing > 0, "{seen:?}");
        assert!(seen.refused_full > 0, "{seen:?}");
        assert!(seen.failed_rounds > 0, "{seen:?}");
        assert!(seen.defrag_blocks > 0, "{seen:?}");
        assert!(seen.compressed > 0, "{seen:?}");
        assert!(seen.recovered_newer > 0, "{seen:?}");
    }
}

#[test]
fn the_same_seed_takes_the_same_path() {
    let run = |seed| {
        let mut harness = Harness::new(seed);
        let mut seen = Seen::default();
        for _ in 0..150 {
            harness.step(&mut seen);
        }
        (harness.log.clone(), harness.disks.counts())
    };
    assert_eq!(run(7), run(7));
}

#[test]
fn a_damaged_compressed_entry_is_refused_and_skipped_at_the_cold_start() {
    let disks = SimDisks::new(1);
    let path = PathBuf::from("/sim/damaged.dat");
    let mut config = config(path.clone(), false);
    if let Some(device) = config.device.as_mut() {
        device.compression = Compression {
            method: Method::Zstd,
            ..Compression::default()
        };
    }
    let namespace = Namespace::open_on(config.clone(), &disks).expect("open");
    let device = Arc::clone(namespace.device().expect("device"));
    let d = digest(1);
    let put = |text: &str| {
        let value = text.repeat(100).into_bytes();
        let meta = RecordMeta {
            generation: 1,
            ..RecordMeta::default()
        };
        namespace.write(&d).put(&d, meta, &value).expect("put");
        assert_eq!(device.flush_round(&mut Vec::new(), true), Round::Done);
        value
    };
    let first = put("first ");
    put("second ");
    // Other records fill the block, so it is sealed and read from the disk.
    for key in 100..104 {
        let filler = digest(key);
        let meta = RecordMeta::default();
        let mut rng = Rng(u64::from(key));
        let bytes: Vec<u8> = (0..3000).map(|_| rng.next() as u8).collect();
        namespace
            .write(&filler)
            .put(&filler, meta, &bytes)
            .expect("put");
    }
    assert_eq!(device.flush_round(&mut Vec::new(), true), Round::Done);
    assert!(device.stats.compressed_records.load(Relaxed) >= 2);
    let (block, extent) = match namespace.read(&d).get(&d).map(|e| e.record) {
        Some(Stored::OnDevice { block, extent }) => (block, extent),
        other => panic!("{other:?}"),
    };
    let at = FILE_HEADER_BYTES as usize
        + block as usize * BLOCK as usize
        + extent.offset as usize
        + format::ENTRY_HEADER_BYTES
        + 4;
    assert!(device.is_used(block), "block {block} is on the disk");
    disks.corrupt(&path, at);
    // A read answers an error, never other bytes.
    {
        let table = namespace.read(&d);
        let entry = table.get(&d).expect("present");
        let mut buf = Vec::new();
        assert!(namespace.record_bytes(&entry, &mut buf).is_err());
    }
    drop(namespace);
    disks.power_cut();
    let namespace = Namespace::open_on(config, &disks).expect("reopen");
    let device = namespace.device().expect("device");
    assert_eq!(device.stats.cold_start_corrupt_entries.load(Relaxed), 1);
    // The damaged newest version is skipped; the intact older one remains.
    let table = namespace.read(&d);
    let entry = table.get(&d).expect("present");
    let mut buf = Vec::new();
    assert_eq!(namespace.record_bytes(&entry, &mut buf), Ok(&first[..]));
}

#[test]
fn a_slow_disk_shares_its_syncs_and_a_power_cut_loses_no_acknowledged_write() {
    let disks = SimDisks::new(3);
    let config = config(PathBuf::from("/sim/slow.dat"), false);
    let namespace = Arc::new(Namespace::open_on(config.clone(), &disks).expect("open"));
    let threads = namespace.start_storage().expect("persistent");
    disks.set_faults(Faults {
        latency: std::time::Duration::from_millis(2),
        ..Faults::default()
    });
    let (_, syncs_before) = disks.counts();
    let acknowledged: Vec<(u32, Vec<u8>)> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..8u32)
            .map(|writer| {
                let namespace = &namespace;
                scope.spawn(move || {
                    let mut acked = Vec::new();
                    for i in 0..25u32 {
                        let key = 1_000 + writer * 100 + i;
                        let value = format!("{key}:").repeat(40).into_bytes();
                        let d = digest(key);
                        let wait = namespace
                            .write(&d)
                            .put(&d, RecordMeta::default(), &value)
                            .expect("put")
                            .expect("commit-to-device");
                        wait.wait_blocking().expect("durable");
                        acked.push((key, value));
                    }
                    acked
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().expect("writer"))
            .collect()
    });
    let (_, syncs_after) = disks.counts();
    let syncs = syncs_after - syncs_before;
    assert_eq!(acknowledged.len(), 200);
    // Group commit: writers waiting together share one write and sync.
    assert!(syncs < 150, "{syncs} syncs for 200 acknowledged writes");
    // The power goes; nothing more reaches the disk.
    disks.power_cut();
    namespace.device().expect("device").set_failed();
    threads.shutdown();
    drop(namespace);
    let namespace = Namespace::open_on(config, &disks).expect("reopen");
    for (key, value) in &acknowledged {
        let d = digest(*key);
        let table = namespace.read(&d);
        let entry = table.get(&d).expect("an acknowledged write is there");
        let mut buf = Vec::new();
        assert_eq!(namespace.record_bytes(&entry, &mut buf), Ok(&value[..]));
    }
}

#[test]
fn a_stalled_disk_answers_overload_then_drains() {
    let disks = SimDisks::new(4);
    let mut config = config(PathBuf::from("/sim/stalled.dat"), false);
    if let Some(device) = config.device.as_mut() {
        device.commit_to_device = false;
        device.max_write_cache = 2 * u64::from(BLOCK);
    }
    let namespace = Arc::new(Namespace::open_on(config, &disks).expect("open"));
    let device = Arc::clone(namespace.device().expect("device"));
    // No flusher runs: the disk takes nothing, sealed blocks pile up.
    let mut refused = None;
    let mut last = 0;
    for key in 0..40 {
        let d = digest(key);
        match namespace
            .write(&d)
            .put(&d, RecordMeta::default(), &[7; 1500])
        {
            Ok(_) => last = device.appended(),
            Err(error) => {
                refused = Some(error);
                break;
            }
        }
    }
    assert_eq!(refused, Some(AppendError::Overload));
    assert!(device.write_queue() >= 2);
    // The disk comes back: one round drains the queue, writes go on.
    assert_eq!(device.flush_round(&mut Vec::new(), true), Round::Done);
    assert!(device.durable() >= last);
    assert_eq!(device.write_queue(), 0);
    let d = digest(99);
    assert!(namespace
        .write(&d)
        .put(&d, RecordMeta::default(), b"ok")
        .is_ok());
}
