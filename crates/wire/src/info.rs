//! The text info protocol (proto type 1).
//!
//! Request body: commands separated by `\n`. Response body: for each command,
//! `<command as received>\t<value>\n`, in request order.

/// Splits an info request body into its commands. A trailing fragment
/// without `\n` is treated as a command too; empty lines are skipped.
pub fn commands(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    body.split(|&b| b == b'\n')
        .filter(|command| !command.is_empty())
}

/// A parsed command: `name[/arg/arg...][:key=value;key=value...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoCommand<'a> {
    /// The full text, echoed back in the answer.
    pub text: &'a str,
    /// Up to the first `/`, `:` or `;`.
    pub name: &'a str,
    /// The `/`-separated arguments after the name.
    pub path: Vec<&'a str>,
    /// The `key=value` parameters after `:`.
    pub params: Vec<(&'a str, &'a str)>,
}

impl<'a> InfoCommand<'a> {
    pub fn parse(text: &'a str) -> InfoCommand<'a> {
        let text = text.trim_end_matches('\r');
        let name_end = text.find(['/', ':', ';']).unwrap_or(text.len());
        let (name, rest) = text.split_at(name_end);
        let (path_part, param_part) = match rest.find(':') {
            Some(colon) => (
                rest.get(..colon).unwrap_or(""),
                rest.get(colon + 1..).unwrap_or(""),
            ),
            None => (rest, ""),
        };
        let path = path_part
            .split('/')
            .filter(|part| !part.is_empty())
            .collect();
        let params = param_part
            .split(';')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
            .collect();
        InfoCommand {
            text,
            name,
            path,
            params,
        }
    }

    /// The value of parameter `key`, if given.
    pub fn param(&self, key: &str) -> Option<&'a str> {
        self.params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// Appends one answer line `command\tvalue\n`. Tabs and newlines inside the
/// value are replaced, since clients split on them.
pub fn append_answer(out: &mut Vec<u8>, command: &str, value: &str) {
    out.extend_from_slice(command.as_bytes());
    out.push(b'\t');
    out.extend(
        value
            .bytes()
            .map(|b| if b == b'\t' || b == b'\n' { b' ' } else { b }),
    );
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_commands_and_tolerates_missing_newline() {
        let got: Vec<&[u8]> = commands(b"node\npartition-generation\nbuild").collect();
        assert_eq!(got, vec![&b"node"[..], b"partition-generation", b"build"]);
    }

    #[test]
    fn parses_names_paths_and_params() {
        let command = InfoCommand::parse("namespace/test");
        assert_eq!(command.name, "namespace");
        assert_eq!(command.path, vec!["test"]);
        let command = InfoCommand::parse("truncate:namespace=test;set=demo");
        assert_eq!(command.name, "truncate");
        assert_eq!(command.param("namespace"), Some("test"));
        assert_eq!(command.param("set"), Some("demo"));
        let command = InfoCommand::parse("get-config:context=namespace;namespace=test");
        assert_eq!(command.param("context"), Some("namespace"));
        let command = InfoCommand::parse("sets/test/demo");
        assert_eq!(command.path, vec!["test", "demo"]);
    }

    #[test]
    fn answers_escape_separators() {
        let mut out = Vec::new();
        append_answer(&mut out, "node", "A\tB");
        assert_eq!(out, b"node\tA B\n");
    }
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
mod peer_tests {
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
