//! Control messages between nodes: heartbeat pulses, clustering
//! (join, proposal, commit), the partition-version exchange and migration
//! signals. They travel on heartbeat connections, one frame each, inside an
//! [`Envelope`] naming the sender.

use crate::codec::{self, CodecError, Reader, Writer};
use crate::version::Version;
use crate::NodeId;
use bolide_types::PARTITION_COUNT;

/// Version of the clustering protocol carried in pulses. Nodes of another
/// protocol version never form a cluster together (they log why, instead
/// of dropping each other's frames as malformed).
///
/// 2: the exchange carries each namespace's `rack-id` (from eac51d4, racks).
pub const PROTOCOL: u32 = 2;

/// A host and port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A namespace as pulses advertise it: nodes agree on replication factors
/// before they cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceSummary {
    pub name: String,
    pub replication_factor: u8,
}

/// What every node sends every heartbeat interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulse {
    pub cluster_name: String,
    pub protocol: u32,
    /// Random per process start: a changed boot id is a restart.
    pub boot_id: u64,
    pub heartbeat: Endpoint,
    pub fabric: Endpoint,
    /// Addresses clients use (service port), for `peers-clear-std`.
    pub service: Vec<Endpoint>,
    /// Where the node serves the Redis protocol (empty: no RESP port), for
    /// Redis Cluster's `CLUSTER SLOTS` and `MOVED`. Sent last and read only
    /// when present, so pulses of nodes that predate it still decode.
    pub redis: Vec<Endpoint>,
    /// The nodes this node hears, with their heartbeat endpoints.
    pub adjacency: Vec<(NodeId, Endpoint)>,
    /// The committed cluster: 0 and empty while orphan.
    pub cluster_key: u64,
    pub succession: Vec<NodeId>,
    pub namespaces: Vec<NamespaceSummary>,
    /// The sender's wall clock (ms), for skew estimates.
    pub clock_ms: u64,
}

impl Pulse {
    pub fn principal(&self) -> Option<NodeId> {
        self.succession.first().copied()
    }
    pub fn is_orphan(&self) -> bool {
        self.cluster_key == 0
    }
}

/// A proposal's identity: higher wins; ties broken by the proposer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalId {
    pub sequence: u64,
    pub proposer: NodeId,
}

/// One namespace's versions of all 4096 partitions, as one node holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceVersions {
    pub name: String,
    pub replication_factor: u8,
    pub versions: Vec<Version>,
    /// The sender's regime of the namespace: 0 for AP, non-zero for
    /// strong consistency.
    pub regime: u32,
    /// The sender's `rack-id` for the namespace (0: none).
    pub rack_id: u32,
    /// (SC) per partition, the last rebalance at which the sender saw it
    /// available (empty for AP).
    pub witnesses: Vec<crate::sc::Witness>,
    /// (SC) the sender's staged roster (metadata module `roster`): every
    /// member adopts the latest one at the commit.
    pub pending_roster: Option<crate::metadata::Item>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Pulse(Pulse),
    /// An orphan asks a principal (or the highest orphan) to take it in.
    JoinRequest,
    /// A principal tells its members to leave and join `principal`.
    Move {
        principal: NodeId,
    },
    Propose {
        id: ProposalId,
        key: u64,
        succession: Vec<NodeId>,
    },
    ProposeReply {
        id: ProposalId,
        accepted: bool,
    },
    Commit {
        id: ProposalId,
        key: u64,
        succession: Vec<NodeId>,
    },
    /// A member's partition versions for the exchange at `key`.
    ExchangeData {
        key: u64,
        namespaces: Vec<NamespaceVersions>,
    },
    /// Every member's versions, from the principal: balance now.
    ExchangeCommit {
        key: u64,
        members: Vec<(NodeId, Vec<NamespaceVersions>)>,
    },
    /// Every replica of the partition is complete: drop your extra copy.
    AllDone {
        key: u64,
        namespace: String,
        pid: u16,
    },
    AllDoneAck {
        key: u64,
        namespace: String,
        pid: u16,
    },
    /// Cluster-wide metadata items (truncation points and the like).
    Metadata {
        items: Vec<crate::metadata::Item>,
        /// Sent at a cluster change: every item the sender holds (not one
        /// item just set). A node that lost its strong-consistency state
        /// takes the roster in force from it.
        sync: bool,
        /// Non-zero: the sender waits for a [`Message::MetadataAck`] with
        /// it once the items are applied (an admin command answers only
        /// when every member has its change).
        ticket: u64,
    },
    /// The items of the `Metadata` message with `ticket` are applied here.
    MetadataAck {
        ticket: u64,
    },
}

/// A message and its sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub from: NodeId,
    pub message: Message,
}

mod kind {
    pub const PULSE: u8 = 1;
    pub const JOIN_REQUEST: u8 = 2;
    pub const MOVE: u8 = 3;
    pub const PROPOSE: u8 = 4;
    pub const PROPOSE_REPLY: u8 = 5;
    pub const COMMIT: u8 = 6;
    pub const EXCHANGE_DATA: u8 = 7;
    pub const EXCHANGE_COMMIT: u8 = 8;
    pub const ALL_DONE: u8 = 9;
    pub const ALL_DONE_ACK: u8 = 10;
    pub const METADATA: u8 = 11;
    pub const METADATA_ACK: u8 = 12;
}

impl Envelope {
    /// Appends the envelope as one frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let kind = match &self.message {
            Message::Pulse(_) => kind::PULSE,
            Message::JoinRequest => kind::JOIN_REQUEST,
            Message::Move { .. } => kind::MOVE,
            Message::Propose { .. } => kind::PROPOSE,
            Message::ProposeReply { .. } => kind::PROPOSE_REPLY,
            Message::Commit { .. } => kind::COMMIT,
            Message::ExchangeData { .. } => kind::EXCHANGE_DATA,
            Message::ExchangeCommit { .. } => kind::EXCHANGE_COMMIT,
            Message::AllDone { .. } => kind::ALL_DONE,
            Message::AllDoneAck { .. } => kind::ALL_DONE_ACK,
            Message::Metadata { .. } => kind::METADATA,
            Message::MetadataAck { .. } => kind::METADATA_ACK,
        };
        codec::write_frame(out, kind, |w| {
            w.u64(self.from);
            encode_message(w, &self.message);
        });
    }

    /// Decodes a frame body of `kind`. Every byte must be used.
    pub fn decode(kind: u8, body: &[u8]) -> Result<Envelope, CodecError> {
        let mut r = Reader::new(body);
        let from = r.u64()?;
        if from == 0 {
            return Err(CodecError::Invalid("node id 0"));
        }
        let message = match kind {
            kind::PULSE => Message::Pulse(read_pulse(&mut r)?),
            kind::JOIN_REQUEST => Message::JoinRequest,
            kind::MOVE => Message::Move {
                principal: r.u64()?,
            },
            kind::PROPOSE => Message::Propose {
                id: read_proposal_id(&mut r)?,
                key: read_key(&mut r)?,
                succession: read_succession(&mut r)?,
            },
            kind::PROPOSE_REPLY => Message::ProposeReply {
                id: read_proposal_id(&mut r)?,
                accepted: r.bool()?,
            },
            kind::COMMIT => Message::Commit {
                id: read_proposal_id(&mut r)?,
                key: read_key(&mut r)?,
                succession: read_succession(&mut r)?,
            },
            kind::EXCHANGE_DATA => Message::ExchangeData {
                key: read_key(&mut r)?,
                namespaces: r.list(9, read_namespace_versions)?,
            },
            kind::EXCHANGE_COMMIT => Message::ExchangeCommit {
                key: read_key(&mut r)?,
                members: r.list(12, |r| Ok((r.u64()?, r.list(9, read_namespace_versions)?)))?,
            },
            kind::ALL_DONE | kind::ALL_DONE_ACK => {
                let key = read_key(&mut r)?;
                let namespace = r.str()?.to_owned();
                let pid = r.u16()?;
                if usize::from(pid) >= PARTITION_COUNT {
                    return Err(CodecError::Invalid("partition id"));
                }
                if kind == kind::ALL_DONE {
                    Message::AllDone {
                        key,
                        namespace,
                        pid,
                    }
                } else {
                    Message::AllDoneAck {
                        key,
                        namespace,
                        pid,
                    }
                }
            }
            kind::METADATA => Message::Metadata {
                items: r.list(16, crate::metadata::Item::read)?,
                sync: r.bool()?,
                ticket: r.u64()?,
            },
            kind::METADATA_ACK => Message::MetadataAck { ticket: r.u64()? },
            other => return Err(CodecError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(Envelope { from, message })
    }
}

fn encode_message(w: &mut Writer<'_>, message: &Message) {
    match message {
        Message::Pulse(pulse) => write_pulse(w, pulse),
        Message::JoinRequest => {}
        Message::Move { principal } => w.u64(*principal),
        Message::Propose {
            id,
            key,
            succession,
        }
        | Message::Commit {
            id,
            key,
            succession,
        } => {
            write_proposal_id(w, id);
            w.u64(*key);
            w.list(succession, |w, node| w.u64(*node));
        }
        Message::ProposeReply { id, accepted } => {
            write_proposal_id(w, id);
            w.bool(*accepted);
        }
        Message::ExchangeData { key, namespaces } => {
            w.u64(*key);
            w.list(namespaces, write_namespace_versions);
        }
        Message::ExchangeCommit { key, members } => {
            w.u64(*key);
            w.list(members, |w, (node, namespaces)| {
                w.u64(*node);
                w.list(namespaces, write_namespace_versions);
            });
        }
        Message::AllDone {
            key,
            namespace,
            pid,
        }
        | Message::AllDoneAck {
            key,
            namespace,
            pid,
        } => {
            w.u64(*key);
            w.str(namespace);
            w.u16(*pid);
        }
        Message::Metadata {
            items,
            sync,
            ticket,
        } => {
            w.list(items, |w, item| item.write(w));
            w.bool(*sync);
            w.u64(*ticket);
        }
        Message::MetadataAck { ticket } => w.u64(*ticket),
    }
}

fn write_endpoint(w: &mut Writer<'_>, endpoint: &Endpoint) {
    w.str(&endpoint.host);
    w.u16(endpoint.port);
}

fn read_endpoint(r: &mut Reader<'_>) -> Result<Endpoint, CodecError> {
    let host = r.str()?;
    if host.len() > 255 {
        return Err(CodecError::Invalid("host name"));
    }
    Ok(Endpoint {
        host: host.to_owned(),
        port: r.u16()?,
    })
}

fn write_pulse(w: &mut Writer<'_>, pulse: &Pulse) {
    w.str(&pulse.cluster_name);
    w.u32(pulse.protocol);
    w.u64(pulse.boot_id);
    write_endpoint(w, &pulse.heartbeat);
    write_endpoint(w, &pulse.fabric);
    w.list(&pulse.service, write_endpoint);
    w.list(&pulse.adjacency, |w, (node, endpoint)| {
        w.u64(*node);
        write_endpoint(w, endpoint);
    });
    w.u64(pulse.cluster_key);
    w.list(&pulse.succession, |w, node| w.u64(*node));
    w.list(&pulse.namespaces, |w, ns| {
        w.str(&ns.name);
        w.u8(ns.replication_factor);
    });
    w.u64(pulse.clock_ms);
    w.list(&pulse.redis, write_endpoint);
}

/// Most service endpoints a pulse may list.
pub const SERVICE_ENDPOINTS_MAX: usize = 64;
/// Most nodes a pulse may list as heard: a node tracks no more.
pub const ADJACENCY_MAX: usize = crate::membership::TRACKED_NODES_MAX;
/// Most namespaces a pulse may list.
pub const NAMESPACES_MAX: usize = 256;

fn read_pulse(r: &mut Reader<'_>) -> Result<Pulse, CodecError> {
    let cluster_name = r.str()?;
    if cluster_name.len() > 63 {
        return Err(CodecError::Invalid("cluster name"));
    }
    let pulse = Pulse {
        cluster_name: cluster_name.to_owned(),
        protocol: r.u32()?,
        boot_id: r.u64()?,
        heartbeat: read_endpoint(r)?,
        fabric: read_endpoint(r)?,
        service: r.list(6, read_endpoint)?,
        adjacency: r.list(14, |r| Ok((r.u64()?, read_endpoint(r)?)))?,
        cluster_key: read_key(r)?,
        succession: read_succession(r)?,
        namespaces: r.list(5, |r| {
            Ok(NamespaceSummary {
                name: r.str()?.to_owned(),
                replication_factor: r.u8()?,
            })
        })?,
        clock_ms: r.u64()?,
        redis: Vec::new(),
    };
    let mut pulse = pulse;
    if r.remaining() > 0 {
        pulse.redis = r.list(6, read_endpoint)?;
    }
    if pulse.service.len() > SERVICE_ENDPOINTS_MAX
        || pulse.redis.len() > SERVICE_ENDPOINTS_MAX
        || pulse.adjacency.len() > ADJACENCY_MAX
        || pulse.namespaces.len() > NAMESPACES_MAX
    {
        return Err(CodecError::Invalid("pulse list length"));
    }
    Ok(pulse)
}

fn write_proposal_id(w: &mut Writer<'_>, id: &ProposalId) {
    w.u64(id.sequence);
    w.u64(id.proposer);
}

fn read_proposal_id(r: &mut Reader<'_>) -> Result<ProposalId, CodecError> {
    Ok(ProposalId {
        sequence: r.u64()?,
        proposer: r.u64()?,
    })
}

fn read_key(r: &mut Reader<'_>) -> Result<u64, CodecError> {
    let key = r.u64()?;
    if key > crate::version::KEY_MASK {
        return Err(CodecError::Invalid("cluster key"));
    }
    Ok(key)
}

/// A succession list: distinct non-zero ids, sorted descending.
fn read_succession(r: &mut Reader<'_>) -> Result<Vec<NodeId>, CodecError> {
    let list = r.list(8, |r| r.u64())?;
    if list.len() > crate::CLUSTER_SIZE_MAX
        || list.contains(&0)
        || list.windows(2).any(|pair| pair[0] <= pair[1])
    {
        return Err(CodecError::Invalid("succession list"));
    }
    Ok(list)
}

/// Versions are sent as runs of (version, count) over partition ids.
fn write_namespace_versions(w: &mut Writer<'_>, ns: &NamespaceVersions) {
    w.str(&ns.name);
    w.u8(ns.replication_factor);
    let mut runs: Vec<(u64, u16)> = Vec::new();
    for version in &ns.versions {
        let bits = version.to_bits();
        match runs.last_mut() {
            Some((last, count)) if *last == bits => *count += 1,
            _ => runs.push((bits, 1)),
        }
    }
    w.list(&runs, |w, (bits, count)| {
        w.u64(*bits);
        w.u16(*count);
    });
    w.u32(ns.regime);
    w.u32(ns.rack_id);
    let mut runs: Vec<(crate::sc::Witness, u16)> = Vec::new();
    for &witness in &ns.witnesses {
        match runs.last_mut() {
            Some((last, count)) if *last == witness => *count += 1,
            _ => runs.push((witness, 1)),
        }
    }
    w.list(&runs, |w, (witness, count)| {
        w.u32(witness.regime);
        w.u64(witness.key);
        w.u16(*count);
    });
    w.bool(ns.pending_roster.is_some());
    if let Some(item) = &ns.pending_roster {
        item.write(w);
    }
}

fn read_namespace_versions(r: &mut Reader<'_>) -> Result<NamespaceVersions, CodecError> {
    let name = r.str()?;
    if name.is_empty() || name.len() > bolide_types::NAMESPACE_NAME_BYTES_MAX {
        return Err(CodecError::Invalid("namespace name"));
    }
    let replication_factor = r.u8()?;
    let runs = r.list(10, |r| Ok((r.u64()?, r.u16()?)))?;
    let mut versions = Vec::with_capacity(PARTITION_COUNT);
    for (bits, count) in runs {
        if count == 0 || versions.len() + usize::from(count) > PARTITION_COUNT {
            return Err(CodecError::Invalid("version runs"));
        }
        let version = Version::from_bits(bits);
        if version.to_bits() != bits {
            return Err(CodecError::Invalid("version bits"));
        }
        versions.extend(std::iter::repeat_n(version, usize::from(count)));
    }
    if versions.len() != PARTITION_COUNT {
        return Err(CodecError::Invalid("version count"));
    }
    let regime = r.u32()?;
    let rack_id = r.u32()?;
    if rack_id > crate::sc::RACK_ID_MAX {
        return Err(CodecError::Invalid("rack id"));
    }
    let runs = r.list(14, |r| {
        Ok((
            crate::sc::Witness {
                regime: r.u32()?,
                key: r.u64()?,
            },
            r.u16()?,
        ))
    })?;
    let mut witnesses = Vec::new();
    for (witness, count) in runs {
        if count == 0 || witnesses.len() + usize::from(count) > PARTITION_COUNT {
            return Err(CodecError::Invalid("witness runs"));
        }
        witnesses.extend(std::iter::repeat_n(witness, usize::from(count)));
    }
    if !witnesses.is_empty() && witnesses.len() != PARTITION_COUNT {
        return Err(CodecError::Invalid("witness count"));
    }
    let pending_roster = if r.bool()? {
        Some(crate::metadata::Item::read(r)?)
    } else {
        None
    };
    Ok(NamespaceVersions {
        name: name.to_owned(),
        replication_factor,
        versions,
        regime,
        rack_id,
        witnesses,
        pending_roster,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(port: u16) -> Endpoint {
        Endpoint {
            host: "127.0.0.1".into(),
            port,
        }
    }

    pub(crate) fn samples() -> Vec<Envelope> {
        let mut versions = vec![Version::NULL; PARTITION_COUNT];
        versions[5] = Version::full(0xABC).with_master(true);
        versions[6] = Version::partial(0xABC);
        let mut witnesses = vec![crate::sc::Witness::NONE; PARTITION_COUNT];
        witnesses[5] = crate::sc::Witness {
            regime: 7,
            key: 0xABC,
        };
        let ns = NamespaceVersions {
            name: "test".into(),
            replication_factor: 2,
            versions,
            regime: 7,
            rack_id: 2,
            witnesses,
            pending_roster: Some(crate::metadata::Item {
                module: "roster".into(),
                key: "test".into(),
                value: "A1,A2".into(),
                generation: 3,
                timestamp_ms: 1_700_000_000_000,
                deleted: false,
            }),
        };
        let id = ProposalId {
            sequence: 9,
            proposer: 0xB,
        };
        let messages = vec![
            Message::Pulse(Pulse {
                cluster_name: "prod".into(),
                protocol: PROTOCOL,
                boot_id: 77,
                heartbeat: endpoint(3002),
                fabric: endpoint(3001),
                service: vec![endpoint(3000)],
                redis: vec![endpoint(6379)],
                adjacency: vec![(0xA, endpoint(4002))],
                cluster_key: 0x1234,
                succession: vec![0xB, 0xA],
                namespaces: vec![NamespaceSummary {
                    name: "test".into(),
                    replication_factor: 2,
                }],
                clock_ms: 1_700_000_000_000,
            }),
            Message::JoinRequest,
            Message::Move { principal: 0xC },
            Message::Propose {
                id,
                key: 0x55,
                succession: vec![0xB, 0xA],
            },
            Message::ProposeReply { id, accepted: true },
            Message::Commit {
                id,
                key: 0x55,
                succession: vec![0xB, 0xA],
            },
            Message::ExchangeData {
                key: 0x55,
                namespaces: vec![ns.clone()],
            },
            Message::ExchangeCommit {
                key: 0x55,
                members: vec![(0xB, vec![ns.clone()]), (0xA, vec![ns])],
            },
            Message::AllDone {
                key: 0x55,
                namespace: "test".into(),
                pid: 4095,
            },
            Message::AllDoneAck {
                key: 0x55,
                namespace: "test".into(),
                pid: 0,
            },
            Message::Metadata {
                items: vec![crate::metadata::Item {
                    module: "truncate".into(),
                    key: "test|demo".into(),
                    value: "123".into(),
                    generation: 2,
                    timestamp_ms: 99,
                    deleted: false,
                }],
                sync: true,
                ticket: 7,
            },
            Message::MetadataAck { ticket: 7 },
        ];
        messages
            .into_iter()
            .map(|message| Envelope { from: 0xB, message })
            .collect()
    }

    #[test]
    fn every_message_round_trips() {
        for envelope in samples() {
            let mut out = Vec::new();
            envelope.encode(&mut out);
            let (header, body, total) = codec::split_frame(&out).expect("valid").expect("whole");
            assert_eq!(total, out.len());
            assert_eq!(Envelope::decode(header.kind, body), Ok(envelope));
        }
    }

    #[test]
    fn truncated_or_extended_bodies_are_refused() {
        for envelope in samples() {
            let mut out = Vec::new();
            envelope.encode(&mut out);
            let (header, body, _) = codec::split_frame(&out).expect("valid").expect("whole");
            for cut in 0..body.len() {
                match Envelope::decode(header.kind, &body[..cut]) {
                    Err(_) => {}
                    // A pulse cut before its optional RESP endpoints is a
                    // pulse of a node that predates them.
                    Ok(Envelope {
                        message: Message::Pulse(cut_pulse),
                        ..
                    }) => match &envelope.message {
                        Message::Pulse(pulse) => assert_eq!(
                            cut_pulse,
                            Pulse {
                                redis: Vec::new(),
                                ..pulse.clone()
                            }
                        ),
                        _ => panic!("a cut body decoded as another message"),
                    },
                    Ok(other) => panic!("a cut body decoded: {other:?}"),
                }
            }
            let mut longer = body.to_vec();
            longer.push(0);
            assert!(Envelope::decode(header.kind, &longer).is_err());
        }
    }

    #[test]
    fn pulses_with_overlong_lists_are_refused() {
        let Some(Message::Pulse(pulse)) = samples().into_iter().next().map(|e| e.message) else {
            panic!("the first sample is a pulse");
        };
        let cases = [
            Pulse {
                adjacency: (1..=ADJACENCY_MAX as u64 + 1)
                    .map(|node| (node, endpoint(1)))
                    .collect(),
                ..pulse.clone()
            },
            Pulse {
                service: vec![endpoint(1); SERVICE_ENDPOINTS_MAX + 1],
                ..pulse.clone()
            },
            Pulse {
                namespaces: vec![pulse.namespaces[0].clone(); NAMESPACES_MAX + 1],
                ..pulse.clone()
            },
        ];
        for pulse in cases {
            let mut out = Vec::new();
            Envelope {
                from: 1,
                message: Message::Pulse(pulse),
            }
            .encode(&mut out);
            let (header, body, _) = codec::split_frame(&out).expect("valid").expect("whole");
            assert_eq!(
                Envelope::decode(header.kind, body),
                Err(CodecError::Invalid("pulse list length"))
            );
        }
    }

    #[test]
    fn bad_succession_lists_are_refused() {
        let mut out = Vec::new();
        Envelope {
            from: 1,
            message: Message::Commit {
                id: ProposalId::default(),
                key: 1,
                succession: vec![0xA, 0xB],
            },
        }
        .encode(&mut out);
        let (header, body, _) = codec::split_frame(&out).expect("valid").expect("whole");
        assert_eq!(
            Envelope::decode(header.kind, body),
            Err(CodecError::Invalid("succession list"))
        );
    }
}
