//! The `security { }` stanza's settings (parsed by the server's
//! configuration reader, which names the line and the directive of an
//! error).

use std::path::PathBuf;

pub const SESSION_TTL_SECONDS_DEFAULT: u32 = 86_400;
pub const SESSION_TTL_SECONDS_MIN: u32 = 120;
pub const SESSION_TTL_SECONDS_MAX: u32 = 864_000;
pub const PRIVILEGE_REFRESH_PERIOD_SECONDS_DEFAULT: u32 = 300;
pub const PRIVILEGE_REFRESH_PERIOD_SECONDS_MIN: u32 = 10;
pub const PRIVILEGE_REFRESH_PERIOD_SECONDS_MAX: u32 = 86_400;
pub const TPS_WEIGHT_DEFAULT: u32 = 2;
pub const TPS_WEIGHT_MIN: u32 = 2;
pub const TPS_WEIGHT_MAX: u32 = 20;

/// A secured node's settings. Present in the configuration = security on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityConfig {
    /// Role quotas (records per second) are accepted and enforced.
    pub enable_quotas: bool,
    /// How long a session token from LOGIN is good for.
    pub session_ttl_seconds: u32,
    /// Accepted for compatibility; Bolide applies user and role changes
    /// to open connections at once, not on a period.
    pub privilege_refresh_period_seconds: u32,
    /// Accepted for compatibility (Aerospike's weighting of the quota
    /// averages); Bolide counts whole seconds.
    pub tps_weight: u32,
    /// The first password of `admin` on a new cluster (the file's first
    /// line), instead of `admin`.
    pub default_password_file: Option<PathBuf>,
    pub audit: AuditConfig,
}

impl Default for SecurityConfig {
    fn default() -> SecurityConfig {
        SecurityConfig {
            enable_quotas: false,
            session_ttl_seconds: SESSION_TTL_SECONDS_DEFAULT,
            privilege_refresh_period_seconds: PRIVILEGE_REFRESH_PERIOD_SECONDS_DEFAULT,
            tps_weight: TPS_WEIGHT_DEFAULT,
            default_password_file: None,
            audit: AuditConfig::default(),
        }
    }
}

/// `security { log { … } }`: which events the audit trail reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditConfig {
    /// Logins and authentications, successful or not.
    pub report_authentication: bool,
    /// User and role administration (admin commands).
    pub report_user_admin: bool,
    /// Info commands that need a permission (set-config, truncate, …).
    pub report_sys_admin: bool,
    /// Refusals: not authenticated, role violation, not allowlisted, over
    /// quota.
    pub report_violation: bool,
    /// Data operations in these namespaces (and sets; None: every set).
    pub report_data_op: Vec<(String, Option<String>)>,
    /// Data operations by users holding these roles.
    pub report_data_op_role: Vec<String>,
    /// Data operations by these users.
    pub report_data_op_user: Vec<String>,
    /// Where audit lines go besides the node's log (target `audit`): a
    /// file of their own (`logging { file PATH { context audit info } }`).
    pub file: Option<PathBuf>,
}

impl AuditConfig {
    /// Whether any data operation is reported (so the data path can skip
    /// the audit altogether when none is).
    pub fn reports_data_ops(&self) -> bool {
        !self.report_data_op.is_empty()
            || !self.report_data_op_role.is_empty()
            || !self.report_data_op_user.is_empty()
    }
}
