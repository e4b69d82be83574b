//! The node's HTTP port (`network { http { address A; port P } }`):
//! `/metrics` for Prometheus, the web console (`/`, its assets built into
//! the binary) and the console's JSON API under `/api/v1/`.
//!
//! Everything served reads the answers of the info commands, the same ones
//! `asinfo` sends: this node's are answered in-process, other nodes' (the
//! console shows the whole cluster) over their service port with the info
//! protocol, so the console also works against any Aerospike node.
//!
//! The server runs on a thread of its own with a single-threaded runtime,
//! apart from the event loops: a slow scrape or console never delays a
//! client request's event loop.

mod api;
mod console;
pub mod metrics;
pub mod remote;

use crate::info::Info;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;

/// What the HTTP port needs of the node: its info answers, and its own
/// service address (to tell a request for this node from one for another).
pub struct Http {
    info: Arc<Info>,
    service: SocketAddr,
}

impl Http {
    /// `service_address`/`service_port`: the node's service listener.
    pub fn new(info: Arc<Info>, service_address: IpAddr, service_port: u16) -> Http {
        // A local client reaches a wildcard listener on the loopback.
        let address = if service_address.is_unspecified() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            service_address
        };
        Http {
            info,
            service: SocketAddr::new(address, service_port),
        }
    }
}

/// Answers of info commands, by command text.
#[derive(Clone, Debug, Default)]
pub struct InfoAnswers {
    answers: HashMap<String, String>,
}

impl InfoAnswers {
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        InfoAnswers {
            answers: pairs.into_iter().collect(),
        }
    }

    /// Parses an info response body: `command\tvalue\n` per command.
    pub fn parse(body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body);
        let answers = text
            .split('\n')
            .filter(|line| !line.is_empty())
            .map(|line| match line.split_once('\t') {
                Some((command, value)) => (command.to_owned(), value.to_owned()),
                None => (line.to_owned(), String::new()),
            })
            .collect();
        InfoAnswers { answers }
    }

    pub fn get(&self, command: &str) -> Option<&str> {
        self.answers.get(command).map(String::as_str)
    }

    pub fn namespaces(&self) -> Vec<&str> {
        self.get("namespaces")
            .unwrap_or_default()
            .split(';')
            .filter(|name| !name.is_empty())
            .collect()
    }

    pub fn into_map(self) -> HashMap<String, String> {
        self.answers
    }
}

/// Answers `commands` on this node, in-process.
pub fn local_info(node: &Http, commands: &[String]) -> InfoAnswers {
    let body = commands.join("\n");
    let mut out = Vec::new();
    // The HTTP port has no login yet: it asks as an open client.
    let caller = bolide_transaction::Caller::client(None);
    node.info
        .answer(body.as_bytes(), local_service(node), &caller, &mut out);
    InfoAnswers::parse(&out)
}

/// This node's service address, as a local client would reach it.
pub fn local_service(node: &Http) -> SocketAddr {
    node.service
}

/// What `/metrics` asks this node.
pub fn metrics_answers(node: &Http) -> InfoAnswers {
    let mut commands: Vec<String> = [
        "node",
        "build",
        "version",
        "cluster-name",
        "statistics",
        "namespaces",
        "sets",
        "latency-histograms",
    ]
    .iter()
    .map(|command| (*command).to_owned())
    .collect();
    for namespace in node.info.namespace_names() {
        commands.push(format!("namespace/{namespace}"));
    }
    local_info(node, &commands)
}

/// Binds the HTTP port (an error here stops the node, like the service
/// port) and serves it on a thread of its own.
pub fn start(node: Arc<Http>, address: Option<SocketAddr>) -> Result<Option<SocketAddr>, String> {
    let Some(address) = address else {
        return Ok(None);
    };
    let listener = TcpListener::bind(address)
        .map_err(|error| format!("cannot listen on {address} (http): {error}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|error| format!("cannot set non-blocking: {error}"))?;
    let bound = listener.local_addr().unwrap_or(address);
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || serve(node, listener))
        .map_err(|error| format!("cannot start http thread: {error}"))?;
    Ok(Some(bound))
}

fn serve(node: Arc<Http>, listener: TcpListener) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the http runtime");
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "cannot adopt the http listener");
                return;
            }
        };
        let router = api::router(node);
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "http server stopped");
        }
    });
}
