//! The web console's files, built into the binary: nothing is fetched from
//! anywhere else, so the console works on a machine with no internet.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("console/index.html");
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("console/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("console/app.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("console/favicon.svg"),
    ),
];

pub async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX,
    )
        .into_response()
}

pub async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, *content_type),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}
