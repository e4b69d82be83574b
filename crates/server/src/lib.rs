//! The bolided node: configuration, listeners, one event loop per core,
//! connections (`net`: one connection type, plain TCP or TLS), info
//! commands, the HTTP port, the background supervisor (expiry, eviction,
//! memory guard) and the node's side of the cluster (`cluster`).
//!
//! `node` builds the parts and hands each the narrow context it needs; the
//! modules import each other in one direction only (`tests/modules.rs`).
//!
//! Depends on every lower layer (`bolide-types`, `bolide-wire`,
//! `bolide-store`, `bolide-cluster`, `bolide-udf`, `bolide-transaction`);
//! nothing depends on it but the fuzzing checks.
#![deny(unsafe_code)]

pub mod access;
pub mod budget;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod counters;
pub mod http;
pub mod info;
mod info_config;
mod info_sindex;
mod info_udf;
pub mod latency;
pub mod net;
pub mod node;
pub mod redis;
pub mod supervisor;
pub mod system;

use crate::config::Config;
use crate::net::tls::{NodeTls, Refreshed, ServerTls};
use crate::node::Node;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Runs a node until SIGTERM or SIGINT. Returns an error (already worded
/// for the operator) if it cannot start.
pub fn run(config: Config) -> Result<(), String> {
    system::keep_large_allocations_mapped();
    let node = Node::new(config)?;
    // Defragmentation is background work: at nice 10 it yields the core to
    // the event loops when they are busy.
    let storage = node.store().start_storage(Arc::new(|| {
        system::set_thread_nice(system::BACKGROUND_NICE)
    }));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start runtime: {error}"))?;
    // Signal handlers first: from the moment the port accepts connections,
    // SIGTERM and SIGINT mean a clean shutdown, never the default action.
    let signals = {
        let _context = runtime.enter();
        Signals::install()?
    };
    let config = Arc::clone(&node.config);
    let mut listeners = vec![Listener {
        socket: net::bind(SocketAddr::new(config.service_address, config.service_port))?,
        tls: None,
    }];
    if let Some(port) = config.info_port {
        listeners.push(Listener {
            socket: net::bind(SocketAddr::new(config.service_address, port))?,
            tls: None,
        });
    }
    // Every TLS context is read again each tls-refresh-period: the
    // listeners' and, between nodes, the dialling side's too.
    let mut refreshed: Vec<Refreshed> = [
        &node.cluster.cluster.fabric_tls,
        &node.cluster.cluster.heartbeat_tls,
    ]
    .into_iter()
    .filter_map(std::sync::OnceLock::get)
    .flat_map(NodeTls::refreshed)
    .collect();
    if let Some(service_tls) = &config.service_tls {
        let listener = tls_listener(&config, service_tls, config.service_address)?;
        refreshed.extend(listener.tls.clone().map(Refreshed::Listener));
        listeners.push(listener);
    }
    let mut redis_listeners: Vec<Listener> = redis_listener(&config)?
        .map(|socket| Listener { socket, tls: None })
        .into_iter()
        .collect();
    if let Some(redis_tls) = &config.redis_tls {
        let listener = tls_listener(&config, redis_tls, config.redis_address)
            .map_err(|error| format!("network redis: {error}"))?;
        refreshed.extend(listener.tls.clone().map(Refreshed::Listener));
        redis_listeners.push(listener);
    }
    if !refreshed.is_empty() {
        start_tls_refresh(
            refreshed,
            config.tls_refresh_period_seconds,
            Arc::clone(&node.counters),
        )?;
    }
    let redis_shared = Arc::new(bolide_redis::Shared::new(
        config
            .redis_namespace
            .clone()
            .or_else(|| {
                config
                    .namespaces
                    .first()
                    .map(|namespace| namespace.name.clone())
            })
            .unwrap_or_default(),
        config.redis_port.unwrap_or(0),
    ));
    // Scripts and function libraries go to every node of the cluster, and
    // the libraries are kept in the work directory.
    {
        let cluster = Arc::clone(&node.cluster);
        redis_shared
            .scripts
            .set_spread(Arc::new(move |module, key, value, deleted| {
                cluster.cluster.share(module, key, value, deleted)
            }));
        if let Some(directory) = &config.work_directory {
            // Where the node keeps its state (function libraries, SC and
            // security state): made if missing, or the node does not start.
            std::fs::create_dir_all(directory)
                .map_err(|error| format!("work-directory {}: {error}", directory.display()))?;
            redis_shared
                .scripts
                .set_save_path(directory.join("redis-functions.rdb"));
        }
        let _ = node
            .cluster
            .redis_scripts
            .set(Arc::clone(&redis_shared.scripts));
    }
    // Only a node configured to cluster listens for other nodes.
    let service = &node.cluster.cluster;
    let (fabric_listener, heartbeat_listener) = if config.clustering {
        let fabric = net::bind(service.fabric_bind).map_err(|error| format!("fabric: {error}"))?;
        (
            Some(fabric),
            Some(cluster::heartbeat::bind(service.heartbeat_bind)?),
        )
    } else {
        (None, None)
    };
    if let Some(path) = &config.pidfile {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|error| format!("cannot write pidfile {}: {error}", path.display()))?;
    }

    // One single-threaded event loop per core; the acceptor deals
    // connections to them round-robin.
    let connections = Arc::new(node.connection_context());
    let mut loops = Vec::new();
    for index in 0..config.service_threads {
        let (sender, receiver) = mpsc::unbounded_channel::<Incoming>();
        let connections = Arc::clone(&connections);
        let cluster = Arc::clone(&node.cluster);
        let latencies = Arc::clone(&node.latencies);
        let redis = Arc::clone(&redis_shared);
        std::thread::Builder::new()
            .name(format!("service-{index}"))
            .spawn(move || {
                latencies.bind_thread(index);
                event_loop(connections, cluster, redis, receiver)
            })
            .map_err(|error| format!("cannot start service thread: {error}"))?;
        loops.push(sender);
    }
    let http_address = config
        .http_port
        .map(|port| SocketAddr::new(config.http_address, port));
    if let Some(address) = http::start(Arc::new(node.http()), http_address)? {
        tracing::info!(%address, "http: /metrics and the console");
    }
    supervisor::start(Arc::clone(&node.cluster), config.stop_writes_sys_memory_pct);
    {
        let budget = Arc::clone(&node.budget);
        std::thread::Builder::new()
            .name("budget".into())
            .spawn(move || budget.run_enforcer())
            .map_err(|error| format!("cannot start budget enforcer: {error}"))?;
    }
    latency::start_ticker(Arc::clone(&node.latencies), config.ticker_interval_seconds);
    cluster::migrate::start(Arc::clone(&node.cluster))?;
    cluster::remote::start_fabric_thread(Arc::clone(&node.cluster))?;
    cluster::heartbeat::start(Arc::clone(&node.cluster), heartbeat_listener)?;
    if config.mesh_seeds.is_empty() {
        // Alone by configuration: the node forms its own cluster at once;
        // clients connect to a node that serves.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while service.routing.load().generation < 0 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    runtime.block_on(accept(
        &node,
        listeners,
        fabric_listener,
        redis_listeners,
        Arc::clone(&redis_shared),
        loops,
        signals,
    ))?;
    tracing::info!("shutting down");
    // (SC) Nothing is served from here on, so that what the storage
    // flushes next is everything this node acknowledged: the state saved
    // after it is marked clean, and the next start trusts its copies.
    let sc_states = cluster::sc::stop_serving(&node.cluster);
    for threads in storage {
        // Writes and syncs everything appended so far.
        threads.shutdown();
    }
    if let Some(states) = sc_states {
        cluster::sc::save_clean(&node.cluster, states);
    }
    if let Some(path) = &config.pidfile {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// SIGTERM and SIGINT streams, kept for the node's life so that a signal
/// arriving between two polls is kept for the next one.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            terminate: signal(SignalKind::terminate())
                .map_err(|error| format!("cannot handle SIGTERM: {error}"))?,
            interrupt: signal(SignalKind::interrupt())
                .map_err(|error| format!("cannot handle SIGINT: {error}"))?,
        })
    }
}

/// A client listener, and the TLS context its connections start with.
struct Listener {
    socket: TcpListener,
    tls: Option<ServerTls>,
}

/// A TLS listener (the service's or the Redis port's): its certificate,
/// key and CA are read now, so a bad file stops the node with a message
/// naming it. It listens on `tls-address`, else on `default_address`.
fn tls_listener(
    config: &Config,
    service_tls: &config::ServiceTls,
    default_address: std::net::IpAddr,
) -> Result<Listener, String> {
    let spec = config
        .tls
        .iter()
        .find(|spec| spec.name == service_tls.name)
        .ok_or_else(|| format!("tls-name {}: no such tls context", service_tls.name))?;
    let tls = ServerTls::new(spec, &service_tls.authenticate_client)
        .map_err(|error| format!("tls {}: {error}", spec.name))?;
    let address = service_tls.address.unwrap_or(default_address);
    Ok(Listener {
        socket: net::bind(SocketAddr::new(address, service_tls.port))?,
        tls: Some(tls),
    })
}

/// Reads the TLS contexts' files again every `period_seconds`
/// (`tls-refresh-period`): changed certificates, keys, CAs and blacklists
/// apply to the connections accepted or dialled next; a failed read keeps
/// the context in force and is logged and counted.
fn start_tls_refresh(
    contexts: Vec<Refreshed>,
    period_seconds: u32,
    counters: Arc<counters::NodeCounters>,
) -> Result<(), String> {
    let period = std::time::Duration::from_secs(u64::from(period_seconds));
    std::thread::Builder::new()
        .name("tls-refresh".into())
        .spawn(move || loop {
            std::thread::sleep(period);
            for tls in &contexts {
                match tls.reload() {
                    Ok(true) => {
                        counters.tls_certificate_reloads.fetch_add(1, Relaxed);
                        tracing::info!(
                            tls = tls.name(),
                            side = tls.side(),
                            "TLS: certificates reloaded"
                        );
                    }
                    Ok(false) => {}
                    Err(error) => {
                        counters
                            .tls_certificate_reload_failures
                            .fetch_add(1, Relaxed);
                        tracing::error!(tls = tls.name(), side = tls.side(), %error, "TLS: cannot reload, keeping the certificates in force");
                    }
                }
            }
        })
        .map(|_| ())
        .map_err(|error| format!("cannot start the TLS refresh thread: {error}"))
}

/// The RESP listener, if the node serves Redis. Without a configuration
/// file a taken 6379 only warns; a configured port must be free.
fn redis_listener(config: &Config) -> Result<Option<TcpListener>, String> {
    let Some(port) = config.redis_port else {
        return Ok(None);
    };
    let address = SocketAddr::new(config.redis_address, port);
    match net::bind(address) {
        Ok(socket) => Ok(Some(socket)),
        Err(error) if config.redis_optional => {
            tracing::warn!(
                "redis: {error} (is a Redis server running?); the RESP port is off. \
                 Set network {{ redis {{ port N }} }} in a configuration file to choose another"
            );
            Ok(None)
        }
        Err(error) => Err(format!("network redis: {error}")),
    }
}

/// A connection handed to an event loop.
enum Incoming {
    /// A Redis client's socket, its `CLIENT ID` (taken in accept order)
    /// and its listener's TLS context.
    Redis(std::net::TcpStream, u64, Option<ServerTls>),
    /// A client's socket, and its listener's TLS context.
    Client(std::net::TcpStream, Option<ServerTls>),
    Fabric(std::net::TcpStream),
}

async fn accept(
    node: &Node,
    listeners: Vec<Listener>,
    fabric_listener: Option<TcpListener>,
    redis_listeners: Vec<Listener>,
    redis_shared: Arc<bolide_redis::Shared>,
    loops: Vec<mpsc::UnboundedSender<Incoming>>,
    mut signals: Signals,
) -> Result<(), String> {
    for Listener { socket, tls } in redis_listeners {
        let address = socket.local_addr().map_err(|error| error.to_string())?;
        let listener =
            tokio::net::TcpListener::from_std(socket).map_err(|error| error.to_string())?;
        if tls.is_some() {
            tracing::info!(%address, "listening (redis, TLS)");
        } else {
            tracing::info!(%address, "listening (redis)");
        }
        let loops = loops.clone();
        let counters = Arc::clone(&node.counters);
        let limit = node.config.proto_fd_max as u64;
        let redis_shared = Arc::clone(&redis_shared);
        tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        // Redis clients count against proto-fd-max too.
                        if counters.open_connections() >= limit {
                            counters.connections_refused.fetch_add(1, Relaxed);
                            continue;
                        }
                        let Ok(stream) = stream.into_std() else {
                            continue;
                        };
                        let id = redis_shared.take_client_id();
                        if let Some(sender) = loops.get(next % loops.len()) {
                            let _ = sender.send(Incoming::Redis(stream, id, tls.clone()));
                        }
                        next = next.wrapping_add(1);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "redis accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    let (connections, mut incoming) = mpsc::unbounded_channel();
    if let Some(fabric_listener) = fabric_listener {
        // Fabric connections from other nodes, dealt to the event loops
        // like clients (they serve replica writes and proxies).
        let address = fabric_listener
            .local_addr()
            .map_err(|error| error.to_string())?;
        let listener = tokio::net::TcpListener::from_std(fabric_listener)
            .map_err(|error| error.to_string())?;
        tracing::info!(%address, "listening (fabric)");
        let loops = loops.clone();
        tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let Ok(stream) = stream.into_std() else {
                            continue;
                        };
                        if let Some(sender) = loops.get(next % loops.len()) {
                            let _ = sender.send(Incoming::Fabric(stream));
                        }
                        next = next.wrapping_add(1);
                    }
                    Err(error) => {
                        tracing::warn!(%error, "fabric accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    for Listener { socket, tls } in listeners {
        let address = socket.local_addr().map_err(|error| error.to_string())?;
        let listener =
            tokio::net::TcpListener::from_std(socket).map_err(|error| error.to_string())?;
        if tls.is_some() {
            tracing::info!(%address, "listening (TLS)");
        } else {
            tracing::info!(%address, "listening");
        }
        let connections = connections.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        if connections.send((stream, tls.clone())).is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    tracing::info!(
        node = %node.name(),
        namespaces = %node.info.namespace_names().join(","),
        threads = node.config.service_threads,
        "bolided ready"
    );
    let counters = &node.counters;
    let mut next = 0usize;
    loop {
        tokio::select! {
            _ = signals.interrupt.recv() => return Ok(()),
            _ = signals.terminate.recv() => return Ok(()),
            accepted = incoming.recv() => {
                let Some((stream, tls)) = accepted else { return Ok(()) };
                if counters.open_connections() >= node.config.proto_fd_max as u64 {
                    counters.connections_refused.fetch_add(1, Relaxed);
                    drop(stream);
                    continue;
                }
                let Ok(stream) = stream.into_std() else { continue };
                counters.connections_opened.fetch_add(1, Relaxed);
                let target = next % loops.len();
                next = next.wrapping_add(1);
                if let Some(sender) = loops.get(target) {
                    let _ = sender.send(Incoming::Client(stream, tls));
                }
            }
        }
    }
}

fn event_loop(
    connections: Arc<connection::Context>,
    cluster: Arc<cluster::Context>,
    redis: Arc<bolide_redis::Shared>,
    mut receiver: mpsc::UnboundedReceiver<Incoming>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start event loop");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        while let Some(incoming) = receiver.recv().await {
            match incoming {
                Incoming::Client(stream, tls) => match tokio::net::TcpStream::from_std(stream) {
                    Ok(stream) => {
                        tokio::task::spawn_local(connection::serve(
                            Arc::clone(&connections),
                            stream,
                            tls,
                        ));
                    }
                    Err(error) => {
                        connections
                            .counters
                            .connections_closed
                            .fetch_add(1, Relaxed);
                        tracing::warn!(%error, "cannot adopt connection");
                    }
                },
                Incoming::Redis(stream, id, tls) => {
                    if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                        tokio::task::spawn_local(redis::serve(
                            Arc::clone(&connections),
                            Arc::clone(&redis),
                            stream,
                            id,
                            tls,
                        ));
                    }
                }
                Incoming::Fabric(stream) => {
                    if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                        tokio::task::spawn_local(cluster::fabric::serve(
                            Arc::clone(&cluster),
                            stream,
                        ));
                    }
                }
            }
        }
    });
}
