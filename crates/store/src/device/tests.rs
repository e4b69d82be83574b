//! Unit tests of the device on plain files (fault injection and power
//! loss: `crate::crash_tests`).

use super::format::{self, EntryHead, FILE_HEADER_BYTES};
use super::meta::META_SLOT_OFFSETS;
use super::*;
use bolide_types::Digest;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

fn config(dir: &std::path::Path, blocks: u64) -> DeviceConfig {
    let mut config = DeviceConfig::new(vec![dir.join("ns.dat")], 0);
    config.write_block_size = 64 * 1024;
    config.file_size = FILE_HEADER_BYTES + blocks * 64 * 1024;
    config.flush_max_ms = 20;
    config
}

fn head(n: u8) -> EntryHead {
    EntryHead {
        kind: format::KIND_RECORD,
        compression: Method::None,
        plain_len: 0,
        generation: 1,
        seq: 0,
        digest: Digest([n; 20]),
        void_time: 0,
        last_update_ms: 5,
    }
}

#[test]
fn appends_become_durable_and_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(dir.path(), 8);
    config.commit_to_device = true;
    let (device, used) = Device::open(config, "test").expect("open");
    assert!(used.is_empty());
    device.finish_cold_start(0).expect("cold start");
    let device = Arc::new(device);
    let flusher = {
        let device = Arc::clone(&device);
        std::thread::spawn(move || device.run_flusher())
    };
    let mut last = None;
    for n in 0..50u8 {
        let placed = device
            .append_record(head(n), b"s", &[n; 3000], Purpose::Client)
            .expect("append");
        last = Some(placed);
    }
    let placed = last.expect("placed");
    let wait = device.commit_wait(placed.position).expect("commit mode");
    wait.wait_blocking().expect("durable");
    assert!(device.durable() >= placed.position);
    let mut buf = Vec::new();
    device.read_block(placed.block, &mut buf).expect("read");
    let seq = format::read_block_header(&buf).expect("header");
    assert_eq!(seq, device.block_seq(placed.block));
    let count = format::EntryIter::new(&buf, seq).count();
    assert!(count > 0);
    device.shutdown();
    flusher.join().expect("flusher");
}

#[test]
fn out_of_space_when_blocks_run_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (device, _) = Device::open(config(dir.path(), 4), "test").expect("open");
    device.finish_cold_start(0).expect("cold start");
    let mut refused = None;
    for n in 0..200u8 {
        if let Err(error) = device.append_record(head(n), b"", &[0; 8000], Purpose::Client) {
            refused = Some(error);
            break;
        }
    }
    assert_eq!(refused, Some(AppendError::OutOfSpace));
    // Deletes may still use the reserve.
    assert!(device
        .append_record(head(1), b"", &[0; 8], Purpose::Delete)
        .is_ok());
}

#[test]
fn truncate_table_survives_reopen_and_a_torn_slot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = TruncateTable {
        namespace_lut_ms: 7,
        sets: vec![("demo".into(), 99), ("other".into(), 5)],
    };
    {
        let (device, _) = Device::open(config(dir.path(), 4), "test").expect("open");
        device.write_truncate_table(&table).expect("write");
        let mut newer = table.clone();
        newer.namespace_lut_ms = 8;
        device.write_truncate_table(&newer).expect("write");
    }
    let (device, _) = Device::open(config(dir.path(), 4), "test").expect("reopen");
    assert_eq!(device.read_truncate_table().namespace_lut_ms, 8);
    // Tear the newer slot: the older one is used.
    let file = OpenOptions::new()
        .write(true)
        .open(dir.path().join("ns.dat"))
        .expect("open");
    // Writes alternate slots 1, 0, ...: the newer table is in slot 0.
    file.write_all_at(&[0xff; 16], META_SLOT_OFFSETS[0] + 40)
        .expect("tear");
    let (device, _) = Device::open(config(dir.path(), 4), "test").expect("reopen");
    assert_eq!(device.read_truncate_table(), table);
}

#[test]
fn a_new_file_is_allocated_not_sparse() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    drop(Device::open(config(dir.path(), 8), "test").expect("open"));
    let metadata = std::fs::metadata(dir.path().join("ns.dat")).expect("stat");
    assert_eq!(metadata.len(), FILE_HEADER_BYTES + 8 * 64 * 1024);
    assert!(
        metadata.blocks() * 512 >= metadata.len(),
        "{} blocks",
        metadata.blocks()
    );
}

#[test]
fn a_changed_block_size_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(Device::open(config(dir.path(), 4), "test").expect("open"));
    let mut other = config(dir.path(), 4);
    other.write_block_size = 128 * 1024;
    other.file_size = FILE_HEADER_BYTES + 8 * 128 * 1024;
    let error = Device::open(other, "test").err().expect("refused");
    assert!(error.contains("write-block-size"), "{error}");
}
