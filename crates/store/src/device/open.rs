//! Opening a namespace's files: checking or writing their headers, reading
//! every block header, and (after the cold start has loaded the records)
//! building the free list.

use super::blocks::{BlockInfo, STATE_FREE, STATE_USED};
use super::disk::{self, Disk, Disks, Files};
use super::flusher::FlushQueue;
use super::format::{self, FileHeader, BLOCK_HEADER_BYTES, FILE_HEADER_BYTES, FORMAT_VERSION};
use super::meta::SEQ_RESERVE;
use super::writer::Writer;
use super::{
    position, Device, DeviceConfig, DeviceStats, OFFSET_BITS, WRITE_BLOCK_MAX, WRITE_BLOCK_MIN,
};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

impl Device {
    /// Opens (creating if needed) the files of namespace `namespace` and
    /// reads every block header. Returns the device and the used blocks
    /// with their sequence numbers, oldest first, for the cold start.
    pub fn open(config: DeviceConfig, namespace: &str) -> Result<(Device, Vec<u32>), String> {
        Device::open_with(config, namespace, &Files)
    }

    /// [`Device::open`] on the disks `disks` opens (tests inject faults).
    pub fn open_with(
        config: DeviceConfig,
        namespace: &str,
        disks: &dyn Disks,
    ) -> Result<(Device, Vec<u32>), String> {
        let block_size = config.write_block_size;
        if !(WRITE_BLOCK_MIN..=WRITE_BLOCK_MAX).contains(&block_size)
            || !block_size.is_power_of_two()
        {
            return Err(format!(
                "write-block-size {block_size} must be a power of two from {WRITE_BLOCK_MIN} to {WRITE_BLOCK_MAX}"
            ));
        }
        if config.files.is_empty() {
            return Err("storage-engine device needs at least one file or device".into());
        }
        let mut files = Vec::new();
        let mut file_base = vec![0u32];
        for (index, path) in config.files.iter().enumerate() {
            let (file, blocks) = open_file(disks, path, index as u32, &config, namespace)?;
            files.push(file);
            let last = *file_base.last().unwrap_or(&0);
            file_base.push(last + blocks);
        }
        let total = *file_base.last().unwrap_or(&0);
        let blocks: Box<[BlockInfo]> = std::iter::repeat_with(BlockInfo::default)
            .take(total as usize)
            .collect();
        let (durable_watch, _) = tokio::sync::watch::channel(0u64);
        let mut device = Device {
            writer: Mutex::new(Writer::new(1)),
            files,
            file_base,
            blocks,
            free: Mutex::new(VecDeque::new()),
            free_count: AtomicU32::new(0),
            queue: Mutex::new(FlushQueue::default()),
            queue_signal: Condvar::new(),
            durable: AtomicU64::new(0),
            durable_lock: Mutex::new(()),
            durable_signal: Condvar::new(),
            durable_watch,
            failed: AtomicBool::new(false),
            failure: AtomicU8::new(super::FAILURE_NONE),
            compression: AtomicU64::new(config.compression.pack()),
            tombstones_counted_from: AtomicU64::new(0),
            first_new_seq: AtomicU64::new(u64::MAX),
            meta: Mutex::new(super::meta::MetaState::default()),
            seq_floor: AtomicU64::new(0),
            io_lock: Mutex::new(()),
            stats: DeviceStats::default(),
            config,
        };
        // Read every block header.
        let mut used: Vec<(u64, u32)> = Vec::new();
        let mut head = [0u8; BLOCK_HEADER_BYTES];
        let mut bad_blocks = 0u64;
        for id in 0..total {
            let (file, offset) = device.locate(id);
            if disk::read_exact_at(file, &mut head, offset).is_err() {
                bad_blocks += 1;
                continue;
            }
            match format::read_block_header(&head) {
                Some(seq) => used.push((seq, id)),
                None if head[0..4] == format::BLOCK_MAGIC.to_le_bytes() => {
                    bad_blocks += 1;
                    tracing::warn!(namespace, block = id, "block header damaged: block skipped");
                }
                None => {}
            }
        }
        used.sort_unstable();
        for pair in used.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(format!(
                    "blocks {} and {} both carry sequence number {}: the files do not belong together",
                    pair[0].1, pair[1].1, pair[0].0
                ));
            }
        }
        // Never a sequence given before, even to a block since erased.
        device.read_truncate_table();
        let next_seq = used
            .last()
            .map_or(1, |&(seq, _)| seq + 1)
            .max(device.seq_floor());
        *device.writer.get_mut() = Writer::new(next_seq);
        for &(seq, id) in &used {
            if let Some(info) = device.blocks.get(id as usize) {
                info.seq.store(seq, Ordering::Relaxed);
                info.state.store(STATE_USED, Ordering::Relaxed);
            }
        }
        device
            .stats
            .cold_start_bad_blocks
            .store(bad_blocks, Ordering::Relaxed);
        Ok((device, used.into_iter().map(|(_, id)| id).collect()))
    }

    /// After the cold start: blocks holding nothing live become free, the
    /// others stay used; the write position starts after the newest block.
    /// `tombstones_from` is the sequence number from which the cold start
    /// counted tombstones live (see `Device::tombstones_counted_from`).
    pub fn finish_cold_start(&self, tombstones_from: u64) -> Result<(), String> {
        self.tombstones_counted_from
            .store(tombstones_from, Ordering::Relaxed);
        let files = self.files.len().max(1);
        let mut per_file: Vec<Vec<u32>> = vec![Vec::new(); files];
        let mut emptied = Vec::new();
        for (id, info) in self.blocks.iter().enumerate() {
            let used = info.state.load(Ordering::Relaxed) == STATE_USED;
            if used && info.live.load(Ordering::Relaxed) > 0 {
                continue;
            }
            if used {
                emptied.push(id as u32);
            }
            assert!(
                info.live.load(Ordering::Relaxed) == 0,
                "a block without live entries holds live bytes"
            );
            info.state.store(STATE_FREE, Ordering::Relaxed);
            let file = self.file_of(id as u32);
            if let Some(list) = per_file.get_mut(file) {
                list.push(id as u32);
            }
        }
        // Stripe: alternate files.
        let mut free = self.free.lock();
        free.clear();
        let longest = per_file.iter().map(Vec::len).max().unwrap_or(0);
        for i in 0..longest {
            for list in &per_file {
                if let Some(&id) = list.get(i) {
                    free.push_back(id);
                }
            }
        }
        self.free_count.store(free.len() as u32, Ordering::Relaxed);
        drop(free);
        // Everything read back is on the device.
        let next_seq = self.writer.lock().next_seq;
        self.first_new_seq.store(next_seq, Ordering::Relaxed);
        self.publish_durable(position(next_seq.saturating_sub(1), (1 << OFFSET_BITS) - 1));
        self.raise_seq_floor(next_seq + SEQ_RESERVE)
            .map_err(|e| format!("cannot write the sequence floor: {e}"))?;
        if !emptied.is_empty() && !self.erase_headers(&emptied) {
            return Err("cannot erase the headers of emptied blocks".into());
        }
        Ok(())
    }
}

fn open_file(
    disks: &dyn Disks,
    path: &Path,
    index: u32,
    config: &DeviceConfig,
    namespace: &str,
) -> Result<(Box<dyn Disk>, u32), String> {
    let shown = path.display();
    let file = disks
        .open(path)
        .map_err(|e| format!("cannot open storage file {shown}: {e}"))?;
    let is_block_device = file.is_block_device();
    let current = file
        .size()
        .map_err(|e| format!("cannot size {shown}: {e}"))?;
    let size = if is_block_device {
        if config.file_size > 0 {
            config.file_size.min(current)
        } else {
            current
        }
    } else {
        if config.file_size == 0 {
            return Err(format!("file {shown} needs a filesize"));
        }
        config.file_size
    };
    let block = u64::from(config.write_block_size);
    if size < FILE_HEADER_BYTES + 4 * block {
        return Err(format!(
            "{shown}: size {size} is too small: it must hold the {FILE_HEADER_BYTES}-byte header and at least 4 write blocks of {block}"
        ));
    }
    let blocks = u32::try_from((size - FILE_HEADER_BYTES) / block)
        .map_err(|_| format!("{shown}: too many write blocks"))?;
    let usable = FILE_HEADER_BYTES + u64::from(blocks) * block;
    let mut head = vec![0u8; 64];
    let read = if current >= 64 {
        disk::read_exact_at(&*file, &mut head, 0).map_or(0, |()| 64)
    } else {
        0
    };
    let expected = FileHeader {
        version: FORMAT_VERSION,
        block_size: config.write_block_size,
        file_index: index,
        usable_bytes: usable,
        namespace: namespace.to_owned(),
    };
    match FileHeader::decode(&head[..read]) {
        Some(found) => {
            if found.version > FORMAT_VERSION {
                return Err(format!(
                    "{shown} is in storage format {}, written by a newer Bolide; this one reads formats up to {FORMAT_VERSION}",
                    found.version
                ));
            }
            if found.block_size != config.write_block_size {
                return Err(format!(
                    "{shown} was written with write-block-size {}, not {}",
                    found.block_size, config.write_block_size
                ));
            }
            if found.namespace != expected.namespace || found.file_index != index {
                return Err(format!(
                    "{shown} belongs to namespace '{}' as file {}, not '{namespace}' file {index}",
                    found.namespace, found.file_index
                ));
            }
            if found.usable_bytes > usable {
                return Err(format!(
                    "{shown} held {} bytes of blocks and is now configured for {usable}: shrinking loses data",
                    found.usable_bytes
                ));
            }
            if found.version < FORMAT_VERSION || found.usable_bytes != usable {
                // Its old entries still read; new ones are written in the
                // current format, which the header now announces (so that
                // an older binary refuses the file).
                let upgraded = FileHeader {
                    usable_bytes: usable,
                    ..expected.clone()
                };
                disk::write_all_at(&*file, &upgraded.encode()[..64], 0)
                    .and_then(|()| file.sync())
                    .map_err(|e| format!("cannot update the header of {shown}: {e}"))?;
                if found.version < FORMAT_VERSION {
                    tracing::info!(
                        file = %shown,
                        from = found.version,
                        to = FORMAT_VERSION,
                        "storage file format upgraded; its records read as they are"
                    );
                }
            }
        }
        None if FileHeader::has_magic(&head) => {
            return Err(format!(
                "{shown}: file header is damaged; refusing to reinitialize it"
            ));
        }
        None => {
            // A new file (or a blank device): reserve it and write the header.
            if !is_block_device {
                file.set_len(usable)
                    .map_err(|e| format!("cannot size {shown} to {usable} bytes: {e}"))?;
            }
            disk::write_all_at(&*file, &expected.encode(), 0)
                .and_then(|()| file.sync())
                .map_err(|e| format!("cannot initialize {shown}: {e}"))?;
        }
    }
    if !is_block_device && current < usable {
        file.set_len(usable)
            .map_err(|e| format!("cannot grow {shown} to {usable} bytes: {e}"))?;
    }
    Ok((file, blocks))
}
