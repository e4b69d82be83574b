//! Access control on a secured node (`security { }`): the connection's side
//! of `bolide_security`. A connection starts unauthenticated; its admin
//! messages (LOGIN, AUTHENTICATE, the user and role commands) go to
//! [`Secured::admin`], and once it holds a session its [`Caller`] carries a
//! [`SessionPolicy`], which asks the node's [`Security`] on every check the
//! data path and the info commands make.
//!
//! Users and roles travel between nodes as cluster metadata items of the
//! module [`METADATA_MODULE`]: each admin command's changed entries are
//! handed to [`Secured::share`], and the cluster applies what other nodes
//! send through [`apply_item`].

use bolide_security::audit::Event;
use bolide_security::catalog::Entry;
use bolide_security::{Security, Session};
use bolide_transaction::{AccessPolicy, Caller, Permission};
use bolide_types::ResultCode;
use std::net::SocketAddr;
use std::sync::Arc;

/// The cluster metadata module users, roles and the session key travel in.
pub const METADATA_MODULE: &str = "security";

/// Spreads changed entries to the rest of the cluster, returning once
/// every member has them.
pub type Share = Box<dyn Fn(&[Entry]) + Send + Sync>;

/// A secured node's access control, as its connections use it.
pub struct Secured {
    pub security: Arc<Security>,
    share: Share,
}

impl Secured {
    pub fn new(security: Arc<Security>, share: Share) -> Secured {
        Secured { security, share }
    }

    /// Answers one admin message body from `client` into `out`, updating
    /// the connection's `session`; shares what the command changed, and
    /// returns once every member of the cluster has it (a client sends its
    /// next admin command to any node: a user created right after its
    /// role must find the role there).
    /// `certificate_user` is the user the client's certificate names (its
    /// common name; mutual TLS only), whom a PKI LOGIN logs in as.
    /// Hashing passwords takes milliseconds: call it off the event loop
    /// unless [`Secured::is_quick`] says otherwise.
    pub fn admin(
        &self,
        session: &mut Option<Arc<Session>>,
        client: SocketAddr,
        certificate_user: Option<&str>,
        body: &[u8],
        out: &mut Vec<u8>,
    ) {
        let changed = self
            .security
            .admin_from(session, client, certificate_user, body, out);
        if !changed.is_empty() {
            (self.share)(&changed);
        }
    }

    /// Whether an admin message is answered without hashing a password:
    /// an AUTHENTICATE with a session token, or a PKI LOGIN (no fields),
    /// each an HMAC.
    pub fn is_quick(body: &[u8]) -> bool {
        use bolide_wire::admin::AdminRequest;
        matches!(
            AdminRequest::decode(body),
            Ok(AdminRequest::Authenticate { token: Some(_), .. }
                | AdminRequest::Login {
                    user: None,
                    credential: None,
                    ..
                })
        )
    }

    /// Whether `session` still stands for a user (not dropped or reset).
    pub fn is_current(&self, session: Option<&Arc<Session>>) -> bool {
        session.is_some_and(|session| self.security.access(session).is_some())
    }

    /// The caller of a connection from `client` with `session` (None: not
    /// logged in yet, refused everything).
    pub fn caller(&self, client: Option<SocketAddr>, session: Option<&Arc<Session>>) -> Caller {
        match session {
            Some(session) => Caller::with_policy(
                client,
                Arc::new(SessionPolicy {
                    security: Arc::clone(&self.security),
                    session: Arc::clone(session),
                }),
            ),
            None => Caller::with_policy(client, Arc::new(Unauthenticated)),
        }
    }
}

/// The rights of an authenticated connection: its user's roles, as the
/// node's catalog says now.
pub struct SessionPolicy {
    security: Arc<Security>,
    session: Arc<Session>,
}

impl AccessPolicy for SessionPolicy {
    // PERF: hot path (every request and batch row of a secured connection).
    fn check(
        &self,
        _caller: &Caller,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
    ) -> Result<(), ResultCode> {
        self.decide(permission, namespace, set, None)
    }

    fn check_command(
        &self,
        _caller: &Caller,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
        command: &str,
    ) -> Result<(), ResultCode> {
        self.decide(permission, namespace, set, Some(command))
    }
}

impl SessionPolicy {
    /// Checks `permission`; an administrative one is reported as a
    /// sys-admin event, its action the info command's name and its detail
    /// the command's text (or the namespace and set it names).
    fn decide(
        &self,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
        command: Option<&str>,
    ) -> Result<(), ResultCode> {
        let set = set.map(String::from_utf8_lossy);
        let (namespace, set) = (namespace.unwrap_or(""), set.as_deref().unwrap_or(""));
        let wanted = security_permission(permission);
        let result = self
            .security
            .check_permission(Some(&self.session), wanted, namespace, set)
            .map_err(|refusal| refusal.result);
        if is_sys_admin(permission) && self.security.audit.reports(Event::SysAdmin) {
            let (action, detail) = match command {
                Some(text) => {
                    let name_end = text.find([':', ';', '/']).unwrap_or(text.len());
                    (
                        &text[..name_end],
                        text[name_end..].trim_start_matches(':').to_owned(),
                    )
                }
                None => {
                    let mut detail = String::new();
                    if !namespace.is_empty() {
                        detail = format!("ns={namespace}");
                        if !set.is_empty() {
                            detail.push_str(&format!(" set={set}"));
                        }
                    }
                    (wanted.name(), detail)
                }
            };
            self.security.audit.log(
                Event::SysAdmin,
                self.session.user(),
                Some(self.session.client()),
                action,
                &detail,
                result.err().map_or(0, ResultCode::as_u8),
            );
        }
        result
    }
}

/// The permissions of administration (info commands that change the node
/// or its data), which `report-sys-admin` reports.
fn is_sys_admin(permission: Permission) -> bool {
    !matches!(
        permission,
        Permission::Read
            | Permission::Write
            | Permission::Delete
            | Permission::UdfApply
            | Permission::Query
            | Permission::UdfQuery
            | Permission::OpsQuery
    )
}

/// A connection that has not logged in: every check answers 80.
struct Unauthenticated;

impl AccessPolicy for Unauthenticated {
    fn check(
        &self,
        _caller: &Caller,
        _permission: Permission,
        _namespace: Option<&str>,
        _set: Option<&[u8]>,
    ) -> Result<(), ResultCode> {
        Err(ResultCode::NotAuthenticated)
    }
}

/// The security crate's permission for what the data path asks.
pub fn security_permission(permission: Permission) -> bolide_security::Permission {
    use bolide_security::Permission as P;
    match permission {
        Permission::Read => P::Read,
        Permission::Write => P::Write,
        Permission::Delete => P::Delete,
        Permission::UdfApply => P::UdfApply,
        Permission::Query => P::Query,
        Permission::UdfQuery => P::UdfQuery,
        Permission::OpsQuery => P::OpsQuery,
        Permission::Truncate => P::Truncate,
        Permission::SindexAdmin => P::SindexAdmin,
        Permission::UdfAdmin => P::UdfAdmin,
        Permission::QueryAdmin => P::QueryAdmin,
        Permission::SetConfig => P::SetConfig,
        Permission::ServiceCtrl => P::ServiceCtrl,
        // A permission added to the data path before it is mapped here is
        // refused: nobody but user-admin's permission matches it.
        _ => P::UserAdmin,
    }
}

/// The name a refusal prints for `permission` (`requires permission '…'`).
pub fn permission_name(permission: Permission) -> &'static str {
    security_permission(permission).name()
}
