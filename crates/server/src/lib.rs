//! The bolided node: configuration, listeners, one event loop per core,
//! connections, info commands and the background supervisor (expiry,
//! eviction, memory guard).
//!
//! Depends on every lower layer (`bolide-types`, `bolide-wire`,
//! `bolide-store`, `bolide-transaction`); nothing depends on it.
#![deny(unsafe_code)]

pub mod budget;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod http;
pub mod info;
mod info_config;
mod info_sindex;
mod info_udf;
pub mod latency;
pub mod node;
pub mod supervisor;

use crate::config::Config;
use crate::node::Node;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Runs a node until SIGTERM or SIGINT. Returns an error (already worded
/// for the operator) if it cannot start.
pub fn run(config: Config) -> Result<(), String> {
    budget::keep_large_allocations_mapped();
    let node = Arc::new(Node::new(config)?);
    // Defragmentation is background work: at nice 10 it yields the core to
    // the event loops when they are busy.
    let storage = node.store.start_storage(Arc::new(|| {
        connection::set_thread_nice(connection::BACKGROUND_NICE)
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
    let config = &node.config;
    let mut listeners = vec![bind(SocketAddr::new(
        config.service_address,
        config.service_port,
    ))?];
    if let Some(port) = config.info_port {
        listeners.push(bind(SocketAddr::new(config.service_address, port))?);
    }
    // Only a node configured to cluster listens for other nodes.
    let (fabric_listener, heartbeat_listener) = if config.clustering {
        let fabric = bind(node.cluster.fabric_bind).map_err(|error| format!("fabric: {error}"))?;
        (Some(fabric), Some(cluster::heartbeat::bind(&node)?))
    } else {
        (None, None)
    };
    if let Some(path) = &config.pidfile {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .map_err(|error| format!("cannot write pidfile {}: {error}", path.display()))?;
    }

    // One single-threaded event loop per core; the acceptor deals
    // connections to them round-robin.
    let mut loops = Vec::new();
    for index in 0..config.service_threads {
        let (sender, receiver) = mpsc::unbounded_channel::<Incoming>();
        let node = node.clone();
        std::thread::Builder::new()
            .name(format!("service-{index}"))
            .spawn(move || {
                node.latencies.bind_thread(index);
                event_loop(node, receiver)
            })
            .map_err(|error| format!("cannot start service thread: {error}"))?;
        loops.push(sender);
    }
    if let Some(address) = http::start(node.clone())? {
        tracing::info!(%address, "http: /metrics and the console");
    }
    supervisor::start(node.clone());
    {
        let node = node.clone();
        std::thread::Builder::new()
            .name("budget".into())
            .spawn(move || node.budget.run_enforcer())
            .map_err(|error| format!("cannot start budget enforcer: {error}"))?;
    }
    latency::start_ticker(node.clone());
    cluster::migrate::start(node.clone())?;
    cluster::remote::start_fabric_thread(node.clone())?;
    cluster::heartbeat::start(node.clone(), heartbeat_listener)?;
    if node.config.mesh_seeds.is_empty() {
        // Alone by configuration: the node forms its own cluster at once;
        // clients connect to a node that serves.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while node.cluster.routing.load().generation < 0 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    runtime.block_on(accept(
        node.clone(),
        listeners,
        fabric_listener,
        loops,
        signals,
    ))?;
    tracing::info!("shutting down");
    for threads in storage {
        // Writes and syncs everything appended so far.
        threads.shutdown();
    }
    if let Some(path) = &node.config.pidfile {
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

/// A connection handed to an event loop.
pub(crate) enum Incoming {
    Client(std::net::TcpStream),
    Fabric(std::net::TcpStream),
}

pub(crate) fn bind(address: SocketAddr) -> Result<TcpListener, String> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|error| format!("cannot create socket for {address}: {error}"))?;
    socket
        .set_reuse_address(true)
        .map_err(|error| format!("cannot set SO_REUSEADDR: {error}"))?;
    socket
        .bind(&address.into())
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    socket
        .listen(1024)
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    socket
        .set_nonblocking(true)
        .map_err(|error| format!("cannot set non-blocking: {error}"))?;
    Ok(socket.into())
}

async fn accept(
    node: Arc<Node>,
    listeners: Vec<TcpListener>,
    fabric_listener: Option<TcpListener>,
    loops: Vec<mpsc::UnboundedSender<Incoming>>,
    mut signals: Signals,
) -> Result<(), String> {
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
    for listener in listeners {
        let address = listener.local_addr().map_err(|error| error.to_string())?;
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|error| error.to_string())?;
        tracing::info!(%address, "listening");
        let connections = connections.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        if connections.send(stream).is_err() {
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
        namespaces = %node.store.namespaces().iter().map(|ns| ns.name()).collect::<Vec<_>>().join(","),
        threads = node.config.service_threads,
        "bolided ready"
    );
    let mut next = 0usize;
    loop {
        tokio::select! {
            _ = signals.interrupt.recv() => return Ok(()),
            _ = signals.terminate.recv() => return Ok(()),
            stream = incoming.recv() => {
                let Some(stream) = stream else { return Ok(()) };
                if node.open_connections() >= node.config.proto_fd_max as u64 {
                    node.connections_refused.fetch_add(1, Relaxed);
                    drop(stream);
                    continue;
                }
                let Ok(stream) = stream.into_std() else { continue };
                node.connections_opened.fetch_add(1, Relaxed);
                let target = next % loops.len();
                next = next.wrapping_add(1);
                if let Some(sender) = loops.get(target) {
                    let _ = sender.send(Incoming::Client(stream));
                }
            }
        }
    }
}

fn event_loop(node: Arc<Node>, mut receiver: mpsc::UnboundedReceiver<Incoming>) {
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
                Incoming::Client(stream) => match tokio::net::TcpStream::from_std(stream) {
                    Ok(stream) => {
                        tokio::task::spawn_local(connection::serve(node.clone(), stream));
                    }
                    Err(error) => {
                        node.connections_closed.fetch_add(1, Relaxed);
                        tracing::warn!(%error, "cannot adopt connection");
                    }
                },
                Incoming::Fabric(stream) => {
                    if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                        tokio::task::spawn_local(cluster::fabric::serve(node.clone(), stream));
                    }
                }
            }
        }
    });
}
