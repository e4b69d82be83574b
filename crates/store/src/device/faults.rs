//! A simulated disk for fault-injection and power-loss tests (compiled for
//! tests only).
//!
//! Each file keeps two images: what a reader sees now (the page cache) and
//! what is durable, plus the writes made since the last sync. A sync makes
//! them durable. [`SimDisks::power_cut`] then decides, write by write and
//! from a seed, what of the unsynced writes reached the media: nothing, all
//! of it, a prefix torn at any byte, or a random set of its 512-byte
//! sectors; the next open sees only that. Faults on demand: short writes,
//! write errors (`EIO`, `ENOSPC`) after a random prefix, sync errors that
//! lose the unsynced writes as Linux may do (a later sync that succeeds
//! does not bring them back), and a slow disk. After a cut, handles opened
//! before it fail every call, as a dead process's would.
//!
//! Modelled on cberner/redb's crash-consistency backend (live vs. durable
//! bytes) and TigerBeetle's storage simulator.

use super::disk::{Disk, Disks};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const SECTOR: usize = 512;

/// Faults the disks inject until changed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    /// Writes stop at a random byte (the caller writes the rest).
    pub short_writes: bool,
    /// Writes fail with this OS error, often after writing a prefix.
    pub write_error: Option<i32>,
    /// Syncs fail with `EIO`; the unsynced writes are lost (never durable).
    pub fail_syncs: bool,
    /// Every write and sync takes this long.
    pub latency: Duration,
}

/// What a power cut did to the unsynced writes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cut {
    pub dropped: u32,
    pub kept: u32,
    pub torn: u32,
    pub sectors: u32,
}

#[derive(Default)]
struct SimFile {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(usize, Vec<u8>)>,
}

struct Machine {
    files: HashMap<PathBuf, SimFile>,
    /// Bumped by every power cut; handles of an earlier epoch are dead.
    epoch: u64,
    faults: Faults,
    rng: u64,
    writes: u64,
    syncs: u64,
}

impl Machine {
    fn next(&mut self) -> u64 {
        // SplitMix64.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// The disks of one simulated machine (cloning shares them).
#[derive(Clone)]
pub(crate) struct SimDisks {
    machine: Arc<Mutex<Machine>>,
}

impl SimDisks {
    pub(crate) fn new(seed: u64) -> SimDisks {
        SimDisks {
            machine: Arc::new(Mutex::new(Machine {
                files: HashMap::new(),
                epoch: 0,
                faults: Faults::default(),
                rng: seed,
                writes: 0,
                syncs: 0,
            })),
        }
    }

    pub(crate) fn set_faults(&self, faults: Faults) {
        self.machine.lock().faults = faults;
    }

    pub(crate) fn faults(&self) -> Faults {
        self.machine.lock().faults.clone()
    }

    /// Writes and syncs so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let machine = self.machine.lock();
        (machine.writes, machine.syncs)
    }

    /// Cuts the power: every unsynced write is dropped, kept, torn at a
    /// byte or kept in part sector by sector, the reader's view becomes the
    /// durable image, and every open handle dies. Faults are cleared (the
    /// machine comes back healthy).
    pub(crate) fn power_cut(&self) -> Cut {
        let mut machine = self.machine.lock();
        let machine = &mut *machine;
        let mut cut = Cut::default();
        let mut paths: Vec<PathBuf> = machine.files.keys().cloned().collect();
        paths.sort();
        for path in paths {
            let Some(mut file) = machine.files.remove(&path) else {
                continue;
            };
            for (offset, bytes) in std::mem::take(&mut file.pending) {
                match machine.below(4) {
                    0 => cut.dropped += 1,
                    1 => {
                        cut.kept += 1;
                        apply(&mut file.durable, offset, &bytes);
                    }
                    2 => {
                        cut.torn += 1;
                        let keep = machine.below(bytes.len());
                        apply(&mut file.durable, offset, &bytes[..keep]);
                    }
                    _ => {
                        cut.sectors += 1;
                        let mut at = 0;
                        while at < bytes.len() {
                            let end = (at + SECTOR).min(bytes.len());
                            if machine.below(2) == 0 {
                                apply(&mut file.durable, offset + at, &bytes[at..end]);
                            }
                            at = end;
                        }
                    }
                }
            }
            file.live = file.durable.clone();
            machine.files.insert(path, file);
        }
        machine.epoch += 1;
        machine.faults = Faults::default();
        cut
    }

    /// Flips one byte of the durable image (and the live one) of `path`.
    pub(crate) fn corrupt(&self, path: &Path, offset: usize) {
        let mut machine = self.machine.lock();
        if let Some(file) = machine.files.get_mut(path) {
            if let Some(byte) = file.durable.get_mut(offset) {
                *byte ^= 0x5A;
            }
            if let Some(byte) = file.live.get_mut(offset) {
                *byte ^= 0x5A;
            }
        }
    }
}

fn apply(image: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    if image.len() < offset + bytes.len() {
        image.resize(offset + bytes.len(), 0);
    }
    image[offset..offset + bytes.len()].copy_from_slice(bytes);
}

impl Disks for SimDisks {
    fn open(&self, path: &Path) -> io::Result<Box<dyn Disk>> {
        let mut machine = self.machine.lock();
        let epoch = machine.epoch;
        machine.files.entry(path.to_owned()).or_default();
        Ok(Box::new(SimDisk {
            machine: Arc::clone(&self.machine),
            path: path.to_owned(),
            epoch,
        }))
    }
}

struct SimDisk {
    machine: Arc<Mutex<Machine>>,
    path: PathBuf,
    epoch: u64,
}

fn dead() -> io::Error {
    io::Error::other("the power was cut: this handle is gone")
}

impl SimDisk {
    fn slow(&self) {
        let latency = self.machine.lock().faults.latency;
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
    }
}

impl Disk for SimDisk {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let machine = self.machine.lock();
        if machine.epoch != self.epoch {
            return Err(dead());
        }
        let file = machine.files.get(&self.path).ok_or_else(dead)?;
        let offset = offset as usize;
        let available = file.live.len().saturating_sub(offset).min(buf.len());
        if available > 0 {
            buf[..available].copy_from_slice(&file.live[offset..offset + available]);
        }
        Ok(available)
    }

    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<usize> {
        self.slow();
        let mut machine = self.machine.lock();
        let machine = &mut *machine;
        if machine.epoch != self.epoch {
            return Err(dead());
        }
        machine.writes += 1;
        let mut length = bytes.len();
        if let Some(errno) = machine.faults.write_error {
            // Often some of it goes out first, then the error.
            if length < 2 || machine.below(2) == 0 {
                return Err(io::Error::from_raw_os_error(errno));
            }
            length = 1 + machine.below(length - 1);
        } else if machine.faults.short_writes && length > 1 {
            length = 1 + machine.below(length - 1);
        }
        let file = machine.files.get_mut(&self.path).ok_or_else(dead)?;
        let offset = offset as usize;
        apply(&mut file.live, offset, &bytes[..length]);
        file.pending.push((offset, bytes[..length].to_vec()));
        Ok(length)
    }

    fn sync(&self) -> io::Result<()> {
        self.slow();
        let mut machine = self.machine.lock();
        let machine = &mut *machine;
        if machine.epoch != self.epoch {
            return Err(dead());
        }
        machine.syncs += 1;
        let fail = machine.faults.fail_syncs;
        let file = machine.files.get_mut(&self.path).ok_or_else(dead)?;
        if fail {
            // As Linux may: the dirty pages are marked clean and their
            // contents never reach the media, though reads still see them.
            file.pending.clear();
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        for (offset, bytes) in std::mem::take(&mut file.pending) {
            apply(&mut file.durable, offset, &bytes);
        }
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        let machine = self.machine.lock();
        if machine.epoch != self.epoch {
            return Err(dead());
        }
        Ok(machine.files.get(&self.path).map_or(0, |f| f.live.len()) as u64)
    }

    fn set_len(&self, bytes: u64) -> io::Result<()> {
        let mut machine = self.machine.lock();
        if machine.epoch != self.epoch {
            return Err(dead());
        }
        let file = machine.files.get_mut(&self.path).ok_or_else(dead)?;
        let bytes = bytes as usize;
        // The size is metadata: durable at once (as after fallocate + sync).
        if file.live.len() < bytes {
            file.live.resize(bytes, 0);
        }
        if file.durable.len() < bytes {
            file.durable.resize(bytes, 0);
        }
        Ok(())
    }
}
