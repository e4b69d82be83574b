//! The node's HTTP port (`network { http { address A; port P } }`):
//! `/metrics` for Prometheus, the web console (`/`, its assets built into
//! the binary) and the console's JSON API under `/api/v1/`.
//!
//! Everything served reads the answers of the info commands, the same ones
//! `asinfo` sends: this node's are answered in-process, other nodes' (the
//! console shows the whole cluster) over their service port with the info
//! protocol, so the console also works against any Aerospike node.
//!
//! On a secured node (`security { }`) every route but `/metrics` asks for
//! a login (HTTP Basic: the browser's own prompt). Each request logs in
//! as that user (the admin protocol's LOGIN, the client's password hash
//! kept a few minutes per credential), and its info commands, on this node
//! and on the others it asks, run with that user's rights.
//!
//! The server runs on a thread of its own with a single-threaded runtime,
//! apart from the event loops: a slow scrape or console never delays a
//! client request's event loop.

mod api;
mod console;
pub mod metrics;
pub mod remote;

use crate::access::Secured;
use crate::info::Info;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the HTTP port needs of the node: its info answers, and its own
/// service address (to tell a request for this node from one for another).
pub struct Http {
    info: Arc<Info>,
    service: SocketAddr,
    /// Access control, on a secured node.
    secured: Option<Arc<Secured>>,
    /// Client password hashes of recent logins, by a keyed hash of the
    /// credential (bcrypt takes tens of milliseconds: not once a request).
    logins: Mutex<HashMap<u64, (String, String, Instant)>>,
    keys: std::collections::hash_map::RandomState,
}

/// A console user's login, for the info commands of one HTTP request.
#[derive(Clone)]
pub struct Login {
    pub user: String,
    /// The client's hash of the password (what LOGIN sends).
    pub client_hash: String,
    pub session: Arc<bolide_security::Session>,
}

tokio::task_local! {
    /// The login of the HTTP request being answered (secured nodes).
    pub static LOGIN: Login;
}

/// How long a credential's client hash is kept.
const LOGIN_CACHE: Duration = Duration::from_secs(300);
/// Credentials kept at most (older ones are forgotten).
const LOGIN_CACHE_MAX: usize = 1024;

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
            secured: None,
            logins: Mutex::new(HashMap::new()),
            keys: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Asks for a login on every route but `/metrics`.
    #[must_use]
    pub fn secured(mut self, secured: Option<Arc<Secured>>) -> Http {
        self.secured = secured;
        self
    }

    pub fn is_secured(&self) -> bool {
        self.secured.is_some()
    }

    /// Logs in with an `Authorization: Basic …` header's user and
    /// password from `client`; None if it is missing or refused.
    pub async fn login(&self, authorization: Option<&str>, client: SocketAddr) -> Option<Login> {
        use base64::Engine;
        let secured = Arc::clone(self.secured.as_ref()?);
        let encoded = authorization?.strip_prefix("Basic ")?.trim();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (user, password) = text.split_once(':')?;
        let key = {
            let mut hasher = self.keys.build_hasher();
            hasher.write(encoded.as_bytes());
            hasher.finish()
        };
        let cached = self.logins.lock().ok().and_then(|logins| {
            logins
                .get(&key)
                .filter(|(name, _, at)| name == user && at.elapsed() < LOGIN_CACHE)
                .map(|(_, hash, _)| hash.clone())
        });
        let (user, password) = (user.to_owned(), password.to_owned());
        let work = move || {
            let hash = cached.unwrap_or_else(|| bolide_security::password::client_hash(&password));
            let mut request = Vec::new();
            bolide_wire::admin::append_request(
                &mut request,
                bolide_wire::admin::command::LOGIN,
                &[
                    (bolide_wire::admin::field::USER, user.as_bytes()),
                    (bolide_wire::admin::field::CREDENTIAL, hash.as_bytes()),
                ],
            );
            let mut session = None;
            let mut out = Vec::new();
            let body = request.get(bolide_wire::frame::PROTO_HEADER_BYTES..)?;
            secured.admin(&mut session, client, None, body, &mut out);
            Some(Login {
                user,
                client_hash: hash,
                session: session?,
            })
        };
        let login = tokio::task::spawn_blocking(work).await.ok()??;
        if let Ok(mut logins) = self.logins.lock() {
            if logins.len() >= LOGIN_CACHE_MAX {
                logins.retain(|_, (_, _, at)| at.elapsed() < LOGIN_CACHE);
                if logins.len() >= LOGIN_CACHE_MAX {
                    logins.clear();
                }
            }
            logins.insert(
                key,
                (
                    login.user.clone(),
                    login.client_hash.clone(),
                    Instant::now(),
                ),
            );
        }
        Some(login)
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
    // On a secured node, as the request's user (or refused what needs a
    // permission, without one: `/metrics` reads only).
    let caller = match &node.secured {
        None => bolide_transaction::Caller::client(None),
        Some(secured) => {
            let session = LOGIN.try_with(|login| login.session.clone()).ok();
            secured.caller(None, session.as_ref())
        }
    };
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
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(error) = axum::serve(listener, service).await {
            tracing::error!(%error, "http server stopped");
        }
    });
}
