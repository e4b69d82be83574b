//! Logging in to secured nodes (`-U/-P`): the password hash the protocol
//! carries, the admin protocol's LOGIN and AUTHENTICATE on the tool's own
//! info sockets (a session token per node, as the clients keep them), and
//! reading a password without echo.

use bolide_wire::admin::{self, command, field, AdminMessage};
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::sync::{Mutex, OnceLock};

/// The user the tool logs in as, and its password's hash.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    hash: String,
}

/// The logged-in user for this run of the tool (set once by `main`).
static CREDENTIALS: OnceLock<Credentials> = OnceLock::new();

/// Session tokens by node address; None: the node runs without security.
static SESSIONS: Mutex<Option<HashMap<String, Option<Vec<u8>>>>> = Mutex::new(None);

/// The clients' bcrypt salt `7EqJtq98hPqEX7fNZaFWoO` as raw bytes.
const CLIENT_SALT: [u8; 16] = [
    0xf4, 0x6b, 0x0b, 0xbe, 0xcf, 0xfe, 0x8d, 0x1b, 0x06, 0x67, 0xd8, 0x4f, 0x6d, 0xc1, 0xd8, 0xa9,
];

/// What every Aerospike client sends for a password: bcrypt, cost 10, the
/// fixed salt, the `$2a$` form.
pub fn hash_password(password: &str) -> String {
    bcrypt::hash_with_salt(password, 10, CLIENT_SALT)
        .map(|parts| parts.format_for_version(bcrypt::Version::TwoA))
        .unwrap_or_default()
}

pub fn set(user: String, password: String) {
    let hash = hash_password(&password);
    let _ = CREDENTIALS.set(Credentials {
        user,
        password,
        hash,
    });
}

pub fn credentials() -> Option<&'static Credentials> {
    CREDENTIALS.get()
}

/// Aerospike's name for a security result code.
pub fn result_name(code: u8) -> &'static str {
    match code {
        51 => "security not supported",
        52 => "security not enabled",
        54 => "invalid command",
        55 => "invalid field",
        60 => "invalid user",
        61 => "user already exists",
        62 => "invalid password",
        63 => "expired password",
        64 => "forbidden password",
        65 => "invalid credential",
        66 => "expired session",
        70 => "invalid role",
        71 => "role already exists",
        72 => "invalid privilege",
        73 => "invalid allowlist",
        74 => "quotas not enabled",
        75 => "invalid quota",
        80 => "not authenticated",
        81 => "role violation",
        82 => "not allowlisted",
        83 => "quota exceeded",
        _ => "error",
    }
}

/// Authenticates `stream` (connected to `address`) as the logged-in user,
/// if there is one: AUTHENTICATE with the node's token, else LOGIN.
pub fn authenticate(stream: &mut (impl Read + Write), address: &str) -> Result<(), String> {
    let Some(credentials) = credentials() else {
        return Ok(());
    };
    let known = {
        let mut sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .get_or_insert_with(HashMap::new)
            .get(address)
            .cloned()
    };
    match known {
        Some(None) => return Ok(()),
        Some(Some(token)) => {
            let (code, _) = exchange(
                stream,
                address,
                command::AUTHENTICATE,
                &[
                    (field::USER, credentials.user.as_bytes()),
                    (field::SESSION_TOKEN, &token),
                ],
            )?;
            // 65/66: the token is no longer good; log in again below.
            if code == 0 {
                return Ok(());
            }
            if code != 65 && code != 66 {
                return Err(refused(address, &credentials.user, code));
            }
        }
        None => {}
    }
    let (code, body) = exchange(
        stream,
        address,
        command::LOGIN,
        &[
            (field::USER, credentials.user.as_bytes()),
            (field::CREDENTIAL, credentials.hash.as_bytes()),
        ],
    )?;
    let token = match code {
        0 => {
            let message = AdminMessage::decode(&body)
                .map_err(|_| format!("{address}: malformed login reply"))?;
            Some(
                message
                    .field(field::SESSION_TOKEN)
                    .ok_or_else(|| format!("{address}: login reply without a token"))?
                    .to_vec(),
            )
        }
        // A node without security: nothing to log in to.
        52 => None,
        code => return Err(refused(address, &credentials.user, code)),
    };
    SESSIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(address.to_owned(), token);
    Ok(())
}

fn refused(address: &str, user: &str, code: u8) -> String {
    format!(
        "{address}: login as '{user}' refused: {} ({code})",
        result_name(code)
    )
}

/// Sends one admin request and reads the reply: its result code and body.
fn exchange(
    stream: &mut (impl Read + Write),
    address: &str,
    command: u8,
    fields: &[(u8, &[u8])],
) -> Result<(u8, Vec<u8>), String> {
    let mut frame = Vec::new();
    admin::append_request(&mut frame, command, fields);
    stream
        .write_all(&frame)
        .map_err(|error| format!("{address}: {error}"))?;
    let mut header = [0u8; PROTO_HEADER_BYTES];
    stream
        .read_exact(&mut header)
        .map_err(|error| format!("{address}: no login reply: {error}"))?;
    let header = ProtoHeader::decode(&header)
        .map_err(|error| format!("{address}: not an Aerospike node ({error})"))?;
    if header.message_type != MessageType::Admin
        || header.body_bytes < admin::ADMIN_HEADER_BYTES
        || header.body_bytes > 64 << 10
    {
        return Err(format!("{address}: unexpected login reply"));
    }
    let mut body = vec![0u8; header.body_bytes];
    stream
        .read_exact(&mut body)
        .map_err(|error| format!("{address}: {error}"))?;
    let code = body.get(1).copied().unwrap_or(255);
    Ok((code, body))
}

/// Reads a password: without echo from a terminal, else one line of
/// standard input.
pub fn read_password(prompt: &str) -> Result<String, String> {
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        let mut line = String::new();
        stdin
            .lock()
            .read_line(&mut line)
            .map_err(|error| format!("cannot read the password: {error}"))?;
        return Ok(line.trim_end_matches(['\n', '\r']).to_owned());
    }
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let echo = Echo::off();
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    drop(echo);
    eprintln!();
    read.map_err(|error| format!("cannot read the password: {error}"))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_owned())
}

/// Terminal echo off while it lives.
struct Echo(Option<libc::termios>);

impl Echo {
    #[expect(unsafe_code, reason = "termios calls on standard input")]
    fn off() -> Echo {
        // SAFETY: tcgetattr fills a termios we own; tcsetattr reads it.
        // Both only touch standard input's terminal settings.
        unsafe {
            let mut settings: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut settings) != 0 {
                return Echo(None);
            }
            let saved = settings;
            settings.c_lflag &= !libc::ECHO;
            if libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &settings) != 0 {
                return Echo(None);
            }
            Echo(Some(saved))
        }
    }
}

impl Drop for Echo {
    #[expect(unsafe_code, reason = "termios call restoring standard input")]
    fn drop(&mut self) {
        if let Some(saved) = self.0 {
            // SAFETY: restores the settings read by tcgetattr above.
            unsafe {
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_the_clients() {
        assert_eq!(
            hash_password("admin"),
            "$2a$10$7EqJtq98hPqEX7fNZaFWoO1mVO/4MLpGzsqojz6E9Gef6iXDjXdDa"
        );
        assert_eq!(
            hash_password(""),
            "$2a$10$7EqJtq98hPqEX7fNZaFWoOLCkFexA7A9eoJ0Ew.mTDdk.E60D.9zS"
        );
    }
}
