//! Scans and queries that do more than return records: aggregations
//! (stream UDFs, UDF_OP 1) answer the values the UDF outputs, one record
//! with a `SUCCESS` bin each; background jobs (a record UDF, UDF_OP 2, or
//! write ops) answer at once and then apply the UDF or the ops to every
//! matching record on a thread of their own, visible through
//! `query-show`.
//!
//! Both run through the scan job (`crate::scan`), which picks the
//! partitions, the records (from the primary index or a secondary index),
//! and paces them; this module only decides what happens to each
//! partition's matching records.

use crate::udf::{self, Call};
use bolide_store::{Namespace, RecordView};
use bolide_types::{particle, Digest, ResultCode};
use bolide_udf::{RecordInfo, Sources, UdfError, Value};
use bolide_wire::message::{encode_field, encode_header, encode_op, MsgHeader};
use bolide_wire::{field_type, info2, op_type, Framing, Message, ResponseWriter};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Finished jobs kept for `query-show`.
const FINISHED_KEPT: usize = 100;

/// What a scan job does with the records it selects.
pub enum Mode {
    /// Sends them (a plain scan or query).
    Records,
    /// Runs a stream UDF over each partition's records.
    Aggregate(Aggregate),
    /// Applies a write to each (a background job).
    Background(Background),
}

/// A stream UDF and where its module comes from.
pub struct Aggregate {
    call: Call,
    sources: Arc<dyn Sources>,
    time_limit: Duration,
}

/// A background job's write, as a template for one request per record.
pub struct Background {
    pub job: Arc<Job>,
    /// Header of each record's request (counts filled in per record).
    header: MsgHeader,
    /// The request's fields other than the digest, encoded.
    fields: Vec<u8>,
    n_fields: u16,
    /// The write ops (or none, for a UDF), encoded.
    ops: Vec<u8>,
    n_ops: u16,
}

/// Background jobs of the node, by transaction id.
pub struct Jobs {
    jobs: Mutex<VecDeque<Arc<Job>>>,
    background: crate::sindex::Background,
}

/// One background job and its progress.
pub struct Job {
    pub trid: u64,
    pub namespace: String,
    pub set: Option<String>,
    pub index: Option<String>,
    pub module: Option<String>,
    started: Instant,
    finished: Mutex<Option<Instant>>,
    partitions_total: AtomicU32,
    partitions_done: AtomicU32,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    pub filtered: AtomicU64,
    abandoned: AtomicBool,
}

impl Aggregate {
    pub fn new(namespace: &Namespace, message: &Message<'_>) -> Result<Aggregate, ResultCode> {
        let sources: Arc<dyn Sources> = crate::services(namespace)
            .ok_or(ResultCode::UnsupportedFeature)?
            .udfs
            .clone();
        Ok(Aggregate {
            call: Call::from_message(message)?,
            sources,
            time_limit: udf::time_limit(message.header.transaction_ttl).max(Duration::from_secs(1)),
        })
    }

    /// Runs the stream UDF over one partition's records, appending an
    /// answer per output value; a failure appends a `FAILURE` answer and
    /// is returned (it ends the job).
    pub fn run(&self, records: Vec<RecordInfo>, out: &mut Vec<u8>) -> Result<(), ResultCode> {
        if records.is_empty() {
            return Ok(());
        }
        let mut emit = |value: Value| {
            let (particle_type, bytes) = value.to_particle();
            let mut writer =
                ResponseWriter::begin_framed(out, &MsgHeader::default(), Framing::Row { index: 0 });
            writer.op(op_type::READ, particle_type, udf::SUCCESS_BIN, &bytes);
            writer.finish();
        };
        let result = bolide_udf::apply_stream(
            &self.sources,
            &self.call.module,
            &self.call.function,
            &self.call.args,
            &mut records.into_iter(),
            &mut emit,
            self.time_limit,
        );
        match result {
            Ok(()) => Ok(()),
            Err(UdfError(text)) => {
                let mut writer = ResponseWriter::begin_framed(
                    out,
                    &MsgHeader::default(),
                    Framing::Row { index: 0 },
                );
                writer.op(
                    op_type::READ,
                    particle::STRING,
                    udf::FAILURE_BIN,
                    text.as_bytes(),
                );
                writer.finish();
                Err(ResultCode::UdfExecution)
            }
        }
    }
}

impl Background {
    /// The write a background scan or query applies: a record UDF
    /// (UDF_OP 2) or its write ops.
    pub fn new(job: Arc<Job>, message: &Message<'_>) -> Result<Background, ResultCode> {
        let fields = &message.fields;
        let header = MsgHeader {
            info2: info2::WRITE | (message.header.info2 & info2::DURABLE_DELETE),
            record_ttl: message.header.record_ttl,
            transaction_ttl: message.header.transaction_ttl,
            ..MsgHeader::default()
        };
        let mut encoded = Vec::new();
        let mut n_fields = 0u16;
        let namespace = fields.namespace.ok_or(ResultCode::Namespace)?;
        encode_field(&mut encoded, field_type::NAMESPACE, namespace);
        n_fields += 1;
        let mut ops = Vec::new();
        let mut n_ops = 0u16;
        if fields.udf_op.is_some() {
            Call::from_message(message)?;
            for (kind, value) in [
                (field_type::UDF_FILENAME, fields.udf_filename),
                (field_type::UDF_FUNCTION, fields.udf_function),
                (field_type::UDF_ARGLIST, fields.udf_arglist),
            ] {
                if let Some(value) = value {
                    encode_field(&mut encoded, kind, value);
                    n_fields += 1;
                }
            }
        } else {
            for op in message.ops() {
                if !is_write_op(op.op_type) {
                    return Err(ResultCode::Parameter);
                }
                encode_op(&mut ops, op.op_type, op.particle_type, op.name, op.value);
                n_ops += 1;
            }
            if n_ops == 0 {
                return Err(ResultCode::Parameter);
            }
        }
        Ok(Background {
            job,
            header,
            fields: encoded,
            n_fields,
            ops,
            n_ops,
        })
    }

    /// Applies the write to each record, as its own request (so it runs
    /// exactly like a client's: locks, policies, indexes, statistics).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        cluster: &crate::Cluster<'_>,
        index: usize,
        namespace: &Namespace,
        digests: &[Digest],
        filter: Option<&bolide_particles::expression::Expr>,
        scratch: &mut crate::Scratch,
        runner: Option<&std::sync::Arc<dyn crate::RemoteRunner>>,
    ) {
        let mut body = Vec::new();
        let mut out = Vec::new();
        for digest in digests {
            if self.job.is_abandoned() {
                return;
            }
            body.clear();
            let header = MsgHeader {
                n_fields: self.n_fields + 1,
                n_ops: self.n_ops,
                ..self.header
            };
            encode_header(&mut body, &header);
            body.extend_from_slice(&self.fields);
            encode_field(&mut body, field_type::DIGEST, &digest.0);
            body.extend_from_slice(&self.ops);
            let Ok(message) = Message::decode(&body) else {
                self.job.failed.fetch_add(1, Relaxed);
                continue;
            };
            out.clear();
            let keep = || body.clone();
            // The job was admitted when it started (`crate::scan::plan`).
            let remote = crate::execute_record(
                cluster,
                &crate::Caller::node(),
                index,
                namespace,
                &message,
                filter,
                &mut out,
                scratch,
                Framing::Message,
                &keep,
            );
            // In a cluster the write's copies (or a proxy) are carried out
            // before the next record.
            if let Some(remote) = remote {
                out = match runner {
                    Some(runner) => runner.run_blocking(remote),
                    None => {
                        let mut answer = Vec::new();
                        bolide_wire::response::append_result(
                            &mut answer,
                            ResultCode::Unavailable.as_u8(),
                        );
                        answer
                    }
                };
            }
            // Proto header (8), then the result code at byte 5 of the message.
            match out.get(8 + 5).copied() {
                Some(0) => self.job.succeeded.fetch_add(1, Relaxed),
                Some(code) if code == ResultCode::FilteredOut.as_u8() => {
                    self.job.filtered.fetch_add(1, Relaxed)
                }
                _ => self.job.failed.fetch_add(1, Relaxed),
            };
        }
    }
}

fn is_write_op(op_type: u8) -> bool {
    matches!(
        op_type,
        op_type::WRITE
            | op_type::CDT_MODIFY
            | op_type::INCR
            | op_type::EXP_MODIFY
            | op_type::APPEND
            | op_type::PREPEND
            | op_type::TOUCH
            | op_type::BIT_MODIFY
            | op_type::DELETE
            | op_type::HLL_MODIFY
    )
}

impl Jobs {
    pub fn new(background: crate::sindex::Background) -> Jobs {
        Jobs {
            jobs: Mutex::new(VecDeque::new()),
            background,
        }
    }

    /// Registers a job and runs `work` on a thread of its own at
    /// background priority.
    pub fn start(
        &self,
        job: Arc<Job>,
        work: impl FnOnce() + Send + 'static,
    ) -> Result<(), ResultCode> {
        {
            let mut jobs = self.jobs.lock();
            jobs.push_back(job.clone());
            while jobs.len() > FINISHED_KEPT {
                match jobs.iter().position(|job| job.is_finished()) {
                    Some(oldest) => {
                        jobs.remove(oldest);
                    }
                    None => break,
                }
            }
        }
        let background = self.background.clone();
        std::thread::Builder::new()
            .name("query-bg".into())
            .spawn(move || {
                background();
                work();
                job.finish();
            })
            .map(|_| ())
            .map_err(|_| ResultCode::Unknown)
    }

    pub fn find(&self, trid: u64) -> Option<Arc<Job>> {
        self.jobs
            .lock()
            .iter()
            .rev()
            .find(|job| job.trid == trid)
            .cloned()
    }

    pub fn list(&self) -> Vec<Arc<Job>> {
        self.jobs.lock().iter().cloned().collect()
    }
}

impl Job {
    pub fn new(
        trid: u64,
        namespace: &str,
        set: Option<&[u8]>,
        index: Option<String>,
        module: Option<String>,
    ) -> Job {
        Job {
            trid,
            namespace: namespace.to_owned(),
            set: set
                .filter(|set| !set.is_empty())
                .map(|set| String::from_utf8_lossy(set).into_owned()),
            index,
            module,
            started: Instant::now(),
            finished: Mutex::new(None),
            partitions_total: AtomicU32::new(0),
            partitions_done: AtomicU32::new(0),
            succeeded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            filtered: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
        }
    }

    pub fn set_partitions(&self, total: usize) {
        self.partitions_total
            .store(u32::try_from(total).unwrap_or(u32::MAX), Relaxed);
    }

    pub fn partition_done(&self) {
        self.partitions_done.fetch_add(1, Relaxed);
    }

    pub fn abandon(&self) {
        self.abandoned.store(true, Relaxed);
    }

    pub fn is_abandoned(&self) -> bool {
        self.abandoned.load(Relaxed)
    }

    pub fn is_finished(&self) -> bool {
        self.finished.lock().is_some()
    }

    fn finish(&self) {
        *self.finished.lock() = Some(Instant::now());
    }

    /// The job as `query-show` describes it (`:`-separated, as the server).
    pub fn info(&self) -> String {
        let finished = *self.finished.lock();
        let now = Instant::now();
        let run_ms = finished
            .unwrap_or(now)
            .duration_since(self.started)
            .as_millis();
        let since_done_ms = finished.map_or(0, |at| now.duration_since(at).as_millis());
        let total = self.partitions_total.load(Relaxed).max(1);
        let progress = if finished.is_some() {
            100.0
        } else {
            f64::from(self.partitions_done.load(Relaxed)) * 100.0 / f64::from(total)
        };
        let mut text = format!("trid={}:ns={}", self.trid, self.namespace);
        if let Some(set) = &self.set {
            text.push_str(&format!(":set={set}"));
        }
        if let Some(index) = &self.index {
            text.push_str(&format!(":sindex-name={index}"));
        }
        text.push_str(&format!(
            ":rps=0:active-threads={}:status={}({}):job-progress={progress:.2}:run-time={run_ms}:\
             time-since-done={since_done_ms}:recs-throttled=0:recs-filtered-meta=0:recs-filtered-bins={}:\
             recs-succeeded={}:recs-failed={}",
            u8::from(finished.is_none()),
            if finished.is_some() { "done" } else { "active" },
            if self.is_abandoned() { "user-abort" } else { "ok" },
            self.filtered.load(Relaxed),
            self.succeeded.load(Relaxed),
            self.failed.load(Relaxed),
        ));
        if let Some(module) = &self.module {
            text.push_str(&format!(":udf-filename={module}"));
        }
        text
    }
}

/// What an aggregation sees of a record.
pub fn record_info(
    namespace: &Namespace,
    digest: &Digest,
    meta: bolide_store::RecordMeta,
    view: RecordView<'_>,
    stored_bytes: usize,
) -> Option<RecordInfo> {
    let now = bolide_types::now_citrusleaf_seconds();
    udf::record_info(
        namespace,
        digest,
        Some(meta),
        Some(view),
        stored_bytes,
        view.key,
        meta.set_id,
        now,
    )
    .ok()
}
