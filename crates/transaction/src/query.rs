//! Secondary-index query planning: which index a query names (INDEX_NAME,
//! or bin, value type, INDEX_TYPE and INDEX_CONTEXT), the bval ranges its
//! filter (INDEX_RANGE) covers, where each partition resumes (DIGEST_ARRAY
//! with BVAL_ARRAY), and the exact check each candidate record must pass.
//!
//! The scan job runs queries: the partition list, the pacing, the record
//! answers and the end of the stream are the scan's; a query only changes
//! where a partition's records come from (the index, in (bval, digest)
//! order) and adds a BVAL field to each record, which the clients keep as
//! their resume point.
//!
//! Field formats and checks follow the server's `query.c`.

use crate::sindex::cells;
use crate::sindex::definition::{Collection, KeyType};
use crate::sindex::keys::{self, Value};
use crate::sindex::SecondaryIndex;
use bolide_particles::geo::Shape;
use bolide_store::{Namespace, RecordMeta, RecordView};
use bolide_types::{particle, Digest, ResultCode, BIN_NAME_BYTES_MAX, DIGEST_BYTES};
use bolide_wire::Message;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
        })
    }

    /// Candidate entries of partition `pid`, after its resume point, in
    /// (bval, digest) order: the bval of each and its record's digest.
    pub fn candidates(&self, pid: u16, resume: Option<[u8; DIGEST_BYTES]>) -> Vec<(i64, Digest)> {
        let resume = resume.as_ref().map(|digest| {
            (
                self.resume_bvals.get(&pid).copied().unwrap_or(i64::MIN),
                digest,
            )
        });
        let mut found = Vec::new();
        for &(start, end) in &self.ranges {
            if let Some((bval, _)) = resume {
                if bval > end {
                    continue;
                }
            }
            found.extend(
                self.index
                    .range(usize::from(pid), start, end, resume, usize::MAX),
            );
        }
        if self.dedup {
            let mut seen = HashSet::new();
            found.retain(|(_, digest)| seen.insert(digest.0));
        }
        found
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
