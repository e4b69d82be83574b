//! The admin protocol (proto type 2): any admin message bodies, answered
//! by a secured node's access control (`Security::admin`, what a secured
//! `bolided` runs for type-2 frames).
//!
//! Input: up to [`MESSAGES_MAX`] messages, each a big-endian u16 length and
//! that many bytes of body (what follows the proto header); a last message
//! without its full length takes the rest. Each message is answered on a
//! connection authenticated as `admin` (who holds `user-admin`, so user and
//! role commands run and change the catalog), and the first also on a
//! connection that never logged in.
//!
//! What must hold: every answer is well-formed: a 24-byte reply, or a
//! successful LOGIN's (a session token of 1 byte to 8 KiB and a TTL of at
//! least 120 s, the whole under 8 KiB), or a query stream (records, then a
//! 50; or one error record alone); every result code is one the server
//! knows; a connection without a session is refused (80) everything but
//! LOGIN and AUTHENTICATE; a connection has a session after a successful
//! LOGIN or AUTHENTICATE and keeps none after a failed one it started
//! without; and the catalog stays one a node could reload (every entry
//! valid, the file form reads back the same).

use bolide_security::catalog::{Catalog, Entry};
use bolide_security::service::Clock;
use bolide_security::{Security, SecurityConfig, Session};
use bolide_types::ResultCode;
use bolide_wire::admin::{
    append_request, command, decode_stream, field, AdminMessage, ADMIN_HEADER_BYTES,
};
use bolide_wire::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

pub const MESSAGES_MAX: usize = 16;
const NOW_MS: u64 = 1_800_000_000_000;

/// The catalog of a new secured cluster and a session token of `admin`,
/// made once per process (hashing a password costs milliseconds).
fn prepared() -> &'static (Vec<Entry>, Vec<u8>) {
    static PREPARED: OnceLock<(Vec<Entry>, Vec<u8>)> = OnceLock::new();
    PREPARED.get_or_init(|| {
        let security = node(&[]);
        let mut session = None;
        let mut out = Vec::new();
        let hash = bolide_security::password::client_hash("admin");
        let mut frame = Vec::new();
        append_request(
            &mut frame,
            command::LOGIN,
            &[
                (field::USER, b"admin"),
                (field::CREDENTIAL, hash.as_bytes()),
            ],
        );
        security.admin(
            &mut session,
            client(),
            &frame[PROTO_HEADER_BYTES..],
            &mut out,
        );
        let message = AdminMessage::decode(&out[PROTO_HEADER_BYTES..]).expect("login reply");
        let token = message
            .field(field::SESSION_TOKEN)
            .expect("admin logs in")
            .to_vec();
        (security.entries(), token)
    })
}

fn clock() -> Clock {
    Arc::new(|| NOW_MS)
}

fn client() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 40_000))
}

fn config() -> SecurityConfig {
    SecurityConfig {
        enable_quotas: true,
        ..SecurityConfig::default()
    }
}

/// A node: the prepared catalog, or a new one if there is none yet.
fn node(entries: &[Entry]) -> Security {
    if entries.is_empty() {
        Security::with_clock(config(), None, clock()).expect("new catalog")
    } else {
        Security::from_entries(config(), entries.to_vec(), clock())
            .expect("prepared catalog")
            .with_password_iterations(bolide_security::password::ITERATIONS_MIN)
    }
}

/// Splits the input into message bodies.
pub fn messages(bytes: &[u8]) -> Vec<&[u8]> {
    let mut messages = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() && messages.len() < MESSAGES_MAX {
        let Some((length, after)) = rest.split_first_chunk::<2>() else {
            messages.push(rest);
            break;
        };
        let length = usize::from(u16::from_be_bytes(*length));
        let (body, after) = after.split_at(length.min(after.len()));
        messages.push(body);
        rest = after;
    }
    messages
}

/// Joins message bodies into an input (for seeds).
pub fn input(bodies: &[&[u8]]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for body in bodies {
        let length = u16::try_from(body.len()).expect("seed body under 64 KiB");
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend_from_slice(body);
    }
    bytes
}

pub fn check(bytes: &[u8]) {
    let (entries, token) = prepared();
    let security = node(entries);
    let bodies = messages(bytes);

    let mut admin: Option<Arc<Session>> = None;
    let mut frame = Vec::new();
    append_request(
        &mut frame,
        command::AUTHENTICATE,
        &[(field::USER, b"admin"), (field::SESSION_TOKEN, token)],
    );
    let mut out = Vec::new();
    security.admin(&mut admin, client(), &frame[PROTO_HEADER_BYTES..], &mut out);
    assert!(admin.is_some(), "admin's token authenticates");

    if let Some(first) = bodies.first() {
        let mut anonymous = None;
        let command = first.get(2).copied();
        let mut out = Vec::new();
        security.admin(&mut anonymous, client(), first, &mut out);
        let code = check_reply(first, &out);
        let starts_a_session = matches!(command, Some(command::LOGIN | command::AUTHENTICATE));
        if code == 0 {
            assert!(starts_a_session, "anonymous command {command:?} succeeded");
            assert!(anonymous.is_some(), "successful login without a session");
        } else {
            assert!(anonymous.is_none(), "failed login left a session");
        }
        if !starts_a_session && AdminMessage::decode(first).is_ok() {
            let known = matches!(command, Some(0..=6 | 9..=16 | 20));
            if known && bolide_wire::admin::AdminRequest::decode(first).is_ok() {
                assert_eq!(code, ResultCode::NotAuthenticated.as_u8());
            }
        }
    }

    for body in &bodies {
        let mut out = Vec::new();
        security.admin(&mut admin, client(), body, &mut out);
        check_reply(body, &out);
    }

    let entries = security.entries();
    let reloaded = Catalog::from_entries(entries.clone()).expect("the catalog reloads");
    assert_eq!(reloaded.entries().count(), entries.len());
    let file = bolide_security::file::encode(&entries);
    assert_eq!(
        bolide_security::file::decode(&file).expect("file form"),
        entries
    );
}

/// Checks one answer; returns its result code (the ending code of a
/// query stream).
pub fn check_reply(request: &[u8], out: &[u8]) -> u8 {
    let command = request.get(2).copied();
    let query = matches!(command, Some(command::QUERY_USERS | command::QUERY_ROLES))
        && AdminMessage::decode(request).is_ok();
    let (header, body) = out
        .split_first_chunk::<PROTO_HEADER_BYTES>()
        .expect("an answer");
    let header = ProtoHeader::decode(header).expect("answer header");
    assert_eq!(header.message_type, MessageType::Admin);
    assert!(body.len() >= ADMIN_HEADER_BYTES);
    let result = body[1];
    if query && (result == 0 || header.body_bytes > ADMIN_HEADER_BYTES) {
        let (records, end) = decode_stream(out).expect("a well-formed stream");
        let end = end.expect("the stream ends");
        assert!(known(end), "unknown code {end}");
        if end != ResultCode::QueryEnd.as_u8() {
            assert!(records.is_empty(), "an error after records");
        }
        return end;
    }
    assert!(known(result), "unknown code {result}");
    if command == Some(command::LOGIN) && result == 0 {
        assert!(out.len() < 8192, "login reply of {} bytes", out.len());
        assert_eq!(header.body_bytes, body.len());
        let message = AdminMessage::decode(body).expect("login reply");
        let token = message.field(field::SESSION_TOKEN).expect("token");
        assert!(!token.is_empty() && token.len() < 8192);
        let ttl = message.field(field::SESSION_TTL).expect("ttl");
        let ttl = u32::from_be_bytes(ttl.try_into().expect("4-byte ttl"));
        assert!(ttl >= 120, "ttl {ttl}");
    } else {
        assert_eq!(
            out.len(),
            PROTO_HEADER_BYTES + ADMIN_HEADER_BYTES,
            "{out:?}"
        );
    }
    result
}

fn known(code: u8) -> bool {
    ResultCode::ALL.iter().any(|known| known.as_u8() == code)
}

/// Seeds: every command with well-formed fields as clients send them, and
/// damaged variants (cut, wrong counts, bad lengths).
pub fn seeds() -> Vec<Vec<u8>> {
    use bolide_wire::admin::{encode_names, encode_privileges, WirePrivilege};
    let hash = bolide_security::password::client_hash("pw");
    let admin_hash = bolide_security::password::client_hash("admin");
    let roles = encode_names(&["read", "reader"]);
    let privileges = encode_privileges(&[
        WirePrivilege {
            code: 1,
            namespace: "",
            set: "",
        },
        WirePrivilege {
            code: 10,
            namespace: "test",
            set: "demo",
        },
        WirePrivilege {
            code: 13,
            namespace: "test",
            set: "",
        },
    ]);
    let body = |command: u8, fields: &[(u8, &[u8])]| {
        let mut frame = Vec::new();
        append_request(&mut frame, command, fields);
        frame.split_off(PROTO_HEADER_BYTES)
    };
    let requests: Vec<Vec<u8>> = vec![
        body(
            command::LOGIN,
            &[
                (field::USER, b"admin"),
                (field::CREDENTIAL, admin_hash.as_bytes()),
            ],
        ),
        body(command::LOGIN, &[]),
        body(
            command::AUTHENTICATE,
            &[(field::USER, b"admin"), (field::SESSION_TOKEN, &[1; 89])],
        ),
        body(
            command::CREATE_ROLE,
            &[
                (field::ROLE, b"reader"),
                (field::PRIVILEGES, &privileges),
                (field::WHITELIST, b"10.0.2.0/24,127.0.0.1"),
                (field::READ_QUOTA, &100u32.to_be_bytes()),
                (field::WRITE_QUOTA, &50u32.to_be_bytes()),
            ],
        ),
        body(
            command::CREATE_USER,
            &[
                (field::USER, b"bob"),
                (field::PASSWORD, hash.as_bytes()),
                (field::ROLES, &roles),
            ],
        ),
        body(
            command::GRANT_ROLES,
            &[
                (field::USER, b"bob"),
                (field::ROLES, &encode_names(&["sys-admin"])),
            ],
        ),
        body(
            command::REVOKE_ROLES,
            &[
                (field::USER, b"bob"),
                (field::ROLES, &encode_names(&["read"])),
            ],
        ),
        body(
            command::SET_PASSWORD,
            &[(field::USER, b"bob"), (field::PASSWORD, hash.as_bytes())],
        ),
        body(
            command::CHANGE_PASSWORD,
            &[
                (field::USER, b"admin"),
                (field::OLD_PASSWORD, admin_hash.as_bytes()),
                (field::PASSWORD, hash.as_bytes()),
            ],
        ),
        body(
            command::GRANT_PRIVILEGES,
            &[(field::ROLE, b"reader"), (field::PRIVILEGES, &privileges)],
        ),
        body(
            command::REVOKE_PRIVILEGES,
            &[(field::ROLE, b"reader"), (field::PRIVILEGES, &privileges)],
        ),
        body(
            command::SET_WHITELIST,
            &[(field::ROLE, b"reader"), (field::WHITELIST, b"::1,bad_IP")],
        ),
        body(command::SET_WHITELIST, &[(field::ROLE, b"reader")]),
        body(
            command::SET_QUOTAS,
            &[
                (field::ROLE, b"reader"),
                (field::READ_QUOTA, &u32::MAX.to_be_bytes()),
                (field::WRITE_QUOTA, &0u32.to_be_bytes()),
            ],
        ),
        body(command::QUERY_USERS, &[]),
        body(command::QUERY_USERS, &[(field::USER, b"bob")]),
        body(command::QUERY_ROLES, &[]),
        body(command::QUERY_ROLES, &[(field::ROLE, b"nope")]),
        body(command::DROP_ROLE, &[(field::ROLE, b"reader")]),
        body(command::DROP_USER, &[(field::USER, b"bob")]),
    ];
    let mut seeds: Vec<Vec<u8>> = requests.iter().map(|r| input(&[r])).collect();
    // A session of changes, as an administrator makes them.
    let all: Vec<&[u8]> = requests.iter().map(Vec::as_slice).collect();
    for chunk in all.chunks(MESSAGES_MAX) {
        seeds.push(input(chunk));
    }
    // Damage: cut bodies, an undercounted field count, a field that claims
    // more than the body holds.
    for request in &requests {
        seeds.push(input(&[&request[..request.len() / 2]]));
        let mut undercounted = request.clone();
        undercounted[3] = 1;
        seeds.push(input(&[&undercounted]));
        if request.len() > ADMIN_HEADER_BYTES + 4 {
            let mut long = request.clone();
            long[ADMIN_HEADER_BYTES] = 0x7f;
            seeds.push(input(&[&long]));
        }
    }
    seeds.push(input(&[
        &[0u8; 16],
        &[0, 0, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ]));
    seeds
}

/// Writes the seeds to `directory/admin`, each named by its content's
/// SHA-1 as libFuzzer names corpus files.
pub fn write_seeds(directory: &std::path::Path) -> std::io::Result<()> {
    let dir = directory.join("admin");
    std::fs::create_dir_all(&dir)?;
    for (index, seed) in seeds().iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{index:03}")), seed)?;
    }
    Ok(())
}
