//! GeoJSON shapes for the geo filter expression (`CmpGeo`): a point is
//! inside a region (Polygon, MultiPolygon, or Aerospike's AeroCircle
//! `[[lng, lat], radius in meters]`).
//!
//! Polygons are tested in longitude/latitude as a plane (ray casting, holes
//! excluded); circles by great-circle distance. Aerospike uses spherical
//! geometry (S2), so results can differ for points within a few meters of
//! a polygon's edge or for edges spanning many degrees.

use serde_json::Value as Json;

/// Mean Earth radius in meters (IUGG).
const EARTH_RADIUS_METERS: f64 = 6_371_008.8;

/// A parsed GeoJSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    Point(Point),
    /// Rings: the first is the outline, the others are holes.
    Polygon(Vec<Vec<Point>>),
    MultiPolygon(Vec<Vec<Vec<Point>>>),
    Circle {
        center: Point,
        radius_meters: f64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub lng: f64,
    pub lat: f64,
}

impl Shape {
    /// Parses GeoJSON text; `None` if it is not a shape this module knows.
    pub fn parse(text: &[u8]) -> Option<Shape> {
        let json: Json = serde_json::from_slice(text).ok()?;
        let coordinates = json.get("coordinates")?;
        match json.get("type")?.as_str()? {
            "Point" => point(coordinates).map(Shape::Point),
            "Polygon" => polygon(coordinates).map(Shape::Polygon),
            "MultiPolygon" => coordinates
                .as_array()?
                .iter()
                .map(polygon)
                .collect::<Option<Vec<_>>>()
                .map(Shape::MultiPolygon),
            "AeroCircle" => {
                let parts = coordinates.as_array()?;
                let (center, radius) = match parts.as_slice() {
                    [center, radius] => (point(center)?, radius.as_f64()?),
                    _ => return None,
                };
                (radius.is_finite() && radius >= 0.0).then_some(Shape::Circle {
                    center,
                    radius_meters: radius,
                })
            }
            _ => None,
        }
    }
}

fn point(json: &Json) -> Option<Point> {
    match json.as_array()?.as_slice() {
        [lng, lat, ..] => {
            let (lng, lat) = (lng.as_f64()?, lat.as_f64()?);
            ((-180.0..=180.0).contains(&lng) && (-90.0..=90.0).contains(&lat))
                .then_some(Point { lng, lat })
        }
        _ => None,
    }
}

fn polygon(json: &Json) -> Option<Vec<Vec<Point>>> {
    let rings: Vec<Vec<Point>> = json
        .as_array()?
        .iter()
        .map(|ring| ring.as_array()?.iter().map(point).collect())
        .collect::<Option<_>>()?;
    // A ring needs at least three distinct corners (four with the closing one).
    (!rings.is_empty() && rings.iter().all(|ring| ring.len() >= 4)).then_some(rings)
}

/// Whether one side is a point and the other a region containing it (in
/// either order, as `CmpGeo` allows).
pub fn point_in_region(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Point(p), region) | (region, Shape::Point(p)) => contains(region, *p),
        _ => false,
    }
}

fn contains(region: &Shape, p: Point) -> bool {
    match region {
        Shape::Point(_) => false,
        Shape::Polygon(rings) => in_polygon(rings, p),
        Shape::MultiPolygon(polygons) => polygons.iter().any(|rings| in_polygon(rings, p)),
        Shape::Circle {
            center,
            radius_meters,
        } => distance_meters(*center, p) <= *radius_meters,
    }
}

fn in_polygon(rings: &[Vec<Point>], p: Point) -> bool {
    match rings.split_first() {
        Some((outline, holes)) => in_ring(outline, p) && !holes.iter().any(|hole| in_ring(hole, p)),
        None => false,
    }
}

/// Ray casting (even-odd rule) in the lng/lat plane.
fn in_ring(ring: &[Point], p: Point) -> bool {
    let mut inside = false;
    for edge in ring.windows(2) {
        let (a, b) = (edge[0], edge[1]);
        if (a.lat > p.lat) != (b.lat > p.lat) {
            let crossing = a.lng + (p.lat - a.lat) / (b.lat - a.lat) * (b.lng - a.lng);
            if p.lng < crossing {
                inside = !inside;
            }
        }
    }
    inside
}

/// Great-circle distance (haversine).
fn distance_meters(a: Point, b: Point) -> f64 {
    let (lat1, lat2) = (a.lat.to_radians(), b.lat.to_radians());
    let dlat = lat2 - lat1;
    let dlng = (b.lng - a.lng).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlng / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_METERS * h.sqrt().min(1.0).asin()
}

/// The GeoJSON text of a stored GeoJSON bin: a flags byte, a big-endian
/// u16 count of 8-byte cell ids, the cells, then the text.
pub fn stored_text(value: &[u8]) -> Option<&[u8]> {
    let count = u16::from_be_bytes([*value.get(1)?, *value.get(2)?]) as usize;
    value.get(3 + 8 * count..)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(text: &str) -> Shape {
        Shape::parse(text.as_bytes()).expect("valid shape")
    }

    #[test]
    fn points_in_polygons_holes_and_circles() {
        let square = shape(
            r#"{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],
               [[4,4],[6,4],[6,6],[4,6],[4,4]]]}"#,
        );
        let inside = shape(r#"{"type":"Point","coordinates":[2,3]}"#);
        let in_hole = shape(r#"{"type":"Point","coordinates":[5,5]}"#);
        let outside = shape(r#"{"type":"Point","coordinates":[11,5]}"#);
        assert!(point_in_region(&inside, &square));
        assert!(point_in_region(&square, &inside));
        assert!(!point_in_region(&in_hole, &square));
        assert!(!point_in_region(&outside, &square));
        assert!(!point_in_region(&inside, &inside));
        // About 111 km per degree of latitude.
        let circle = shape(r#"{"type":"AeroCircle","coordinates":[[0,0],112000]}"#);
        assert!(point_in_region(
            &shape(r#"{"type":"Point","coordinates":[0,1]}"#),
            &circle
        ));
        assert!(!point_in_region(
            &shape(r#"{"type":"Point","coordinates":[0,1.02]}"#),
            &circle
        ));
        assert!(Shape::parse(br#"{"type":"Point","coordinates":[200,0]}"#).is_none());
        assert!(Shape::parse(b"not json").is_none());
        assert_eq!(stored_text(b"\x00\x00\x00{}"), Some(&b"{}"[..]));
        assert_eq!(stored_text(b"\x00\x00\x01short"), None);
    }
}
