//! Partition scans (an AS_MSG without a DIGEST field): every record of a
//! namespace or set, partition by partition, streamed in chunks, ending with
//! a LAST message. Each partition is read under its read lock for as long as
//! it takes to copy its records out, so writes are never blocked for long.
//!
//! Inside a partition records come in descending digest order; a resume
//! digest (DIGEST_ARRAY) continues strictly after it, which is what the
//! clients' partition trackers expect after `max_records`.
//!
//! A secondary-index query (an INDEX_RANGE field) is a scan whose records
//! come from the index instead (`crate::query`): in (bval, digest) order,
//! each checked against the query and answered with its BVAL field.

use crate::caller::{Caller, Permission};
use crate::cluster::Cluster;
use crate::jobs::{Aggregate, Background, Job, Mode};
use crate::query::IndexQuery;
use crate::{append_last, Outcome, StreamJob, CHUNK_BYTES};
use bolide_cluster::Routing;
use bolide_particles::expression::Expr;
use bolide_store::{Namespace, RecordView, Store};
use bolide_types::{
    now_citrusleaf_seconds, Digest, ResultCode, BIN_NAME_BYTES_MAX, DIGEST_BYTES, PARTITION_COUNT,
};
use bolide_wire::message::MsgHeader;
use bolide_wire::response::{begin_frame, finish_frame};
use bolide_wire::{field_type, info1, info2, info3, op_type, Framing, Message, ResponseWriter};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A partition to visit and the digest to resume after, if any.
type PartitionCursor = (u16, Option<[u8; DIGEST_BYTES]>);

/// A scan in progress.
pub struct ScanJob {
    namespace: Arc<Namespace>,
    /// The routing when the scan began, and the namespace's place in it:
    /// partitions this node does not serve are answered "unavailable" so
    /// the client asks their master.
    routing: Arc<Routing>,
    namespace_index: usize,
    gates: Arc<bolide_cluster::routing::Gates>,
    /// Carries out a background job's writes' work on other nodes (their
    /// copies, above all).
    runner: Option<Arc<dyn crate::RemoteRunner>>,
    /// None = every set; Some(id) = that set only.
    set_id: Option<u16>,
    bins: Vec<Vec<u8>>,
    no_bin_data: bool,
    partitions: Vec<PartitionCursor>,
    /// No partition list was given: the client sent the same request to
    /// every node (as the clients do for aggregations and some background
    /// jobs), so this node covers the partitions it is the working master
    /// of and passes over the rest without a word.
    whole_node: bool,
    next: usize,
    records_max: u64,
    records_sent: u64,
    records_per_second: u32,
    started: Instant,
    filter: Option<Expr>,
    /// Set for a secondary-index query.
    query: Option<IndexQuery>,
    /// What happens to the selected records (`crate::jobs`).
    mode: Mode,
    /// An error that ends the job (its LAST answer carries it).
    error: Option<ResultCode>,
    /// Request buffers for a background job's writes.
    scratch: crate::Scratch,
}

pub fn start(
    store: &Store,
    cluster: &Cluster<'_>,
    caller: &Caller,
    message: &Message<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    match plan(store, cluster, caller, message) {
        Ok(Some(job)) if matches!(job.mode, Mode::Background(_)) => {
            // A background job answers at once and runs on its own.
            append_last(out, job.spawn().err().unwrap_or(ResultCode::Ok));
            Outcome::Answered
        }
        Ok(Some(job)) => Outcome::Stream(Box::new(job)),
        Ok(None) => {
            append_last(out, ResultCode::Ok);
            Outcome::Answered
        }
        Err(code) => {
            append_last(out, code);
            Outcome::Answered
        }
    }
}

/// Validates a scan request and checks that `caller` may run it; `None`
/// means "nothing to scan" (unknown set).
fn plan(
    store: &Store,
    cluster: &Cluster<'_>,
    caller: &Caller,
    message: &Message<'_>,
) -> Result<Option<ScanJob>, ResultCode> {
    let fields = &message.fields;
    let header = &message.header;
    let (namespace_index, namespace) = fields
        .namespace
        .and_then(|name| store.namespace_index(name))
        .ok_or(ResultCode::Namespace)?;
    if fields.unknown_type.is_some() {
        return Err(ResultCode::Parameter);
    }
    caller.check(
        permission(message),
        Some(namespace.name()),
        fields.set.filter(|set| !set.is_empty()),
    )?;
    let query = match fields.index_range {
        Some(_) => Some(IndexQuery::plan(namespace, message)?),
        None => None,
    };
    if fields.transaction {
        return Err(ResultCode::UnsupportedFeature);
    }
    let mode = mode(namespace, message, query.as_ref())?;
    let set_id = match fields.set {
        Some(set) if !set.is_empty() => match namespace.existing_set_id(set) {
            Some(id) => Some(id),
            None => return Ok(None),
        },
        _ => None,
    };
    let mut bins = Vec::new();
    for op in message.ops() {
        if matches!(mode, Mode::Background(_)) {
            break;
        }
        if op.op_type != op_type::READ {
            return Err(ResultCode::UnsupportedFeature);
        }
        if op.name.len() > BIN_NAME_BYTES_MAX {
            return Err(ResultCode::BinName);
        }
        if !op.name.is_empty() {
            bins.push(op.name.to_vec());
        }
    }
    let filter = fields
        .filter_expression
        .map(bolide_particles::expression::parse)
        .transpose()?;
    Ok(Some(ScanJob {
        filter,
        namespace: namespace.clone(),
        routing: Arc::clone(cluster.routing),
        namespace_index,
        gates: Arc::clone(cluster.gates),
        runner: cluster.runner.cloned(),
        set_id,
        bins,
        no_bin_data: header.info1 & info1::NO_BIN_DATA != 0,
        partitions: partitions(fields.pid_array, fields.digest_array)?,
        whole_node: fields.pid_array.is_none() && fields.digest_array.is_none(),
        next: 0,
        records_max: number(fields.max_records)?,
        records_sent: 0,
        records_per_second: u32::try_from(number(fields.records_per_second)?).unwrap_or(u32::MAX),
        started: Instant::now(),
        query,
        mode,
        error: None,
        scratch: crate::Scratch::default(),
    }))
}

/// What a scan or query needs of its caller: a UDF (an aggregation, or a
/// background UDF job) UdfQuery, a background job with write ops OpsQuery,
/// one that answers records Query.
fn permission(message: &Message<'_>) -> Permission {
    if message.fields.udf_op.is_some() {
        Permission::UdfQuery
    } else if message.header.info2 & info2::WRITE != 0 {
        Permission::OpsQuery
    } else {
        Permission::Query
    }
}

/// Whether a scan or query sends records, aggregates them (UDF_OP 1) or
/// is a background job (UDF_OP 2, or write ops).
fn mode(
    namespace: &Namespace,
    message: &Message<'_>,
    query: Option<&IndexQuery>,
) -> Result<Mode, ResultCode> {
    let fields = &message.fields;
    let write = message.header.info2 & info2::WRITE != 0;
    let background = |module: Option<String>| -> Result<Mode, ResultCode> {
        let trid = number(fields.task_id)?;
        let job = Job::new(
            trid,
            namespace.name(),
            fields.set,
            query.map(|query| query.index.name()),
            module,
        );
        Ok(Mode::Background(Background::new(Arc::new(job), message)?))
    };
    match fields.udf_op {
        None if fields.udf => Err(ResultCode::Parameter),
        None if write => background(None),
        None => Ok(Mode::Records),
        Some([1]) => Ok(Mode::Aggregate(Aggregate::new(namespace, message)?)),
        Some([2]) => background(
            fields
                .udf_filename
                .map(|name| String::from_utf8_lossy(name).into_owned()),
        ),
        Some(_) => Err(ResultCode::Parameter),
    }
}

/// The partitions to visit, with resume points: PID_ARRAY (u16 LE each),
/// then DIGEST_ARRAY (20 bytes each); all 4096 when neither is given.
pub(crate) fn partitions(
    pids: Option<&[u8]>,
    digests: Option<&[u8]>,
) -> Result<Vec<PartitionCursor>, ResultCode> {
    if pids.is_none() && digests.is_none() {
        return Ok((0..PARTITION_COUNT as u16).map(|pid| (pid, None)).collect());
    }
    let mut seen = vec![false; PARTITION_COUNT];
    let mut list = Vec::new();
    let mut add = |pid: u16, resume: Option<[u8; DIGEST_BYTES]>| -> Result<(), ResultCode> {
        let slot = seen
            .get_mut(usize::from(pid))
            .ok_or(ResultCode::Parameter)?;
        if *slot {
            return Err(ResultCode::Parameter);
        }
        *slot = true;
        list.push((pid, resume));
        Ok(())
    };
    let pids = pids.unwrap_or_default();
    if !pids.len().is_multiple_of(2) {
        return Err(ResultCode::Parameter);
    }
    for pid in pids.chunks_exact(2) {
        add(u16::from_le_bytes([pid[0], pid[1]]), None)?;
    }
    let digests = digests.unwrap_or_default();
    if !digests.len().is_multiple_of(DIGEST_BYTES) {
        return Err(ResultCode::Parameter);
    }
    for digest in digests.chunks_exact(DIGEST_BYTES) {
        let mut bytes = [0u8; DIGEST_BYTES];
        bytes.copy_from_slice(digest);
        add(Digest(bytes).partition_id().0, Some(bytes))?;
    }
    Ok(list)
}

/// A big-endian u64 or u32 field; absent = 0.
fn number(field: Option<&[u8]>) -> Result<u64, ResultCode> {
    match field {
        None => Ok(0),
        Some(bytes) => match bytes.len() {
            8 => Ok(u64::from_be_bytes(
                bytes.try_into().map_err(|_| ResultCode::Parameter)?,
            )),
            4 => Ok(u64::from(u32::from_be_bytes(
                bytes.try_into().map_err(|_| ResultCode::Parameter)?,
            ))),
            _ => Err(ResultCode::Parameter),
        },
    }
}

impl StreamJob for ScanJob {
    /// A scan is background work; a secondary-index query reads only the
    /// records it matches, so it runs in the foreground (on the blocking
    /// pool, at normal priority) and its latency does not depend on the
    /// CPU the event loops leave.
    fn is_background(&self) -> bool {
        self.query.is_none()
    }

    fn fill(&mut self, out: &mut Vec<u8>) -> bool {
        let frame = begin_frame(out);
        let sent_before = self.records_sent;
        while self.next < self.partitions.len()
            && !self.limit_reached()
            && self.error.is_none()
            && out.len() - frame < CHUNK_BYTES
        {
            // A throttled scan sends what it has before it waits, so its
            // client gets records as they are due (not a chunk at a time)
            // and a client that left is noticed at the next send.
            if self.records_sent > sent_before && self.ahead_of_rate() {
                break;
            }
            self.throttle();
            if let Some(&(pid, resume)) = self.partitions.get(self.next) {
                self.scan_partition(pid, resume, out);
            }
            self.next += 1;
        }
        let finished =
            self.next >= self.partitions.len() || self.limit_reached() || self.error.is_some();
        if finished {
            let header = MsgHeader {
                info3: info3::LAST,
                result_code: self.error.map_or(0, ResultCode::as_u8),
                ..MsgHeader::default()
            };
            ResponseWriter::begin_framed(out, &header, Framing::Row { index: 0 }).finish();
        }
        finish_frame(out, frame);
        finished
    }
}

impl ScanJob {
    /// Runs a background job on a thread of its own.
    fn spawn(mut self) -> Result<(), ResultCode> {
        let Mode::Background(work) = &self.mode else {
            return Err(ResultCode::Parameter);
        };
        let job = work.job.clone();
        job.set_partitions(self.partitions.len());
        let jobs = crate::services(&self.namespace)
            .ok_or(ResultCode::UnsupportedFeature)?
            .jobs
            .clone();
        jobs.start(job.clone(), move || {
            let mut sink = Vec::new();
            while !job.is_abandoned() && !self.fill(&mut sink) {
                sink.clear();
            }
        })
    }

    fn limit_reached(&self) -> bool {
        self.records_max != 0 && self.records_sent >= self.records_max
    }

    /// Copies one partition's matching records into `out` (or aggregates
    /// them, or applies a background job's write to them), or answers that
    /// this node does not serve it.
    fn scan_partition(&mut self, pid: u16, resume: Option<[u8; DIGEST_BYTES]>, out: &mut Vec<u8>) {
        let served = if self.whole_node {
            masters_scan(&self.routing, self.namespace_index, usize::from(pid))
        } else {
            serves_scan(&self.routing, self.namespace_index, usize::from(pid))
        };
        if !served {
            match &self.mode {
                // A background job counts the partition as done (its
                // progress would never reach 100% otherwise).
                Mode::Background(work) => work.job.partition_done(),
                _ if self.whole_node => {}
                _ => append_partition_unavailable(out, pid),
            }
            return;
        }
        // A selective query finds nothing in most partitions: it looks at
        // the partition's index tree first and takes the partition's lock
        // (and reads the clock) only where there is something. Seeing no
        // candidate is as if the query had read the partition before any
        // write in progress. Candidates found are checked against their
        // records under the lock (a record changed since is read as it is
        // now, and left out if it no longer matches).
        let candidates = self
            .query
            .as_ref()
            .map(|query| query.candidates(pid, resume));
        if candidates.as_ref().is_some_and(Vec::is_empty) {
            if let Mode::Background(work) = &self.mode {
                work.job.partition_done();
            }
            return;
        }
        let now = std::cell::OnceCell::new();
        let namespace = self.namespace.clone();
        let namespace = &namespace;
        let Some(table) = namespace.read_partition(usize::from(pid)) else {
            return;
        };
        let mut aggregated = Vec::new();
        let mut digests = Vec::new();
        let wanted = |entry: &bolide_store::Entry<'_>| {
            self.set_id.is_none_or(|set| set == entry.meta.set_id)
                && !namespace.is_doomed(&entry.meta, *now.get_or_init(now_citrusleaf_seconds))
        };
        let mut entries = Vec::new();
        match &self.query {
            None => {
                table.for_each(|entry| {
                    if wanted(&entry) && resume.is_none_or(|after| *entry.digest < after) {
                        entries.push((entry, None));
                    }
                });
                entries.sort_unstable_by(|(a, _), (b, _)| b.digest.cmp(a.digest));
            }
            Some(_) => {
                for (bval, digest) in candidates.unwrap_or_default() {
                    if let Some(entry) = table.get(&digest).filter(|entry| wanted(entry)) {
                        entries.push((entry, Some(bval)));
                    }
                }
            }
        }
        let mut loaded = Vec::new();
        for (entry, bval) in entries {
            if self.limit_reached() {
                break;
            }
            // A record that cannot be read back is skipped (and logged).
            let Ok(bytes) = namespace.record_bytes(&entry, &mut loaded) else {
                continue;
            };
            let Some(record) = RecordView::parse(bytes) else {
                continue;
            };
            let digest = Digest(*entry.digest);
            if self.query.as_ref().is_some_and(|query| {
                !query.matches(namespace, &digest, &entry.meta, &record, bytes.len())
            }) {
                continue;
            }
            if crate::check_filter(
                namespace,
                self.filter.as_ref(),
                &digest,
                &entry.meta,
                &record,
                bytes.len(),
            )
            .is_err()
            {
                continue;
            }
            match &self.mode {
                Mode::Records => {}
                Mode::Aggregate(_) => {
                    if let Some(info) = crate::jobs::record_info(
                        namespace,
                        &digest,
                        entry.meta,
                        record,
                        bytes.len(),
                    ) {
                        aggregated.push(info);
                    }
                    self.records_sent += 1;
                    continue;
                }
                Mode::Background(_) => {
                    digests.push(digest);
                    self.records_sent += 1;
                    continue;
                }
            }
            // As on the server, a record with none of the selected bins is
            // not sent at all.
            let selected =
                |bin: &bolide_store::Bin<'_>| self.bins.iter().any(|name| name == bin.name);
            if !self.no_bin_data
                && !self.bins.is_empty()
                && !record.bins().any(|bin| selected(&bin))
            {
                continue;
            }
            let header = MsgHeader {
                info1: if self.no_bin_data {
                    info1::NO_BIN_DATA
                } else {
                    0
                },
                generation: u32::from(entry.meta.generation),
                record_ttl: entry.meta.void_time,
                ..MsgHeader::default()
            };
            let mut writer = ResponseWriter::begin_framed(out, &header, Framing::Row { index: 0 });
            writer.field(field_type::NAMESPACE, namespace.name().as_bytes());
            writer.field(field_type::DIGEST, entry.digest);
            if let Some(set) = namespace.set_name(entry.meta.set_id) {
                writer.field(field_type::SET, set.as_bytes());
            }
            if let Some((key_type, key)) = record.key {
                let mut field = Vec::with_capacity(1 + key.len());
                field.push(key_type);
                field.extend_from_slice(key);
                writer.field(field_type::KEY, &field);
            }
            if let Some(bval) = bval {
                writer.field(field_type::BVAL_ARRAY, &bval.to_le_bytes());
            }
            if !self.no_bin_data {
                for bin in record.bins() {
                    if self.bins.is_empty() || self.bins.iter().any(|name| name == bin.name) {
                        writer.op(op_type::READ, bin.particle_type, bin.name, bin.value);
                    }
                }
            }
            writer.finish();
            self.records_sent += 1;
        }
        // Writes and UDFs run without the partition's read lock.
        drop(table);
        match &self.mode {
            Mode::Records => {}
            Mode::Aggregate(aggregate) => {
                if let Err(code) = aggregate.run(aggregated, out) {
                    self.error = Some(code);
                }
            }
            Mode::Background(work) => {
                let cluster = Cluster::new(&self.routing, &self.gates);
                work.run(
                    &cluster,
                    self.namespace_index,
                    namespace,
                    &digests,
                    self.filter.as_ref(),
                    &mut self.scratch,
                    self.runner.as_ref(),
                );
                work.job.partition_done();
            }
        }
    }

    /// How long until the records sent so far are due at records-per-second
    /// (zero when unthrottled or behind).
    fn wait_for_rate(&self) -> Duration {
        if self.records_per_second == 0 {
            return Duration::ZERO;
        }
        let due =
            Duration::from_secs_f64(self.records_sent as f64 / f64::from(self.records_per_second));
        due.saturating_sub(self.started.elapsed())
    }

    fn ahead_of_rate(&self) -> bool {
        !self.wait_for_rate().is_zero()
    }

    /// Sleeps until the records sent so far are due at records-per-second.
    fn throttle(&self) {
        loop {
            let wait = self.wait_for_rate();
            if wait.is_zero() {
                return;
            }
            std::thread::sleep(wait.min(Duration::from_secs(1)));
        }
    }
}

/// Whether this node answers a scan or query of partition `pid`: it holds
/// the partition's complete data (the working master, with no copy left to
/// merge, or a complete replica).
pub fn serves_scan(routing: &Routing, namespace: usize, pid: usize) -> bool {
    routing.namespaces.get(namespace).is_some_and(|ns| {
        let route = ns.route(pid);
        route.reads_here() && !route.resolves_duplicates()
    })
}

/// Whether this node covers partition `pid` in a request sent to every
/// node alike (no partition list): it is the working master.
pub fn masters_scan(routing: &Routing, namespace: usize, pid: usize) -> bool {
    routing
        .namespaces
        .get(namespace)
        .is_some_and(|ns| ns.route(pid).writes_here())
}

/// A partition-done record with result 11: the client asks another node
/// for this partition (its id rides in the generation field).
pub fn append_partition_unavailable(out: &mut Vec<u8>, pid: u16) {
    let header = MsgHeader {
        info3: info3::PARTITION_DONE,
        result_code: ResultCode::Unavailable.as_u8(),
        generation: u32::from(pid),
        ..MsgHeader::default()
    };
    ResponseWriter::begin_framed(out, &header, Framing::Row { index: 0 }).finish();
}
