//! The `security { }` stanza (Aerospike 5.7+: its presence turns access
//! control on):
//!
//! ```text
//! security {
//!     enable-quotas true
//!     session-ttl 86400
//!     privilege-refresh-period 300
//!     tps-weight 2
//!     default-password-file /etc/bolide/admin-password
//!     log {
//!         report-authentication true
//!         report-user-admin true
//!         report-sys-admin true
//!         report-violation true
//!         report-data-op test demo
//!         report-data-op-role auditor
//!         report-data-op-user alice
//!     }
//! }
//! ```

use super::{directives, ConfigError, Directive, Item};
use bolide_security::config::{
    PRIVILEGE_REFRESH_PERIOD_SECONDS_MAX, PRIVILEGE_REFRESH_PERIOD_SECONDS_MIN,
    SESSION_TTL_SECONDS_MAX, SESSION_TTL_SECONDS_MIN, TPS_WEIGHT_MAX, TPS_WEIGHT_MIN,
};
use bolide_security::{AuditConfig, SecurityConfig};
use std::path::PathBuf;

pub(super) fn parse(
    head: &Directive<'_>,
    items: &[Item<'_>],
) -> Result<SecurityConfig, ConfigError> {
    if !head.values.is_empty() {
        return Err(head.error("security takes no name: 'security {'"));
    }
    let mut config = SecurityConfig::default();
    for item in items {
        let directive = match item {
            Item::Directive(directive) => directive,
            Item::Block { head, items } => {
                match head.name {
                    "log" if head.values.is_empty() => config.audit = audit(items)?,
                    "ldap" => {
                        return Err(head.error("LDAP is not supported by Bolide (internal users only)"))
                    }
                    "syslog" => {
                        return Err(head.error(
                            "obsolete: send the audit trail to a logging sink with 'context audit info'",
                        ))
                    }
                    _ => return Err(head.error("unknown block in security context (log)")),
                }
                continue;
            }
        };
        match directive.name {
            "enable-quotas" => config.enable_quotas = directive.boolean()?,
            "session-ttl" => {
                config.session_ttl_seconds = ranged(
                    directive,
                    directive.seconds()?,
                    SESSION_TTL_SECONDS_MIN,
                    SESSION_TTL_SECONDS_MAX,
                )?
            }
            "privilege-refresh-period" => {
                config.privilege_refresh_period_seconds = ranged(
                    directive,
                    directive.seconds()?,
                    PRIVILEGE_REFRESH_PERIOD_SECONDS_MIN,
                    PRIVILEGE_REFRESH_PERIOD_SECONDS_MAX,
                )?
            }
            "tps-weight" => {
                config.tps_weight =
                    ranged(directive, directive.number()?, TPS_WEIGHT_MIN, TPS_WEIGHT_MAX)?
            }
            "default-password-file" => {
                config.default_password_file = Some(PathBuf::from(directive.one()?))
            }
            "enable-security" => {
                return Err(directive.error(
                    "obsolete (Aerospike 5.7): remove it; the security context itself turns security on",
                ))
            }
            "enable-ldap" => {
                return Err(directive.error("LDAP is not supported by Bolide (internal users only)"))
            }
            _ => return Err(directive.error("unknown directive in security context")),
        }
    }
    Ok(config)
}

fn ranged(directive: &Directive<'_>, value: u32, min: u32, max: u32) -> Result<u32, ConfigError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(directive.error(format!(
            "{} must be {min} to {max}, got {value}",
            directive.name
        )))
    }
}

fn audit(items: &[Item<'_>]) -> Result<AuditConfig, ConfigError> {
    let mut audit = AuditConfig::default();
    for directive in directives(items, "security log")? {
        match directive.name {
            "report-authentication" => audit.report_authentication = flag(directive)?,
            "report-user-admin" => audit.report_user_admin = flag(directive)?,
            "report-sys-admin" => audit.report_sys_admin = flag(directive)?,
            "report-violation" => audit.report_violation = flag(directive)?,
            "report-data-op" => {
                let (namespace, set) = match directive.values.as_slice() {
                    [namespace] => (*namespace, None),
                    [namespace, set] => (*namespace, Some((*set).to_owned())),
                    _ => return Err(directive.error("expected 'report-data-op NAMESPACE [SET]'")),
                };
                if namespace.is_empty() || namespace.len() > bolide_types::NAMESPACE_NAME_BYTES_MAX
                {
                    return Err(directive.error("namespace names are 1 to 31 bytes"));
                }
                audit.report_data_op.push((namespace.to_owned(), set));
            }
            "report-data-op-role" => audit.report_data_op_role.push(name(directive)?),
            "report-data-op-user" => audit.report_data_op_user.push(name(directive)?),
            _ => return Err(directive.error("unknown directive in security log context")),
        }
    }
    Ok(audit)
}

/// `report-x` alone, or `report-x true|false`.
fn flag(directive: &Directive<'_>) -> Result<bool, ConfigError> {
    if directive.values.is_empty() {
        Ok(true)
    } else {
        directive.boolean()
    }
}

fn name(directive: &Directive<'_>) -> Result<String, ConfigError> {
    let name = directive.one()?;
    if name.len() > bolide_wire::admin::NAME_BYTES_MAX {
        return Err(directive.error("user and role names are at most 63 bytes"));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn parse(security: &str) -> Result<Config, crate::config::ConfigError> {
        Config::parse(&format!("{security}\nnamespace test {{\n}}\n"))
    }

    #[test]
    fn absent_is_off_and_empty_is_on_with_defaults() {
        assert_eq!(parse("").expect("valid").security, None);
        let config = parse("security {\n}").expect("valid");
        let security = config.security.expect("on");
        assert!(!security.enable_quotas);
        assert_eq!(security.session_ttl_seconds, 86_400);
        assert_eq!(security.privilege_refresh_period_seconds, 300);
        assert!(!security.audit.report_violation);
    }

    #[test]
    fn every_directive() {
        let config = parse(
            "logging {\n file /var/log/bolide-audit.log {\n  context audit info\n }\n}\n\
             security {\n enable-quotas true\n session-ttl 2h\n privilege-refresh-period 60\n tps-weight 4\n\
             default-password-file /etc/pw\n log {\n  report-authentication\n  report-user-admin true\n\
             report-sys-admin false\n  report-violation yes\n  report-data-op test demo\n  report-data-op bar\n\
             report-data-op-role auditor\n  report-data-op-user alice\n }\n}",
        )
        .expect("valid");
        let security = config.security.expect("on");
        assert!(security.enable_quotas);
        assert_eq!(security.session_ttl_seconds, 7200);
        assert_eq!(security.privilege_refresh_period_seconds, 60);
        assert_eq!(security.tps_weight, 4);
        assert_eq!(
            security.default_password_file,
            Some(std::path::PathBuf::from("/etc/pw"))
        );
        let audit = security.audit;
        assert!(audit.report_authentication);
        assert!(audit.report_user_admin);
        assert!(!audit.report_sys_admin);
        assert!(audit.report_violation);
        assert_eq!(
            audit.report_data_op,
            vec![
                ("test".to_owned(), Some("demo".to_owned())),
                ("bar".to_owned(), None)
            ]
        );
        assert_eq!(audit.report_data_op_role, vec!["auditor"]);
        assert_eq!(audit.report_data_op_user, vec!["alice"]);
        assert_eq!(
            audit.file,
            Some(std::path::PathBuf::from("/var/log/bolide-audit.log"))
        );
        // The audit sink is not the node's log file, nor its level.
        assert_eq!(config.log_file, None);
        assert_eq!(config.log_level, "info");
    }

    #[test]
    fn errors_name_the_line_and_the_directive() {
        for (text, line, directive) in [
            ("security {\n session-ttl 60\n}", 2, "session-ttl"),
            ("security {\n session-ttl 11d\n}", 2, "session-ttl"),
            ("security {\n session-ttl forever\n}", 2, "session-ttl"),
            (
                "security {\n privilege-refresh-period 5\n}",
                2,
                "privilege-refresh-period",
            ),
            ("security {\n tps-weight 1\n}", 2, "tps-weight"),
            ("security {\n enable-quotas maybe\n}", 2, "enable-quotas"),
            ("security {\n enable-security true\n}", 2, "enable-security"),
            ("security {\n bogus 1\n}", 2, "bogus"),
            ("security {\n ldap {\n }\n}", 2, "ldap"),
            (
                "security {\n log {\n  report-data-op\n }\n}",
                3,
                "report-data-op",
            ),
            (
                "security {\n log {\n  report-violation sometimes\n }\n}",
                3,
                "report-violation",
            ),
            (
                "security {\n log {\n  report-everything\n }\n}",
                3,
                "report-everything",
            ),
            ("security {\n}\nsecurity {\n}", 3, "security"),
            ("security main {\n}", 1, "security"),
        ] {
            let error = parse(text).expect_err(text);
            assert_eq!(
                (error.line, error.directive.as_str()),
                (line, directive),
                "{text}"
            );
            assert!(error.to_string().contains(&format!("line {line}")));
        }
    }
}
