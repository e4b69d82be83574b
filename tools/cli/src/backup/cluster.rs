//! The cluster as backup and restore see it: connections that speak
//! AS_MSG and info, every node found from one seed, and which node masters
//! each partition (`replicas`, column 0), refreshed when it changes.

use crate::info;
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use bolide_wire::message::{decode_header, MsgHeader};
use bolide_wire::{Fields, Message, Op};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const PARTITIONS: usize = 4096;
/// Largest frame accepted from a node.
const FRAME_BYTES_MAX: usize = 256 << 20;

/// One connection to a node.
pub struct Connection {
    stream: crate::tls::Stream,
    pub address: String,
}

impl Connection {
    pub fn open(address: &str, timeout: Duration) -> Result<Connection, String> {
        let mut stream = crate::tls::connect(address, timeout)?;
        // A secured node answers nothing before a login (-U/-P).
        crate::login::authenticate(&mut stream, address)?;
        Ok(Connection {
            stream,
            address: address.to_owned(),
        })
    }

    pub fn set_timeout(&self, timeout: Duration) {
        let _ = self.stream.tcp().set_read_timeout(Some(timeout));
    }

    pub fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .map_err(|error| format!("{}: {error}", self.address))
    }

    /// Reads one frame into `body`; returns its type.
    pub fn read_frame(&mut self, body: &mut Vec<u8>) -> Result<MessageType, String> {
        let mut header = [0u8; PROTO_HEADER_BYTES];
        self.stream
            .read_exact(&mut header)
            .map_err(|error| format!("{}: {error}", self.address))?;
        let header = ProtoHeader::decode(&header)
            .map_err(|error| format!("{}: bad answer ({error})", self.address))?;
        if header.body_bytes > FRAME_BYTES_MAX {
            return Err(format!(
                "{}: answer of {} bytes",
                self.address, header.body_bytes
            ));
        }
        body.clear();
        body.resize(header.body_bytes, 0);
        self.stream
            .read_exact(body)
            .map_err(|error| format!("{}: {error}", self.address))?;
        Ok(header.message_type)
    }
}

/// One AS_MSG of a stream of answers (a scan's rows): its header, fields
/// and ops, borrowed from the frame.
pub struct Row<'a> {
    pub header: MsgHeader,
    pub fields: Fields<'a>,
    pub message: Message<'a>,
}

impl<'a> Row<'a> {
    pub fn ops(&self) -> impl Iterator<Item = Op<'a>> {
        self.message.ops()
    }
}

/// Splits a frame body into its AS_MSG rows.
pub fn rows(mut body: &[u8]) -> Result<Vec<Row<'_>>, String> {
    let mut rows = Vec::new();
    while !body.is_empty() {
        let (header, rest) =
            decode_header(body).map_err(|error| format!("bad answer row: {error}"))?;
        let (message, rest) = Message::decode_parts(header, rest)
            .map_err(|error| format!("bad answer row: {error}"))?;
        rows.push(Row {
            header,
            fields: message.fields,
            message,
        });
        body = rest;
    }
    Ok(rows)
}

/// Nodes and who masters which partition of one namespace.
pub struct PartitionMap {
    pub nodes: Vec<info::Node>,
    /// Per partition, the index in `nodes` of its master.
    pub masters: Vec<Option<usize>>,
}

/// The cluster reached from a seed.
pub struct Cluster {
    seed: String,
    pub timeout: Duration,
    namespace: String,
    known: Mutex<Vec<String>>,
    maps: Mutex<HashMap<String, (Instant, Arc<PartitionMap>)>>,
}

/// How long a partition map is reused before it is asked again.
const MAP_AGE_MAX: Duration = Duration::from_millis(500);

impl Cluster {
    pub fn new(seed: String, timeout: Duration, namespace: &str) -> Cluster {
        Cluster {
            known: Mutex::new(vec![seed.clone()]),
            seed,
            timeout,
            namespace: namespace.to_owned(),
            maps: Mutex::new(HashMap::new()),
        }
    }

    /// Every node, found from the seed (or, if it is gone, from any node
    /// seen before).
    pub fn nodes(&self) -> Result<Vec<info::Node>, String> {
        let seeds: Vec<String> = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            std::iter::once(self.seed.clone())
                .chain(known.iter().cloned())
                .collect()
        };
        let mut last_error = String::new();
        for seed in seeds {
            match info::discover_quietly(&seed, self.timeout) {
                Ok(nodes) if !nodes.is_empty() => {
                    let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
                    for node in &nodes {
                        if !known.contains(&node.address) {
                            known.push(node.address.clone());
                        }
                    }
                    return Ok(nodes);
                }
                Ok(_) => {}
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// The partition map, asked again when older than half a second or
    /// when `fresh`.
    pub fn map(&self, fresh: bool) -> Result<Arc<PartitionMap>, String> {
        self.map_of(&self.namespace.clone(), fresh)
    }

    /// The partition map of another namespace.
    pub fn map_of(&self, namespace: &str, fresh: bool) -> Result<Arc<PartitionMap>, String> {
        {
            let maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((asked, map)) = maps.get(namespace) {
                if !fresh && asked.elapsed() < MAP_AGE_MAX {
                    return Ok(Arc::clone(map));
                }
            }
        }
        let nodes = self.nodes()?;
        let mut masters = vec![None; PARTITIONS];
        let mut reached = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            let Ok(answer) = info::value(&node.address, "replicas", self.timeout) else {
                continue;
            };
            reached.push(node.clone());
            let Some(bitmap) = master_bitmap(&answer, namespace) else {
                continue;
            };
            for (pid, master) in masters.iter_mut().enumerate() {
                if bitmap
                    .get(pid >> 3)
                    .is_some_and(|byte| byte & (0x80 >> (pid & 7)) != 0)
                {
                    *master = Some(index);
                }
            }
        }
        if reached.is_empty() {
            return Err(format!(
                "no node of the cluster answers (seed {})",
                self.seed
            ));
        }
        let map = Arc::new(PartitionMap { nodes, masters });
        self.maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(namespace.to_owned(), (Instant::now(), Arc::clone(&map)));
        Ok(map)
    }
}

/// Column 0 (the masters) of `namespace` in a `replicas` answer:
/// `ns:regime,count,b64,b64…;…` (also without regime and count).
pub fn master_bitmap(answer: &str, namespace: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    for entry in answer.split(';') {
        let Some((name, columns)) = entry.split_once(':') else {
            continue;
        };
        if name != namespace {
            continue;
        }
        let bitmap = columns.split(',').find(|column| column.len() > 8)?;
        return base64::engine::general_purpose::STANDARD
            .decode(bitmap)
            .ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_master_column_of_replicas() {
        use base64::Engine;
        let mut bitmap = vec![0u8; 512];
        bitmap[0] = 0x80;
        bitmap[511] = 0x01;
        let encoded = base64::engine::general_purpose::STANDARD.encode(&bitmap);
        let other = base64::engine::general_purpose::STANDARD.encode([0xffu8; 512]);
        let answer = format!("bar:0,2,{other},{other};test:0,2,{encoded},{other}");
        assert_eq!(master_bitmap(&answer, "test"), Some(bitmap.clone()));
        assert_eq!(
            master_bitmap(&format!("test:{encoded}"), "test"),
            Some(bitmap)
        );
        assert_eq!(master_bitmap(&answer, "nope"), None);
    }
}
