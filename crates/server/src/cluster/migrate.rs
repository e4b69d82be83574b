//! Migrations, on a thread of their own at background priority: sending
//! partitions to the nodes the rebalance names (emigrations), receiving
//! them on bulk fabric connections (immigrations), and dropping copies a
//! node no longer holds.
//!
//! An emigration asks the receiver whether it expects the partition from
//! this node under this map (START), sends a snapshot of the partition's
//! records and tombstones in frames of up to 256 KiB, each acknowledged,
//! and ends with DONE. Writes made meanwhile reach the receiver as replica
//! writes (it is one of the partition's holders), and every copy is
//! applied by conflict resolution, so the order does not matter. A
//! handoff (the acting master sending to the final master) first closes
//! the partition's gate and waits for the writes under way, so the new
//! master starts with every acknowledged write and no two nodes take
//! writes at once. Anything that fails is retried from START while the map
//! is the same; a new map cancels it.

use super::fabric::{call, copy_of, image_of, wins, Answer};
use super::Context as Node;
use super::{bump, Event};
use bolide_cluster::codec;
use bolide_cluster::fabric::{code, Channel, Fabric, Image};
use bolide_cluster::node::DataEvent;
use bolide_cluster::partitions::{Emigration, EmigrationKind};
use bolide_cluster::NodeId;
use bolide_types::now_citrusleaf_seconds;
use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::rc::Rc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Bytes of record images in one migration frame.
const FRAME_BYTES: usize = 256 * 1024;
/// Partitions each migrate thread setting sends at once.
const PARTITIONS_PER_THREAD: usize = 4;
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a handoff waits for writes under way before it gives up (and
/// retries).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Immigrations under way: (namespace, partition, from).
type Incoming = Rc<RefCell<HashSet<(usize, u16, NodeId)>>>;

/// What the migrate thread is asked to do.
pub enum Command {
    Emigrate(Emigration),
    /// Drop this node's copy of a partition.
    Drop {
        namespace: usize,
        pid: u16,
    },
    /// A bulk connection from `peer` (its HELLO already read).
    Bulk {
        stream: std::net::TcpStream,
        leftover: Vec<u8>,
        peer: NodeId,
    },
}

/// Starts the migrate thread.
pub fn start(node: Arc<Node>) -> Result<(), String> {
    let commands = node
        .cluster
        .take_migrations()
        .ok_or("migrate thread already started")?;
    std::thread::Builder::new()
        .name("migrate".into())
        .spawn(move || {
            // Background work: it yields the cores to the event loops.
            crate::system::set_thread_nice(crate::system::BACKGROUND_NICE);
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                tracing::error!("cannot start the migrate thread");
                return;
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, run(node, commands));
        })
        .map_err(|error| format!("cannot start the migrate thread: {error}"))?;
    Ok(())
}

async fn run(node: Arc<Node>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let queue: Rc<RefCell<VecDeque<Emigration>>> = Rc::default();
    let wake = Rc::new(tokio::sync::Notify::new());
    let workers = node.cluster.migrate_threads * PARTITIONS_PER_THREAD;
    for _ in 0..workers {
        let node = Arc::clone(&node);
        let queue = Rc::clone(&queue);
        let wake = Rc::clone(&wake);
        tokio::task::spawn_local(async move {
            loop {
                let next = queue.borrow_mut().pop_front();
                match next {
                    Some(emigration) => emigrate(&node, emigration).await,
                    None => wake.notified().await,
                }
            }
        });
    }
    let incoming: Incoming = Rc::default();
    while let Some(command) = commands.recv().await {
        match command {
            Command::Emigrate(emigration) => {
                queue.borrow_mut().push_back(emigration);
                wake.notify_one();
            }
            Command::Drop { namespace, pid } => {
                if let Some(ns) = node.store.namespaces().get(namespace) {
                    let dropped = ns.drop_partition(usize::from(pid));
                    tracing::debug!(target: "cluster", namespace = ns.name(), pid, dropped, "dropped extra copy");
                }
            }
            Command::Bulk {
                stream,
                leftover,
                peer,
            } => {
                let node = Arc::clone(&node);
                let incoming = Rc::clone(&incoming);
                tokio::task::spawn_local(async move {
                    let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
                        return;
                    };
                    if serve_bulk(&node, stream, leftover, peer, &incoming)
                        .await
                        .is_err()
                    {
                        bump(&node.cluster.counters.fabric_bad_frames);
                    }
                    bump(&node.cluster.counters.fabric_connections_closed);
                });
            }
        }
    }
}

fn current(node: &Node, key: u64) -> bool {
    node.cluster.routing.load().key == key
}

/// Sends one partition, retrying while the map stays the same.
async fn emigrate(node: &Arc<Node>, emigration: Emigration) {
    // The map that asked for it may still be on its way to the routing.
    let until = Instant::now() + Duration::from_secs(2);
    while !current(node, emigration.key) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut pause = Duration::from_millis(50);
    while current(node, emigration.key) {
        match emigrate_once(node, &emigration).await {
            Ok(()) => {
                bump(&node.cluster.counters.migrate_partitions_sent);
                node.cluster.send(Event::Data(DataEvent::EmigrationDone {
                    namespace: emigration.namespace,
                    pid: emigration.pid,
                    to: emigration.to,
                    key: emigration.key,
                }));
                return;
            }
            Err(()) => {
                if let Some(gate) = node
                    .cluster
                    .gates
                    .gate(emigration.namespace, usize::from(emigration.pid))
                {
                    gate.closed.store(false, SeqCst);
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

async fn step(
    node: &Arc<Node>,
    to: NodeId,
    encode: impl FnOnce(u64, &mut Vec<u8>),
) -> Result<Answer, ()> {
    call(
        node,
        to,
        Channel::Bulk,
        Instant::now() + STEP_TIMEOUT,
        encode,
    )
    .await
    .map_err(|_| ())
}

async fn emigrate_once(node: &Arc<Node>, emigration: &Emigration) -> Result<(), ()> {
    let Emigration {
        namespace,
        pid,
        to,
        key,
        kind,
    } = *emigration;
    let ns = node.store.namespaces().get(namespace).cloned().ok_or(())?;
    let name = ns.name().to_owned();
    let started = step(node, to, |id, out| {
        Fabric::MigrateStart {
            id,
            namespace: &name,
            pid,
            key,
        }
        .encode(out)
    })
    .await
    .inspect_err(|()| tracing::debug!(target: "migrate", pid, to, "start: no answer"))?;
    if started.ack_code() != code::OK {
        tracing::debug!(target: "migrate", pid, to, code = started.ack_code(), "start refused");
        return Err(());
    }
    let mut skipped = 0;
    let copies = ns.snapshot_partition(usize::from(pid), now_citrusleaf_seconds(), &mut skipped);
    node.cluster
        .counters
        .migrate_records_skipped
        .fetch_add(skipped, Relaxed);
    let sleep_us = u64::from(ns.config.migrate_sleep_us);
    let mut start = 0;
    while start < copies.len() {
        if !current(node, key) {
            return Err(());
        }
        let mut bytes = 0;
        let mut end = start;
        while end < copies.len() && (bytes < FRAME_BYTES || end == start) {
            bytes += 64 + copies[end].record.as_ref().map_or(0, Vec::len);
            end += 1;
        }
        let images: Vec<Image<'_>> = copies[start..end]
            .iter()
            .map(|copy| image_of(&copy.as_copy()))
            .collect();
        let answer = step(node, to, |id, out| {
            Fabric::MigrateRecords {
                id,
                namespace: &name,
                pid,
                key,
                images,
            }
            .encode(out)
        })
        .await
        .inspect_err(|()| tracing::debug!(target: "migrate", pid, to, "records: no answer"))?;
        if answer.ack_code() != code::OK {
            tracing::debug!(target: "migrate", pid, to, code = answer.ack_code(), "records refused");
            return Err(());
        }
        node.cluster
            .counters
            .migrate_records_transmitted
            .fetch_add((end - start) as u64, Relaxed);
        if sleep_us > 0 {
            tokio::time::sleep(Duration::from_micros(sleep_us * (end - start) as u64)).await;
        }
        start = end;
    }
    if kind == EmigrationKind::Handoff {
        drain(node, namespace, usize::from(pid)).await.inspect_err(
            |()| tracing::debug!(target: "migrate", pid, to, "handoff: writes did not drain"),
        )?;
    }
    let done = step(node, to, |id, out| {
        Fabric::MigrateDone {
            id,
            namespace: &name,
            pid,
            key,
        }
        .encode(out)
    })
    .await
    .inspect_err(|()| tracing::debug!(target: "migrate", pid, to, "done: no answer"))?;
    if done.ack_code() != code::OK {
        tracing::debug!(target: "migrate", pid, to, code = done.ack_code(), "done refused");
        return Err(());
    }
    Ok(())
}

/// Closes the partition's gate (new writes go to the final master) and
/// waits until the writes under way have reached their copies.
async fn drain(node: &Node, namespace: usize, pid: usize) -> Result<(), ()> {
    let gate = node.cluster.gates.gate(namespace, pid).ok_or(())?;
    gate.closed.store(true, SeqCst);
    let until = Instant::now() + DRAIN_TIMEOUT;
    while gate.inflight.load(SeqCst) > 0 {
        if Instant::now() >= until {
            return Err(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Migration steps from `peer`, answered in order.
async fn serve_bulk(
    node: &Arc<Node>,
    mut stream: tokio::net::TcpStream,
    mut buffer: Vec<u8>,
    peer: NodeId,
    incoming: &Incoming,
) -> Result<(), ()> {
    let mut answers = Vec::new();
    loop {
        answers.clear();
        while let Some((header, body, total)) = codec::split_frame(&buffer).map_err(|_| ())? {
            let request = Fabric::decode(header.kind, body).map_err(|_| ())?;
            let (id, code) = immigrate(node, request, peer, incoming).await?;
            Fabric::Ack { id, code }.encode(&mut answers);
            buffer.drain(..total);
        }
        if !answers.is_empty() && stream.write_all(&answers).await.is_err() {
            return Ok(());
        }
        let start = buffer.len();
        buffer.resize(start + 256 * 1024, 0);
        use tokio::io::AsyncReadExt;
        let read = stream.read(&mut buffer[start..]).await.unwrap_or(0);
        buffer.truncate(start + read);
        if read == 0 {
            return Ok(());
        }
    }
}

/// One migration step from `peer`: (request id, answer code).
async fn immigrate(
    node: &Arc<Node>,
    request: Fabric<'_>,
    peer: NodeId,
    incoming: &Incoming,
) -> Result<(u64, u8), ()> {
    let routing = node.cluster.routing.load_full();
    let expected = |namespace: &str, pid: u16, key: u64| -> Option<usize> {
        if routing.key != key {
            return None;
        }
        let (index, _) = node.store.namespace_index(namespace.as_bytes())?;
        let member = routing.member_index(peer)?;
        let route = routing.namespaces.get(index)?.route(usize::from(pid));
        (route.immigrate_from & (1u64 << member) != 0).then_some(index)
    };
    match request {
        Fabric::MigrateStart {
            id,
            namespace,
            pid,
            key,
        } => {
            let Some(index) = expected(namespace, pid, key) else {
                return Ok((id, code::AGAIN));
            };
            let mut incoming = incoming.borrow_mut();
            // Forget immigrations of older maps.
            incoming.retain(|&(ns, p, from)| expected_member(&routing, node, ns, p, from));
            if !incoming.contains(&(index, pid, peer))
                && incoming.len() >= node.cluster.migrate_max_num_incoming.max(1)
            {
                return Ok((id, code::AGAIN));
            }
            incoming.insert((index, pid, peer));
            Ok((id, code::OK))
        }
        Fabric::MigrateRecords {
            id,
            namespace,
            pid,
            key,
            images,
        } => {
            let Some(index) = expected(namespace, pid, key) else {
                return Ok((id, code::REFUSED));
            };
            let ns = node.store.namespaces().get(index).cloned().ok_or(())?;
            let policy = node.cluster.policy(index);
            let counters = &node.cluster.counters;
            counters
                .migrate_records_received
                .fetch_add(images.len() as u64, Relaxed);
            let mut waits = Vec::new();
            for image in &images {
                let copy = copy_of(image);
                let mut writer = ns.write(&copy.digest);
                match writer.apply_copy(&copy, |held, incoming| wins(policy, held, incoming)) {
                    Ok((applied, wait)) => {
                        if applied {
                            bump(&counters.migrate_records_applied);
                        }
                        if let Some(wait) = wait {
                            waits.push(wait);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(target: "cluster", ?error, "migrated record refused by storage");
                        return Ok((id, code::FAILED));
                    }
                }
            }
            for wait in waits {
                if wait.wait().await.is_err() {
                    return Ok((id, code::FAILED));
                }
            }
            Ok((id, code::OK))
        }
        Fabric::MigrateDone {
            id,
            namespace,
            pid,
            key,
        } => {
            let Some(index) = expected(namespace, pid, key) else {
                return Ok((id, code::REFUSED));
            };
            incoming.borrow_mut().remove(&(index, pid, peer));
            bump(&node.cluster.counters.migrate_partitions_received);
            node.cluster.send(Event::Data(DataEvent::ImmigrationDone {
                namespace: index,
                pid,
                from: peer,
                key,
            }));
            Ok((id, code::OK))
        }
        _ => Err(()),
    }
}

fn expected_member(
    routing: &bolide_cluster::Routing,
    _node: &Node,
    namespace: usize,
    pid: u16,
    from: NodeId,
) -> bool {
    let Some(member) = routing.member_index(from) else {
        return false;
    };
    routing
        .namespaces
        .get(namespace)
        .is_some_and(|ns| ns.route(usize::from(pid)).immigrate_from & (1u64 << member) != 0)
}
