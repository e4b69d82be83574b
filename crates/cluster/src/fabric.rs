//! Data messages between nodes (the fabric): replica writes, proxied
//! requests, duplicate resolution and migrations, in the same checksummed
//! frames as the control messages. Every request carries an id its answer
//! repeats, so answers may come back in any order on a connection.
//!
//! A fabric connection starts with a HELLO naming the sender, its cluster
//! name and the channel (requests of clients, or bulk migration traffic).

use crate::codec::{self, CodecError, Reader, Writer};
use crate::NodeId;
use bolide_types::{DIGEST_BYTES, NAMESPACE_NAME_BYTES_MAX, PARTITION_COUNT};

/// Which traffic a fabric connection carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Replica writes, proxies, duplicate resolution: served by the event
    /// loops next to client requests.
    Requests,
    /// Migrations: served at background priority.
    Bulk,
}

/// Answer codes of fabric requests.
pub mod code {
    pub const OK: u8 = 0;
    /// The receiver's cluster key differs (or its map is not settled):
    /// retry with the current map.
    pub const CLUSTER_KEY_MISMATCH: u8 = 7;
    /// Not expected now (a migration the receiver does not wait for).
    pub const REFUSED: u8 = 11;
    /// Try again shortly (too many immigrations at once, map not in yet).
    pub const AGAIN: u8 = 14;
    /// The receiver could not apply it (storage full or failed).
    pub const FAILED: u8 = 1;
}

/// A record's whole image, or a tombstone (`record` None).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Image<'a> {
    pub digest: [u8; DIGEST_BYTES],
    pub generation: u16,
    pub last_update_ms: u64,
    pub void_time: u32,
    pub set_name: &'a [u8],
    pub record: Option<&'a [u8]>,
}

/// How a proxied request's answer is framed: a message of its own, or a
/// row of a batch (with the row's index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyFraming {
    Message,
    Row(u32),
}

/// A fabric message, borrowing from the frame it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fabric<'a> {
    Hello {
        node: NodeId,
        cluster_name: &'a str,
        channel: Channel,
    },
    ReplicaWrite {
        id: u64,
        namespace: &'a str,
        cluster_key: u64,
        /// The partition's regime the write was made under (0 in AP
        /// namespaces; strong consistency checks it).
        regime: u32,
        image: Image<'a>,
    },
    /// Answers a replica write, a migration step or a fetch with a code.
    Ack {
        id: u64,
        code: u8,
    },
    Proxy {
        id: u64,
        /// Milliseconds the request may still take.
        timeout_ms: u32,
        framing: ProxyFraming,
        /// The AS_MSG body (after the proto header).
        body: &'a [u8],
    },
    ProxyAnswer {
        id: u64,
        /// Not served there: the node that does, as the receiver sees it
        /// (the sender routes again there).
        redirect: Option<NodeId>,
        /// The answer's bytes, framed as asked.
        answer: &'a [u8],
    },
    Fetch {
        id: u64,
        namespace: &'a str,
        digest: [u8; DIGEST_BYTES],
    },
    FetchAnswer {
        id: u64,
        image: Option<Image<'a>>,
    },
    MigrateStart {
        id: u64,
        namespace: &'a str,
        pid: u16,
        key: u64,
    },
    MigrateRecords {
        id: u64,
        namespace: &'a str,
        pid: u16,
        key: u64,
        images: Vec<Image<'a>>,
    },
    MigrateDone {
        id: u64,
        namespace: &'a str,
        pid: u16,
        key: u64,
    },
}

mod kind {
    pub const HELLO: u8 = 32;
    pub const REPLICA_WRITE: u8 = 33;
    pub const ACK: u8 = 34;
    pub const PROXY: u8 = 35;
    pub const PROXY_ANSWER: u8 = 36;
    pub const FETCH: u8 = 37;
    pub const FETCH_ANSWER: u8 = 38;
    pub const MIGRATE_START: u8 = 40;
    pub const MIGRATE_RECORDS: u8 = 41;
    pub const MIGRATE_DONE: u8 = 42;
}

/// The smallest image: a tombstone with no set (digest, generation,
/// last-update time, void time, an empty set name, no record).
const IMAGE_BYTES_MIN: usize = DIGEST_BYTES + 2 + 8 + 4 + 4 + 1;

/// Most images in one migration frame.
pub const IMAGES_PER_FRAME_MAX: usize = 100_000;

impl Fabric<'_> {
    /// Appends the message as one frame.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Fabric::Hello {
                node,
                cluster_name,
                channel,
            } => codec::write_frame(out, kind::HELLO, |w| {
                w.u64(*node);
                w.str(cluster_name);
                w.u8(match channel {
                    Channel::Requests => 1,
                    Channel::Bulk => 2,
                });
            }),
            Fabric::ReplicaWrite {
                id,
                namespace,
                cluster_key,
                regime,
                image,
            } => codec::write_frame(out, kind::REPLICA_WRITE, |w| {
                w.u64(*id);
                w.str(namespace);
                w.u64(*cluster_key);
                w.u32(*regime);
                write_image(w, image);
            }),
            Fabric::Ack { id, code } => codec::write_frame(out, kind::ACK, |w| {
                w.u64(*id);
                w.u8(*code);
            }),
            Fabric::Proxy {
                id,
                timeout_ms,
                framing,
                body,
            } => codec::write_frame(out, kind::PROXY, |w| {
                w.u64(*id);
                w.u32(*timeout_ms);
                match framing {
                    ProxyFraming::Message => {
                        w.u8(0);
                        w.u32(0);
                    }
                    ProxyFraming::Row(index) => {
                        w.u8(1);
                        w.u32(*index);
                    }
                }
                w.bytes(body);
            }),
            Fabric::ProxyAnswer {
                id,
                redirect,
                answer,
            } => codec::write_frame(out, kind::PROXY_ANSWER, |w| {
                w.u64(*id);
                w.u64(redirect.unwrap_or(0));
                w.bytes(answer);
            }),
            Fabric::Fetch {
                id,
                namespace,
                digest,
            } => codec::write_frame(out, kind::FETCH, |w| {
                w.u64(*id);
                w.str(namespace);
                w.raw(digest);
            }),
            Fabric::FetchAnswer { id, image } => codec::write_frame(out, kind::FETCH_ANSWER, |w| {
                w.u64(*id);
                match image {
                    None => w.bool(false),
                    Some(image) => {
                        w.bool(true);
                        write_image(w, image);
                    }
                }
            }),
            Fabric::MigrateStart {
                id,
                namespace,
                pid,
                key,
            } => codec::write_frame(out, kind::MIGRATE_START, |w| {
                write_partition_step(w, *id, namespace, *pid, *key);
            }),
            Fabric::MigrateRecords {
                id,
                namespace,
                pid,
                key,
                images,
            } => codec::write_frame(out, kind::MIGRATE_RECORDS, |w| {
                write_partition_step(w, *id, namespace, *pid, *key);
                w.list(images, write_image);
            }),
            Fabric::MigrateDone {
                id,
                namespace,
                pid,
                key,
            } => codec::write_frame(out, kind::MIGRATE_DONE, |w| {
                write_partition_step(w, *id, namespace, *pid, *key);
            }),
        }
    }

    /// Decodes a frame body of `kind`; every byte must be used.
    pub fn decode(kind: u8, body: &[u8]) -> Result<Fabric<'_>, CodecError> {
        let mut r = Reader::new(body);
        let message = match kind {
            kind::HELLO => Fabric::Hello {
                node: r.u64()?,
                cluster_name: r.str()?,
                channel: match r.u8()? {
                    1 => Channel::Requests,
                    2 => Channel::Bulk,
                    _ => return Err(CodecError::Invalid("channel")),
                },
            },
            kind::REPLICA_WRITE => Fabric::ReplicaWrite {
                id: r.u64()?,
                namespace: read_namespace(&mut r)?,
                cluster_key: r.u64()?,
                regime: r.u32()?,
                image: read_image(&mut r)?,
            },
            kind::ACK => Fabric::Ack {
                id: r.u64()?,
                code: r.u8()?,
            },
            kind::PROXY => {
                let id = r.u64()?;
                let timeout_ms = r.u32()?;
                let framing = match (r.u8()?, r.u32()?) {
                    (0, 0) => ProxyFraming::Message,
                    (1, index) => ProxyFraming::Row(index),
                    _ => return Err(CodecError::Invalid("proxy framing")),
                };
                Fabric::Proxy {
                    id,
                    timeout_ms,
                    framing,
                    body: r.bytes()?,
                }
            }
            kind::PROXY_ANSWER => Fabric::ProxyAnswer {
                id: r.u64()?,
                redirect: Some(r.u64()?).filter(|&node| node != 0),
                answer: r.bytes()?,
            },
            kind::FETCH => Fabric::Fetch {
                id: r.u64()?,
                namespace: read_namespace(&mut r)?,
                digest: read_digest(&mut r)?,
            },
            kind::FETCH_ANSWER => Fabric::FetchAnswer {
                id: r.u64()?,
                image: if r.bool()? {
                    Some(read_image(&mut r)?)
                } else {
                    None
                },
            },
            kind::MIGRATE_START | kind::MIGRATE_DONE => {
                let (id, namespace, pid, key) = read_partition_step(&mut r)?;
                if kind == kind::MIGRATE_START {
                    Fabric::MigrateStart {
                        id,
                        namespace,
                        pid,
                        key,
                    }
                } else {
                    Fabric::MigrateDone {
                        id,
                        namespace,
                        pid,
                        key,
                    }
                }
            }
            kind::MIGRATE_RECORDS => {
                let (id, namespace, pid, key) = read_partition_step(&mut r)?;
                let images = r.list(IMAGE_BYTES_MIN, read_image)?;
                if images.len() > IMAGES_PER_FRAME_MAX {
                    return Err(CodecError::Invalid("image count"));
                }
                Fabric::MigrateRecords {
                    id,
                    namespace,
                    pid,
                    key,
                    images,
                }
            }
            other => return Err(CodecError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(message)
    }
}

fn write_partition_step(w: &mut Writer<'_>, id: u64, namespace: &str, pid: u16, key: u64) {
    w.u64(id);
    w.str(namespace);
    w.u16(pid);
    w.u64(key);
}

fn read_partition_step<'a>(r: &mut Reader<'a>) -> Result<(u64, &'a str, u16, u64), CodecError> {
    let id = r.u64()?;
    let namespace = read_namespace(r)?;
    let pid = r.u16()?;
    if usize::from(pid) >= PARTITION_COUNT {
        return Err(CodecError::Invalid("partition id"));
    }
    Ok((id, namespace, pid, r.u64()?))
}

fn read_namespace<'a>(r: &mut Reader<'a>) -> Result<&'a str, CodecError> {
    let name = r.str()?;
    if name.is_empty() || name.len() > NAMESPACE_NAME_BYTES_MAX {
        return Err(CodecError::Invalid("namespace name"));
    }
    Ok(name)
}

fn read_digest(r: &mut Reader<'_>) -> Result<[u8; DIGEST_BYTES], CodecError> {
    let mut digest = [0u8; DIGEST_BYTES];
    for byte in &mut digest {
        *byte = r.u8()?;
    }
    Ok(digest)
}

fn write_image(w: &mut Writer<'_>, image: &Image<'_>) {
    w.raw(&image.digest);
    w.u16(image.generation);
    w.u64(image.last_update_ms);
    w.u32(image.void_time);
    w.bytes(image.set_name);
    match image.record {
        Some(record) => {
            w.bool(true);
            w.bytes(record);
        }
        None => w.bool(false),
    }
}

fn read_image<'a>(r: &mut Reader<'a>) -> Result<Image<'a>, CodecError> {
    let digest = read_digest(r)?;
    let generation = r.u16()?;
    let last_update_ms = r.u64()?;
    let void_time = r.u32()?;
    let set_name = r.bytes()?;
    if set_name.len() > bolide_types::SET_NAME_BYTES_MAX {
        return Err(CodecError::Invalid("set name"));
    }
    let record = if r.bool()? { Some(r.bytes()?) } else { None };
    Ok(Image {
        digest,
        generation,
        last_update_ms,
        void_time,
        set_name,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(record: Option<&'static [u8]>) -> Image<'static> {
        Image {
            digest: [7; DIGEST_BYTES],
            generation: 3,
            last_update_ms: 123_456,
            void_time: 99,
            set_name: b"demo",
            record,
        }
    }

    #[test]
    fn every_message_round_trips_and_refuses_damage() {
        let messages = vec![
            Fabric::Hello {
                node: 0xABC,
                cluster_name: "prod",
                channel: Channel::Bulk,
            },
            Fabric::ReplicaWrite {
                id: 1,
                namespace: "test",
                cluster_key: 0x55,
                regime: 0,
                image: image(Some(b"bytes")),
            },
            Fabric::Ack {
                id: 2,
                code: code::CLUSTER_KEY_MISMATCH,
            },
            Fabric::Proxy {
                id: 3,
                timeout_ms: 1000,
                framing: ProxyFraming::Row(17),
                body: b"as_msg",
            },
            Fabric::ProxyAnswer {
                id: 3,
                redirect: None,
                answer: b"answer",
            },
            Fabric::ProxyAnswer {
                id: 3,
                redirect: Some(0xA2),
                answer: b"",
            },
            Fabric::Fetch {
                id: 4,
                namespace: "test",
                digest: [1; DIGEST_BYTES],
            },
            Fabric::FetchAnswer {
                id: 4,
                image: Some(image(None)),
            },
            Fabric::FetchAnswer { id: 5, image: None },
            Fabric::MigrateStart {
                id: 6,
                namespace: "test",
                pid: 4095,
                key: 9,
            },
            Fabric::MigrateRecords {
                id: 7,
                namespace: "test",
                pid: 1,
                key: 9,
                images: vec![image(Some(b"x")), image(None)],
            },
            Fabric::MigrateDone {
                id: 8,
                namespace: "test",
                pid: 1,
                key: 9,
            },
        ];
        for message in messages {
            let mut out = Vec::new();
            message.encode(&mut out);
            let (header, body, total) = codec::split_frame(&out).expect("valid").expect("whole");
            assert_eq!(total, out.len());
            assert_eq!(Fabric::decode(header.kind, body).as_ref(), Ok(&message));
            for cut in 0..body.len() {
                assert!(Fabric::decode(header.kind, &body[..cut]).is_err());
            }
        }
        assert!(Fabric::decode(99, &[]).is_err());
    }

    /// A migration frame of tombstones without a set is as small as images
    /// get (found by the simulator: the list's size check refused it).
    #[test]
    fn a_frame_of_setless_tombstones_decodes() {
        let tombstone = Image {
            set_name: b"",
            ..image(None)
        };
        for count in [1, 2, 50] {
            let message = Fabric::MigrateRecords {
                id: 1,
                namespace: "test",
                pid: 3,
                key: 9,
                images: vec![tombstone; count],
            };
            let mut out = Vec::new();
            message.encode(&mut out);
            let (header, body, _) = codec::split_frame(&out).expect("valid").expect("whole");
            assert_eq!(Fabric::decode(header.kind, body), Ok(message));
        }
    }
}
