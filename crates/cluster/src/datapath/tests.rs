//! The data-path machines, input by input: the exact sends, answers,
//! counts and events each one leaves, and the messages it encodes.

use super::emigrate::{EmigrateNamespace, FRAME_BYTES, STEP_TIMEOUT_MS};
use super::immigrate::{Immigrator, SLOT_IDLE_MS};
use super::*;
use crate::codec;
use crate::conflict::{self, Stamp};
use crate::fabric::{code, Channel, Fabric, Image, ProxyFraming};
use crate::node::DataEvent;
use crate::partitions::{Emigration, EmigrationKind};
use crate::routing::{flag, ConflictPolicy, GateGuard, Gates, Route, Routing};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

const A: NodeId = 0xA1;
const B: NodeId = 0xB2;
const C: NodeId = 0xC3;
const D: NodeId = 0xD4;
const E: NodeId = 0xE5;
const F: NodeId = 0xF6;
const KEY: u64 = 0x1234;
const PID: u16 = 7;

/// Records by (namespace, digest), resolved like the real store.
#[derive(Default)]
struct MemStore {
    records: RefCell<BTreeMap<(usize, [u8; 20]), OwnedImage>>,
    failing: Cell<bool>,
}

impl RecordStore for MemStore {
    type Wait = ();

    fn apply(
        &self,
        namespace: usize,
        image: &Image<'_>,
        policy: ConflictPolicy,
    ) -> Result<Applied<()>, StoreFailed> {
        if self.failing.get() {
            return Err(StoreFailed);
        }
        let mut records = self.records.borrow_mut();
        let stamp = |generation, last_update_ms| Stamp {
            generation,
            last_update_ms,
        };
        let held = records
            .get(&(namespace, image.digest))
            .map(|held| stamp(held.generation, held.last_update_ms));
        let wins =
            conflict::incoming_wins(policy, held, stamp(image.generation, image.last_update_ms));
        if wins {
            records.insert((namespace, image.digest), image.to_owned_image());
        }
        Ok(Applied {
            applied: wins,
            wait: None,
        })
    }

    fn fetch(&self, namespace: usize, digest: &[u8; 20]) -> Option<OwnedImage> {
        self.records.borrow().get(&(namespace, *digest)).cloned()
    }

    fn snapshot(&self, namespace: usize, pid: u16, _skipped: &mut u64) -> Vec<OwnedImage> {
        self.records
            .borrow()
            .iter()
            .filter(|((ns, digest), _)| *ns == namespace && pid_of(digest) == pid)
            .map(|(_, image)| image.clone())
            .collect()
    }

    fn drop_partition(&self, namespace: usize, pid: u16) -> u64 {
        let mut records = self.records.borrow_mut();
        let before = records.len();
        records.retain(|(ns, digest), _| *ns != namespace || pid_of(digest) != pid);
        (before - records.len()) as u64
    }
}

fn digest(n: u8) -> [u8; 20] {
    let mut digest = [n; 20];
    digest[0] = PID as u8;
    digest[1] = 0;
    digest
}

fn image(n: u8, generation: u16, last_update_ms: u64, record_bytes: usize) -> OwnedImage {
    OwnedImage {
        digest: digest(n),
        generation,
        last_update_ms,
        void_time: 0,
        set_name: b"demo".to_vec(),
        record: Some(vec![n; record_bytes]),
    }
}

/// A map of `members` (this node first) under `key` where every
/// partition has `route`.
fn routing(key: u64, members: &[NodeId], route: Route) -> Routing {
    let mut routing = Routing::standalone(
        members[0],
        &[("test".to_owned(), 2, ConflictPolicy::Generation)],
    );
    routing.key = key;
    routing.cluster_key = key;
    routing.generation = 1;
    routing.members = members.to_vec();
    for slot in &mut routing.namespaces[0].routes {
        *slot = route;
    }
    routing
}

fn master_route(destinations: &[u8]) -> Route {
    let mut route = Route {
        flags: flag::WRITE | flag::READ,
        ..Route::default()
    };
    for &member in destinations {
        route.destinations[usize::from(route.destination_count)] = member;
        route.destination_count += 1;
    }
    route
}

fn outputs(work: &mut Work) -> Vec<Output> {
    std::iter::from_fn(|| work.next_output()).collect()
}

fn send(token: Token, to: NodeId) -> Output {
    Output::Send {
        token,
        to,
        channel: Channel::Requests,
    }
}

fn count(counter: Counter, n: u64) -> Output {
    Output::Count(counter, n)
}

/// Encodes the call and decodes it back, as a receiver would.
fn sent<R>(encode: impl FnOnce(&mut Vec<u8>), check: impl FnOnce(Fabric<'_>) -> R) -> R {
    let mut frame = Vec::new();
    encode(&mut frame);
    let (header, body, total) = codec::split_frame(&frame).expect("valid").expect("whole");
    assert_eq!(total, frame.len());
    check(Fabric::decode(header.kind, body).expect("decodes"))
}

fn ack(code: u8) -> Fabric<'static> {
    Fabric::Ack { id: 0, code }
}

fn replication(to: &[NodeId], guard: Option<GateGuard>, commit_master: bool) -> Need {
    let mut nodes = Nodes::default();
    for &node in to {
        nodes.push(node);
    }
    Need::Replicate(Replication {
        namespace: 0,
        pid: PID,
        cluster_key: KEY,
        regime: 0,
        to: nodes,
        image: image(1, 3, 500, 10),
        commit_master,
        guard,
        mark: None,
    })
}

fn new_work(now_ms: u64) -> Work {
    Work::new(A, now_ms, 1000, b"request".to_vec(), ProxyFraming::Message)
}

// ---------------------------------------------------------------------
// Replicate
// ---------------------------------------------------------------------

#[test]
fn replicate_answers_once_every_copy_is_acknowledged() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let map = routing(KEY, &[A, B, C], master_route(&[1, 2]));
    let guard = GateGuard::enter(&gates, 0, usize::from(PID)).expect("open");
    let mut work = new_work(100);
    work.start(replication(&[B, C], Some(guard), false), 100, &map);
    assert_eq!(
        outputs(&mut work),
        [send(1, B), send(2, C), count(Counter::ReplicaWritesSent, 2)]
    );
    sent(
        |out| work.encode(1, 77, out),
        |message| {
            let Fabric::ReplicaWrite {
                id,
                namespace,
                cluster_key,
                regime,
                image,
            } = message
            else {
                panic!("not a replica write: {message:?}");
            };
            assert_eq!((id, namespace, cluster_key, regime), (77, "test", KEY, 0));
            assert_eq!(image.to_owned_image(), super::tests::image(1, 3, 500, 10));
        },
    );
    work.reply(1, Reply::Answer(&ack(code::OK)), 101, &store);
    // The same acknowledgement again counts nothing.
    work.reply(1, Reply::Answer(&ack(code::OK)), 101, &store);
    assert!(outputs(&mut work).is_empty());
    assert!(!work.is_over());
    assert_eq!(
        gates
            .gate(0, usize::from(PID))
            .expect("gate")
            .inflight
            .load(SeqCst),
        1
    );
    work.reply(2, Reply::Answer(&ack(code::OK)), 102, &store);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Local)]);
    assert!(work.is_over());
    assert_eq!(work.wake_at(), None);
    assert_eq!(
        gates
            .gate(0, usize::from(PID))
            .expect("gate")
            .inflight
            .load(SeqCst),
        0
    );
}

#[test]
fn a_refused_copy_is_sent_again_after_a_pause() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(replication(&[B], None, false), 100, &map);
    outputs(&mut work);
    work.reply(
        1,
        Reply::Answer(&ack(code::CLUSTER_KEY_MISMATCH)),
        110,
        &store,
    );
    assert!(outputs(&mut work).is_empty());
    assert_eq!(work.wake_at(), Some(112));
    work.tick(111, &map);
    assert!(outputs(&mut work).is_empty());
    work.tick(112, &map);
    assert_eq!(
        outputs(&mut work),
        [send(2, B), count(Counter::ReplicaWritesSent, 1)]
    );
    // Lost this time: the next pause is longer.
    work.reply(2, Reply::Lost, 120, &store);
    assert_eq!(work.wake_at(), Some(124));
    work.tick(124, &map);
    assert_eq!(
        outputs(&mut work),
        [send(3, B), count(Counter::ReplicaWritesSent, 1)]
    );
    // A late answer to an earlier attempt is ignored.
    work.reply(1, Reply::Answer(&ack(code::OK)), 125, &store);
    assert!(outputs(&mut work).is_empty());
    work.reply(3, Reply::Answer(&ack(code::OK)), 126, &store);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Local)]);
}

#[test]
fn a_new_map_sends_the_copies_to_its_holders() {
    let store = MemStore::default();
    let old = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(replication(&[B], None, false), 100, &old);
    outputs(&mut work);
    // B is gone: the new map's holder of the partition is C.
    let new = routing(KEY + 1, &[A, C], master_route(&[1]));
    work.tick(110, &new);
    assert_eq!(
        outputs(&mut work),
        [send(2, C), count(Counter::ReplicaWritesSent, 1)]
    );
    sent(
        |out| work.encode(2, 9, out),
        |message| {
            assert!(
                matches!(message, Fabric::ReplicaWrite { cluster_key, .. } if cluster_key == KEY + 1)
            )
        },
    );
    // B's acknowledgement of the old round does not count.
    work.reply(1, Reply::Answer(&ack(code::OK)), 111, &store);
    assert!(outputs(&mut work).is_empty());
    work.reply(2, Reply::Answer(&ack(code::OK)), 112, &store);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Local)]);
}

#[test]
fn a_map_without_other_holders_completes_the_write() {
    let old = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(replication(&[B], None, false), 100, &old);
    outputs(&mut work);
    let alone = routing(KEY + 1, &[A], master_route(&[]));
    work.tick(110, &alone);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Local)]);
    assert!(work.is_over());
}

#[test]
fn an_unsettled_map_changes_no_destination() {
    let store = MemStore::default();
    let old = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(replication(&[B], None, false), 100, &old);
    outputs(&mut work);
    let mut exchanging = routing(KEY, &[A, C], master_route(&[1]));
    exchanging.cluster_key = KEY + 1;
    work.tick(110, &exchanging);
    assert!(outputs(&mut work).is_empty());
    work.reply(1, Reply::Answer(&ack(code::OK)), 111, &store);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Local)]);
}

#[test]
fn a_write_past_its_deadline_times_out_and_frees_its_gate() {
    let gates = Arc::new(Gates::new(1));
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let guard = GateGuard::enter(&gates, 0, usize::from(PID)).expect("open");
    let mut work = new_work(100);
    work.start(replication(&[B], Some(guard), false), 100, &map);
    outputs(&mut work);
    assert_eq!(work.wake_at(), Some(100 + ROUTING_POLL_MS));
    work.tick(1099, &map);
    assert!(outputs(&mut work).is_empty());
    work.tick(1100, &map);
    assert_eq!(
        outputs(&mut work),
        [
            count(Counter::ReplicaWriteTimeouts, 1),
            Output::Finish(Finish::Timeout)
        ]
    );
    assert!(work.is_over());
    assert_eq!(
        gates
            .gate(0, usize::from(PID))
            .expect("gate")
            .inflight
            .load(SeqCst),
        0
    );
}

// ---------------------------------------------------------------------
// Unreplicated records (strong consistency)
// ---------------------------------------------------------------------

fn stamp(generation: u16, last_update_ms: u64) -> Stamp {
    Stamp {
        generation,
        last_update_ms,
    }
}

#[test]
fn a_record_stays_unreplicated_until_its_latest_writes_copies_are_in() {
    let gates = Arc::new(Gates::new(1));
    let pid = usize::from(PID);
    assert!(!gates.is_unreplicated(0, pid, &digest(1)));
    let first = gates
        .mark_unreplicated(0, pid, digest(1), stamp(1, 100))
        .expect("a gate");
    let second = gates
        .mark_unreplicated(0, pid, digest(1), stamp(2, 200))
        .expect("a gate");
    gates.mark_unreplicated(0, pid, digest(2), stamp(1, 300));
    assert_eq!(gates.unreplicated_count(0), 2);
    assert!(gates.is_unreplicated(0, pid, &digest(1)));
    // The earlier write's copies arriving last prove nothing of the later.
    first.replicated();
    assert!(gates.is_unreplicated(0, pid, &digest(1)));
    second.replicated();
    assert!(!gates.is_unreplicated(0, pid, &digest(1)));
    assert_eq!(gates.unreplicated(0, pid), [digest(2)]);
    // Copied again: the mark taken before reading the held copy clears it,
    // unless a write marks it again meanwhile.
    let again = gates
        .rereplication_mark(0, pid, &digest(2))
        .expect("listed");
    gates.mark_unreplicated(0, pid, digest(2), stamp(2, 400));
    again.replicated();
    assert_eq!(gates.unreplicated_count(0), 1);
    gates
        .rereplication_mark(0, pid, &digest(2))
        .expect("listed")
        .replicated();
    assert_eq!(gates.unreplicated_count(0), 0);
    assert!(gates.rereplication_mark(0, pid, &digest(2)).is_none());
    gates.mark_unreplicated(0, pid, digest(3), stamp(1, 1));
    gates.forget_unreplicated(0, pid);
    assert_eq!(gates.unreplicated_count(0), 0);
}

fn rereplication(gates: &Arc<Gates>, to: &[NodeId], then_run: bool) -> Need {
    let mut nodes = Nodes::default();
    for &node in to {
        nodes.push(node);
    }
    Need::Rereplicate {
        copies: Replication {
            namespace: 0,
            pid: PID,
            cluster_key: KEY,
            regime: 3,
            to: nodes,
            image: image(1, 3, 500, 10),
            commit_master: false,
            guard: None,
            mark: gates.rereplication_mark(0, usize::from(PID), &digest(1)),
        },
        then_run,
    }
}

#[test]
fn a_timed_out_write_leaves_its_record_unreplicated_and_the_next_read_copies_it_first() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let pid = usize::from(PID);
    // The write: its copy never acknowledged, it times out (in doubt).
    let mark = gates.mark_unreplicated(0, pid, digest(1), stamp(3, 500));
    let Need::Replicate(mut copies) = replication(&[B], None, false) else {
        unreachable!()
    };
    copies.mark = mark;
    let mut write = new_work(100);
    write.start(Need::Replicate(copies), 100, &map);
    outputs(&mut write);
    write.tick(1100, &map);
    assert!(outputs(&mut write).contains(&Output::Finish(Finish::Timeout)));
    assert!(gates.is_unreplicated(0, pid, &digest(1)));
    // A read of it: the held copy goes to B first, then the read runs.
    let mut read = new_work(2000);
    read.start(rereplication(&gates, &[B], true), 2000, &map);
    assert_eq!(
        outputs(&mut read),
        [send(1, B), count(Counter::ReplicaWritesSent, 1)]
    );
    read.reply(1, Reply::Answer(&ack(code::OK)), 2001, &store);
    assert_eq!(outputs(&mut read), [Output::Run { resolved: false }]);
    assert!(!gates.is_unreplicated(0, pid, &digest(1)));
    read.ran(Ran::Answered, 2001, &map);
    assert_eq!(outputs(&mut read), [Output::Finish(Finish::Local)]);
    assert!(read.is_over());
}

#[test]
fn a_rereplication_that_cannot_finish_times_out_and_leaves_the_mark() {
    let gates = Arc::new(Gates::new(1));
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let pid = usize::from(PID);
    gates.mark_unreplicated(0, pid, digest(1), stamp(3, 500));
    let mut read = new_work(100);
    read.start(rereplication(&gates, &[B], true), 100, &map);
    outputs(&mut read);
    read.tick(1100, &map);
    let out = outputs(&mut read);
    assert_eq!(
        out.last(),
        Some(&Output::Finish(Finish::Timeout)),
        "{out:?}"
    );
    assert!(!out.contains(&Output::Run { resolved: false }));
    assert!(gates.is_unreplicated(0, pid, &digest(1)));
    // In the background (no request to run): answered once the copy is in.
    let store = MemStore::default();
    let mut background = new_work(2000);
    background.start(rereplication(&gates, &[B], false), 2000, &map);
    outputs(&mut background);
    background.reply(1, Reply::Answer(&ack(code::OK)), 2001, &store);
    assert_eq!(outputs(&mut background), [Output::Finish(Finish::Local)]);
    assert!(!gates.is_unreplicated(0, pid, &digest(1)));
}

#[test]
fn commit_level_master_answers_at_once_and_keeps_sending() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(replication(&[B], None, true), 100, &map);
    assert_eq!(
        outputs(&mut work),
        [
            Output::Finish(Finish::Local),
            send(1, B),
            count(Counter::ReplicaWritesSent, 1)
        ]
    );
    assert!(work.is_answered());
    assert!(!work.is_over());
    work.reply(1, Reply::Lost, 101, &store);
    work.tick(103, &map);
    assert_eq!(
        outputs(&mut work),
        [send(2, B), count(Counter::ReplicaWritesSent, 1)]
    );
    work.reply(2, Reply::Answer(&ack(code::OK)), 104, &store);
    assert!(outputs(&mut work).is_empty());
    assert!(work.is_over());
}

#[test]
fn commit_level_master_gives_up_quietly_at_the_deadline() {
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(replication(&[B], None, true), 100, &map);
    outputs(&mut work);
    work.tick(1100, &map);
    assert!(outputs(&mut work).is_empty());
    assert!(work.is_over());
}

// ---------------------------------------------------------------------
// Proxy
// ---------------------------------------------------------------------

fn proxy_answer(redirect: Option<NodeId>) -> Fabric<'static> {
    Fabric::ProxyAnswer {
        id: 0,
        redirect,
        answer: b"answer",
    }
}

#[test]
fn a_proxy_relays_the_answer() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[]));
    let mut work = new_work(100);
    work.start(Need::Proxy { to: B }, 100, &map);
    assert_eq!(
        outputs(&mut work),
        [count(Counter::ProxyBegun, 1), send(1, B)]
    );
    assert_eq!(work.proxied_to(), Some(B));
    sent(
        |out| work.encode(1, 5, out),
        |message| {
            assert_eq!(
                message,
                Fabric::Proxy {
                    id: 5,
                    timeout_ms: 1000,
                    framing: ProxyFraming::Message,
                    body: b"request",
                }
            )
        },
    );
    work.reply(1, Reply::Answer(&proxy_answer(None)), 130, &store);
    assert_eq!(
        outputs(&mut work),
        [
            count(Counter::ClientProxyComplete, 1),
            count(Counter::ProxyEnded, 1),
            Output::Finish(Finish::Relay)
        ]
    );
    assert!(work.is_over());
}

#[test]
fn a_proxy_follows_three_redirects_then_routes_again() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[]));
    let mut work = new_work(100);
    work.start(Need::Proxy { to: B }, 100, &map);
    outputs(&mut work);
    work.reply(1, Reply::Answer(&proxy_answer(Some(C))), 110, &store);
    assert_eq!(outputs(&mut work), [send(2, C)]);
    sent(
        |out| work.encode(2, 6, out),
        |message| {
            assert!(matches!(
                message,
                Fabric::Proxy {
                    timeout_ms: 990,
                    ..
                }
            ))
        },
    );
    work.reply(2, Reply::Answer(&proxy_answer(Some(D))), 111, &store);
    assert_eq!(outputs(&mut work), [send(3, D)]);
    work.reply(3, Reply::Answer(&proxy_answer(Some(E))), 112, &store);
    assert_eq!(outputs(&mut work), [send(4, E)]);
    // A fourth redirect in a row: route again here instead.
    work.reply(4, Reply::Answer(&proxy_answer(Some(F))), 113, &store);
    assert!(outputs(&mut work).is_empty());
    assert_eq!(work.wake_at(), Some(115));
    work.tick(115, &map);
    assert_eq!(outputs(&mut work), [Output::Run { resolved: false }]);
    work.ran(Ran::Need(Need::Proxy { to: B }), 115, &map);
    assert_eq!(outputs(&mut work), [send(5, B)]);
}

#[test]
fn a_redirect_back_here_or_to_the_same_node_routes_again() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[]));
    for redirect in [A, B] {
        let mut work = new_work(100);
        work.start(Need::Proxy { to: B }, 100, &map);
        outputs(&mut work);
        work.reply(1, Reply::Answer(&proxy_answer(Some(redirect))), 110, &store);
        assert!(outputs(&mut work).is_empty());
        work.tick(112, &map);
        assert_eq!(outputs(&mut work), [Output::Run { resolved: false }]);
    }
}

#[test]
fn a_lost_proxy_counts_an_error_and_may_be_served_here_after_all() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[]));
    let mut work = new_work(100);
    work.start(Need::Proxy { to: B }, 100, &map);
    outputs(&mut work);
    work.reply(1, Reply::Lost, 105, &store);
    assert_eq!(outputs(&mut work), [count(Counter::ClientProxyError, 1)]);
    work.tick(107, &map);
    assert_eq!(outputs(&mut work), [Output::Run { resolved: false }]);
    work.ran(Ran::Answered, 107, &map);
    assert_eq!(
        outputs(&mut work),
        [count(Counter::ProxyEnded, 1), Output::Finish(Finish::Local)]
    );
    assert!(work.is_over());
}

#[test]
fn a_proxy_past_its_deadline_times_out() {
    let map = routing(KEY, &[A, B], master_route(&[]));
    let mut work = new_work(100);
    work.start(Need::Proxy { to: B }, 100, &map);
    outputs(&mut work);
    assert_eq!(work.wake_at(), Some(1100));
    work.tick(1100, &map);
    assert_eq!(
        outputs(&mut work),
        [
            count(Counter::ClientProxyTimeout, 1),
            count(Counter::ProxyEnded, 1),
            Output::Finish(Finish::Timeout)
        ]
    );
}

#[test]
fn a_reroute_that_leads_elsewhere_leaves_the_proxy() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(Need::Proxy { to: B }, 100, &map);
    outputs(&mut work);
    work.reply(1, Reply::Lost, 101, &store);
    work.tick(103, &map);
    outputs(&mut work);
    // Served here now: the write ran, and its copy goes to B.
    work.ran(Ran::Need(replication(&[B], None, false)), 103, &map);
    assert_eq!(
        outputs(&mut work),
        [
            count(Counter::ProxyEnded, 1),
            send(2, B),
            count(Counter::ReplicaWritesSent, 1)
        ]
    );
    work.reply(2, Reply::Answer(&ack(code::OK)), 104, &store);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Local)]);
}

// ---------------------------------------------------------------------
// Again, resolve
// ---------------------------------------------------------------------

#[test]
fn a_write_waits_for_the_map_then_runs_again() {
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = new_work(100);
    work.start(Need::Again, 100, &map);
    assert!(outputs(&mut work).is_empty());
    assert_eq!(work.wake_at(), Some(105));
    work.tick(105, &map);
    assert_eq!(outputs(&mut work), [Output::Run { resolved: false }]);
    work.ran(Ran::Answered, 105, &map);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Local)]);
}

#[test]
fn a_run_past_the_deadline_is_a_timeout() {
    let map = routing(KEY, &[A, B], master_route(&[1]));
    let mut work = Work::new(A, 100, 3, Vec::new(), ProxyFraming::Row(4));
    work.start(Need::Again, 100, &map);
    work.tick(103, &map);
    assert_eq!(outputs(&mut work), [Output::Finish(Finish::Timeout)]);
    assert!(work.is_over());
}

fn resolve_need(from: &[NodeId]) -> Need {
    Need::Resolve {
        namespace: 0,
        digest: digest(1),
        from: from.to_vec(),
    }
}

fn duplicates_route(duplicates: u64) -> Route {
    Route {
        duplicates,
        ..master_route(&[1])
    }
}

#[test]
fn resolution_applies_the_newest_copy_then_runs_again_resolved() {
    let store = MemStore::default();
    store
        .apply(0, &image(1, 2, 100, 4).image(), ConflictPolicy::Generation)
        .expect("stored");
    let map = routing(KEY, &[A, B, C], duplicates_route(0b110));
    let mut work = new_work(100);
    work.start(resolve_need(&[B, C]), 100, &map);
    assert_eq!(
        outputs(&mut work),
        [send(1, B), send(2, C), count(Counter::DupResFetches, 2)]
    );
    sent(
        |out| work.encode(2, 3, out),
        |message| {
            assert_eq!(
                message,
                Fabric::Fetch {
                    id: 3,
                    namespace: "test",
                    digest: digest(1),
                    cluster_key: 0,
                }
            )
        },
    );
    let newer = image(1, 5, 90, 4);
    let answer = Fabric::FetchAnswer {
        id: 0,
        image: Some(newer.image()),
    };
    work.reply(1, Reply::Answer(&answer), 101, &store);
    assert!(outputs(&mut work).is_empty());
    let none = Fabric::FetchAnswer { id: 0, image: None };
    work.reply(2, Reply::Answer(&none), 102, &store);
    assert_eq!(outputs(&mut work), [Output::Run { resolved: true }]);
    assert_eq!(store.fetch(0, &digest(1)), Some(newer));
}

#[test]
fn a_fetch_lost_or_refused_by_the_store_routes_again_unresolved() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B, C], duplicates_route(0b110));
    let mut work = new_work(100);
    work.start(resolve_need(&[B, C]), 100, &map);
    outputs(&mut work);
    work.reply(1, Reply::Lost, 101, &store);
    store.failing.set(true);
    let copy = image(1, 5, 90, 4);
    let answer = Fabric::FetchAnswer {
        id: 0,
        image: Some(copy.image()),
    };
    work.reply(2, Reply::Answer(&answer), 102, &store);
    assert!(outputs(&mut work).is_empty());
    assert_eq!(work.wake_at(), Some(102 + RESOLVE_RETRY_MS));
    work.tick(112, &map);
    assert_eq!(outputs(&mut work), [Output::Run { resolved: false }]);
}

#[test]
fn a_copy_merged_meanwhile_needs_no_answer() {
    let store = MemStore::default();
    let map = routing(KEY, &[A, B, C], duplicates_route(0b110));
    let mut work = new_work(100);
    work.start(resolve_need(&[B, C]), 100, &map);
    outputs(&mut work);
    let none = Fabric::FetchAnswer { id: 0, image: None };
    work.reply(1, Reply::Answer(&none), 101, &store);
    // C's copy arrived by migration: the route no longer names it.
    work.tick(110, &routing(KEY, &[A, B, C], duplicates_route(0b010)));
    assert_eq!(outputs(&mut work), [Output::Run { resolved: true }]);
}

#[test]
fn a_new_map_during_resolution_routes_again_at_once() {
    let map = routing(KEY, &[A, B], duplicates_route(0b10));
    let mut work = new_work(100);
    work.start(resolve_need(&[B]), 100, &map);
    outputs(&mut work);
    work.tick(110, &routing(KEY + 1, &[A, B], duplicates_route(0b10)));
    assert_eq!(outputs(&mut work), [Output::Run { resolved: false }]);
}

// ---------------------------------------------------------------------
// The routing rule
// ---------------------------------------------------------------------

#[test]
fn decide_follows_the_route() {
    let gates = Arc::new(Gates::new(1));
    let pid = usize::from(PID);
    let map = routing(KEY, &[A, B, C], master_route(&[1]));
    let write = |route: &Route, map: &Routing, resolved| {
        decide(
            map,
            &gates,
            route,
            0,
            pid,
            true,
            ReadMode::Session,
            resolved,
        )
    };
    assert!(matches!(
        write(&master_route(&[1]), &map, false),
        Decision::Write(None)
    ));
    let replica = Route {
        flags: flag::READ,
        master: 1,
        ..Route::default()
    };
    assert!(matches!(write(&replica, &map, false), Decision::Proxy(B)));
    assert!(matches!(
        decide(
            &map,
            &gates,
            &replica,
            0,
            pid,
            false,
            ReadMode::Session,
            false
        ),
        Decision::Read
    ));
    let elsewhere = Route {
        master: 2,
        ..Route::default()
    };
    assert!(matches!(
        decide(
            &map,
            &gates,
            &elsewhere,
            0,
            pid,
            false,
            ReadMode::Session,
            false
        ),
        Decision::Proxy(C)
    ));
    let unknown = Route {
        master: 9,
        ..Route::default()
    };
    assert!(matches!(
        decide(
            &map,
            &gates,
            &unknown,
            0,
            pid,
            false,
            ReadMode::Session,
            false
        ),
        Decision::Unavailable
    ));
    let unavailable = Route {
        flags: flag::UNAVAILABLE,
        ..Route::default()
    };
    assert!(matches!(
        write(&unavailable, &map, false),
        Decision::Unavailable
    ));
    let mut exchanging = map.clone();
    exchanging.cluster_key = KEY + 1;
    assert!(matches!(
        write(&master_route(&[1]), &exchanging, false),
        Decision::Again
    ));
    let duplicates = duplicates_route(0b100);
    assert!(matches!(write(&duplicates, &map, false), Decision::Resolve));
    assert!(matches!(
        write(&duplicates, &map, true),
        Decision::Write(None)
    ));
    // A gated partition counts the write; a closed gate sends it to the
    // final master.
    let gated = Route {
        flags: flag::WRITE | flag::READ | flag::GATED,
        final_master: 2,
        ..master_route(&[2])
    };
    let gate = gates.gate(0, pid).expect("gate");
    match write(&gated, &map, false) {
        Decision::Write(Some(guard)) => {
            assert_eq!(gate.inflight.load(SeqCst), 1);
            drop(guard);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(gate.inflight.load(SeqCst), 0);
    gate.closed.store(true, SeqCst);
    assert!(matches!(write(&gated, &map, false), Decision::Proxy(C)));
    assert_eq!(gate.inflight.load(SeqCst), 0);
}

/// (SC) A write that changed nothing first confirms the regime with
/// every other holder (and the copies not merged yet), once; AP answers at
/// once, and so does a partition with no other holder.
#[test]
fn an_unapplied_sc_write_confirms_with_every_other_holder_once() {
    let ap = routing(KEY, &[A, B, C], master_route(&[1]));
    let route = Route {
        duplicates: 0b100,
        ..master_route(&[1])
    };
    assert_eq!(confirm_unapplied(&ap, &route, 0, false), None);
    let mut sc = ap.clone();
    sc.namespaces[0].strong_consistency = true;
    assert_eq!(confirm_unapplied(&sc, &route, 0, false), Some(vec![B, C]));
    assert_eq!(
        confirm_unapplied(&sc, &master_route(&[2]), 0, false),
        Some(vec![C])
    );
    assert_eq!(confirm_unapplied(&sc, &route, 0, true), None);
    assert_eq!(confirm_unapplied(&sc, &master_route(&[]), 0, false), None);
}

// ---------------------------------------------------------------------
// Receiving
// ---------------------------------------------------------------------

#[test]
fn a_replica_write_is_applied_only_under_the_masters_map() {
    let store = MemStore::default();
    let map = routing(KEY, &[B, A], Route::default());
    let mut counts = Vec::new();
    let mut count = |counter, n| counts.push((counter, n));
    let copy = image(1, 4, 200, 8);
    let refused = apply_replica_write(&store, &map, "test", KEY + 1, &copy.image(), &mut count);
    assert_eq!(refused.code, code::CLUSTER_KEY_MISMATCH);
    assert_eq!(store.fetch(0, &digest(1)), None);
    let applied = apply_replica_write(&store, &map, "test", KEY, &copy.image(), &mut count);
    assert_eq!(applied.code, code::OK);
    assert_eq!(store.fetch(0, &digest(1)), Some(copy.clone()));
    // Ordered by last-update time: a higher generation written earlier
    // loses, and is still acknowledged.
    let older = image(1, 9, 150, 8);
    let late = apply_replica_write(&store, &map, "test", KEY, &older.image(), &mut count);
    assert_eq!(late.code, code::OK);
    assert_eq!(store.fetch(0, &digest(1)), Some(copy));
    let unknown = apply_replica_write(&store, &map, "nope", KEY, &older.image(), &mut count);
    assert_eq!(unknown.code, code::FAILED);
    assert_eq!(
        counts,
        [
            (Counter::ReplicaWritesReceived, 1),
            (Counter::ReplicaWritesRefused, 1),
            (Counter::ReplicaWritesReceived, 1),
            (Counter::ReplicaWritesReceived, 1),
            (Counter::ReplicaWritesReceived, 1),
        ]
    );
}

#[test]
fn a_fetch_answers_the_held_copy() {
    let store = MemStore::default();
    let map = routing(KEY, &[B, A], Route::default());
    assert_eq!(serve_fetch(&store, &map, "test", &digest(1), 0), Ok(None));
    let copy = image(1, 4, 200, 8);
    store
        .apply(0, &copy.image(), ConflictPolicy::Generation)
        .expect("stored");
    assert_eq!(
        serve_fetch(&store, &map, "test", &digest(1), 0),
        Ok(Some(copy.clone()))
    );
    assert_eq!(serve_fetch(&store, &map, "other", &digest(1), 0), Ok(None));
    // A strong-consistency confirmation: answered only under the asker's
    // cluster key.
    assert_eq!(
        serve_fetch(&store, &map, "test", &digest(1), map.cluster_key),
        Ok(Some(copy))
    );
    assert_eq!(
        serve_fetch(&store, &map, "test", &digest(1), map.cluster_key ^ 1),
        Err(OtherRegime)
    );
}

#[test]
fn a_proxied_request_is_answered_redirected_or_worked_on() {
    let map = routing(KEY, &[B, A], master_route(&[1]));
    let mut counts = Vec::new();
    let mut count = |counter, _| counts.push(counter);
    let framing = ProxyFraming::Message;
    assert!(matches!(
        serve_proxied(
            B,
            Ran::Answered,
            0,
            100,
            Vec::new(),
            framing,
            &map,
            &mut count
        ),
        Proxied::Answered
    ));
    assert!(matches!(
        serve_proxied(
            B,
            Ran::Need(Need::Proxy { to: C }),
            0,
            100,
            Vec::new(),
            framing,
            &map,
            &mut count
        ),
        Proxied::Redirect(C)
    ));
    let Proxied::Work(mut work) = serve_proxied(
        B,
        Ran::Need(Need::Again),
        0,
        100,
        Vec::new(),
        framing,
        &map,
        &mut count,
    ) else {
        panic!("no work");
    };
    assert_eq!(work.wake_at(), Some(AGAIN_PAUSE_MS));
    assert_eq!(work.deadline_ms(), 100);
    assert!(outputs(&mut work).is_empty());
    assert_eq!(
        counts,
        [
            Counter::FromProxyComplete,
            Counter::FromProxyRedirect,
            Counter::FromProxyComplete
        ]
    );
}

// ---------------------------------------------------------------------
// Immigration
// ---------------------------------------------------------------------

fn immigrate_route(from_members: u64) -> Route {
    Route {
        immigrate_from: from_members,
        ..Route::default()
    }
}

fn step(
    immigrator: &mut Immigrator,
    store: &MemStore,
    map: &Routing,
    from: NodeId,
    message: Fabric<'_>,
) -> (u64, u8) {
    let answer = immigrator
        .receive(store, map, from, &message, 0)
        .expect("a migration step");
    assert!(answer.waits.is_empty());
    (answer.id, answer.code)
}

#[test]
fn an_immigration_is_taken_only_when_expected() {
    let store = MemStore::default();
    // This node (A) expects partitions from B (member 1), not from C.
    let map = routing(KEY, &[A, B, C], immigrate_route(0b010));
    let mut immigrator = Immigrator::new(1);
    let start = |id, pid, key| Fabric::MigrateStart {
        id,
        namespace: "test",
        pid,
        key,
    };
    assert_eq!(
        step(&mut immigrator, &store, &map, C, start(1, PID, KEY)),
        (1, code::AGAIN)
    );
    assert_eq!(
        step(&mut immigrator, &store, &map, B, start(2, PID, KEY + 1)),
        (2, code::AGAIN)
    );
    assert_eq!(
        step(&mut immigrator, &store, &map, B, start(3, PID, KEY)),
        (3, code::OK)
    );
    // Again from the same sender: still OK. Another partition: one at a
    // time (migrate-max-num-incoming 1).
    assert_eq!(
        step(&mut immigrator, &store, &map, B, start(4, PID, KEY)),
        (4, code::OK)
    );
    assert_eq!(
        step(&mut immigrator, &store, &map, B, start(5, PID + 1, KEY)),
        (5, code::AGAIN)
    );
    assert_eq!(immigrator.incoming(), 1);
    let held = image(1, 7, 100, 4);
    store
        .apply(0, &held.image(), ConflictPolicy::Generation)
        .expect("stored");
    let older = image(1, 3, 900, 4);
    let new = image(2, 1, 50, 4);
    let records = Fabric::MigrateRecords {
        id: 6,
        namespace: "test",
        pid: PID,
        key: KEY,
        images: vec![older.image(), new.image()],
    };
    assert_eq!(
        step(&mut immigrator, &store, &map, B, records.clone()),
        (6, code::OK)
    );
    // The generation policy keeps the held copy with more writes.
    assert_eq!(store.fetch(0, &digest(1)), Some(held));
    assert_eq!(
        step(&mut immigrator, &store, &map, C, records),
        (6, code::REFUSED)
    );
    assert_eq!(store.fetch(0, &digest(2)), Some(new));
    let done = Fabric::MigrateDone {
        id: 7,
        namespace: "test",
        pid: PID,
        key: KEY,
    };
    assert_eq!(step(&mut immigrator, &store, &map, B, done), (7, code::OK));
    assert_eq!(immigrator.incoming(), 0);
    let outputs: Vec<Output> = std::iter::from_fn(|| immigrator.next_output()).collect();
    assert_eq!(
        outputs,
        [
            Output::Count(Counter::MigrateRecordsReceived, 2),
            Output::Count(Counter::MigrateRecordsApplied, 1),
            Output::Count(Counter::MigratePartitionsReceived, 1),
            Output::Event(DataEvent::ImmigrationDone {
                namespace: 0,
                pid: PID,
                from: B,
                key: KEY
            }),
        ]
    );
    assert!(immigrator
        .receive(&store, &map, B, &Fabric::Ack { id: 1, code: 0 }, 0)
        .is_none());
}

#[test]
fn immigrations_of_an_older_map_are_forgotten() {
    let store = MemStore::default();
    let mut immigrator = Immigrator::new(1);
    let old = routing(KEY, &[A, B], immigrate_route(0b10));
    let start = |key| Fabric::MigrateStart {
        id: 1,
        namespace: "test",
        pid: PID,
        key,
    };
    assert_eq!(
        step(&mut immigrator, &store, &old, B, start(KEY)).1,
        code::OK
    );
    let new = routing(KEY + 1, &[A, C], immigrate_route(0b10));
    assert_eq!(
        step(&mut immigrator, &store, &new, C, start(KEY + 1)).1,
        code::OK
    );
    assert_eq!(immigrator.incoming(), 1);
}

fn start_at(immigrator: &mut Immigrator, map: &Routing, from: NodeId, pid: u16, now_ms: u64) -> u8 {
    let message = Fabric::MigrateStart {
        id: 1,
        namespace: "test",
        pid,
        key: map.key,
    };
    let answer = immigrator
        .receive(&MemStore::default(), map, from, &message, now_ms)
        .expect("a migration step");
    answer.code
}

/// Two maps in quick succession (a join, then `recluster:`): the slots
/// taken under the first are forgotten even where the second expects the
/// same partition from the same sender, or they fill
/// migrate-max-num-incoming for ever (the sender's new attempts at other
/// partitions are all answered AGAIN, and the cluster never settles).
#[test]
fn slots_of_an_older_map_are_forgotten_even_when_still_expected() {
    let mut immigrator = Immigrator::new(2);
    let first = routing(KEY, &[A, B], immigrate_route(0b10));
    assert_eq!(start_at(&mut immigrator, &first, B, PID, 0), code::OK);
    assert_eq!(start_at(&mut immigrator, &first, B, PID + 1, 0), code::OK);
    assert_eq!(
        start_at(&mut immigrator, &first, B, PID + 2, 0),
        code::AGAIN
    );
    // The next map expects the same partitions from B.
    let second = routing(KEY + 2, &[A, B], immigrate_route(0b10));
    assert_eq!(start_at(&mut immigrator, &second, B, PID + 2, 1), code::OK);
    assert_eq!(immigrator.incoming(), 1);
    assert_eq!(start_at(&mut immigrator, &second, B, PID + 3, 1), code::OK);
    assert_eq!(
        start_at(&mut immigrator, &second, B, PID + 4, 1),
        code::AGAIN
    );
}

/// A sender that gave an attempt up (a step timed out) frees its slot
/// once it has been quiet longer than any sender waits.
#[test]
fn a_slot_its_sender_gave_up_is_forgotten_when_the_slots_are_full() {
    let mut immigrator = Immigrator::new(1);
    let map = routing(KEY, &[A, B, C], immigrate_route(0b110));
    assert_eq!(start_at(&mut immigrator, &map, B, PID, 0), code::OK);
    let records = Fabric::MigrateRecords {
        id: 2,
        namespace: "test",
        pid: PID,
        key: KEY,
        images: vec![],
    };
    let store = MemStore::default();
    let answer = immigrator
        .receive(&store, &map, B, &records, 1_000)
        .expect("a step");
    assert_eq!(answer.code, code::OK);
    // Still under way 15 s after START (its last step was at 1 s).
    let quiet_until = 1_000 + SLOT_IDLE_MS;
    assert_eq!(
        start_at(&mut immigrator, &map, C, PID + 1, quiet_until - 1),
        code::AGAIN
    );
    assert_eq!(
        start_at(&mut immigrator, &map, C, PID + 1, quiet_until),
        code::OK
    );
    assert_eq!(immigrator.incoming(), 1);
    // B's attempt, started again, waits for a slot like any other.
    assert_eq!(
        start_at(&mut immigrator, &map, B, PID, quiet_until),
        code::AGAIN
    );
}

// ---------------------------------------------------------------------
// Emigration
// ---------------------------------------------------------------------

fn emigrator(workers: usize, sleep_us: u32, gates: &Arc<Gates>) -> Emigrator {
    Emigrator::new(
        EmigratorConfig {
            workers,
            namespaces: vec![EmigrateNamespace {
                name: "test".to_owned(),
                sleep_us,
            }],
        },
        Arc::clone(gates),
    )
}

fn emigration(pid: u16, to: NodeId, kind: EmigrationKind) -> Emigration {
    Emigration {
        namespace: 0,
        pid,
        to,
        key: KEY,
        kind,
    }
}

fn drain(emigrator: &mut Emigrator) -> Vec<Output> {
    std::iter::from_fn(|| emigrator.next_output()).collect()
}

fn bulk(token: Token, to: NodeId) -> Output {
    Output::Send {
        token,
        to,
        channel: Channel::Bulk,
    }
}

fn decode_step(emigrator: &Emigrator, token: Token) -> (u8, usize) {
    sent(
        |out| emigrator.encode(token, u64::from(token), out),
        |message| match message {
            Fabric::MigrateStart { pid, key, .. } => {
                assert_eq!((pid, key), (PID, KEY));
                (0, 0)
            }
            Fabric::MigrateRecords {
                pid, key, images, ..
            } => {
                assert_eq!((pid, key), (PID, KEY));
                (1, images.len())
            }
            Fabric::MigrateDone { pid, key, .. } => {
                assert_eq!((pid, key), (PID, KEY));
                (2, 0)
            }
            other => panic!("not a migration step: {other:?}"),
        },
    )
}

#[test]
fn an_emigration_sends_start_frames_and_done() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    // Three records of 200 KiB: two in the first frame, one in the next.
    for n in 1..=3 {
        store
            .apply(
                0,
                &image(n, 1, 10, 200 * 1024).image(),
                ConflictPolicy::Generation,
            )
            .expect("stored");
    }
    const { assert!(2 * 200 * 1024 >= FRAME_BYTES) };
    let mut emigrator = emigrator(1, 0, &gates);
    emigrator.add(emigration(PID, B, EmigrationKind::Fill), 0, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(1, B)]);
    assert_eq!(decode_step(&emigrator, 1), (0, 0));
    emigrator.reply(1, Reply::Answer(&ack(code::OK)), 1, KEY, &store);
    assert_eq!(drain(&mut emigrator), [bulk(2, B)]);
    assert_eq!(decode_step(&emigrator, 2), (1, 2));
    emigrator.reply(2, Reply::Answer(&ack(code::OK)), 2, KEY, &store);
    assert_eq!(
        drain(&mut emigrator),
        [
            Output::Count(Counter::MigrateRecordsTransmitted, 2),
            bulk(3, B)
        ]
    );
    assert_eq!(decode_step(&emigrator, 3), (1, 1));
    emigrator.reply(3, Reply::Answer(&ack(code::OK)), 3, KEY, &store);
    assert_eq!(
        drain(&mut emigrator),
        [
            Output::Count(Counter::MigrateRecordsTransmitted, 1),
            bulk(4, B)
        ]
    );
    assert_eq!(decode_step(&emigrator, 4), (2, 0));
    emigrator.reply(4, Reply::Answer(&ack(code::OK)), 4, KEY, &store);
    assert_eq!(
        drain(&mut emigrator),
        [
            Output::Count(Counter::MigratePartitionsSent, 1),
            Output::Event(DataEvent::EmigrationDone {
                namespace: 0,
                pid: PID,
                to: B,
                key: KEY
            })
        ]
    );
    assert_eq!(emigrator.active(), 0);
    assert_eq!(emigrator.wake_at(), None);
}

#[test]
fn an_emigration_is_paced_by_migrate_sleep() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    for n in 1..=3 {
        store
            .apply(0, &image(n, 1, 10, 16).image(), ConflictPolicy::Generation)
            .expect("stored");
    }
    let mut emigrator = emigrator(1, 1500, &gates);
    emigrator.add(emigration(PID, B, EmigrationKind::Fill), 0, KEY);
    drain(&mut emigrator);
    emigrator.reply(1, Reply::Answer(&ack(code::OK)), 1, KEY, &store);
    drain(&mut emigrator);
    emigrator.reply(2, Reply::Answer(&ack(code::OK)), 10, KEY, &store);
    // Three records at 1.5 ms each: DONE waits 5 ms (rounded up).
    assert_eq!(
        drain(&mut emigrator),
        [Output::Count(Counter::MigrateRecordsTransmitted, 3)]
    );
    assert_eq!(emigrator.wake_at(), Some(15));
    emigrator.tick(14, KEY);
    assert!(drain(&mut emigrator).is_empty());
    emigrator.tick(15, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(3, B)]);
    assert_eq!(decode_step(&emigrator, 3), (2, 0));
}

#[test]
fn a_handoff_drains_the_writes_under_way_before_done() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let pid = usize::from(PID);
    let mut emigrator = emigrator(1, 0, &gates);
    let writing = GateGuard::enter(&gates, 0, pid).expect("open");
    emigrator.add(emigration(PID, B, EmigrationKind::Handoff), 0, KEY);
    drain(&mut emigrator);
    // An empty partition: no frames, then the drain.
    emigrator.reply(1, Reply::Answer(&ack(code::OK)), 1, KEY, &store);
    assert!(drain(&mut emigrator).is_empty());
    let gate = gates.gate(0, pid).expect("gate");
    assert!(gate.closed.load(SeqCst));
    // New writes are turned away now.
    assert!(GateGuard::enter(&gates, 0, pid).is_none());
    assert_eq!(emigrator.wake_at(), Some(2));
    emigrator.tick(2, KEY);
    assert!(drain(&mut emigrator).is_empty());
    drop(writing);
    emigrator.tick(3, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(2, B)]);
    assert_eq!(decode_step(&emigrator, 2), (2, 0));
    emigrator.reply(2, Reply::Answer(&ack(code::OK)), 4, KEY, &store);
    assert_eq!(drain(&mut emigrator).len(), 2);
    // The gate stays closed: the final master takes the writes.
    assert!(gate.closed.load(SeqCst));
}

#[test]
fn a_drain_that_does_not_end_fails_and_reopens_the_gate() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let pid = usize::from(PID);
    let mut emigrator = emigrator(1, 0, &gates);
    let _writing = GateGuard::enter(&gates, 0, pid).expect("open");
    emigrator.add(emigration(PID, B, EmigrationKind::Handoff), 0, KEY);
    drain(&mut emigrator);
    emigrator.reply(1, Reply::Answer(&ack(code::OK)), 1, KEY, &store);
    emigrator.tick(5_001, KEY);
    assert!(!gates.gate(0, pid).expect("gate").closed.load(SeqCst));
    assert!(drain(&mut emigrator).is_empty());
    // Again from START after 50 ms.
    emigrator.tick(5_051, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(2, B)]);
    assert_eq!(decode_step(&emigrator, 2), (0, 0));
}

/// A handoff of the map left behind, still draining, is cancelled only
/// at the next tick; by then the new map's handoff of the same partition
/// may have closed the gate again, and it must stay closed.
#[test]
fn a_cancelled_handoff_leaves_the_new_maps_gate_closed() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let pid = usize::from(PID);
    let mut emigrator = emigrator(2, 0, &gates);
    let gate = gates.gate(0, pid).expect("gate");
    let writing = GateGuard::enter(&gates, 0, pid).expect("open");
    emigrator.add(emigration(PID, B, EmigrationKind::Handoff), 0, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(1, B)]);
    emigrator.reply(1, Reply::Answer(&ack(code::OK)), 1, KEY, &store);
    assert!(gate.closed.load(SeqCst), "the old handoff drains");
    // The next map is published: every gate opens; its handoff starts on
    // the second worker and closes the gate again.
    gates.open_all();
    let next = Emigration {
        key: KEY + 1,
        ..emigration(PID, B, EmigrationKind::Handoff)
    };
    assert!(emigrator.add(next, 2, KEY + 1));
    assert_eq!(drain(&mut emigrator), [bulk(2, B)]);
    emigrator.reply(2, Reply::Answer(&ack(code::OK)), 3, KEY + 1, &store);
    assert!(gate.closed.load(SeqCst));
    // The old handoff is cancelled now; the gate stays closed.
    emigrator.tick(4, KEY + 1);
    assert!(
        gate.closed.load(SeqCst),
        "the cancelled handoff opened the gate"
    );
    assert!(GateGuard::enter(&gates, 0, pid).is_none());
    // The new handoff ends as usual once the writes under way are done.
    drop(writing);
    emigrator.tick(5, KEY + 1);
    assert_eq!(drain(&mut emigrator), [bulk(3, B)]);
    assert!(gate.closed.load(SeqCst));
}

#[test]
fn a_refused_or_silent_step_starts_again_with_growing_pauses() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let mut emigrator = emigrator(1, 0, &gates);
    emigrator.add(emigration(PID, B, EmigrationKind::Fill), 0, KEY);
    drain(&mut emigrator);
    emigrator.reply(1, Reply::Answer(&ack(code::REFUSED)), 10, KEY, &store);
    emigrator.tick(59, KEY);
    assert!(drain(&mut emigrator).is_empty());
    emigrator.tick(60, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(2, B)]);
    // No answer within the step timeout: a failure, then 100 ms.
    emigrator.tick(60 + STEP_TIMEOUT_MS, KEY);
    assert!(drain(&mut emigrator).is_empty());
    emigrator.tick(160 + STEP_TIMEOUT_MS, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(3, B)]);
    // The late answer to the first attempt changes nothing.
    emigrator.reply(
        2,
        Reply::Answer(&ack(code::OK)),
        161 + STEP_TIMEOUT_MS,
        KEY,
        &store,
    );
    assert!(drain(&mut emigrator).is_empty());
}

#[test]
fn a_new_map_cancels_emigrations_and_workers_bound_them() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let mut emigrator = emigrator(2, 0, &gates);
    for to in [B, C, D] {
        emigrator.add(emigration(PID, to, EmigrationKind::Fill), 0, KEY);
    }
    assert_eq!(drain(&mut emigrator), [bulk(1, B), bulk(2, C)]);
    assert_eq!((emigrator.active(), emigrator.queued()), (2, 1));
    // B's finishes: D's starts.
    emigrator.reply(1, Reply::Answer(&ack(code::OK)), 1, KEY, &store);
    assert_eq!(drain(&mut emigrator), [bulk(3, B)]);
    emigrator.reply(3, Reply::Answer(&ack(code::OK)), 2, KEY, &store);
    assert_eq!(drain(&mut emigrator).len(), 3);
    assert_eq!(drain(&mut emigrator), []);
    assert_eq!((emigrator.active(), emigrator.queued()), (2, 0));
    // A new map: everything under way is dropped, with no report.
    emigrator.tick(3, KEY + 1);
    assert!(drain(&mut emigrator).is_empty());
    assert_eq!(emigrator.active(), 0);
}

/// The migrate thread runs at background priority: on a loaded machine
/// it can take a whole map's emigrations (4096 after a join) only once
/// the next map (a `recluster:` 75 ms later) is in force. Not one of them
/// may hold a worker; those of the map in force start at once.
#[test]
fn emigrations_of_a_map_already_left_behind_are_dropped_when_added() {
    let gates = Arc::new(Gates::new(1));
    let mut emigrator = emigrator(1, 0, &gates);
    for pid in 0..100 {
        assert!(!emigrator.add(emigration(pid, B, EmigrationKind::Fill), 0, KEY + 1));
    }
    assert_eq!((emigrator.active(), emigrator.queued()), (0, 0));
    assert!(drain(&mut emigrator).is_empty());
    assert_eq!(emigrator.wake_at(), None);
    let current = Emigration {
        key: KEY + 1,
        ..emigration(PID, C, EmigrationKind::Fill)
    };
    assert!(emigrator.add(current, 1, KEY + 1));
    assert_eq!(drain(&mut emigrator), [bulk(1, C)]);
}

#[test]
fn a_busy_receiver_is_left_alone_a_moment_while_others_are_served() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let mut emigrator = emigrator(1, 0, &gates);
    emigrator.add(emigration(PID, B, EmigrationKind::Fill), 0, KEY);
    emigrator.add(emigration(PID + 1, B, EmigrationKind::Fill), 0, KEY);
    emigrator.add(emigration(PID, C, EmigrationKind::Fill), 0, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(1, B)]);
    // B has enough immigrations: nothing goes to B for 10 ms; C's starts.
    emigrator.reply(1, Reply::Answer(&ack(code::AGAIN)), 10, KEY, &store);
    assert_eq!(drain(&mut emigrator), [bulk(2, C)]);
    assert_eq!((emigrator.active(), emigrator.queued()), (1, 2));
    emigrator.reply(2, Reply::Answer(&ack(code::OK)), 11, KEY, &store);
    assert_eq!(drain(&mut emigrator), [bulk(3, C)]);
    emigrator.reply(3, Reply::Answer(&ack(code::OK)), 12, KEY, &store);
    assert_eq!(drain(&mut emigrator).len(), 2);
    // The worker is free; B is busy until 20, and the refused emigration
    // (first in the queue again, with no pause of its own) goes then.
    assert_eq!(emigrator.wake_at(), Some(20));
    emigrator.tick(19, KEY);
    assert!(drain(&mut emigrator).is_empty());
    emigrator.tick(20, KEY);
    assert_eq!(drain(&mut emigrator), [bulk(4, B)]);
    assert_eq!(emigrator.queued(), 1);
    sent(
        |out| emigrator.encode(4, 4, out),
        |message| assert!(matches!(message, Fabric::MigrateStart { pid, .. } if pid == PID)),
    );
}

#[test]
fn queued_emigrations_of_a_map_left_behind_are_dropped_at_once() {
    let gates = Arc::new(Gates::new(1));
    let store = MemStore::default();
    let mut emigrator = emigrator(1, 0, &gates);
    for to in [B, C, D, E] {
        emigrator.add(emigration(PID, to, EmigrationKind::Fill), 0, KEY);
    }
    assert_eq!(drain(&mut emigrator), [bulk(1, B)]);
    assert_eq!(emigrator.queued(), 3);
    // A new map: the one under way is cancelled and the queue emptied; a
    // new emigration of the new map starts at once.
    emigrator.tick(5, KEY + 1);
    assert_eq!((emigrator.active(), emigrator.queued()), (0, 0));
    emigrator.add(
        Emigration {
            key: KEY + 1,
            ..emigration(PID, F, EmigrationKind::Fill)
        },
        6,
        KEY + 1,
    );
    assert_eq!(drain(&mut emigrator), [bulk(2, F)]);
    emigrator.reply(1, Reply::Answer(&ack(code::OK)), 7, KEY + 1, &store);
    assert!(drain(&mut emigrator).is_empty());
}
