use super::defrag::DefragPacer;
use super::*;
use crate::device::format::FILE_HEADER_BYTES;
use crate::device::DeviceConfig;
use crate::index::RecordMeta;
use crate::namespace::tests::digest;
use crate::record::{self, Bin};
use bolide_types::now_citrusleaf_seconds;
use std::time::{Duration, Instant};

/// Both ways of keeping the data: on the device only, and in memory.
const DATA_IN_MEMORY: [bool; 2] = [false, true];

fn config(dir: &std::path::Path, data_in_memory: bool) -> NamespaceConfig {
    let mut config = NamespaceConfig::with_name("test");
    let mut device = DeviceConfig::new(vec![dir.join("test.dat")], 0);
    device.write_block_size = 64 * 1024;
    device.file_size = FILE_HEADER_BYTES + 64 * 64 * 1024;
    device.flush_max_ms = 10;
    device.data_in_memory = data_in_memory;
    config.device = Some(device);
    config.storage_engine = crate::StorageEngine::Device;
    config
}

fn record(value: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    let value = value.to_be_bytes();
    record::encode(
        &mut bytes,
        None,
        [Bin {
            name: b"v",
            particle_type: 4,
            value: &value,
        }]
        .into_iter(),
    );
    bytes
}

fn value_of(namespace: &Namespace, n: u32) -> Option<u32> {
    let table = namespace.read(&digest(n));
    let entry = table.get(&digest(n))?;
    let mut buf = Vec::new();
    let bytes = namespace.record_bytes(&entry, &mut buf).expect("readable");
    let view = crate::RecordView::parse(bytes)?;
    let bin = view.bin(b"v")?;
    Some(u32::from_be_bytes(bin.value.try_into().ok()?))
}

fn open(dir: &std::path::Path) -> (Arc<Namespace>, StorageThreads) {
    open_with(dir, false)
}

fn open_with(dir: &std::path::Path, data_in_memory: bool) -> (Arc<Namespace>, StorageThreads) {
    let namespace = Arc::new(Namespace::open(config(dir, data_in_memory)).expect("open"));
    assert_eq!(namespace.data_on_device(), !data_in_memory);
    let threads = namespace.start_storage().expect("persistent");
    (namespace, threads)
}

fn put(namespace: &Namespace, n: u32, value: u32, set_id: u16) {
    let meta = RecordMeta {
        generation: 1,
        set_id,
        last_update_ms: 1_000 + u64::from(value),
        ..RecordMeta::default()
    };
    namespace
        .write(&digest(n))
        .put(&digest(n), meta, &record(value))
        .expect("put");
}

#[test]
fn a_restart_restores_the_newest_versions_deletes_and_truncations() {
    for in_memory in DATA_IN_MEMORY {
        restart_restores_newest_versions(in_memory);
    }
}

fn restart_restores_newest_versions(in_memory: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (namespace, threads) = open_with(dir.path(), in_memory);
        let set = namespace.set_id(b"demo").expect("set");
        for n in 0..2_000 {
            put(&namespace, n, n, set);
        }
        for n in (0..2_000).step_by(3) {
            put(&namespace, n, n + 10_000, set);
        }
        for n in (0..2_000).step_by(5) {
            let (present, _) = namespace
                .write(&digest(n))
                .delete(&digest(n))
                .expect("delete");
            assert!(present);
        }
        let gone = namespace.set_id(b"gone").expect("set");
        for n in 5_000..5_100 {
            put(&namespace, n, n, gone);
        }
        assert_eq!(namespace.truncate(Some(b"gone"), 1_000_000), Ok(true));
        threads.shutdown();
    }
    let (namespace, threads) = open_with(dir.path(), in_memory);
    for n in 0..2_000 {
        let want = match n {
            n if n % 5 == 0 => None,
            n if n % 3 == 0 => Some(n + 10_000),
            n => Some(n),
        };
        assert_eq!(value_of(&namespace, n), want, "record {n}");
    }
    assert!((5_000..5_100).all(|n| value_of(&namespace, n).is_none()));
    assert_eq!(namespace.stats.objects.load(Relaxed), 1_600);
    let (_, demo) = namespace
        .sets()
        .find(|(name, _)| *name == "demo")
        .expect("set demo");
    assert_eq!(demo.objects.load(Relaxed), 1_600);
    threads.shutdown();
}

#[test]
fn concurrent_truncations_all_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let names: Vec<String> = (0..8).map(|n| format!("set{n}")).collect();
    {
        let (namespace, threads) = open(dir.path());
        std::thread::scope(|scope| {
            for name in &names {
                let namespace = &namespace;
                scope.spawn(move || {
                    namespace.set_id(name.as_bytes()).expect("set");
                    for lut in 1..=50u64 {
                        assert_eq!(namespace.truncate(Some(name.as_bytes()), lut), Ok(true));
                    }
                });
            }
        });
        threads.shutdown();
    }
    let (namespace, threads) = open(dir.path());
    for name in &names {
        let (_, set) = namespace
            .sets()
            .find(|(found, _)| found == name)
            .expect("set restored from the table");
        assert_eq!(set.truncate_lut_ms.load(Relaxed), 50, "{name}");
    }
    threads.shutdown();
}

#[test]
fn expiry_writes_a_tombstone_so_no_older_version_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namespace, threads) = open(dir.path());
    put(&namespace, 1, 1, 0);
    // A newer version that expires (void time 1 is long past).
    let meta = RecordMeta {
        generation: 2,
        void_time: 1,
        last_update_ms: 5_000,
        set_id: 0,
    };
    namespace
        .write(&digest(1))
        .put(&digest(1), meta, &record(2))
        .expect("put");
    let device = Arc::clone(namespace.device().expect("device"));
    let before = device.appended();
    let report = namespace.sweep(now_citrusleaf_seconds());
    assert_eq!(report.expired, 1);
    assert!(device.appended() > before, "a tombstone was appended");
    // After a restart the record stays gone. (Without the tombstone it
    // would come back once the expiring version's block is reused while
    // the first version's block is not; the tombstone covers that.)
    threads.shutdown();
    drop(namespace);
    let (namespace, threads) = open(dir.path());
    assert_eq!(value_of(&namespace, 1), None);
    threads.shutdown();
}

#[test]
fn defrag_is_paced_only_while_space_is_plentiful() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The usual small test device: always tight, never paced.
    let (small, threads) = open(dir.path());
    let device = small.device().expect("device");
    let pacer = DefragPacer::new(device);
    assert!(
        pacer.space_is_tight(device),
        "4 MiB is under the 256 MiB floor"
    );
    threads.shutdown();
    // 320 MiB of blocks, all free.
    let mut config = config(&dir.path().join("big"), false);
    std::fs::create_dir_all(dir.path().join("big")).expect("dir");
    if let Some(device) = config.device.as_mut() {
        device.file_size = FILE_HEADER_BYTES + 5120 * 64 * 1024;
    }
    let namespace = Arc::new(Namespace::open(config).expect("open"));
    let threads = namespace.start_storage().expect("persistent");
    let device = namespace.device().expect("device");
    let mut pacer = DefragPacer::new(device);
    assert!(!pacer.space_is_tight(device));
    // A write rate that would use up the free blocks in under 10 s
    // makes space tight.
    pacer.write_rate = 600.0;
    assert!(pacer.space_is_tight(device));
    pacer.write_rate = 0.0;
    let stop = AtomicBool::new(false);
    // Nothing written: the floor, 8 MiB/s of 64 KiB blocks = 128/s.
    let started = Instant::now();
    for _ in 0..4 + 32 {
        assert!(pacer.wait_for_turn(device, &stop));
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200),
        "32 blocks past the burst took {took:?}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    stop.store(true, Relaxed);
    assert!(!pacer.wait_for_turn(device, &stop));
    threads.shutdown();
}

#[test]
fn defrag_keeps_every_record_while_reusing_blocks() {
    for in_memory in DATA_IN_MEMORY {
        defrag_keeps_every_record(in_memory);
    }
}

fn defrag_keeps_every_record(in_memory: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (namespace, threads) = open_with(dir.path(), in_memory);
        // ~80 bytes per entry: 64 blocks of 64 KiB hold ~50K entries;
        // write 4x that by overwriting 1,000 records.
        for round in 0..200u32 {
            for n in 0..1_000 {
                let mut attempts = 0;
                loop {
                    let meta = RecordMeta {
                        generation: 1,
                        last_update_ms: u64::from(round),
                        ..RecordMeta::default()
                    };
                    match namespace
                        .write(&digest(n))
                        .put(&digest(n), meta, &record(round))
                    {
                        Ok(_) => break,
                        Err(_) if attempts < 500 => {
                            attempts += 1;
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(error) => panic!("round {round}: {error:?}"),
                    }
                }
            }
        }
        let device = namespace.device().expect("device");
        assert!(device.stats.defrag_blocks.load(Relaxed) > 10);
        assert!((0..1_000).all(|n| value_of(&namespace, n) == Some(199)));
        threads.shutdown();
    }
    let (namespace, threads) = open_with(dir.path(), in_memory);
    assert_eq!(namespace.stats.objects.load(Relaxed), 1_000);
    assert!((0..1_000).all(|n| value_of(&namespace, n) == Some(199)));
    threads.shutdown();
}

/// The format-1 fixture (see tests/fixtures/README.md) opened in a copy.
fn fixture_config(dir: &std::path::Path, data_in_memory: bool) -> NamespaceConfig {
    let path = dir.join("fixture.dat");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/format-v1.dat");
    std::fs::copy(fixture, &path).expect("copy the fixture");
    let mut config = NamespaceConfig::with_name("fixture");
    let mut device = DeviceConfig::new(vec![path], FILE_HEADER_BYTES + 8 * 4096);
    device.write_block_size = 4096;
    device.flush_max_ms = 10;
    device.data_in_memory = data_in_memory;
    config.device = Some(device);
    config.storage_engine = crate::StorageEngine::Device;
    config
}

/// Bin `v` (an integer) and `s` (a string) of record `n`.
fn fixture_bins(namespace: &Namespace, n: u32) -> Option<(u64, String)> {
    let table = namespace.read(&digest(n));
    let entry = table.get(&digest(n))?;
    let mut buf = Vec::new();
    let bytes = namespace.record_bytes(&entry, &mut buf).expect("readable");
    let view = crate::RecordView::parse(bytes).expect("a record");
    let v = u64::from_be_bytes(view.bin(b"v")?.value.try_into().ok()?);
    let s = String::from_utf8(view.bin(b"s")?.value.to_vec()).ok()?;
    Some((v, s))
}

fn fixture_expected(n: u32) -> Option<(u64, String)> {
    if n.is_multiple_of(5) {
        return None;
    }
    let v = if n.is_multiple_of(4) { n + 1000 } else { n };
    Some((u64::from(v), format!("value-{v}")))
}

#[test]
fn a_format_1_file_still_reads() {
    for in_memory in DATA_IN_MEMORY {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = fixture_config(dir.path(), in_memory);
        let path = config.device.as_ref().expect("device").files[0].clone();
        {
            let namespace = Arc::new(Namespace::open(config.clone()).expect("open the fixture"));
            assert_eq!(namespace.stats.objects.load(Relaxed), 32);
            for n in 0..40 {
                assert_eq!(
                    fixture_bins(&namespace, n),
                    fixture_expected(n),
                    "record {n}"
                );
            }
            assert!((100..105).all(|n| fixture_bins(&namespace, n).is_none()));
            let device = namespace.device().expect("device");
            assert_eq!(device.stats.cold_start_corrupt_entries.load(Relaxed), 0);
            // New writes go in format 2, compressed, beside the old entries;
            // defrag moves old entries as they are.
            device.set_compression(crate::Compression {
                method: crate::Method::Zstd,
                ..crate::Compression::default()
            });
            let threads = namespace.start_storage().expect("persistent");
            for n in 200..260u32 {
                let mut bytes = Vec::new();
                let padding = vec![b'x'; 500];
                record::encode(
                    &mut bytes,
                    None,
                    [
                        Bin {
                            name: b"v",
                            particle_type: 4,
                            value: &n.to_be_bytes(),
                        },
                        Bin {
                            name: b"pad",
                            particle_type: 3,
                            value: &padding,
                        },
                    ]
                    .into_iter(),
                );
                let meta = RecordMeta {
                    generation: 1,
                    ..RecordMeta::default()
                };
                namespace
                    .write(&digest(n))
                    .put(&digest(n), meta, &bytes)
                    .expect("put");
            }
            threads.shutdown();
            assert!(device.stats.compressed_records.load(Relaxed) > 0);
        }
        // The header says format 2 now: a format-1 binary, which checks
        // crc32c(0..60), would refuse the file rather than misread it.
        let head = std::fs::read(&path).expect("read");
        let header = crate::device::format::FileHeader::decode(&head).expect("header");
        assert_eq!(header.version, 2);
        assert_ne!(
            crc32c::crc32c(&head[0..60]).to_le_bytes(),
            head[60..64],
            "a format-1 reader must not accept the header"
        );
        let (namespace, threads) = {
            let namespace = Arc::new(Namespace::open(config).expect("reopen"));
            let threads = namespace.start_storage().expect("persistent");
            (namespace, threads)
        };
        for n in 0..40 {
            assert_eq!(
                fixture_bins(&namespace, n),
                fixture_expected(n),
                "record {n}"
            );
        }
        assert!((200..260).all(|n| value_of(&namespace, n) == Some(n)));
        assert_eq!(namespace.stats.objects.load(Relaxed), 32 + 60);
        threads.shutdown();
    }
}

#[test]
fn a_file_from_a_newer_format_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = fixture_config(dir.path(), false);
    let path = config.device.as_ref().expect("device").files[0].clone();
    let mut bytes = std::fs::read(&path).expect("read");
    let mut header = crate::device::format::FileHeader::decode(&bytes).expect("header");
    header.version = 9;
    bytes[..64].copy_from_slice(&header.encode()[..64]);
    std::fs::write(&path, &bytes).expect("write");
    let error = Namespace::open(config).err().expect("refused");
    assert!(error.contains("storage format 9"), "{error}");
    assert!(error.contains("newer"), "{error}");
}
