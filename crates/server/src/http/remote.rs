//! Info requests to other nodes over their service port (the info
//! protocol, proto type 1), and the peer list they answer.

use super::InfoAnswers;
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest wait for a node's answer.
pub const INFO_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest info answer accepted from another node.
const ANSWER_BYTES_MAX: u64 = 16 << 20;

/// Sends `commands` to the node at `address` (`host:port`) and returns its
/// answers, or why it could not.
pub async fn info(address: &str, commands: &[String]) -> Result<InfoAnswers, String> {
    tokio::time::timeout(INFO_TIMEOUT, exchange(address, commands))
        .await
        .map_err(|_| format!("{address}: no answer within {} s", INFO_TIMEOUT.as_secs()))?
}

async fn exchange(address: &str, commands: &[String]) -> Result<InfoAnswers, String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|error| format!("{address}: {error}"))?;
    let mut body = commands.join("\n");
    body.push('\n');
    let mut request = ProtoHeader::encode(MessageType::Info, body.len()).to_vec();
    request.extend_from_slice(body.as_bytes());
    stream
        .write_all(&request)
        .await
        .map_err(|error| format!("{address}: {error}"))?;
    let mut header = [0u8; PROTO_HEADER_BYTES];
    stream
        .read_exact(&mut header)
        .await
        .map_err(|error| format!("{address}: {error}"))?;
    let header =
        ProtoHeader::decode(&header).map_err(|error| format!("{address}: bad answer: {error}"))?;
    if header.message_type != MessageType::Info {
        return Err(format!("{address}: not an info answer"));
    }
    if header.body_bytes as u64 > ANSWER_BYTES_MAX {
        return Err(format!("{address}: answer too large"));
    }
    let mut answer = Vec::new();
    (&mut stream)
        .take(header.body_bytes as u64)
        .read_to_end(&mut answer)
        .await
        .map_err(|error| format!("{address}: {error}"))?;
    Ok(InfoAnswers::parse(&answer))
}

/// One node named in a `peers-clear-std` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub node_id: String,
    /// `host:port` of its service.
    pub address: String,
}

/// Parses `generation,default-port,[[id,tls-name,[address,…]],…]`.
/// Addresses without a port take the default; IPv6 ones are bracketed.
pub fn parse_peers(text: &str) -> Vec<Peer> {
    let mut parts = text.splitn(3, ',');
    let (_generation, port, list) = (parts.next(), parts.next(), parts.next());
    let default_port = port
        .and_then(|p| p.trim().parse::<u16>().ok())
        .unwrap_or(3000);
    let Some(list) = list.map(str::trim) else {
        return Vec::new();
    };
    let inner = list
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or("");
    let mut peers = Vec::new();
    // Each peer is `[id,tls,[a,b]]`: split on the depth of brackets.
    let mut depth = 0;
    let mut start = None;
    for (index, c) in inner.char_indices() {
        match c {
            '[' => {
                if depth == 0 {
                    start = Some(index + 1);
                }
                depth += 1;
            }
            ']' => {
                depth -= 1;
                if depth == 0 {
                    if let Some(peer) = start.and_then(|s| inner.get(s..index)) {
                        if let Some(peer) = parse_peer(peer, default_port) {
                            peers.push(peer);
                        }
                    }
                    start = None;
                }
            }
            _ => {}
        }
    }
    peers
}

fn parse_peer(text: &str, default_port: u16) -> Option<Peer> {
    let (node_id, rest) = text.split_once(',')?;
    let (_tls_name, addresses) = rest.split_once(',')?;
    let addresses = addresses.trim().strip_prefix('[')?.strip_suffix(']')?;
    let first = addresses.split(',').next()?.trim();
    if first.is_empty() {
        return None;
    }
    let address = if first.starts_with('[') {
        // [v6] or [v6]:port
        match first.rfind("]:") {
            Some(_) => first.to_owned(),
            None => format!("{first}:{default_port}"),
        }
    } else if first.contains(':') {
        first.to_owned()
    } else {
        format!("{first}:{default_port}")
    };
    Some(Peer {
        node_id: node_id.trim().to_owned(),
        address,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_with_default_ports_and_ipv6() {
        assert!(parse_peers("1,3000,[]").is_empty());
        let peers = parse_peers("7,3000,[[BB9020011AC4202,,[10.0.0.2]],[BB9030011AC4202,,[10.0.0.3:3100,10.0.0.4]],[A1,tls,[[::1]:4000]]]");
        assert_eq!(
            peers,
            vec![
                Peer {
                    node_id: "BB9020011AC4202".into(),
                    address: "10.0.0.2:3000".into()
                },
                Peer {
                    node_id: "BB9030011AC4202".into(),
                    address: "10.0.0.3:3100".into()
                },
                Peer {
                    node_id: "A1".into(),
                    address: "[::1]:4000".into()
                },
            ]
        );
        assert!(parse_peers("garbage").is_empty());
        assert!(parse_peers("1,x,[[").is_empty());
    }
}
