//! Info requests to other nodes over their service port (the info
//! protocol, proto type 1).

use super::InfoAnswers;
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
pub use bolide_wire::info::{parse_peers, Peer};
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
    // A console user of a secured node logs in on the other node too
    // (session tokens are per node): LOGIN with the same password hash.
    if let Ok((user, hash)) =
        super::LOGIN.try_with(|login| (login.user.clone(), login.client_hash.clone()))
    {
        login(&mut stream, address, &user, &hash).await?;
    }
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

/// Sends LOGIN on `stream` and reads its answer: Ok when logged in, or when
/// the node has no security (52).
async fn login(
    stream: &mut tokio::net::TcpStream,
    address: &str,
    user: &str,
    client_hash: &str,
) -> Result<(), String> {
    use bolide_wire::admin::{append_request, command, field};
    let mut request = Vec::new();
    append_request(
        &mut request,
        command::LOGIN,
        &[
            (field::USER, user.as_bytes()),
            (field::CREDENTIAL, client_hash.as_bytes()),
        ],
    );
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
    if header.message_type != MessageType::Admin || header.body_bytes as u64 > ANSWER_BYTES_MAX {
        return Err(format!("{address}: not a login answer"));
    }
    let mut answer = Vec::new();
    (&mut *stream)
        .take(header.body_bytes as u64)
        .read_to_end(&mut answer)
        .await
        .map_err(|error| format!("{address}: {error}"))?;
    match answer.get(1) {
        Some(0) | Some(52) => Ok(()),
        Some(code) => Err(format!("{address}: login refused ({code})")),
        None => Err(format!("{address}: empty login answer")),
    }
}
