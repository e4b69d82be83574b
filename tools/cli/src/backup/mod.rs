//! `bolide backup` and `bolide restore`: Aerospike's backup tools'
//! commands, flags and `.asb` files (docs/backup.md), over the Aerospike
//! protocol (bolide-wire for scans and writes, info for the rest), so they
//! work against Aerospike servers too.
//!
//! - [`cluster`]: connections, node discovery, who masters each partition.
//! - [`run_backup`]: partition scans, each partition from its master,
//!   resumed after its last digest wherever it moves; files, rotation,
//!   the state file.
//! - [`run_restore`]: files in, pipelined writes out, conflict policies.

pub mod cluster;
mod run_backup;
mod run_restore;
mod state;

pub use run_backup::backup;
pub use run_restore::restore;

use bolide_backup_format::stream::{self, Cipher, Key};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Compression {
    Zstd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Encryption {
    Aes128,
    Aes256,
}

/// Flags of `bolide backup`, named as asbackup names them.
#[derive(Args, Clone, Debug)]
pub struct BackupArgs {
    /// Namespace to back up.
    #[arg(short = 'n', long)]
    pub namespace: String,
    /// Sets to back up (comma-separated or repeated); all when absent.
    #[arg(short = 's', long = "set", value_delimiter = ',')]
    pub sets: Vec<String>,
    /// Directory for the backup files (<prefix>_<NNNNN>.asb).
    #[arg(short = 'd', long)]
    pub directory: Option<PathBuf>,
    /// One backup file; '-' for standard output.
    #[arg(short = 'o', long)]
    pub output_file: Option<String>,
    /// File name prefix in a directory (default: the namespace).
    #[arg(short = 'q', long)]
    pub output_file_prefix: Option<String>,
    /// Remove the backup files already in the directory (or the output file) first.
    #[arg(short = 'r', long)]
    pub remove_files: bool,
    /// Scans run at once (1-100); the partitions are split evenly between them.
    #[arg(short = 'w', long, default_value_t = 1)]
    pub parallel: usize,
    /// Partitions to back up: 'BEGIN[-COUNT]' ranges and base64 digests
    /// (that digest's partition, after it), comma-separated.
    #[arg(short = 'X', long)]
    pub partition_list: Option<String>,
    /// Back up from after this base64 digest: the rest of its partition and every later partition.
    #[arg(short = 'D', long)]
    pub after_digest: Option<String>,
    /// Only records last changed at or after this local time (YYYY-MM-DD_HH:MM:SS).
    #[arg(short = 'a', long)]
    pub modified_after: Option<String>,
    /// Only records last changed before this local time (YYYY-MM-DD_HH:MM:SS).
    #[arg(short = 'b', long)]
    pub modified_before: Option<String>,
    /// Only keys and metadata, no bins (restore skips such records).
    #[arg(short = 'x', long)]
    pub no_bins: bool,
    /// Only these bins (comma-separated).
    #[arg(short = 'B', long, value_delimiter = ',')]
    pub bin_list: Vec<String>,
    /// Only records that never expire (no time to live).
    #[arg(long)]
    pub no_ttl_only: bool,
    /// Only records this filter expression selects: the base64 of its
    /// msgpack, as the clients' `Exp.build()` / `base64()` give it.
    #[arg(long)]
    pub filter_exp: Option<String>,
    /// Back up at most this many records in all (0: every record); the
    /// partitions not reached stay in the state file for `--continue`.
    #[arg(short = 'M', long, default_value_t = 0)]
    pub max_records: u64,
    /// No records: only secondary indexes and UDF modules.
    #[arg(short = 'R', long)]
    pub no_records: bool,
    /// No secondary index definitions.
    #[arg(short = 'I', long)]
    pub no_indexes: bool,
    /// No UDF modules.
    #[arg(short = 'u', long)]
    pub no_udfs: bool,
    /// Start a new file once one reaches this many MiB (directory mode).
    #[arg(short = 'F', long, default_value_t = 250.0)]
    pub file_limit: f64,
    /// Estimate the backup's size from a sample of records, back up nothing.
    #[arg(short = 'e', long)]
    pub estimate: bool,
    /// Records in the --estimate sample.
    #[arg(long, default_value_t = 10_000)]
    pub estimate_samples: u64,
    /// Read at most this many records a second in all (0: no limit).
    #[arg(short = 'L', long, default_value_t = 0)]
    pub records_per_second: u64,
    /// Blobs raw instead of base64 (smaller files, still .asb).
    #[arg(short = 'C', long)]
    pub compact: bool,
    /// Compress the files (one zstd stream per file).
    #[arg(short = 'z', long, value_enum)]
    pub compress: Option<Compression>,
    /// zstd level.
    #[arg(long, default_value_t = 3)]
    pub compression_level: i32,
    /// Encrypt the files (AES-CTR; needs --encryption-key-file).
    #[arg(short = 'y', long, value_enum)]
    pub encrypt: Option<Encryption>,
    /// PEM RSA private key the AES key is derived from.
    #[arg(long)]
    pub encryption_key_file: Option<PathBuf>,
    /// Where to keep the state an interrupted backup resumes from (a file,
    /// or a directory for <namespace>.asb.state).
    #[arg(long)]
    pub state_file_dst: Option<PathBuf>,
    /// Resume the interrupted backup this state file describes.
    #[arg(short = 'c', long = "continue")]
    pub continue_from: Option<PathBuf>,
    /// Milliseconds a scan may wait for its node's next answer.
    #[arg(long, default_value_t = 30_000)]
    pub socket_timeout: u64,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    pub progress: bool,
    /// User to log in as on a secured node.
    #[arg(short = 'U', long)]
    pub user: Option<String>,
    /// Its password (asked for when -U is given without it).
    #[arg(short = 'P', long)]
    pub password: Option<String>,
}

/// Flags of `bolide restore`, named as asrestore names them.
#[derive(Args, Clone, Debug)]
pub struct RestoreArgs {
    /// Namespace to restore into: NS (the files' namespace), or SRC,DST to
    /// restore the files of SRC into DST.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Directory of .asb files (every *.asb in it).
    #[arg(short = 'd', long)]
    pub directory: Option<PathBuf>,
    /// One .asb file; '-' for standard input.
    #[arg(short = 'i', long)]
    pub input_file: Option<String>,
    /// Writers (connections) at once; also how many files are read at once.
    #[arg(short = 't', long, default_value_t = 16)]
    pub parallel: usize,
    /// Only records of these sets (comma-separated).
    #[arg(short = 's', long, value_delimiter = ',')]
    pub set_list: Vec<String>,
    /// Only these bins (comma-separated).
    #[arg(short = 'B', long, value_delimiter = ',')]
    pub bin_list: Vec<String>,
    /// Only create records that do not exist (an existing one is counted, not changed).
    #[arg(short = 'u', long)]
    pub unique: bool,
    /// Replace records whole instead of merging bins into them.
    #[arg(short = 'r', long)]
    pub replace: bool,
    /// Write whatever the generation of the record on the server.
    #[arg(short = 'g', long)]
    pub no_generation: bool,
    /// Seconds added to every record's time to live.
    #[arg(short = 'l', long, default_value_t = 0)]
    pub extra_ttl: u32,
    /// Skip and count records the file or the server rejects instead of stopping.
    #[arg(long)]
    pub ignore_record_error: bool,
    /// No records: only secondary indexes and UDF modules.
    #[arg(short = 'R', long)]
    pub no_records: bool,
    /// No secondary indexes.
    #[arg(short = 'I', long)]
    pub no_indexes: bool,
    /// Create the secondary indexes after the records.
    #[arg(short = 'L', long)]
    pub indexes_last: bool,
    /// No UDF modules.
    #[arg(short = 'F', long)]
    pub no_udfs: bool,
    /// Wait until every index is built before finishing.
    #[arg(short = 'w', long)]
    pub wait: bool,
    /// The files are compressed (as given to the backup).
    #[arg(short = 'z', long, value_enum)]
    pub compress: Option<Compression>,
    /// The files are encrypted (as given to the backup).
    #[arg(short = 'y', long, value_enum)]
    pub encrypt: Option<Encryption>,
    /// PEM RSA private key the AES key is derived from.
    #[arg(long)]
    pub encryption_key_file: Option<PathBuf>,
    /// Decode the files and count their records without writing anything.
    #[arg(long)]
    pub validate: bool,
    /// Tries for a write the server answers with a transient error.
    #[arg(long, default_value_t = 10)]
    pub max_retries: u32,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    pub progress: bool,
    /// User to log in as on a secured node.
    #[arg(short = 'U', long)]
    pub user: Option<String>,
    /// Its password (asked for when -U is given without it).
    #[arg(short = 'P', long)]
    pub password: Option<String>,
}

/// Logs the tool in as `user` on every node it connects to (backup's and
/// restore's own connections and their info requests), asking for the
/// password when it is not given. A `-U` before the command does the same.
fn log_in(user: &Option<String>, password: &Option<String>) -> Result<(), String> {
    match (user, password) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err("-P/--password needs -U/--user".to_owned()),
        (Some(user), password) => {
            let password = match password {
                Some(password) => password.clone(),
                None => crate::login::read_password(&format!("Password for {user}: "))?,
            };
            crate::login::set(user.clone(), password);
            Ok(())
        }
    }
}

/// The key, when encryption is asked for.
fn encryption_key(
    encrypt: Option<Encryption>,
    key_file: Option<&PathBuf>,
) -> Result<Option<Key>, String> {
    match (encrypt, key_file) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err("--encryption-key-file needs --encrypt aes128|aes256".to_owned()),
        (Some(_), None) => Err("--encrypt needs --encryption-key-file".to_owned()),
        (Some(mode), Some(path)) => {
            let cipher = match mode {
                Encryption::Aes128 => Cipher::Aes128,
                Encryption::Aes256 => Cipher::Aes256,
            };
            stream::read_key_file(path, cipher).map(Some)
        }
    }
}

// ------------------------------------------------------------ interruption

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM set a flag the work checks, so an interrupted
/// backup closes its files and saves its state.
#[expect(unsafe_code, reason = "libc calls installing a signal handler")]
fn catch_interrupts() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

// ------------------------------------------------------------ throttling

/// At most `rate` events a second, over all threads.
pub struct Limiter {
    rate: u64,
    started: Instant,
    count: AtomicU64,
}

impl Limiter {
    pub fn new(rate: u64) -> Option<Limiter> {
        (rate > 0).then(|| Limiter {
            rate,
            started: Instant::now(),
            count: AtomicU64::new(0),
        })
    }

    /// Counts `events` and sleeps until they are due.
    pub fn take(&self, events: u64) {
        let count = self.count.fetch_add(events, Ordering::Relaxed) + events;
        let due = Duration::from_secs_f64(count as f64 / self.rate as f64);
        let elapsed = self.started.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }
}

// ------------------------------------------------------------ progress

/// A progress line on stderr: redrawn on a terminal, a line every few
/// seconds with --progress, nothing otherwise.
pub struct ProgressLine {
    enabled: bool,
    terminal: bool,
    started: Instant,
    last: Option<Instant>,
}

impl ProgressLine {
    pub fn new(forced: bool) -> ProgressLine {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        ProgressLine {
            enabled: forced || terminal,
            terminal,
            started: Instant::now(),
            last: None,
        }
    }

    /// `total`: records expected, for the time left.
    pub fn show(&mut self, label: &str, records: u64, bytes: u64, total: Option<u64>) {
        use std::io::Write;
        if !self.enabled {
            return;
        }
        let every = if self.terminal {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(2)
        };
        if self.last.is_some_and(|last| last.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        let seconds = self.started.elapsed().as_secs_f64().max(1e-3);
        let rate = records as f64 / seconds;
        let mut line = format!(
            "{label}: {records} records, {:.1} MB, {rate:.0} records/s, {:.1} MB/s, {seconds:.0} s",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / seconds
        );
        if let Some(total) = total.filter(|&total| total > records && rate > 0.0) {
            let left = (total - records) as f64 / rate;
            line.push_str(&format!(
                ", about {left:.0} s left ({}%)",
                records * 100 / total
            ));
        }
        let mut err = std::io::stderr();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    pub fn finish(&mut self) {
        use std::io::Write;
        if self.enabled && self.terminal && self.last.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

// ------------------------------------------------------------ dates

/// `YYYY-MM-DD_HH:MM:SS` (or `YYYY-MM-DD`) in local time, as nanoseconds
/// since the Unix epoch.
pub fn parse_local_time(text: &str) -> Result<i64, String> {
    let bad = || format!("'{text}' is not a time (YYYY-MM-DD_HH:MM:SS, local time)");
    let (date, time) = text.split_once('_').unwrap_or((text, "00:00:00"));
    let numbers = |part: &str, separator: char| -> Option<Vec<i32>> {
        let values: Option<Vec<i32>> = part.split(separator).map(|n| n.parse().ok()).collect();
        values.filter(|values| values.len() == 3)
    };
    let date = numbers(date, '-').ok_or_else(bad)?;
    let time = numbers(time, ':').ok_or_else(bad)?;
    if !(1..=12).contains(&date[1])
        || !(1..=31).contains(&date[2])
        || !(0..24).contains(&time[0])
        || !(0..60).contains(&time[1])
        || !(0..61).contains(&time[2])
    {
        return Err(bad());
    }
    let seconds =
        local_seconds(date[0], date[1], date[2], time[0], time[1], time[2]).ok_or_else(bad)?;
    Ok(seconds * 1_000_000_000)
}

#[expect(unsafe_code, reason = "libc mktime converts local time")]
fn local_seconds(
    year: i32,
    month: i32,
    day: i32,
    hour: i32,
    minute: i32,
    second: i32,
) -> Option<i64> {
    // SAFETY: tm is plain data, zero-initialised then filled; mktime reads
    // and normalises it and returns -1 on failure.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = year - 1900;
        tm.tm_mon = month - 1;
        tm.tm_mday = day;
        tm.tm_hour = hour;
        tm.tm_min = minute;
        tm.tm_sec = second;
        tm.tm_isdst = -1;
        let seconds = libc::mktime(&mut tm);
        #[allow(clippy::useless_conversion, reason = "time_t is not i64 everywhere")]
        let seconds = i64::from(seconds);
        (seconds != -1).then_some(seconds)
    }
}

// ------------------------------------------------------------ msgpack

/// Just enough msgpack for filter expressions.
pub mod pack {
    pub fn array(out: &mut Vec<u8>, count: usize) {
        if count < 16 {
            out.push(0x90 | count as u8);
        } else {
            out.push(0xdc);
            out.extend_from_slice(&(count as u16).to_be_bytes());
        }
    }

    pub fn int(out: &mut Vec<u8>, value: i64) {
        if (0..128).contains(&value) {
            out.push(value as u8);
        } else {
            out.push(0xd3);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }

    /// A string as expressions carry it: the particle type byte first.
    pub fn particle_string(out: &mut Vec<u8>, bytes: &[u8]) {
        let length = bytes.len() + 1;
        if length < 32 {
            out.push(0xa0 | length as u8);
        } else if length < 256 {
            out.push(0xd9);
            out.push(length as u8);
        } else {
            out.push(0xda);
            out.extend_from_slice(&(length as u16).to_be_bytes());
        }
        out.push(3);
        out.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_times_parse() {
        let a = parse_local_time("2024-01-02_03:04:05").expect("time");
        let b = parse_local_time("2024-01-02_03:04:06").expect("time");
        assert_eq!(b - a, 1_000_000_000);
        assert!(parse_local_time("2024-13-02_03:04:05").is_err());
        assert!(parse_local_time("yesterday").is_err());
        assert_eq!(
            parse_local_time("2024-01-02").expect("date"),
            parse_local_time("2024-01-02_00:00:00").expect("time")
        );
    }
}
