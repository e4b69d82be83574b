//! Reads: get (all bins, named bins), exists / header.

use crate::reply::Reply;
use crate::request::Request;
use bolide_particles::expression::{self, Expr};
use bolide_store::{Namespace, RecordView};
use bolide_types::{now_citrusleaf_seconds, Digest, ResultCode, BIN_NAME_BYTES_MAX};
use bolide_wire::op_type;

// PERF: hot path.
pub fn execute<R: Reply + ?Sized>(
    namespace: &Namespace,
    digest: &Digest,
    request: &Request<'_>,
    filter: Option<&Expr>,
    reply: &mut R,
    loaded: &mut Vec<u8>,
) -> Result<(), ResultCode> {
    let touch = answer(namespace, digest, request, filter, reply, loaded)?;
    if let Some(ttl) = touch {
        // After the read lock is released (read-touch-ttl-percent).
        crate::read_touch::touch(namespace, digest, ttl);
    }
    Ok(())
}

/// Answers the read; gives the TTL to touch the record with, if the read
/// asked for a touch and the record is due for one.
fn answer<R: Reply + ?Sized>(
    namespace: &Namespace,
    digest: &Digest,
    request: &Request<'_>,
    filter: Option<&Expr>,
    reply: &mut R,
    loaded: &mut Vec<u8>,
) -> Result<Option<u32>, ResultCode> {
    let policy = &request.policy;
    let metadata_only = policy.metadata_only || policy.read_all_bins;
    if !metadata_only && request.ops.is_empty() {
        return Err(ResultCode::Parameter);
    }
    // Validate the ops (and parse expression reads) before taking the lock.
    let mut exp_reads = Vec::new();
    for op in request.ops.iter() {
        if op.op_type == op_type::EXP_READ {
            exp_reads.push(expression::parse_op(op.value, false)?);
        } else if !matches!(
            op.op_type,
            op_type::READ | op_type::CDT_READ | op_type::BIT_READ | op_type::HLL_READ
        ) {
            return Err(if bolide_particles::ops::is_readable(op.op_type) {
                ResultCode::UnsupportedFeature
            } else {
                ResultCode::Parameter
            });
        }
        if op.name.len() > BIN_NAME_BYTES_MAX {
            return Err(ResultCode::BinName);
        }
    }
    let table = namespace.read(digest);
    let now = now_citrusleaf_seconds();
    let entry = table
        .get(digest)
        .filter(|entry| !namespace.is_doomed(&entry.meta, now));
    let Some(entry) = entry else {
        return Err(ResultCode::NotFound);
    };
    crate::check_set(namespace, request, entry.meta.set_id)?;
    let touch = crate::read_touch::due(&entry.meta, policy.ttl, now)?;
    let (generation, void_time) = (entry.meta.generation, entry.meta.void_time);
    if policy.metadata_only && filter.is_none() && request.key.is_none() {
        // Exists / header: the index answers; with the data on the device
        // there is nothing to read.
        reply.begin();
        reply.end(ResultCode::Ok, generation, void_time);
        return Ok(touch);
    }
    let bytes = crate::record_bytes(namespace, &entry, loaded)?;
    let record = RecordView::parse(bytes).ok_or(ResultCode::Unknown)?;
    crate::check_key(request, record.key)?;
    crate::check_filter(namespace, filter, digest, &entry.meta, &record, bytes.len())?;
    reply.begin();
    let read_all = policy.read_all_bins || request.ops.iter().any(|op| op.name.is_empty());
    if policy.metadata_only {
        // Metadata only.
    } else if read_all {
        for bin in record.bins() {
            reply.bin(op_type::READ, bin.particle_type, bin.name, bin.value);
        }
    } else {
        let respond_all = policy.respond_all_ops;
        let mut exp_reads = exp_reads.iter();
        for op in request.ops.iter() {
            if op.op_type == op_type::EXP_READ {
                let Some(exp) = exp_reads.next() else {
                    return Err(ResultCode::Parameter);
                };
                let stored = crate::record::Stored {
                    record: &record,
                    digest,
                    meta: &entry.meta,
                    set_name: namespace.set_name(entry.meta.set_id),
                    record_bytes: bytes.len(),
                };
                let now_ms = bolide_types::now_citrusleaf_milliseconds();
                match expression::evaluate(&exp.expr, &stored, now_ms).read_answer(exp.flags)? {
                    Some((particle_type, value)) => {
                        reply.bin(op_type::READ, particle_type, op.name, &value)
                    }
                    None if respond_all => reply.bin(op_type::READ, 0, op.name, &[]),
                    None => {}
                }
                continue;
            }
            if matches!(op.op_type, op_type::BIT_READ | op_type::HLL_READ) {
                let bin = record
                    .bin(op.name)
                    .map(|bin| (bin.particle_type, bin.value));
                match bolide_particles::particle_ops::read(&op, bin)? {
                    Some((particle_type, value)) => {
                        reply.bin(op_type::READ, particle_type, op.name, &value)
                    }
                    None if respond_all => reply.bin(op_type::READ, 0, op.name, &[]),
                    None => {}
                }
                continue;
            }
            if op.op_type == op_type::CDT_READ {
                let current = record
                    .bin(op.name)
                    .map(|bin| (bin.particle_type, bin.value));
                let outcome = bolide_particles::cdt::execute(current, op.value, false)?;
                match outcome.result {
                    Some((particle_type, value)) => {
                        reply.bin(op_type::CDT_READ, particle_type, op.name, &value)
                    }
                    None if respond_all => reply.bin(op_type::CDT_READ, 0, op.name, &[]),
                    None => {}
                }
                continue;
            }
            match record.bin(op.name) {
                Some(bin) => reply.bin(op_type::READ, bin.particle_type, bin.name, bin.value),
                None if respond_all => reply.bin(op_type::READ, 0, op.name, &[]),
                None => {}
            }
        }
    }
    reply.end(ResultCode::Ok, generation, void_time);
    Ok(touch)
}
