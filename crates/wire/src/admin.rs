//! The admin protocol (proto type 2): logins, session tokens, users, roles
//! and privileges.
//!
//! ```text
//! body (after the 8-byte proto header, version 2 or 0, type 2):
//!  byte 0   1        2         3          4..16
//! +--------+--------+---------+----------+-----------+-------------------------------+
//! | scheme | result | command | n_fields | 12 zeroes | fields...                     |
//! +--------+--------+---------+----------+-----------+-------------------------------+
//! field: u32 size (= 1 + data bytes) | u8 id | data
//! ```
//!
//! Requests carry a command and fields; replies carry a result code. Every
//! reply is exactly 24 bytes (proto header and this header) except a
//! successful LOGIN (SESSION_TOKEN and SESSION_TTL fields follow) and the
//! QUERY_USERS / QUERY_ROLES streams: messages holding runs of records (a
//! record is this header and its fields), ended by a record whose result is
//! 50 (QUERY_END).
//!
//! Decoding walks the fields to the end of the body and ignores `n_fields`:
//! the Go client v7 counts a role's privileges and allowlist only when
//! there is more than one of them but always writes them. Every length is
//! checked against the body, names against their limits; nothing here
//! panics or allocates more than the body's size.

use crate::frame::{MessageType, ProtoHeader, PROTO_HEADER_BYTES};
use bolide_types::ResultCode;

/// The header after the proto header, in requests, replies and records.
pub const ADMIN_HEADER_BYTES: usize = 16;
/// A field's size (4 bytes) and id (1 byte).
pub const FIELD_HEADER_BYTES: usize = 5;
/// The longest user or role name (64 with the terminator, as C clients).
pub const NAME_BYTES_MAX: usize = 63;
/// The longest password hash or credential accepted (clients send 60).
pub const PASSWORD_BYTES_MAX: usize = 255;
/// The longest session token accepted.
pub const TOKEN_BYTES_MAX: usize = 1024;
/// The longest namespace name in a privilege.
pub const NAMESPACE_BYTES_MAX: usize = bolide_types::NAMESPACE_NAME_BYTES_MAX;
/// The longest set name in a privilege.
pub const SET_BYTES_MAX: usize = bolide_types::SET_NAME_BYTES_MAX;
/// Query reply records are grouped into messages of about this size.
pub const STREAM_MESSAGE_BYTES: usize = 16 << 10;

/// Command ids.
pub mod command {
    pub const AUTHENTICATE: u8 = 0;
    pub const CREATE_USER: u8 = 1;
    pub const DROP_USER: u8 = 2;
    pub const SET_PASSWORD: u8 = 3;
    pub const CHANGE_PASSWORD: u8 = 4;
    pub const GRANT_ROLES: u8 = 5;
    pub const REVOKE_ROLES: u8 = 6;
    pub const QUERY_USERS: u8 = 9;
    pub const CREATE_ROLE: u8 = 10;
    pub const DROP_ROLE: u8 = 11;
    pub const GRANT_PRIVILEGES: u8 = 12;
    pub const REVOKE_PRIVILEGES: u8 = 13;
    pub const SET_WHITELIST: u8 = 14;
    pub const SET_QUOTAS: u8 = 15;
    pub const QUERY_ROLES: u8 = 16;
    pub const LOGIN: u8 = 20;
}

/// Field ids.
pub mod field {
    pub const USER: u8 = 0;
    pub const PASSWORD: u8 = 1;
    pub const OLD_PASSWORD: u8 = 2;
    pub const CREDENTIAL: u8 = 3;
    pub const CLEAR_PASSWORD: u8 = 4;
    pub const SESSION_TOKEN: u8 = 5;
    pub const SESSION_TTL: u8 = 6;
    pub const AUTH_MODE: u8 = 7;
    pub const ROLES: u8 = 10;
    pub const ROLE: u8 = 11;
    pub const PRIVILEGES: u8 = 12;
    pub const WHITELIST: u8 = 13;
    pub const READ_QUOTA: u8 = 14;
    pub const WRITE_QUOTA: u8 = 15;
    pub const READ_INFO: u8 = 16;
    pub const WRITE_INFO: u8 = 17;
    pub const CONNECTIONS: u8 = 18;
    /// One past the highest field id the protocol defines.
    pub const COUNT: usize = 19;
}

/// A request refused before it reaches the security model: the result code
/// to answer and why (for the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdminReject {
    pub result: ResultCode,
    pub reason: &'static str,
}

impl AdminReject {
    const fn new(result: ResultCode, reason: &'static str) -> AdminReject {
        AdminReject { result, reason }
    }
}

/// The fields of one admin message (request or reply record), borrowed
/// from its bytes. Unknown field ids are skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminMessage<'b> {
    pub scheme: u8,
    pub result: u8,
    pub command: u8,
    /// As sent; not trusted (see the module comment).
    pub n_fields: u8,
    fields: [Option<&'b [u8]>; field::COUNT],
}

impl<'b> AdminMessage<'b> {
    /// Decodes a whole request body (what follows the proto header).
    pub fn decode(body: &'b [u8]) -> Result<AdminMessage<'b>, AdminReject> {
        let (message, used) = AdminMessage::decode_record(body, None)?;
        debug_assert_eq!(used, body.len());
        Ok(message)
    }

    /// Decodes one record from the start of `bytes`. With `Some(n)`, reads
    /// exactly `n` fields (records in a reply stream are delimited by their
    /// field count); with None, reads fields to the end of `bytes`.
    /// Returns the record and the bytes it used.
    pub fn decode_record(
        bytes: &'b [u8],
        fields_exact: Option<usize>,
    ) -> Result<(AdminMessage<'b>, usize), AdminReject> {
        let Some((header, mut rest)) = bytes.split_first_chunk::<ADMIN_HEADER_BYTES>() else {
            return Err(AdminReject::new(
                ResultCode::InvalidField,
                "admin message shorter than its 16-byte header",
            ));
        };
        let [scheme, result, command, n_fields, ..] = *header;
        let mut message = AdminMessage {
            scheme,
            result,
            command,
            n_fields,
            fields: [None; field::COUNT],
        };
        let mut read = 0usize;
        while fields_exact.map_or(!rest.is_empty(), |n| read < n) {
            let Some((size, after)) = rest.split_first_chunk::<4>() else {
                return Err(AdminReject::new(
                    ResultCode::InvalidField,
                    "field header runs past the end of the message",
                ));
            };
            let size = u32::from_be_bytes(*size) as usize;
            let Some((&id, after)) = after.split_first() else {
                return Err(AdminReject::new(
                    ResultCode::InvalidField,
                    "field header runs past the end of the message",
                ));
            };
            if size == 0 {
                return Err(AdminReject::new(
                    ResultCode::InvalidField,
                    "field of size 0 (it must hold its id)",
                ));
            }
            let Some((data, after)) = after.split_at_checked(size - 1) else {
                return Err(AdminReject::new(
                    ResultCode::InvalidField,
                    "field runs past the end of the message",
                ));
            };
            if let Some(slot) = message.fields.get_mut(usize::from(id)) {
                if slot.is_some() {
                    return Err(AdminReject::new(
                        ResultCode::InvalidField,
                        "the same field twice",
                    ));
                }
                *slot = Some(data);
            }
            rest = after;
            read += 1;
        }
        Ok((message, bytes.len() - rest.len()))
    }

    /// The data of field `id`, if present.
    pub fn field(&self, id: u8) -> Option<&'b [u8]> {
        self.fields.get(usize::from(id)).copied().flatten()
    }

    /// A user name field: present, UTF-8, 1 to 63 bytes, no NUL.
    fn user(&self) -> Result<&'b str, AdminReject> {
        self.field(field::USER)
            .and_then(name)
            .ok_or(AdminReject::new(
                ResultCode::InvalidUser,
                "missing or bad user name",
            ))
    }

    /// A role name field.
    fn role(&self) -> Result<&'b str, AdminReject> {
        self.field(field::ROLE)
            .and_then(name)
            .ok_or(AdminReject::new(
                ResultCode::InvalidRole,
                "missing or bad role name",
            ))
    }

    fn optional_user(&self) -> Result<Option<&'b str>, AdminReject> {
        match self.field(field::USER) {
            None => Ok(None),
            Some(_) => self.user().map(Some),
        }
    }

    fn optional_role(&self) -> Result<Option<&'b str>, AdminReject> {
        match self.field(field::ROLE) {
            None => Ok(None),
            Some(_) => self.role().map(Some),
        }
    }

    fn secret(&self, id: u8, error: ResultCode) -> Result<&'b [u8], AdminReject> {
        self.field(id)
            .filter(|data| !data.is_empty() && data.len() <= PASSWORD_BYTES_MAX)
            .ok_or(AdminReject::new(error, "missing or bad password"))
    }

    fn roles(&self) -> Result<Vec<&'b str>, AdminReject> {
        let data = self.field(field::ROLES).ok_or(AdminReject::new(
            ResultCode::InvalidRole,
            "missing roles field",
        ))?;
        decode_names(data)
    }

    fn privileges(&self) -> Result<Vec<WirePrivilege<'b>>, AdminReject> {
        let data = self.field(field::PRIVILEGES).ok_or(AdminReject::new(
            ResultCode::InvalidPrivilege,
            "missing privileges field",
        ))?;
        decode_privileges(data)
    }

    fn whitelist(&self) -> Result<Option<Vec<&'b str>>, AdminReject> {
        let Some(data) = self.field(field::WHITELIST) else {
            return Ok(None);
        };
        let text = std::str::from_utf8(data).map_err(|_| {
            AdminReject::new(ResultCode::InvalidWhitelist, "allowlist is not UTF-8")
        })?;
        Ok(Some(
            text.split(',')
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .collect(),
        ))
    }

    fn quota(&self, id: u8) -> Result<Option<u32>, AdminReject> {
        match self.field(id) {
            None => Ok(None),
            Some(data) => {
                let bytes: [u8; 4] = data.try_into().map_err(|_| {
                    AdminReject::new(ResultCode::InvalidQuota, "quota field is not 4 bytes")
                })?;
                Ok(Some(u32::from_be_bytes(bytes)))
            }
        }
    }
}

/// One privilege as it travels: a code, and for codes of 10 and above a
/// namespace and a set (empty: the wider scope).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WirePrivilege<'b> {
    pub code: u8,
    pub namespace: &'b str,
    pub set: &'b str,
}

impl WirePrivilege<'_> {
    /// Whether privileges with this code carry a namespace and a set.
    pub fn carries_scope(code: u8) -> bool {
        code >= 10
    }
}

/// A decoded admin request, its fields checked for shape (the security
/// model checks meaning: that users and roles exist, privilege codes,
/// allowlist entries, quotas).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminRequest<'b> {
    /// A new connection proves it belongs to a logged-in user. PKI sends
    /// no USER; legacy tools send a CREDENTIAL instead of a token.
    Authenticate {
        user: Option<&'b str>,
        token: Option<&'b [u8]>,
        credential: Option<&'b [u8]>,
    },
    /// User and password hash in, session token out. PKI login sends no
    /// fields; LDAP adds CLEAR_PASSWORD.
    Login {
        user: Option<&'b str>,
        credential: Option<&'b [u8]>,
        clear_password: Option<&'b [u8]>,
    },
    CreateUser {
        user: &'b str,
        password: &'b [u8],
        roles: Vec<&'b str>,
    },
    DropUser {
        user: &'b str,
    },
    SetPassword {
        user: &'b str,
        password: &'b [u8],
    },
    ChangePassword {
        user: &'b str,
        old_password: &'b [u8],
        password: &'b [u8],
    },
    GrantRoles {
        user: &'b str,
        roles: Vec<&'b str>,
    },
    RevokeRoles {
        user: &'b str,
        roles: Vec<&'b str>,
    },
    /// One user, or all (None).
    QueryUsers {
        user: Option<&'b str>,
    },
    CreateRole {
        role: &'b str,
        privileges: Vec<WirePrivilege<'b>>,
        whitelist: Option<Vec<&'b str>>,
        read_quota: Option<u32>,
        write_quota: Option<u32>,
    },
    DropRole {
        role: &'b str,
    },
    GrantPrivileges {
        role: &'b str,
        privileges: Vec<WirePrivilege<'b>>,
    },
    RevokePrivileges {
        role: &'b str,
        privileges: Vec<WirePrivilege<'b>>,
    },
    /// None (no WHITELIST field) clears the allowlist.
    SetWhitelist {
        role: &'b str,
        whitelist: Option<Vec<&'b str>>,
    },
    /// 0xFFFFFFFF leaves a quota unchanged; 0 removes it.
    SetQuotas {
        role: &'b str,
        read_quota: Option<u32>,
        write_quota: Option<u32>,
    },
    /// One role, or all (None).
    QueryRoles {
        role: Option<&'b str>,
    },
}

impl<'b> AdminRequest<'b> {
    /// Decodes a request body (what follows the proto header).
    pub fn decode(body: &'b [u8]) -> Result<AdminRequest<'b>, AdminReject> {
        let message = AdminMessage::decode(body)?;
        AdminRequest::from_message(&message)
    }

    /// The typed request of a decoded message.
    pub fn from_message(message: &AdminMessage<'b>) -> Result<AdminRequest<'b>, AdminReject> {
        use command::*;
        let m = message;
        Ok(match m.command {
            AUTHENTICATE => AdminRequest::Authenticate {
                user: m.optional_user()?,
                token: m
                    .field(field::SESSION_TOKEN)
                    .map(|token| {
                        if token.is_empty() || token.len() > TOKEN_BYTES_MAX {
                            Err(AdminReject::new(
                                ResultCode::InvalidCredential,
                                "bad session token size",
                            ))
                        } else {
                            Ok(token)
                        }
                    })
                    .transpose()?,
                credential: m
                    .field(field::CREDENTIAL)
                    .map(|_| m.secret(field::CREDENTIAL, ResultCode::InvalidCredential))
                    .transpose()?,
            },
            LOGIN => AdminRequest::Login {
                user: m.optional_user()?,
                credential: m
                    .field(field::CREDENTIAL)
                    .map(|_| m.secret(field::CREDENTIAL, ResultCode::InvalidCredential))
                    .transpose()?,
                clear_password: m
                    .field(field::CLEAR_PASSWORD)
                    .map(|_| m.secret(field::CLEAR_PASSWORD, ResultCode::InvalidPassword))
                    .transpose()?,
            },
            CREATE_USER => AdminRequest::CreateUser {
                user: m.user()?,
                password: m.secret(field::PASSWORD, ResultCode::InvalidPassword)?,
                roles: match m.field(field::ROLES) {
                    None => Vec::new(),
                    Some(_) => m.roles()?,
                },
            },
            DROP_USER => AdminRequest::DropUser { user: m.user()? },
            SET_PASSWORD => AdminRequest::SetPassword {
                user: m.user()?,
                password: m.secret(field::PASSWORD, ResultCode::InvalidPassword)?,
            },
            CHANGE_PASSWORD => AdminRequest::ChangePassword {
                user: m.user()?,
                old_password: m.secret(field::OLD_PASSWORD, ResultCode::InvalidPassword)?,
                password: m.secret(field::PASSWORD, ResultCode::InvalidPassword)?,
            },
            GRANT_ROLES => AdminRequest::GrantRoles {
                user: m.user()?,
                roles: m.roles()?,
            },
            REVOKE_ROLES => AdminRequest::RevokeRoles {
                user: m.user()?,
                roles: m.roles()?,
            },
            QUERY_USERS => AdminRequest::QueryUsers {
                user: m.optional_user()?,
            },
            CREATE_ROLE => AdminRequest::CreateRole {
                role: m.role()?,
                privileges: match m.field(field::PRIVILEGES) {
                    None => Vec::new(),
                    Some(_) => m.privileges()?,
                },
                whitelist: m.whitelist()?,
                read_quota: m.quota(field::READ_QUOTA)?,
                write_quota: m.quota(field::WRITE_QUOTA)?,
            },
            DROP_ROLE => AdminRequest::DropRole { role: m.role()? },
            GRANT_PRIVILEGES => AdminRequest::GrantPrivileges {
                role: m.role()?,
                privileges: m.privileges()?,
            },
            REVOKE_PRIVILEGES => AdminRequest::RevokePrivileges {
                role: m.role()?,
                privileges: m.privileges()?,
            },
            SET_WHITELIST => AdminRequest::SetWhitelist {
                role: m.role()?,
                whitelist: m.whitelist()?,
            },
            SET_QUOTAS => AdminRequest::SetQuotas {
                role: m.role()?,
                read_quota: m.quota(field::READ_QUOTA)?,
                write_quota: m.quota(field::WRITE_QUOTA)?,
            },
            QUERY_ROLES => AdminRequest::QueryRoles {
                role: m.optional_role()?,
            },
            _ => {
                return Err(AdminReject::new(
                    ResultCode::InvalidCommand,
                    "unknown admin command",
                ))
            }
        })
    }

    /// The command's name, for logs and the audit trail.
    pub fn name(&self) -> &'static str {
        match self {
            AdminRequest::Authenticate { .. } => "authenticate",
            AdminRequest::Login { .. } => "login",
            AdminRequest::CreateUser { .. } => "create-user",
            AdminRequest::DropUser { .. } => "drop-user",
            AdminRequest::SetPassword { .. } => "set-password",
            AdminRequest::ChangePassword { .. } => "change-password",
            AdminRequest::GrantRoles { .. } => "grant-roles",
            AdminRequest::RevokeRoles { .. } => "revoke-roles",
            AdminRequest::QueryUsers { .. } => "query-users",
            AdminRequest::CreateRole { .. } => "create-role",
            AdminRequest::DropRole { .. } => "delete-role",
            AdminRequest::GrantPrivileges { .. } => "grant-privileges",
            AdminRequest::RevokePrivileges { .. } => "revoke-privileges",
            AdminRequest::SetWhitelist { .. } => "set-whitelist",
            AdminRequest::SetQuotas { .. } => "set-quotas",
            AdminRequest::QueryRoles { .. } => "query-roles",
        }
    }
}

/// A name: UTF-8, 1 to [`NAME_BYTES_MAX`] bytes, no NUL.
fn name(data: &[u8]) -> Option<&str> {
    if data.is_empty() || data.len() > NAME_BYTES_MAX || data.contains(&0) {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// `u8 count`, then count × (`u8 length`, name), filling `data` exactly.
fn decode_names(data: &[u8]) -> Result<Vec<&str>, AdminReject> {
    const BAD: AdminReject = AdminReject::new(ResultCode::InvalidRole, "bad role list");
    let (&count, mut rest) = data.split_first().ok_or(BAD)?;
    let mut names = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (&length, after) = rest.split_first().ok_or(BAD)?;
        let (bytes, after) = after.split_at_checked(usize::from(length)).ok_or(BAD)?;
        names.push(name(bytes).ok_or(BAD)?);
        rest = after;
    }
    if !rest.is_empty() {
        return Err(AdminReject::new(
            ResultCode::InvalidField,
            "bytes after the role list",
        ));
    }
    Ok(names)
}

/// `u8 count`, then count × (`u8 code`, and for codes ≥ 10 `u8 ns length`,
/// ns, `u8 set length`, set), filling `data` exactly.
fn decode_privileges(data: &[u8]) -> Result<Vec<WirePrivilege<'_>>, AdminReject> {
    const BAD: AdminReject = AdminReject::new(ResultCode::InvalidPrivilege, "bad privilege list");
    let (&count, mut rest) = data.split_first().ok_or(BAD)?;
    let mut privileges = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (&code, after) = rest.split_first().ok_or(BAD)?;
        rest = after;
        let (mut namespace, mut set) = ("", "");
        if WirePrivilege::carries_scope(code) {
            let (ns_bytes, after) = short_string(rest).ok_or(BAD)?;
            let (set_bytes, after) = short_string(after).ok_or(BAD)?;
            namespace = std::str::from_utf8(ns_bytes).map_err(|_| BAD)?;
            set = std::str::from_utf8(set_bytes).map_err(|_| BAD)?;
            if namespace.len() > NAMESPACE_BYTES_MAX || set.len() > SET_BYTES_MAX {
                return Err(BAD);
            }
            rest = after;
        }
        privileges.push(WirePrivilege {
            code,
            namespace,
            set,
        });
    }
    if !rest.is_empty() {
        return Err(AdminReject::new(
            ResultCode::InvalidField,
            "bytes after the privilege list",
        ));
    }
    Ok(privileges)
}

/// `u8 length`, bytes.
fn short_string(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&length, rest) = data.split_first()?;
    rest.split_at_checked(usize::from(length))
}

// ---------------------------------------------------------------------------
// Encoding.

fn begin_message(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; PROTO_HEADER_BYTES]);
    start
}

fn finish_message(out: &mut [u8], start: usize) {
    let body = out.len().saturating_sub(start + PROTO_HEADER_BYTES);
    let header = ProtoHeader::encode(MessageType::Admin, body);
    if let Some(slot) = out.get_mut(start..start + PROTO_HEADER_BYTES) {
        slot.copy_from_slice(&header);
    }
}

fn header(out: &mut Vec<u8>, result: u8, command: u8, n_fields: u8) {
    let mut bytes = [0u8; ADMIN_HEADER_BYTES];
    bytes[1] = result;
    bytes[2] = command;
    bytes[3] = n_fields;
    out.extend_from_slice(&bytes);
}

/// Appends one field. Data longer than a field can say is cut (no
/// caller sends such data: names are at most 63 bytes, lists 255 items).
fn put_field(out: &mut Vec<u8>, id: u8, data: &[u8]) {
    let data = data
        .get(..data.len().min(u32::MAX as usize - 1))
        .unwrap_or(data);
    out.extend_from_slice(&(data.len() as u32 + 1).to_be_bytes());
    out.push(id);
    out.extend_from_slice(data);
}

/// Appends the 24-byte reply carrying only a result code.
pub fn append_result(out: &mut Vec<u8>, result: ResultCode) {
    let start = begin_message(out);
    header(out, result.as_u8(), 0, 0);
    finish_message(out, start);
}

/// Appends a successful LOGIN reply: the session token and its TTL.
pub fn append_login(out: &mut Vec<u8>, token: &[u8], ttl_seconds: u32) {
    let start = begin_message(out);
    header(out, 0, 0, 2);
    put_field(out, field::SESSION_TOKEN, token);
    put_field(out, field::SESSION_TTL, &ttl_seconds.to_be_bytes());
    finish_message(out, start);
}

/// Appends a request (as a client or a tool sends it): a command and its
/// fields, in order.
pub fn append_request(out: &mut Vec<u8>, command: u8, fields: &[(u8, &[u8])]) {
    let start = begin_message(out);
    header(out, 0, command, fields.len().min(255) as u8);
    for (id, data) in fields {
        put_field(out, *id, data);
    }
    finish_message(out, start);
}

/// Encodes a role list field's data: `u8 count`, (`u8 length`, name)...
/// At most 255 names of at most 255 bytes each are written.
pub fn encode_names(names: &[&str]) -> Vec<u8> {
    let names = names.get(..names.len().min(255)).unwrap_or(names);
    let mut data = vec![names.len() as u8];
    for name in names {
        let bytes = name.as_bytes();
        let bytes = bytes.get(..bytes.len().min(255)).unwrap_or(bytes);
        data.push(bytes.len() as u8);
        data.extend_from_slice(bytes);
    }
    data
}

/// Encodes a privilege list field's data (at most 255 privileges).
pub fn encode_privileges(privileges: &[WirePrivilege<'_>]) -> Vec<u8> {
    let privileges = privileges
        .get(..privileges.len().min(255))
        .unwrap_or(privileges);
    let mut data = vec![privileges.len() as u8];
    for privilege in privileges {
        data.push(privilege.code);
        if WirePrivilege::carries_scope(privilege.code) {
            for part in [privilege.namespace, privilege.set] {
                let bytes = part.as_bytes();
                let bytes = bytes.get(..bytes.len().min(255)).unwrap_or(bytes);
                data.push(bytes.len() as u8);
                data.extend_from_slice(bytes);
            }
        }
    }
    data
}

fn encode_counters(values: &[u32]) -> Vec<u8> {
    let values = values.get(..values.len().min(255)).unwrap_or(values);
    let mut data = vec![values.len() as u8];
    for value in values {
        data.extend_from_slice(&value.to_be_bytes());
    }
    data
}

/// One user in a QUERY_USERS reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserRecord<'a> {
    pub name: &'a str,
    /// Sorted by the caller (clients' tests expect alphabetical order).
    pub roles: Vec<&'a str>,
    /// Quota, single-record TPS, scan/query RPS, limitless scans/queries.
    pub read_info: [u32; 4],
    pub write_info: [u32; 4],
    /// Open connections authenticated as the user.
    pub connections: u32,
}

/// One role in a QUERY_ROLES reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleRecord<'a> {
    pub name: &'a str,
    pub privileges: Vec<WirePrivilege<'a>>,
    /// Verbatim, in order; an empty list is left out of the reply.
    pub whitelist: Vec<&'a str>,
    pub read_quota: u32,
    pub write_quota: u32,
}

/// Writes a QUERY_USERS or QUERY_ROLES reply stream: records grouped into
/// messages of about [`STREAM_MESSAGE_BYTES`], then a QUERY_END message.
/// Never writes a message without a record.
pub struct QueryStream<'o> {
    out: &'o mut Vec<u8>,
    /// Where the open message starts, if one is open.
    open: Option<usize>,
}

impl<'o> QueryStream<'o> {
    pub fn new(out: &'o mut Vec<u8>) -> QueryStream<'o> {
        QueryStream { out, open: None }
    }

    fn record(&mut self, n_fields: u8) {
        let start = match self.open {
            Some(start) => start,
            None => {
                let start = begin_message(self.out);
                self.open = Some(start);
                start
            }
        };
        debug_assert!(start <= self.out.len());
        header(self.out, 0, 0, n_fields);
    }

    fn record_done(&mut self) {
        if let Some(start) = self.open {
            if self.out.len() - start >= STREAM_MESSAGE_BYTES {
                finish_message(self.out, start);
                self.open = None;
            }
        }
    }

    pub fn user(&mut self, user: &UserRecord<'_>) {
        self.record(5);
        put_field(self.out, field::USER, user.name.as_bytes());
        put_field(self.out, field::ROLES, &encode_names(&user.roles));
        put_field(
            self.out,
            field::READ_INFO,
            &encode_counters(&user.read_info),
        );
        put_field(
            self.out,
            field::WRITE_INFO,
            &encode_counters(&user.write_info),
        );
        put_field(
            self.out,
            field::CONNECTIONS,
            &user.connections.to_be_bytes(),
        );
        self.record_done();
    }

    pub fn role(&mut self, role: &RoleRecord<'_>) {
        let with_whitelist = !role.whitelist.is_empty();
        self.record(if with_whitelist { 5 } else { 4 });
        put_field(self.out, field::ROLE, role.name.as_bytes());
        put_field(
            self.out,
            field::PRIVILEGES,
            &encode_privileges(&role.privileges),
        );
        if with_whitelist {
            put_field(
                self.out,
                field::WHITELIST,
                role.whitelist.join(",").as_bytes(),
            );
        }
        put_field(self.out, field::READ_QUOTA, &role.read_quota.to_be_bytes());
        put_field(
            self.out,
            field::WRITE_QUOTA,
            &role.write_quota.to_be_bytes(),
        );
        self.record_done();
    }

    /// Closes the open message and appends the QUERY_END message.
    pub fn finish(mut self) {
        if let Some(start) = self.open.take() {
            finish_message(self.out, start);
        }
        append_result(self.out, ResultCode::QueryEnd);
    }
}

/// Reads a reply stream's records (as clients do): every message of `bytes`
/// (whole frames, proto headers included) until a record with a non-zero
/// result. Returns the records and the ending result code (50 for a
/// complete stream), or None if the bytes end before it.
pub fn decode_stream(mut bytes: &[u8]) -> Result<(Vec<AdminMessage<'_>>, Option<u8>), AdminReject> {
    const BAD: AdminReject = AdminReject::new(ResultCode::InvalidField, "bad reply stream");
    let mut records = Vec::new();
    while let Some((head, rest)) = bytes.split_first_chunk::<PROTO_HEADER_BYTES>() {
        let header = ProtoHeader::decode(head).map_err(|_| BAD)?;
        if header.message_type != MessageType::Admin || header.body_bytes == 0 {
            return Err(BAD);
        }
        let (mut body, after) = rest.split_at_checked(header.body_bytes).ok_or(BAD)?;
        while !body.is_empty() {
            let n_fields = body.get(3).copied().ok_or(BAD)?;
            let (record, used) = AdminMessage::decode_record(body, Some(usize::from(n_fields)))?;
            body = body.get(used..).ok_or(BAD)?;
            if record.result != 0 {
                return Ok((records, Some(record.result)));
            }
            records.push(record);
        }
        bytes = after;
    }
    Ok((records, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN_HASH: &[u8] = b"$2a$10$7EqJtq98hPqEX7fNZaFWoO1mVO/4MLpGzsqojz6E9Gef6iXDjXdDa";

    fn body(frame: &[u8]) -> &[u8] {
        &frame[PROTO_HEADER_BYTES..]
    }

    #[test]
    fn decodes_the_reference_login() {
        // The reference's LOGIN admin/admin, 99 bytes.
        let mut frame = vec![0x02, 0x02, 0, 0, 0, 0, 0, 0x5b, 0, 0, 0x14, 0x02];
        frame.extend_from_slice(&[0; 12]);
        frame.extend_from_slice(&[0, 0, 0, 6, 0]);
        frame.extend_from_slice(b"admin");
        frame.extend_from_slice(&[0, 0, 0, 0x3d, 3]);
        frame.extend_from_slice(ADMIN_HASH);
        assert_eq!(frame.len(), 99);
        let mut encoded = Vec::new();
        append_request(
            &mut encoded,
            command::LOGIN,
            &[(field::USER, b"admin"), (field::CREDENTIAL, ADMIN_HASH)],
        );
        assert_eq!(encoded, frame);
        assert_eq!(
            AdminRequest::decode(body(&frame)),
            Ok(AdminRequest::Login {
                user: Some("admin"),
                credential: Some(ADMIN_HASH),
                clear_password: None,
            })
        );
    }

    #[test]
    fn encodes_the_reference_replies() {
        let mut out = Vec::new();
        append_result(&mut out, ResultCode::SecurityNotEnabled);
        assert_eq!(
            out,
            [2, 2, 0, 0, 0, 0, 0, 0x10, 0, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let token: Vec<u8> = (0x10..0x30).collect();
        let mut login = Vec::new();
        append_login(&mut login, &token, 86_400);
        assert_eq!(login.len(), 70);
        assert_eq!(&login[..12], &[2, 2, 0, 0, 0, 0, 0, 0x3e, 0, 0, 0, 2]);
        assert_eq!(&login[24..29], &[0, 0, 0, 0x21, 5]);
        assert_eq!(&login[29..61], token.as_slice());
        assert_eq!(&login[61..], &[0, 0, 0, 5, 6, 0, 1, 0x51, 0x80]);
    }

    #[test]
    fn decodes_the_reference_privileges_field() {
        // sys-admin + read on test.demo.
        let data = [
            2, 1, 10, 4, b't', b'e', b's', b't', 4, b'd', b'e', b'm', b'o',
        ];
        let privileges = decode_privileges(&data).expect("valid");
        assert_eq!(
            privileges,
            vec![
                WirePrivilege {
                    code: 1,
                    namespace: "",
                    set: ""
                },
                WirePrivilege {
                    code: 10,
                    namespace: "test",
                    set: "demo"
                },
            ]
        );
        assert_eq!(encode_privileges(&privileges), data);
    }

    #[test]
    fn tolerates_an_undercounted_create_role() {
        // Go v7: one privilege and one allowlist entry, n_fields = 1.
        let privileges = encode_privileges(&[WirePrivilege {
            code: 10,
            namespace: "test",
            set: "",
        }]);
        let mut frame = Vec::new();
        append_request(
            &mut frame,
            command::CREATE_ROLE,
            &[
                (field::ROLE, b"reader"),
                (field::PRIVILEGES, &privileges),
                (field::WHITELIST, b"127.0.0.1"),
            ],
        );
        frame[PROTO_HEADER_BYTES + 3] = 1;
        let request = AdminRequest::decode(body(&frame)).expect("valid");
        let AdminRequest::CreateRole {
            role,
            privileges,
            whitelist,
            read_quota,
            write_quota,
        } = request
        else {
            panic!("not a create role: {request:?}");
        };
        assert_eq!(role, "reader");
        assert_eq!(privileges.len(), 1);
        assert_eq!(whitelist, Some(vec!["127.0.0.1"]));
        assert_eq!((read_quota, write_quota), (None, None));
    }

    #[test]
    fn refuses_malformed_requests_with_their_codes() {
        let request = |command: u8, fields: &[(u8, &[u8])]| {
            let mut frame = Vec::new();
            append_request(&mut frame, command, fields);
            AdminRequest::decode(&frame[PROTO_HEADER_BYTES..])
                .map(|_| ())
                .map_err(|reject| reject.result)
        };
        assert_eq!(request(99, &[]), Err(ResultCode::InvalidCommand));
        assert_eq!(
            request(command::DROP_USER, &[]),
            Err(ResultCode::InvalidUser)
        );
        assert_eq!(
            request(command::DROP_USER, &[(field::USER, b"")]),
            Err(ResultCode::InvalidUser)
        );
        assert_eq!(
            request(command::DROP_USER, &[(field::USER, &[b'u'; 64])]),
            Err(ResultCode::InvalidUser)
        );
        assert_eq!(
            request(command::DROP_USER, &[(field::USER, &[0xff, 0xfe])]),
            Err(ResultCode::InvalidUser)
        );
        assert_eq!(
            request(command::DROP_USER, &[(field::USER, &[b'u'; 63])]),
            Ok(())
        );
        assert_eq!(
            request(command::CREATE_USER, &[(field::USER, b"u")]),
            Err(ResultCode::InvalidPassword)
        );
        assert_eq!(
            request(
                command::GRANT_ROLES,
                &[(field::USER, b"u"), (field::ROLES, &[2, 1, b'a'])]
            ),
            Err(ResultCode::InvalidRole)
        );
        assert_eq!(
            request(
                command::GRANT_ROLES,
                &[(field::USER, b"u"), (field::ROLES, &[1, 1, b'a', 9])]
            ),
            Err(ResultCode::InvalidField)
        );
        assert_eq!(
            request(
                command::GRANT_PRIVILEGES,
                &[(field::ROLE, b"r"), (field::PRIVILEGES, &[1, 10, 4, b't'])]
            ),
            Err(ResultCode::InvalidPrivilege)
        );
        assert_eq!(
            request(
                command::SET_QUOTAS,
                &[(field::ROLE, b"r"), (field::READ_QUOTA, &[0, 1])]
            ),
            Err(ResultCode::InvalidQuota)
        );
        assert_eq!(
            request(
                command::DROP_USER,
                &[(field::USER, b"a"), (field::USER, b"b")]
            ),
            Err(ResultCode::InvalidField)
        );
        assert_eq!(
            request(command::AUTHENTICATE, &[(field::SESSION_TOKEN, b"")]),
            Err(ResultCode::InvalidCredential)
        );
    }

    #[test]
    fn refuses_cut_and_bad_fields() {
        let mut frame = Vec::new();
        append_request(&mut frame, command::DROP_USER, &[(field::USER, b"admin")]);
        let whole = body(&frame).to_vec();
        assert!(AdminMessage::decode(&whole).is_ok());
        for cut in 0..whole.len() {
            let result = AdminMessage::decode(&whole[..cut]);
            if cut == ADMIN_HEADER_BYTES {
                // The header alone: a request without fields.
                assert!(result.is_ok());
            } else {
                assert_eq!(
                    result.map(|_| ()).map_err(|reject| reject.result),
                    Err(ResultCode::InvalidField),
                    "cut at {cut}"
                );
            }
        }
        let mut zero = whole[..ADMIN_HEADER_BYTES].to_vec();
        zero.extend_from_slice(&[0, 0, 0, 0, 0]);
        assert!(AdminMessage::decode(&zero).is_err());
        let mut huge = whole[..ADMIN_HEADER_BYTES].to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, b'a']);
        assert!(AdminMessage::decode(&huge).is_err());
        // Unknown field ids are skipped.
        let mut unknown = Vec::new();
        append_request(
            &mut unknown,
            command::DROP_USER,
            &[(200, b"x"), (field::USER, b"bob")],
        );
        assert_eq!(
            AdminRequest::decode(body(&unknown)),
            Ok(AdminRequest::DropUser { user: "bob" })
        );
    }

    #[test]
    fn query_streams_round_trip_and_end_with_query_end() {
        let mut out = Vec::new();
        let mut stream = QueryStream::new(&mut out);
        for index in 0..500 {
            let name = format!("user-{index:03}");
            stream.user(&UserRecord {
                name: &name,
                roles: vec!["read", "sys-admin"],
                read_info: [10, 1, 0, 0],
                write_info: [0; 4],
                connections: 3,
            });
        }
        stream.role(&RoleRecord {
            name: "reader",
            privileges: vec![WirePrivilege {
                code: 10,
                namespace: "test",
                set: "",
            }],
            whitelist: vec![],
            read_quota: 5,
            write_quota: 0,
        });
        stream.finish();
        let (records, end) = decode_stream(&out).expect("valid stream");
        assert_eq!(end, Some(ResultCode::QueryEnd.as_u8()));
        assert_eq!(records.len(), 501);
        assert_eq!(records[7].field(field::USER), Some(&b"user-007"[..]));
        assert_eq!(
            records[7].field(field::ROLES).map(decode_names),
            Some(Ok(vec!["read", "sys-admin"]))
        );
        assert_eq!(
            records[7].field(field::READ_INFO),
            Some(&[4, 0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0][..])
        );
        let role = &records[500];
        assert_eq!(role.n_fields, 4);
        assert_eq!(role.field(field::WHITELIST), None);
        assert_eq!(role.field(field::READ_QUOTA), Some(&[0, 0, 0, 5][..]));
        // Several messages, none empty, the last one the 24-byte end.
        let mut messages = 0;
        let mut rest = &out[..];
        while !rest.is_empty() {
            let header = ProtoHeader::decode(rest[..8].try_into().expect("8")).expect("header");
            assert!(header.body_bytes >= ADMIN_HEADER_BYTES);
            rest = &rest[8 + header.body_bytes..];
            messages += 1;
        }
        assert!(messages > 2, "{messages} messages");
        assert_eq!(
            &out[out.len() - 24..out.len() - 14],
            &[2, 2, 0, 0, 0, 0, 0, 16, 0, 50]
        );
    }

    #[test]
    fn an_empty_query_is_only_the_end() {
        let mut out = Vec::new();
        QueryStream::new(&mut out).finish();
        assert_eq!(out.len(), 24);
        assert_eq!(out[9], 50);
    }

    #[test]
    fn whitelist_entries_split_on_commas() {
        let mut frame = Vec::new();
        append_request(
            &mut frame,
            command::SET_WHITELIST,
            &[
                (field::ROLE, b"r"),
                (field::WHITELIST, b"10.0.2.0/24,127.0.0.1,127.0.0.2"),
            ],
        );
        assert_eq!(
            AdminRequest::decode(body(&frame)),
            Ok(AdminRequest::SetWhitelist {
                role: "r",
                whitelist: Some(vec!["10.0.2.0/24", "127.0.0.1", "127.0.0.2"]),
            })
        );
        let mut clear = Vec::new();
        append_request(&mut clear, command::SET_WHITELIST, &[(field::ROLE, b"r")]);
        assert_eq!(
            AdminRequest::decode(body(&clear)),
            Ok(AdminRequest::SetWhitelist {
                role: "r",
                whitelist: None,
            })
        );
    }
}
