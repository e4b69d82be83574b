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
use crate::query::{IndexQuery, Step};
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
    /// Partitions to visit in turn: a scan's, or those of a query's this
    /// node does not serve.
    partitions: Vec<PartitionCursor>,
    /// Partitions the request names.
    partition_total: usize,
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
    /// The query's candidates of one partition (a buffer kept for reuse).
    candidates: Vec<(i64, Digest)>,
    /// The clock (citrusleaf seconds) for the chunk being filled.
    now: u32,
    /// What happens to the selected records (`crate::jobs`).
    mode: Mode,
    /// An error that ends the job (its LAST answer carries it).
    error: Option<ResultCode>,
    /// Request buffers for a background job's writes.
    scratch: crate::Scratch,
    /// Query candidates `fill` may still look at before it yields (a
    /// query answered on the event loop; unbounded once it streams).
    candidates_left: usize,
}

/// A query answers on the event loop that took it, straight into the
/// connection's output, as long as it has looked at no more than this
/// many candidate records (and filled no more than a chunk): a short
/// query then costs no job, thread hop or chunk buffers. What is left
/// streams from there as any query does.
pub const INLINE_CANDIDATES: usize = 2_048;
/// Index entries a window looks at most while the query is inline.
const INLINE_VISITS: usize = 8_192;

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
        Ok(Some(mut job)) => {
            if job.answers_inline(cluster) && job.fill_inline(out) {
                return Outcome::Answered;
            }
            Outcome::Stream(Box::new(job))
        }
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
    let mut query = match fields.index_range {
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
    let whole_node = fields.pid_array.is_none() && fields.digest_array.is_none();
    // A query takes the partitions it reads at once (most requests name
    // all 4096); only those this node does not serve stay in the list, to
    // be answered one by one.
    let (partitions, partition_total) = match &mut query {
        None => {
            let list = partitions(fields.pid_array, fields.digest_array)?;
            let total = list.len();
            (list, total)
        }
        Some(query) => query_partitions(
            query,
            cluster.routing,
            namespace_index,
            whole_node,
            fields.pid_array,
            fields.digest_array,
        )?,
    };
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
        partitions,
        partition_total,
        whole_node,
        next: 0,
        records_max: number(fields.max_records)?,
        records_sent: 0,
        records_per_second: u32::try_from(number(fields.records_per_second)?).unwrap_or(u32::MAX),
        started: Instant::now(),
        query,
        candidates: Vec::new(),
        now: 0,
        mode,
        error: None,
        scratch: crate::Scratch::default(),
        candidates_left: usize::MAX,
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

/// The partitions a node serves to queries, by routing snapshot.
struct Served {
    /// The snapshot (a weak reference keeps its allocation, so an equal
    /// pointer is the same snapshot).
    routing: std::sync::Weak<Routing>,
    namespace: usize,
    whole_node: bool,
    partitions: [u64; PARTITION_COUNT / 64],
}

thread_local! {
    /// The last answers of [`served_partitions`] on this thread: a pass
    /// over 4096 routes costs more than the rest of a selective query, and
    /// a routing changes only with the cluster.
    static SERVED: std::cell::RefCell<Vec<Served>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Bitmap of the partitions of `namespace` this node serves to queries
/// under `routing`: those it holds whole (a request naming partitions), or
/// those it is the working master of (a request sent to every node).
fn served_partitions(
    routing: &Arc<Routing>,
    namespace: usize,
    whole_node: bool,
) -> [u64; PARTITION_COUNT / 64] {
    let known = SERVED.with(|cache| {
        cache
            .borrow()
            .iter()
            .find(|served| {
                std::ptr::eq(served.routing.as_ptr(), Arc::as_ptr(routing))
                    && served.namespace == namespace
                    && served.whole_node == whole_node
            })
            .map(|served| served.partitions)
    });
    if let Some(partitions) = known {
        return partitions;
    }
    let mut partitions = [0u64; PARTITION_COUNT / 64];
    if let Some(ns) = routing.namespaces.get(namespace) {
        for (word, routes) in partitions.iter_mut().zip(ns.routes.chunks(64)) {
            let mut bits = 0u64;
            for (i, route) in routes.iter().enumerate() {
                let serves = if whole_node {
                    route.writes_here()
                } else {
                    route.reads_here() && !route.resolves_duplicates()
                };
                bits |= u64::from(serves) << i;
            }
            *word = bits;
        }
    }
    SERVED.with(|cache| {
        let mut cache = cache.borrow_mut();
        // Answers of older snapshots go; a few namespaces' stay.
        cache.retain(|served| std::ptr::eq(served.routing.as_ptr(), Arc::as_ptr(routing)));
        cache.truncate(7);
        cache.push(Served {
            routing: Arc::downgrade(routing),
            namespace,
            whole_node,
            partitions,
        });
    });
    partitions
}

/// PID_ARRAY naming every partition in order.
static ALL_PIDS: [u8; 2 * PARTITION_COUNT] = {
    let mut pids = [0u8; 2 * PARTITION_COUNT];
    let mut pid = 0;
    while pid < PARTITION_COUNT {
        pids[2 * pid] = pid as u8;
        pids[2 * pid + 1] = (pid >> 8) as u8;
        pid += 1;
    }
    pids
};

/// Hands a query the partitions it reads (PID_ARRAY, then DIGEST_ARRAY
/// with resume points; all 4096 when neither is given) that this node
/// serves, as bitmaps rather than one by one. Returns the others, to be
/// answered in turn, and how many partitions the request names.
fn query_partitions(
    query: &mut IndexQuery,
    routing: &Arc<Routing>,
    namespace: usize,
    whole_node: bool,
    pids: Option<&[u8]>,
    digests: Option<&[u8]>,
) -> Result<(Vec<PartitionCursor>, usize), ResultCode> {
    const WORDS: usize = PARTITION_COUNT / 64;
    let served = served_partitions(routing, namespace, whole_node);
    let mut named = [0u64; WORDS];
    let mut total;
    let pids = pids.unwrap_or_default();
    if whole_node || pids == ALL_PIDS.as_slice() {
        // No list, or the list of every partition in order (what a client
        // sends a single node).
        named = [u64::MAX; WORDS];
        total = PARTITION_COUNT;
    } else {
        if !pids.len().is_multiple_of(2) {
            return Err(ResultCode::Parameter);
        }
        for pid in pids.chunks_exact(2) {
            let pid = usize::from(u16::from_le_bytes([pid[0], pid[1]]));
            let word = named.get_mut(pid / 64).ok_or(ResultCode::Parameter)?;
            let bit = 1 << (pid % 64);
            if *word & bit != 0 {
                return Err(ResultCode::Parameter);
            }
            *word |= bit;
        }
        total = pids.len() / 2;
    }
    let mut unserved = Vec::new();
    let mut wanted = [0u64; WORDS];
    for (i, (named, served)) in named.iter().zip(served.iter()).enumerate() {
        if let Some(word) = wanted.get_mut(i) {
            *word = named & served;
        }
        let mut missing = named & !served;
        while missing != 0 {
            let bit = missing.trailing_zeros();
            missing &= missing - 1;
            unserved.push(((i * 64) as u16 + bit as u16, None));
        }
    }
    query.read_partitions(&wanted);
    let digests = digests.unwrap_or_default();
    if !digests.len().is_multiple_of(DIGEST_BYTES) {
        return Err(ResultCode::Parameter);
    }
    for digest in digests.chunks_exact(DIGEST_BYTES) {
        let mut bytes = [0u8; DIGEST_BYTES];
        bytes.copy_from_slice(digest);
        let pid = Digest(bytes).partition_id().index();
        let word = named.get_mut(pid / 64).ok_or(ResultCode::Parameter)?;
        let bit = 1 << (pid % 64);
        if *word & bit != 0 {
            return Err(ResultCode::Parameter);
        }
        *word |= bit;
        total += 1;
        if served.get(pid / 64).is_some_and(|word| word & bit != 0) {
            query.read_partition(pid as u16, Some(bytes));
        } else {
            unserved.push((pid as u16, Some(bytes)));
        }
    }
    Ok((unserved, total))
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
        // Records past their void time by now are left out of this chunk.
        self.now = now_citrusleaf_seconds();
        loop {
            if self.limit_reached()
                || self.error.is_some()
                || out.len() - frame >= CHUNK_BYTES
                || self.candidates_left == 0
            {
                break;
            }
            // A throttled scan sends what it has before it waits, so its
            // client gets records as they are due (not a chunk at a time)
            // and a client that left is noticed at the next send.
            if self.records_sent > sent_before && self.ahead_of_rate() {
                break;
            }
            if let Some(&(pid, resume)) = self.partitions.get(self.next) {
                // A query only takes note of the partitions here; it reads
                // them below, shard by shard.
                if self.query.is_none() {
                    self.throttle();
                }
                self.scan_partition(pid, resume, out);
                self.next += 1;
                continue;
            }
            let mut candidates = std::mem::take(&mut self.candidates);
            let step = self
                .query
                .as_mut()
                .and_then(|query| query.next_step(&mut candidates));
            let Some(step) = step else {
                self.candidates = candidates;
                break;
            };
            match step {
                Step::Candidates(pid) => {
                    self.throttle();
                    self.candidates_left = self.candidates_left.saturating_sub(candidates.len());
                    self.read_records(pid, Source::Index(&candidates), out);
                }
                Step::ShardDone(partitions) => {
                    if let Mode::Background(work) = &self.mode {
                        for _ in 0..partitions {
                            work.job.partition_done();
                        }
                    }
                }
            }
            self.candidates = candidates;
        }
        let finished = (self.next >= self.partitions.len()
            && self.query.as_ref().is_none_or(IndexQuery::is_finished))
            || self.limit_reached()
            || self.error.is_some();
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

/// What a partition's records leave behind besides answers.
#[derive(Default)]
struct Sink {
    /// Records for an aggregation.
    aggregated: Vec<bolide_udf::RecordInfo>,
    /// Records for a background job's writes.
    digests: Vec<Digest>,
    /// Where records read from the device go.
    loaded: Vec<u8>,
}

/// Where the records of a partition come from.
enum Source<'c> {
    /// Every record of the partition, after this digest if given.
    Scan(Option<[u8; DIGEST_BYTES]>),
    /// These candidates of a query (bval, digest), checked one by one.
    Index(&'c [(i64, Digest)]),
}

impl ScanJob {
    /// Whether the job may begin on the event loop: a query that answers
    /// records (not an aggregation, not a background job) at no set rate,
    /// asked by a client (a proxied request is not streamed at all).
    fn answers_inline(&self, cluster: &Cluster<'_>) -> bool {
        self.query.is_some()
            && matches!(self.mode, Mode::Records)
            && self.records_per_second == 0
            && !cluster.from_proxy
    }

    /// Answers as much of the query as [`INLINE_CANDIDATES`] allow into
    /// `out`, in small index windows; true if that was all of it (the
    /// LAST message is in `out`). Otherwise what it answered goes out
    /// first and the job streams the rest, resuming where it stopped.
    fn fill_inline(&mut self, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        if let Some(query) = &mut self.query {
            query.set_window(INLINE_CANDIDATES, INLINE_VISITS);
        }
        self.candidates_left = INLINE_CANDIDATES;
        let finished = self.fill(out);
        self.candidates_left = usize::MAX;
        if let Some(query) = &mut self.query {
            query.set_window(usize::MAX, usize::MAX);
        }
        if !finished && out.len() == start + bolide_wire::PROTO_HEADER_BYTES {
            // Nothing answered yet: no empty frame.
            out.truncate(start);
        }
        finished
    }

    /// Runs a background job on a thread of its own.
    fn spawn(mut self) -> Result<(), ResultCode> {
        let Mode::Background(work) = &self.mode else {
            return Err(ResultCode::Parameter);
        };
        let job = work.job.clone();
        job.set_partitions(self.partition_total);
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
        match &mut self.query {
            // The query reads the partition later, shard by shard.
            Some(query) => query.read_partition(pid, resume),
            None => self.read_records(pid, Source::Scan(resume), out),
        }
    }

    /// Copies the partition's records that `source` names into `out` (or
    /// aggregates them, or applies a background job's write to them).
    /// A query's candidates are checked against their records under the
    /// partition's lock (a record changed since is read as it is now, and
    /// left out if it no longer matches).
    fn read_records(&mut self, pid: u16, source: Source<'_>, out: &mut Vec<u8>) {
        let namespace = self.namespace.clone();
        let namespace = &namespace;
        let Some(table) = namespace.read_partition(usize::from(pid)) else {
            return;
        };
        let mut sink = Sink::default();
        let (set_id, now) = (self.set_id, self.now);
        let wanted = |entry: &bolide_store::Entry<'_>| {
            set_id.is_none_or(|set| set == entry.meta.set_id)
                && !namespace.is_doomed(&entry.meta, now)
        };
        let scan = matches!(source, Source::Scan(_));
        match source {
            Source::Scan(resume) => {
                let mut entries = Vec::new();
                table.for_each(|entry| {
                    if wanted(&entry) && resume.is_none_or(|after| *entry.digest < after) {
                        entries.push(entry);
                    }
                });
                entries.sort_unstable_by(|a, b| b.digest.cmp(a.digest));
                for entry in entries {
                    if !self.read_record(namespace, &entry, None, &mut sink, out) {
                        break;
                    }
                }
            }
            Source::Index(candidates) => {
                for &(bval, digest) in candidates {
                    if let Some(entry) = table.get(&digest).filter(|entry| wanted(entry)) {
                        if !self.read_record(namespace, &entry, Some(bval), &mut sink, out) {
                            break;
                        }
                    }
                }
            }
        }
        // Writes and UDFs run without the partition's read lock.
        drop(table);
        match &self.mode {
            Mode::Records => {}
            Mode::Aggregate(aggregate) => {
                if let Err(code) = aggregate.run(sink.aggregated, out) {
                    self.error = Some(code);
                }
            }
            Mode::Background(work) => {
                let cluster = Cluster::new(&self.routing, &self.gates);
                work.run(
                    &cluster,
                    self.namespace_index,
                    namespace,
                    &sink.digests,
                    self.filter.as_ref(),
                    &mut self.scratch,
                    self.runner.as_ref(),
                );
                // A query's partitions are done shard by shard.
                if scan {
                    work.job.partition_done();
                }
            }
        }
    }

    /// Sends one record (or takes it for an aggregation or a background
    /// job) if it passes the query and the filter; false once the job has
    /// sent as many records as it may.
    fn read_record(
        &mut self,
        namespace: &Namespace,
        entry: &bolide_store::Entry<'_>,
        bval: Option<i64>,
        sink: &mut Sink,
        out: &mut Vec<u8>,
    ) -> bool {
        if self.limit_reached() {
            return false;
        }
        // A record that cannot be read back is skipped (and logged).
        let Ok(bytes) = namespace.record_bytes(entry, &mut sink.loaded) else {
            return true;
        };
        let Some(record) = RecordView::parse(bytes) else {
            return true;
        };
        let digest = Digest(*entry.digest);
        if self.query.as_ref().is_some_and(|query| {
            !query.matches(namespace, &digest, &entry.meta, &record, bytes.len())
        }) {
            return true;
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
            return true;
        }
        match &self.mode {
            Mode::Records => {}
            Mode::Aggregate(_) => {
                if let Some(info) =
                    crate::jobs::record_info(namespace, &digest, entry.meta, record, bytes.len())
                {
                    sink.aggregated.push(info);
                }
                self.counted(&digest);
                return true;
            }
            Mode::Background(_) => {
                sink.digests.push(digest);
                self.counted(&digest);
                return true;
            }
        }
        // As on the server, a record with none of the selected bins is
        // not sent at all.
        let selected = |bin: &bolide_store::Bin<'_>| self.bins.iter().any(|name| name == bin.name);
        if !self.no_bin_data && !self.bins.is_empty() && !record.bins().any(|bin| selected(&bin)) {
            return true;
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
            // Type byte and key; short keys without an allocation.
            let mut short = [0u8; 64];
            match short.get_mut(..1 + key.len()) {
                Some(field) => {
                    field[0] = key_type;
                    field[1..].copy_from_slice(key);
                    writer.field(field_type::KEY, field);
                }
                None => {
                    let mut field = Vec::with_capacity(1 + key.len());
                    field.push(key_type);
                    field.extend_from_slice(key);
                    writer.field(field_type::KEY, &field);
                }
            }
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
        self.counted(&digest);
        true
    }

    /// Counts a record sent (or taken), which a query then passes over.
    fn counted(&mut self, digest: &Digest) {
        self.records_sent += 1;
        if let Some(query) = &mut self.query {
            query.sent(digest);
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
