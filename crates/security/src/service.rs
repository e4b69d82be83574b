//! A secured node's access control: logins and sessions, the admin
//! commands, and the checks every request passes.
//!
//! A connection starts without a [`Session`]. LOGIN (user and password
//! hash) or AUTHENTICATE (user and session token) gives it one; from then
//! on each request is checked against the session's access: the union of
//! its user's roles' privileges, their quotas and allowlists. Access is
//! resolved once and kept with the session; any change to users or roles
//! bumps a generation, and the next check of every session re-resolves, so
//! a revoked role or a dropped user takes effect on open connections at
//! their next request.

use crate::allowlist::{self, Network};
use crate::audit::{Audit, Event};
use crate::catalog::{
    role_key, role_value, user_key, user_value, Catalog, Entry, EntryError, Role, User, ROLES_MAX,
    ROLE_PRIVILEGES_MAX, USERS_MAX, USER_ROLES_MAX,
};
use crate::config::SecurityConfig;
use crate::limits::{LoginBrake, Meter};
use crate::needs::{info_needs, Operation};
use crate::password::{client_hash, StoredPassword, NOPASSWORD_HASH};
use crate::privilege::{Grants, Needs, Permission, Privilege, PrivilegeKind};
use bolide_types::ResultCode;
use bolide_wire::admin::{
    append_login, append_result, AdminRequest, QueryStream, RoleRecord, UserRecord, WirePrivilege,
};
use bolide_wire::info::InfoCommand;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Wall-clock milliseconds since 1970 (injectable for tests).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Quota meters and open connections of one user.
#[derive(Debug, Default)]
pub struct UserMeters {
    reads: Meter,
    writes: Meter,
    connections: AtomicU32,
}

/// What a session may do, resolved from its user's roles.
#[derive(Debug, Default)]
pub struct Access {
    pub grants: Grants,
    pub roles: BTreeSet<String>,
    /// Records per second; 0: no limit.
    pub read_quota: u32,
    pub write_quota: u32,
    /// None: any address (no role has an allowlist).
    pub networks: Option<Vec<Network>>,
}

impl Access {
    fn resolve(catalog: &Catalog, user: &User) -> Access {
        let mut access = Access {
            roles: user.roles.clone(),
            ..Access::default()
        };
        let mut networks: Vec<Network> = Vec::new();
        let mut any_allowlist = false;
        for name in &user.roles {
            let Some(role) = catalog.any_role(name) else {
                continue;
            };
            for privilege in &role.privileges {
                access.grants.add(privilege);
            }
            // A user's quota is the largest its roles set (0 sets none).
            access.read_quota = access.read_quota.max(role.read_quota);
            access.write_quota = access.write_quota.max(role.write_quota);
            if !role.whitelist.is_empty() {
                any_allowlist = true;
                networks.extend(role.whitelist.iter().filter_map(|e| Network::parse(e)));
            }
        }
        if any_allowlist {
            access.networks = Some(networks);
        }
        access
    }

    /// Whether `client` may log in (any of the roles' allowlists admits it).
    pub fn admits(&self, client: SocketAddr) -> bool {
        self.networks
            .as_ref()
            .is_none_or(|networks| networks.iter().any(|n| n.contains(client.ip())))
    }
}

#[derive(Debug)]
struct Resolved {
    generation: u64,
    /// None: the user is gone (dropped, or recreated with a new epoch).
    access: Option<Arc<Access>>,
}

/// An authenticated connection's identity.
#[derive(Debug)]
pub struct Session {
    user: Arc<str>,
    epoch: u64,
    client: SocketAddr,
    resolved: RwLock<Resolved>,
    meters: Arc<UserMeters>,
}

impl Session {
    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn client(&self) -> SocketAddr {
        self.client
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.meters.connections.fetch_sub(1, Relaxed);
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub result: ResultCode,
    /// The permission missing, for a role violation.
    pub permission: Option<Permission>,
}

impl Refusal {
    fn new(result: ResultCode) -> Refusal {
        Refusal {
            result,
            permission: None,
        }
    }

    /// The info protocol's error for the refusal: `ERROR:80:not
    /// authenticated`, `ERROR:81:role violation - requires permission
    /// 'truncate'`, …
    pub fn info_error(&self) -> String {
        let code = self.result.as_u8();
        match (self.result, self.permission) {
            (ResultCode::RoleViolation, Some(permission)) => format!(
                "ERROR:{code}:role violation - requires permission '{}'",
                permission.name()
            ),
            (ResultCode::NotAuthenticated, _) => format!("ERROR:{code}:not authenticated"),
            (ResultCode::QuotaExceeded, _) => format!("ERROR:{code}:quota exceeded"),
            (ResultCode::NotWhitelisted, _) => format!("ERROR:{code}:not whitelisted"),
            _ => format!("ERROR:{code}:security refusal"),
        }
    }
}

/// Security statistics (relaxed atomics).
#[derive(Debug, Default)]
pub struct Counters {
    pub logins: AtomicU64,
    pub login_failures: AtomicU64,
    /// Logins refused without a look because the address failed too often.
    pub logins_held_off: AtomicU64,
    pub authentications: AtomicU64,
    pub authentication_failures: AtomicU64,
    pub not_authenticated: AtomicU64,
    pub role_violations: AtomicU64,
    pub not_allowlisted: AtomicU64,
    pub quota_exceeded: AtomicU64,
    pub admin_commands: AtomicU64,
}

/// A failed admin command: the result code and why (for the log).
type Fail = (ResultCode, &'static str);

/// How a LOGIN proves who it is.
enum Login<'a> {
    /// USER and CREDENTIAL (the client's password hash).
    Password { user: &'a str, credential: &'a [u8] },
    /// No fields (PKI): the user the connection's client certificate
    /// names, if it presented one.
    Certificate(Option<&'a str>),
    /// Some but not all of USER and CREDENTIAL.
    Incomplete(Option<&'a str>),
}

/// A secured node's access control.
pub struct Security {
    config: SecurityConfig,
    session_ttl_seconds: AtomicU32,
    privilege_refresh_period_seconds: AtomicU32,
    tps_weight: AtomicU32,
    catalog: RwLock<Catalog>,
    /// Bumped on every change to the catalog.
    generation: AtomicU64,
    file: Option<PathBuf>,
    brake: Mutex<LoginBrake>,
    meters: Mutex<HashMap<String, Arc<UserMeters>>>,
    clock: Clock,
    /// PBKDF2 rounds for passwords set from now on.
    password_iterations: u32,
    pub audit: Audit,
    pub counters: Counters,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("config", &self.config)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// The wall clock as the kernel last ticked it (`CLOCK_REALTIME_COARSE`:
/// a few milliseconds' resolution, no hardware read), which is all that
/// quotas (whole seconds), session tokens and login brakes need: the
/// quota meter reads it on every request of a user with quotas.
fn wall_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    now.tv_sec.max(0) as u64 * 1000 + now.tv_nsec.max(0) as u64 / 1_000_000
}

impl Security {
    /// Opens the node's access control: the catalog kept in
    /// `work_directory` if there is one, else a new cluster's (the user
    /// `admin`), written there at once.
    pub fn open(config: SecurityConfig, work_directory: Option<&Path>) -> Result<Security, String> {
        Security::with_clock(config, work_directory, Arc::new(wall_ms))
    }

    /// A node holding `entries` (as another node sent them), kept in memory
    /// only.
    pub fn from_entries(
        config: SecurityConfig,
        entries: Vec<Entry>,
        clock: Clock,
    ) -> Result<Security, String> {
        let catalog = Catalog::from_entries(entries).map_err(|error| error.to_string())?;
        Security::new(config, catalog, None, clock)
    }

    fn new(
        config: SecurityConfig,
        catalog: Catalog,
        file: Option<PathBuf>,
        clock: Clock,
    ) -> Result<Security, String> {
        let audit = Audit::open(config.audit.clone())?;
        Ok(Security {
            session_ttl_seconds: AtomicU32::new(config.session_ttl_seconds),
            privilege_refresh_period_seconds: AtomicU32::new(
                config.privilege_refresh_period_seconds,
            ),
            tps_weight: AtomicU32::new(config.tps_weight),
            config,
            catalog: RwLock::new(catalog),
            generation: AtomicU64::new(1),
            file,
            brake: Mutex::new(LoginBrake::default()),
            meters: Mutex::new(HashMap::new()),
            clock,
            password_iterations: crate::password::ITERATIONS,
            audit,
            counters: Counters::default(),
        })
    }

    pub fn with_clock(
        config: SecurityConfig,
        work_directory: Option<&Path>,
        clock: Clock,
    ) -> Result<Security, String> {
        let file = work_directory.map(crate::file::path_in);
        let stored = match &file {
            Some(path) => crate::file::read(path)?,
            None => None,
        };
        let catalog = match stored {
            Some(entries) => {
                Catalog::from_entries(entries).map_err(|error| format!("{error} (in {file:?})"))?
            }
            None => {
                let admin_hash = match &config.default_password_file {
                    None => client_hash("admin"),
                    Some(path) => client_hash(&read_password_file(path)?),
                };
                let catalog = Catalog::bootstrap(&admin_hash, clock());
                if let Some(path) = &file {
                    crate::file::write(path, catalog.entries())
                        .map_err(|error| format!("{}: {error}", path.display()))?;
                }
                catalog
            }
        };
        Security::new(config, catalog, file, clock)
    }

    /// Fewer PBKDF2 rounds for passwords set from now on (at least
    /// `password::ITERATIONS_MIN`): for the fuzz target, whose inputs set
    /// passwords by the dozen. A node always uses the default.
    #[must_use]
    pub fn with_password_iterations(mut self, iterations: u32) -> Security {
        self.password_iterations = iterations;
        self
    }

    pub fn config(&self) -> &SecurityConfig {
        &self.config
    }

    pub fn session_ttl_seconds(&self) -> u32 {
        self.session_ttl_seconds.load(Relaxed)
    }

    /// `session-ttl` is dynamic: sessions from later logins get it.
    pub fn set_session_ttl_seconds(&self, seconds: u32) {
        self.session_ttl_seconds.store(seconds, Relaxed);
    }

    pub fn privilege_refresh_period_seconds(&self) -> u32 {
        self.privilege_refresh_period_seconds.load(Relaxed)
    }

    /// `privilege-refresh-period` is dynamic (kept and shown; Bolide
    /// applies user and role changes at once).
    pub fn set_privilege_refresh_period_seconds(&self, seconds: u32) {
        self.privilege_refresh_period_seconds
            .store(seconds, Relaxed);
    }

    pub fn tps_weight(&self) -> u32 {
        self.tps_weight.load(Relaxed)
    }

    /// `tps-weight` is dynamic (kept and shown; quotas count whole
    /// seconds).
    pub fn set_tps_weight(&self, weight: u32) {
        self.tps_weight.store(weight, Relaxed);
    }

    fn now_ms(&self) -> u64 {
        (self.clock)()
    }

    // -----------------------------------------------------------------
    // The admin protocol.

    /// Answers one admin message (its body, after the proto header) from
    /// `client` on a connection whose session is `session`, appending the
    /// reply to `out`. Returns the entries the command changed, which the
    /// caller shares with the rest of the cluster.
    pub fn admin(
        &self,
        session: &mut Option<Arc<Session>>,
        client: SocketAddr,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Vec<Entry> {
        self.admin_from(session, client, None, body, out)
    }

    /// [`Security::admin`] on a connection whose client presented a
    /// certificate (mutual TLS) naming `certificate_user` (its subject's
    /// common name): a LOGIN without fields (PKI) logs in as that user.
    pub fn admin_from(
        &self,
        session: &mut Option<Arc<Session>>,
        client: SocketAddr,
        certificate_user: Option<&str>,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Vec<Entry> {
        self.counters.admin_commands.fetch_add(1, Relaxed);
        // A connection without a session may only log in: anything else
        // is refused before its fields are read, so no other command's
        // decoding is reachable (or probed) without a login.
        if session.is_none() {
            if let Some(&code) = body.get(2) {
                if code != bolide_wire::admin::command::LOGIN
                    && code != bolide_wire::admin::command::AUTHENTICATE
                {
                    self.counters.not_authenticated.fetch_add(1, Relaxed);
                    self.audit.log(
                        Event::Violation,
                        "",
                        Some(client),
                        "admin command",
                        "",
                        ResultCode::NotAuthenticated.as_u8(),
                    );
                    append_result(out, ResultCode::NotAuthenticated);
                    return Vec::new();
                }
            }
        }
        let request = match AdminRequest::decode(body) {
            Ok(request) => request,
            Err(reject) => {
                tracing::debug!(%client, reason = reject.reason, "admin message refused");
                append_result(out, reject.result);
                return Vec::new();
            }
        };
        match request {
            AdminRequest::Login {
                user, credential, ..
            } => {
                let how = match (user, credential) {
                    (Some(user), Some(credential)) => Login::Password { user, credential },
                    (None, None) => Login::Certificate(certificate_user),
                    _ => Login::Incomplete(user),
                };
                self.login(session, client, how, out);
                Vec::new()
            }
            AdminRequest::Authenticate {
                user,
                token,
                credential,
            } => {
                self.authenticate(session, client, user, token, credential, out);
                Vec::new()
            }
            request => {
                let Some(caller) = session.clone() else {
                    self.counters.not_authenticated.fetch_add(1, Relaxed);
                    self.audit.log(
                        Event::Violation,
                        "",
                        Some(client),
                        request.name(),
                        "",
                        ResultCode::NotAuthenticated.as_u8(),
                    );
                    append_result(out, ResultCode::NotAuthenticated);
                    return Vec::new();
                };
                let name = request.name();
                let detail = admin_detail(&request);
                let query = matches!(
                    request,
                    AdminRequest::QueryUsers { .. } | AdminRequest::QueryRoles { .. }
                );
                let start = out.len();
                let result = self.command(&caller, request, out);
                let (code, changes) = match result {
                    Ok(changes) => {
                        if !query {
                            append_result(out, ResultCode::Ok);
                        }
                        (ResultCode::Ok, changes)
                    }
                    Err((code, reason)) => {
                        out.truncate(start);
                        append_result(out, code);
                        tracing::debug!(%client, command = name, reason, code = code.as_u8(), "admin command refused");
                        (code, Vec::new())
                    }
                };
                if code == ResultCode::RoleViolation || code == ResultCode::NotAuthenticated {
                    self.audit.log(
                        Event::Violation,
                        caller.user(),
                        Some(client),
                        name,
                        &detail,
                        code.as_u8(),
                    );
                }
                if !query {
                    self.audit.log(
                        Event::UserAdmin,
                        caller.user(),
                        Some(client),
                        name,
                        &detail,
                        code.as_u8(),
                    );
                }
                changes
            }
        }
    }

    /// Logs `user` in with a clear password (the Redis port's AUTH): the
    /// same checks as a LOGIN (failed-login brake, allowlist, audit), on the
    /// hash an Aerospike client would send. Costs a bcrypt hash.
    pub fn login_password(
        &self,
        client: SocketAddr,
        user: &str,
        password: &[u8],
    ) -> Result<Arc<Session>, ResultCode> {
        let Ok(password) = std::str::from_utf8(password) else {
            return Err(ResultCode::InvalidPassword);
        };
        let credential = crate::password::client_hash(password);
        let result = self
            .check_password(client, user, credential.as_bytes())
            .and_then(|found| self.session_for(&found, client));
        match result {
            Ok(session) => {
                self.counters.logins.fetch_add(1, Relaxed);
                self.audit
                    .log(Event::Authentication, user, Some(client), "login", "", 0);
                Ok(session)
            }
            Err((code, reason)) => {
                self.counters.login_failures.fetch_add(1, Relaxed);
                self.authentication_failed(user, client, "login", reason, code);
                Err(code)
            }
        }
    }

    fn login(
        &self,
        session: &mut Option<Arc<Session>>,
        client: SocketAddr,
        how: Login<'_>,
        out: &mut Vec<u8>,
    ) {
        let (name, action, result) = match how {
            Login::Password { user, credential } => {
                (user, "login", self.check_password(client, user, credential))
            }
            Login::Certificate(user) => (
                user.unwrap_or(""),
                "pki-login",
                self.check_certificate_user(user),
            ),
            Login::Incomplete(user) => (
                user.unwrap_or(""),
                "login",
                Err((
                    ResultCode::InvalidCredential,
                    "login without user and credential",
                )),
            ),
        };
        let result = result.and_then(|user| {
            let ttl = self.session_ttl_seconds();
            let expires_s = self.now_ms() / 1000 + u64::from(ttl);
            let token = {
                let catalog = self.catalog.read();
                catalog
                    .session_key()
                    .map(|key| key.sign(&user.name, user.epoch, expires_s))
            };
            let token = token.ok_or((ResultCode::IllegalState, "no session key"))?;
            let new = self.session_for(&user, client)?;
            Ok((new, token, ttl))
        });
        match result {
            Ok((new, token, ttl)) => {
                self.counters.logins.fetch_add(1, Relaxed);
                *session = Some(new);
                append_login(out, &token, ttl);
                self.audit
                    .log(Event::Authentication, name, Some(client), action, "", 0);
            }
            Err((code, reason)) => {
                self.counters.login_failures.fetch_add(1, Relaxed);
                append_result(out, code);
                self.authentication_failed(name, client, action, reason, code);
            }
        }
    }

    /// PKI login: the user the client's certificate names (its subject's
    /// common name), which must exist. Every user may log in this way,
    /// those created without a password (`nopassword`) only this way. The
    /// TLS handshake already checked the certificate (the listener's CA,
    /// dates, `cert-blacklist`, `tls-authenticate-client`), so there is
    /// no password to guess and no brake.
    fn check_certificate_user(&self, user: Option<&str>) -> Result<User, Fail> {
        let Some(name) = user else {
            return Err((
                ResultCode::InvalidCredential,
                "certificate login without a client certificate (it needs mutual TLS: a TLS \
                 port whose tls-authenticate-client is not false)",
            ));
        };
        if name.is_empty() {
            return Err((
                ResultCode::InvalidCredential,
                "certificate login with a client certificate without a common name",
            ));
        }
        self.catalog
            .read()
            .user(name)
            .cloned()
            .ok_or((ResultCode::InvalidUser, "no user named by the certificate"))
    }

    /// Checks a password hash (the brake first), returning the user.
    fn check_password(
        &self,
        client: SocketAddr,
        name: &str,
        credential: &[u8],
    ) -> Result<User, Fail> {
        let now_s = self.now_ms() / 1000;
        if self.brake.lock().held(client.ip(), name, now_s) {
            self.counters.logins_held_off.fetch_add(1, Relaxed);
            return Err((
                ResultCode::InvalidPassword,
                "too many failed logins of this user from this address: held off",
            ));
        }
        let user = self.catalog.read().user(name).cloned();
        let verified = match &user {
            None => Err((ResultCode::InvalidUser, "no such user")),
            Some(User { password: None, .. }) => Err((
                ResultCode::InvalidPassword,
                "password login refused for a PKI user",
            )),
            Some(User {
                password: Some(stored),
                ..
            }) => {
                if stored.verify(credential) {
                    Ok(())
                } else {
                    Err((ResultCode::InvalidPassword, "wrong password"))
                }
            }
        };
        match verified {
            Ok(()) => {
                self.brake.lock().succeeded(client.ip(), name);
                user.ok_or((ResultCode::InvalidUser, "no such user"))
            }
            Err(fail) => {
                if self.brake.lock().failed(client.ip(), name, now_s) {
                    tracing::warn!(
                        %client,
                        user = name,
                        seconds = crate::limits::HOLD_OFF_SECONDS,
                        "too many failed logins of this user from this address: holding it off"
                    );
                }
                Err(fail)
            }
        }
    }

    fn authenticate(
        &self,
        session: &mut Option<Arc<Session>>,
        client: SocketAddr,
        user: Option<&str>,
        token: Option<&[u8]>,
        credential: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) {
        let name = user.unwrap_or("");
        let result = match (token, credential) {
            (Some(token), _) => self.check_token(user, token),
            // Legacy tools authenticate each socket with the password hash.
            (None, Some(credential)) => match user {
                Some(user) => self.check_password(client, user, credential),
                None => Err((ResultCode::InvalidUser, "no user")),
            },
            (None, None) => Err((ResultCode::InvalidCredential, "no token")),
        };
        match result.and_then(|user| self.session_for(&user, client)) {
            Ok(new) => {
                self.counters.authentications.fetch_add(1, Relaxed);
                *session = Some(new);
                append_result(out, ResultCode::Ok);
                self.audit.log(
                    Event::Authentication,
                    name,
                    Some(client),
                    "authenticate",
                    "",
                    0,
                );
            }
            Err((code, reason)) => {
                self.counters.authentication_failures.fetch_add(1, Relaxed);
                append_result(out, code);
                self.authentication_failed(name, client, "authenticate", reason, code);
            }
        }
    }

    fn authentication_failed(
        &self,
        user: &str,
        client: SocketAddr,
        action: &str,
        reason: &'static str,
        code: ResultCode,
    ) {
        tracing::info!(%client, user, action, reason, code = code.as_u8(), "authentication failed");
        self.audit.log(
            Event::Authentication,
            user,
            Some(client),
            action,
            reason,
            code.as_u8(),
        );
        if code == ResultCode::NotWhitelisted {
            self.audit.log(
                Event::Violation,
                user,
                Some(client),
                action,
                reason,
                code.as_u8(),
            );
        }
    }

    /// The user a session token stands for: 65 if it is not one of ours
    /// (or names another user, or a user since dropped or reset), 66 if it
    /// has expired.
    fn check_token(&self, user: Option<&str>, token: &[u8]) -> Result<User, Fail> {
        let catalog = self.catalog.read();
        let claims = catalog
            .session_keys()
            .find_map(|key| key.open(token))
            .ok_or((ResultCode::InvalidCredential, "bad session token"))?;
        if user.is_some_and(|user| user != claims.user) {
            return Err((
                ResultCode::InvalidCredential,
                "session token of another user",
            ));
        }
        if self.now_ms() / 1000 >= claims.expires_s {
            return Err((ResultCode::ExpiredSession, "session expired"));
        }
        match catalog.user(claims.user) {
            Some(user) if user.epoch == claims.epoch => Ok(user.clone()),
            _ => Err((
                ResultCode::InvalidCredential,
                "session of a dropped or reset user",
            )),
        }
    }

    /// A new session for `user` from `client`, if its roles' allowlists
    /// admit the address.
    fn session_for(&self, user: &User, client: SocketAddr) -> Result<Arc<Session>, Fail> {
        let generation = self.generation.load(Relaxed);
        let access = Access::resolve(&self.catalog.read(), user);
        if !access.admits(client) {
            self.counters.not_allowlisted.fetch_add(1, Relaxed);
            return Err((ResultCode::NotWhitelisted, "address not on the allowlist"));
        }
        let meters = self.meters_of(&user.name);
        meters.connections.fetch_add(1, Relaxed);
        Ok(Arc::new(Session {
            user: Arc::from(user.name.as_str()),
            epoch: user.epoch,
            client,
            resolved: RwLock::new(Resolved {
                generation,
                access: Some(Arc::new(access)),
            }),
            meters,
        }))
    }

    fn meters_of(&self, user: &str) -> Arc<UserMeters> {
        let mut meters = self.meters.lock();
        if let Some(existing) = meters.get(user) {
            return existing.clone();
        }
        // Forget users nobody is connected as (dropped users, old names).
        if meters.len() >= USERS_MAX {
            meters.retain(|_, m| Arc::strong_count(m) > 1);
        }
        let new = Arc::new(UserMeters::default());
        meters.insert(user.to_owned(), new.clone());
        new
    }

    /// One admin command (not LOGIN or AUTHENTICATE) by `caller`. Query
    /// commands write their stream to `out`; the others leave the reply
    /// to the caller.
    fn command(
        &self,
        caller: &Session,
        request: AdminRequest<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Vec<Entry>, Fail> {
        let access = self
            .access(caller)
            .ok_or((ResultCode::NotAuthenticated, "the session's user is gone"))?;
        let user_admin = access.grants.anywhere(Permission::UserAdmin);
        let require_user_admin = || {
            if user_admin {
                Ok(())
            } else {
                self.counters.role_violations.fetch_add(1, Relaxed);
                Err((ResultCode::RoleViolation, "needs user-admin"))
            }
        };
        match request {
            AdminRequest::QueryUsers { user } => {
                if user != Some(caller.user()) {
                    require_user_admin()?;
                }
                self.query_users(user, out)?;
                Ok(Vec::new())
            }
            AdminRequest::QueryRoles { role } => {
                if !role.is_some_and(|role| access.roles.contains(role)) {
                    require_user_admin()?;
                }
                self.query_roles(role, out)?;
                Ok(Vec::new())
            }
            AdminRequest::ChangePassword {
                user,
                old_password,
                password,
            } => {
                if user == caller.user() {
                    self.change_own_password(user, old_password, password)
                } else {
                    // Another user's: an administrator's reset (the old
                    // password sent is the caller's own).
                    require_user_admin()?;
                    self.set_password(user, password)
                }
            }
            request => {
                require_user_admin()?;
                self.user_admin_command(request)
            }
        }
    }

    fn user_admin_command(&self, request: AdminRequest<'_>) -> Result<Vec<Entry>, Fail> {
        match request {
            AdminRequest::CreateUser {
                user,
                password,
                roles,
            } => self.create_user(user, password, &roles),
            AdminRequest::DropUser { user } => self.edit(|catalog, changes| {
                catalog
                    .user(user)
                    .ok_or((ResultCode::InvalidUser, "no such user"))?;
                changes.push((user_key(user), String::new(), true));
                Ok(())
            }),
            AdminRequest::SetPassword { user, password } => self.set_password(user, password),
            AdminRequest::GrantRoles { user, roles } => self.edit_user(user, |catalog, edited| {
                check_roles_exist(catalog, &roles)?;
                edited.roles.extend(roles.iter().map(|r| (*r).to_owned()));
                if edited.roles.len() > USER_ROLES_MAX {
                    return Err((ResultCode::InvalidRole, "too many roles"));
                }
                Ok(())
            }),
            AdminRequest::RevokeRoles { user, roles } => self.edit_user(user, |catalog, edited| {
                check_roles_exist(catalog, &roles)?;
                for role in &roles {
                    edited.roles.remove(*role);
                }
                Ok(())
            }),
            AdminRequest::CreateRole {
                role,
                privileges,
                whitelist,
                read_quota,
                write_quota,
            } => self.create_role(role, &privileges, whitelist, read_quota, write_quota),
            AdminRequest::DropRole { role } => self.edit(|catalog, changes| {
                if PrivilegeKind::from_name(role).is_some() {
                    return Err((
                        ResultCode::InvalidRole,
                        "a predefined role cannot be dropped",
                    ));
                }
                catalog
                    .role(role)
                    .ok_or((ResultCode::InvalidRole, "no such role"))?;
                changes.push((role_key(role), String::new(), true));
                // Users lose the role too: a role created later under the
                // same name must not reach them.
                for user in catalog.users().filter(|u| u.roles.contains(role)) {
                    let mut edited = user.clone();
                    edited.roles.remove(role);
                    changes.push((user_key(&user.name), user_value(&edited), false));
                }
                Ok(())
            }),
            AdminRequest::GrantPrivileges { role, privileges } => {
                let privileges = parse_privileges(&privileges)?;
                self.edit_role(role, |edited| {
                    for privilege in privileges {
                        if !edited.privileges.contains(&privilege) {
                            edited.privileges.push(privilege);
                        }
                    }
                    if edited.privileges.len() > ROLE_PRIVILEGES_MAX {
                        return Err((ResultCode::InvalidPrivilege, "too many privileges"));
                    }
                    Ok(())
                })
            }
            AdminRequest::RevokePrivileges { role, privileges } => {
                let privileges = parse_privileges(&privileges)?;
                // Exact matches only; privileges the role lacks are no error.
                self.edit_role(role, |edited| {
                    edited.privileges.retain(|held| !privileges.contains(held));
                    Ok(())
                })
            }
            AdminRequest::SetWhitelist { role, whitelist } => {
                let whitelist = parse_whitelist(whitelist.as_deref().unwrap_or(&[]))?;
                self.edit_role(role, |edited| {
                    edited.whitelist = whitelist;
                    Ok(())
                })
            }
            AdminRequest::SetQuotas {
                role,
                read_quota,
                write_quota,
            } => {
                if !self.config.enable_quotas {
                    return Err((ResultCode::QuotasNotEnabled, "quotas are not enabled"));
                }
                self.edit_role(role, |edited| {
                    // Absent or 0xFFFFFFFF: unchanged; 0 removes the quota.
                    for (quota, slot) in [
                        (read_quota, &mut edited.read_quota),
                        (write_quota, &mut edited.write_quota),
                    ] {
                        if let Some(quota) = quota.filter(|q| *q != u32::MAX) {
                            *slot = quota;
                        }
                    }
                    Ok(())
                })
            }
            AdminRequest::Login { .. }
            | AdminRequest::Authenticate { .. }
            | AdminRequest::QueryUsers { .. }
            | AdminRequest::QueryRoles { .. }
            | AdminRequest::ChangePassword { .. } => Err((
                ResultCode::IllegalState,
                "not a user administration command",
            )),
        }
    }

    fn create_user(&self, user: &str, password: &[u8], roles: &[&str]) -> Result<Vec<Entry>, Fail> {
        // Hash before taking the lock: it costs milliseconds.
        let stored = if password == NOPASSWORD_HASH.as_bytes() {
            None
        } else {
            Some(StoredPassword::with_iterations(
                password,
                self.password_iterations,
            ))
        };
        self.edit(|catalog, changes| {
            if catalog.user(user).is_some() {
                return Err((ResultCode::UserAlreadyExists, "user exists"));
            }
            if catalog.user_count() >= USERS_MAX {
                return Err((ResultCode::IllegalState, "too many users"));
            }
            check_roles_exist(catalog, roles)?;
            let new = User {
                name: user.to_owned(),
                password: stored.clone(),
                roles: roles.iter().map(|r| (*r).to_owned()).collect(),
                epoch: crate::random_u64(),
            };
            if new.roles.len() > USER_ROLES_MAX {
                return Err((ResultCode::InvalidRole, "too many roles"));
            }
            changes.push((user_key(user), user_value(&new), false));
            Ok(())
        })
    }

    /// An administrator sets a password: the user's sessions end.
    fn set_password(&self, user: &str, password: &[u8]) -> Result<Vec<Entry>, Fail> {
        let stored = StoredPassword::with_iterations(password, self.password_iterations);
        self.edit_user(user, |_, edited| {
            if edited.password.is_none() {
                return Err((ResultCode::ForbiddenPassword, "a PKI user has no password"));
            }
            edited.password = Some(stored);
            edited.epoch = crate::random_u64();
            Ok(())
        })
    }

    /// A user changes its own password, proving the old one; its sessions
    /// go on (clients swap the hash they keep and carry on).
    fn change_own_password(
        &self,
        user: &str,
        old_password: &[u8],
        password: &[u8],
    ) -> Result<Vec<Entry>, Fail> {
        let current = self
            .catalog
            .read()
            .user(user)
            .cloned()
            .ok_or((ResultCode::InvalidUser, "no such user"))?;
        let stored = current
            .password
            .as_ref()
            .ok_or((ResultCode::ForbiddenPassword, "a PKI user has no password"))?;
        if !stored.verify(old_password) {
            return Err((ResultCode::InvalidPassword, "old password does not match"));
        }
        let new = StoredPassword::with_iterations(password, self.password_iterations);
        self.edit_user(user, |_, edited| {
            edited.password = Some(new);
            Ok(())
        })
    }

    fn create_role(
        &self,
        role: &str,
        privileges: &[WirePrivilege<'_>],
        whitelist: Option<Vec<&str>>,
        read_quota: Option<u32>,
        write_quota: Option<u32>,
    ) -> Result<Vec<Entry>, Fail> {
        let mut parsed = Vec::new();
        for privilege in parse_privileges(privileges)? {
            if !parsed.contains(&privilege) {
                parsed.push(privilege);
            }
        }
        if parsed.len() > ROLE_PRIVILEGES_MAX {
            return Err((ResultCode::InvalidPrivilege, "too many privileges"));
        }
        let whitelist = parse_whitelist(whitelist.as_deref().unwrap_or(&[]))?;
        // Clients send quota fields only when they set a quota; a zero (or
        // "unchanged") sets none and needs no quota support.
        let quota = |quota: Option<u32>| quota.filter(|q| *q != 0 && *q != u32::MAX);
        let (read_quota, write_quota) = (quota(read_quota), quota(write_quota));
        if (read_quota.is_some() || write_quota.is_some()) && !self.config.enable_quotas {
            return Err((ResultCode::QuotasNotEnabled, "quotas are not enabled"));
        }
        let new = Role {
            name: role.to_owned(),
            privileges: parsed,
            whitelist,
            read_quota: read_quota.unwrap_or(0),
            write_quota: write_quota.unwrap_or(0),
        };
        self.edit(|catalog, changes| {
            if catalog.role_exists(role) {
                return Err((ResultCode::RoleAlreadyExists, "role exists"));
            }
            if catalog.role_count() >= ROLES_MAX {
                return Err((ResultCode::IllegalState, "too many roles"));
            }
            changes.push((role_key(role), role_value(&new), false));
            Ok(())
        })
    }

    fn edit_user(
        &self,
        user: &str,
        change: impl FnOnce(&Catalog, &mut User) -> Result<(), Fail>,
    ) -> Result<Vec<Entry>, Fail> {
        self.edit(|catalog, changes| {
            let mut edited = catalog
                .user(user)
                .cloned()
                .ok_or((ResultCode::InvalidUser, "no such user"))?;
            change(catalog, &mut edited)?;
            changes.push((user_key(user), user_value(&edited), false));
            Ok(())
        })
    }

    fn edit_role(
        &self,
        role: &str,
        change: impl FnOnce(&mut Role) -> Result<(), Fail>,
    ) -> Result<Vec<Entry>, Fail> {
        self.edit(|catalog, changes| {
            if PrivilegeKind::from_name(role).is_some() {
                return Err((
                    ResultCode::InvalidRole,
                    "a predefined role cannot be changed",
                ));
            }
            let mut edited = catalog
                .role(role)
                .cloned()
                .ok_or((ResultCode::InvalidRole, "no such role"))?;
            change(&mut edited)?;
            changes.push((role_key(role), role_value(&edited), false));
            Ok(())
        })
    }

    /// Runs `build` on the catalog under its write lock; the (key, value,
    /// deleted) changes it lists are versioned, written to the node's file
    /// and only then put in force. Returns the new entries.
    fn edit(
        &self,
        build: impl FnOnce(&Catalog, &mut Vec<(String, String, bool)>) -> Result<(), Fail>,
    ) -> Result<Vec<Entry>, Fail> {
        let mut catalog = self.catalog.write();
        let mut changes = Vec::new();
        build(&catalog, &mut changes)?;
        let now_ms = self.now_ms();
        let mut next = catalog.clone();
        let mut entries = Vec::with_capacity(changes.len());
        for (key, value, deleted) in changes {
            let entry = next.next_entry(key, value, deleted, now_ms);
            next.set(entry.clone());
            entries.push(entry);
        }
        if let Some(path) = &self.file {
            if let Err(error) = crate::file::write(path, next.entries()) {
                tracing::error!(path = %path.display(), %error, "cannot write the security file: change refused");
                return Err((ResultCode::Unknown, "cannot write the security file"));
            }
        }
        *catalog = next;
        self.generation.fetch_add(1, Relaxed);
        Ok(entries)
    }

    fn query_users(&self, user: Option<&str>, out: &mut Vec<u8>) -> Result<(), Fail> {
        let catalog = self.catalog.read();
        let users: Vec<&User> = match user {
            Some(name) => vec![catalog
                .user(name)
                .ok_or((ResultCode::InvalidUser, "no such user"))?],
            None => catalog.users().collect(),
        };
        let now_s = self.now_ms() / 1000;
        let meters = self.meters.lock();
        let mut stream = QueryStream::new(out);
        for user in users {
            let access = Access::resolve(&catalog, user);
            let (reads, writes, connections) = meters.get(&user.name).map_or((0, 0, 0), |m| {
                (
                    m.reads.rate(now_s),
                    m.writes.rate(now_s),
                    m.connections.load(Relaxed),
                )
            });
            stream.user(&UserRecord {
                name: &user.name,
                roles: user.roles.iter().map(String::as_str).collect(),
                read_info: [access.read_quota, reads, 0, 0],
                write_info: [access.write_quota, writes, 0, 0],
                connections,
            });
        }
        stream.finish();
        Ok(())
    }

    fn query_roles(&self, role: Option<&str>, out: &mut Vec<u8>) -> Result<(), Fail> {
        let catalog = self.catalog.read();
        let roles = match role {
            Some(name) => vec![catalog
                .any_role(name)
                .ok_or((ResultCode::InvalidRole, "no such role"))?],
            None => catalog.all_roles(),
        };
        let mut stream = QueryStream::new(out);
        for role in &roles {
            stream.role(&RoleRecord {
                name: &role.name,
                privileges: role.privileges.iter().map(Privilege::to_wire).collect(),
                whitelist: role.whitelist.iter().map(String::as_str).collect(),
                read_quota: role.read_quota,
                write_quota: role.write_quota,
            });
        }
        stream.finish();
        Ok(())
    }

    // -----------------------------------------------------------------
    // Checks on data and info requests.

    /// The session's access, re-resolved if users or roles changed since
    /// it was last resolved; None if its user is gone.
    // PERF: hot path (every request): two atomic loads when nothing changed.
    pub fn access(&self, session: &Session) -> Option<Arc<Access>> {
        let generation = self.generation.load(Relaxed);
        {
            let resolved = session.resolved.read();
            if resolved.generation == generation {
                return resolved.access.clone();
            }
        }
        let access = {
            let catalog = self.catalog.read();
            catalog
                .user(&session.user)
                .filter(|user| user.epoch == session.epoch)
                .map(|user| Arc::new(Access::resolve(&catalog, user)))
        };
        let mut resolved = session.resolved.write();
        if generation >= resolved.generation {
            *resolved = Resolved {
                generation,
                access: access.clone(),
            };
        }
        access
    }

    /// Runs `f` on the session's access ([`Security::access`]); None if
    /// its user is gone.
    // PERF: hot path (every request): an atomic load and a read lock when
    // nothing changed, no reference count touched.
    fn with_access<R>(&self, session: &Session, f: impl FnOnce(&Access) -> R) -> Option<R> {
        let generation = self.generation.load(Relaxed);
        {
            let resolved = session.resolved.read();
            if resolved.generation == generation {
                return resolved.access.as_deref().map(f);
            }
        }
        self.access(session).as_deref().map(f)
    }

    /// Checks that `session` holds `needs` on `namespace` and `set`.
    pub fn check(
        &self,
        session: Option<&Session>,
        needs: Needs,
        namespace: &str,
        set: &str,
        action: &str,
    ) -> Result<(), Refusal> {
        self.checked(session, needs, namespace, set, action, |_, _| Ok(()))
    }

    /// [`Security::check`], then `then` with the session and the access
    /// it checked against.
    fn checked<R>(
        &self,
        session: Option<&Session>,
        needs: Needs,
        namespace: &str,
        set: &str,
        action: &str,
        then: impl FnOnce(&Session, &Access) -> Result<R, Refusal>,
    ) -> Result<R, Refusal> {
        let Some(session) = session else {
            return Err(self.not_authenticated("", None, action, namespace, set));
        };
        let checked = self.with_access(session, |access| {
            match access.grants.check(needs, namespace, set) {
                Ok(()) => then(session, access),
                Err(missing) => {
                    self.counters.role_violations.fetch_add(1, Relaxed);
                    self.violation(
                        session.user(),
                        Some(session.client),
                        action,
                        namespace,
                        set,
                        ResultCode::RoleViolation,
                    );
                    Err(Refusal {
                        result: ResultCode::RoleViolation,
                        permission: Some(missing),
                    })
                }
            }
        });
        checked.unwrap_or_else(|| {
            Err(self.not_authenticated(
                session.user(),
                Some(session.client),
                action,
                namespace,
                set,
            ))
        })
    }

    /// Counts and reports a request refused because nobody (or a user
    /// since dropped) is logged in.
    fn not_authenticated(
        &self,
        user: &str,
        client: Option<SocketAddr>,
        action: &str,
        namespace: &str,
        set: &str,
    ) -> Refusal {
        self.counters.not_authenticated.fetch_add(1, Relaxed);
        self.violation(
            user,
            client,
            action,
            namespace,
            set,
            ResultCode::NotAuthenticated,
        );
        Refusal::new(ResultCode::NotAuthenticated)
    }

    fn violation(
        &self,
        user: &str,
        client: Option<SocketAddr>,
        action: &str,
        namespace: &str,
        set: &str,
        code: ResultCode,
    ) {
        if self.audit.reports(Event::Violation) {
            let detail = scope_detail(namespace, set);
            self.audit.log(
                Event::Violation,
                user,
                client,
                action,
                &detail,
                code.as_u8(),
            );
        }
    }

    /// Checks a data operation of `records` records (a batch's rows, 1 for
    /// a single record, a scan or a query): the permission, then the
    /// user's read or write quota. Reports it to the audit trail when its
    /// scope is reported.
    pub fn check_operation(
        &self,
        session: Option<&Session>,
        operation: Operation,
        namespace: &str,
        set: &str,
        records: u32,
    ) -> Result<(), Refusal> {
        self.checked(
            session,
            operation.needs(),
            namespace,
            set,
            operation.name(),
            |session, access| {
                self.meter(
                    session,
                    access,
                    operation.is_read(),
                    operation.name(),
                    namespace,
                    set,
                    records,
                )
            },
        )
    }

    /// Checks one permission on `namespace` and `set` (the transaction
    /// layer's hook asks one at a time); a data permission also counts one
    /// record against the user's read or write quota.
    // PERF: hot path (every request and batch row of a secured connection).
    pub fn check_permission(
        &self,
        session: Option<&Session>,
        permission: Permission,
        namespace: &str,
        set: &str,
    ) -> Result<(), Refusal> {
        let is_read = match permission {
            Permission::Read | Permission::Query | Permission::UdfQuery => Some(true),
            Permission::Write
            | Permission::Delete
            | Permission::UdfApply
            | Permission::OpsQuery => Some(false),
            _ => None,
        };
        self.checked(
            session,
            Needs::of(permission),
            namespace,
            set,
            permission.name(),
            |session, access| match is_read {
                Some(is_read) => self.meter(
                    session,
                    access,
                    is_read,
                    permission.name(),
                    namespace,
                    set,
                    1,
                ),
                None => Ok(()),
            },
        )
    }

    /// Counts `records` against the session's read or write quota, and
    /// reports the operation when the audit trail reports its scope.
    #[expect(clippy::too_many_arguments, reason = "the check's context, passed on")]
    fn meter(
        &self,
        session: &Session,
        access: &Access,
        is_read: bool,
        action: &str,
        namespace: &str,
        set: &str,
        records: u32,
    ) -> Result<(), Refusal> {
        if self.config.enable_quotas {
            let now_s = self.now_ms() / 1000;
            let (meter, limit) = if is_read {
                (&session.meters.reads, access.read_quota)
            } else {
                (&session.meters.writes, access.write_quota)
            };
            if !meter.charge(now_s, records, limit) {
                self.counters.quota_exceeded.fetch_add(1, Relaxed);
                self.violation(
                    session.user(),
                    Some(session.client),
                    action,
                    namespace,
                    set,
                    ResultCode::QuotaExceeded,
                );
                return Err(Refusal::new(ResultCode::QuotaExceeded));
            }
        }
        if self.audit.reports(Event::DataOp)
            && self
                .audit
                .wants_data_op(session.user(), &access.roles, namespace, set)
        {
            self.audit.log(
                Event::DataOp,
                session.user(),
                Some(session.client),
                action,
                &scope_detail(namespace, set),
                0,
            );
        }
        Ok(())
    }

    /// Checks an info command: an authenticated caller, and the permission
    /// the command needs (reported as a sys-admin event when it needs one).
    pub fn check_info(
        &self,
        session: Option<&Session>,
        client: SocketAddr,
        command: &InfoCommand<'_>,
    ) -> Result<(), Refusal> {
        let needs = info_needs(command);
        let Some(session) = session else {
            self.counters.not_authenticated.fetch_add(1, Relaxed);
            self.violation(
                "",
                Some(client),
                "info request",
                "",
                "",
                ResultCode::NotAuthenticated,
            );
            return Err(Refusal::new(ResultCode::NotAuthenticated));
        };
        let Some(needs) = needs else {
            if self.access(session).is_none() {
                self.counters.not_authenticated.fetch_add(1, Relaxed);
                return Err(Refusal::new(ResultCode::NotAuthenticated));
            }
            return Ok(());
        };
        let result = self.check(
            Some(session),
            Needs::of(needs.permission),
            needs.namespace,
            needs.set,
            command.name,
        );
        if self.audit.reports(Event::SysAdmin) {
            let code = result.err().map_or(0, |refusal| refusal.result.as_u8());
            self.audit.log(
                Event::SysAdmin,
                session.user(),
                Some(client),
                command.name,
                command.text,
                code,
            );
        }
        result
    }

    // -----------------------------------------------------------------
    // The cluster.

    /// Every entry (what this node tells the cluster it holds).
    pub fn entries(&self) -> Vec<Entry> {
        self.catalog.read().entries().cloned().collect()
    }

    /// An entry from another node: taken if newer, then written to the
    /// node's file. Returns whether it changed anything.
    pub fn apply(&self, entry: Entry) -> Result<bool, EntryError> {
        let mut catalog = self.catalog.write();
        let mut next = catalog.clone();
        if !next.merge(entry)? {
            return Ok(false);
        }
        if let Some(path) = &self.file {
            if let Err(error) = crate::file::write(path, next.entries()) {
                // The cluster holds the entry and sends it again when this
                // node rejoins; refusing it here would split the cluster.
                tracing::error!(path = %path.display(), %error, "cannot write the security file");
            }
        }
        *catalog = next;
        self.generation.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// The statistics, as `name=value` pairs.
    pub fn statistics(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        let catalog = self.catalog.read();
        let (audit_lines, audit_write_errors) = self.audit.counts();
        vec![
            ("security_users", catalog.user_count() as u64),
            ("security_roles", catalog.role_count() as u64),
            ("security_logins", c.logins.load(Relaxed)),
            ("security_login_failures", c.login_failures.load(Relaxed)),
            ("security_logins_held_off", c.logins_held_off.load(Relaxed)),
            ("security_authentications", c.authentications.load(Relaxed)),
            (
                "security_authentication_failures",
                c.authentication_failures.load(Relaxed),
            ),
            (
                "security_not_authenticated",
                c.not_authenticated.load(Relaxed),
            ),
            ("security_role_violations", c.role_violations.load(Relaxed)),
            ("security_not_whitelisted", c.not_allowlisted.load(Relaxed)),
            ("security_quota_exceeded", c.quota_exceeded.load(Relaxed)),
            ("security_admin_commands", c.admin_commands.load(Relaxed)),
            ("security_audit_lines", audit_lines),
            ("security_audit_write_errors", audit_write_errors),
        ]
    }
}

fn read_password_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("default-password-file {}: {error}", path.display()))?;
    let password = text.lines().next().unwrap_or("").to_owned();
    if password.len() > 63 {
        return Err(format!(
            "default-password-file {}: the password is longer than 63 bytes",
            path.display()
        ));
    }
    Ok(password)
}

fn check_roles_exist(catalog: &Catalog, roles: &[&str]) -> Result<(), Fail> {
    if roles.iter().all(|role| catalog.role_exists(role)) {
        Ok(())
    } else {
        Err((ResultCode::InvalidRole, "no such role"))
    }
}

fn parse_privileges(privileges: &[WirePrivilege<'_>]) -> Result<Vec<Privilege>, Fail> {
    privileges
        .iter()
        .map(|p| {
            Privilege::from_wire(p.code, p.namespace, p.set)
                .map_err(|_| (ResultCode::InvalidPrivilege, "bad privilege"))
        })
        .collect()
}

fn parse_whitelist(entries: &[&str]) -> Result<Vec<String>, Fail> {
    if entries.len() > allowlist::ENTRIES_MAX {
        return Err((ResultCode::InvalidWhitelist, "too many allowlist entries"));
    }
    allowlist::parse_all(entries)
        .map_err(|_| (ResultCode::InvalidWhitelist, "bad allowlist entry"))?;
    Ok(entries.iter().map(|e| (*e).to_owned()).collect())
}

fn scope_detail(namespace: &str, set: &str) -> String {
    match (namespace.is_empty(), set.is_empty()) {
        (true, _) => String::new(),
        (false, true) => format!("ns={namespace}"),
        (false, false) => format!("ns={namespace} set={set}"),
    }
}

/// What the audit trail says about an admin command (never a password).
fn admin_detail(request: &AdminRequest<'_>) -> String {
    let privileges = |list: &[WirePrivilege<'_>]| {
        list.iter()
            .map(|p| match Privilege::from_wire(p.code, p.namespace, p.set) {
                Ok(privilege) => privilege.to_string(),
                Err(_) => format!("code-{}", p.code),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    match request {
        AdminRequest::CreateUser { user, roles, .. } => {
            format!("user={user} roles={}", roles.join(","))
        }
        AdminRequest::DropUser { user }
        | AdminRequest::SetPassword { user, .. }
        | AdminRequest::ChangePassword { user, .. } => format!("user={user}"),
        AdminRequest::GrantRoles { user, roles } | AdminRequest::RevokeRoles { user, roles } => {
            format!("user={user} roles={}", roles.join(","))
        }
        AdminRequest::QueryUsers { user } => user.map(|u| format!("user={u}")).unwrap_or_default(),
        AdminRequest::QueryRoles { role } => role.map(|r| format!("role={r}")).unwrap_or_default(),
        AdminRequest::CreateRole {
            role,
            privileges: list,
            whitelist,
            read_quota,
            write_quota,
        } => format!(
            "role={role} privileges={} whitelist={} read-quota={} write-quota={}",
            privileges(list),
            whitelist.as_deref().unwrap_or(&[]).join(","),
            read_quota.unwrap_or(0),
            write_quota.unwrap_or(0)
        ),
        AdminRequest::DropRole { role } => format!("role={role}"),
        AdminRequest::GrantPrivileges {
            role,
            privileges: list,
        }
        | AdminRequest::RevokePrivileges {
            role,
            privileges: list,
        } => {
            format!("role={role} privileges={}", privileges(list))
        }
        AdminRequest::SetWhitelist { role, whitelist } => format!(
            "role={role} whitelist={}",
            whitelist.as_deref().unwrap_or(&[]).join(",")
        ),
        AdminRequest::SetQuotas {
            role,
            read_quota,
            write_quota,
        } => format!(
            "role={role} read-quota={} write-quota={}",
            read_quota.map_or("-".to_owned(), |q| q.to_string()),
            write_quota.map_or("-".to_owned(), |q| q.to_string())
        ),
        AdminRequest::Login { .. } | AdminRequest::Authenticate { .. } => String::new(),
    }
}
