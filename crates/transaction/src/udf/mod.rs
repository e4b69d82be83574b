//! Record UDFs (`apply`): the request names a module, a function and its
//! arguments (fields 30–32); the UDF runs on the record under the
//! partition's write lock, and what it committed (`aerospike:create`,
//! `update`, `remove`) is written like any other write. The answer carries
//! the return value in a `SUCCESS` bin, or result 100 and the error text
//! in a `FAILURE` bin.
//!
//! The Lua runtime is `bolide-udf`; the registered modules live in
//! [`modules`].

pub mod modules;

use crate::reply::Reply;
use crate::request::Request;
use crate::write;
use crate::{ttl, Scratch};
use bolide_store::record::{self, Bin, RecordView};
use bolide_store::{Namespace, RecordMeta, SetError};
use bolide_types::{
    now_citrusleaf_milliseconds, particle, Digest, ResultCode, CITRUSLEAF_EPOCH_UNIX_SECONDS,
};
use bolide_udf::{RecordInfo, Sources, UdfError, Value};
use bolide_wire::{op_type, Message};
use std::sync::Arc;
use std::time::Duration;

/// The bin a UDF's return value comes back in.
pub const SUCCESS_BIN: &[u8] = b"SUCCESS";
/// The bin a UDF's error text comes back in.
pub const FAILURE_BIN: &[u8] = b"FAILURE";

/// A UDF call as a request names it.
pub struct Call {
    pub module: String,
    pub function: String,
    pub args: Vec<Value>,
}

impl Call {
    /// Fields 30 (module), 31 (function) and 32 (msgpack argument list).
    pub fn from_message(message: &Message<'_>) -> Result<Call, ResultCode> {
        let fields = &message.fields;
        Call::from_parts(fields.udf_filename, fields.udf_function, fields.udf_arglist)
    }

    /// A call from its module, function and msgpack argument list.
    pub fn from_parts(
        module: Option<&[u8]>,
        function: Option<&[u8]>,
        arglist: Option<&[u8]>,
    ) -> Result<Call, ResultCode> {
        // As on the server (`udf_def_init_from_msg`), a name must fit its
        // buffer but may be empty: an empty module or function is then
        // not found when the call runs (a UDF error, 100), not a bad
        // request.
        let text = |field: Option<&[u8]>| -> Result<String, ResultCode> {
            let bytes = field.ok_or(ResultCode::Parameter)?;
            let text = std::str::from_utf8(bytes).map_err(|_| ResultCode::Parameter)?;
            if text.len() > modules::FILE_NAME_BYTES_MAX {
                return Err(ResultCode::Parameter);
            }
            Ok(text.to_owned())
        };
        let module = text(module)?;
        let function = text(function)?;
        let args = match arglist {
            // Clients send an empty field for no arguments.
            None | Some([]) => Vec::new(),
            Some(bytes) => Value::list_from_msgpack(bytes).map_err(|_| ResultCode::Parameter)?,
        };
        Ok(Call {
            module,
            function,
            args,
        })
    }
}

/// How long a UDF may run: the request's timeout, less a tenth (at most
/// 100 ms) so that the error reaches the client before it gives up;
/// without a timeout, the default.
pub fn time_limit(timeout_ms: u32) -> Duration {
    match timeout_ms {
        0 => bolide_udf::DEFAULT_TIME_LIMIT,
        ms => {
            let ms = u64::from(ms);
            Duration::from_millis(ms - (ms / 10).min(100))
        }
    }
}

/// Runs a record UDF request against `digest`, appending its answer.
pub fn apply<R: Reply + ?Sized>(
    namespace: &Namespace,
    digest: &Digest,
    request: &Request<'_>,
    filter: Option<&bolide_particles::expression::Expr>,
    reply: &mut R,
    scratch: &mut Scratch,
) -> Result<(), ResultCode> {
    let call = Call::from_parts(request.udf.module, request.udf.function, request.udf.args)?;
    let sources: Arc<dyn Sources> = crate::services(namespace)
        .ok_or(ResultCode::UnsupportedFeature)?
        .udfs
        .clone();
    let set_id = match namespace.set_id(request.set.unwrap_or_default()) {
        Ok(id) => id,
        Err(SetError::TooMany) => return Err(ResultCode::OutOfSpace),
        Err(SetError::BadName) => return Err(ResultCode::Parameter),
    };
    let now_ms = now_citrusleaf_milliseconds();
    let now = u32::try_from(now_ms / 1000).unwrap_or(u32::MAX);
    let mut writer = namespace.write(digest);
    let existing = writer
        .table()
        .get(digest)
        .filter(|entry| !namespace.is_doomed(&entry.meta, now));
    let existing_meta = existing.map(|entry| entry.meta);
    let prior = write::prior_stamp(namespace, &writer, digest);
    let loaded = &mut scratch.loaded;
    let stored_bytes = match existing {
        Some(entry) => Some(crate::record_bytes(namespace, &entry, loaded)?),
        None => None,
    };
    let stored = match stored_bytes {
        Some(bytes) => Some(RecordView::parse(bytes).ok_or(ResultCode::Unknown)?),
        None => None,
    };
    if let (Some(meta), Some(view), Some(bytes)) = (existing_meta, stored, stored_bytes) {
        crate::check_filter(namespace, filter, digest, &meta, &view, bytes.len())?;
        crate::check_set(namespace, request, meta.set_id)?;
    }
    let request_key = request.key.map(|key| key.parts()).transpose()?;
    let stored_key = stored.and_then(|view| view.key);
    crate::check_key(request, stored_key)?;
    let set_id = existing_meta.map_or(set_id, |meta| meta.set_id);
    let info = record_info(
        namespace,
        digest,
        existing_meta,
        stored,
        stored_bytes.map_or(0, <[u8]>::len),
        request_key.or(stored_key),
        set_id,
        now,
    )?;
    let (result, outcome) = bolide_udf::apply_record(
        &sources,
        &call.module,
        &call.function,
        &call.args,
        info,
        time_limit(request.policy.timeout_ms),
    );
    let value = match result {
        Ok(value) => value,
        Err(UdfError(text)) => {
            drop(writer);
            reply.begin();
            reply.bin(
                op_type::READ,
                particle::STRING,
                FAILURE_BIN,
                text.as_bytes(),
            );
            reply.end(ResultCode::UdfExecution, 0, 0);
            return Ok(());
        }
    };
    let (mut generation, mut void_time) =
        existing_meta.map_or((0, 0), |meta| (meta.generation, meta.void_time));
    if outcome.updated {
        if outcome.bins.is_empty() {
            if existing_meta.is_none() {
                return Err(ResultCode::NotFound);
            }
            write::check_expunge(namespace, request.policy.durable_delete)?;
            let set_id = existing_meta.map_or(set_id, |meta| meta.set_id);
            write::delete_record(
                namespace,
                &mut writer,
                digest,
                set_id,
                prior,
                now_ms,
                scratch,
            )?;
            (generation, void_time) = (0, 0);
        } else {
            if namespace.is_stop_writes() {
                return Err(ResultCode::OutOfSpace);
            }
            let particles: Vec<(Vec<u8>, u8, Vec<u8>)> = outcome
                .bins
                .iter()
                .map(|(name, value)| {
                    let (particle_type, bytes) = value.to_particle();
                    (name.clone(), particle_type, bytes)
                })
                .filter(|(_, particle_type, _)| *particle_type != particle::NULL)
                .collect();
            if particles.len() > bolide_types::BINS_PER_RECORD_MAX {
                return Err(ResultCode::Parameter);
            }
            let key = if outcome.drop_key {
                None
            } else {
                request_key.or(stored_key)
            };
            scratch.record.clear();
            record::encode(
                &mut scratch.record,
                key,
                particles.iter().map(|(name, particle_type, value)| Bin {
                    name,
                    particle_type: *particle_type,
                    value,
                }),
            );
            if scratch.record.len() > namespace.config.max_record_size_bytes {
                return Err(ResultCode::RecordTooBig);
            }
            let record_ttl = outcome.ttl.unwrap_or(request.policy.ttl);
            void_time = ttl::void_time(
                &namespace.config,
                record_ttl,
                existing_meta.map(|meta| meta.void_time),
                now,
            )?;
            generation = write::generation_after(existing_meta, prior);
            let meta = RecordMeta {
                generation,
                void_time,
                last_update_ms: write::next_update_ms(namespace, set_id, prior, now_ms),
                set_id,
            };
            write::store_record(namespace, &mut writer, digest, meta, prior, scratch)?;
        }
    }
    drop(writer);
    let (particle_type, bytes) = value.to_particle();
    reply.begin();
    reply.bin(op_type::READ, particle_type, SUCCESS_BIN, &bytes);
    reply.end(ResultCode::Ok, generation, void_time);
    Ok(())
}

/// What a UDF sees of a record (or of a missing one).
#[allow(clippy::too_many_arguments)]
pub fn record_info(
    namespace: &Namespace,
    digest: &Digest,
    meta: Option<RecordMeta>,
    view: Option<RecordView<'_>>,
    stored_bytes: usize,
    key: Option<(u8, &[u8])>,
    set_id: u16,
    now: u32,
) -> Result<RecordInfo, ResultCode> {
    let mut bins = Vec::new();
    if let Some(view) = view {
        for bin in view.bins() {
            let value = Value::from_particle(bin.particle_type, bin.value)
                .map_err(|_| ResultCode::Unknown)?;
            bins.push((bin.name.to_vec(), value));
        }
    }
    let ttl = match meta {
        Some(meta) if meta.void_time == 0 => u32::MAX,
        Some(meta) => meta.void_time.saturating_sub(now),
        None => 0,
    };
    Ok(RecordInfo {
        exists: meta.is_some(),
        bins,
        generation: meta.map_or(0, |meta| meta.generation),
        ttl,
        last_update_ms: meta.map_or(0, |meta| {
            meta.last_update_ms + CITRUSLEAF_EPOCH_UNIX_SECONDS * 1000
        }),
        set_name: namespace.set_name(set_id).map(str::to_owned),
        digest: digest.0,
        key: key.and_then(|(key_type, bytes)| key_value(key_type, bytes)),
        stored_bytes,
    })
}

/// A stored user key as a UDF value.
fn key_value(key_type: u8, bytes: &[u8]) -> Option<Value> {
    match key_type {
        particle::INTEGER => Some(Value::Int(i64::from_be_bytes(bytes.try_into().ok()?))),
        particle::FLOAT => Some(Value::Float(f64::from_bits(u64::from_be_bytes(
            bytes.try_into().ok()?,
        )))),
        particle::STRING => Some(Value::Str(bytes.to_vec())),
        other => Some(Value::Bytes(other, bytes.to_vec())),
    }
}
