//! Secondary-index query planning: which index a query names (INDEX_NAME,
//! or bin, value type, INDEX_TYPE and INDEX_CONTEXT), the bval ranges its
//! filter (INDEX_RANGE) covers, where each partition resumes (DIGEST_ARRAY
//! with BVAL_ARRAY), and the exact check each candidate record must pass.
//!
//! The scan job runs queries: the partition list, the pacing, the record
//! answers and the end of the stream are the scan's; a query changes where
//! records come from and in which order, and adds a BVAL field to each
//! record, which the clients keep as their resume point.
//!
//! The index keeps its entries in [`SHARDS`] ordered sets of 512
//! consecutive partitions each. A query walks each shard that holds a
//! partition it reads, once per bval range, a window of at most
//! [`WINDOW_ENTRIES`] matching entries at a time, keeping the entries of
//! the partitions it reads that lie after each one's resume point; it hands
//! them to the scan grouped by partition, each partition's in (bval,
//! digest) order, so that whatever a page ends on, every partition resumes
//! after the last record it sent. Records of one shard come in the order of
//! their entries, those of different partitions interleaved.
//!
//! Field formats and checks follow the server's `query.c`.

use crate::sindex::cells;
use crate::sindex::definition::{Collection, KeyType};
use crate::sindex::index::{shard_of, Entry, PARTITIONS_PER_SHARD, SHARDS};
use crate::sindex::keys::{self, Value};
use crate::sindex::SecondaryIndex;
use bolide_particles::geo::Shape;
use bolide_store::{Namespace, RecordMeta, RecordView};
use bolide_types::{
    particle, Digest, ResultCode, BIN_NAME_BYTES_MAX, DIGEST_BYTES, PARTITION_COUNT,
};
use bolide_wire::Message;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A shard's partitions fill whole words of a partition bitmap.
const _: () = assert!(PARTITIONS_PER_SHARD.is_multiple_of(64));

/// Matching entries a query collects from a shard at a time (the memory a
/// query holds is bounded by this, whatever it matches).
pub const WINDOW_ENTRIES: usize = 16_384;
/// Entries a window looks at most under the shard's read lock (a query of
/// a few partitions passes over the other partitions' entries).
const WINDOW_VISITS: usize = 65_536;

/// Longest GeoJSON region a query may carry (the server's limit).
const GEOJSON_BYTES_MAX: usize = 1024 * 1024;

/// What a query's filter asks for.
#[derive(Clone, Debug)]
enum Filter {
    /// Integers in start..=end.
    Range { start: i64, end: i64 },
    /// A string equal to this.
    Str(Vec<u8>),
    /// A blob equal to this.
    Blob(Vec<u8>),
    /// Points inside this region.
    Within(Shape),
    /// Regions containing this point.
    Contains(Shape),
}

/// A planned secondary-index query.
pub struct IndexQuery {
    pub index: Arc<SecondaryIndex>,
    filter: Filter,
    key_type: KeyType,
    /// Sorted, disjoint bval ranges to read.
    ranges: Vec<(i64, i64)>,
    /// The bval of each partition's resume digest.
    resume_bvals: HashMap<u16, i64>,
    /// A record may have several matching entries (a collection index
    /// read over a range): send it once per partition.
    dedup: bool,
    /// Matching entries a window collects at most, and entries it looks
    /// at at most ([`WINDOW_ENTRIES`], [`WINDOW_VISITS`] unless
    /// [`IndexQuery::set_window`] says otherwise).
    window_entries: usize,
    window_visits: usize,
    cursor: Cursor,
}

/// What a query hands the scan next.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Candidates of this partition, in (bval, digest) order, are in the
    /// caller's buffer: each entry's bval and its record's digest. A
    /// partition may come several times (once per window that holds
    /// entries of it).
    Candidates(u16),
    /// Every entry of a shard has been handed out: this many of the
    /// partitions read are done.
    ShardDone(usize),
}

/// Where a query is in its walk of the shards.
struct Cursor {
    /// Partitions read, one bit each.
    wanted: [u64; PARTITION_COUNT / 64],
    /// Partitions resuming strictly after an entry.
    resume: HashMap<u16, Entry>,
    /// Per shard: partitions read, how many of them resume, and the lowest
    /// resume point among them.
    shard_wanted: [u16; SHARDS],
    shard_resumed: [u16; SHARDS],
    shard_lowest: [Option<Entry>; SHARDS],
    shard: usize,
    /// The bval range being walked in the shard.
    range: usize,
    /// Where the walk of the range continues (included); None: from the
    /// range's start.
    at: Option<Entry>,
    /// The window's entries as walked (partition, entry), then grouped by
    /// partition in `grouped`, the groups' partitions and ends in `groups`,
    /// handed out from `group` on.
    window: Vec<(u16, Entry)>,
    grouped: Vec<Entry>,
    groups: Vec<(u16, usize)>,
    group: usize,
    /// Records sent from the current shard, kept once a shard needs more
    /// than one window (or a record may match more than one entry), so
    /// that no record is sent twice.
    sent: Option<HashSet<[u8; DIGEST_BYTES]>>,
}

impl Default for Cursor {
    fn default() -> Cursor {
        Cursor {
            wanted: [0; PARTITION_COUNT / 64],
            resume: HashMap::new(),
            shard_wanted: [0; SHARDS],
            shard_resumed: [0; SHARDS],
            shard_lowest: [None; SHARDS],
            shard: 0,
            range: 0,
            at: None,
            window: Vec::new(),
            grouped: Vec::new(),
            groups: Vec::new(),
            group: 0,
            sent: None,
        }
    }
}

impl Cursor {
    #[inline]
    fn wants(&self, pid: u16) -> bool {
        self.wanted
            .get(usize::from(pid) / 64)
            .is_some_and(|word| word & (1 << (pid % 64)) != 0)
    }
}

impl IndexQuery {
    /// Plans the query a message asks for (it has an INDEX_RANGE field).
    pub fn plan(namespace: &Namespace, message: &Message<'_>) -> Result<IndexQuery, ResultCode> {
        let fields = &message.fields;
        let range = fields.index_range.ok_or(ResultCode::Parameter)?;
        let (bin, key_type, filter) = parse_range(range)?;
        let collection = match fields.index_type {
            None => Collection::Default,
            Some([byte]) => Collection::from_wire(*byte).ok_or(ResultCode::Parameter)?,
            Some(_) => return Err(ResultCode::Parameter),
        };
        if let Some(context) = fields.index_context {
            crate::sindex::definition::check_context(context)?;
        }
        let sindexes = &crate::services(namespace)
            .ok_or(ResultCode::IndexNotFound)?
            .sindexes;
        let index = match (fields.index_name, bin.is_empty()) {
            (Some(_), false) => return Err(ResultCode::Parameter),
            (Some(name), true) => {
                if fields.index_context.is_some() {
                    return Err(ResultCode::Parameter);
                }
                let name = std::str::from_utf8(name).map_err(|_| ResultCode::Parameter)?;
                sindexes.find(namespace.name(), name)
            }
            // An expression index, named by its expression.
            (None, true) => {
                let expression = fields.index_expression.ok_or(ResultCode::Parameter)?;
                if fields.index_context.is_some() {
                    return Err(ResultCode::Parameter);
                }
                sindexes.find_by_expression(namespace.name(), expression, key_type, collection)
            }
            (None, false) => {
                let bin = std::str::from_utf8(bin).map_err(|_| ResultCode::Parameter)?;
                let set = fields
                    .set
                    .filter(|set| !set.is_empty())
                    .map(std::str::from_utf8)
                    .transpose()
                    .map_err(|_| ResultCode::Parameter)?;
                sindexes.find_for_query(
                    namespace.name(),
                    set,
                    bin,
                    key_type,
                    collection,
                    fields.index_context,
                )
            }
        };
        let index = index.ok_or(ResultCode::IndexNotFound)?;
        if !index.is_readable() {
            return Err(ResultCode::IndexNotReadable);
        }
        index
            .queries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ranges = ranges(&filter);
        let dedup = index.definition.collection != Collection::Default
            && ranges.iter().any(|(start, end)| start != end);
        let resume_bvals = resume_bvals(fields.digest_array, fields.bval_array)?;
        Ok(IndexQuery {
            index,
            filter,
            key_type,
            ranges,
            resume_bvals,
            dedup,
            window_entries: WINDOW_ENTRIES,
            window_visits: WINDOW_VISITS,
            cursor: Cursor::default(),
        })
    }

    /// Bounds the windows walked from now on: at most `entries` matching
    /// entries and `visits` entries looked at each (at least one of each).
    /// A query answered on the event loop walks small windows, and larger
    /// ones once it streams; where it resumes does not change.
    pub fn set_window(&mut self, entries: usize, visits: usize) {
        self.window_entries = entries.clamp(1, WINDOW_ENTRIES);
        self.window_visits = visits.clamp(1, WINDOW_VISITS);
    }

    /// Adds partition `pid` to those the query reads, resuming strictly
    /// after `resume` (its digest, with the bval the client sent with it;
    /// a partition is read once).
    pub fn read_partition(&mut self, pid: u16, resume: Option<[u8; DIGEST_BYTES]>) {
        let cursor = &mut self.cursor;
        if usize::from(pid) >= PARTITION_COUNT || cursor.wants(pid) {
            return;
        }
        if let Some(word) = cursor.wanted.get_mut(usize::from(pid) / 64) {
            *word |= 1 << (pid % 64);
        }
        let shard = shard_of(usize::from(pid));
        if let Some(count) = cursor.shard_wanted.get_mut(shard) {
            *count += 1;
        }
        if let Some(digest) = resume {
            let bval = self.resume_bvals.get(&pid).copied().unwrap_or(i64::MIN);
            let after = Entry::new(bval, &Digest(digest));
            cursor.resume.insert(pid, after);
            if let Some(count) = cursor.shard_resumed.get_mut(shard) {
                *count += 1;
            }
            if let Some(lowest) = cursor.shard_lowest.get_mut(shard) {
                *lowest = Some(lowest.map_or(after, |lowest| lowest.min(after)));
            }
        }
    }

    /// Adds the partitions of the bitmap `partitions` (bit `pid % 64` of
    /// word `pid / 64`) to those the query reads, from their start.
    pub fn read_partitions(&mut self, partitions: &[u64; PARTITION_COUNT / 64]) {
        let cursor = &mut self.cursor;
        let words_per_shard = PARTITIONS_PER_SHARD / 64;
        for (shard, words) in partitions.chunks_exact(words_per_shard).enumerate() {
            let mut added = 0;
            for (i, &word) in words.iter().enumerate() {
                if let Some(wanted) = cursor.wanted.get_mut(shard * words_per_shard + i) {
                    added += (word & !*wanted).count_ones();
                    *wanted |= word;
                }
            }
            if let Some(count) = cursor.shard_wanted.get_mut(shard) {
                *count += added as u16;
            }
        }
    }

    /// The next candidates (into `candidates`), or the end of a shard;
    /// None once every shard has been walked.
    pub fn next_step(&mut self, candidates: &mut Vec<(i64, Digest)>) -> Option<Step> {
        loop {
            let cursor = &mut self.cursor;
            if let Some(&(pid, end)) = cursor.groups.get(cursor.group) {
                let start = match cursor.group {
                    0 => 0,
                    n => cursor.groups.get(n - 1).map_or(0, |&(_, end)| end),
                };
                cursor.group += 1;
                candidates.clear();
                let group = cursor.grouped.get(start..end).unwrap_or_default();
                candidates.extend(group.iter().map(|entry| (entry.bval(), entry.digest())));
                if self.dedup {
                    let mut seen = HashSet::new();
                    candidates.retain(|(_, digest)| seen.insert(digest.0));
                }
                return Some(Step::Candidates(pid));
            }
            let shard = cursor.shard;
            let wanted = usize::from(*cursor.shard_wanted.get(shard)?);
            if wanted == 0 {
                cursor.shard += 1;
                continue;
            }
            if cursor.range >= self.ranges.len() {
                cursor.shard += 1;
                cursor.range = 0;
                cursor.at = None;
                cursor.sent = None;
                return Some(Step::ShardDone(wanted));
            }
            self.collect_window();
        }
    }

    /// Whether every shard has been walked and its candidates handed out.
    pub fn is_finished(&self) -> bool {
        self.cursor.shard >= SHARDS && self.cursor.group >= self.cursor.groups.len()
    }

    /// The scan sent the record `digest` (so a later entry of it in the
    /// same shard is passed over).
    pub fn sent(&mut self, digest: &Digest) {
        if let Some(sent) = &mut self.cursor.sent {
            sent.insert(digest.0);
        }
    }

    /// Walks the current shard's current range from where it stopped and
    /// queues what it finds, grouped by partition.
    fn collect_window(&mut self) {
        let cursor = &mut self.cursor;
        let shard = cursor.shard;
        let Some(&(start, end)) = self.ranges.get(cursor.range) else {
            cursor.range += 1;
            return;
        };
        if cursor.at.is_none() && cursor.range == 0 && (self.dedup || self.ranges.len() > 1) {
            // A record may have entries in several ranges or several
            // entries in one.
            cursor.sent = Some(HashSet::new());
        }
        let lower = cursor.at.unwrap_or_else(|| {
            let start = Entry::first_of(start);
            let everyone_resumes =
                cursor.shard_resumed.get(shard) == cursor.shard_wanted.get(shard);
            match cursor.shard_lowest.get(shard).copied().flatten() {
                // Every partition read resumes: nothing below the lowest
                // resume point is wanted.
                Some(lowest) if everyone_resumes => start.max(lowest),
                _ => start,
            }
        });
        let upper = Entry::last_of(end);
        let mut found = std::mem::take(&mut cursor.window);
        found.clear();
        let mut visits = 0;
        let mut stopped = None;
        let resumes = !cursor.resume.is_empty();
        let (window_entries, window_visits) = (self.window_entries, self.window_visits);
        self.index.walk(shard, &lower, |entry| {
            if *entry > upper {
                return false;
            }
            if visits == window_visits || found.len() == window_entries {
                stopped = Some(*entry);
                return false;
            }
            visits += 1;
            let pid = entry.partition();
            if !cursor.wants(pid)
                || (resumes && cursor.resume.get(&pid).is_some_and(|after| entry <= after))
                || cursor
                    .sent
                    .as_ref()
                    .is_some_and(|sent| sent.contains(entry.digest_bytes()))
            {
                return true;
            }
            found.push((pid, *entry));
            true
        });
        match stopped {
            Some(at) => {
                cursor.at = Some(at);
                if cursor.sent.is_none() {
                    cursor.sent = Some(HashSet::new());
                }
            }
            None => {
                cursor.at = None;
                cursor.range += 1;
            }
        }
        cursor.groups.clear();
        cursor.group = 0;
        cursor.grouped.clear();
        if found.len() <= PARTITIONS_PER_SHARD {
            // Grouped by partition, each group in walk order: (bval,
            // digest) (the sort is stable).
            found.sort_by_key(|(pid, _)| *pid);
            for group in found.chunk_by(|(a, _), (b, _)| a == b) {
                cursor.grouped.extend(group.iter().map(|(_, entry)| *entry));
                if let Some(&(pid, _)) = group.first() {
                    cursor.groups.push((pid, cursor.grouped.len()));
                }
            }
        } else {
            // The same by a counting sort over the shard's partitions.
            let base = shard * PARTITIONS_PER_SHARD;
            let mut ends = [0usize; PARTITIONS_PER_SHARD];
            for (pid, _) in &found {
                if let Some(count) = ends.get_mut(usize::from(*pid).wrapping_sub(base)) {
                    *count += 1;
                }
            }
            let mut total = 0;
            for (offset, end) in ends.iter_mut().enumerate() {
                let count = *end;
                *end = total;
                total += count;
                if count > 0 {
                    cursor.groups.push(((base + offset) as u16, total));
                }
            }
            // `ends` now holds each partition's next free place.
            cursor.grouped.resize(total, Entry::MIN);
            for (pid, entry) in &found {
                if let Some(at) = ends.get_mut(usize::from(*pid).wrapping_sub(base)) {
                    if let Some(slot) = cursor.grouped.get_mut(*at) {
                        *slot = *entry;
                    }
                    *at += 1;
                }
            }
        }
        cursor.window = found;
    }

    /// Whether the record really holds a value the filter asks for (a
    /// bval only finds candidates).
    pub fn matches(
        &self,
        namespace: &Namespace,
        digest: &Digest,
        meta: &RecordMeta,
        record: &RecordView<'_>,
        record_bytes: usize,
    ) -> bool {
        let filter = &self.filter;
        let key_type = self.key_type;
        self.index.any_value(
            namespace,
            digest,
            meta,
            record,
            record_bytes,
            &mut |value| value_matches(filter, key_type, value),
        )
    }
}

fn value_matches(filter: &Filter, key_type: KeyType, value: &Value<'_>) -> bool {
    match (filter, value) {
        (Filter::Range { start, end }, Value::Int(v)) => (*start..=*end).contains(v),
        (Filter::Str(wanted), Value::Str(bytes)) => key_type == KeyType::String && wanted == bytes,
        (Filter::Blob(wanted), Value::Blob(bytes)) => key_type == KeyType::Blob && wanted == bytes,
        (Filter::Within(region), Value::Geo(text))
        | (Filter::Contains(region), Value::Geo(text)) => Shape::parse(text)
            .is_some_and(|stored| bolide_particles::geo::point_in_region(&stored, region)),
        _ => false,
    }
}

/// The bval ranges a filter reads, sorted.
fn ranges(filter: &Filter) -> Vec<(i64, i64)> {
    match filter {
        Filter::Range { start, end } => vec![(*start, *end)],
        Filter::Str(bytes) | Filter::Blob(bytes) => {
            let bval = keys::hash(bytes);
            vec![(bval, bval)]
        }
        Filter::Within(region) => cells::query_ranges(region)
            .into_iter()
            .map(|(start, end)| (start as i64, end as i64))
            .collect(),
        Filter::Contains(Shape::Point(point)) => {
            let mut cells: Vec<(i64, i64)> = cells::ancestors(*point)
                .into_iter()
                .map(|cell| (cell as i64, cell as i64))
                .collect();
            cells.sort_unstable();
            cells
        }
        Filter::Contains(_) => Vec::new(),
    }
}

/// INDEX_RANGE: `u8 count (1) · u8 bin-name length · name · u8 particle
/// type · u32 BE begin length · begin · u32 BE end length · end`.
fn parse_range(field: &[u8]) -> Result<(&[u8], KeyType, Filter), ResultCode> {
    let mut rest = field;
    let count = take_u8(&mut rest)?;
    if count != 1 {
        return Err(ResultCode::Parameter);
    }
    let name_len = usize::from(take_u8(&mut rest)?);
    if name_len > BIN_NAME_BYTES_MAX {
        return Err(ResultCode::Parameter);
    }
    let bin = take(&mut rest, name_len)?;
    let particle_type = take_u8(&mut rest)?;
    let begin_len = take_u32(&mut rest)? as usize;
    let begin = take(&mut rest, begin_len)?;
    let (key_type, filter) = match particle_type {
        particle::INTEGER => {
            let end_len = take_u32(&mut rest)? as usize;
            let end = take(&mut rest, end_len)?;
            let start = i64::from_be_bytes(begin.try_into().map_err(|_| ResultCode::Parameter)?);
            let end = i64::from_be_bytes(end.try_into().map_err(|_| ResultCode::Parameter)?);
            if start > end {
                return Err(ResultCode::Parameter);
            }
            (KeyType::Numeric, Filter::Range { start, end })
        }
        particle::STRING | particle::BLOB => {
            if begin.len() >= keys::VALUE_BYTES_MAX {
                return Err(ResultCode::Parameter);
            }
            if particle_type == particle::STRING {
                (KeyType::String, Filter::Str(begin.to_vec()))
            } else {
                (KeyType::Blob, Filter::Blob(begin.to_vec()))
            }
        }
        particle::GEOJSON => {
            if begin.is_empty() || begin.len() >= GEOJSON_BYTES_MAX {
                return Err(ResultCode::Parameter);
            }
            let shape = Shape::parse(begin).ok_or(ResultCode::Parameter)?;
            let filter = match shape {
                Shape::Point(_) => Filter::Contains(shape),
                region => Filter::Within(region),
            };
            (KeyType::Geo, filter)
        }
        _ => return Err(ResultCode::Parameter),
    };
    Ok((bin, key_type, filter))
}

/// BVAL_ARRAY (u64 LE each) pairs with DIGEST_ARRAY, entry by entry: the
/// bval each partition's resume digest was sent with.
fn resume_bvals(
    digests: Option<&[u8]>,
    bvals: Option<&[u8]>,
) -> Result<HashMap<u16, i64>, ResultCode> {
    let mut map = HashMap::new();
    let (Some(digests), Some(bvals)) = (digests, bvals) else {
        if bvals.is_some() {
            return Err(ResultCode::Parameter);
        }
        return Ok(map);
    };
    if !digests.len().is_multiple_of(DIGEST_BYTES)
        || !bvals.len().is_multiple_of(8)
        || digests.len() / DIGEST_BYTES != bvals.len() / 8
    {
        return Err(ResultCode::Parameter);
    }
    for (digest, bval) in digests
        .chunks_exact(DIGEST_BYTES)
        .zip(bvals.chunks_exact(8))
    {
        let digest: [u8; DIGEST_BYTES] = digest.try_into().map_err(|_| ResultCode::Parameter)?;
        let bval: [u8; 8] = bval.try_into().map_err(|_| ResultCode::Parameter)?;
        map.insert(Digest(digest).partition_id().0, i64::from_le_bytes(bval));
    }
    Ok(map)
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], ResultCode> {
    if rest.len() < n {
        return Err(ResultCode::Parameter);
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn take_u8(rest: &mut &[u8]) -> Result<u8, ResultCode> {
    take(rest, 1)?.first().copied().ok_or(ResultCode::Parameter)
}

fn take_u32(rest: &mut &[u8]) -> Result<u32, ResultCode> {
    let bytes = take(rest, 4)?;
    Ok(u32::from_be_bytes(
        bytes.try_into().map_err(|_| ResultCode::Parameter)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sindex::definition::Definition;
    use std::collections::BTreeMap;

    fn index() -> Arc<SecondaryIndex> {
        Arc::new(SecondaryIndex::new(Definition {
            namespace: "test".into(),
            name: "i".into(),
            set: None,
            bin: "b".into(),
            key_type: KeyType::Numeric,
            collection: Collection::Default,
            context: None,
            expression: None,
        }))
    }

    /// Record `n`'s digest, in partition `pid`.
    fn digest(pid: u16, n: u32) -> Digest {
        let mut d = [0u8; DIGEST_BYTES];
        d[..2].copy_from_slice(&pid.to_le_bytes());
        d[2..6].copy_from_slice(&n.to_be_bytes());
        Digest(d)
    }

    fn query(index: &Arc<SecondaryIndex>, start: i64, end: i64) -> IndexQuery {
        IndexQuery {
            index: index.clone(),
            filter: Filter::Range { start, end },
            key_type: KeyType::Numeric,
            ranges: vec![(start, end)],
            resume_bvals: HashMap::new(),
            dedup: false,
            window_entries: WINDOW_ENTRIES,
            window_visits: WINDOW_VISITS,
            cursor: Cursor::default(),
        }
    }

    /// Every step of a query: each partition's candidates in the order
    /// handed out (concatenated over its groups), and the partitions the
    /// shard ends reported. `sent` tells the query of each candidate.
    fn drain(
        query: &mut IndexQuery,
        sent: bool,
        mut between: impl FnMut(usize),
    ) -> (BTreeMap<u16, Vec<(i64, Digest)>>, usize) {
        let mut by_partition: BTreeMap<u16, Vec<(i64, Digest)>> = BTreeMap::new();
        let mut done = 0;
        let mut buffer = Vec::new();
        let mut steps = 0;
        while let Some(step) = query.next_step(&mut buffer) {
            match step {
                Step::Candidates(pid) => {
                    assert!(!buffer.is_empty());
                    for (_, digest) in &buffer {
                        assert_eq!(digest.partition_id().0, pid);
                        if sent {
                            query.sent(digest);
                        }
                    }
                    by_partition
                        .entry(pid)
                        .or_default()
                        .extend(buffer.iter().copied());
                }
                Step::ShardDone(n) => done += n,
            }
            steps += 1;
            between(steps);
        }
        assert!(query.is_finished());
        (by_partition, done)
    }

    fn all_partitions() -> [u64; PARTITION_COUNT / 64] {
        [u64::MAX; PARTITION_COUNT / 64]
    }

    #[test]
    fn a_query_finds_each_matching_entry_once_in_partition_order() {
        let index = index();
        let mut model: BTreeMap<u16, Vec<(i64, Digest)>> = BTreeMap::new();
        for n in 0..20_000u32 {
            let pid = (n.wrapping_mul(2_654_435_761) % PARTITION_COUNT as u32) as u16;
            let bval = i64::from(n % 500) - 250;
            let d = digest(pid, n);
            index.update(usize::from(pid), &d, &[], &[bval]);
            if (-10..=30).contains(&bval) {
                model.entry(pid).or_default().push((bval, d));
            }
        }
        for list in model.values_mut() {
            list.sort_by_key(|(bval, d)| (*bval, d.0));
        }
        let mut q = query(&index, -10, 30);
        q.read_partitions(&all_partitions());
        let (found, done) = drain(&mut q, true, |_| {});
        assert_eq!(done, PARTITION_COUNT);
        assert_eq!(found, model);

        // Equality: one bval.
        let mut q = query(&index, 7, 7);
        q.read_partitions(&all_partitions());
        let (found, _) = drain(&mut q, false, |_| {});
        assert_eq!(found.values().map(Vec::len).sum::<usize>(), 40);
        assert!(found.values().flatten().all(|(bval, _)| *bval == 7));
    }

    #[test]
    fn small_windows_then_large_ones_hand_out_the_same_candidates() {
        let index = index();
        let mut model: BTreeMap<u16, Vec<(i64, Digest)>> = BTreeMap::new();
        for n in 0..20_000u32 {
            let pid = (n.wrapping_mul(2_654_435_761) % PARTITION_COUNT as u32) as u16;
            let bval = i64::from(n % 500);
            let d = digest(pid, n);
            index.update(usize::from(pid), &d, &[], &[bval]);
            if (10..=60).contains(&bval) {
                model.entry(pid).or_default().push((bval, d));
            }
        }
        for list in model.values_mut() {
            list.sort_by_key(|(bval, d)| (*bval, d.0));
        }
        // Windows of 5 matching entries (or 17 looked at) for the first
        // 40 steps, as on the event loop, then the usual windows.
        let mut q = query(&index, 10, 60);
        q.read_partitions(&all_partitions());
        q.set_window(5, 17);
        let mut found: BTreeMap<u16, Vec<(i64, Digest)>> = BTreeMap::new();
        let (mut done, mut steps, mut buffer) = (0, 0, Vec::new());
        while let Some(step) = q.next_step(&mut buffer) {
            match step {
                Step::Candidates(pid) => {
                    for (_, digest) in &buffer {
                        q.sent(digest);
                    }
                    found.entry(pid).or_default().extend(buffer.iter().copied());
                }
                Step::ShardDone(n) => done += n,
            }
            steps += 1;
            if steps == 40 {
                q.set_window(usize::MAX, usize::MAX);
            }
        }
        assert!(steps > 40);
        assert_eq!(done, PARTITION_COUNT);
        assert_eq!(found, model);
    }

    #[test]
    fn partitions_not_read_are_passed_over_and_resume_points_kept() {
        let index = index();
        for n in 0..4096u32 {
            for bval in 0..4 {
                let pid = n as u16;
                index.update(
                    usize::from(pid),
                    &digest(pid, n * 10 + bval as u32),
                    &[],
                    &[bval],
                );
            }
        }
        let mut q = query(&index, 0, 3);
        // Partitions 5 and 300 from their start, partition 7 after its
        // entry at bval 1, partition 9 after its last entry.
        let mut some = [0u64; PARTITION_COUNT / 64];
        some[0] |= 1 << 5;
        some[300 / 64] |= 1 << (300 % 64);
        q.read_partitions(&some);
        q.resume_bvals.insert(7, 1);
        q.read_partition(7, Some(digest(7, 7 * 10 + 1).0));
        q.resume_bvals.insert(9, 3);
        q.read_partition(9, Some(digest(9, 9 * 10 + 3).0));
        let (found, done) = drain(&mut q, false, |_| {});
        assert_eq!(done, 4);
        let bvals = |pid: u16| -> Vec<i64> {
            found
                .get(&pid)
                .map(|l| l.iter().map(|(b, _)| *b).collect())
                .unwrap_or_default()
        };
        assert_eq!(bvals(5), vec![0, 1, 2, 3]);
        assert_eq!(bvals(300), vec![0, 1, 2, 3]);
        assert_eq!(bvals(7), vec![2, 3]);
        assert!(bvals(9).is_empty());
        assert_eq!(found.len(), 3);
    }

    #[test]
    fn a_shard_larger_than_a_window_is_walked_in_windows_and_no_record_comes_twice() {
        let index = index();
        // 40,000 entries in the first shard's partitions, bvals 0..1000.
        let count = 40_000u32;
        for n in 0..count {
            let pid = (n % PARTITIONS_PER_SHARD as u32) as u16;
            index.update(
                usize::from(pid),
                &digest(pid, n),
                &[],
                &[i64::from(n % 1000)],
            );
        }
        assert!(count as usize > 2 * WINDOW_ENTRIES);
        let mut q = query(&index, 0, 999);
        q.read_partitions(&all_partitions());
        // Records move while the query runs: after the first window,
        // record 5 (bval 5, handed out already) moves to bval 990 (ahead
        // of the walk) and record 999 (bval 999, not yet reached) to bval
        // 1 (behind it).
        let mut moved = false;
        let index_for_moves = index.clone();
        let (found, done) = drain(&mut q, true, |_| {
            if !moved {
                moved = true;
                let d5 = digest(5, 5);
                index_for_moves.update(5, &d5, &[5], &[990]);
                let d999 = digest((999 % PARTITIONS_PER_SHARD) as u16, 999);
                index_for_moves.update(999 % PARTITIONS_PER_SHARD, &d999, &[999], &[1]);
            }
        });
        assert_eq!(done, PARTITION_COUNT);
        let mut seen = HashSet::new();
        for (pid, list) in &found {
            for pair in list.windows(2) {
                assert!(
                    (pair[0].0, pair[0].1 .0) < (pair[1].0, pair[1].1 .0),
                    "partition {pid} out of order"
                );
            }
            for (_, d) in list {
                assert!(seen.insert(d.0), "a record handed out twice");
            }
        }
        // Every record but the one that moved behind the walk.
        assert_eq!(seen.len(), count as usize - 1);
    }

    #[test]
    fn a_collection_record_with_several_matching_entries_comes_once() {
        let index = index();
        let d = digest(3, 1);
        index.update(3, &d, &[], &[1, 2, 3]);
        let mut q = query(&index, 0, 10);
        q.dedup = true;
        q.read_partitions(&all_partitions());
        let (found, _) = drain(&mut q, true, |_| {});
        assert_eq!(found.get(&3).map(Vec::len), Some(1));
    }

    fn range_field(bin: &[u8], particle_type: u8, begin: &[u8], end: &[u8]) -> Vec<u8> {
        let mut field = vec![1, bin.len() as u8];
        field.extend_from_slice(bin);
        field.push(particle_type);
        field.extend_from_slice(&(begin.len() as u32).to_be_bytes());
        field.extend_from_slice(begin);
        field.extend_from_slice(&(end.len() as u32).to_be_bytes());
        field.extend_from_slice(end);
        field
    }

    #[test]
    fn ranges_parse_and_hostile_ones_answer_parameter() {
        let good = range_field(
            b"n",
            particle::INTEGER,
            &1i64.to_be_bytes(),
            &9i64.to_be_bytes(),
        );
        let (bin, key_type, filter) = parse_range(&good).expect("integer range");
        assert_eq!(bin, b"n");
        assert_eq!(key_type, KeyType::Numeric);
        assert!(matches!(filter, Filter::Range { start: 1, end: 9 }));
        let string = range_field(b"s", particle::STRING, b"abc", b"abc");
        assert!(matches!(
            parse_range(&string).expect("string").2,
            Filter::Str(_)
        ));
        let circle = br#"{"type":"AeroCircle","coordinates":[[0,0],1000]}"#;
        let geo = range_field(b"g", particle::GEOJSON, circle, circle);
        assert!(matches!(
            parse_range(&geo).expect("geo").2,
            Filter::Within(_)
        ));
        let point = br#"{"type":"Point","coordinates":[0,0]}"#;
        let geo = range_field(b"g", particle::GEOJSON, point, point);
        assert!(matches!(
            parse_range(&geo).expect("geo").2,
            Filter::Contains(_)
        ));
        let long = vec![b'x'; 2048];
        let hostile: Vec<Vec<u8>> = vec![
            Vec::new(),
            vec![2],
            vec![1, 200],
            range_field(
                b"n",
                particle::INTEGER,
                &9i64.to_be_bytes(),
                &1i64.to_be_bytes(),
            ),
            range_field(b"n", particle::INTEGER, &[1, 2, 3], &9i64.to_be_bytes()),
            range_field(b"n", particle::FLOAT, &[0; 8], &[0; 8]),
            range_field(b"s", particle::STRING, &long, &long),
            range_field(b"g", particle::GEOJSON, b"{not json", b""),
            range_field(b"g", particle::GEOJSON, b"", b""),
            good[..good.len() - 3].to_vec(),
            {
                let mut field = good.clone();
                field[1] = 16;
                field
            },
        ];
        for field in hostile {
            assert!(parse_range(&field).is_err(), "{field:?}");
        }
    }

    #[test]
    fn resume_bvals_pair_with_digests() {
        let mut digests = vec![0u8; 40];
        digests[0] = 5;
        digests[20] = 6;
        let mut bvals = Vec::new();
        bvals.extend_from_slice(&(-3i64).to_le_bytes());
        bvals.extend_from_slice(&7i64.to_le_bytes());
        let map = resume_bvals(Some(&digests), Some(&bvals)).expect("pairs");
        assert_eq!(map.get(&5), Some(&-3));
        assert_eq!(map.get(&6), Some(&7));
        assert!(resume_bvals(Some(&digests), Some(&bvals[..8])).is_err());
        assert!(resume_bvals(None, Some(&bvals)).is_err());
        assert!(resume_bvals(Some(&digests), None)
            .expect("no bvals")
            .is_empty());
    }
}
