//! Geospatial commands over sorted sets, as Redis 7.0 keeps them: a
//! member's score is its 52-bit geohash (26 bits of latitude in
//! [-85.05112878, 85.05112878] and 26 of longitude in [-180, 180],
//! interleaved), positions read back as the centre of that cell, and
//! distances are haversine on a sphere of Redis's earth radius. GEOADD,
//! GEOPOS, GEODIST, GEOHASH, GEORADIUS[_RO], GEORADIUSBYMEMBER[_RO],
//! GEOSEARCH and GEOSEARCHSTORE, with Redis's replies and error strings.
//! A search looks, as Redis does, at the geohash cell around the centre
//! (at a precision chosen from the radius) and its eight neighbours, in
//! Redis's order, each cell's members in score order, and keeps the
//! members within the radius or box: unsorted answers come in Redis's
//! order too.

use crate::data::{err, lower, parse_f64, read, zset_mut, Ran, R, SYNTAX_ERROR};
use crate::keyspace::{Db, Entry};
use crate::resp::Out;
use crate::session::parse_i64;
use crate::value::Value;
use std::cmp::Ordering;
use std::collections::BTreeMap;

const LAT_MIN: f64 = -85.051_128_78;
const LAT_MAX: f64 = 85.051_128_78;
const LONG_MIN: f64 = -180.0;
const LONG_MAX: f64 = 180.0;
const STEP: u32 = 26;
const EARTH_RADIUS_METERS: f64 = 6_372_797.560_856;

/// Spreads the low 32 bits of `x` to the even bit positions.
fn spread(x: u32) -> u64 {
    let mut x = u64::from(x);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// Gathers the even bit positions of `x` into 32 bits.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// The geohash of a position within the given ranges (latitude bits
/// even, longitude bits odd).
fn encode(longitude: f64, latitude: f64, lat_range: (f64, f64), long_range: (f64, f64)) -> u64 {
    let lat_offset = (latitude - lat_range.0) / (lat_range.1 - lat_range.0);
    let long_offset = (longitude - long_range.0) / (long_range.1 - long_range.0);
    let scale = f64::from(1u32 << STEP);
    spread((lat_offset * scale) as u32) | (spread((long_offset * scale) as u32) << 1)
}

/// The score of a position (its 52-bit geohash).
fn score_of(longitude: f64, latitude: f64) -> f64 {
    encode(
        longitude,
        latitude,
        (LAT_MIN, LAT_MAX),
        (LONG_MIN, LONG_MAX),
    ) as f64
}

/// The position a score stands for: the centre of its cell.
fn position(score: f64) -> (f64, f64) {
    let bits = score as u64;
    let lat_cell = f64::from(squash(bits));
    let long_cell = f64::from(squash(bits >> 1));
    let cells = f64::from(1u32 << STEP);
    let lat_scale = LAT_MAX - LAT_MIN;
    let long_scale = LONG_MAX - LONG_MIN;
    let lat_min = LAT_MIN + (lat_cell / cells) * lat_scale;
    let lat_max = LAT_MIN + ((lat_cell + 1.0) / cells) * lat_scale;
    let long_min = LONG_MIN + (long_cell / cells) * long_scale;
    let long_max = LONG_MIN + ((long_cell + 1.0) / cells) * long_scale;
    let longitude = ((long_min + long_max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let latitude = ((lat_min + lat_max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (longitude, latitude)
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_METERS * (lat2.to_radians() - lat1.to_radians()).abs()
}

/// Haversine distance in meters.
fn distance(long1: f64, lat1: f64, long2: f64, lat2: f64) -> f64 {
    let v = ((long2.to_radians() - long1.to_radians()) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1, lat2) = (lat1.to_radians(), lat2.to_radians());
    let u = ((lat2 - lat1) / 2.0).sin();
    let a = u * u + lat1.cos() * lat2.cos() * v * v;
    2.0 * EARTH_RADIUS_METERS * a.sqrt().asin()
}

/// A number printed as Redis prints coordinates for humans: 17 decimals,
/// trailing zeros removed.
fn human(value: f64) -> String {
    let text = format!("{value:.17}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

fn reply_human(out: &mut Out, value: f64) {
    let text = human(value);
    if out.resp3 {
        out.raw_double(&text);
    } else {
        out.bulk(text.as_bytes());
    }
}

fn long_lat(args: &[Vec<u8>], at: usize) -> R<(f64, f64)> {
    let longitude = parse_f64(&args[at])?;
    let latitude = parse_f64(&args[at + 1])?;
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return err(&format!(
            "ERR invalid longitude,latitude pair {longitude:.6},{latitude:.6}"
        ));
    }
    Ok((longitude, latitude))
}

/// Meters per unit.
fn unit(arg: &[u8]) -> R<f64> {
    match lower(arg).as_str() {
        "m" => Ok(1.0),
        "km" => Ok(1000.0),
        "ft" => Ok(0.3048),
        "mi" => Ok(1609.34),
        _ => err("ERR unsupported unit provided. please use M, KM, FT, MI"),
    }
}

fn zset_of(db: &mut Db<'_>, key: &[u8]) -> R<Option<BTreeMap<Vec<u8>, f64>>> {
    read(db, key, zset_mut)
}

pub fn run(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<Ran> {
    match name {
        "geoadd" => geoadd(args, out, db)?,
        "geopos" => {
            let zset = zset_of(db, &args[1])?.unwrap_or_default();
            out.array(args.len() - 2);
            for member in &args[2..] {
                match zset.get(member) {
                    Some(&score) => {
                        let (longitude, latitude) = position(score);
                        out.array(2);
                        reply_human(out, longitude);
                        reply_human(out, latitude);
                    }
                    None => out.null_array(),
                }
            }
        }
        "geodist" => {
            let meters_per_unit = match args.len() {
                4 => 1.0,
                5 => unit(&args[4])?,
                _ => return err(SYNTAX_ERROR),
            };
            let zset = zset_of(db, &args[1])?.unwrap_or_default();
            match (zset.get(&args[2]), zset.get(&args[3])) {
                (Some(&a), Some(&b)) => {
                    let (long1, lat1) = position(a);
                    let (long2, lat2) = position(b);
                    let meters = distance(long1, lat1, long2, lat2);
                    out.bulk(format!("{:.4}", meters / meters_per_unit).as_bytes());
                }
                _ => out.null(),
            }
        }
        "geohash" => {
            const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
            let zset = zset_of(db, &args[1])?.unwrap_or_default();
            out.array(args.len() - 2);
            for member in &args[2..] {
                match zset.get(member) {
                    Some(&score) => {
                        let (longitude, latitude) = position(score);
                        let bits = encode(longitude, latitude, (-90.0, 90.0), (-180.0, 180.0));
                        let text: Vec<u8> = (0..11)
                            .map(|i| {
                                let index = if i == 10 {
                                    0
                                } else {
                                    (bits >> (52 - (i + 1) * 5)) & 0x1f
                                };
                                ALPHABET[index as usize]
                            })
                            .collect();
                        out.bulk(&text);
                    }
                    None => out.null(),
                }
            }
        }
        "georadius"
        | "georadius_ro"
        | "georadiusbymember"
        | "georadiusbymember_ro"
        | "geosearch"
        | "geosearchstore" => search(name, args, out, db)?,
        _ => return err(&format!("ERR unknown command '{name}'")),
    }
    Ok(Ran::Done)
}

fn geoadd(args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let mut at = 2;
    let (mut nx, mut xx, mut ch) = (false, false, false);
    while at < args.len() {
        match lower(&args[at]).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "ch" => ch = true,
            _ => break,
        }
        at += 1;
    }
    let triples = &args[at..];
    if triples.is_empty() || !triples.len().is_multiple_of(3) || (nx && xx) {
        return err(SYNTAX_ERROR);
    }
    let mut zadd = vec![b"zadd".to_vec(), args[1].clone()];
    if nx {
        zadd.push(b"nx".to_vec());
    }
    if xx {
        zadd.push(b"xx".to_vec());
    }
    if ch {
        zadd.push(b"ch".to_vec());
    }
    for (i, triple) in triples.chunks(3).enumerate() {
        let (longitude, latitude) = long_lat(args, at + i * 3)?;
        zadd.push(
            (score_of(longitude, latitude) as u64)
                .to_string()
                .into_bytes(),
        );
        zadd.push(triple[2].clone());
    }
    crate::collections::run("zadd", &zadd, out, db, false).map(|_| ())
}

enum Shape {
    Radius(f64),
    Box(f64, f64),
}

/// One member found: name, distance (meters), score, position.
struct Found {
    member: Vec<u8>,
    meters: f64,
    score: f64,
    position: (f64, f64),
}

struct Search {
    center: Option<(f64, f64)>,
    shape: Option<Shape>,
    meters_per_unit: f64,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    any: bool,
    descending: Option<bool>,
    count: usize,
    store: Option<Vec<u8>>,
    store_dist: bool,
}

fn search(name: &str, args: &[Vec<u8>], out: &mut Out, db: &mut Db<'_>) -> R<()> {
    let store_form = name == "geosearchstore";
    let source = if store_form { &args[2] } else { &args[1] };
    let zset = zset_of(db, source)?;
    let mut search = Search {
        center: None,
        shape: None,
        meters_per_unit: 1.0,
        with_dist: false,
        with_hash: false,
        with_coord: false,
        any: false,
        descending: None,
        count: 0,
        store: store_form.then(|| args[1].clone()),
        store_dist: false,
    };
    let geosearch = name.starts_with("geosearch");
    let no_store = name.ends_with("_ro");
    let mut member_missing = false;
    let base = match name {
        "georadius" | "georadius_ro" => {
            if args.len() < 6 {
                return err(&format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            search.center = Some(long_lat(args, 2)?);
            distance_option(&args[4..6], &mut search)?;
            6
        }
        "georadiusbymember" | "georadiusbymember_ro" => {
            if args.len() < 5 {
                return err(&format!(
                    "ERR wrong number of arguments for '{name}' command"
                ));
            }
            if let Some(zset) = &zset {
                let score = zset
                    .get(&args[2])
                    .ok_or_else(|| "ERR could not decode requested zset member".to_owned())?;
                search.center = Some(position(*score));
                distance_option(&args[3..5], &mut search)?;
            }
            5
        }
        _ if store_form => 3,
        _ => 2,
    };
    let mut at = base;
    while at < args.len() {
        let left = args.len() - at - 1;
        match lower(&args[at]).as_str() {
            "withdist" => search.with_dist = true,
            "withhash" => search.with_hash = true,
            "withcoord" => search.with_coord = true,
            "any" => search.any = true,
            "asc" => search.descending = Some(false),
            "desc" => search.descending = Some(true),
            "count" if left >= 1 => {
                let count = parse_i64(&args[at + 1])?;
                if count <= 0 {
                    return err("ERR COUNT must be > 0");
                }
                search.count = count as usize;
                at += 1;
            }
            "store" | "storedist" if left >= 1 && !no_store && !geosearch => {
                search.store_dist = lower(&args[at]) == "storedist";
                search.store = Some(args[at + 1].clone());
                at += 1;
            }
            "storedist" if store_form => search.store_dist = true,
            "frommember"
                if left >= 1 && geosearch && search.center.is_none() && !member_missing =>
            {
                match &zset {
                    None => member_missing = true,
                    Some(zset) => {
                        let score = zset.get(&args[at + 1]).ok_or_else(|| {
                            "ERR could not decode requested zset member".to_owned()
                        })?;
                        search.center = Some(position(*score));
                    }
                }
                at += 1;
            }
            "fromlonlat"
                if left >= 2 && geosearch && !member_missing && search.center.is_none() =>
            {
                search.center = Some(long_lat(args, at + 1)?);
                at += 2;
            }
            "byradius" if left >= 2 && geosearch && search.shape.is_none() => {
                distance_option(&args[at + 1..at + 3], &mut search)?;
                at += 2;
            }
            "bybox" if left >= 3 && geosearch && search.shape.is_none() => {
                let bad = |what: &str| format!("ERR need numeric {what}");
                let width = parse_f64(&args[at + 1]).map_err(|_| bad("width"))?;
                let height = parse_f64(&args[at + 2]).map_err(|_| bad("height"))?;
                if width < 0.0 || height < 0.0 {
                    return err("ERR height or width cannot be negative");
                }
                search.meters_per_unit = unit(&args[at + 3])?;
                search.shape = Some(Shape::Box(width, height));
                at += 3;
            }
            _ => return err(SYNTAX_ERROR),
        }
        at += 1;
    }
    if search.store.is_some() && (search.with_dist || search.with_hash || search.with_coord) {
        return err(&format!(
            "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if store_form {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            }
        ));
    }
    if geosearch && search.center.is_none() && !member_missing {
        return err(&format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {}",
            String::from_utf8_lossy(&args[0])
        ));
    }
    if geosearch && search.shape.is_none() {
        return err(&format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {}",
            String::from_utf8_lossy(&args[0])
        ));
    }
    if search.any && search.count == 0 {
        return err("ERR the ANY argument requires COUNT argument");
    }
    let (Some(zset), Some(center), Some(shape)) = (zset, search.center, &search.shape) else {
        match &search.store {
            Some(destination) => {
                db.put(destination, None)?;
                out.int(0);
            }
            None => out.array(0),
        }
        return Ok(());
    };
    let mut found: Vec<Found> = Vec::new();
    let members = crate::collections::sorted(&zset);
    let limit = if search.any { search.count } else { 0 };
    for (min, max) in search_cells(center, shape, search.meters_per_unit) {
        if limit != 0 && found.len() >= limit {
            break;
        }
        let first = members.partition_point(|(score, _)| *score < min);
        for (score, member) in &members[first..] {
            if *score >= max {
                break;
            }
            let point = position(*score);
            if let Some(meters) = within(shape, search.meters_per_unit, center, point) {
                found.push(Found {
                    member: (*member).clone(),
                    meters,
                    score: *score,
                    position: point,
                });
            }
            if limit != 0 && found.len() >= limit {
                break;
            }
        }
    }
    let descending = match search.descending {
        None if search.count != 0 && !search.any => Some(false),
        other => other,
    };
    if let Some(descending) = descending {
        found.sort_by(|a, b| {
            let order = a.meters.partial_cmp(&b.meters).unwrap_or(Ordering::Equal);
            if descending {
                order.reverse()
            } else {
                order
            }
        });
    }
    if search.count != 0 {
        found.truncate(search.count);
    }
    if let Some(destination) = &search.store {
        let stored: BTreeMap<Vec<u8>, f64> = found
            .iter()
            .map(|f| {
                let score = if search.store_dist {
                    f.meters / search.meters_per_unit
                } else {
                    f.score
                };
                (f.member.clone(), score)
            })
            .collect();
        let entry = Entry {
            value: Value::ZSet(stored),
            expiry_ms: None,
        };
        db.put(destination, Some(&entry))?;
        out.int(found.len() as i64);
        return Ok(());
    }
    let options = usize::from(search.with_dist)
        + usize::from(search.with_hash)
        + usize::from(search.with_coord);
    out.array(found.len());
    for f in &found {
        if options > 0 {
            out.array(options + 1);
        }
        out.bulk(&f.member);
        if search.with_dist {
            out.bulk(format!("{:.4}", f.meters / search.meters_per_unit).as_bytes());
        }
        if search.with_hash {
            out.int(f.score as i64);
        }
        if search.with_coord {
            out.array(2);
            reply_human(out, f.position.0);
            reply_human(out, f.position.1);
        }
    }
    Ok(())
}

/// Whether a point is within the shape around `center`: its distance
/// from the centre in meters if it is.
fn within(
    shape: &Shape,
    meters_per_unit: f64,
    center: (f64, f64),
    point: (f64, f64),
) -> Option<f64> {
    match *shape {
        Shape::Radius(radius) => {
            let meters = distance(center.0, center.1, point.0, point.1);
            (meters <= radius * meters_per_unit).then_some(meters)
        }
        Shape::Box(width, height) => {
            let (width, height) = (width * meters_per_unit, height * meters_per_unit);
            if lat_distance(point.1, center.1) > height / 2.0
                || distance(point.0, point.1, center.0, point.1) > width / 2.0
            {
                return None;
            }
            Some(distance(center.0, center.1, point.0, point.1))
        }
    }
}

/// The cell of a position at `step` bits per coordinate.
fn cell(longitude: f64, latitude: f64, step: u32) -> u64 {
    let lat_offset = (latitude - LAT_MIN) / (LAT_MAX - LAT_MIN);
    let long_offset = (longitude - LONG_MIN) / (LONG_MAX - LONG_MIN);
    let scale = f64::from(1u32 << step);
    spread((lat_offset * scale) as u32) | (spread((long_offset * scale) as u32) << 1)
}

/// A cell's bounds: latitude min, max, longitude min, max.
fn cell_area(bits: u64, step: u32) -> (f64, f64, f64, f64) {
    let cells = f64::from(1u32 << step);
    let lat_cell = f64::from(squash(bits));
    let long_cell = f64::from(squash(bits >> 1));
    let lat_scale = LAT_MAX - LAT_MIN;
    let long_scale = LONG_MAX - LONG_MIN;
    (
        LAT_MIN + (lat_cell / cells) * lat_scale,
        LAT_MIN + ((lat_cell + 1.0) / cells) * lat_scale,
        LONG_MIN + (long_cell / cells) * long_scale,
        LONG_MIN + ((long_cell + 1.0) / cells) * long_scale,
    )
}

/// The neighbouring cell `d` steps east (longitude bits, odd positions)
/// or north (latitude bits, even positions), wrapping around.
fn shift(bits: u64, step: u32, d: i8, longitude: bool) -> u64 {
    if d == 0 {
        return bits;
    }
    let (moving_mask, other_mask) = if longitude {
        (0xaaaa_aaaa_aaaa_aaaa_u64, 0x5555_5555_5555_5555_u64)
    } else {
        (0x5555_5555_5555_5555_u64, 0xaaaa_aaaa_aaaa_aaaa_u64)
    };
    let mut moving = bits & moving_mask;
    let other = bits & other_mask;
    let filler = other_mask >> (64 - step * 2);
    if d > 0 {
        moving = moving.wrapping_add(filler.wrapping_add(1));
    } else {
        moving |= filler;
        moving = moving.wrapping_sub(filler.wrapping_add(1));
    }
    moving &= moving_mask >> (64 - step * 2);
    moving | other
}

/// How many bits per coordinate a search of `meters` around latitude
/// `latitude` starts from.
fn steps_for(meters: f64, latitude: f64) -> u32 {
    const MERCATOR_MAX: f64 = 20_037_726.37;
    if meters == 0.0 {
        return STEP;
    }
    let mut range = meters;
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&latitude) {
        step -= 1;
        if !(-80.0..=80.0).contains(&latitude) {
            step -= 1;
        }
    }
    step.clamp(1, STEP as i32) as u32
}

/// The score ranges `[min, max)` a search reads, in Redis's order: the
/// centre's cell, then north, south, east, west, north-east, north-west,
/// south-east and south-west, leaving out neighbours the shape cannot
/// reach and a cell equal to the one read just before.
fn search_cells(center: (f64, f64), shape: &Shape, meters_per_unit: f64) -> Vec<(f64, f64)> {
    let (longitude, latitude) = center;
    let (height, width, radius) = match *shape {
        Shape::Radius(r) => (r, r, r),
        Shape::Box(w, h) => (
            h / 2.0,
            w / 2.0,
            ((w / 2.0).powi(2) + (h / 2.0).powi(2)).sqrt(),
        ),
    };
    let (height, width, radius) = (
        height * meters_per_unit,
        width * meters_per_unit,
        radius * meters_per_unit,
    );
    let lat_delta = (height / EARTH_RADIUS_METERS).to_degrees();
    let long_delta_top =
        (width / EARTH_RADIUS_METERS / (latitude + lat_delta).to_radians().cos()).to_degrees();
    let long_delta_bottom =
        (width / EARTH_RADIUS_METERS / (latitude - lat_delta).to_radians().cos()).to_degrees();
    let long_delta = if latitude < 0.0 {
        long_delta_bottom
    } else {
        long_delta_top
    };
    let (min_lon, max_lon) = (longitude - long_delta, longitude + long_delta);
    let (min_lat, max_lat) = (latitude - lat_delta, latitude + lat_delta);
    let mut step = steps_for(radius, latitude);
    let neighbours = |bits: u64, step: u32| -> [u64; 8] {
        let east = |b: u64, d: i8| shift(b, step, d, true);
        let north = |b: u64, d: i8| shift(b, step, d, false);
        [
            north(bits, 1),
            north(bits, -1),
            east(bits, 1),
            east(bits, -1),
            north(east(bits, 1), 1),
            north(east(bits, -1), 1),
            north(east(bits, 1), -1),
            north(east(bits, -1), -1),
        ]
    };
    let mut bits = cell(longitude, latitude, step);
    let mut around = neighbours(bits, step);
    // A neighbour that does not reach the shape's edge: one step coarser.
    let (north, south, east, west) = (
        cell_area(around[0], step),
        cell_area(around[1], step),
        cell_area(around[2], step),
        cell_area(around[3], step),
    );
    if step > 1 && (north.1 < max_lat || south.0 > min_lat || east.3 < max_lon || west.2 > min_lon)
    {
        step -= 1;
        bits = cell(longitude, latitude, step);
        around = neighbours(bits, step);
    }
    let mut cells: Vec<Option<u64>> = std::iter::once(Some(bits))
        .chain(around.iter().map(|&b| Some(b)))
        .collect();
    if step >= 2 {
        let area = cell_area(bits, step);
        // [centre, north, south, east, west, ne, nw, se, sw]
        if area.0 < min_lat {
            for i in [2, 7, 8] {
                cells[i] = None;
            }
        }
        if area.1 > max_lat {
            for i in [1, 5, 6] {
                cells[i] = None;
            }
        }
        if area.2 < min_lon {
            for i in [4, 8, 6] {
                cells[i] = None;
            }
        }
        if area.3 > max_lon {
            for i in [3, 7, 5] {
                cells[i] = None;
            }
        }
    }
    let shift_bits = 52 - step * 2;
    let mut ranges = Vec::new();
    // The last cell read, unless it was the centre's (Redis compares a
    // neighbour only with the neighbour read before it).
    let mut last: Option<u64> = None;
    for (index, cell) in cells.into_iter().enumerate() {
        let Some(cell) = cell else {
            continue;
        };
        if last == Some(cell) {
            continue;
        }
        ranges.push((
            (cell << shift_bits) as f64,
            ((cell + 1) << shift_bits) as f64,
        ));
        last = (index > 0).then_some(cell);
    }
    ranges
}

/// `<radius> <unit>`.
fn distance_option(args: &[Vec<u8>], search: &mut Search) -> R<()> {
    let radius = parse_f64(&args[0]).map_err(|_| "ERR need numeric radius".to_owned())?;
    if radius < 0.0 {
        return err("ERR radius cannot be negative");
    }
    search.meters_per_unit = unit(&args[1])?;
    search.shape = Some(Shape::Radius(radius));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geohash_round_trips_within_its_cell() {
        // Palermo, as in Redis's documentation: GEOHASH sqc8b49rny0.
        let score = score_of(13.361389, 38.115556);
        let (longitude, latitude) = position(score);
        assert!((longitude - 13.361389).abs() < 1e-5);
        assert!((latitude - 38.115556).abs() < 1e-5);
        assert_eq!(score as u64, 3_479_099_956_230_698);
        let palermo = position(score_of(13.361389, 38.115556));
        let catania = position(score_of(15.087269, 37.502669));
        let meters = distance(palermo.0, palermo.1, catania.0, catania.1);
        assert_eq!(format!("{meters:.4}"), "166274.1516");
    }
}
