//! `bolide restore`: `.asb` files in, writes out.
//!
//! Files are decoded on up to `--parallel` threads (one per file); each
//! complete, valid record goes to the writers, which send it to the
//! partition's master as one write (a WRITE op per bin) with the record's
//! generation and time to live, pipelined on one connection per node, and
//! classify the answers as asrestore does (docs/backup.md). A record the
//! file gets wrong is never written in part: decoding stops at it, naming
//! the file, line and byte, or skips and counts it with
//! `--ignore-record-error`.

use super::cluster::{Cluster, Connection};
use super::run_backup::list_indexes;
use super::{encryption_key, interrupted, log_in, ProgressLine, RestoreArgs};
use crate::{info, Target};
use base64::Engine;
use bolide_backup_format::asb::{self, Decoder, Index, Item, Record, Udf, Value};
use bolide_backup_format::stream::{self, Key};
use bolide_wire::frame::MessageType;
use bolide_wire::message::{decode_header, encode_field, encode_header, encode_op, MsgHeader};
use bolide_wire::{field_type, info2, info3, op_type};
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Records handed to a writer at a time.
const BATCH_RECORDS: usize = 128;
/// The citrusleaf epoch (2010-01-01T00:00:00Z) in Unix seconds.
const CITRUSLEAF_EPOCH: u64 = 1_262_304_000;

#[derive(Default)]
struct Counts {
    read: AtomicU64,
    written: AtomicU64,
    existed: AtomicU64,
    fresher: AtomicU64,
    expired: AtomicU64,
    skipped: AtomicU64,
    ignored: AtomicU64,
    bad: AtomicU64,
    bytes: AtomicU64,
    udfs: AtomicU64,
    indexes: AtomicU64,
}

fn add(counter: &AtomicU64, count: u64) {
    counter.fetch_add(count, Ordering::Relaxed);
}

struct Shared<'a> {
    args: &'a RestoreArgs,
    cluster: Option<Cluster>,
    seed: String,
    timeout: Duration,
    /// (source, destination) namespaces.
    rename: Option<(String, String)>,
    only: Option<String>,
    counts: Counts,
    failed: AtomicBool,
    /// A write failed: the writers stop (records already decoded are
    /// still written after a file's error).
    write_failed: AtomicBool,
    error: Mutex<Option<String>>,
    /// Indexes held back for --indexes-last.
    later: Mutex<Vec<Index>>,
    key: Option<Key>,
}

impl Shared<'_> {
    fn fail(&self, message: String) {
        let mut error = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if error.is_none() {
            *error = Some(message);
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.failed.load(Ordering::SeqCst) || interrupted()
    }

    /// The namespace a file's records, indexes go to.
    fn destination(&self, namespace: &[u8]) -> Result<Vec<u8>, String> {
        let name = String::from_utf8_lossy(namespace);
        match (&self.rename, &self.only) {
            (Some((source, destination)), _) if *source == name => {
                Ok(destination.clone().into_bytes())
            }
            (Some((source, _)), _) => Err(format!(
                "namespace {name} is not {source}, the one --namespace renames"
            )),
            (None, Some(only)) if *only != name => Err(format!(
                "namespace {name} is not {only}, the one --namespace names"
            )),
            _ => Ok(namespace.to_vec()),
        }
    }
}

/// One input: a path or standard input.
struct Input {
    name: String,
    path: Option<PathBuf>,
}

pub fn restore(target: &Target, args: RestoreArgs) -> Result<(), String> {
    log_in(&args.user, &args.password)?;
    if !(1..=1024).contains(&args.parallel) {
        return Err("--parallel is 1-1024".to_owned());
    }
    if args.unique && (args.replace || args.no_generation) {
        return Err("--unique excludes --replace and --no-generation".to_owned());
    }
    let key = encryption_key(args.encrypt, args.encryption_key_file.as_ref())?;
    let inputs = match (&args.directory, args.input_file.as_deref()) {
        (Some(directory), None) => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(directory)
                .map_err(|error| format!("{}: {error}", directory.display()))?
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|extension| extension == "asb"))
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(format!("{} holds no .asb files", directory.display()));
            }
            files
                .into_iter()
                .map(|path| Input {
                    name: path.display().to_string(),
                    path: Some(path),
                })
                .collect::<Vec<_>>()
        }
        (None, Some("-")) => vec![Input {
            name: "standard input".to_owned(),
            path: None,
        }],
        (None, Some(file)) => vec![Input {
            name: file.to_owned(),
            path: Some(PathBuf::from(file)),
        }],
        _ => return Err("give one of -d/--directory and -i/--input-file".to_owned()),
    };
    let (rename, only) = match args.namespace.as_deref() {
        None => (None, None),
        Some(text) => match text.split_once(',') {
            Some((source, destination)) if !source.is_empty() && !destination.is_empty() => {
                (Some((source.to_owned(), destination.to_owned())), None)
            }
            Some(_) => return Err(format!("--namespace '{text}': give NS or SRC,DST")),
            None => (None, Some(text.to_owned())),
        },
    };
    let shared = Shared {
        args: &args,
        cluster: None,
        seed: target.seed(),
        timeout: target.timeout,
        rename,
        only,
        counts: Counts::default(),
        failed: AtomicBool::new(false),
        write_failed: AtomicBool::new(false),
        error: Mutex::new(None),
        later: Mutex::new(Vec::new()),
        key,
    };
    let mut shared = shared;
    if !args.validate {
        info::value(&shared.seed, "build", shared.timeout)?;
        shared.cluster = Some(Cluster::new(target.seed(), target.timeout, ""));
    }
    super::catch_interrupts();
    let started = Instant::now();
    let mut progress = ProgressLine::new(args.progress);
    let inputs = Mutex::new(inputs.into_iter());
    let (sender, receiver) = sync_channel::<Vec<Record>>(args.parallel * 4);
    let receiver = Arc::new(Mutex::new(receiver));
    let shared = &shared;
    std::thread::scope(|scope| {
        let mut writers = Vec::new();
        if !args.validate {
            for _ in 0..args.parallel {
                let receiver = Arc::clone(&receiver);
                writers.push(scope.spawn(move || Writer::new(shared).run(&receiver)));
            }
        }
        let mut readers = Vec::new();
        for _ in 0..args.parallel.min(64) {
            let sender = sender.clone();
            let inputs = &inputs;
            readers.push(scope.spawn(move || loop {
                let next = inputs.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some(input) = next else { break };
                if shared.stopped() {
                    break;
                }
                if let Err(error) = read_input(shared, &input, &sender) {
                    shared.fail(error);
                    break;
                }
            }));
        }
        drop(sender);
        while readers
            .iter()
            .chain(writers.iter())
            .any(|handle| !handle.is_finished())
        {
            progress.show(
                "restore",
                shared.counts.read.load(Ordering::Relaxed),
                shared.counts.bytes.load(Ordering::Relaxed),
                None,
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        for handle in readers.into_iter().chain(writers) {
            if handle.join().is_err() {
                shared.fail("a restore thread panicked".to_owned());
            }
        }
    });
    progress.finish();
    if !shared.failed.load(Ordering::SeqCst) && !args.validate {
        let later = std::mem::take(&mut *shared.later.lock().unwrap_or_else(|e| e.into_inner()));
        for index in later {
            if let Err(error) = restore_index(shared, &index) {
                shared.fail(error);
                break;
            }
        }
        if args.wait && !shared.failed.load(Ordering::SeqCst) {
            if let Err(error) = wait_for_indexes(shared) {
                shared.fail(error);
            }
        }
    }
    let counts = &shared.counts;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64().max(1e-3);
    eprintln!(
        "{} {} records in {seconds:.1} s ({:.0} records/s, {:.1} MB/s): {} written, {} existed, {} fresher on the server, {} expired, {} skipped, {} ignored errors, {} bad records; {} UDF modules, {} indexes",
        if args.validate { "validated" } else { "restored" },
        load(&counts.read),
        load(&counts.read) as f64 / seconds,
        load(&counts.bytes) as f64 / 1e6 / seconds,
        load(&counts.written),
        load(&counts.existed),
        load(&counts.fresher),
        load(&counts.expired),
        load(&counts.skipped),
        load(&counts.ignored),
        load(&counts.bad),
        load(&counts.udfs),
        load(&counts.indexes),
    );
    if let Some(error) = shared
        .error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        return Err(format!("restore failed: {error}"));
    }
    if interrupted() {
        return Err("restore interrupted".to_owned());
    }
    Ok(())
}

/// Counts bytes read (of the file itself).
struct Counting<'c, R> {
    inner: R,
    counter: &'c AtomicU64,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(out)?;
        self.counter.fetch_add(read as u64, Ordering::Relaxed);
        Ok(read)
    }
}

/// Decodes one input and hands its records to the writers.
fn read_input(
    shared: &Shared<'_>,
    input: &Input,
    sender: &SyncSender<Vec<Record>>,
) -> Result<(), String> {
    let mut batch = Vec::with_capacity(BATCH_RECORDS);
    let result = decode_input(shared, input, sender, &mut batch);
    // The records decoded before an error are whole: they are written.
    if !batch.is_empty() {
        let _ = sender.send(batch);
    }
    result
}

fn decode_input(
    shared: &Shared<'_>,
    input: &Input,
    sender: &SyncSender<Vec<Record>>,
    batch: &mut Vec<Record>,
) -> Result<(), String> {
    let args = shared.args;
    let raw: Box<dyn Read + Send> = match &input.path {
        Some(path) => Box::new(std::io::BufReader::with_capacity(
            1 << 20,
            std::fs::File::open(path).map_err(|error| format!("{}: {error}", input.name))?,
        )),
        None => Box::new(std::io::stdin()),
    };
    let counted = Counting {
        inner: raw,
        counter: &shared.counts.bytes,
    };
    let text = stream::layered_reader(counted, args.compress.is_some(), shared.key.clone())
        .map_err(|error| format!("{}: {error}", input.name))?;
    let at = |error: asb::DecodeError| format!("{}: {error}", input.name);
    let mut decoder = Decoder::new(text).map_err(at)?;
    if let Some(namespace) = decoder.namespace() {
        shared
            .destination(namespace)
            .map_err(|error| format!("{}: {error}", input.name))?;
    }
    let now = now_citrusleaf();
    loop {
        if shared.stopped() {
            return Ok(());
        }
        let item = match decoder.next_item() {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(error) if args.ignore_record_error => {
                add(&shared.counts.bad, 1);
                eprintln!("warning: {}: {error} (skipped)", input.name);
                match decoder.skip_to_next_block() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(error) => return Err(at(error)),
                }
            }
            Err(error) => return Err(at(error)),
        };
        match item {
            Item::Record(mut record) => {
                add(&shared.counts.read, 1);
                match shared.destination(&record.namespace) {
                    Ok(namespace) => record.namespace = namespace,
                    Err(error) if args.ignore_record_error => {
                        add(&shared.counts.bad, 1);
                        eprintln!(
                            "warning: {}: line {}: {error} (skipped)",
                            input.name,
                            decoder.line()
                        );
                        continue;
                    }
                    Err(error) => {
                        return Err(format!("{}: line {}: {error}", input.name, decoder.line()))
                    }
                }
                if !args.set_list.is_empty()
                    && !record.set.as_ref().is_some_and(|set| {
                        args.set_list
                            .iter()
                            .any(|wanted| wanted.as_bytes() == set.as_slice())
                    })
                {
                    add(&shared.counts.skipped, 1);
                    continue;
                }
                if !args.bin_list.is_empty() {
                    record.bins.retain(|bin| {
                        args.bin_list
                            .iter()
                            .any(|wanted| wanted.as_bytes() == bin.name.as_slice())
                    });
                }
                if record.bins.is_empty() {
                    add(&shared.counts.skipped, 1);
                    continue;
                }
                if record.void_time != 0
                    && u64::from(record.void_time) + u64::from(args.extra_ttl) <= now
                {
                    add(&shared.counts.expired, 1);
                    continue;
                }
                if args.no_records || args.validate {
                    continue;
                }
                batch.push(record);
                if batch.len() >= BATCH_RECORDS {
                    let full = std::mem::replace(batch, Vec::with_capacity(BATCH_RECORDS));
                    if sender.send(full).is_err() {
                        return Ok(());
                    }
                }
            }
            Item::Udf(udf) => {
                if !args.no_udfs && !args.validate {
                    restore_udf(shared, &udf)
                        .map_err(|error| format!("{}: {error}", input.name))?;
                }
                add(&shared.counts.udfs, 1);
            }
            Item::Index(mut index) => {
                index.namespace = shared
                    .destination(&index.namespace)
                    .map_err(|error| format!("{}: {error}", input.name))?;
                if args.no_indexes || args.validate {
                    add(&shared.counts.indexes, 1);
                } else if args.indexes_last {
                    shared
                        .later
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(index);
                } else {
                    restore_index(shared, &index)
                        .map_err(|error| format!("{}: {error}", input.name))?;
                }
            }
        }
    }
    Ok(())
}

fn now_citrusleaf() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
        .saturating_sub(CITRUSLEAF_EPOCH)
}

fn restore_udf(shared: &Shared<'_>, udf: &Udf) -> Result<(), String> {
    let name = String::from_utf8_lossy(&udf.name);
    let content = base64::engine::general_purpose::STANDARD.encode(&udf.source);
    let command = format!(
        "udf-put:filename={name};content={content};content-len={};udf-type=LUA;",
        content.len()
    );
    let answer = info::value(&shared.seed, &command, shared.timeout)?;
    if answer.starts_with("error") || answer.starts_with("ERROR") {
        return Err(format!("UDF module {name}: {answer}"));
    }
    Ok(())
}

/// Creates an index; one of the same name and definition is kept, one of
/// the same name and another definition is replaced.
fn restore_index(shared: &Shared<'_>, index: &Index) -> Result<(), String> {
    let namespace = String::from_utf8_lossy(&index.namespace).into_owned();
    let name = String::from_utf8_lossy(&index.name).into_owned();
    let existing = list_indexes(&shared.seed, &namespace, shared.timeout)?;
    if let Some(current) = existing.iter().find(|current| current.name == index.name) {
        if current == index {
            add(&shared.counts.indexes, 1);
            return Ok(());
        }
        let answer = info::value(
            &shared.seed,
            &format!("sindex-delete:namespace={namespace};indexname={name}"),
            shared.timeout,
        )?;
        info::check(&answer).map_err(|error| format!("index {name}: {error}"))?;
        // The deletion reaches every node before the new one is created.
        let deadline = Instant::now() + Duration::from_secs(30);
        while list_indexes(&shared.seed, &namespace, shared.timeout)?
            .iter()
            .any(|current| current.name == index.name)
        {
            if Instant::now() > deadline {
                return Err(format!("index {name}: still there after sindex-delete"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut command = format!(
        "sindex-create:namespace={namespace};indexname={name};indextype={};type={}",
        index.collection.info_name(),
        index.value.info_name()
    );
    if let Some(set) = &index.set {
        command.push_str(&format!(";set={}", String::from_utf8_lossy(set)));
    }
    if let Some(expression) = &index.expression {
        command.push_str(&format!(";exp={expression}"));
    } else {
        command.push_str(&format!(";bin={}", String::from_utf8_lossy(&index.bin)));
    }
    if let Some(context) = &index.context {
        command.push_str(&format!(";context={context}"));
    }
    let answer = info::value(&shared.seed, &command, shared.timeout)?;
    info::check(&answer).map_err(|error| format!("index {name}: {error}"))?;
    add(&shared.counts.indexes, 1);
    Ok(())
}

/// --wait: every index of the namespaces restored is built on every node.
fn wait_for_indexes(shared: &Shared<'_>) -> Result<(), String> {
    let Some(cluster) = &shared.cluster else {
        return Ok(());
    };
    let deadline = Instant::now() + Duration::from_secs(3600);
    for node in cluster.nodes()? {
        loop {
            let answer = info::value(&node.address, "sindex-list", shared.timeout)?;
            if !answer.contains("state=WO") {
                break;
            }
            if Instant::now() > deadline {
                return Err("indexes still building after an hour".to_owned());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// What became of one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Written,
    Existed,
    Fresher,
    /// The record is refused (too big, bad bin name, …): fatal unless
    /// --ignore-record-error.
    Refused(u8),
    /// Try again.
    Transient(u8),
    /// Nothing more will work (a bad namespace, the server is full, …).
    Failed(u8),
}

fn classify(code: u8) -> Outcome {
    match code {
        0 => Outcome::Written,
        5 => Outcome::Existed,
        3 => Outcome::Fresher,
        // Too big, key mismatch, bin name, forbidden, incompatible type, bin not found.
        13 | 19 | 21 | 22 | 12 | 17 => Outcome::Refused(code),
        // Unknown, cluster key mismatch, timeout, unavailable, key busy, overload.
        1 | 7 | 9 | 11 | 14 | 18 => Outcome::Transient(code),
        _ => Outcome::Failed(code),
    }
}

struct Writer<'s, 'a> {
    shared: &'s Shared<'a>,
    connections: HashMap<String, Connection>,
    requests: Vec<u8>,
    answer: Vec<u8>,
}

impl<'s, 'a> Writer<'s, 'a> {
    fn new(shared: &'s Shared<'a>) -> Writer<'s, 'a> {
        Writer {
            shared,
            connections: HashMap::new(),
            requests: Vec::new(),
            answer: Vec::new(),
        }
    }

    fn run(mut self, receiver: &Mutex<Receiver<Vec<Record>>>) {
        loop {
            let batch = {
                let receiver = receiver.lock().unwrap_or_else(|e| e.into_inner());
                receiver.recv()
            };
            let Ok(batch) = batch else { return };
            if self.shared.write_failed.load(Ordering::SeqCst) || interrupted() {
                continue;
            }
            if let Err(error) = self.write_batch(batch) {
                self.shared.write_failed.store(true, Ordering::SeqCst);
                self.shared.fail(error);
            }
        }
    }

    fn write_batch(&mut self, batch: Vec<Record>) -> Result<(), String> {
        let shared = self.shared;
        let Some(cluster) = &shared.cluster else {
            return Ok(());
        };
        let mut pending: Vec<(Record, u32)> = batch.into_iter().map(|record| (record, 0)).collect();
        let mut fresh = false;
        while !pending.is_empty() {
            let namespace = String::from_utf8_lossy(&pending[0].0.namespace).into_owned();
            let map = cluster.map_of(&namespace, fresh)?;
            fresh = false;
            let mut by_node: HashMap<usize, Vec<(Record, u32)>> = HashMap::new();
            let mut retry = Vec::new();
            for (record, tries) in pending.drain(..) {
                if String::from_utf8_lossy(&record.namespace) != namespace {
                    retry.push((record, tries));
                    continue;
                }
                let node = map.masters[usize::from(record.partition_id())].unwrap_or(0);
                by_node.entry(node).or_default().push((record, tries));
            }
            for (node, records) in by_node {
                let address = map
                    .nodes
                    .get(node)
                    .map(|node| node.address.clone())
                    .unwrap_or_else(|| shared.seed.clone());
                let outcomes = self.send(&address, &records);
                for ((record, tries), outcome) in records.into_iter().zip(outcomes) {
                    match outcome {
                        Outcome::Written => add(&shared.counts.written, 1),
                        Outcome::Existed => add(&shared.counts.existed, 1),
                        Outcome::Fresher => add(&shared.counts.fresher, 1),
                        Outcome::Refused(code) if shared.args.ignore_record_error => {
                            add(&shared.counts.ignored, 1);
                            let _ = code;
                        }
                        Outcome::Refused(code) | Outcome::Failed(code) => {
                            return Err(format!(
                                "the server refused record {} (namespace {}) with result {code}{}",
                                base64::engine::general_purpose::STANDARD.encode(record.digest),
                                String::from_utf8_lossy(&record.namespace),
                                describe(code)
                            ));
                        }
                        Outcome::Transient(code) => {
                            if tries + 1 >= shared.args.max_retries {
                                return Err(format!(
                                    "record {}: result {code}{} after {} tries",
                                    base64::engine::general_purpose::STANDARD.encode(record.digest),
                                    describe(code),
                                    tries + 1
                                ));
                            }
                            fresh = true;
                            retry.push((record, tries + 1));
                        }
                    }
                }
            }
            if !retry.is_empty() {
                let tries = retry.iter().map(|(_, tries)| *tries).min().unwrap_or(0);
                std::thread::sleep(Duration::from_millis(150u64 << tries.min(5)));
            }
            pending = retry;
        }
        Ok(())
    }

    /// Sends the writes of `records` to one node, pipelined, and reads
    /// their answers in order. A connection that fails leaves the rest
    /// transient (they are sent again).
    fn send(&mut self, address: &str, records: &[(Record, u32)]) -> Vec<Outcome> {
        let shared = self.shared;
        let now = now_citrusleaf();
        self.requests.clear();
        for (record, _) in records {
            write_request(record, shared.args, now, shared.timeout, &mut self.requests);
        }
        let mut outcomes = Vec::with_capacity(records.len());
        if !self.connections.contains_key(address) {
            match Connection::open(address, shared.timeout) {
                Ok(connection) => {
                    self.connections.insert(address.to_owned(), connection);
                }
                Err(_) => return vec![Outcome::Transient(11); records.len()],
            }
        }
        let Some(connection) = self.connections.get_mut(address) else {
            return vec![Outcome::Transient(11); records.len()];
        };
        if connection.send(&self.requests).is_err() {
            self.connections.remove(address);
            return vec![Outcome::Transient(11); records.len()];
        }
        for _ in records {
            match connection.read_frame(&mut self.answer) {
                Ok(MessageType::Message) => match decode_header(&self.answer) {
                    Ok((header, _)) => outcomes.push(classify(header.result_code)),
                    Err(_) => break,
                },
                _ => break,
            }
        }
        if outcomes.len() < records.len() {
            self.connections.remove(address);
            outcomes.resize(records.len(), Outcome::Transient(11));
        }
        outcomes
    }
}

fn describe(code: u8) -> &'static str {
    match code {
        4 => " (parameter error)",
        8 => " (server full)",
        12 => " (incompatible bin type)",
        13 => " (record too big)",
        16 => " (unsupported feature)",
        19 => " (key mismatch)",
        20 => " (namespace not found)",
        21 => " (bin name)",
        22 => " (forbidden)",
        11 => " (partition unavailable)",
        14 => " (key busy)",
        18 => " (device overload)",
        9 => " (timeout)",
        _ => "",
    }
}

/// Appends the write of one record (a proto frame).
fn write_request(
    record: &Record,
    args: &RestoreArgs,
    now: u64,
    timeout: Duration,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]);
    let mut info2_flags = info2::WRITE;
    if !args.no_generation {
        info2_flags |= info2::GENERATION_GT;
    }
    if args.unique {
        info2_flags |= info2::CREATE_ONLY;
    }
    let info3_flags = if args.replace {
        info3::CREATE_OR_REPLACE
    } else {
        0
    };
    // 0: never expires (TTL -1); else what is left of it.
    let ttl = if record.void_time == 0 {
        u32::MAX
    } else {
        let left = (u64::from(record.void_time) + u64::from(args.extra_ttl)).saturating_sub(now);
        u32::try_from(left.max(1)).unwrap_or(u32::MAX - 2)
    };
    let mut fields = 2u16;
    let mut field_bytes = Vec::new();
    encode_field(&mut field_bytes, field_type::NAMESPACE, &record.namespace);
    if let Some(set) = &record.set {
        encode_field(&mut field_bytes, field_type::SET, set);
        fields += 1;
    }
    if let Some(key) = &record.key {
        let (particle_type, bytes) = key.to_wire();
        let mut value = Vec::with_capacity(bytes.len() + 1);
        value.push(particle_type);
        value.extend_from_slice(&bytes);
        encode_field(&mut field_bytes, field_type::KEY, &value);
        fields += 1;
    }
    encode_field(&mut field_bytes, field_type::DIGEST, &record.digest);
    let header = MsgHeader {
        info2: info2_flags,
        info3: info3_flags,
        generation: u32::from(record.generation),
        record_ttl: ttl,
        transaction_ttl: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
        n_fields: fields,
        n_ops: record.bins.len() as u16,
        ..MsgHeader::default()
    };
    encode_header(out, &header);
    out.extend_from_slice(&field_bytes);
    let mut scratch = Vec::new();
    for bin in &record.bins {
        let (particle_type, value): (u8, &[u8]) = match &bin.value {
            Value::Nil => (asb::particle::NULL, &[]),
            Value::Bool(value) => {
                scratch.clear();
                scratch.push(u8::from(*value));
                (asb::particle::BOOL, &scratch)
            }
            Value::Int(value) => {
                scratch.clear();
                scratch.extend_from_slice(&value.to_be_bytes());
                (asb::particle::INTEGER, &scratch)
            }
            Value::Double(value) => {
                scratch.clear();
                scratch.extend_from_slice(&value.to_be_bytes());
                (asb::particle::FLOAT, &scratch)
            }
            Value::String(bytes) => (asb::particle::STRING, bytes),
            Value::GeoJson(text) => {
                scratch.clear();
                scratch.extend_from_slice(&[0, 0, 0]);
                scratch.extend_from_slice(text);
                (asb::particle::GEOJSON, &scratch)
            }
            Value::Blob {
                particle_type,
                bytes,
            } => (*particle_type, bytes),
        };
        encode_op(out, op_type::WRITE, particle_type, &bin.name, value);
    }
    let body = out.len() - start - 8;
    let proto = bolide_wire::ProtoHeader::encode(MessageType::Message, body);
    out[start..start + 8].copy_from_slice(&proto);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_backup_format::asb::UserKey;
    use bolide_wire::Message;

    #[test]
    fn a_record_becomes_one_write_with_its_generation_and_ttl() {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: RestoreArgs,
        }
        let args = Wrapper::parse_from(["restore", "-i", "x"]).args;
        let record = Record {
            key: Some(UserKey::String(b"key1".to_vec())),
            namespace: b"test".to_vec(),
            digest: [1; 20],
            set: Some(b"demo".to_vec()),
            generation: 7,
            void_time: 1000,
            bins: vec![asb::Bin {
                name: b"g".to_vec(),
                value: Value::GeoJson(b"{}".to_vec()),
            }],
        };
        let mut out = Vec::new();
        write_request(&record, &args, 400, Duration::from_secs(1), &mut out);
        let message = Message::decode(&out[8..]).expect("valid");
        assert_eq!(message.header.info2, info2::WRITE | info2::GENERATION_GT);
        assert_eq!(message.header.generation, 7);
        assert_eq!(message.header.record_ttl, 600);
        assert_eq!(message.fields.key, Some(&b"\x03key1"[..]));
        let op = message.ops().next().expect("op");
        assert_eq!((op.particle_type, op.value), (23, &b"\0\0\0{}"[..]));
        let mut never = record.clone();
        never.void_time = 0;
        out.clear();
        write_request(&never, &args, 400, Duration::from_secs(1), &mut out);
        assert_eq!(
            Message::decode(&out[8..]).expect("valid").header.record_ttl,
            u32::MAX
        );
    }

    #[test]
    fn answers_are_classified_as_asrestore_does() {
        assert_eq!(classify(0), Outcome::Written);
        assert_eq!(classify(3), Outcome::Fresher);
        assert_eq!(classify(5), Outcome::Existed);
        assert_eq!(classify(13), Outcome::Refused(13));
        assert_eq!(classify(11), Outcome::Transient(11));
        assert_eq!(classify(20), Outcome::Failed(20));
    }
}
