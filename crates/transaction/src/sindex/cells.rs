//! Geo cells for geo2dsphere indexes: a quadtree over the longitude/latitude
//! rectangle, numbered along a Z-order curve with S2's trick of marking a
//! cell's level by its lowest set bit, so every cell is one contiguous range
//! of leaf ids and an ancestor's range contains its descendants'.
//!
//! A point is indexed by its leaf cell (level 30, cells about 4 cm wide);
//! a region by a few cells covering its bounding box. A "points within a
//! region" query scans the ranges of the cells covering the query region; a
//! "regions containing a point" query looks up the point's 31 ancestors.
//! Both are filters: each candidate is checked exactly (`bolide_particles::geo`), so
//! cells only need to cover, never to be tight.

use bolide_particles::geo::{Point, Shape};

/// The finest level: 2^30 cells along each axis.
pub const LEVEL_MAX: u32 = 30;
/// Most cells a stored region is covered by.
pub const REGION_CELLS_MAX: usize = 8;
/// Most cells a query region is covered by.
pub const QUERY_CELLS_MAX: usize = 24;
/// Mean Earth radius in meters, as `bolide_particles::geo` uses it.
const EARTH_RADIUS_METERS: f64 = 6_371_008.8;
/// Degrees added around every bounding box, so that rounding never
/// leaves a covered point outside.
const MARGIN_DEGREES: f64 = 1e-6;

/// A longitude/latitude rectangle (longitudes not crossing ±180).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rect {
    lng_min: f64,
    lng_max: f64,
    lat_min: f64,
    lat_max: f64,
}

/// The leaf cell of a point.
pub fn point_cell(point: Point) -> u64 {
    let (x, y) = leaf_xy(point.lng, point.lat);
    cell_id(interleave(x, y), LEVEL_MAX)
}

/// The cells of a stored value: a point's leaf cell, or a few cells
/// covering a region.
pub fn shape_cells(shape: &Shape) -> Vec<u64> {
    match shape {
        Shape::Point(point) => vec![point_cell(*point)],
        region => cover(&bounding_rects(region), REGION_CELLS_MAX),
    }
}

/// The id ranges (inclusive, sorted, disjoint) a "points within
/// `region`" query scans.
pub fn query_ranges(region: &Shape) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = cover(&bounding_rects(region), QUERY_CELLS_MAX)
        .into_iter()
        .map(|cell| (range_min(cell), range_max(cell)))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The cells containing a point at every level, coarsest first: a
/// "regions containing the point" query looks each one up.
pub fn ancestors(point: Point) -> Vec<u64> {
    let (x, y) = leaf_xy(point.lng, point.lat);
    let morton = interleave(x, y);
    (0..=LEVEL_MAX)
        .map(|level| cell_id(morton >> (2 * (LEVEL_MAX - level)), level))
        .collect()
}

/// The id of the cell at `level` whose Z-order position is `position`
/// (2 × level bits).
fn cell_id(position: u64, level: u32) -> u64 {
    let shift = 2 * (LEVEL_MAX - level);
    (position << (shift + 1)) | (1 << shift)
}

fn lowest_bit(cell: u64) -> u64 {
    cell & cell.wrapping_neg()
}

/// The first leaf id inside `cell`.
pub fn range_min(cell: u64) -> u64 {
    cell - (lowest_bit(cell) - 1)
}

/// The last leaf id inside `cell`.
pub fn range_max(cell: u64) -> u64 {
    cell + (lowest_bit(cell) - 1)
}

/// Grid coordinates of a leaf cell.
fn leaf_xy(lng: f64, lat: f64) -> (u64, u64) {
    (
        grid(lng, -180.0, 360.0, LEVEL_MAX),
        grid(lat, -90.0, 180.0, LEVEL_MAX),
    )
}

/// The cell column (or row) of `value` at `level`, clamped to the grid.
fn grid(value: f64, origin: f64, span: f64, level: u32) -> u64 {
    let cells = 1u64 << level;
    let scaled = (value - origin) / span * cells as f64;
    if scaled.is_nan() || scaled <= 0.0 {
        0
    } else {
        (scaled as u64).min(cells - 1)
    }
}

/// Interleaves the bits of x (even positions) and y (odd positions).
fn interleave(x: u64, y: u64) -> u64 {
    spread(x) | (spread(y) << 1)
}

/// Spreads the low 32 bits of `v` to the even bit positions.
fn spread(v: u64) -> u64 {
    let mut v = v & 0xffff_ffff;
    v = (v | (v << 16)) & 0x0000_ffff_0000_ffff;
    v = (v | (v << 8)) & 0x00ff_00ff_00ff_00ff;
    v = (v | (v << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    v = (v | (v << 2)) & 0x3333_3333_3333_3333;
    (v | (v << 1)) & 0x5555_5555_5555_5555
}

/// Cells covering every rectangle: the finest level at which they take
/// at most `cells_max` cells in all.
fn cover(rects: &[Rect], cells_max: usize) -> Vec<u64> {
    for level in (0..=LEVEL_MAX).rev() {
        let spans: Vec<(u64, u64, u64, u64)> = rects
            .iter()
            .map(|rect| {
                (
                    grid(rect.lng_min, -180.0, 360.0, level),
                    grid(rect.lng_max, -180.0, 360.0, level),
                    grid(rect.lat_min, -90.0, 180.0, level),
                    grid(rect.lat_max, -90.0, 180.0, level),
                )
            })
            .collect();
        let count: u64 = spans
            .iter()
            .map(|(x0, x1, y0, y1)| (x1 - x0 + 1).saturating_mul(y1 - y0 + 1))
            .fold(0, u64::saturating_add);
        if count as usize <= cells_max || level == 0 {
            let mut cells = Vec::new();
            for (x0, x1, y0, y1) in spans {
                for x in x0..=x1 {
                    for y in y0..=y1 {
                        cells.push(cell_id(interleave(x, y), level));
                    }
                }
            }
            cells.sort_unstable();
            cells.dedup();
            return cells;
        }
    }
    vec![cell_id(0, 0)]
}

/// Rectangles covering a region, as `bolide_particles::geo` tests containment:
/// polygons in the longitude/latitude plane, circles on the sphere (split
/// in two where a circle crosses ±180 longitude).
fn bounding_rects(shape: &Shape) -> Vec<Rect> {
    let rect = match shape {
        Shape::Point(point) => points_rect(std::iter::once(point)),
        Shape::Polygon(rings) => points_rect(rings.iter().take(1).flatten()),
        Shape::MultiPolygon(polygons) => {
            points_rect(polygons.iter().filter_map(|rings| rings.first()).flatten())
        }
        Shape::Circle {
            center,
            radius_meters,
        } => return circle_rects(*center, *radius_meters),
    };
    vec![widen(rect)]
}

fn points_rect<'p>(points: impl Iterator<Item = &'p Point>) -> Rect {
    let mut rect = Rect {
        lng_min: f64::INFINITY,
        lng_max: f64::NEG_INFINITY,
        lat_min: f64::INFINITY,
        lat_max: f64::NEG_INFINITY,
    };
    for point in points {
        rect.lng_min = rect.lng_min.min(point.lng);
        rect.lng_max = rect.lng_max.max(point.lng);
        rect.lat_min = rect.lat_min.min(point.lat);
        rect.lat_max = rect.lat_max.max(point.lat);
    }
    if rect.lng_min > rect.lng_max {
        // No points: nothing can be inside; any one cell will do.
        rect = Rect {
            lng_min: 0.0,
            lng_max: 0.0,
            lat_min: 0.0,
            lat_max: 0.0,
        };
    }
    rect
}

fn widen(rect: Rect) -> Rect {
    Rect {
        lng_min: (rect.lng_min - MARGIN_DEGREES).max(-180.0),
        lng_max: (rect.lng_max + MARGIN_DEGREES).min(180.0),
        lat_min: (rect.lat_min - MARGIN_DEGREES).max(-90.0),
        lat_max: (rect.lat_max + MARGIN_DEGREES).min(90.0),
    }
}

/// The bounding rectangles of a spherical cap.
fn circle_rects(center: Point, radius_meters: f64) -> Vec<Rect> {
    let whole = Rect {
        lng_min: -180.0,
        lng_max: 180.0,
        lat_min: -90.0,
        lat_max: 90.0,
    };
    let angle = radius_meters / EARTH_RADIUS_METERS;
    if !angle.is_finite() || angle >= std::f64::consts::PI {
        return vec![whole];
    }
    // A little more than the cap, against rounding.
    let angle_degrees = angle.to_degrees() * (1.0 + 1e-9) + MARGIN_DEGREES;
    let lat_min = center.lat - angle_degrees;
    let lat_max = center.lat + angle_degrees;
    if lat_min <= -90.0 || lat_max >= 90.0 {
        // The cap holds a pole: every longitude.
        return vec![Rect {
            lat_min: lat_min.max(-90.0),
            lat_max: lat_max.min(90.0),
            ..whole
        }];
    }
    let ratio = angle.sin() / center.lat.to_radians().cos();
    if !ratio.is_finite() || ratio >= 1.0 {
        return vec![Rect {
            lat_min,
            lat_max,
            ..whole
        }];
    }
    let lng_delta = ratio.asin().to_degrees() * (1.0 + 1e-9) + MARGIN_DEGREES;
    let (lng_min, lng_max) = (center.lng - lng_delta, center.lng + lng_delta);
    let rect = |lng_min: f64, lng_max: f64| Rect {
        lng_min,
        lng_max,
        lat_min,
        lat_max,
    };
    if lng_min < -180.0 {
        vec![rect(-180.0, lng_max), rect(lng_min + 360.0, 180.0)]
    } else if lng_max > 180.0 {
        vec![rect(lng_min, 180.0), rect(-180.0, lng_max - 360.0)]
    } else {
        vec![rect(lng_min, lng_max)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bolide_particles::geo::point_in_region;

    fn shape(text: &str) -> Shape {
        Shape::parse(text.as_bytes()).expect("shape")
    }

    fn in_ranges(ranges: &[(u64, u64)], cell: u64) -> bool {
        ranges.iter().any(|&(a, b)| (a..=b).contains(&cell))
    }

    #[test]
    fn cells_nest() {
        let point = Point {
            lng: 13.4,
            lat: 52.5,
        };
        let chain = ancestors(point);
        assert_eq!(chain.len(), 31);
        assert_eq!(chain[30], point_cell(point));
        for pair in chain.windows(2) {
            assert!(range_min(pair[0]) <= range_min(pair[1]));
            assert!(range_max(pair[1]) <= range_max(pair[0]));
        }
        assert_eq!(range_min(chain[0]), 1);
    }

    #[test]
    fn every_point_a_region_holds_is_in_its_query_ranges() {
        let regions = [
            r#"{"type":"Polygon","coordinates":[[[-122.5,37.7],[-122.3,37.7],[-122.3,37.9],[-122.5,37.9],[-122.5,37.7]]]}"#,
            r#"{"type":"AeroCircle","coordinates":[[179.99,0.0],5000]}"#,
            r#"{"type":"AeroCircle","coordinates":[[10.0,89.99],20000]}"#,
            r#"{"type":"AeroCircle","coordinates":[[-0.1,51.5],100]}"#,
        ];
        for text in regions {
            let region = shape(text);
            let ranges = query_ranges(&region);
            assert!(!ranges.is_empty() && ranges.len() <= QUERY_CELLS_MAX);
            let mut inside = 0;
            for i in 0..=400 {
                for j in 0..=400 {
                    let (lng_min, lat_min, span) = match &region {
                        Shape::Circle { center, .. } => (center.lng - 1.0, center.lat - 0.5, 2.0),
                        _ => (-122.6, 37.6, 0.4),
                    };
                    let lng = lng_min + span * f64::from(i) / 400.0;
                    let lat = lat_min + span * f64::from(j) / 400.0;
                    let lng = if lng > 180.0 { lng - 360.0 } else { lng };
                    if !(-90.0..=90.0).contains(&lat) {
                        continue;
                    }
                    let point = Point { lng, lat };
                    if point_in_region(&Shape::Point(point), &region) {
                        inside += 1;
                        assert!(
                            in_ranges(&ranges, point_cell(point)),
                            "{text} misses {lng},{lat}"
                        );
                        let cells = shape_cells(&region);
                        assert!(cells.len() <= REGION_CELLS_MAX);
                        assert!(
                            ancestors(point).iter().any(|a| cells.contains(a)),
                            "{text} stored cells miss {lng},{lat}"
                        );
                    }
                }
            }
            assert!(inside > 0, "{text}: the sample found no inside point");
        }
    }
}
