//! Writes: put (with exists and generation policies), delete, touch and
//! operate, all under the partition's write lock.

use crate::reply::Reply;
use crate::request::{Policy, Request};
use crate::{ttl, Scratch};
use bolide_particles::expression::{self, op_flag, Evaluated, Expr};
use bolide_particles::ops::{self, set_bin, WorkBin};
use bolide_store::record::{self, RecordView};
use bolide_store::{
    AppendError, Bin, Namespace, OwnedCopy, PartitionWriter, RecordMeta, SetError, Tombstone,
};
use bolide_types::{now_citrusleaf_milliseconds, particle, Digest, ResultCode};
use bolide_types::{BINS_PER_RECORD_MAX, BIN_NAME_BYTES_MAX};
use bolide_wire::{op_type, Op};
use std::borrow::Cow;

pub fn execute<'a, R: Reply + ?Sized>(
    namespace: &Namespace,
    digest: &Digest,
    request: &Request<'a>,
    filter: Option<&Expr>,
    reply: &mut R,
    scratch: &mut Scratch,
) -> Result<(), ResultCode> {
    let policy = &request.policy;
    if policy.delete {
        check_delete_kind(namespace, policy.durable_delete)?;
    }
    validate_ops(request)?;
    let set_id = match namespace.set_id(request.set.unwrap_or_default()) {
        Ok(id) => id,
        Err(SetError::TooMany) => return Err(ResultCode::OutOfSpace),
        Err(SetError::BadName) => return Err(ResultCode::Parameter),
    };
    // One clock read per write: void times in seconds, last-update in ms.
    let now_ms = now_citrusleaf_milliseconds();
    let now = u32::try_from(now_ms / 1000).unwrap_or(u32::MAX);
    let mut writer = namespace.write(digest);
    let existing = writer
        .table()
        .get(digest)
        .filter(|entry| !namespace.is_doomed(&entry.meta, now));
    let existing_meta = existing.map(|entry| entry.meta);
    // What the write must come after: the record as held (even if expired
    // or truncated) or, in a replicated namespace, its tombstone. Copies
    // elsewhere are ordered by generation and last-update time, so both
    // move forward from it.
    let prior = prior_stamp(namespace, &writer, digest);
    if !policy.delete {
        // As on the server, whether the record may exist (create-only,
        // update-only) is decided before its generation: a restore with
        // --unique counts an existing record as existing, whatever its
        // generation.
        check_exists_policy(policy, existing_meta.is_some())?;
    }
    if !policy.delete || existing_meta.is_some() {
        check_generation(policy, existing_meta)?;
    }
    // The stored record is read (from the device, if that is where it is)
    // unless this is a delete without a filter. A replace keeps only the
    // stored key, so it goes ahead without it if the stored copy cannot be
    // read back: that is how a client clears a damaged record.
    let replace = policy.replaces();
    let delete = policy.delete;
    let loaded = &mut scratch.loaded;
    let stored_bytes = match existing {
        Some(_) if delete && filter.is_none() => None,
        Some(entry) => match crate::record_bytes(namespace, &entry, loaded) {
            Ok(bytes) => Some(bytes),
            Err(_) if replace && filter.is_none() => None,
            Err(code) => return Err(code),
        },
        None => None,
    };
    if let (Some(entry), Some(bytes), Some(_)) = (existing, stored_bytes, filter) {
        // Filters apply to records that exist; a new record is written.
        let view = RecordView::parse(bytes).ok_or(ResultCode::Unknown)?;
        crate::check_filter(namespace, filter, digest, &entry.meta, &view, bytes.len())?;
    }

    if delete {
        if existing_meta.is_none() {
            // An expired record still in the index is removed too (with a
            // tombstone, so no older version returns at a cold start).
            writer.remove_durably(digest);
            return Err(ResultCode::NotFound);
        }
        let set_id = existing_meta.map_or(0, |meta| meta.set_id);
        delete_record(
            namespace,
            &mut writer,
            digest,
            set_id,
            prior,
            now_ms,
            scratch,
        )?;
        reply.begin();
        reply.end(ResultCode::Ok, 0, 0);
        return Ok(());
    }
    if namespace.is_stop_writes() {
        return Err(ResultCode::OutOfSpace);
    }
    check_exists_policy(policy, existing_meta.is_some())?;
    let stored = match stored_bytes {
        Some(bytes) => Some(RecordView::parse(bytes).ok_or(ResultCode::Unknown)?),
        None => None,
    };
    if let Some(meta) = existing_meta {
        crate::check_set(namespace, request, meta.set_id)?;
    }
    let request_key = request.key.map(|key| key.parts()).transpose()?;
    let stored_key = stored.and_then(|view| view.key);
    crate::check_key(request, stored_key)?;

    let mut bins: Vec<WorkBin<'_>> = match stored {
        Some(view) if !replace => view
            .bins()
            .map(|bin| WorkBin {
                name: bin.name,
                particle_type: bin.particle_type,
                value: Cow::Borrowed(bin.value),
            })
            .collect(),
        _ => Vec::new(),
    };
    let respond_all = policy.respond_all_ops;
    let context = Context {
        digest,
        meta: existing_meta.unwrap_or_default(),
        set_name: namespace.set_name(existing_meta.map_or(set_id, |meta| meta.set_id)),
        key: request_key.or(stored_key),
        record_bytes: stored_bytes.map_or(0, <[u8]>::len),
        now_ms,
        read_all: policy.read_all_bins,
    };
    // Op results go straight into the answer; a failure drops them.
    reply.begin();
    let mut touch = false;
    let mut positions = BinPositions::default();
    for op in request.ops.iter() {
        touch |= op.op_type == op_type::TOUCH;
        let position = positions.find(&bins, op.name);
        let len_before = bins.len();
        apply(&mut bins, position, op, respond_all, &context, reply)?;
        positions.after(&bins, len_before, position);
    }
    if touch && existing_meta.is_none() {
        return Err(ResultCode::NotFound);
    }
    if bins.len() > BINS_PER_RECORD_MAX {
        return Err(ResultCode::Parameter);
    }
    let void_time = ttl::void_time(
        &namespace.config,
        policy.ttl,
        existing_meta.map(|m| m.void_time),
        now,
    )?;
    let key = request_key.or(stored_key);
    scratch.record.clear();
    let bin_views = bins.iter().map(|b| Bin {
        name: b.name,
        particle_type: b.particle_type,
        value: &b.value,
    });
    record::encode(&mut scratch.record, key, bin_views);
    if scratch.record.len() > namespace.config.max_record_size_bytes {
        return Err(ResultCode::RecordTooBig);
    }

    let (generation, void_time) = if bins.is_empty() {
        // No bins left: the write deletes the record, or, if there was no
        // record, there is nothing to write (as the real server answers).
        if existing_meta.is_none() {
            return Err(ResultCode::NotFound);
        }
        check_expunge(namespace, policy.durable_delete)?;
        drop(bins);
        let set_id = existing_meta.map_or(set_id, |meta| meta.set_id);
        delete_record(
            namespace,
            &mut writer,
            digest,
            set_id,
            prior,
            now_ms,
            scratch,
        )?;
        (0, 0)
    } else {
        drop(bins);
        // A record written again after its delete continues from the
        // tombstone, so every copy orders the two.
        let generation = generation_after(existing_meta, prior);
        // A record keeps its set even when a request omits the set field.
        let set_id = existing_meta.map_or(set_id, |meta| meta.set_id);
        let meta = RecordMeta {
            generation,
            void_time,
            last_update_ms: next_update_ms(namespace, set_id, prior, now_ms),
            set_id,
        };
        store_record(namespace, &mut writer, digest, meta, prior, scratch)?;
        (generation, void_time)
    };
    drop(writer);
    reply.end(ResultCode::Ok, generation, void_time);
    Ok(())
}

/// Stores `scratch.record` under `meta`: forgets a tombstone it replaces,
/// and leaves the record's image for the other holders when asked to.
pub(crate) fn store_record(
    namespace: &Namespace,
    writer: &mut PartitionWriter<'_>,
    digest: &Digest,
    meta: RecordMeta,
    prior: Option<Prior>,
    scratch: &mut Scratch,
) -> Result<(), ResultCode> {
    let wait = writer
        .put(digest, meta, &scratch.record)
        .map_err(storage_error)?;
    if prior.is_some_and(|p| p.tombstone) {
        writer.clear_tombstone(digest);
    }
    scratch.add_commit_wait(wait);
    if scratch.capture {
        scratch.copy = Some(OwnedCopy {
            digest: *digest,
            generation: meta.generation,
            last_update_ms: meta.last_update_ms,
            void_time: meta.void_time,
            set_name: namespace
                .set_name(meta.set_id)
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
            record: Some(scratch.record.clone()),
        });
    }
    Ok(())
}

/// The generation of a new version over `existing` (a live record) or,
/// failing that, over the record's tombstone.
pub(crate) fn generation_after(existing: Option<RecordMeta>, prior: Option<Prior>) -> u16 {
    match existing {
        Some(meta) => next_generation(meta.generation),
        None => prior
            .filter(|p| p.tombstone)
            .map_or(1, |p| next_generation(p.generation)),
    }
}

/// The generation and last-update time a write must follow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prior {
    generation: u16,
    last_update_ms: u64,
    tombstone: bool,
}

pub(crate) fn prior_stamp(
    namespace: &Namespace,
    writer: &PartitionWriter<'_>,
    digest: &Digest,
) -> Option<Prior> {
    if let Some(entry) = writer.table().get(digest) {
        return Some(Prior {
            generation: entry.meta.generation,
            last_update_ms: entry.meta.last_update_ms,
            tombstone: false,
        });
    }
    if !namespace.keeps_tombstones() {
        return None;
    }
    writer.tombstone(digest).map(|t| Prior {
        generation: t.generation,
        last_update_ms: t.last_update_ms,
        tombstone: true,
    })
}

fn next_generation(generation: u16) -> u16 {
    if generation == u16::MAX {
        1
    } else {
        generation + 1
    }
}

/// The clock (after any truncation point), and always after the prior
/// version, so that two writes of one record are ordered the same way on
/// every copy even within one millisecond.
pub(crate) fn next_update_ms(
    namespace: &Namespace,
    set_id: u16,
    prior: Option<Prior>,
    now_ms: u64,
) -> u64 {
    let stamp = namespace.update_stamp_ms(set_id, now_ms);
    match prior {
        Some(prior) => stamp.max(prior.last_update_ms + 1),
        None => stamp,
    }
}

/// Deletes a present record: in a replicated namespace it leaves a
/// tombstone one generation on (and the copy for the other holders).
/// Which deletes a namespace takes. Strong consistency keeps a tombstone
/// for every delete and refuses one that asks for none (an expunge: 22)
/// unless `strong-consistency-allow-expunge` is set; AP refuses durable
/// deletes (25, as Aerospike CE does).
pub(crate) fn check_delete_kind(namespace: &Namespace, durable: bool) -> Result<(), ResultCode> {
    if namespace.config.strong_consistency {
        return check_expunge(namespace, durable);
    }
    if durable {
        return Err(ResultCode::EnterpriseOnly);
    }
    Ok(())
}

/// (SC) A write that deletes its record some other way than a delete (an
/// operate's delete op or last bin removed, a record UDF's
/// `aerospike:remove`) is an expunge unless the client asked for a
/// durable delete: refused (22) unless `strong-consistency-allow-expunge`.
pub(crate) fn check_expunge(namespace: &Namespace, durable: bool) -> Result<(), ResultCode> {
    let config = &namespace.config;
    if config.strong_consistency && !durable && !config.strong_consistency_allow_expunge {
        return Err(ResultCode::Forbidden);
    }
    Ok(())
}

pub(crate) fn delete_record(
    namespace: &Namespace,
    writer: &mut PartitionWriter<'_>,
    digest: &Digest,
    set_id: u16,
    prior: Option<Prior>,
    now_ms: u64,
    scratch: &mut Scratch,
) -> Result<(), ResultCode> {
    if !namespace.keeps_tombstones() {
        let (_, wait) = writer.delete(digest).map_err(storage_error)?;
        scratch.add_commit_wait(wait);
        return Ok(());
    }
    let tombstone = Tombstone {
        generation: prior.map_or(1, |p| next_generation(p.generation)),
        last_update_ms: next_update_ms(namespace, set_id, prior, now_ms),
        set_id,
    };
    let (_, wait) = writer
        .delete_keeping_tombstone(digest, tombstone)
        .map_err(storage_error)?;
    scratch.add_commit_wait(wait);
    if scratch.capture {
        scratch.copy = Some(OwnedCopy {
            digest: *digest,
            generation: tombstone.generation,
            last_update_ms: tombstone.last_update_ms,
            void_time: 0,
            set_name: namespace
                .set_name(set_id)
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
            record: None,
        });
    }
    Ok(())
}

/// Checks op types, bin names and flag combinations before the lock is taken.
fn validate_ops(request: &Request<'_>) -> Result<(), ResultCode> {
    let policy = &request.policy;
    let replace = policy.replaces();
    let mut count = 0usize;
    for op in request.ops.iter() {
        count += 1;
        match op.op_type {
            op_type::READ | op_type::EXP_READ => {
                if !policy.read {
                    return Err(ResultCode::Parameter);
                }
                if op.name.len() > BIN_NAME_BYTES_MAX {
                    return Err(ResultCode::BinName);
                }
            }
            op_type::WRITE | op_type::INCR | op_type::APPEND | op_type::PREPEND => {
                if op.name.is_empty() || op.name.len() > BIN_NAME_BYTES_MAX {
                    return Err(ResultCode::BinName);
                }
                let deletes_bin =
                    op.op_type == op_type::WRITE && op.particle_type == particle::NULL;
                if replace && (op.op_type != op_type::WRITE || deletes_bin) {
                    return Err(ResultCode::Parameter);
                }
            }
            op_type::CDT_READ
            | op_type::CDT_MODIFY
            | op_type::EXP_MODIFY
            | op_type::BIT_READ
            | op_type::BIT_MODIFY
            | op_type::HLL_READ
            | op_type::HLL_MODIFY => {
                if op.name.is_empty() || op.name.len() > BIN_NAME_BYTES_MAX {
                    return Err(ResultCode::BinName);
                }
                if replace
                    && !matches!(
                        op.op_type,
                        op_type::CDT_READ | op_type::BIT_READ | op_type::HLL_READ
                    )
                {
                    return Err(ResultCode::Parameter);
                }
            }
            op_type::TOUCH | op_type::DELETE => {
                if replace {
                    return Err(ResultCode::Parameter);
                }
            }
            other if ops::is_known(other) => return Err(ResultCode::UnsupportedFeature),
            _ => return Err(ResultCode::Parameter),
        }
    }
    if count == 0 && !policy.delete {
        return Err(ResultCode::Parameter);
    }
    Ok(())
}

/// Generation policies; a missing record counts as generation 0, as on the
/// real server (so "expect generation 1" on a missing record fails).
fn check_generation(policy: &Policy, existing: Option<RecordMeta>) -> Result<(), ResultCode> {
    let current = existing.map_or(0, |meta| u32::from(meta.generation));
    if policy.generation_equal && policy.generation != current {
        return Err(ResultCode::Generation);
    }
    if policy.generation_greater && policy.generation <= current {
        return Err(ResultCode::Generation);
    }
    Ok(())
}

fn check_exists_policy(policy: &Policy, exists: bool) -> Result<(), ResultCode> {
    if exists && policy.create_only {
        return Err(ResultCode::RecordExists);
    }
    if !exists && (policy.update_only || policy.replace_only) {
        return Err(ResultCode::NotFound);
    }
    Ok(())
}

/// What an expression op may read besides the bins: the record as it was
/// before this request.
struct Context<'c> {
    digest: &'c Digest,
    meta: RecordMeta,
    set_name: Option<&'c str>,
    key: Option<(u8, &'c [u8])>,
    record_bytes: usize,
    now_ms: u64,
    /// The request asks for all bins (GET_ALL): a read op without a bin
    /// name reads them all. Without it, such an op names no bin and reads
    /// nothing (a header read next to a touch, say).
    read_all: bool,
}

impl Context<'_> {
    /// Evaluates an expression against the working bins (see
    /// [`expression::evaluate`]).
    fn evaluate(&self, expr: &Expr, bins: &[WorkBin<'_>]) -> Evaluated {
        let working = crate::record::Working {
            bins,
            digest: self.digest,
            meta: self.meta,
            key: self.key,
            set_name: self.set_name,
            record_bytes: self.record_bytes,
        };
        expression::evaluate(expr, &working, self.now_ms)
    }
}

/// Where each bin of the working copy is, by name. A record has few bins
/// as a rule and a scan of them is fastest; a request that writes
/// thousands of bins (up to 32,767) would make that scan quadratic, so past
/// [`BinPositions::SCAN_MAX`] bins the names go into a map, kept up to date
/// when an op appends a bin and rebuilt when one removes a bin.
#[derive(Default)]
struct BinPositions<'a> {
    map: Option<std::collections::HashMap<&'a [u8], usize>>,
}

impl<'a> BinPositions<'a> {
    const SCAN_MAX: usize = 32;

    /// The index of the bin named `name`, if the working copy has one.
    fn find(&mut self, bins: &[WorkBin<'a>], name: &[u8]) -> Option<usize> {
        if bins.len() <= Self::SCAN_MAX && self.map.is_none() {
            return bins.iter().position(|bin| bin.name == name);
        }
        let map = self.map.get_or_insert_with(|| {
            bins.iter()
                .enumerate()
                .map(|(index, bin)| (bin.name, index))
                .collect()
        });
        map.get(name).copied()
    }

    /// After an op that found the bin at `position` when there were
    /// `len_before` bins: an appended bin joins the map; any other change
    /// of length (a removed bin shifts those after it) drops the map.
    fn after(&mut self, bins: &[WorkBin<'a>], len_before: usize, position: Option<usize>) {
        let Some(map) = self.map.as_mut() else {
            return;
        };
        if bins.len() == len_before {
            return;
        }
        match bins.last() {
            Some(last) if position.is_none() && bins.len() == len_before + 1 => {
                map.insert(last.name, bins.len() - 1);
            }
            _ => self.map = None,
        }
    }
}

/// Applies one op to the working bins, appending its result (if any);
/// `position` is the index of the bin the op names, if there is one.
fn apply<'a, R: Reply + ?Sized>(
    bins: &mut Vec<WorkBin<'a>>,
    position: Option<usize>,
    op: Op<'a>,
    respond_all: bool,
    context: &Context<'_>,
    reply: &mut R,
) -> Result<(), ResultCode> {
    match op.op_type {
        op_type::EXP_READ => {
            let exp = expression::parse_op(op.value, false)?;
            match context.evaluate(&exp.expr, bins).read_answer(exp.flags)? {
                Some((particle_type, value)) => {
                    reply.bin(op_type::READ, particle_type, op.name, &value)
                }
                None if respond_all => reply.bin(op_type::READ, particle::NULL, op.name, &[]),
                None => return Ok(()),
            }
            return Ok(());
        }
        op_type::EXP_MODIFY => exp_modify(bins, position, &op, context)?,
        op_type::READ => {
            if op.name.is_empty() && context.read_all {
                for bin in bins.iter() {
                    reply.bin(op_type::READ, bin.particle_type, bin.name, &bin.value);
                }
                return Ok(());
            }
            match position.and_then(|i| bins.get(i)) {
                Some(bin) => reply.bin(op_type::READ, bin.particle_type, bin.name, &bin.value),
                None if respond_all => reply.bin(op_type::READ, particle::NULL, op.name, &[]),
                None => return Ok(()),
            }
            return Ok(());
        }
        op_type::WRITE if op.particle_type == particle::NULL => {
            if let Some(i) = position {
                bins.remove(i);
            }
        }
        op_type::WRITE => {
            let value = ops::stored_value(op.particle_type, op.value)?;
            set_bin(bins, position, op.name, op.particle_type, value);
        }
        op_type::INCR => {
            let (particle_type, value) = ops::increment(
                position.and_then(|i| bins.get(i)),
                op.particle_type,
                op.value,
            )?;
            set_bin(bins, position, op.name, particle_type, Cow::Owned(value));
        }
        op_type::APPEND | op_type::PREPEND => {
            let current = position.and_then(|i| bins.get(i));
            let (particle_type, value) =
                ops::concatenate(current, op.op_type, op.particle_type, op.value)?;
            set_bin(bins, position, op.name, particle_type, Cow::Owned(value));
        }
        op_type::CDT_READ | op_type::CDT_MODIFY => {
            let modify = op.op_type == op_type::CDT_MODIFY;
            let current = position
                .and_then(|i| bins.get(i))
                .map(|bin| (bin.particle_type, bin.value.as_ref()));
            let outcome = bolide_particles::cdt::execute(current, op.value, modify)?;
            if let Some((particle_type, value)) = outcome.bin {
                set_bin(bins, position, op.name, particle_type, Cow::Owned(value));
            }
            match outcome.result {
                Some((particle_type, value)) => {
                    reply.bin(op.op_type, particle_type, op.name, &value)
                }
                None if respond_all => reply.bin(op.op_type, particle::NULL, op.name, &[]),
                None => return Ok(()),
            }
            return Ok(());
        }
        op_type::BIT_READ | op_type::BIT_MODIFY | op_type::HLL_READ | op_type::HLL_MODIFY => {
            match bolide_particles::particle_ops::apply(bins, position, &op)? {
                Some((particle_type, value)) => {
                    reply.bin(op_type::READ, particle_type, op.name, &value)
                }
                None if respond_all => reply.bin(op_type::READ, particle::NULL, op.name, &[]),
                None => return Ok(()),
            }
            return Ok(());
        }
        op_type::DELETE => bins.clear(),
        // A touch never has an answer entry, even with respond-all-ops.
        op_type::TOUCH => return Ok(()),
        _ => return Err(ResultCode::Parameter),
    }
    if respond_all {
        reply.bin(op.op_type, particle::NULL, op.name, &[]);
    }
    Ok(())
}

/// EXP_MODIFY: writes what the expression evaluates to into the op's bin,
/// under the op's flags (as the real server applies them).
fn exp_modify<'a>(
    bins: &mut Vec<WorkBin<'a>>,
    position: Option<usize>,
    op: &Op<'a>,
    context: &Context<'_>,
) -> Result<(), ResultCode> {
    let exp = expression::parse_op(op.value, true)?;
    let flags = exp.flags;
    let no_fail = flags & op_flag::POLICY_NO_FAIL != 0;
    let live = position.is_some();
    if live && flags & op_flag::CREATE_ONLY != 0 {
        return if no_fail {
            Ok(())
        } else {
            Err(ResultCode::BinExists)
        };
    }
    if !live && flags & op_flag::UPDATE_ONLY != 0 {
        return if no_fail {
            Ok(())
        } else {
            Err(ResultCode::BinNotFound)
        };
    }
    match context.evaluate(&exp.expr, bins) {
        Evaluated::Unknown if flags & op_flag::EVAL_NO_FAIL != 0 => Ok(()),
        Evaluated::Unknown => Err(ResultCode::OpNotApplicable),
        Evaluated::Nil => match position {
            Some(i) if flags & op_flag::ALLOW_DELETE != 0 => {
                bins.remove(i);
                Ok(())
            }
            // The real server lets any flag excuse a nil result here (its
            // check reads `flags && POLICY_NO_FAIL`); so does Bolide.
            Some(_) if flags != 0 => Ok(()),
            Some(_) => Err(ResultCode::OpNotApplicable),
            None => Ok(()),
        },
        Evaluated::Value(particle_type, value) => {
            set_bin(bins, position, op.name, particle_type, Cow::Owned(value));
            Ok(())
        }
    }
}

/// The result code of a refused storage append.
pub(crate) fn storage_error(error: AppendError) -> ResultCode {
    match error {
        AppendError::OutOfSpace => ResultCode::OutOfSpace,
        AppendError::Overload | AppendError::Failing => ResultCode::DeviceOverload,
        AppendError::DeviceFull => ResultCode::OutOfSpace,
        AppendError::TooBig => ResultCode::RecordTooBig,
        AppendError::Failed => ResultCode::Unknown,
    }
}
