//! The users, roles and session key of a secured cluster, as versioned
//! entries.
//!
//! Every user, every user-defined role and the session key is one entry
//! (`user:<name>`, `role:<name>`, `session-key`) with a text value, a
//! generation and a timestamp, like the cluster's metadata items: the
//! entries are what travels between nodes and what the node's file holds.
//! Of two versions of an entry the later (timestamp, then generation) wins,
//! so every order of delivery converges; a drop is a deleted entry that
//! stays (a tombstone), so an old copy arriving later cannot bring a
//! dropped user back. The parsed users and roles are derived from the
//! entries.

use crate::password::StoredPassword;
use crate::privilege::{Privilege, PrivilegeKind, Scope};
use crate::token::{SessionKey, KEY_BYTES};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The most users, and the most user-defined roles, a cluster keeps.
pub const USERS_MAX: usize = 10_000;
pub const ROLES_MAX: usize = 10_000;
/// The most roles one user holds, and privileges one role holds (the
/// wire's lists count in one byte).
pub const USER_ROLES_MAX: usize = 255;
pub const ROLE_PRIVILEGES_MAX: usize = 255;
/// The longest entry value accepted from a file or another node.
pub const ENTRY_VALUE_BYTES_MAX: usize = 64 << 10;

pub const SESSION_KEY_ENTRY: &str = "session-key";

/// One versioned entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: String,
    pub generation: u32,
    /// Wall-clock ms when it was last set on its origin node.
    pub timestamp_ms: u64,
    pub deleted: bool,
}

impl Entry {
    pub fn newer_than(&self, other: &Entry) -> bool {
        (self.timestamp_ms, self.generation) > (other.timestamp_ms, other.generation)
    }
}

/// A user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// None: a PKI user, who never logs in with a password.
    pub password: Option<StoredPassword>,
    /// Sorted, as clients expect them back.
    pub roles: BTreeSet<String>,
    /// Random; sessions carry it (see `token`).
    pub epoch: u64,
}

/// A user-defined role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    /// In the order granted, without repeats.
    pub privileges: Vec<Privilege>,
    /// Verbatim, in order.
    pub whitelist: Vec<String>,
    /// Records per second; 0: no limit.
    pub read_quota: u32,
    pub write_quota: u32,
}

/// Why an entry could not be taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryError {
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "security entry '{}': {}", self.key, self.reason)
    }
}

/// Every entry, and what they say.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    entries: BTreeMap<String, Entry>,
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
    /// The session key in force, and the one before it (tokens signed just
    /// before two nodes' keys converged stay valid).
    session_key: Option<SessionKey>,
    previous_session_key: Option<SessionKey>,
}

impl Catalog {
    /// A new cluster's catalog: the user `admin` (password `admin`, role
    /// `user-admin`) or the given password hash, and a fresh session key.
    /// Both carry the lowest version, so anything set anywhere wins.
    pub fn bootstrap(admin_client_hash: &str, now_ms: u64) -> Catalog {
        let mut catalog = Catalog::default();
        let admin = User {
            name: "admin".to_owned(),
            password: Some(StoredPassword::new(admin_client_hash.as_bytes())),
            roles: BTreeSet::from([PrivilegeKind::UserAdmin.name().to_owned()]),
            epoch: crate::random_u64(),
        };
        let entry = Entry {
            key: user_key("admin"),
            value: user_value(&admin),
            generation: 0,
            timestamp_ms: 0,
            deleted: false,
        };
        catalog.take(entry);
        // The session key: timestamped now with a random generation, so two
        // nodes bootstrapped in the same millisecond still order their keys
        // and converge on one.
        let entry = Entry {
            key: SESSION_KEY_ENTRY.to_owned(),
            value: session_key_value(&SessionKey::random()),
            generation: (crate::random_u64() as u32) >> 1,
            timestamp_ms: now_ms,
            deleted: false,
        };
        catalog.take(entry);
        catalog
    }

    /// A catalog of stored entries (the node's file); the first bad one is
    /// an error, nothing is guessed.
    pub fn from_entries(entries: Vec<Entry>) -> Result<Catalog, EntryError> {
        let mut catalog = Catalog::default();
        for entry in entries {
            check_entry(&entry)?;
            catalog.merge(entry)?;
        }
        Ok(catalog)
    }

    /// Takes `entry` if it is newer than the version held; returns whether
    /// it changed anything. A malformed entry (from another node) is an
    /// error and changes nothing.
    pub fn merge(&mut self, entry: Entry) -> Result<bool, EntryError> {
        check_entry(&entry)?;
        if let Some(held) = self.entries.get(&entry.key) {
            if !entry.newer_than(held) {
                return Ok(false);
            }
        }
        self.take(entry);
        Ok(true)
    }

    /// A new local version of `key`: one generation up and not older than
    /// the version held, as the cluster's metadata versions its items.
    pub fn next_entry(&self, key: String, value: String, deleted: bool, now_ms: u64) -> Entry {
        let (generation, floor) = self.entries.get(&key).map_or((1, 0), |held| {
            (
                held.generation.wrapping_add(1),
                held.timestamp_ms.saturating_add(1),
            )
        });
        Entry {
            key,
            value,
            generation,
            timestamp_ms: now_ms.max(floor),
            deleted,
        }
    }

    /// Applies a locally made entry (always newer than the one held).
    pub fn set(&mut self, entry: Entry) {
        debug_assert!(self
            .entries
            .get(&entry.key)
            .is_none_or(|held| entry.newer_than(held)));
        self.take(entry);
    }

    /// Installs `entry` (already checked) and re-derives what it says.
    fn take(&mut self, entry: Entry) {
        let key = entry.key.clone();
        if let Some(name) = key.strip_prefix("user:") {
            match parse_user(name, &entry) {
                Some(user) if !entry.deleted => {
                    self.users.insert(name.to_owned(), user);
                }
                _ => {
                    self.users.remove(name);
                }
            }
        } else if let Some(name) = key.strip_prefix("role:") {
            match parse_role(name, &entry) {
                Some(role) if !entry.deleted => {
                    self.roles.insert(name.to_owned(), role);
                }
                _ => {
                    self.roles.remove(name);
                }
            }
        } else if key == SESSION_KEY_ENTRY && !entry.deleted {
            if let Some(new) = parse_session_key(&entry.value) {
                if self.session_key.as_ref() != Some(&new) {
                    self.previous_session_key = self.session_key.replace(new);
                }
            }
        }
        self.entries.insert(key, entry);
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    pub fn user_count(&self) -> usize {
        self.users.len()
    }

    /// A user-defined role.
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    pub fn roles(&self) -> impl Iterator<Item = &Role> {
        self.roles.values()
    }

    pub fn role_count(&self) -> usize {
        self.roles.len()
    }

    /// Whether `name` is a role: predefined or user-defined.
    pub fn role_exists(&self, name: &str) -> bool {
        PrivilegeKind::from_name(name).is_some() || self.roles.contains_key(name)
    }

    /// Every role as it answers QUERY_ROLES: predefined and user-defined,
    /// sorted by name.
    pub fn all_roles(&self) -> Vec<Role> {
        let mut roles: Vec<Role> = PrivilegeKind::ALL
            .into_iter()
            .map(predefined_role)
            .chain(self.roles.values().cloned())
            .collect();
        roles.sort_by(|a, b| a.name.cmp(&b.name));
        roles
    }

    /// A role by name, predefined or user-defined.
    pub fn any_role(&self, name: &str) -> Option<Role> {
        match PrivilegeKind::from_name(name) {
            Some(kind) => Some(predefined_role(kind)),
            None => self.roles.get(name).cloned(),
        }
    }

    pub fn session_keys(&self) -> impl Iterator<Item = &SessionKey> {
        self.session_key
            .iter()
            .chain(self.previous_session_key.iter())
    }

    pub fn session_key(&self) -> Option<&SessionKey> {
        self.session_key.as_ref()
    }
}

/// The predefined role `kind`: that privilege, globally; no allowlist, no
/// quotas.
pub fn predefined_role(kind: PrivilegeKind) -> Role {
    Role {
        name: kind.name().to_owned(),
        privileges: vec![Privilege::global(kind)],
        whitelist: Vec::new(),
        read_quota: 0,
        write_quota: 0,
    }
}

pub fn user_key(name: &str) -> String {
    format!("user:{name}")
}

pub fn role_key(name: &str) -> String {
    format!("role:{name}")
}

pub fn user_value(user: &User) -> String {
    json!({
        "password": user.password.as_ref().map(StoredPassword::to_text),
        "roles": user.roles.iter().collect::<Vec<_>>(),
        "epoch": user.epoch,
    })
    .to_string()
}

pub fn role_value(role: &Role) -> String {
    let privileges: Vec<Value> = role
        .privileges
        .iter()
        .map(|privilege| {
            json!({
                "code": privilege.kind.code(),
                "ns": privilege.scope.namespace(),
                "set": privilege.scope.set(),
            })
        })
        .collect();
    json!({
        "privileges": privileges,
        "whitelist": role.whitelist,
        "read_quota": role.read_quota,
        "write_quota": role.write_quota,
    })
    .to_string()
}

fn session_key_value(key: &SessionKey) -> String {
    json!({ "key": crate::password::hex(&key.0) }).to_string()
}

fn parse_session_key(value: &str) -> Option<SessionKey> {
    let value: Value = serde_json::from_str(value).ok()?;
    let bytes = crate::password::unhex(value.get("key")?.as_str()?)?;
    let key: [u8; KEY_BYTES] = bytes.try_into().ok()?;
    Some(SessionKey(key))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= bolide_wire::admin::NAME_BYTES_MAX && !name.contains('\0')
}

fn parse_user(name: &str, entry: &Entry) -> Option<User> {
    if entry.deleted {
        return None;
    }
    let value: Value = serde_json::from_str(&entry.value).ok()?;
    let password = match value.get("password")? {
        Value::Null => None,
        Value::String(text) => Some(StoredPassword::parse(text)?),
        _ => return None,
    };
    let roles: BTreeSet<String> = value
        .get("roles")?
        .as_array()?
        .iter()
        .map(|role| role.as_str().filter(|r| valid_name(r)).map(str::to_owned))
        .collect::<Option<_>>()?;
    if roles.len() > USER_ROLES_MAX {
        return None;
    }
    Some(User {
        name: name.to_owned(),
        password,
        roles,
        epoch: value.get("epoch")?.as_u64()?,
    })
}

fn parse_role(name: &str, entry: &Entry) -> Option<Role> {
    if entry.deleted {
        return None;
    }
    let value: Value = serde_json::from_str(&entry.value).ok()?;
    let privileges: Vec<Privilege> = value
        .get("privileges")?
        .as_array()?
        .iter()
        .map(|privilege| {
            let code = u8::try_from(privilege.get("code")?.as_u64()?).ok()?;
            let ns = privilege.get("ns")?.as_str()?;
            let set = privilege.get("set")?.as_str()?;
            Privilege::from_wire(code, ns, set).ok()
        })
        .collect::<Option<_>>()?;
    let whitelist: Vec<String> = value
        .get("whitelist")?
        .as_array()?
        .iter()
        .map(|entry| {
            entry
                .as_str()
                .filter(|e| crate::allowlist::Network::parse(e).is_some())
                .map(str::to_owned)
        })
        .collect::<Option<_>>()?;
    if privileges.len() > ROLE_PRIVILEGES_MAX || whitelist.len() > crate::allowlist::ENTRIES_MAX {
        return None;
    }
    Some(Role {
        name: name.to_owned(),
        privileges,
        whitelist,
        read_quota: u32::try_from(value.get("read_quota")?.as_u64()?).ok()?,
        write_quota: u32::try_from(value.get("write_quota")?.as_u64()?).ok()?,
    })
}

/// Checks an entry's key and (unless deleted) its value.
fn check_entry(entry: &Entry) -> Result<(), EntryError> {
    let error = |reason: &str| EntryError {
        key: entry.key.chars().take(80).collect(),
        reason: reason.to_owned(),
    };
    if entry.value.len() > ENTRY_VALUE_BYTES_MAX {
        return Err(error("value too large"));
    }
    if let Some(name) = entry.key.strip_prefix("user:") {
        if !valid_name(name) {
            return Err(error("bad user name"));
        }
        if !entry.deleted && parse_user(name, entry).is_none() {
            return Err(error("bad user value"));
        }
    } else if let Some(name) = entry.key.strip_prefix("role:") {
        if !valid_name(name) || PrivilegeKind::from_name(name).is_some() {
            return Err(error("bad role name"));
        }
        if !entry.deleted && parse_role(name, entry).is_none() {
            return Err(error("bad role value"));
        }
    } else if entry.key == SESSION_KEY_ENTRY {
        if !entry.deleted && parse_session_key(&entry.value).is_none() {
            return Err(error("bad session key"));
        }
    } else {
        return Err(error("unknown entry"));
    }
    Ok(())
}

/// A scope's text for logs: `ns`, `ns.set` or nothing.
pub fn scope_text(scope: &Scope) -> String {
    match scope {
        Scope::Global => String::new(),
        Scope::Namespace(ns) => ns.clone(),
        Scope::Set(ns, set) => format!("{ns}.{set}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::password::client_hash;

    fn role(name: &str) -> Role {
        Role {
            name: name.to_owned(),
            privileges: vec![Privilege::parse("read.test.demo").expect("valid")],
            whitelist: vec!["10.0.0.0/8".to_owned()],
            read_quota: 5,
            write_quota: 0,
        }
    }

    #[test]
    fn bootstrap_has_admin_with_user_admin_and_a_session_key() {
        let catalog = Catalog::bootstrap(&client_hash("admin"), 1_000);
        let admin = catalog.user("admin").expect("admin");
        assert!(admin
            .password
            .as_ref()
            .expect("password")
            .verify(client_hash("admin").as_bytes()));
        assert_eq!(admin.roles.iter().collect::<Vec<_>>(), vec!["user-admin"]);
        assert!(catalog.session_key().is_some());
        assert_eq!(catalog.entries().count(), 2);
    }

    #[test]
    fn values_round_trip() {
        let mut catalog = Catalog::default();
        let original = role("reader");
        let entry = catalog.next_entry(role_key("reader"), role_value(&original), false, 5);
        catalog.set(entry);
        assert_eq!(catalog.role("reader"), Some(&original));
        let user = User {
            name: "u".into(),
            password: Some(StoredPassword::new(b"h")),
            roles: BTreeSet::from(["reader".to_owned(), "read".to_owned()]),
            epoch: u64::MAX,
        };
        let entry = catalog.next_entry(user_key("u"), user_value(&user), false, 5);
        catalog.set(entry);
        assert_eq!(catalog.user("u"), Some(&user));
    }

    #[test]
    fn later_versions_win_in_any_order_and_tombstones_stay() {
        let mut a = Catalog::default();
        let created = a.next_entry(role_key("r"), role_value(&role("r")), false, 100);
        a.set(created.clone());
        let dropped = a.next_entry(role_key("r"), String::new(), true, 100);
        assert!(dropped.newer_than(&created));
        a.set(dropped.clone());
        assert_eq!(a.role("r"), None);
        // Another node hears the drop first, then the create: still dropped.
        let mut b = Catalog::default();
        assert_eq!(b.merge(dropped.clone()), Ok(true));
        assert_eq!(b.merge(created.clone()), Ok(false));
        assert_eq!(b.role("r"), None);
        assert_eq!(b.merge(dropped), Ok(false));
    }

    #[test]
    fn malformed_entries_are_refused() {
        let mut catalog = Catalog::default();
        let bad = |key: &str, value: &str| Entry {
            key: key.to_owned(),
            value: value.to_owned(),
            generation: 1,
            timestamp_ms: 1,
            deleted: false,
        };
        for entry in [
            bad("user:x", "{}"),
            bad("user:x", "not json"),
            bad(
                "user:",
                &user_value(&User {
                    name: String::new(),
                    password: None,
                    roles: BTreeSet::new(),
                    epoch: 1,
                }),
            ),
            bad("role:read", &role_value(&role("read"))),
            bad(
                "role:r",
                r#"{"privileges":[{"code":99,"ns":"","set":""}],"whitelist":[],"read_quota":0,"write_quota":0}"#,
            ),
            bad(
                "role:r",
                r#"{"privileges":[],"whitelist":["bad_IP"],"read_quota":0,"write_quota":0}"#,
            ),
            bad("session-key", r#"{"key":"00"}"#),
            bad("something", "{}"),
        ] {
            assert!(catalog.merge(entry.clone()).is_err(), "{entry:?}");
        }
        assert_eq!(catalog.entries().count(), 0);
    }

    #[test]
    fn session_keys_converge_on_the_later_and_keep_the_previous() {
        let a = Catalog::bootstrap(&client_hash("admin"), 1_000);
        let mut b = Catalog::bootstrap(&client_hash("admin"), 2_000);
        let a_key = a.session_key().cloned().expect("key");
        let b_key = b.session_key().cloned().expect("key");
        let a_entry = a
            .entries()
            .find(|e| e.key == SESSION_KEY_ENTRY)
            .cloned()
            .expect("entry");
        assert_eq!(b.merge(a_entry), Ok(false));
        assert_eq!(b.session_key(), Some(&b_key));
        let mut a = a;
        let b_entry = b
            .entries()
            .find(|e| e.key == SESSION_KEY_ENTRY)
            .cloned()
            .expect("entry");
        assert_eq!(a.merge(b_entry), Ok(true));
        assert_eq!(a.session_key(), Some(&b_key));
        assert_eq!(a.session_keys().collect::<Vec<_>>(), vec![&b_key, &a_key]);
    }

    #[test]
    fn all_roles_lists_the_predefined_ones_sorted() {
        let mut catalog = Catalog::default();
        let entry = catalog.next_entry(role_key("aaa"), role_value(&role("aaa")), false, 1);
        catalog.set(entry);
        let names: Vec<String> = catalog.all_roles().into_iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            vec![
                "aaa",
                "data-admin",
                "read",
                "read-write",
                "read-write-udf",
                "sindex-admin",
                "sys-admin",
                "truncate",
                "udf-admin",
                "user-admin",
                "write"
            ]
        );
        assert!(catalog.role_exists("read"));
        assert!(!catalog.role_exists("nope"));
    }
}
