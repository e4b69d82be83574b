//! `--cluster`: send each request to the node that masters its partition,
//! as the smart clients do. The map comes from the same info commands the
//! clients poll (`peers-clear-std` for the nodes, `replicas` for who masters
//! what) and is refreshed every second by a thread of its own, so a run
//! follows nodes joining and leaving; a request sent by a stale map is
//! proxied by the node it reaches.

use bolide_types::PARTITION_COUNT;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Who masters each partition: node addresses (never removed, so indices
/// stay valid) and, per partition, an index into them.
#[derive(Clone, Debug, Default)]
pub struct PartitionMap {
    pub nodes: Vec<String>,
    pub owner: Vec<u8>,
}

impl PartitionMap {
    pub fn node_of(&self, pid: usize) -> usize {
        usize::from(self.owner.get(pid).copied().unwrap_or(0))
    }
}

/// The map, shared by every connection of a run.
pub type SharedMap = Arc<RwLock<Arc<PartitionMap>>>;

const INFO_TIMEOUT: Duration = Duration::from_secs(2);

/// Sends info commands to `address`; returns the value of each.
pub fn info(address: &str, commands: &[&str]) -> Result<Vec<String>, String> {
    let mut stream =
        TcpStream::connect(address).map_err(|e| format!("cannot connect to {address}: {e}"))?;
    stream
        .set_read_timeout(Some(INFO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(INFO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    if let Some(credentials) = crate::login::CREDENTIALS.get() {
        crate::login::login_blocking(&mut stream, credentials)
            .map_err(|e| format!("{address}: {e}"))?;
    }
    let body: String = commands.iter().map(|c| format!("{c}\n")).collect();
    let header = (2u64 << 56) | (1u64 << 48) | body.len() as u64;
    let mut request = header.to_be_bytes().to_vec();
    request.extend_from_slice(body.as_bytes());
    stream
        .write_all(&request)
        .map_err(|e| format!("{address}: {e}"))?;
    let mut head = [0u8; 8];
    stream
        .read_exact(&mut head)
        .map_err(|e| format!("{address}: {e}"))?;
    let size = (u64::from_be_bytes(head) & 0xFFFF_FFFF_FFFF) as usize;
    if size > 64 * 1024 * 1024 {
        return Err(format!("{address}: info answer of {size} bytes"));
    }
    let mut answer = vec![0u8; size];
    stream
        .read_exact(&mut answer)
        .map_err(|e| format!("{address}: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    Ok(commands
        .iter()
        .map(|command| {
            text.lines()
                .find_map(|line| line.strip_prefix(command)?.strip_prefix('\t'))
                .unwrap_or_default()
                .to_owned()
        })
        .collect())
}

/// The service addresses in a `peers-clear-std` answer:
/// `<gen>,<port>,[[NODE,,[host[:port],...]],...]` (the first address of
/// each peer, with the default port when it has none).
fn peers(answer: &str) -> Vec<String> {
    let mut parts = answer.splitn(3, ',');
    let (_, port, list) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
    let port = port.and_then(|p| p.parse::<u16>().ok()).unwrap_or(3000);
    let mut out = Vec::new();
    let mut rest = list;
    while let Some(at) = rest.find(",,[") {
        rest = &rest[at + 3..];
        let Some(end) = rest.find(']') else { break };
        if let Some(host) = rest[..end].split(',').next().filter(|h| !h.is_empty()) {
            let has_port = if host.starts_with('[') {
                host.contains("]:")
            } else {
                host.contains(':')
            };
            out.push(if has_port {
                host.to_owned()
            } else {
                format!("{host}:{port}")
            });
        }
        rest = &rest[end..];
    }
    out
}

/// Column 0 of a `replicas` answer for `namespace`: the partitions the
/// node masters.
fn masters(answer: &str, namespace: &str) -> Option<Vec<bool>> {
    use base64::Engine;
    let entry = answer
        .split(';')
        .find_map(|entry| entry.strip_prefix(namespace)?.strip_prefix(':'))?;
    let column = entry.split(',').nth(2)?;
    let bitmap = base64::engine::general_purpose::STANDARD
        .decode(column)
        .ok()?;
    Some(
        (0..PARTITION_COUNT)
            .map(|pid| {
                bitmap
                    .get(pid >> 3)
                    .is_some_and(|byte| byte & (0x80 >> (pid & 7)) != 0)
            })
            .collect(),
    )
}

/// Builds the map from a seed: its peers, then each node's claims. Nodes
/// already in `previous` keep their index.
pub fn discover(
    seed: &str,
    namespace: &str,
    previous: &PartitionMap,
) -> Result<PartitionMap, String> {
    let answers = info(seed, &["peers-clear-std"])?;
    let mut addresses = vec![seed.to_owned()];
    addresses.extend(peers(&answers[0]));
    let mut map = PartitionMap {
        nodes: previous.nodes.clone(),
        owner: if previous.owner.len() == PARTITION_COUNT {
            previous.owner.clone()
        } else {
            vec![0; PARTITION_COUNT]
        },
    };
    if map.nodes.is_empty() {
        map.nodes.push(seed.to_owned());
    }
    for address in addresses {
        let Ok(answers) = info(&address, &["replicas"]) else {
            continue;
        };
        let Some(claims) = masters(&answers[0], namespace) else {
            continue;
        };
        let index = match map.nodes.iter().position(|node| *node == address) {
            Some(index) => index,
            None => {
                if map.nodes.len() >= usize::from(u8::MAX) {
                    continue;
                }
                map.nodes.push(address.clone());
                map.nodes.len() - 1
            }
        };
        for (pid, owned) in claims.into_iter().enumerate() {
            if owned {
                map.owner[pid] = index as u8;
            }
        }
    }
    Ok(map)
}

/// Discovers the map and keeps it fresh from a thread of its own (until
/// the process ends).
pub fn start(seed: String, namespace: String) -> Result<SharedMap, String> {
    let first = discover(&seed, &namespace, &PartitionMap::default())?;
    let shared: SharedMap = Arc::new(RwLock::new(Arc::new(first)));
    let refreshed = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("partition-map".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let previous = refreshed
                .read()
                .map(|map| Arc::clone(&map))
                .unwrap_or_default();
            if let Ok(map) = discover(&seed, &namespace, &previous) {
                if let Ok(mut slot) = refreshed.write() {
                    *slot = Arc::new(map);
                }
            }
        })
        .map_err(|e| format!("cannot start the partition-map thread: {e}"))?;
    Ok(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_answers() {
        assert_eq!(peers("0,3000,[]"), Vec::<String>::new());
        assert_eq!(
            peers("4,3000,[[A2,,[127.0.0.1:3010]],[A3,,[10.0.0.3]]]"),
            vec!["127.0.0.1:3010".to_owned(), "10.0.0.3:3000".to_owned()]
        );
    }

    #[test]
    fn masters_column_zero() {
        use base64::Engine;
        let mut bitmap = [0u8; 512];
        bitmap[0] = 0x80 | 0x01;
        let column = base64::engine::general_purpose::STANDARD.encode(bitmap);
        let answer = format!("bar:0,1,{column};test:0,2,{column},{column}");
        let owned = masters(&answer, "test").expect("test");
        assert!(owned[0] && owned[7] && !owned[1]);
    }
}
