//! Info commands over the Aerospike protocol (proto type 1), and the nodes
//! of a cluster found from one seed through `peers-clear-std` (with TLS,
//! `peers-tls-std`: the nodes' TLS endpoints).

use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use bolide_wire::info::parse_peers;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

/// Largest info answer accepted.
const ANSWER_BYTES_MAX: usize = 64 << 20;

/// One node, reached at `address` (`host:port`).
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub address: String,
}

/// Answers by command, in the order asked.
pub type Answers = BTreeMap<String, String>;

/// Sends `commands` to `address` and returns the answers.
pub fn request(address: &str, commands: &[&str], timeout: Duration) -> Result<Answers, String> {
    let mut stream = crate::tls::connect(address, timeout)?;
    crate::login::authenticate(&mut stream, address)?;
    let mut body = commands.join("\n");
    body.push('\n');
    let mut frame = ProtoHeader::encode(MessageType::Info, body.len()).to_vec();
    frame.extend_from_slice(body.as_bytes());
    stream
        .write_all(&frame)
        .map_err(|error| format!("{address}: {error}"))?;
    let mut header = [0u8; PROTO_HEADER_BYTES];
    stream
        .read_exact(&mut header)
        .map_err(|error| format!("{address}: no answer: {error}"))?;
    let header = ProtoHeader::decode(&header)
        .map_err(|error| format!("{address}: not an Aerospike node ({error})"))?;
    if header.message_type != MessageType::Info || header.body_bytes > ANSWER_BYTES_MAX {
        return Err(format!("{address}: unexpected answer"));
    }
    let mut answer = vec![0u8; header.body_bytes];
    stream
        .read_exact(&mut answer)
        .map_err(|error| format!("{address}: {error}"))?;
    let text = String::from_utf8_lossy(&answer);
    // A secured node answers a socket that did not log in with this line
    // alone, whatever was asked.
    if text.starts_with("ERROR:80") {
        return Err(format!(
            "{address}: not authenticated: the cluster is secured, log in with -U USER [-P PASSWORD]"
        ));
    }
    let mut answers = Answers::new();
    for line in text.split('\n').filter(|line| !line.is_empty()) {
        let (command, value) = line.split_once('\t').unwrap_or((line, ""));
        answers.insert(command.to_owned(), value.to_owned());
    }
    Ok(answers)
}

/// The value of one command on one node.
pub fn value(address: &str, command: &str, timeout: Duration) -> Result<String, String> {
    let mut answers = request(address, &[command], timeout)?;
    Ok(answers.remove(command).unwrap_or_default())
}

/// Every node reachable from `seed`: the seed, the peers it names, and
/// theirs (each node asked once), in discovery order.
pub fn discover(seed: &str, timeout: Duration) -> Result<Vec<Node>, String> {
    discover_with(seed, timeout, false)
}

/// As [`discover`], without a warning for a peer that does not answer
/// (backups keep going while a node is down).
pub fn discover_quietly(seed: &str, timeout: Duration) -> Result<Vec<Node>, String> {
    discover_with(seed, timeout, true)
}

fn discover_with(seed: &str, timeout: Duration, quiet: bool) -> Result<Vec<Node>, String> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut queue = vec![seed.to_owned()];
    let mut asked = std::collections::HashSet::new();
    while let Some(address) = queue.pop() {
        if !asked.insert(address.clone()) || asked.len() > 512 {
            continue;
        }
        let peers_command = if crate::tls::get().is_some() {
            "peers-tls-std"
        } else {
            "peers-clear-std"
        };
        let answers = match request(&address, &["node", peers_command], timeout) {
            Ok(answers) => answers,
            // The seed must answer; a peer that does not is left out.
            Err(error) if nodes.is_empty() => return Err(error),
            Err(error) => {
                if !quiet {
                    eprintln!("warning: {error}");
                }
                continue;
            }
        };
        let name = answers.get("node").cloned().unwrap_or_default();
        if nodes
            .iter()
            .any(|node| node.name == name && !name.is_empty())
        {
            continue;
        }
        nodes.push(Node { name, address });
        let peers = parse_peers(answers.get(peers_command).map_or("", String::as_str));
        for peer in peers.into_iter().rev() {
            if !nodes.iter().any(|node| node.name == peer.node_id) {
                queue.push(peer.address);
            }
        }
        // Visit peers in the order named: the queue pops from the end.
    }
    Ok(nodes)
}

/// `k=v` pairs split on `separator`, in order.
pub fn pairs(text: &str, separator: char) -> Vec<(String, String)> {
    text.split(separator)
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// An `ERROR:code:message` answer as an error.
pub fn check(answer: &str) -> Result<&str, String> {
    if answer.starts_with("ERROR") || answer.starts_with("error") {
        Err(answer.to_owned())
    } else {
        Ok(answer)
    }
}
