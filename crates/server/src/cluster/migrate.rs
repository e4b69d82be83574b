//! Migrations, on a thread of their own at background priority: the
//! cluster crate's [`Emigrator`] (sending partitions to the nodes the
//! rebalance names: START, snapshot frames, pacing, the handoff's gate
//! drain, DONE, retries) and [`Immigrator`] (receiving them on bulk fabric
//! connections), and dropping copies a node no longer holds. The protocol
//! is the machines'; the code here carries out their sends, store calls and
//! reports, and feeds them replies, ticks and the routing's key.

use super::fabric::{self, Mailbox};
use super::records::Records;
use super::Context as Node;
use super::{bump, monotonic_ms, Event};
use bolide_cluster::codec;
use bolide_cluster::datapath::emigrate::{EmigrateNamespace, PARTITIONS_PER_THREAD};
use bolide_cluster::datapath::{Emigrator, EmigratorConfig, Immigrator, Output, RecordStore};
use bolide_cluster::fabric::{code, Fabric};
use bolide_cluster::partitions::Emigration;
use bolide_cluster::NodeId;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Bytes read from a bulk connection at a time.
const BULK_READ_BYTES: usize = 256 * 1024;

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
        stream: crate::net::Handoff,
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

fn emigrator_config(node: &Node) -> EmigratorConfig {
    EmigratorConfig {
        workers: node.cluster.migrate_threads.max(1) * PARTITIONS_PER_THREAD,
        namespaces: node
            .store
            .namespaces()
            .iter()
            .map(|ns| EmigrateNamespace {
                name: ns.name().to_owned(),
                sleep_us: ns.config.migrate_sleep_us,
            })
            .collect(),
    }
}

async fn run(node: Arc<Node>, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut emigrator = Emigrator::new(emigrator_config(&node), Arc::clone(&node.cluster.gates));
    let immigrator = Rc::new(RefCell::new(Immigrator::new(
        node.cluster.migrate_max_num_incoming,
    )));
    let mailbox = Rc::new(Mailbox::default());
    loop {
        carry_out(&node, &mut emigrator, &mailbox);
        let sleep = emigrator.wake_at().map_or(Duration::from_secs(3600), |at| {
            Duration::from_millis(at.saturating_sub(monotonic_ms()))
        });
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else {
                    return;
                };
                match command {
                    Command::Emigrate(emigration) => {
                        emigrator.add(emigration, monotonic_ms(), routing_key(&node));
                    }
                    Command::Drop { namespace, pid } => {
                        Records(&node.store).drop_partition(namespace, pid);
                        node.cluster.gates.forget_unreplicated(namespace, usize::from(pid));
                    }
                    Command::Bulk { stream, leftover, peer } => {
                        tokio::task::spawn_local(serve_bulk_connection(
                            Arc::clone(&node),
                            stream,
                            leftover,
                            peer,
                            Rc::clone(&immigrator),
                        ));
                    }
                }
            }
            (token, reply) = mailbox.recv() => {
                let key = routing_key(&node);
                reply.with_reply(|reply| {
                    emigrator.reply(token, reply, monotonic_ms(), key, &Records(&node.store))
                });
            }
            () = tokio::time::sleep(sleep) => {
                emigrator.tick(monotonic_ms(), routing_key(&node));
            }
        }
    }
}

fn routing_key(node: &Node) -> u64 {
    node.cluster.routing.load().key
}

/// Carries out the emigrator's sends, counts and reports.
fn carry_out(node: &Arc<Node>, emigrator: &mut Emigrator, mailbox: &Rc<Mailbox>) {
    while let Some(output) = emigrator.next_output() {
        match output {
            Output::Send { token, to, channel } => {
                fabric::send(node, to, channel, mailbox, token, |id, out| {
                    emigrator.encode(token, id, out)
                });
            }
            Output::Count(counter, n) => node.cluster.counters.count(counter, n),
            Output::Event(event) => node.cluster.send(Event::Data(event)),
            Output::Run { .. } | Output::Finish(_) => {}
        }
    }
}

async fn serve_bulk_connection(
    node: Arc<Node>,
    stream: crate::net::Handoff,
    leftover: Vec<u8>,
    peer: NodeId,
    immigrator: Rc<RefCell<Immigrator>>,
) {
    let Ok(stream) = stream.adopt() else {
        bump(&node.cluster.counters.fabric_connections_closed);
        return;
    };
    if serve_bulk(&node, stream, leftover, peer, &immigrator)
        .await
        .is_err()
    {
        bump(&node.cluster.counters.fabric_bad_frames);
    }
    bump(&node.cluster.counters.fabric_connections_closed);
}

/// Migration steps from `peer`, answered in order.
async fn serve_bulk(
    node: &Arc<Node>,
    mut stream: crate::net::Connection,
    mut buffer: Vec<u8>,
    peer: NodeId,
    immigrator: &RefCell<Immigrator>,
) -> Result<(), ()> {
    let mut answers = Vec::new();
    loop {
        answers.clear();
        while let Some((header, body, total)) = codec::split_frame(&buffer).map_err(|_| ())? {
            let request = Fabric::decode(header.kind, body).map_err(|_| ())?;
            let (id, code) = immigrate(node, &request, peer, immigrator).await?;
            Fabric::Ack { id, code }.encode(&mut answers);
            buffer.drain(..total);
        }
        if !answers.is_empty() && stream.write_all(&answers).await.is_err() {
            return Ok(());
        }
        if read_bulk(&mut stream, &mut buffer).await == 0 {
            return Ok(());
        }
    }
}

async fn read_bulk(stream: &mut crate::net::Connection, buffer: &mut Vec<u8>) -> usize {
    use tokio::io::AsyncReadExt;
    let start = buffer.len();
    buffer.resize(start + BULK_READ_BYTES, 0);
    let read = stream.read(&mut buffer[start..]).await.unwrap_or(0);
    buffer.truncate(start + read);
    read
}

/// One migration step from `peer`: (request id, answer code).
async fn immigrate(
    node: &Arc<Node>,
    request: &Fabric<'_>,
    peer: NodeId,
    immigrator: &RefCell<Immigrator>,
) -> Result<(u64, u8), ()> {
    let routing = node.cluster.routing.load_full();
    let step = {
        let mut immigrator = immigrator.borrow_mut();
        let step = immigrator
            .receive(
                &Records(&node.store),
                &routing,
                peer,
                request,
                monotonic_ms(),
            )
            .ok_or(())?;
        while let Some(output) = immigrator.next_output() {
            match output {
                Output::Count(counter, n) => node.cluster.counters.count(counter, n),
                Output::Event(event) => node.cluster.send(Event::Data(event)),
                Output::Send { .. } | Output::Run { .. } | Output::Finish(_) => {}
            }
        }
        step
    };
    for wait in step.waits {
        if wait.wait().await.is_err() {
            return Ok((step.id, code::FAILED));
        }
    }
    Ok((step.id, step.code))
}
