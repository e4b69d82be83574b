//! The device's files behind a small trait.
//!
//! The engine reads and writes its files only through [`Disk`] (positioned
//! reads and writes, a data sync, size and length), opened through
//! [`Disks`]. Production uses [`Files`]: plain files or raw block devices
//! with the same syscalls as before the trait (`pread`, `pwrite`,
//! `fdatasync`, `posix_fallocate`, `posix_fadvise`), one virtual call per
//! syscall and no copy or lock added. Tests open a simulated disk instead
//! (`device::faults`) that fails, shortens, slows or tears writes and
//! forgets what was not synced when the power is cut.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// One open storage file or block device.
pub trait Disk: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; how many (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes up to `bytes.len()` bytes at `offset`; how many. Fewer than
    /// asked is a short write: the caller writes the rest.
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<usize>;
    /// Makes every write so far durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// The size in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Makes a file at least `bytes` long, its space allocated where the
    /// file system can (so a full file system is an error now, not a failed
    /// write later). Not for block devices.
    fn set_len(&self, bytes: u64) -> io::Result<()>;
    /// Whether this is a raw block device (its size is the device's).
    fn is_block_device(&self) -> bool {
        false
    }
    /// A hint that `bytes` at `offset` will be read soon.
    fn will_need(&self, _offset: u64, _bytes: u64) {}
}

/// Opens the disks of a namespace.
pub trait Disks: Send + Sync {
    /// Opens (creating if missing) the file or device at `path`.
    fn open(&self, path: &Path) -> io::Result<Box<dyn Disk>>;
}

/// Reads exactly `buf.len()` bytes at `offset` (short reads continue).
pub fn read_exact_at(disk: &dyn Disk, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match disk.read_at(buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = buf.get_mut(n..).unwrap_or_default();
                offset += n as u64;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Writes all of `bytes` at `offset` (short writes continue).
pub fn write_all_at(disk: &dyn Disk, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
    while !bytes.is_empty() {
        match disk.write_at(bytes, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = bytes.get(n..).unwrap_or_default();
                offset += n as u64;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Plain files and block devices.
#[derive(Clone, Copy, Debug, Default)]
pub struct Files;

impl Disks for Files {
    fn open(&self, path: &Path) -> io::Result<Box<dyn Disk>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let block_device = {
            use std::os::unix::fs::FileTypeExt;
            file.metadata()?.file_type().is_block_device()
        };
        Ok(Box::new(FileDisk { file, block_device }))
    }
}

/// A file or block device, read and written with `pread`/`pwrite`.
pub struct FileDisk {
    file: File,
    block_device: bool,
}

impl Disk for FileDisk {
    #[inline]
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    #[inline]
    fn write_at(&self, bytes: &[u8], offset: u64) -> io::Result<usize> {
        self.file.write_at(bytes, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size(&self) -> io::Result<u64> {
        if self.block_device {
            io::Seek::seek(&mut &self.file, io::SeekFrom::End(0))
        } else {
            Ok(self.file.metadata()?.len())
        }
    }

    fn set_len(&self, bytes: u64) -> io::Result<()> {
        reserve(&self.file, bytes)
    }

    fn is_block_device(&self) -> bool {
        self.block_device
    }

    fn will_need(&self, offset: u64, bytes: u64) {
        advise_will_need(&self.file, offset, bytes);
    }
}

/// Sizes a storage file and allocates its blocks on the file system now,
/// so a full file system is an error at start, not a failed write later
/// (a sparse file would promise space it may not get). File systems that
/// cannot preallocate get a sized (sparse) file.
fn reserve(file: &File, bytes: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let length = libc::off_t::try_from(bytes).map_err(io::Error::other)?;
    #[expect(unsafe_code, reason = "posix_fallocate on our own open file")]
    // SAFETY: the descriptor is valid for the borrow of `file`;
    // posix_fallocate reads only its integer arguments.
    let code = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, length) };
    match code {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => {
            tracing::warn!("file system cannot preallocate; storage file is sparse");
            if file.metadata()?.len() < bytes {
                file.set_len(bytes)?;
            }
            Ok(())
        }
        code => Err(io::Error::from_raw_os_error(code)),
    }
}

/// `posix_fadvise(WILLNEED)` of `bytes` at `offset`; a hint, errors ignored.
fn advise_will_need(file: &File, offset: u64, bytes: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(length)) = (libc::off_t::try_from(offset), libc::off_t::try_from(bytes))
    else {
        return;
    };
    #[expect(unsafe_code, reason = "posix_fadvise on our own open file")]
    // SAFETY: the descriptor is valid for the borrow of `file`;
    // posix_fadvise reads only its integer arguments.
    let _ =
        unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, length, libc::POSIX_FADV_WILLNEED) };
}
