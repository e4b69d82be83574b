//! The proxy hop rule: a request this node does not serve goes to the node
//! that does, and its answer is relayed.
//!
//! 1. Send the request (`Proxy`, with the time it has left) to the working
//!    master of this node's map.
//! 2. An answer: relay it to the client.
//! 3. "Not served here either" with a redirect to another node (mastership
//!    moved in a handoff this node did not see): follow it, up to three
//!    redirects in a row.
//! 4. Otherwise (no redirect, a redirect back to this node or to the same
//!    node, too many hops, a lost connection): pause (2, 4, … 50 ms) and
//!    route the request again here with the current map; it may be served
//!    here now, or proxied again.
//! 5. At the deadline the client gets a timeout.

use super::work::Outbox;
use super::{retry_pause_ms, Counter, Reply, Token, PROXY_HOPS_MAX};
use crate::fabric::{Channel, Fabric};
use crate::NodeId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    InFlight(Token),
    Pausing {
        until_ms: u64,
    },
    /// Waiting for the local run's verdict.
    Rerouting,
}

/// What the proxy does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Waiting,
    /// Relay the answer just received.
    Answered,
    /// Run the request here again (route with the current map).
    Reroute,
}

#[derive(Debug)]
pub struct Proxy {
    me: NodeId,
    to: NodeId,
    hops: u32,
    attempt: u32,
    state: State,
    /// Milliseconds the request had left when last sent.
    remaining_ms: u32,
}

impl Proxy {
    pub(crate) fn new(me: NodeId, to: NodeId) -> Proxy {
        Proxy {
            me,
            to,
            hops: 0,
            attempt: 0,
            state: State::Rerouting,
            remaining_ms: 1,
        }
    }

    pub(crate) fn to(&self) -> NodeId {
        self.to
    }

    /// Sends the request to `to` (the first time, or after a reroute).
    pub(crate) fn send_to(&mut self, to: NodeId, now_ms: u64, deadline_ms: u64, out: &mut Outbox) {
        assert_eq!(self.state, State::Rerouting, "a proxy sends one at a time");
        self.to = to;
        self.send(now_ms, deadline_ms, out);
    }

    fn send(&mut self, now_ms: u64, deadline_ms: u64, out: &mut Outbox) {
        self.remaining_ms = deadline_ms
            .saturating_sub(now_ms)
            .clamp(1, u64::from(u32::MAX)) as u32;
        self.state = State::InFlight(out.send(self.to, Channel::Requests));
    }

    pub(crate) fn reply(
        &mut self,
        token: Token,
        reply: &Reply<'_>,
        now_ms: u64,
        deadline_ms: u64,
        out: &mut Outbox,
    ) -> Progress {
        if self.state != State::InFlight(token) {
            return Progress::Waiting;
        }
        match reply {
            Reply::Answer(Fabric::ProxyAnswer { redirect: None, .. }) => {
                out.count(Counter::ClientProxyComplete, 1);
                return Progress::Answered;
            }
            Reply::Answer(Fabric::ProxyAnswer {
                redirect: Some(next),
                ..
            }) => {
                // The node it was sent to names who serves it: go there.
                let next = *next;
                if next != self.me && next != self.to {
                    self.hops += 1;
                    if self.hops <= PROXY_HOPS_MAX {
                        self.to = next;
                        self.send(now_ms, deadline_ms, out);
                        return Progress::Waiting;
                    }
                    self.hops = 0;
                }
            }
            Reply::Lost => out.count(Counter::ClientProxyError, 1),
            Reply::Answer(_) | Reply::Invalid => {}
        }
        // Else route again with this node's current map, after a pause.
        self.state = State::Pausing {
            until_ms: now_ms + retry_pause_ms(self.attempt),
        };
        self.attempt += 1;
        Progress::Waiting
    }

    pub(crate) fn tick(&mut self, now_ms: u64) -> Progress {
        match self.state {
            State::Pausing { until_ms } if now_ms >= until_ms => {
                self.state = State::Rerouting;
                Progress::Reroute
            }
            _ => Progress::Waiting,
        }
    }

    pub(crate) fn wake_at(&self) -> Option<u64> {
        match self.state {
            State::Pausing { until_ms } => Some(until_ms),
            _ => None,
        }
    }

    /// Encodes the request for `token` around `body`.
    pub(crate) fn encode(
        &self,
        token: Token,
        id: u64,
        body: &[u8],
        framing: crate::fabric::ProxyFraming,
        out: &mut Vec<u8>,
    ) -> bool {
        if self.state != State::InFlight(token) {
            return false;
        }
        Fabric::Proxy {
            id,
            timeout_ms: self.remaining_ms,
            framing,
            body,
        }
        .encode(out);
        true
    }
}
