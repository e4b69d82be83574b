//! `get-config:context=security` and `set-config:context=security;…`: the
//! `security { }` settings a running node shows and changes (Aerospike's
//! dynamic ones: `session-ttl`, `privilege-refresh-period`, `tps-weight`
//! and the audit's `log { report-… }`). The info layer checks that the
//! caller holds `sys-admin` (permission `set-config`) first.
//!
//! ```text
//! set-config:context=security;session-ttl=600
//! set-config:context=security;log.report-authentication=true
//! set-config:context=security;log.report-data-op=true;namespace=test;set=demo
//! set-config:context=security;log.report-data-op-user=false;user=alice
//! ```
//!
//! `enable-quotas` and `default-password-file` are static in Aerospike and
//! here: changing them answers an error naming the setting.

use crate::audit::{AuditChange, Event};
use crate::config::{
    PRIVILEGE_REFRESH_PERIOD_SECONDS_MAX, PRIVILEGE_REFRESH_PERIOD_SECONDS_MIN,
    SESSION_TTL_SECONDS_MAX, SESSION_TTL_SECONDS_MIN, TPS_WEIGHT_MAX, TPS_WEIGHT_MIN,
};
use crate::Security;

/// The settings as `name=value` pairs joined by `;` (the data-operation
/// scopes as comma-separated `ns` or `ns:set`, roles and users).
pub fn config_text(security: &Security) -> String {
    let audit = security.audit.config();
    let scopes = audit
        .report_data_op
        .iter()
        .map(|(ns, set)| match set {
            Some(set) => format!("{ns}:{set}"),
            None => ns.clone(),
        })
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "enable-quotas={};privilege-refresh-period={};session-ttl={};tps-weight={};\
         log.report-authentication={};log.report-user-admin={};log.report-sys-admin={};\
         log.report-violation={};log.report-data-op={scopes};log.report-data-op-role={};\
         log.report-data-op-user={}",
        security.config().enable_quotas,
        security.privilege_refresh_period_seconds(),
        security.session_ttl_seconds(),
        security.tps_weight(),
        audit.report_authentication,
        audit.report_user_admin,
        audit.report_sys_admin,
        audit.report_violation,
        audit.report_data_op_role.join(","),
        audit.report_data_op_user.join(","),
    )
}

/// Parameters that name the scope of a `log.report-data-op…` change, not a
/// setting.
const SCOPE_PARAMETERS: [&str; 4] = ["namespace", "set", "role", "user"];

/// Applies one `set-config:context=security` change. `parameters` are the
/// command's pairs after `context=security`. Nothing changes on an error.
pub fn set_config(security: &Security, parameters: &[(&str, &str)]) -> Result<(), String> {
    let param = |name: &str| {
        parameters
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| *value)
    };
    let settings: Vec<(&str, &str)> = parameters
        .iter()
        .filter(|(key, _)| !SCOPE_PARAMETERS.contains(key))
        .copied()
        .collect();
    let (name, value) = match settings.as_slice() {
        [one] => *one,
        [] => return Err("no security setting given".to_owned()),
        _ => return Err("one security setting at a time".to_owned()),
    };
    // Aerospike names the audit settings with and without the `log.`
    // subcontext; both are accepted.
    let setting = name.strip_prefix("log.").unwrap_or(name);
    match setting {
        "session-ttl" => {
            let seconds = ranged(
                name,
                value,
                SESSION_TTL_SECONDS_MIN,
                SESSION_TTL_SECONDS_MAX,
            )?;
            security.set_session_ttl_seconds(seconds);
        }
        "privilege-refresh-period" => {
            let seconds = ranged(
                name,
                value,
                PRIVILEGE_REFRESH_PERIOD_SECONDS_MIN,
                PRIVILEGE_REFRESH_PERIOD_SECONDS_MAX,
            )?;
            security.set_privilege_refresh_period_seconds(seconds);
        }
        "tps-weight" => {
            let weight = ranged(name, value, TPS_WEIGHT_MIN, TPS_WEIGHT_MAX)?;
            security.set_tps_weight(weight);
        }
        "enable-quotas" | "default-password-file" | "enable-security" => {
            return Err(format!(
                "{name} is not dynamic (set it in security {{ }} and restart)"
            ))
        }
        "report-authentication" | "report-user-admin" | "report-sys-admin" | "report-violation" => {
            let event = match setting {
                "report-authentication" => Event::Authentication,
                "report-user-admin" => Event::UserAdmin,
                "report-sys-admin" => Event::SysAdmin,
                _ => Event::Violation,
            };
            security
                .audit
                .set(&AuditChange::Flag(event, boolean(name, value)?))?;
        }
        "report-data-op" => {
            let on = boolean(name, value)?;
            let namespace = param("namespace")
                .filter(|ns| !ns.is_empty())
                .ok_or_else(|| format!("{name} needs namespace="))?;
            let set = param("set").filter(|set| !set.is_empty());
            security.audit.set(&AuditChange::DataOp {
                namespace: namespace.to_owned(),
                set: set.map(str::to_owned),
                on,
            })?;
        }
        "report-data-op-role" => {
            let on = boolean(name, value)?;
            let role = param("role")
                .filter(|role| !role.is_empty())
                .ok_or_else(|| format!("{name} needs role="))?;
            security.audit.set(&AuditChange::DataOpRole {
                role: role.to_owned(),
                on,
            })?;
        }
        "report-data-op-user" => {
            let on = boolean(name, value)?;
            let user = param("user")
                .filter(|user| !user.is_empty())
                .ok_or_else(|| format!("{name} needs user="))?;
            security.audit.set(&AuditChange::DataOpUser {
                user: user.to_owned(),
                on,
            })?;
        }
        _ => return Err(format!("unknown security setting {name}")),
    }
    Ok(())
}

fn ranged(name: &str, value: &str, min: u32, max: u32) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{name} must be a number from {min} to {max}")),
    }
}

fn boolean(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "yes" => Ok(true),
        "false" | "no" => Ok(false),
        _ => Err(format!("{name} must be true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SecurityConfig;

    fn node() -> Security {
        Security::open(SecurityConfig::default(), None).expect("open")
    }

    #[test]
    fn dynamic_settings_change_and_show() {
        let security = node();
        set_config(&security, &[("session-ttl", "600")]).expect("ttl");
        assert_eq!(security.session_ttl_seconds(), 600);
        set_config(&security, &[("privilege-refresh-period", "60")]).expect("period");
        set_config(&security, &[("tps-weight", "5")]).expect("weight");
        set_config(&security, &[("log.report-violation", "true")]).expect("flag");
        set_config(&security, &[("report-user-admin", "true")]).expect("flag without log.");
        set_config(
            &security,
            &[
                ("log.report-data-op", "true"),
                ("namespace", "test"),
                ("set", "demo"),
            ],
        )
        .expect("scope");
        set_config(
            &security,
            &[("log.report-data-op-user", "true"), ("user", "alice")],
        )
        .expect("user");
        let text = config_text(&security);
        for pair in [
            "enable-quotas=false",
            "privilege-refresh-period=60",
            "session-ttl=600",
            "tps-weight=5",
            "log.report-authentication=false",
            "log.report-user-admin=true",
            "log.report-violation=true",
            "log.report-data-op=test:demo",
            "log.report-data-op-user=alice",
        ] {
            assert!(text.split(';').any(|p| p == pair), "{pair} not in {text}");
        }
    }

    #[test]
    fn bad_changes_name_the_setting_and_change_nothing() {
        let security = node();
        let before = config_text(&security);
        for (parameters, words) in [
            (
                vec![("session-ttl", "119")],
                "session-ttl must be a number from 120",
            ),
            (vec![("session-ttl", "x")], "session-ttl must be"),
            (vec![("tps-weight", "21")], "tps-weight must be"),
            (
                vec![("enable-quotas", "true")],
                "enable-quotas is not dynamic",
            ),
            (
                vec![("log.report-violation", "maybe")],
                "must be true or false",
            ),
            (vec![("log.report-data-op", "true")], "needs namespace="),
            (vec![("log.report-data-op-role", "true")], "needs role="),
            (vec![("bogus", "1")], "unknown security setting bogus"),
            (vec![], "no security setting"),
            (
                vec![("session-ttl", "600"), ("tps-weight", "3")],
                "one security setting at a time",
            ),
        ] {
            let error = set_config(&security, &parameters).expect_err("refused");
            assert!(error.contains(words), "{parameters:?}: {error}");
        }
        assert_eq!(config_text(&security), before);
    }
}
