//! `bolide backup`: partition scans of one namespace into `.asb` files.
//!
//! The partitions to back up are split evenly between `--parallel` jobs.
//! A job asks the cluster which node masters each of its partitions and
//! scans each node for the ones it masters (a PID_ARRAY, and a
//! DIGEST_ARRAY for partitions already begun). Records of a partition
//! come in descending digest order, so after each record the job knows
//! where that partition resumes: when a node dies or a partition moves,
//! the unfinished partitions are scanned again on their new master from
//! the last digest written, and every record is written once. A partition
//! the node no longer serves is answered "unavailable" and asked again.

use super::cluster::{self, Cluster, Connection, PartitionMap, PARTITIONS};
use super::state::{Cursor, State};
use super::{
    encryption_key, interrupted, log_in, pack, parse_local_time, BackupArgs, Limiter, ProgressLine,
};
use crate::{info, Target};
use base64::Engine;
use bolide_backup_format::asb::{
    self, Bin, Collection, Index, IndexValue, Record, Udf, UserKey, Value,
};
use bolide_backup_format::stream::{Key, LayeredWriter};
use bolide_wire::frame::MessageType;
use bolide_wire::message::{encode_field, encode_header, encode_op, MsgHeader};
use bolide_wire::{field_type, info1, info3, op_type};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a job keeps retrying partitions no node will serve.
const RETRY_TIME_MAX: Duration = Duration::from_secs(300);
/// A single output file is made resumable this often (bytes of text).
const CHECKPOINT_TEXT_BYTES: u64 = 64 << 20;
const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A file, or standard output.
enum OutputSink {
    File(BufWriter<File>),
    Stdout(std::io::Stdout),
}

impl Write for OutputSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            OutputSink::File(file) => file.write(bytes),
            OutputSink::Stdout(out) => out.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            OutputSink::File(file) => file.flush(),
            OutputSink::Stdout(out) => out.flush(),
        }
    }
}

impl OutputSink {
    fn sync(&mut self) -> std::io::Result<()> {
        match self {
            OutputSink::File(file) => {
                file.flush()?;
                file.get_ref().sync_all()
            }
            OutputSink::Stdout(out) => out.flush(),
        }
    }
}

/// What a scan asks for (everything but the partitions).
struct ScanTemplate {
    namespace: String,
    set: Option<String>,
    bins: Vec<String>,
    no_bins: bool,
    filter: Option<Vec<u8>>,
    records_per_second: u32,
}

impl ScanTemplate {
    fn new(args: &BackupArgs) -> Result<ScanTemplate, String> {
        let mut conditions: Vec<Vec<u8>> = Vec::new();
        let last_update = |compare: i64, nanoseconds: i64| {
            let mut out = Vec::new();
            pack::array(&mut out, 3);
            pack::int(&mut out, compare);
            pack::array(&mut out, 1);
            pack::int(&mut out, 66); // last_update(), ns since 1970
            pack::int(&mut out, nanoseconds);
            out
        };
        let after = args
            .modified_after
            .as_deref()
            .map(parse_local_time)
            .transpose()?;
        let before = args
            .modified_before
            .as_deref()
            .map(parse_local_time)
            .transpose()?;
        if let (Some(after), Some(before)) = (after, before) {
            if after >= before {
                return Err("--modified-after must be before --modified-before".to_owned());
            }
        }
        if let Some(after) = after {
            conditions.push(last_update(4, after)); // >=
        }
        if let Some(before) = before {
            conditions.push(last_update(5, before)); // <
        }
        if args.no_ttl_only {
            // void_time() == -1: the record never expires.
            let mut out = Vec::new();
            pack::array(&mut out, 3);
            pack::int(&mut out, 1);
            pack::array(&mut out, 1);
            pack::int(&mut out, 68);
            pack::int(&mut out, -1);
            conditions.push(out);
        }
        if let Some(text) = &args.filter_exp {
            let expression = BASE64
                .decode(text.trim())
                .map_err(|error| format!("--filter-exp is not base64: {error}"))?;
            if expression.is_empty() {
                return Err("--filter-exp is empty".to_owned());
            }
            conditions.push(expression);
        }
        let sets: Vec<String> = args
            .sets
            .iter()
            .filter(|set| !set.is_empty())
            .cloned()
            .collect();
        let set = match sets.as_slice() {
            [] => None,
            [one] => Some(one.clone()),
            many => {
                // Several sets: set_name() == a || set_name() == b …
                let mut out = Vec::new();
                pack::array(&mut out, many.len() + 1);
                pack::int(&mut out, 17);
                for set in many {
                    pack::array(&mut out, 3);
                    pack::int(&mut out, 1);
                    pack::array(&mut out, 1);
                    pack::int(&mut out, 70);
                    pack::particle_string(&mut out, set.as_bytes());
                }
                conditions.push(out);
                None
            }
        };
        let filter = match conditions.len() {
            0 => None,
            1 => conditions.pop(),
            count => {
                let mut out = Vec::new();
                pack::array(&mut out, count + 1);
                pack::int(&mut out, 16);
                for condition in conditions {
                    out.extend_from_slice(&condition);
                }
                Some(out)
            }
        };
        if args.no_bins && !args.bin_list.is_empty() {
            return Err("--no-bins and --bin-list exclude each other".to_owned());
        }
        let parallel = args.parallel.max(1) as u64;
        Ok(ScanTemplate {
            namespace: args.namespace.clone(),
            set,
            bins: args.bin_list.clone(),
            no_bins: args.no_bins,
            filter,
            records_per_second: u32::try_from(args.records_per_second.div_ceil(parallel))
                .unwrap_or(u32::MAX),
        })
    }

    /// A partition scan of `parts` (partitions, and where to resume).
    fn request(&self, parts: &[(u16, Option<[u8; 20]>)], max_records: u64) -> Vec<u8> {
        let mut body = Vec::new();
        let mut fields = 0u16;
        let mut field = |body: &mut Vec<u8>, kind: u8, data: &[u8]| {
            encode_field(body, kind, data);
            fields += 1;
        };
        let mut fields_bytes = Vec::new();
        field(
            &mut fields_bytes,
            field_type::NAMESPACE,
            self.namespace.as_bytes(),
        );
        if let Some(set) = &self.set {
            field(&mut fields_bytes, field_type::SET, set.as_bytes());
        }
        let pids: Vec<u8> = parts
            .iter()
            .filter(|(_, digest)| digest.is_none())
            .flat_map(|(pid, _)| pid.to_le_bytes())
            .collect();
        if !pids.is_empty() {
            field(&mut fields_bytes, field_type::PID_ARRAY, &pids);
        }
        let digests: Vec<u8> = parts
            .iter()
            .filter_map(|(_, digest)| *digest)
            .flatten()
            .collect();
        if !digests.is_empty() {
            field(&mut fields_bytes, field_type::DIGEST_ARRAY, &digests);
        }
        let task = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |elapsed| elapsed.as_nanos() as u64);
        field(&mut fields_bytes, field_type::TASK_ID, &task.to_be_bytes());
        if self.records_per_second > 0 {
            field(
                &mut fields_bytes,
                field_type::RECORDS_PER_SECOND,
                &self.records_per_second.to_be_bytes(),
            );
        }
        if max_records > 0 {
            field(
                &mut fields_bytes,
                field_type::MAX_RECORDS,
                &max_records.to_be_bytes(),
            );
        }
        if let Some(filter) = &self.filter {
            field(&mut fields_bytes, field_type::FILTER_EXPRESSION, filter);
        }
        let mut info1_flags = info1::READ;
        if self.no_bins {
            info1_flags |= info1::NO_BIN_DATA;
        } else if self.bins.is_empty() {
            info1_flags |= info1::GET_ALL;
        }
        let header = MsgHeader {
            info1: info1_flags,
            n_fields: fields,
            n_ops: self.bins.len() as u16,
            ..MsgHeader::default()
        };
        encode_header(&mut body, &header);
        body.extend_from_slice(&fields_bytes);
        for bin in &self.bins {
            encode_op(&mut body, op_type::READ, 0, bin.as_bytes(), &[]);
        }
        let mut frame = bolide_wire::ProtoHeader::encode(MessageType::Message, body.len()).to_vec();
        frame.extend_from_slice(&body);
        frame
    }
}

/// A record of a scan's answer as an `.asb` record.
fn record_from_row(row: &cluster::Row<'_>, namespace: &str) -> Result<Record, String> {
    let digest: [u8; 20] = row
        .fields
        .digest
        .and_then(|digest| digest.try_into().ok())
        .ok_or("a scan answer without a 20-byte digest")?;
    let name = |digest: &[u8; 20]| BASE64.encode(digest);
    let key = match row.fields.key {
        None => None,
        Some([particle_type, bytes @ ..]) => Some(match *particle_type {
            asb::particle::INTEGER => UserKey::Int(integer(bytes).ok_or("a bad integer key")?),
            asb::particle::FLOAT => UserKey::Double(f64::from_bits(
                u64::try_from(integer(bytes).ok_or("a bad double key")?).unwrap_or(0),
            )),
            asb::particle::STRING => UserKey::String(bytes.to_vec()),
            asb::particle::BLOB => UserKey::Bytes(bytes.to_vec()),
            other => {
                return Err(format!(
                    "record {}: a key of particle type {other} has no .asb form",
                    name(&digest)
                ))
            }
        }),
        Some([]) => None,
    };
    let mut bins = Vec::new();
    if row.header.info1 & info1::NO_BIN_DATA == 0 {
        for op in row.ops() {
            let value = match op.particle_type {
                asb::particle::NULL => Value::Nil,
                asb::particle::INTEGER => Value::Int(integer(op.value).ok_or("a bad integer")?),
                asb::particle::FLOAT => Value::Double(f64::from_bits(
                    integer(op.value).ok_or("a bad double")? as u64,
                )),
                asb::particle::STRING => Value::String(op.value.to_vec()),
                asb::particle::BOOL => Value::Bool(op.value.first().is_some_and(|&b| b != 0)),
                asb::particle::GEOJSON => {
                    Value::GeoJson(geojson_text(op.value).ok_or_else(|| {
                        format!("record {}: a malformed GeoJSON bin", name(&digest))
                    })?)
                }
                particle_type if asb::blob_letter(particle_type).is_some() => Value::Blob {
                    particle_type,
                    bytes: op.value.to_vec(),
                },
                other => {
                    return Err(format!(
                        "record {}, bin '{}': particle type {other} has no .asb form",
                        name(&digest),
                        String::from_utf8_lossy(op.name)
                    ))
                }
            };
            bins.push(Bin {
                name: op.name.to_vec(),
                value,
            });
        }
    }
    Ok(Record {
        key,
        namespace: row
            .fields
            .namespace
            .map_or_else(|| namespace.as_bytes().to_vec(), <[u8]>::to_vec),
        digest,
        set: row
            .fields
            .set
            .filter(|set| !set.is_empty())
            .map(<[u8]>::to_vec),
        generation: u16::try_from(row.header.generation).unwrap_or(u16::MAX),
        void_time: row.header.record_ttl,
        bins,
    })
}

/// A big-endian integer of 1 to 8 bytes.
fn integer(bytes: &[u8]) -> Option<i64> {
    match bytes.len() {
        8 => Some(i64::from_be_bytes(bytes.try_into().ok()?)),
        1..=7 => Some(bytes.iter().fold(0i64, |acc, &b| (acc << 8) | i64::from(b))),
        _ => None,
    }
}

/// The JSON text of a GeoJSON particle: flags (1 byte), cell count (2),
/// cells (8 each), then the text.
fn geojson_text(value: &[u8]) -> Option<Vec<u8>> {
    let (&[_flags, high, low], rest) = value.split_first_chunk::<3>()?;
    let cells = usize::from(u16::from_be_bytes([high, low])) * 8;
    rest.get(cells..).map(<[u8]>::to_vec)
}

/// Where the files go.
enum Destination {
    Directory(PathBuf),
    File(PathBuf),
    Stdout,
}

struct DirectoryOutput {
    directory: PathBuf,
    prefix: String,
    next_file: AtomicU32,
    limit_bytes: u64,
}

struct JobFile {
    name: String,
    writer: LayeredWriter<OutputSink>,
}

struct Single {
    writer: Option<LayeredWriter<OutputSink>>,
    live: Vec<Cursor>,
    since_checkpoint: u64,
}

enum Sink {
    Directory(DirectoryOutput),
    Single(Box<Mutex<Single>>),
}

struct Shared {
    namespace: String,
    cluster: Cluster,
    scan: ScanTemplate,
    compact: bool,
    level: Option<i32>,
    key: Option<Key>,
    sink: Sink,
    state: Mutex<State>,
    /// The state is saved (not for standard output).
    stateful: bool,
    records: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicBool,
    limiter: Option<Limiter>,
    socket_timeout: Duration,
    /// Records still allowed by --max-records (None: no limit).
    budget: Option<AtomicU64>,
}

impl Shared {
    /// Takes one record from the --max-records budget; false once it is spent.
    fn take_record(&self) -> bool {
        self.budget.as_ref().is_none_or(|budget| {
            budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(1)
                })
                .is_ok()
        })
    }

    fn budget_spent(&self) -> bool {
        self.budget
            .as_ref()
            .is_some_and(|budget| budget.load(Ordering::Relaxed) == 0)
    }
}

impl Shared {
    fn open_file(&self, directory: &DirectoryOutput, preamble: &[u8]) -> Result<JobFile, String> {
        let number = directory.next_file.fetch_add(1, Ordering::SeqCst);
        let name = format!("{}_{number:05}.asb", directory.prefix);
        let path = directory.directory.join(&name);
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        let mut writer = LayeredWriter::new(
            OutputSink::File(BufWriter::with_capacity(1 << 20, file)),
            self.level,
            self.key.as_ref(),
        )
        .map_err(|error| format!("{}: {error}", path.display()))?;
        let mut header = Vec::new();
        if preamble.is_empty() {
            asb::encode_header("3.1", self.namespace.as_bytes(), false, &mut header);
        } else {
            header.extend_from_slice(preamble);
        }
        writer
            .write_all(&header)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        Ok(JobFile { name, writer })
    }

    /// Records the cursors given (and a finished file) in the state and
    /// saves it.
    fn commit(
        &self,
        cursors: &mut dyn Iterator<Item = (usize, Cursor)>,
        file: Option<String>,
        file_length: Option<u64>,
    ) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (pid, cursor) in cursors {
            if let Some(slot) = state.cursors.get_mut(pid) {
                *slot = cursor;
            }
        }
        if let Some(file) = file {
            state.files.push(file);
        }
        if let Some(length) = file_length {
            state.file_length = length;
        }
        if let Sink::Directory(directory) = &self.sink {
            state.next_file = directory.next_file.load(Ordering::SeqCst);
        }
        state.records = self.records.load(Ordering::Relaxed);
        state.bytes = self.bytes.load(Ordering::Relaxed);
        if self.stateful {
            state.save()?;
        }
        Ok(())
    }
}

/// Why a scan of one node stopped early.
enum ScanError {
    /// Try again (elsewhere, later); `bool`: records came before it.
    Retry(String, bool),
    Fatal(String),
}

struct Job<'s> {
    shared: &'s Shared,
    partitions: Vec<u16>,
    cursors: Vec<Cursor>,
    file: Option<JobFile>,
    text: Vec<u8>,
    changed: Vec<u16>,
}

impl Job<'_> {
    fn run(mut self) -> Result<(), String> {
        let result = self.scan_all();
        if result.is_err() {
            self.shared.failed.store(true, Ordering::SeqCst);
        }
        let closed = self.close();
        result.and(closed)
    }

    fn scan_all(&mut self) -> Result<(), String> {
        let shared = self.shared;
        let mut idle_since = Instant::now();
        let mut fresh = false;
        let mut last_error = String::new();
        loop {
            if interrupted() || shared.failed.load(Ordering::SeqCst) || shared.budget_spent() {
                return Ok(());
            }
            let pending: Vec<(u16, Option<[u8; 20]>)> = self
                .partitions
                .iter()
                .filter_map(|&pid| match self.cursors[usize::from(pid)] {
                    Cursor::Todo(digest) => Some((pid, digest)),
                    _ => None,
                })
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
            let mut progressed = false;
            match shared.cluster.map(fresh) {
                Err(error) => last_error = error,
                Ok(map) => {
                    fresh = false;
                    let (groups, orphans) = group_by_master(&map, &pending);
                    if let Some(&(pid, _)) = orphans.first() {
                        last_error = format!("no node masters partition {pid}");
                        fresh = true;
                    }
                    for (node, parts) in groups {
                        let address = &map.nodes[node].address;
                        match self.scan_node(address, &parts) {
                            Ok(done) => progressed |= done,
                            Err(ScanError::Fatal(error)) => return Err(error),
                            Err(ScanError::Retry(error, done)) => {
                                progressed |= done;
                                last_error = error;
                                fresh = true;
                            }
                        }
                        if interrupted() || shared.failed.load(Ordering::SeqCst) {
                            return Ok(());
                        }
                    }
                }
            }
            if progressed {
                idle_since = Instant::now();
            } else {
                if idle_since.elapsed() > RETRY_TIME_MAX {
                    return Err(format!(
                        "{} partitions could not be read for {} s: {last_error}",
                        pending.len(),
                        RETRY_TIME_MAX.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// Scans `parts` on one node. Ok(true) when something was written or
    /// finished.
    fn scan_node(
        &mut self,
        address: &str,
        parts: &[(u16, Option<[u8; 20]>)],
    ) -> Result<bool, ScanError> {
        let shared = self.shared;
        let mut connection = Connection::open(address, shared.cluster.timeout)
            .map_err(|error| ScanError::Retry(error, false))?;
        connection.set_timeout(shared.socket_timeout);
        // --max-records is counted here, not by the node: a scan the node
        // cuts short would end as if its partitions were finished.
        connection
            .send(&shared.scan.request(parts, 0))
            .map_err(|error| ScanError::Retry(error, false))?;
        let mut asked = vec![false; PARTITIONS];
        for &(pid, _) in parts {
            asked[usize::from(pid)] = true;
        }
        let mut unavailable = vec![false; PARTITIONS];
        let mut body = Vec::new();
        let mut progressed = false;
        loop {
            if interrupted() || shared.failed.load(Ordering::SeqCst) {
                return Ok(progressed);
            }
            let kind = connection
                .read_frame(&mut body)
                .map_err(|error| ScanError::Retry(error, progressed))?;
            if kind != MessageType::Message {
                return Err(ScanError::Retry(
                    format!("{address}: unexpected answer"),
                    progressed,
                ));
            }
            let rows = cluster::rows(&body).map_err(|error| ScanError::Retry(error, progressed))?;
            self.text.clear();
            self.changed.clear();
            let mut count = 0u64;
            let mut last = false;
            let mut spent = false;
            for row in &rows {
                let code = row.header.result_code;
                if row.header.info3 & info3::LAST != 0 {
                    match code {
                        0 => last = true,
                        // Unavailable, timeout, key busy, overloaded: again.
                        9 | 11 | 14 | 18 => {
                            return Err(ScanError::Retry(
                                format!("{address}: scan ended with result {code}"),
                                progressed,
                            ))
                        }
                        20 => {
                            return Err(ScanError::Fatal(format!(
                                "{address}: namespace {} not found",
                                shared.namespace
                            )))
                        }
                        _ => {
                            return Err(ScanError::Fatal(format!(
                                "{address}: scan failed with result {code}"
                            )))
                        }
                    }
                    break;
                }
                if row.header.info3 & info3::PARTITION_DONE != 0 {
                    if code != 0 {
                        if let Some(slot) = unavailable.get_mut(row.header.generation as usize) {
                            *slot = true;
                        }
                    }
                    continue;
                }
                if code != 0 {
                    return Err(ScanError::Retry(
                        format!("{address}: a scan record with result {code}"),
                        progressed,
                    ));
                }
                if !shared.take_record() {
                    spent = true;
                    break;
                }
                let record = record_from_row(row, &shared.namespace).map_err(ScanError::Fatal)?;
                let pid = record.partition_id();
                if !asked[usize::from(pid)] {
                    return Err(ScanError::Fatal(format!(
                        "{address} answered a record of partition {pid}, which was not asked"
                    )));
                }
                asb::encode_record(&record, shared.compact, &mut self.text);
                self.cursors[usize::from(pid)] = Cursor::Todo(Some(record.digest));
                self.changed.push(pid);
                count += 1;
            }
            if last {
                for &(pid, _) in parts {
                    if !unavailable[usize::from(pid)] {
                        self.cursors[usize::from(pid)] = Cursor::Done;
                        self.changed.push(pid);
                    }
                }
            }
            if count > 0 || !self.changed.is_empty() {
                self.emit(count).map_err(ScanError::Fatal)?;
                progressed = true;
            }
            if let Some(limiter) = &shared.limiter {
                limiter.take(count);
            }
            if last || spent {
                return Ok(progressed);
            }
        }
    }

    /// Writes the text of the records just read and records where their
    /// partitions stand.
    fn emit(&mut self, count: u64) -> Result<(), String> {
        let shared = self.shared;
        shared.records.fetch_add(count, Ordering::Relaxed);
        shared
            .bytes
            .fetch_add(self.text.len() as u64, Ordering::Relaxed);
        match &shared.sink {
            Sink::Directory(directory) => {
                if self.text.is_empty() {
                    return Ok(());
                }
                if self.file.is_none() {
                    self.file = Some(shared.open_file(directory, &[])?);
                }
                let Some(file) = self.file.as_mut() else {
                    return Ok(());
                };
                file.writer
                    .write_all(&self.text)
                    .map_err(|error| format!("{}: {error}", file.name))?;
                if file.writer.file_bytes() >= directory.limit_bytes {
                    self.close_file()?;
                }
                Ok(())
            }
            Sink::Single(single) => {
                let mut single = single.lock().unwrap_or_else(|e| e.into_inner());
                let Some(writer) = single.writer.as_mut() else {
                    return Err("the output is closed".to_owned());
                };
                writer
                    .write_all(&self.text)
                    .map_err(|error| format!("cannot write the backup: {error}"))?;
                for &pid in &self.changed {
                    single.live[usize::from(pid)] = self.cursors[usize::from(pid)];
                }
                single.since_checkpoint += self.text.len() as u64;
                if single.since_checkpoint >= CHECKPOINT_TEXT_BYTES && shared.stateful {
                    checkpoint(shared, &mut single)?;
                }
                Ok(())
            }
        }
    }

    /// Finishes this job's open file and commits its partitions.
    fn close_file(&mut self) -> Result<(), String> {
        let name = match self.file.take() {
            Some(JobFile { name, writer }) => {
                let (mut sink, _) = writer
                    .finish()
                    .map_err(|error| format!("{name}: {error}"))?;
                sink.sync().map_err(|error| format!("{name}: {error}"))?;
                Some(name)
            }
            None => None,
        };
        let cursors = &self.cursors;
        let mut own = self
            .partitions
            .iter()
            .map(|&pid| (usize::from(pid), cursors[usize::from(pid)]));
        self.shared.commit(&mut own, name, None)
    }

    fn close(&mut self) -> Result<(), String> {
        match &self.shared.sink {
            Sink::Directory(_) => self.close_file(),
            Sink::Single(_) => Ok(()),
        }
    }
}

/// Makes the single output file's contents so far resumable.
fn checkpoint(shared: &Shared, single: &mut Single) -> Result<(), String> {
    let Some(writer) = single.writer.as_mut() else {
        return Ok(());
    };
    let length = writer
        .checkpoint()
        .map_err(|error| format!("cannot write the backup: {error}"))?;
    if let Some(sink) = writer.get_mut() {
        sink.sync()
            .map_err(|error| format!("cannot write the backup: {error}"))?;
    }
    single.since_checkpoint = 0;
    let live = single.live.clone();
    let mut cursors = live.into_iter().enumerate();
    shared.commit(&mut cursors, None, Some(length))
}

/// Pending partitions by master node, and those no node masters now.
#[expect(clippy::type_complexity, reason = "a local grouping")]
fn group_by_master(
    map: &PartitionMap,
    pending: &[(u16, Option<[u8; 20]>)],
) -> (
    BTreeMap<usize, Vec<(u16, Option<[u8; 20]>)>>,
    Vec<(u16, Option<[u8; 20]>)>,
) {
    let mut groups: BTreeMap<usize, Vec<(u16, Option<[u8; 20]>)>> = BTreeMap::new();
    let mut orphans = Vec::new();
    for &part in pending {
        match map.masters[usize::from(part.0)] {
            Some(node) => groups.entry(node).or_default().push(part),
            None => orphans.push(part),
        }
    }
    (groups, orphans)
}

/// The partitions a backup covers, from --partition-list / --after-digest.
fn scope(args: &BackupArgs) -> Result<Vec<Cursor>, String> {
    let digest = |text: &str| -> Result<[u8; 20], String> {
        BASE64
            .decode(text)
            .ok()
            .and_then(|bytes| <[u8; 20]>::try_from(bytes).ok())
            .ok_or_else(|| format!("'{text}' is not a base64 digest (20 bytes)"))
    };
    match (&args.partition_list, &args.after_digest) {
        (Some(_), Some(_)) => {
            Err("--partition-list and --after-digest exclude each other".to_owned())
        }
        (None, None) => Ok(vec![Cursor::Todo(None); PARTITIONS]),
        (None, Some(after)) => {
            let digest = digest(after)?;
            let first = usize::from(asb::partition_of(&digest));
            let mut cursors = vec![Cursor::Out; PARTITIONS];
            cursors[first] = Cursor::Todo(Some(digest));
            for cursor in cursors.iter_mut().skip(first + 1) {
                *cursor = Cursor::Todo(None);
            }
            Ok(cursors)
        }
        (Some(list), None) => {
            let mut cursors = vec![Cursor::Out; PARTITIONS];
            let mut claim = |pid: usize, cursor: Cursor| -> Result<(), String> {
                if cursors[pid] != Cursor::Out {
                    return Err(format!("partition {pid} is in --partition-list twice"));
                }
                cursors[pid] = cursor;
                Ok(())
            };
            for item in list
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
            {
                let (begin, count) = item.split_once('-').unwrap_or((item, "1"));
                match (begin.parse::<usize>(), count.parse::<usize>()) {
                    (Ok(begin), Ok(count)) => {
                        if begin >= PARTITIONS || count == 0 || begin + count > PARTITIONS {
                            return Err(format!(
                                "'{item}': partitions are 0-4095, a count 1-4096 within them"
                            ));
                        }
                        for pid in begin..begin + count {
                            claim(pid, Cursor::Todo(None))?;
                        }
                    }
                    _ => {
                        let digest = digest(item)?;
                        claim(
                            usize::from(asb::partition_of(&digest)),
                            Cursor::Todo(Some(digest)),
                        )?;
                    }
                }
            }
            Ok(cursors)
        }
    }
}

/// The options that must be the same when a backup resumes (the filters
/// added later only when given, so older state files still match).
fn options_text(args: &BackupArgs) -> String {
    let mut text = format!(
        "sets={:?};bins={:?};no-bins={};after={:?};before={:?};compact={};compress={:?};encrypt={:?};no-records={}",
        args.sets,
        args.bin_list,
        args.no_bins,
        args.modified_after,
        args.modified_before,
        args.compact,
        args.compress,
        args.encrypt,
        args.no_records
    );
    if args.no_ttl_only {
        text.push_str(";no-ttl-only");
    }
    if let Some(expression) = &args.filter_exp {
        text.push_str(&format!(";filter-exp={}", expression.trim()));
    }
    text
}

/// The secondary indexes of the namespace (`sindex-list`).
pub(super) fn list_indexes(
    address: &str,
    namespace: &str,
    timeout: Duration,
) -> Result<Vec<Index>, String> {
    let answer = info::value(address, &format!("sindex-list:ns={namespace}"), timeout)?;
    let answer = info::check(&answer)?;
    let mut indexes = Vec::new();
    for entry in answer.split(';').filter(|entry| !entry.trim().is_empty()) {
        let fields: BTreeMap<String, String> = info::pairs(entry, ':').into_iter().collect();
        let field = |name: &str| {
            fields
                .get(name)
                .filter(|value| !value.eq_ignore_ascii_case("null"))
                .cloned()
        };
        if field("ns").as_deref() != Some(namespace) {
            continue;
        }
        let name =
            field("indexname").ok_or_else(|| format!("sindex-list: no indexname in '{entry}'"))?;
        let collection =
            Collection::from_info_name(&field("indextype").unwrap_or_else(|| "default".to_owned()))
                .ok_or_else(|| format!("sindex-list: index {name} has an unknown indextype"))?;
        let value = field("type")
            .as_deref()
            .and_then(IndexValue::from_info_name)
            .ok_or_else(|| format!("sindex-list: index {name} has an unknown type"))?;
        indexes.push(Index {
            namespace: namespace.as_bytes().to_vec(),
            set: field("set").map(String::into_bytes),
            name: name.into_bytes(),
            collection,
            bin: field("bin").unwrap_or_default().into_bytes(),
            value,
            context: field("context"),
            expression: field("exp"),
        });
    }
    Ok(indexes)
}

/// The UDF modules (`udf-list`, `udf-get`).
fn list_udfs(address: &str, timeout: Duration) -> Result<Vec<Udf>, String> {
    let answer = info::value(address, "udf-list", timeout)?;
    let mut udfs = Vec::new();
    for entry in answer.split(';').filter(|entry| !entry.trim().is_empty()) {
        let fields: BTreeMap<String, String> = info::pairs(entry, ',').into_iter().collect();
        let Some(name) = fields.get("filename") else {
            continue;
        };
        let module = info::value(address, &format!("udf-get:filename={name}"), timeout)?;
        let content = info::pairs(&module, ';')
            .into_iter()
            .find(|(key, _)| key == "content")
            .map(|(_, value)| value)
            .ok_or_else(|| format!("udf-get {name}: no content in '{module}'"))?;
        let source = BASE64
            .decode(content.trim())
            .map_err(|error| format!("udf-get {name}: {error}"))?;
        udfs.push(Udf {
            name: name.clone().into_bytes(),
            source,
        });
    }
    Ok(udfs)
}

/// Records the backup will hold, roughly (for progress and --estimate):
/// the masters' objects, of the sets asked for.
fn records_expected(cluster: &Cluster, namespace: &str, sets: &[String]) -> Option<u64> {
    let nodes = cluster.nodes().ok()?;
    let mut total = 0u64;
    for node in nodes {
        let stats = info::value(
            &node.address,
            &format!("namespace/{namespace}"),
            cluster.timeout,
        )
        .ok()?;
        let stats: BTreeMap<String, String> = info::pairs(&stats, ';').into_iter().collect();
        let number = |key: &str| stats.get(key).and_then(|value| value.parse::<u64>().ok());
        let factor = number("effective_replication_factor")
            .or_else(|| number("replication-factor"))
            .unwrap_or(1)
            .max(1);
        if sets.is_empty() {
            total +=
                number("master_objects").unwrap_or_else(|| number("objects").unwrap_or(0) / factor);
        } else {
            let answer =
                info::value(&node.address, &format!("sets/{namespace}"), cluster.timeout).ok()?;
            for entry in answer.split(';') {
                let fields: BTreeMap<String, String> =
                    info::pairs(entry, ':').into_iter().collect();
                let set = fields.get("set").or_else(|| fields.get("set_name"));
                if set.is_some_and(|set| sets.contains(set)) {
                    let objects = fields
                        .get("objects")
                        .or_else(|| fields.get("n_objects"))
                        .and_then(|value| value.parse::<u64>().ok())
                        .unwrap_or(0);
                    total += objects / factor;
                }
            }
        }
    }
    Some(total)
}

pub fn backup(target: &Target, args: BackupArgs) -> Result<(), String> {
    log_in(&args.user, &args.password)?;
    if !(1..=100).contains(&args.parallel) {
        return Err("--parallel is 1-100".to_owned());
    }
    if args.file_limit.is_nan() || args.file_limit <= 0.0 {
        return Err("--file-limit is a positive number of MiB".to_owned());
    }
    let key = encryption_key(args.encrypt, args.encryption_key_file.as_ref())?;
    let level = args.compress.map(|_| args.compression_level);
    let scan = ScanTemplate::new(&args)?;
    let cluster = Cluster::new(target.seed(), target.timeout, &args.namespace);
    let namespaces = info::value(&target.seed(), "namespaces", target.timeout)?;
    if !namespaces.split(';').any(|name| name == args.namespace) {
        return Err(format!(
            "namespace {} not found (the cluster has: {namespaces})",
            args.namespace
        ));
    }
    if args.estimate {
        return estimate(&cluster, &scan, &args, level);
    }
    let destination = match (&args.directory, args.output_file.as_deref()) {
        (Some(directory), None) => Destination::Directory(directory.clone()),
        (None, Some("-")) => Destination::Stdout,
        (None, Some(file)) => Destination::File(PathBuf::from(file)),
        _ => return Err("give one of -d/--directory and -o/--output-file".to_owned()),
    };
    let prefix = args
        .output_file_prefix
        .clone()
        .unwrap_or_else(|| args.namespace.clone());
    let output_text = match &destination {
        Destination::Directory(directory) => format!("directory:{}", directory.display()),
        Destination::File(file) => format!("file:{}", file.display()),
        Destination::Stdout => "stdout".to_owned(),
    };
    let state_path = |default_dir: &Path| -> PathBuf {
        match &args.state_file_dst {
            Some(path) if path.is_dir() => path.join(format!("{}.asb.state", args.namespace)),
            Some(path) => path.clone(),
            None => default_dir.join(format!("{}.asb.state", args.namespace)),
        }
    };

    // The state: resumed, or new.
    let resumed = args.continue_from.is_some();
    let mut state = match &args.continue_from {
        Some(path) => {
            let state = State::load(path)?;
            if state.namespace != args.namespace
                || state.output != output_text
                || state.options != options_text(&args)
            {
                return Err(format!(
                    "{}: the state is of another backup (namespace {}, {}); give the options it was started with",
                    path.display(),
                    state.namespace,
                    state.output
                ));
            }
            state
        }
        None => State {
            path: match &destination {
                Destination::Directory(directory) => state_path(directory),
                Destination::File(file) => {
                    let parent = file
                        .parent()
                        .filter(|p| !p.as_os_str().is_empty())
                        .unwrap_or(Path::new("."));
                    match &args.state_file_dst {
                        Some(_) => state_path(parent),
                        None => PathBuf::from(format!("{}.state", file.display())),
                    }
                }
                Destination::Stdout => PathBuf::new(),
            },
            namespace: args.namespace.clone(),
            output: output_text.clone(),
            options: options_text(&args),
            prefix: prefix.clone(),
            next_file: 0,
            files: Vec::new(),
            file_length: 0,
            cursors: if args.no_records {
                vec![Cursor::Out; PARTITIONS]
            } else {
                scope(&args)?
            },
            records: 0,
            bytes: 0,
        },
    };
    let stateful = !matches!(destination, Destination::Stdout);

    // The metadata, for the first file.
    let mut preamble = Vec::new();
    if !resumed {
        let indexes = if args.no_indexes {
            Vec::new()
        } else {
            list_indexes(&target.seed(), &args.namespace, target.timeout)?
        };
        let udfs = if args.no_udfs {
            Vec::new()
        } else {
            list_udfs(&target.seed(), target.timeout)?
        };
        let version = if indexes.iter().any(|index| index.expression.is_some()) {
            "3.2"
        } else {
            "3.1"
        };
        asb::encode_header(version, args.namespace.as_bytes(), true, &mut preamble);
        for index in &indexes {
            asb::encode_index(index, &mut preamble);
        }
        for udf in &udfs {
            asb::encode_udf(udf, &mut preamble);
        }
    }

    // The output.
    let sink = match &destination {
        Destination::Directory(directory) => {
            prepare_directory(directory, &prefix, &state, resumed, args.remove_files)?;
            let output = DirectoryOutput {
                directory: directory.clone(),
                prefix: prefix.clone(),
                next_file: AtomicU32::new(state.next_file),
                limit_bytes: (args.file_limit * 1024.0 * 1024.0) as u64,
            };
            Sink::Directory(output)
        }
        Destination::File(path) => {
            let writer = open_single(
                path,
                &state,
                resumed,
                args.remove_files,
                level,
                key.as_ref(),
            )?;
            Sink::Single(Box::new(Mutex::new(Single {
                writer: Some(writer),
                live: state.cursors.clone(),
                since_checkpoint: 0,
            })))
        }
        Destination::Stdout => {
            let writer =
                LayeredWriter::new(OutputSink::Stdout(std::io::stdout()), level, key.as_ref())
                    .map_err(|error| format!("standard output: {error}"))?;
            Sink::Single(Box::new(Mutex::new(Single {
                writer: Some(writer),
                live: state.cursors.clone(),
                since_checkpoint: 0,
            })))
        }
    };
    if !resumed {
        state.records = 0;
    }
    let records_before = state.records;
    let bytes_before = state.bytes;
    let shared = Shared {
        namespace: args.namespace.clone(),
        cluster,
        scan,
        compact: args.compact,
        level,
        key,
        sink,
        state: Mutex::new(state.clone()),
        stateful,
        records: AtomicU64::new(records_before),
        bytes: AtomicU64::new(bytes_before),
        failed: AtomicBool::new(false),
        limiter: Limiter::new(args.records_per_second),
        socket_timeout: Duration::from_millis(args.socket_timeout.max(1)),
        budget: (args.max_records > 0).then(|| AtomicU64::new(args.max_records)),
    };
    // The metadata goes first, in a file (or at the start of the file) of
    // its own that is committed at once, so a resumed backup never loses it.
    if !preamble.is_empty() {
        match &shared.sink {
            Sink::Directory(directory) => {
                let JobFile { name, writer } = shared.open_file(directory, &preamble)?;
                let (mut sink, _) = writer
                    .finish()
                    .map_err(|error| format!("{name}: {error}"))?;
                sink.sync().map_err(|error| format!("{name}: {error}"))?;
                shared.commit(&mut std::iter::empty(), Some(name), None)?;
            }
            Sink::Single(single) => {
                let mut single = single.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(writer) = single.writer.as_mut() {
                    writer
                        .write_all(&preamble)
                        .map_err(|error| format!("cannot write the backup: {error}"))?;
                }
                if stateful {
                    checkpoint(&shared, &mut single)?;
                }
            }
        }
    }
    if stateful {
        shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .save()?;
    }
    super::catch_interrupts();

    // The jobs.
    let todo: Vec<u16> = (0..PARTITIONS as u16)
        .filter(|&pid| matches!(state.cursors[usize::from(pid)], Cursor::Todo(_)))
        .collect();
    let jobs = args.parallel.min(todo.len()).max(1);
    let expected = records_expected(&shared.cluster, &args.namespace, &args.sets);
    let started = Instant::now();
    let mut progress = ProgressLine::new(args.progress);
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for index in 0..jobs {
            let begin = todo.len() * index / jobs;
            let end = todo.len() * (index + 1) / jobs;
            let job = Job {
                shared: &shared,
                partitions: todo[begin..end].to_vec(),
                cursors: state.cursors.clone(),
                file: None,
                text: Vec::new(),
                changed: Vec::new(),
            };
            handles.push(scope.spawn(move || job.run()));
        }
        while handles.iter().any(|handle| !handle.is_finished()) {
            progress.show(
                "backup",
                shared.records.load(Ordering::Relaxed),
                shared.bytes.load(Ordering::Relaxed),
                expected,
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err("a backup job panicked".to_owned()))
            })
            .collect()
    });
    progress.finish();
    let mut result = results
        .into_iter()
        .collect::<Result<Vec<()>, String>>()
        .map(|_| ());
    if let Sink::Single(single) = &shared.sink {
        let mut single = single.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(writer) = single.writer.take() {
            let finished = writer
                .finish()
                .and_then(|(mut sink, length)| sink.sync().map(|()| length));
            match finished {
                Ok(length) => {
                    let live = single.live.clone();
                    let mut cursors = live.into_iter().enumerate();
                    let committed = shared.commit(&mut cursors, None, Some(length));
                    result = result.and(committed);
                }
                Err(error) => result = result.and(Err(format!("cannot write the backup: {error}"))),
            }
        }
    }
    let records = shared.records.load(Ordering::Relaxed) - records_before;
    let bytes = shared.bytes.load(Ordering::Relaxed) - bytes_before;
    let seconds = started.elapsed().as_secs_f64().max(1e-3);
    let state = shared
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let unfinished = state
        .cursors
        .iter()
        .filter(|cursor| matches!(cursor, Cursor::Todo(_)))
        .count();
    eprintln!(
        "backed up {records} records ({:.1} MB of text) in {seconds:.1} s: {:.0} records/s, {:.1} MB/s",
        bytes as f64 / 1e6,
        records as f64 / seconds,
        bytes as f64 / 1e6 / seconds
    );
    match result {
        Err(error) => Err(resume_hint(
            &format!("backup failed: {error}"),
            &state,
            stateful,
        )),
        Ok(()) if unfinished > 0 && shared.budget_spent() && !interrupted() => {
            let message = format!(
                "stopped at --max-records {}: {unfinished} partitions not backed up",
                args.max_records
            );
            eprintln!("{}", resume_hint(&message, &state, stateful));
            Ok(())
        }
        Ok(()) if unfinished > 0 || interrupted() => Err(resume_hint(
            &format!("backup interrupted with {unfinished} partitions unfinished"),
            &state,
            stateful,
        )),
        Ok(()) => {
            if stateful {
                let _ = std::fs::remove_file(&state.path);
            }
            Ok(())
        }
    }
}

fn resume_hint(message: &str, state: &State, stateful: bool) -> String {
    if stateful {
        format!(
            "{message}; the state is saved in {} (resume with the same options and --continue {})",
            state.path.display(),
            state.path.display()
        )
    } else {
        message.to_owned()
    }
}

/// A directory ready for a new backup, or cleaned of the files a resumed
/// one had not finished.
fn prepare_directory(
    directory: &Path,
    prefix: &str,
    state: &State,
    resumed: bool,
    remove: bool,
) -> Result<(), String> {
    std::fs::create_dir_all(directory)
        .map_err(|error| format!("{}: {error}", directory.display()))?;
    let entries = std::fs::read_dir(directory)
        .map_err(|error| format!("{}: {error}", directory.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".asb") {
            continue;
        }
        let ours = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('_'))
            .and_then(|rest| rest.strip_suffix(".asb"))
            .is_some_and(|number| number.len() >= 5 && number.bytes().all(|b| b.is_ascii_digit()));
        if resumed {
            if ours && !state.files.contains(&name) {
                // Being written when the backup stopped: its records are
                // scanned again.
                std::fs::remove_file(entry.path()).map_err(|error| format!("{name}: {error}"))?;
            }
        } else if remove {
            std::fs::remove_file(entry.path()).map_err(|error| format!("{name}: {error}"))?;
        } else {
            return Err(format!(
                "{} already holds backup files ({name}); remove them with -r/--remove-files",
                directory.display()
            ));
        }
    }
    Ok(())
}

/// The single output file, new or cut back to its committed length.
fn open_single(
    path: &Path,
    state: &State,
    resumed: bool,
    remove: bool,
    level: Option<i32>,
    key: Option<&Key>,
) -> Result<LayeredWriter<OutputSink>, String> {
    let error = |error: std::io::Error| format!("{}: {error}", path.display());
    if resumed {
        let mut file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(error)?;
        let length = file.metadata().map_err(error)?.len();
        if length < state.file_length {
            return Err(format!(
                "{} is {length} bytes, shorter than the {} the state gives",
                path.display(),
                state.file_length
            ));
        }
        file.set_len(state.file_length).map_err(error)?;
        let iv = match key {
            Some(_) => {
                use std::io::Read;
                let mut block = [0u8; 16];
                file.read_exact(&mut block).map_err(error)?;
                Some(block)
            }
            None => None,
        };
        use std::io::Seek;
        file.seek(std::io::SeekFrom::End(0)).map_err(error)?;
        return LayeredWriter::resume(
            OutputSink::File(BufWriter::with_capacity(1 << 20, file)),
            level,
            key,
            iv,
            state.file_length,
        )
        .map_err(error);
    }
    if path.exists()
        && !remove
        && std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false)
    {
        return Err(format!(
            "{} exists; remove it with -r/--remove-files",
            path.display()
        ));
    }
    let file = File::create(path).map_err(error)?;
    LayeredWriter::new(
        OutputSink::File(BufWriter::with_capacity(1 << 20, file)),
        level,
        key,
    )
    .map_err(error)
}

/// --estimate: encodes a sample of records and reports the sizes.
fn estimate(
    cluster: &Cluster,
    scan: &ScanTemplate,
    args: &BackupArgs,
    level: Option<i32>,
) -> Result<(), String> {
    let samples = args.estimate_samples.max(1);
    let map = cluster.map(true)?;
    let all: Vec<(u16, Option<[u8; 20]>)> = (0..PARTITIONS as u16).map(|pid| (pid, None)).collect();
    let (groups, _) = group_by_master(&map, &all);
    let mut sizes: Vec<f64> = Vec::new();
    let mut text = Vec::new();
    let mut body = Vec::new();
    'nodes: for (node, parts) in groups {
        let mut connection = Connection::open(&map.nodes[node].address, cluster.timeout)?;
        connection.send(&scan.request(&parts, samples - sizes.len() as u64))?;
        loop {
            connection.read_frame(&mut body)?;
            for row in cluster::rows(&body)? {
                if row.header.info3 & info3::LAST != 0 {
                    continue 'nodes;
                }
                if row.header.info3 & info3::PARTITION_DONE != 0 || row.header.result_code != 0 {
                    continue;
                }
                let record = record_from_row(&row, &args.namespace)?;
                let before = text.len();
                asb::encode_record(&record, args.compact, &mut text);
                sizes.push((text.len() - before) as f64);
                if sizes.len() as u64 >= samples {
                    break 'nodes;
                }
            }
        }
    }
    let count = sizes.len() as f64;
    let records = records_expected(cluster, &args.namespace, &args.sets).unwrap_or(0);
    if sizes.is_empty() {
        println!("no records to sample; {records} records expected");
        return Ok(());
    }
    let mean = sizes.iter().sum::<f64>() / count;
    let variance = sizes.iter().map(|size| (size - mean).powi(2)).sum::<f64>() / count;
    // As asbackup: the mean plus z(99.9999%) standard errors.
    let bound = mean + 4.753_424_308_822_9 * (variance / count).sqrt();
    let mut ratio = 1.0;
    if let Some(level) = level {
        let compressed = zstd::bulk::compress(&text, level).map_err(|error| error.to_string())?;
        ratio = compressed.len() as f64 / text.len().max(1) as f64;
    }
    let total = bound * records as f64 * ratio;
    println!("sampled {} records: average record {mean:.0} bytes of text, at most {bound:.0} with 99.9999% confidence", sizes.len());
    if level.is_some() {
        println!(
            "zstd compresses the sample to {:.1}% of its size",
            ratio * 100.0
        );
    }
    println!(
        "estimated backup size: {:.0} bytes for about {records} records",
        total.ceil()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> BackupArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: BackupArgs,
        }
        let mut argv = vec!["backup", "-n", "test"];
        argv.extend_from_slice(list);
        Wrapper::parse_from(argv).args
    }

    #[test]
    fn partition_lists_and_after_digest() {
        let cursors = scope(&args(&["-X", "0-10,4095"])).expect("scope");
        assert_eq!(
            cursors.iter().filter(|c| **c == Cursor::Todo(None)).count(),
            11
        );
        assert_eq!(cursors[4095], Cursor::Todo(None));
        assert!(scope(&args(&["-X", "0-10,5"])).is_err());
        assert!(scope(&args(&["-X", "4090-10"])).is_err());
        // 7JEZ… is the sample's digest: partition 0x191ec & 0xfff = 0x1ec.
        let cursors = scope(&args(&["-D", "7JEZLUt/jONdXXjTS8ply6qqyWA="])).expect("scope");
        let first = cursors
            .iter()
            .position(|c| *c != Cursor::Out)
            .expect("some");
        assert_eq!(first, 0x1ec);
        assert!(matches!(cursors[first], Cursor::Todo(Some(_))));
        assert_eq!(cursors[4095], Cursor::Todo(None));
    }

    #[test]
    fn geojson_particles_lose_their_cell_header() {
        assert_eq!(geojson_text(b"\0\0\0{}").as_deref(), Some(&b"{}"[..]));
        let mut with_cells = vec![0, 0, 2];
        with_cells.extend_from_slice(&[1; 16]);
        with_cells.extend_from_slice(b"{\"a\":1}");
        assert_eq!(
            geojson_text(&with_cells).as_deref(),
            Some(&b"{\"a\":1}"[..])
        );
        assert_eq!(geojson_text(&[0, 0, 9]), None);
    }
}
