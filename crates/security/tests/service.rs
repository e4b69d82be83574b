//! The security model through the bytes a client sends: admin messages
//! encoded as the clients encode them, answered by `Security::admin`, and
//! the checks the server runs before data and info requests.

use bolide_security::catalog::Entry;
use bolide_security::password;
use bolide_security::service::Clock;
use bolide_security::{Needs, Operation, Permission, Security, SecurityConfig, Session};
use bolide_types::ResultCode;
use bolide_wire::admin::{
    append_request, command, decode_stream, encode_names, encode_privileges, field, AdminMessage,
    WirePrivilege, ADMIN_HEADER_BYTES,
};
use bolide_wire::frame::PROTO_HEADER_BYTES;
use bolide_wire::info::InfoCommand;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What a client sends for `password` (bcrypt costs tens of milliseconds:
/// each password is hashed once per test run).
fn client_hash(password: &str) -> String {
    static HASHES: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
    let mut hashes = HASHES.lock().expect("lock");
    if let Some((_, hash)) = hashes.iter().find(|(p, _)| p == password) {
        return hash.clone();
    }
    let hash = password::client_hash(password);
    hashes.push((password.to_owned(), hash.clone()));
    hash
}

/// A clock the test moves by hand.
#[derive(Clone)]
struct Time(Arc<AtomicU64>);

impl Time {
    fn new() -> Time {
        Time(Arc::new(AtomicU64::new(1_800_000_000_000)))
    }
    fn clock(&self) -> Clock {
        let time = self.0.clone();
        Arc::new(move || time.load(Relaxed))
    }
    fn advance_seconds(&self, seconds: u64) {
        self.0.fetch_add(seconds * 1000, Relaxed);
    }
}

fn node(config: SecurityConfig, time: &Time) -> Security {
    Security::with_clock(config, None, time.clock()).expect("open")
}

/// A reply record's fields, by id.
type Record = Vec<(u8, Vec<u8>)>;

/// One client connection.
struct Connection<'s> {
    security: &'s Security,
    session: Option<Arc<Session>>,
    address: SocketAddr,
    shared: Vec<Entry>,
}

impl<'s> Connection<'s> {
    fn new(security: &'s Security) -> Connection<'s> {
        Connection::from(security, "127.0.0.1:40000")
    }

    fn from(security: &'s Security, address: &str) -> Connection<'s> {
        Connection {
            security,
            session: None,
            address: address.parse().expect("address"),
            shared: Vec::new(),
        }
    }

    /// Sends one admin request; returns the whole reply.
    fn send(&mut self, command: u8, fields: &[(u8, &[u8])]) -> Vec<u8> {
        let mut frame = Vec::new();
        append_request(&mut frame, command, fields);
        let mut out = Vec::new();
        let changes = self.security.admin(
            &mut self.session,
            self.address,
            &frame[PROTO_HEADER_BYTES..],
            &mut out,
        );
        self.shared.extend(changes);
        out
    }

    /// Sends a request whose reply is 24 bytes; returns its result code.
    fn result(&mut self, command: u8, fields: &[(u8, &[u8])]) -> u8 {
        let reply = self.send(command, fields);
        assert_eq!(reply.len(), 24, "reply of command {command}: {reply:?}");
        reply[9]
    }

    fn login(&mut self, user: &str, password: &str) -> Result<(Vec<u8>, u32), u8> {
        let hash = client_hash(password);
        let reply = self.send(
            command::LOGIN,
            &[
                (field::USER, user.as_bytes()),
                (field::CREDENTIAL, hash.as_bytes()),
            ],
        );
        if reply[9] != 0 {
            assert_eq!(reply.len(), 24);
            return Err(reply[9]);
        }
        let message = AdminMessage::decode(&reply[PROTO_HEADER_BYTES..]).expect("login reply");
        let token = message.field(field::SESSION_TOKEN).expect("token").to_vec();
        let ttl = message.field(field::SESSION_TTL).expect("ttl");
        Ok((token, u32::from_be_bytes(ttl.try_into().expect("u32"))))
    }

    fn authenticate(&mut self, user: &str, token: &[u8]) -> u8 {
        self.result(
            command::AUTHENTICATE,
            &[
                (field::USER, user.as_bytes()),
                (field::SESSION_TOKEN, token),
            ],
        )
    }

    fn create_user(&mut self, user: &str, password: &str, roles: &[&str]) -> u8 {
        let hash = client_hash(password);
        self.result(
            command::CREATE_USER,
            &[
                (field::USER, user.as_bytes()),
                (field::PASSWORD, hash.as_bytes()),
                (field::ROLES, &encode_names(roles)),
            ],
        )
    }

    fn create_role(&mut self, role: &str, privileges: &[(u8, &str, &str)]) -> u8 {
        let privileges: Vec<WirePrivilege<'_>> = privileges
            .iter()
            .map(|(code, namespace, set)| WirePrivilege {
                code: *code,
                namespace,
                set,
            })
            .collect();
        self.result(
            command::CREATE_ROLE,
            &[
                (field::ROLE, role.as_bytes()),
                (field::PRIVILEGES, &encode_privileges(&privileges)),
            ],
        )
    }

    /// A query's records (fields by id) and its ending code.
    fn query(&mut self, command: u8, fields: &[(u8, &[u8])]) -> (Vec<Record>, u8) {
        let reply = self.send(command, fields);
        let (records, end) = decode_stream(&reply).expect("stream");
        let records = records
            .iter()
            .map(|record| {
                (0..=18u8)
                    .filter_map(|id| record.field(id).map(|data| (id, data.to_vec())))
                    .collect()
            })
            .collect();
        (records, end.expect("stream end"))
    }

    fn check(&self, operation: Operation, namespace: &str, set: &str) -> Result<(), ResultCode> {
        self.security
            .check_operation(self.session.as_deref(), operation, namespace, set, 1)
            .map_err(|refusal| refusal.result)
    }

    fn info(&self, text: &str) -> Result<(), String> {
        self.security
            .check_info(
                self.session.as_deref(),
                self.address,
                &InfoCommand::parse(text),
            )
            .map_err(|refusal| refusal.info_error())
    }
}

fn admin(security: &Security) -> Connection<'_> {
    let mut connection = Connection::new(security);
    connection.login("admin", "admin").expect("admin login");
    connection
}

fn names(data: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = &data[1..];
    for _ in 0..data[0] {
        let length = usize::from(rest[0]);
        names.push(String::from_utf8(rest[1..1 + length].to_vec()).expect("utf-8"));
        rest = &rest[1 + length..];
    }
    names
}

fn get(record: &[(u8, Vec<u8>)], id: u8) -> Option<&[u8]> {
    record
        .iter()
        .find(|(field, _)| *field == id)
        .map(|(_, data)| data.as_slice())
}

const OK: u8 = 0;

#[test]
fn login_gives_a_token_that_authenticates_new_connections() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut first = Connection::new(&security);
    let (token, ttl) = first.login("admin", "admin").expect("login");
    assert_eq!(ttl, 86_400);
    assert!(!token.is_empty() && token.len() < 8192);
    let mut second = Connection::new(&security);
    assert_eq!(second.authenticate("admin", &token), OK);
    assert!(second.session.is_some());
    // A damaged token, another user's name, no token.
    let mut bad = token.clone();
    *bad.last_mut().expect("byte") ^= 1;
    assert_eq!(
        Connection::new(&security).authenticate("admin", &bad),
        ResultCode::InvalidCredential.as_u8()
    );
    assert_eq!(
        Connection::new(&security).authenticate("root", &token),
        ResultCode::InvalidCredential.as_u8()
    );
    assert_eq!(
        Connection::new(&security).result(command::AUTHENTICATE, &[(field::USER, b"admin")]),
        ResultCode::InvalidCredential.as_u8()
    );
    // Wrong password, unknown user, LOGIN without fields (PKI, no TLS).
    assert_eq!(
        Connection::new(&security).login("admin", "nimda"),
        Err(ResultCode::InvalidPassword.as_u8())
    );
    assert_eq!(
        Connection::new(&security).login("nobody", "admin"),
        Err(ResultCode::InvalidUser.as_u8())
    );
    assert_eq!(
        Connection::new(&security).result(command::LOGIN, &[]),
        ResultCode::InvalidCredential.as_u8()
    );
    // Sessions expire: 66, and a fresh login works.
    time.advance_seconds(86_400);
    assert_eq!(
        Connection::new(&security).authenticate("admin", &token),
        ResultCode::ExpiredSession.as_u8()
    );
    assert!(Connection::new(&security).login("admin", "admin").is_ok());
}

#[test]
fn session_ttl_follows_the_configuration() {
    let time = Time::new();
    let security = node(
        SecurityConfig {
            session_ttl_seconds: 120,
            ..SecurityConfig::default()
        },
        &time,
    );
    let (token, ttl) = Connection::new(&security)
        .login("admin", "admin")
        .expect("login");
    assert_eq!(ttl, 120);
    time.advance_seconds(119);
    assert_eq!(Connection::new(&security).authenticate("admin", &token), OK);
    time.advance_seconds(1);
    assert_eq!(
        Connection::new(&security).authenticate("admin", &token),
        ResultCode::ExpiredSession.as_u8()
    );
}

#[test]
fn nothing_without_authentication() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut anonymous = Connection::new(&security);
    assert_eq!(
        anonymous.result(command::DROP_USER, &[(field::USER, b"admin")]),
        ResultCode::NotAuthenticated.as_u8()
    );
    assert_eq!(
        anonymous.query(command::QUERY_USERS, &[]).1,
        ResultCode::NotAuthenticated.as_u8()
    );
    assert_eq!(
        anonymous.check(Operation::Read, "test", ""),
        Err(ResultCode::NotAuthenticated)
    );
    assert_eq!(
        anonymous.info("namespaces"),
        Err("ERROR:80:not authenticated".to_owned())
    );
    assert_eq!(
        security.counters.not_authenticated.load(Relaxed),
        4,
        "each refusal counted"
    );
}

#[test]
fn the_default_admin_only_administers_users() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let admin = admin(&security);
    assert_eq!(
        admin.check(Operation::Read, "test", ""),
        Err(ResultCode::RoleViolation)
    );
    assert_eq!(
        admin.info("truncate:namespace=test;set=demo"),
        Err("ERROR:81:role violation - requires permission 'truncate'".to_owned())
    );
    assert_eq!(admin.info("namespaces"), Ok(()));
    assert_eq!(security.counters.role_violations.load(Relaxed), 2);
}

#[test]
fn users_are_created_queried_changed_and_dropped() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut admin = admin(&security);
    assert_eq!(
        admin.create_user("bob", "pw", &["read-write", "sys-admin", "read"]),
        OK
    );
    assert_eq!(
        admin.create_user("bob", "pw", &["read"]),
        ResultCode::UserAlreadyExists.as_u8()
    );
    assert_eq!(
        admin.create_user("carol", "pw", &["no-such-role"]),
        ResultCode::InvalidRole.as_u8()
    );
    assert_eq!(admin.create_user("!#Q#AEQ@#$%&^*((^&*~~~````", "", &[]), OK);
    // One user: roles sorted.
    let (records, end) = admin.query(command::QUERY_USERS, &[(field::USER, b"bob")]);
    assert_eq!(end, ResultCode::QueryEnd.as_u8());
    assert_eq!(records.len(), 1);
    assert_eq!(
        names(get(&records[0], field::ROLES).expect("roles")),
        vec!["read", "read-write", "sys-admin"]
    );
    assert_eq!(
        get(&records[0], field::CONNECTIONS),
        Some(&[0, 0, 0, 0][..])
    );
    // All users, including the one without roles.
    let (records, _) = admin.query(command::QUERY_USERS, &[]);
    let users: Vec<&[u8]> = records
        .iter()
        .map(|r| get(r, field::USER).expect("user"))
        .collect();
    assert_eq!(
        users,
        vec![&b"!#Q#AEQ@#$%&^*((^&*~~~````"[..], b"admin", b"bob"]
    );
    // Unknown user: a one-record error stream.
    let (records, end) = admin.query(command::QUERY_USERS, &[(field::USER, b"nobody")]);
    assert!(records.is_empty());
    assert_eq!(end, ResultCode::InvalidUser.as_u8());
    // Grant and revoke.
    assert_eq!(
        admin.result(
            command::REVOKE_ROLES,
            &[
                (field::USER, b"bob"),
                (field::ROLES, &encode_names(&["sys-admin"]))
            ]
        ),
        OK
    );
    assert_eq!(
        admin.result(
            command::GRANT_ROLES,
            &[
                (field::USER, b"bob"),
                (field::ROLES, &encode_names(&["truncate"]))
            ]
        ),
        OK
    );
    let (records, _) = admin.query(command::QUERY_USERS, &[(field::USER, b"bob")]);
    assert_eq!(
        names(get(&records[0], field::ROLES).expect("roles")),
        vec!["read", "read-write", "truncate"]
    );
    // Bob logs in, reads, and may not administer.
    let mut bob = Connection::new(&security);
    bob.login("bob", "pw").expect("bob");
    assert_eq!(bob.check(Operation::Read, "test", "demo"), Ok(()));
    assert_eq!(
        bob.create_user("mallory", "pw", &["user-admin"]),
        ResultCode::RoleViolation.as_u8()
    );
    assert_eq!(
        bob.query(command::QUERY_USERS, &[]).1,
        ResultCode::RoleViolation.as_u8()
    );
    // Bob may see himself.
    assert_eq!(
        bob.query(command::QUERY_USERS, &[(field::USER, b"bob")]).1,
        ResultCode::QueryEnd.as_u8()
    );
    let (records, _) = admin.query(command::QUERY_USERS, &[(field::USER, b"bob")]);
    assert_eq!(
        get(&records[0], field::CONNECTIONS),
        Some(&[0, 0, 0, 1][..])
    );
    // Dropped: his open connection loses access at its next request.
    assert_eq!(
        admin.result(command::DROP_USER, &[(field::USER, b"bob")]),
        OK
    );
    assert_eq!(
        bob.check(Operation::Read, "test", "demo"),
        Err(ResultCode::NotAuthenticated)
    );
    assert_eq!(
        admin.result(command::DROP_USER, &[(field::USER, b"bob")]),
        ResultCode::InvalidUser.as_u8()
    );
    assert_eq!(
        Connection::new(&security).login("bob", "pw"),
        Err(ResultCode::InvalidUser.as_u8())
    );
}

#[test]
fn passwords_change_and_reset() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut admin = admin(&security);
    assert_eq!(admin.create_user("dave", "old", &["read"]), OK);
    let mut dave = Connection::new(&security);
    let (token, _) = dave.login("dave", "old").expect("login");
    let (old, new) = (client_hash("old"), client_hash("new"));
    // Own change: the old password must match.
    assert_eq!(
        dave.result(
            command::CHANGE_PASSWORD,
            &[
                (field::USER, b"dave"),
                (field::OLD_PASSWORD, client_hash("wrong").as_bytes()),
                (field::PASSWORD, new.as_bytes()),
            ]
        ),
        ResultCode::InvalidPassword.as_u8()
    );
    assert_eq!(
        dave.result(
            command::CHANGE_PASSWORD,
            &[
                (field::USER, b"dave"),
                (field::OLD_PASSWORD, old.as_bytes()),
                (field::PASSWORD, new.as_bytes()),
            ]
        ),
        OK
    );
    assert_eq!(
        Connection::new(&security).login("dave", "old"),
        Err(ResultCode::InvalidPassword.as_u8())
    );
    assert!(Connection::new(&security).login("dave", "new").is_ok());
    // The session goes on after an own change.
    assert_eq!(Connection::new(&security).authenticate("dave", &token), OK);
    // A user without user-admin cannot change another's password.
    assert_eq!(
        dave.result(
            command::CHANGE_PASSWORD,
            &[
                (field::USER, b"admin"),
                (field::OLD_PASSWORD, new.as_bytes()),
                (field::PASSWORD, new.as_bytes()),
            ]
        ),
        ResultCode::RoleViolation.as_u8()
    );
    // An administrator's reset ends the user's sessions.
    assert_eq!(
        admin.result(
            command::SET_PASSWORD,
            &[
                (field::USER, b"dave"),
                (field::PASSWORD, client_hash("reset").as_bytes())
            ]
        ),
        OK
    );
    assert_eq!(
        Connection::new(&security).authenticate("dave", &token),
        ResultCode::InvalidCredential.as_u8()
    );
    assert_eq!(
        dave.check(Operation::Read, "test", ""),
        Err(ResultCode::NotAuthenticated)
    );
    assert!(Connection::new(&security).login("dave", "reset").is_ok());
    assert_eq!(
        admin.result(
            command::SET_PASSWORD,
            &[(field::USER, b"nobody"), (field::PASSWORD, new.as_bytes())]
        ),
        ResultCode::InvalidUser.as_u8()
    );
}

#[test]
fn roles_are_created_granted_revoked_and_dropped() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut admin = admin(&security);
    assert_eq!(
        admin.create_role("reader", &[(1, "", ""), (10, "test", "demo")]),
        OK
    );
    assert_eq!(
        admin.create_role("reader", &[(10, "", "")]),
        ResultCode::RoleAlreadyExists.as_u8()
    );
    assert_eq!(
        admin.create_role("read", &[(10, "", "")]),
        ResultCode::RoleAlreadyExists.as_u8()
    );
    assert_eq!(
        admin.create_role("masked", &[(16, "test", "")]),
        ResultCode::InvalidPrivilege.as_u8()
    );
    assert_eq!(
        admin.create_role("setonly", &[(10, "", "demo")]),
        ResultCode::InvalidPrivilege.as_u8()
    );
    // The role as QUERY_ROLES shows it: no WHITELIST field, zero quotas.
    let (records, end) = admin.query(command::QUERY_ROLES, &[(field::ROLE, b"reader")]);
    assert_eq!(end, ResultCode::QueryEnd.as_u8());
    assert_eq!(get(&records[0], field::WHITELIST), None);
    assert_eq!(
        get(&records[0], field::PRIVILEGES),
        Some(&[2, 1, 10, 4, b't', b'e', b's', b't', 4, b'd', b'e', b'm', b'o'][..])
    );
    assert_eq!(get(&records[0], field::READ_QUOTA), Some(&[0, 0, 0, 0][..]));
    // Every role: the ten predefined ones and ours, sorted.
    let (records, _) = admin.query(command::QUERY_ROLES, &[]);
    let roles: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8(get(r, field::ROLE).expect("role").to_vec()).expect("utf-8"))
        .collect();
    assert_eq!(roles.len(), 11);
    assert!(roles.windows(2).all(|pair| pair[0] < pair[1]));
    let read = records
        .iter()
        .find(|r| get(r, field::ROLE) == Some(b"read"))
        .expect("read");
    assert_eq!(get(read, field::PRIVILEGES), Some(&[1, 10, 0, 0][..]));
    // Grant a privilege, revoke one it has and one it lacks.
    let grant = encode_privileges(&[WirePrivilege {
        code: 13,
        namespace: "test",
        set: "",
    }]);
    assert_eq!(
        admin.result(
            command::GRANT_PRIVILEGES,
            &[(field::ROLE, b"reader"), (field::PRIVILEGES, &grant)]
        ),
        OK
    );
    let revoke = encode_privileges(&[
        WirePrivilege {
            code: 1,
            namespace: "",
            set: "",
        },
        WirePrivilege {
            code: 12,
            namespace: "",
            set: "",
        },
    ]);
    assert_eq!(
        admin.result(
            command::REVOKE_PRIVILEGES,
            &[(field::ROLE, b"reader"), (field::PRIVILEGES, &revoke)]
        ),
        OK
    );
    let (records, _) = admin.query(command::QUERY_ROLES, &[(field::ROLE, b"reader")]);
    let expected = encode_privileges(&[
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
    assert_eq!(
        get(&records[0], field::PRIVILEGES),
        Some(expected.as_slice())
    );
    assert_eq!(
        admin.result(
            command::GRANT_PRIVILEGES,
            &[(field::ROLE, b"read"), (field::PRIVILEGES, &grant)]
        ),
        ResultCode::InvalidRole.as_u8()
    );
    assert_eq!(
        admin.result(
            command::GRANT_PRIVILEGES,
            &[(field::ROLE, b"nope"), (field::PRIVILEGES, &grant)]
        ),
        ResultCode::InvalidRole.as_u8()
    );
    // A user holds it; dropping the role takes it from the user.
    assert_eq!(admin.create_user("erin", "pw", &["reader"]), OK);
    let mut erin = Connection::new(&security);
    erin.login("erin", "pw").expect("login");
    assert_eq!(erin.check(Operation::Write, "test", "x"), Ok(()));
    assert_eq!(
        admin.result(command::DROP_ROLE, &[(field::ROLE, b"reader")]),
        OK
    );
    assert_eq!(
        erin.check(Operation::Write, "test", "x"),
        Err(ResultCode::RoleViolation)
    );
    let (records, _) = admin.query(command::QUERY_USERS, &[(field::USER, b"erin")]);
    assert!(names(get(&records[0], field::ROLES).expect("roles")).is_empty());
    assert_eq!(
        admin.result(command::DROP_ROLE, &[(field::ROLE, b"reader")]),
        ResultCode::InvalidRole.as_u8()
    );
    assert_eq!(
        admin.result(command::DROP_ROLE, &[(field::ROLE, b"read")]),
        ResultCode::InvalidRole.as_u8()
    );
    // Recreated under the same name, it does not come back to erin.
    assert_eq!(admin.create_role("reader", &[(13, "", "")]), OK);
    assert_eq!(
        erin.check(Operation::Write, "test", "x"),
        Err(ResultCode::RoleViolation)
    );
}

#[test]
fn allowlists_refuse_other_addresses() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut admin = admin(&security);
    assert_eq!(admin.create_role("local", &[(10, "", "")]), OK);
    assert_eq!(
        admin.result(
            command::SET_WHITELIST,
            &[(field::ROLE, b"local"), (field::WHITELIST, b"bad_IP")]
        ),
        ResultCode::InvalidWhitelist.as_u8()
    );
    assert_eq!(
        admin.result(
            command::SET_WHITELIST,
            &[
                (field::ROLE, b"local"),
                (field::WHITELIST, b"10.0.2.0/24,127.0.0.1,127.0.0.2")
            ]
        ),
        OK
    );
    let (records, _) = admin.query(command::QUERY_ROLES, &[(field::ROLE, b"local")]);
    assert_eq!(
        get(&records[0], field::WHITELIST),
        Some(&b"10.0.2.0/24,127.0.0.1,127.0.0.2"[..])
    );
    assert_eq!(admin.create_user("frank", "pw", &["local"]), OK);
    let (token, _) = Connection::from(&security, "127.0.0.1:5000")
        .login("frank", "pw")
        .expect("allowed");
    assert!(Connection::from(&security, "10.0.2.77:5000")
        .login("frank", "pw")
        .is_ok());
    assert_eq!(
        Connection::from(&security, "10.0.3.1:5000").login("frank", "pw"),
        Err(ResultCode::NotWhitelisted.as_u8())
    );
    assert_eq!(
        Connection::from(&security, "10.0.3.1:5000").authenticate("frank", &token),
        ResultCode::NotWhitelisted.as_u8()
    );
    // Cleared: anyone.
    assert_eq!(
        admin.result(command::SET_WHITELIST, &[(field::ROLE, b"local")]),
        OK
    );
    assert!(Connection::from(&security, "10.0.3.1:5000")
        .login("frank", "pw")
        .is_ok());
    assert!(security.counters.not_allowlisted.load(Relaxed) >= 2);
}

#[test]
fn quotas_need_enable_quotas_and_limit_each_second() {
    let time = Time::new();
    let off = node(SecurityConfig::default(), &time);
    let mut admin_off = admin(&off);
    assert_eq!(admin_off.create_role("q", &[(10, "", "")]), OK);
    assert_eq!(
        admin_off.result(
            command::SET_QUOTAS,
            &[
                (field::ROLE, b"q"),
                (field::READ_QUOTA, &5u32.to_be_bytes()),
                (field::WRITE_QUOTA, &0u32.to_be_bytes())
            ]
        ),
        ResultCode::QuotasNotEnabled.as_u8()
    );

    let security = node(
        SecurityConfig {
            enable_quotas: true,
            ..SecurityConfig::default()
        },
        &time,
    );
    let mut admin = admin(&security);
    assert_eq!(admin.create_role("q", &[(11, "", "")]), OK);
    let set_quotas = |admin: &mut Connection<'_>, read: u32, write: u32| {
        admin.result(
            command::SET_QUOTAS,
            &[
                (field::ROLE, b"q"),
                (field::READ_QUOTA, &read.to_be_bytes()),
                (field::WRITE_QUOTA, &write.to_be_bytes()),
            ],
        )
    };
    assert_eq!(set_quotas(&mut admin, 5, 4500), OK);
    // 0xFFFFFFFF leaves a quota as it is.
    assert_eq!(set_quotas(&mut admin, 5, u32::MAX), OK);
    let (records, _) = admin.query(command::QUERY_ROLES, &[(field::ROLE, b"q")]);
    assert_eq!(
        get(&records[0], field::READ_QUOTA),
        Some(&5u32.to_be_bytes()[..])
    );
    assert_eq!(
        get(&records[0], field::WRITE_QUOTA),
        Some(&4500u32.to_be_bytes()[..])
    );
    assert_eq!(admin.create_user("gina", "pw", &["q"]), OK);
    let mut gina = Connection::new(&security);
    gina.login("gina", "pw").expect("login");
    for _ in 0..5 {
        assert_eq!(gina.check(Operation::Read, "test", ""), Ok(()));
    }
    assert_eq!(
        gina.check(Operation::Read, "test", ""),
        Err(ResultCode::QuotaExceeded)
    );
    assert_eq!(gina.check(Operation::Write, "test", ""), Ok(()));
    time.advance_seconds(1);
    assert_eq!(gina.check(Operation::Read, "test", ""), Ok(()));
    // QUERY_USERS reports the quota and the last second's rate.
    let (records, _) = admin.query(command::QUERY_USERS, &[(field::USER, b"gina")]);
    let read_info = get(&records[0], field::READ_INFO).expect("read info");
    assert_eq!(read_info[0], 4);
    assert_eq!(&read_info[1..5], &5u32.to_be_bytes());
    assert_eq!(&read_info[5..9], &5u32.to_be_bytes());
    // 0 removes it.
    assert_eq!(set_quotas(&mut admin, 0, 0), OK);
    for _ in 0..50 {
        assert_eq!(gina.check(Operation::Read, "test", ""), Ok(()));
    }
    assert_eq!(security.counters.quota_exceeded.load(Relaxed), 1);
}

#[test]
fn wrong_passwords_hold_a_user_off_at_an_address() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    for _ in 0..5 {
        assert_eq!(
            Connection::from(&security, "10.1.1.1:1").login("admin", "guess"),
            Err(ResultCode::InvalidPassword.as_u8())
        );
    }
    // Held off: even the right password is refused, from that address only,
    // and for that user only.
    assert_eq!(
        Connection::from(&security, "10.1.1.1:2").login("admin", "admin"),
        Err(ResultCode::InvalidPassword.as_u8())
    );
    assert!(Connection::from(&security, "10.1.1.2:1")
        .login("admin", "admin")
        .is_ok());
    let mut admin = admin(&security);
    assert_eq!(admin.create_user("lee", "pw", &[]), OK);
    assert!(Connection::from(&security, "10.1.1.1:4")
        .login("lee", "pw")
        .is_ok());
    assert_eq!(security.counters.logins_held_off.load(Relaxed), 1);
    time.advance_seconds(bolide_security::limits::HOLD_OFF_SECONDS);
    assert!(Connection::from(&security, "10.1.1.1:3")
        .login("admin", "admin")
        .is_ok());
}

/// Every privilege against every kind of request it might guard. The
/// expected column is written out by hand, not derived from the code.
#[test]
fn every_privilege_against_every_kind_of_request() {
    // Requests: data operations on test.demo, then info commands, then an
    // admin command.
    const REQUESTS: [&str; 17] = [
        "read",
        "write",
        "read-write",
        "delete",
        "udf-apply",
        "query",
        "query-udf",
        "background-ops",
        "background-udf",
        "truncate",
        "sindex-create",
        "udf-put",
        "set-config",
        "recluster",
        "query-abort",
        "log-set",
        "create-user",
    ];
    #[rustfmt::skip]
    const TABLE: [(&str, [u8; 17]); 10] = [
        //                rd wr rw dl ua qy qu bo bu tr si up sc rc qa ls cu
        ("user-admin",     [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        ("sys-admin",      [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0]),
        ("data-admin",     [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0]),
        ("udf-admin",      [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]),
        ("sindex-admin",   [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
        ("read",           [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        ("read-write",     [1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        ("read-write-udf", [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]),
        ("write",          [0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        ("truncate",       [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]),
    ];
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut admin = admin(&security);
    for (privilege, expected) in TABLE {
        let user = format!("u-{privilege}");
        assert_eq!(admin.create_user(&user, "pw", &[privilege]), OK);
        let mut client = Connection::new(&security);
        client.login(&user, "pw").expect("login");
        for (index, request) in REQUESTS.iter().enumerate() {
            let outcome: Result<(), u8> = match index {
                0..=8 => client
                    .check(Operation::ALL[index], "test", "demo")
                    .map_err(|code| code.as_u8()),
                9 => client
                    .info("truncate:namespace=test;set=demo")
                    .map_err(|_| 81),
                10 => client
                    .info("sindex-create:ns=test;set=demo;indexname=i;indexdata=b,numeric")
                    .map_err(|_| 81),
                11 => client
                    .info("udf-put:filename=m.lua;content-len=4")
                    .map_err(|_| 81),
                12 => client
                    .info("set-config:context=service;x=1")
                    .map_err(|_| 81),
                13 => client.info("recluster:").map_err(|_| 81),
                14 => client.info("query-abort:trid=1").map_err(|_| 81),
                15 => client.info("log-set:id=0;any=info").map_err(|_| 81),
                _ => {
                    let code = client.create_user(&format!("made-by-{privilege}"), "pw", &[]);
                    if code == OK {
                        Ok(())
                    } else {
                        Err(code)
                    }
                }
            };
            let want: Result<(), u8> = if expected[index] == 1 {
                Ok(())
            } else {
                Err(ResultCode::RoleViolation.as_u8())
            };
            assert_eq!(outcome, want, "{privilege} → {request}");
        }
    }
}

#[test]
fn scoped_privileges_cover_their_namespace_and_set_only() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut admin = admin(&security);
    assert_eq!(
        admin.create_role(
            "scoped",
            &[(10, "test", ""), (13, "test", "demo"), (14, "bar", "")]
        ),
        OK
    );
    assert_eq!(admin.create_user("hal", "pw", &["scoped"]), OK);
    let mut hal = Connection::new(&security);
    hal.login("hal", "pw").expect("login");
    assert_eq!(hal.check(Operation::Read, "test", ""), Ok(()));
    assert_eq!(hal.check(Operation::Read, "test", "any"), Ok(()));
    assert_eq!(
        hal.check(Operation::Read, "bar", "any"),
        Err(ResultCode::RoleViolation)
    );
    assert_eq!(hal.check(Operation::Write, "test", "demo"), Ok(()));
    assert_eq!(
        hal.check(Operation::Write, "test", "other"),
        Err(ResultCode::RoleViolation)
    );
    assert_eq!(
        hal.check(Operation::Write, "test", ""),
        Err(ResultCode::RoleViolation)
    );
    // Reads and writes together: read from the namespace, write from the set.
    assert_eq!(hal.check(Operation::ReadWrite, "test", "demo"), Ok(()));
    assert_eq!(
        hal.check(Operation::ReadWrite, "test", "other"),
        Err(ResultCode::RoleViolation)
    );
    assert_eq!(hal.info("truncate-namespace:namespace=bar"), Ok(()));
    assert_eq!(hal.info("truncate:namespace=bar;set=s"), Ok(()));
    assert!(hal.info("truncate:namespace=test;set=demo").is_err());
    let refusal = security
        .check(
            hal.session.as_deref(),
            Needs::of(Permission::Write),
            "test",
            "x",
            "write",
        )
        .expect_err("refused");
    assert_eq!(refusal.permission, Some(Permission::Write));
}

#[test]
fn the_catalog_survives_a_restart_and_a_damaged_file_stops_the_node() {
    let dir = std::env::temp_dir().join(format!("bolide-security-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let time = Time::new();
    {
        let security = Security::with_clock(SecurityConfig::default(), Some(&dir), time.clock())
            .expect("open");
        let mut admin = admin(&security);
        assert_eq!(admin.create_user("ivy", "pw", &["read"]), OK);
        assert_eq!(
            admin.result(command::DROP_USER, &[(field::USER, b"admin")]),
            OK
        );
    }
    let file = dir.join("security.json");
    let text = std::fs::read_to_string(&file).expect("file");
    assert!(
        !text.contains(&client_hash("pw")),
        "the client hash is not stored"
    );
    {
        let security = Security::with_clock(SecurityConfig::default(), Some(&dir), time.clock())
            .expect("reopen");
        assert!(Connection::new(&security).login("ivy", "pw").is_ok());
        // The dropped admin stays dropped: no fresh admin/admin.
        assert_eq!(
            Connection::new(&security).login("admin", "admin"),
            Err(ResultCode::InvalidUser.as_u8())
        );
    }
    std::fs::write(&file, text.replace("ivy", "ivx")).expect("damage");
    let error = Security::with_clock(SecurityConfig::default(), Some(&dir), time.clock())
        .expect_err("damaged");
    assert!(error.contains("checksum"), "{error}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_default_password_file_sets_the_first_admin_password() {
    let dir = std::env::temp_dir().join(format!("bolide-security-pwfile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let password_file = dir.join("admin-password");
    std::fs::write(&password_file, "s3cret\n").expect("write");
    let time = Time::new();
    let security = node(
        SecurityConfig {
            default_password_file: Some(password_file),
            ..SecurityConfig::default()
        },
        &time,
    );
    assert_eq!(
        Connection::new(&security).login("admin", "admin"),
        Err(ResultCode::InvalidPassword.as_u8())
    );
    assert!(Connection::new(&security).login("admin", "s3cret").is_ok());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn nodes_converge_on_each_others_entries() {
    let time = Time::new();
    let a = node(SecurityConfig::default(), &time);
    time.advance_seconds(1);
    let b = node(SecurityConfig::default(), &time);
    // Each node tells the other everything it holds (as at a cluster
    // change); then a change on one travels to the other.
    for entry in a.entries() {
        b.apply(entry).expect("valid");
    }
    for entry in b.entries() {
        a.apply(entry).expect("valid");
    }
    let mut admin_a = admin(&a);
    assert_eq!(admin_a.create_user("jo", "pw", &["read"]), OK);
    assert_eq!(admin_a.shared.len(), 1);
    for entry in admin_a.shared.drain(..) {
        assert_eq!(b.apply(entry.clone()), Ok(true));
        assert_eq!(b.apply(entry), Ok(false), "applied once");
    }
    // Jo logs in on a; the token also opens a session on b.
    let (token, _) = Connection::new(&a).login("jo", "pw").expect("login on a");
    let mut on_b = Connection::new(&b);
    assert_eq!(on_b.authenticate("jo", &token), OK);
    assert_eq!(on_b.check(Operation::Read, "test", ""), Ok(()));
    // A drop on b reaches a's open session.
    let mut jo_a = Connection::new(&a);
    jo_a.login("jo", "pw").expect("login");
    let mut admin_b = admin(&b);
    assert_eq!(
        admin_b.result(command::DROP_USER, &[(field::USER, b"jo")]),
        OK
    );
    for entry in admin_b.shared.drain(..) {
        a.apply(entry).expect("valid");
    }
    assert_eq!(
        jo_a.check(Operation::Read, "test", ""),
        Err(ResultCode::NotAuthenticated)
    );
}

#[test]
fn malformed_admin_messages_get_a_code_never_a_panic() {
    let time = Time::new();
    let security = node(SecurityConfig::default(), &time);
    let mut session = None;
    let address: SocketAddr = "127.0.0.1:1".parse().expect("address");
    for body in [
        &[][..],
        &[0; 15][..],
        &[0, 0, 20, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
        &[0, 0, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
        &[
            0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0,
        ][..],
    ] {
        let mut out = Vec::new();
        security.admin(&mut session, address, body, &mut out);
        assert_eq!(out.len(), PROTO_HEADER_BYTES + ADMIN_HEADER_BYTES);
        assert_ne!(out[9], 0, "{body:?}");
    }
    assert!(session.is_none());
}

#[test]
fn the_transaction_hook_asks_one_permission_at_a_time() {
    let time = Time::new();
    let security = node(
        SecurityConfig {
            enable_quotas: true,
            ..SecurityConfig::default()
        },
        &time,
    );
    let mut admin = admin(&security);
    assert_eq!(admin.create_role("r", &[(10, "test", "")]), OK);
    assert_eq!(
        admin.result(
            command::SET_QUOTAS,
            &[
                (field::ROLE, b"r"),
                (field::READ_QUOTA, &3u32.to_be_bytes()),
                (field::WRITE_QUOTA, &0u32.to_be_bytes())
            ]
        ),
        OK
    );
    assert_eq!(admin.create_user("kim", "pw", &["r", "sindex-admin"]), OK);
    let mut kim = Connection::new(&security);
    kim.login("kim", "pw").expect("login");
    let ask = |permission: Permission, namespace: &str| {
        security
            .check_permission(kim.session.as_deref(), permission, namespace, "s")
            .map_err(|refusal| refusal.result)
    };
    assert_eq!(ask(Permission::Read, "test"), Ok(()));
    assert_eq!(ask(Permission::Query, "test"), Ok(()));
    assert_eq!(
        ask(Permission::Write, "test"),
        Err(ResultCode::RoleViolation)
    );
    assert_eq!(ask(Permission::Read, "bar"), Err(ResultCode::RoleViolation));
    // Admin permissions count against no quota.
    for _ in 0..10 {
        assert_eq!(ask(Permission::SindexAdmin, ""), Ok(()));
    }
    // Two reads above were counted; one more fits, then the quota refuses.
    assert_eq!(ask(Permission::Read, "test"), Ok(()));
    assert_eq!(
        ask(Permission::Read, "test"),
        Err(ResultCode::QuotaExceeded)
    );
    assert_eq!(
        security
            .check_permission(None, Permission::Read, "test", "")
            .map_err(|refusal| refusal.result),
        Err(ResultCode::NotAuthenticated)
    );
}
