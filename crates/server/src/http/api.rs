//! Routes of the HTTP port.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` , `/assets/*` | the console (built into the binary) |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /api/v1/cluster[?seed=HOST:PORT]` | the nodes: the seed (default this node) and its peers |
//! | `GET /api/v1/node[?address=HOST:PORT][&config=1]` | one node's info answers (statistics, namespaces, sets, latencies, the roster of SC namespaces, …) |
//! | `POST /api/v1/truncate` `{"address","namespace","set"}` | truncates a set or namespace on that node |
//!
//! On a secured node every route but `/metrics` needs a login (HTTP Basic;
//! 401 with `WWW-Authenticate` otherwise), and runs as that user.
//!
//! The API hands out the info answers as they are (`{"statistics": "k=v;…"}`):
//! the console parses them, so what it shows is what `asinfo` shows.

use super::remote::{self, parse_peers};
use super::{console, local_info, local_service, metrics, metrics_answers, Http, InfoAnswers};
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

type Shared = Arc<Http>;

pub fn router(node: Arc<Http>) -> Router {
    Router::new()
        .route("/", get(console::index))
        .route("/assets/{file}", get(console::asset))
        .route("/metrics", get(scrape))
        .route("/api/v1/cluster", get(cluster))
        .route("/api/v1/node", get(node_info))
        .route("/api/v1/truncate", post(truncate))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node),
            require_login,
        ))
        .with_state(node)
}

/// On a secured node, answers 401 to a request without a valid login, and
/// runs the others as their user. `/metrics` stays open (node figures, no
/// records; docs/security.md).
async fn require_login(
    State(node): State<Shared>,
    ConnectInfo(client): ConnectInfo<std::net::SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    if !node.is_secured() || request.uri().path() == "/metrics" {
        return next.run(request).await;
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    match node.login(authorization.as_deref(), client).await {
        Some(login) => super::LOGIN.scope(login, next.run(request)).await,
        None => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"bolide\", charset=\"UTF-8\"",
            )],
            Json(json!({ "ok": false, "error": "login required" })),
        )
            .into_response(),
    }
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such page")
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "ok": false, "error": message }))).into_response()
}

async fn scrape(State(node): State<Shared>) -> Response {
    let text = metrics::render(&metrics_answers(&node));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[derive(Deserialize)]
struct ClusterQuery {
    seed: Option<String>,
}

/// The seed and the peers it names. Each entry says whether it is this
/// node (answered in-process) and, for the seed, its name.
async fn cluster(State(node): State<Shared>, Query(query): Query<ClusterQuery>) -> Response {
    let seed = query.seed.filter(|seed| !seed.trim().is_empty());
    let commands = [
        "node",
        "service-clear-std",
        "peers-clear-std",
        "cluster-name",
    ]
    .map(str::to_owned)
    .to_vec();
    let (answers, seed_address) = match &seed {
        Some(seed) if !is_local(&node, seed) => {
            if let Err(message) = check_address(seed) {
                return error(StatusCode::BAD_REQUEST, &message);
            }
            match remote::info(seed, &commands).await {
                Ok(answers) => (answers, seed.clone()),
                Err(message) => return error(StatusCode::BAD_GATEWAY, &message),
            }
        }
        _ => (
            local_info(&node, &commands),
            local_service(&node).to_string(),
        ),
    };
    let mut nodes = vec![json!({
        "name": answers.get("node").unwrap_or_default(),
        "address": seed_address,
        "local": seed.as_deref().is_none_or(|seed| is_local(&node, seed)),
    })];
    for peer in parse_peers(answers.get("peers-clear-std").unwrap_or_default()) {
        nodes.push(json!({
            "name": peer.node_id,
            "address": peer.address,
            "local": is_local(&node, &peer.address),
        }));
    }
    Json(json!({
        "ok": true,
        "cluster_name": answers.get("cluster-name").unwrap_or_default(),
        "nodes": nodes,
    }))
    .into_response()
}

#[derive(Deserialize)]
struct NodeQuery {
    address: Option<String>,
    config: Option<String>,
}

/// One node's info answers for the console.
async fn node_info(State(node): State<Shared>, Query(query): Query<NodeQuery>) -> Response {
    let address = query.address.filter(|address| !address.trim().is_empty());
    let with_config = query.config.as_deref() == Some("1");
    let first: Vec<String> = [
        "node",
        "build",
        "version",
        "edition",
        "cluster-name",
        "service-clear-std",
        "statistics",
        "namespaces",
        "sets",
        "latencies:",
        "latency-histograms",
        "roster:",
    ]
    .map(str::to_owned)
    .to_vec();
    let result = match address.as_deref() {
        Some(address) if !is_local(&node, address) => {
            if let Err(message) = check_address(address) {
                return error(StatusCode::BAD_REQUEST, &message);
            }
            remote_node(address, first, with_config).await
        }
        _ => Ok(local_node(&node, first, with_config)),
    };
    match result {
        Ok(answers) => Json(json!({
            "ok": true,
            "address": address.unwrap_or_else(|| local_service(&node).to_string()),
            "info": answers.into_map(),
        }))
        .into_response(),
        Err(message) => error(StatusCode::BAD_GATEWAY, &message),
    }
}

/// Per-namespace commands, once the namespaces are known.
fn namespace_commands(answers: &InfoAnswers, with_config: bool) -> Vec<String> {
    let mut commands = vec!["bins".to_owned()];
    for namespace in answers.namespaces() {
        commands.push(format!("namespace/{namespace}"));
        if with_config {
            commands.push(format!("get-config:context=namespace;id={namespace}"));
        }
    }
    if with_config {
        commands.push("get-config:context=service".to_owned());
        commands.push("get-config:context=network".to_owned());
    }
    commands
}

fn local_node(node: &Http, first: Vec<String>, with_config: bool) -> InfoAnswers {
    let mut answers = local_info(node, &first);
    let more = local_info(node, &namespace_commands(&answers, with_config));
    answers.merge(more);
    answers
}

async fn remote_node(
    address: &str,
    first: Vec<String>,
    with_config: bool,
) -> Result<InfoAnswers, String> {
    let mut answers = remote::info(address, &first).await?;
    let more = remote::info(address, &namespace_commands(&answers, with_config)).await?;
    answers.merge(more);
    Ok(answers)
}

#[derive(Deserialize)]
struct TruncateRequest {
    address: Option<String>,
    namespace: String,
    set: Option<String>,
}

/// Truncates a set (or, without one, a namespace) on one node. The console
/// asks the operator to confirm first.
async fn truncate(State(node): State<Shared>, Json(request): Json<TruncateRequest>) -> Response {
    let set = request.set.filter(|set| !set.is_empty());
    for (what, name) in [
        ("namespace", Some(&request.namespace)),
        ("set", set.as_ref()),
    ] {
        let Some(name) = name else { continue };
        if name.is_empty() || name.len() > 63 || name.contains([';', ':', '=', '\n', '\t']) {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("bad {what} name '{name}'"),
            );
        }
    }
    let command = match &set {
        Some(set) => format!("truncate:namespace={};set={set}", request.namespace),
        None => format!("truncate-namespace:namespace={}", request.namespace),
    };
    let remote_address = match request.address.as_deref() {
        Some(address) if !address.is_empty() && !is_local(&node, address) => {
            if let Err(message) = check_address(address) {
                return error(StatusCode::BAD_REQUEST, &message);
            }
            Some(address)
        }
        _ => None,
    };
    let ask = |commands: Vec<String>| {
        let node = &node;
        async move {
            match remote_address {
                Some(address) => remote::info(address, &commands).await,
                None => Ok(local_info(node, &commands)),
            }
        }
    };
    // The truncate command accepts a namespace the node does not hold (as
    // Aerospike does, for the nodes that hold it); the console names the
    // operator's typo instead.
    let namespaces = match ask(vec!["namespaces".to_owned()]).await {
        Ok(answers) => answers.get("namespaces").unwrap_or_default().to_owned(),
        Err(message) => return error(StatusCode::BAD_GATEWAY, &message),
    };
    if !namespaces.split(';').any(|name| name == request.namespace) {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({ "ok": false, "error": "ERROR:20:namespace not found on node" })),
        )
            .into_response();
    }
    let answers = match ask(vec![command.clone()]).await {
        Ok(answers) => answers,
        Err(message) => return error(StatusCode::BAD_GATEWAY, &message),
    };
    let answer = answers.get(&command).unwrap_or_default().to_owned();
    if answer.eq_ignore_ascii_case("ok") {
        tracing::info!(%command, "truncate from the console");
        Json(json!({ "ok": true, "answer": answer })).into_response()
    } else {
        let status = if answer.starts_with("ERROR:20") {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::BAD_REQUEST
        };
        (status, Json(json!({ "ok": false, "error": answer }))).into_response()
    }
}

/// Whether `address` names this node's own service port.
fn is_local(node: &Http, address: &str) -> bool {
    let own = local_service(node);
    let port = own.port().to_string();
    let Some((host, candidate_port)) = address.rsplit_once(':') else {
        return false;
    };
    if candidate_port != port {
        return false;
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == own.ip().to_string()
        || (own.ip().is_loopback() && (host == "localhost" || host == "127.0.0.1"))
}

/// `host:port` with a port number; a clear error otherwise.
fn check_address(address: &str) -> Result<(), String> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("'{address}' is not HOST:PORT"));
    };
    if host.is_empty() || port.parse::<u16>().map_or(true, |port| port == 0) {
        return Err(format!("'{address}' is not HOST:PORT"));
    }
    Ok(())
}

impl InfoAnswers {
    fn merge(&mut self, other: InfoAnswers) {
        let mut map = std::mem::take(self).into_map();
        map.extend(other.into_map());
        *self = InfoAnswers::from_pairs(map);
    }
}
