//! Logging in to a secured node (`-U/-P`): LOGIN on each new connection
//! before its first request (a node without security answers 52, which is
//! accepted).

use bolide_wire::admin::{append_request, command, field, ADMIN_HEADER_BYTES};
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};

/// The clients' bcrypt salt `7EqJtq98hPqEX7fNZaFWoO` as raw bytes.
const CLIENT_SALT: [u8; 16] = [
    0xf4, 0x6b, 0x0b, 0xbe, 0xcf, 0xfe, 0x8d, 0x1b, 0x06, 0x67, 0xd8, 0x4f, 0x6d, 0xc1, 0xd8, 0xa9,
];

/// A user and its password hash as every Aerospike client sends it
/// (bcrypt, cost 10, the fixed salt, `$2a$`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub hash: String,
}

impl Credentials {
    pub fn new(user: &str, password: &str) -> Result<Credentials, String> {
        let hash = bcrypt::hash_with_salt(password, 10, CLIENT_SALT)
            .map_err(|error| format!("cannot hash the password: {error}"))?
            .format_for_version(bcrypt::Version::TwoA);
        Ok(Credentials {
            user: user.to_owned(),
            hash,
        })
    }

    /// The LOGIN request.
    pub fn request(&self) -> Vec<u8> {
        let mut frame = Vec::new();
        append_request(
            &mut frame,
            command::LOGIN,
            &[
                (field::USER, self.user.as_bytes()),
                (field::CREDENTIAL, self.hash.as_bytes()),
            ],
        );
        frame
    }
}

/// Checks a reply's proto header and returns its body size.
pub fn reply_size(header: &[u8; PROTO_HEADER_BYTES]) -> Result<usize, String> {
    let header = ProtoHeader::decode(header).map_err(|error| error.to_string())?;
    if header.message_type != MessageType::Admin
        || header.body_bytes < ADMIN_HEADER_BYTES
        || header.body_bytes > 64 << 10
    {
        return Err("unexpected reply to LOGIN".to_owned());
    }
    Ok(header.body_bytes)
}

/// Ok if a LOGIN reply's body says the connection may go on.
pub fn check_reply(body: &[u8], user: &str) -> Result<(), String> {
    match body.get(1).copied() {
        // 52: the node runs without security.
        Some(0 | 52) => Ok(()),
        Some(code) => Err(format!("login as '{user}' refused with result {code}")),
        None => Err("empty reply to LOGIN".to_owned()),
    }
}

/// The credentials of this run, for the cluster map's info connections.
pub static CREDENTIALS: std::sync::OnceLock<Credentials> = std::sync::OnceLock::new();

/// Logs in on a blocking stream.
pub fn login_blocking(
    stream: &mut std::net::TcpStream,
    credentials: &Credentials,
) -> Result<(), String> {
    use std::io::{Read, Write};
    stream
        .write_all(&credentials.request())
        .map_err(|e| e.to_string())?;
    let mut header = [0u8; PROTO_HEADER_BYTES];
    stream.read_exact(&mut header).map_err(|e| e.to_string())?;
    let mut body = vec![0u8; reply_size(&header)?];
    stream.read_exact(&mut body).map_err(|e| e.to_string())?;
    check_reply(&body, &credentials.user)
}

/// Logs in on an async stream.
pub async fn login(
    stream: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
    credentials: &Credentials,
) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(&credentials.request())
        .await
        .map_err(|e| e.to_string())?;
    let mut header = [0u8; PROTO_HEADER_BYTES];
    stream
        .read_exact(&mut header)
        .await
        .map_err(|e| e.to_string())?;
    let mut body = vec![0u8; reply_size(&header)?];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|e| e.to_string())?;
    check_reply(&body, &credentials.user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_clients() {
        let credentials = Credentials::new("admin", "admin").expect("hash");
        assert_eq!(
            credentials.hash,
            "$2a$10$7EqJtq98hPqEX7fNZaFWoO1mVO/4MLpGzsqojz6E9Gef6iXDjXdDa"
        );
        assert_eq!(credentials.request().len(), 99);
        assert_eq!(check_reply(&[0, 52], "admin"), Ok(()));
        assert!(check_reply(&[0, 62], "admin").is_err());
    }
}
