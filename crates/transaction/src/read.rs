//! Reads: get (all bins, named bins), exists / header.

use bolide_particles::expression::{self, Expr};
use bolide_store::{Namespace, RecordView};
use bolide_types::{now_citrusleaf_seconds, Digest, ResultCode, BIN_NAME_BYTES_MAX};
use bolide_wire::message::MsgHeader;
use bolide_wire::{info1, info2, op_type, Framing, Message, ResponseWriter};

// PERF: hot path.
pub fn execute(
    namespace: &Namespace,
    digest: &Digest,
    message: &Message<'_>,
    filter: Option<&Expr>,
    out: &mut Vec<u8>,
    loaded: &mut Vec<u8>,
    framing: Framing,
) -> Result<(), ResultCode> {
    let touch = answer(namespace, digest, message, filter, out, loaded, framing)?;
    if let Some(ttl) = touch {
        // After the read lock is released (read-touch-ttl-percent).
        crate::read_touch::touch(namespace, digest, ttl);
    }
    Ok(())
}

/// Answers the read; gives the TTL to touch the record with, if the read
/// asked for a touch and the record is due for one.
fn answer(
    namespace: &Namespace,
    digest: &Digest,
    message: &Message<'_>,
    filter: Option<&Expr>,
    out: &mut Vec<u8>,
    loaded: &mut Vec<u8>,
    framing: Framing,
) -> Result<Option<u32>, ResultCode> {
    let header = &message.header;
    let metadata_only = header.info1 & (info1::NO_BIN_DATA | info1::GET_ALL) != 0;
    if header.n_ops == 0 && !metadata_only {
        return Err(ResultCode::Parameter);
    }
    // Validate the ops (and parse expression reads) before taking the lock.
    let mut exp_reads = Vec::new();
    for op in message.ops() {
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
    crate::check_set(namespace, message, entry.meta.set_id)?;
    let touch = crate::read_touch::due(&entry.meta, header.record_ttl, now)?;
    let response = MsgHeader {
        generation: u32::from(entry.meta.generation),
        record_ttl: entry.meta.void_time,
        ..MsgHeader::default()
    };
    if header.info1 & info1::NO_BIN_DATA != 0 && filter.is_none() && message.fields.key.is_none() {
        // Exists / header: the index answers; with the data on the device
        // there is nothing to read.
        ResponseWriter::begin_framed(out, &response, framing).finish();
        return Ok(touch);
    }
    let bytes = crate::record_bytes(namespace, &entry, loaded)?;
    let record = RecordView::parse(bytes).ok_or(ResultCode::Unknown)?;
    crate::check_key(message, record.key)?;
    crate::check_filter(namespace, filter, digest, &entry.meta, &record, bytes.len())?;
    let mut writer = ResponseWriter::begin_framed(out, &response, framing);
    let read_all = header.info1 & info1::GET_ALL != 0 || message.ops().any(|op| op.name.is_empty());
    if header.info1 & info1::NO_BIN_DATA != 0 {
        // Metadata only.
    } else if read_all {
        for bin in record.bins() {
            writer.op(op_type::READ, bin.particle_type, bin.name, bin.value);
        }
    } else {
        let respond_all = header.info2 & info2::RESPOND_ALL_OPS != 0;
        let mut exp_reads = exp_reads.iter();
        for op in message.ops() {
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
                        writer.op(op_type::READ, particle_type, op.name, &value)
                    }
                    None if respond_all => writer.op(op_type::READ, 0, op.name, &[]),
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
                        writer.op(op_type::READ, particle_type, op.name, &value)
                    }
                    None if respond_all => writer.op(op_type::READ, 0, op.name, &[]),
                    None => {}
                }
                continue;
            }
            if op.op_type == op_type::CDT_READ {
                let current = record
                    .bin(op.name)
                    .map(|bin| (bin.particle_type, bin.value));
                match bolide_particles::cdt::execute(current, op.value, false) {
                    Ok(outcome) => match outcome.result {
                        Some((particle_type, value)) => {
                            writer.op(op_type::CDT_READ, particle_type, op.name, &value)
                        }
                        None if respond_all => writer.op(op_type::CDT_READ, 0, op.name, &[]),
                        None => {}
                    },
                    Err(code) => {
                        return Err(code);
                    }
                }
                continue;
            }
            match record.bin(op.name) {
                Some(bin) => writer.op(op_type::READ, bin.particle_type, bin.name, bin.value),
                None if respond_all => writer.op(op_type::READ, 0, op.name, &[]),
                None => {}
            }
        }
    }
    writer.finish();
    Ok(touch)
}
