//! The Redis port's connections: bytes in, `bolide_redis::Session` answers
//! them, bytes out. Requests run on this event loop through the
//! transaction layer's typed requests, as the Aerospike port's do; a write
//! that replicates, and a write that waits for the device
//! (commit-to-device), is answered once that is done.

use crate::connection::Context;
use crate::net::Connection;
use bolide_redis::{Records, Session, Shared, Step};
use bolide_store::Store;
use bolide_transaction::{Answer, Caller, Cluster, Need, RecordRequest, Remote, Scratch};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const READ_BYTES: usize = 16 * 1024;
/// The most a connection may buffer of requests not yet answered; a
/// client that sends more without reading is disconnected. (A record
/// holds at most the namespace's max-record-size, 8 MiB at most, so no
/// useful request is larger.)
const INPUT_BYTES_MAX: usize = 64 << 20;

/// Wakes a subscribed connection when a message is published to it.
struct Waker(tokio::sync::Notify);

impl bolide_redis::pubsub::Wake for Waker {
    fn wake(&self) {
        self.0.notify_one();
    }
}

/// Runs a connection's requests through the transaction layer.
struct Backend<'c> {
    context: &'c Context,
    caller: &'c Caller,
    scratch: &'c mut Scratch,
    /// Writes applied here whose copies must reach the replicas before
    /// the answers go out.
    replicating: Vec<Remote>,
}

impl Records for Backend<'_> {
    fn run(&mut self, request: &RecordRequest<'_>, answer: &mut Answer) -> Result<(), String> {
        let routing = self.context.routing.load();
        let cluster = Cluster {
            runner: Some(&self.context.runner),
            ..Cluster::new(&routing, &self.context.gates)
        };
        match bolide_transaction::execute_request(
            &self.context.store,
            &cluster,
            self.caller,
            request,
            answer,
            self.scratch,
        ) {
            None => Ok(()),
            Some(remote) => match remote.need {
                Need::Replicate(_) => {
                    self.replicating.push(remote);
                    Ok(())
                }
                Need::Again => Err("TRYAGAIN the cluster is changing; try again".to_owned()),
                // (SC) The record goes to its replicas again in the
                // background first.
                Need::Rereplicate { .. } => {
                    Err("TRYAGAIN the record is being copied to its replicas; try again".to_owned())
                }
                Need::Proxy { .. } | Need::Resolve { .. } => Err(
                    "CLUSTERDOWN this key is served by another node (Redis Cluster redirection is \
                     not supported yet)"
                        .to_owned(),
                ),
            },
        }
    }

    fn store(&self) -> &Store {
        &self.context.store
    }
}

/// Serves one Redis connection until the client leaves or sends a
/// malformed request.
pub async fn serve(context: Arc<Context>, shared: Arc<Shared>, stream: tokio::net::TcpStream) {
    context.counters.connections_opened.fetch_add(1, Relaxed);
    run(&context, shared, stream).await;
    context.counters.connections_closed.fetch_add(1, Relaxed);
}

async fn run(context: &Context, shared: Arc<Shared>, stream: tokio::net::TcpStream) {
    let peer = stream.peer_addr().ok();
    let local = stream.local_addr().ok();
    let show =
        |address: Option<std::net::SocketAddr>| address.map_or(String::new(), |a| a.to_string());
    let mut session = Session::new(shared, show(peer), show(local));
    let waker = Arc::new(Waker(tokio::sync::Notify::new()));
    session.set_wake(Arc::clone(&waker) as Arc<dyn bolide_redis::pubsub::Wake>);
    let mut connection = Connection::plain(stream);
    let caller = Caller::client(peer);
    let mut scratch = Scratch::default();
    let mut input: Vec<u8> = Vec::with_capacity(READ_BYTES);
    let mut output: Vec<u8> = Vec::with_capacity(READ_BYTES);
    loop {
        let mut backend = Backend {
            context,
            caller: &caller,
            scratch: &mut scratch,
            replicating: Vec::new(),
        };
        // A bug in a command must not take the event loop down: the
        // client gets an error and the connection closes.
        let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            session.feed(&input, &mut output, &mut backend)
        }));
        let (used, step) = match fed {
            Ok(fed) => fed,
            Err(_) => {
                tracing::error!(
                    ?peer,
                    "redis: a command failed unexpectedly; closing the connection"
                );
                output.extend_from_slice(b"-ERR internal error\r\n");
                (0, Step::Close)
            }
        };
        let replicating = std::mem::take(&mut backend.replicating);
        if !session.drain_messages(&mut output) {
            return;
        }
        input.drain(..used);
        for remote in replicating {
            let _ = context.remote.complete(remote).await;
        }
        for wait in scratch.take_commit_waits() {
            if wait.wait().await.is_err() {
                return;
            }
        }
        if !output.is_empty() {
            if connection.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
            if output.capacity() > 4 << 20 {
                output = Vec::with_capacity(READ_BYTES);
            }
        }
        match step {
            Step::Read if session.is_subscribed() => {
                // A subscriber also wakes for published messages.
                tokio::select! {
                    more = read_more(&mut connection, &mut input) => {
                        if !more {
                            return;
                        }
                    }
                    () = waker.0.notified() => {}
                }
            }
            Step::Read => {
                if !read_more(&mut connection, &mut input).await {
                    return;
                }
            }
            Step::Flush => {}
            Step::Block(until) => {
                // Wait for the retry time; a client that leaves meanwhile
                // ends the wait (what it sends is kept for later).
                let sleep = tokio::time::sleep_until(until.into());
                tokio::select! {
                    () = sleep => {}
                    more = read_more(&mut connection, &mut input) => {
                        if !more {
                            return;
                        }
                    }
                }
            }
            Step::Close => return,
        }
    }
}

/// Reads what the client sent; false if it left or sent too much.
async fn read_more(connection: &mut Connection, input: &mut Vec<u8>) -> bool {
    if input.len() >= INPUT_BYTES_MAX {
        return false;
    }
    input.reserve(
        READ_BYTES
            .max(input.len() / 2)
            .min(INPUT_BYTES_MAX - input.len()),
    );
    matches!(connection.read_some(input).await, Ok(read) if read > 0)
}
