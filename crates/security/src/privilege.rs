//! Privileges (what a role grants), permissions (what a request needs) and
//! the table between them.
//!
//! A privilege is a kind (`read`, `sys-admin`, …) and a scope: global, a
//! namespace, or a namespace and a set. The data privileges (`read`,
//! `read-write`, `read-write-udf`, `write`, `truncate`) may be scoped; the
//! admin privileges are global. Each kind grants a fixed set of
//! permissions ([`PrivilegeKind::permissions`]); a request needs one or more
//! permissions in the namespace and set it touches, and is allowed when the
//! union of the caller's privileges whose scope covers that namespace and
//! set holds them all.

use std::fmt;

/// One thing a request may need. The bits follow Aerospike's permission
/// names (its `perm_to_string`), so refusals name the same permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Permission {
    Read = 1 << 0,
    Query = 1 << 1,
    Write = 1 << 2,
    Delete = 1 << 3,
    UdfApply = 1 << 4,
    UdfQuery = 1 << 5,
    /// Background operations queries (a query or scan that writes).
    OpsQuery = 1 << 6,
    UdfAdmin = 1 << 16,
    SindexAdmin = 1 << 17,
    QueryAdmin = 1 << 18,
    Truncate = 1 << 19,
    EvictAdmin = 1 << 20,
    RecordInfo = 1 << 21,
    SetConfig = 1 << 24,
    LoggingCtrl = 1 << 25,
    ServiceCtrl = 1 << 26,
    XdrSetFilter = 1 << 27,
    UserAdmin = 1 << 30,
}

impl Permission {
    pub const ALL: [Permission; 18] = [
        Permission::Read,
        Permission::Query,
        Permission::Write,
        Permission::Delete,
        Permission::UdfApply,
        Permission::UdfQuery,
        Permission::OpsQuery,
        Permission::UdfAdmin,
        Permission::SindexAdmin,
        Permission::QueryAdmin,
        Permission::Truncate,
        Permission::EvictAdmin,
        Permission::RecordInfo,
        Permission::SetConfig,
        Permission::LoggingCtrl,
        Permission::ServiceCtrl,
        Permission::XdrSetFilter,
        Permission::UserAdmin,
    ];

    #[inline]
    pub fn bit(self) -> u32 {
        self as u32
    }

    /// Aerospike's name for it, as refusals print it.
    pub fn name(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Query => "query",
            Permission::Write => "write",
            Permission::Delete => "delete",
            Permission::UdfApply => "udf-apply",
            Permission::UdfQuery => "udf-query",
            Permission::OpsQuery => "ops-query",
            Permission::UdfAdmin => "udf-admin",
            Permission::SindexAdmin => "sindex-admin",
            Permission::QueryAdmin => "query-admin",
            Permission::Truncate => "truncate",
            Permission::EvictAdmin => "evict-admin",
            Permission::RecordInfo => "record-info",
            Permission::SetConfig => "set-config",
            Permission::LoggingCtrl => "logging-ctrl",
            Permission::ServiceCtrl => "service-ctrl",
            Permission::XdrSetFilter => "xdr-set-filter",
            Permission::UserAdmin => "user-admin",
        }
    }

    /// Whether a namespace (and set) scoped privilege can grant it; the
    /// others come from global privileges only.
    pub fn scoped(self) -> bool {
        matches!(
            self,
            Permission::Read
                | Permission::Query
                | Permission::Write
                | Permission::Delete
                | Permission::UdfApply
                | Permission::UdfQuery
                | Permission::OpsQuery
                | Permission::Truncate
        )
    }
}

/// A set of permissions a request needs (or a privilege grants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Needs(pub u32);

impl Needs {
    pub const NONE: Needs = Needs(0);

    pub const fn of(permission: Permission) -> Needs {
        Needs(permission as u32)
    }

    #[must_use]
    pub const fn and(self, permission: Permission) -> Needs {
        Needs(self.0 | permission as u32)
    }

    pub fn contains(self, permission: Permission) -> bool {
        self.0 & permission.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The first permission of `self` that `held` lacks.
    pub fn first_missing(self, held: u32) -> Option<Permission> {
        Permission::ALL
            .into_iter()
            .find(|permission| self.contains(*permission) && held & permission.bit() == 0)
    }
}

impl From<Permission> for Needs {
    fn from(permission: Permission) -> Needs {
        Needs::of(permission)
    }
}

/// The privilege kinds, numbered as on the wire; each is also a predefined
/// role of the same name holding it globally. Aerospike's masking
/// privileges (15–17, server 8.1.1) are not among them: Bolide reports
/// build 8.1.0.0, and clients refuse codes a server of that version would
/// not send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PrivilegeKind {
    UserAdmin = 0,
    SysAdmin = 1,
    DataAdmin = 2,
    UdfAdmin = 3,
    SindexAdmin = 4,
    Read = 10,
    ReadWrite = 11,
    ReadWriteUdf = 12,
    Write = 13,
    Truncate = 14,
}

impl PrivilegeKind {
    pub const ALL: [PrivilegeKind; 10] = [
        PrivilegeKind::UserAdmin,
        PrivilegeKind::SysAdmin,
        PrivilegeKind::DataAdmin,
        PrivilegeKind::UdfAdmin,
        PrivilegeKind::SindexAdmin,
        PrivilegeKind::Read,
        PrivilegeKind::ReadWrite,
        PrivilegeKind::ReadWriteUdf,
        PrivilegeKind::Write,
        PrivilegeKind::Truncate,
    ];

    pub fn from_code(code: u8) -> Option<PrivilegeKind> {
        PrivilegeKind::ALL
            .into_iter()
            .find(|kind| kind.code() == code)
    }

    pub fn from_name(name: &str) -> Option<PrivilegeKind> {
        PrivilegeKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    #[inline]
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            PrivilegeKind::UserAdmin => "user-admin",
            PrivilegeKind::SysAdmin => "sys-admin",
            PrivilegeKind::DataAdmin => "data-admin",
            PrivilegeKind::UdfAdmin => "udf-admin",
            PrivilegeKind::SindexAdmin => "sindex-admin",
            PrivilegeKind::Read => "read",
            PrivilegeKind::ReadWrite => "read-write",
            PrivilegeKind::ReadWriteUdf => "read-write-udf",
            PrivilegeKind::Write => "write",
            PrivilegeKind::Truncate => "truncate",
        }
    }

    /// Whether it may be scoped to a namespace or a set (codes ≥ 10).
    pub fn scopable(self) -> bool {
        self.code() >= 10
    }

    /// What it grants. The public statements (reference §2.4) fix the data
    /// privileges; for the admin ones Bolide takes: `data-admin` = index,
    /// UDF, truncate and query administration; `sys-admin` = all of that
    /// plus configuration, logging, service control, eviction reset and
    /// record inspection.
    pub fn permissions(self) -> u32 {
        use Permission as P;
        let read = P::Read.bit() | P::Query.bit();
        let write = P::Write.bit() | P::Delete.bit();
        let read_write = read | write | P::OpsQuery.bit();
        let data_admin =
            P::UdfAdmin.bit() | P::SindexAdmin.bit() | P::Truncate.bit() | P::QueryAdmin.bit();
        match self {
            PrivilegeKind::UserAdmin => P::UserAdmin.bit(),
            PrivilegeKind::SysAdmin => {
                data_admin
                    | P::EvictAdmin.bit()
                    | P::RecordInfo.bit()
                    | P::SetConfig.bit()
                    | P::LoggingCtrl.bit()
                    | P::ServiceCtrl.bit()
                    | P::XdrSetFilter.bit()
            }
            PrivilegeKind::DataAdmin => data_admin,
            PrivilegeKind::UdfAdmin => P::UdfAdmin.bit(),
            PrivilegeKind::SindexAdmin => P::SindexAdmin.bit(),
            PrivilegeKind::Read => read,
            PrivilegeKind::ReadWrite => read_write,
            PrivilegeKind::ReadWriteUdf => read_write | P::UdfApply.bit() | P::UdfQuery.bit(),
            PrivilegeKind::Write => write,
            PrivilegeKind::Truncate => P::Truncate.bit(),
        }
    }
}

impl fmt::Display for PrivilegeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a privilege applies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Global,
    Namespace(String),
    Set(String, String),
}

impl Scope {
    /// From the wire's (namespace, set): empty means the wider scope.
    pub fn from_parts(namespace: &str, set: &str) -> Option<Scope> {
        match (namespace.is_empty(), set.is_empty()) {
            (true, true) => Some(Scope::Global),
            (false, true) => Some(Scope::Namespace(namespace.to_owned())),
            (false, false) => Some(Scope::Set(namespace.to_owned(), set.to_owned())),
            (true, false) => None,
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Scope::Global => "",
            Scope::Namespace(ns) | Scope::Set(ns, _) => ns,
        }
    }

    pub fn set(&self) -> &str {
        match self {
            Scope::Set(_, set) => set,
            _ => "",
        }
    }

    /// Whether it covers a request on `namespace` and `set` ("" for a
    /// request without a set, or one that spans all sets).
    pub fn covers(&self, namespace: &str, set: &str) -> bool {
        match self {
            Scope::Global => true,
            Scope::Namespace(ns) => ns == namespace,
            Scope::Set(ns, s) => ns == namespace && s == set,
        }
    }
}

/// A privilege: a kind in a scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Privilege {
    pub kind: PrivilegeKind,
    pub scope: Scope,
}

/// Why a privilege from a request is refused (answered 72).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrivilegeError {
    UnknownCode(u8),
    /// A set without a namespace.
    SetWithoutNamespace,
    /// A scope on a privilege that is global only (can only come from the
    /// text form; the wire carries no scope for those codes).
    ScopeOnGlobal,
}

impl fmt::Display for PrivilegeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrivilegeError::UnknownCode(code) => write!(f, "unknown privilege code {code}"),
            PrivilegeError::SetWithoutNamespace => f.write_str("a set without a namespace"),
            PrivilegeError::ScopeOnGlobal => f.write_str("a scope on a global-only privilege"),
        }
    }
}

impl Privilege {
    pub fn global(kind: PrivilegeKind) -> Privilege {
        Privilege {
            kind,
            scope: Scope::Global,
        }
    }

    pub fn new(kind: PrivilegeKind, scope: Scope) -> Result<Privilege, PrivilegeError> {
        if !kind.scopable() && scope != Scope::Global {
            return Err(PrivilegeError::ScopeOnGlobal);
        }
        Ok(Privilege { kind, scope })
    }

    /// From the wire's code, namespace and set.
    pub fn from_wire(code: u8, namespace: &str, set: &str) -> Result<Privilege, PrivilegeError> {
        let kind = PrivilegeKind::from_code(code).ok_or(PrivilegeError::UnknownCode(code))?;
        let scope = Scope::from_parts(namespace, set).ok_or(PrivilegeError::SetWithoutNamespace)?;
        Privilege::new(kind, scope)
    }

    /// The text form asadm and `bolide acl` use: `read`, `read.test`,
    /// `read.test.demo`.
    pub fn parse(text: &str) -> Option<Privilege> {
        let mut parts = text.splitn(3, '.');
        let kind = PrivilegeKind::from_name(parts.next()?)?;
        let namespace = parts.next().unwrap_or("");
        let set = parts.next().unwrap_or("");
        let scope = Scope::from_parts(namespace, set)?;
        Privilege::new(kind, scope).ok()
    }

    pub fn to_wire(&self) -> bolide_wire::admin::WirePrivilege<'_> {
        bolide_wire::admin::WirePrivilege {
            code: self.kind.code(),
            namespace: self.scope.namespace(),
            set: self.scope.set(),
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.scope {
            Scope::Global => write!(f, "{}", self.kind),
            Scope::Namespace(ns) => write!(f, "{}.{ns}", self.kind),
            Scope::Set(ns, set) => write!(f, "{}.{ns}.{set}", self.kind),
        }
    }
}

/// The permissions a user holds, compiled from its roles' privileges: a
/// global mask, then masks per namespace and per set. Checking is a few
/// mask operations and a scan of the (short) scoped lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    global: u32,
    namespaces: Vec<(String, u32)>,
    sets: Vec<(String, String, u32)>,
}

impl Grants {
    pub fn from_privileges<'p>(privileges: impl IntoIterator<Item = &'p Privilege>) -> Grants {
        let mut grants = Grants::default();
        for privilege in privileges {
            grants.add(privilege);
        }
        grants
    }

    pub fn add(&mut self, privilege: &Privilege) {
        let bits = privilege.kind.permissions();
        match &privilege.scope {
            Scope::Global => self.global |= bits,
            Scope::Namespace(ns) => {
                let scoped = bits & scoped_mask();
                match self.namespaces.iter_mut().find(|(n, _)| n == ns) {
                    Some((_, mask)) => *mask |= scoped,
                    None => self.namespaces.push((ns.clone(), scoped)),
                }
            }
            Scope::Set(ns, set) => {
                let scoped = bits & scoped_mask();
                match self.sets.iter_mut().find(|(n, s, _)| n == ns && s == set) {
                    Some((_, _, mask)) => *mask |= scoped,
                    None => self.sets.push((ns.clone(), set.clone(), scoped)),
                }
            }
        }
    }

    /// The permissions held on `namespace` and `set` ("" for none).
    // PERF: hot path (every request of a secured connection).
    #[inline]
    pub fn held(&self, namespace: &str, set: &str) -> u32 {
        let mut held = self.global;
        for (ns, mask) in &self.namespaces {
            if ns == namespace {
                held |= mask;
            }
        }
        if !set.is_empty() {
            for (ns, s, mask) in &self.sets {
                if ns == namespace && s == set {
                    held |= mask;
                }
            }
        }
        held
    }

    /// Whether everything `needs` asks is held on `namespace` and `set`;
    /// otherwise the first permission missing.
    #[inline]
    pub fn check(&self, needs: Needs, namespace: &str, set: &str) -> Result<(), Permission> {
        if self.global & needs.0 == needs.0 {
            return Ok(());
        }
        let held = self.held(namespace, set);
        match needs.first_missing(held) {
            None => Ok(()),
            Some(missing) => Err(missing),
        }
    }

    /// Whether `permission` is held anywhere (globally, or on some
    /// namespace or set): what a console needs to decide what to show.
    pub fn anywhere(&self, permission: Permission) -> bool {
        let bit = permission.bit();
        self.global & bit != 0
            || self.namespaces.iter().any(|(_, mask)| mask & bit != 0)
            || self.sets.iter().any(|(_, _, mask)| mask & bit != 0)
    }
}

fn scoped_mask() -> u32 {
    Permission::ALL
        .into_iter()
        .filter(|permission| permission.scoped())
        .fold(0, |mask, permission| mask | permission.bit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for kind in PrivilegeKind::ALL {
            assert_eq!(PrivilegeKind::from_code(kind.code()), Some(kind));
            assert_eq!(PrivilegeKind::from_name(kind.name()), Some(kind));
        }
        for code in [5, 6, 7, 8, 9, 15, 16, 17, 255] {
            assert_eq!(PrivilegeKind::from_code(code), None);
        }
    }

    #[test]
    fn wire_scopes() {
        assert_eq!(
            Privilege::from_wire(10, "test", "demo"),
            Ok(Privilege {
                kind: PrivilegeKind::Read,
                scope: Scope::Set("test".into(), "demo".into())
            })
        );
        assert_eq!(
            Privilege::from_wire(10, "", "demo"),
            Err(PrivilegeError::SetWithoutNamespace)
        );
        assert_eq!(
            Privilege::from_wire(15, "", ""),
            Err(PrivilegeError::UnknownCode(15))
        );
        assert_eq!(
            Privilege::new(PrivilegeKind::SysAdmin, Scope::Namespace("test".into())),
            Err(PrivilegeError::ScopeOnGlobal)
        );
    }

    #[test]
    fn text_form_round_trips() {
        for text in ["read", "read-write.test", "truncate.test.demo", "sys-admin"] {
            let privilege = Privilege::parse(text).expect(text);
            assert_eq!(privilege.to_string(), text);
        }
        assert_eq!(Privilege::parse("sys-admin.test"), None);
        assert_eq!(Privilege::parse("reed"), None);
    }

    #[test]
    fn scoped_grants_cover_only_their_scope() {
        let grants = Grants::from_privileges(&[
            Privilege::parse("read.test").expect("valid"),
            Privilege::parse("write.test.demo").expect("valid"),
            Privilege::parse("sindex-admin").expect("valid"),
        ]);
        assert_eq!(
            grants.check(Needs::of(Permission::Read), "test", ""),
            Ok(())
        );
        assert_eq!(
            grants.check(Needs::of(Permission::Read), "test", "x"),
            Ok(())
        );
        assert_eq!(
            grants.check(Needs::of(Permission::Read), "other", ""),
            Err(Permission::Read)
        );
        assert_eq!(
            grants.check(Needs::of(Permission::Write), "test", "demo"),
            Ok(())
        );
        assert_eq!(
            grants.check(Needs::of(Permission::Write), "test", "other"),
            Err(Permission::Write)
        );
        assert_eq!(
            grants.check(
                Needs::of(Permission::Read).and(Permission::Write),
                "test",
                "demo"
            ),
            Ok(())
        );
        assert_eq!(
            grants.check(Needs::of(Permission::SindexAdmin), "", ""),
            Ok(())
        );
        assert!(grants.anywhere(Permission::Write));
        assert!(!grants.anywhere(Permission::UserAdmin));
    }

    #[test]
    fn an_admin_privilege_never_scopes_a_data_permission_away() {
        // A scoped privilege grants only scoped permissions.
        let mut grants = Grants::default();
        grants.add(&Privilege {
            kind: PrivilegeKind::ReadWriteUdf,
            scope: Scope::Namespace("test".into()),
        });
        assert_eq!(
            grants.check(Needs::of(Permission::UserAdmin), "test", ""),
            Err(Permission::UserAdmin)
        );
    }
}
