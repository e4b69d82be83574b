//! The audit trail: one line per reported event, naming the user, the
//! client's address, what was done and how it ended.
//!
//! ```text
//! audit: authentication user=alice client=10.0.0.7:50312 action=login result=0
//! audit: user-admin user=admin client=10.0.0.7:50312 action=create-user detail="user=bob roles=read" result=0
//! audit: violation user=bob client=10.0.0.9:41002 action=write detail="ns=test set=demo" result=81
//! ```
//!
//! Which events are reported is `security { log { … } }` ([`AuditConfig`]),
//! and `set-config:context=security;log.report-…` changes it while the
//! node runs ([`Audit::set`]).
//! Lines go to the node's log under the target `audit`, and, when
//! configured, to a file of their own (each line then starts with a UTC
//! timestamp). A line that cannot be written to the file is counted and
//! logged once a minute at most; the request it reports is not held up.

use crate::config::AuditConfig;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

/// The kinds of event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Authentication,
    UserAdmin,
    SysAdmin,
    Violation,
    DataOp,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Authentication => "authentication",
            Event::UserAdmin => "user-admin",
            Event::SysAdmin => "sys-admin",
            Event::Violation => "violation",
            Event::DataOp => "data-op",
        }
    }
}

/// The audit trail of one node.
#[derive(Debug)]
pub struct Audit {
    config: RwLock<AuditConfig>,
    /// The four event flags and "any data operation is reported", read
    /// without the lock on every request.
    authentication: AtomicBool,
    user_admin: AtomicBool,
    sys_admin: AtomicBool,
    violation: AtomicBool,
    data_ops: AtomicBool,
    file: Option<Mutex<std::fs::File>>,
    lines: AtomicU64,
    write_errors: AtomicU64,
    last_error_report_s: AtomicU64,
}

impl Audit {
    /// Opens the audit file (appending) if one is configured.
    pub fn open(config: AuditConfig) -> Result<Audit, String> {
        let file = match &config.file {
            None => None,
            Some(path) => {
                let mut options = std::fs::OpenOptions::new();
                options.append(true).create(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let file = options
                    .open(path)
                    .map_err(|error| format!("audit file {}: {error}", path.display()))?;
                Some(Mutex::new(file))
            }
        };
        Ok(Audit {
            authentication: AtomicBool::new(config.report_authentication),
            user_admin: AtomicBool::new(config.report_user_admin),
            sys_admin: AtomicBool::new(config.report_sys_admin),
            violation: AtomicBool::new(config.report_violation),
            data_ops: AtomicBool::new(config.reports_data_ops()),
            config: RwLock::new(config),
            file,
            lines: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            last_error_report_s: AtomicU64::new(0),
        })
    }

    /// The settings as they are now.
    pub fn config(&self) -> AuditConfig {
        self.config.read().clone()
    }

    /// Whether events of `event` are reported (data operations: whether
    /// any is; see [`Audit::wants_data_op`]).
    // PERF: hot path (every request of a secured node asks for DataOp).
    pub fn reports(&self, event: Event) -> bool {
        match event {
            Event::Authentication => self.authentication.load(Relaxed),
            Event::UserAdmin => self.user_admin.load(Relaxed),
            Event::SysAdmin => self.sys_admin.load(Relaxed),
            Event::Violation => self.violation.load(Relaxed),
            Event::DataOp => self.data_ops.load(Relaxed),
        }
    }

    /// Changes one setting while the node runs (`set-config:context=
    /// security;log.NAME=true|false`, with `namespace=`/`set=`, `role=` or
    /// `user=` for the data-operation scopes). An error names what is
    /// wrong.
    pub fn set(&self, change: &AuditChange) -> Result<(), String> {
        let mut config = self.config.write();
        match change {
            AuditChange::Flag(event, on) => {
                let (field, flag) = match event {
                    Event::Authentication => {
                        (&mut config.report_authentication, &self.authentication)
                    }
                    Event::UserAdmin => (&mut config.report_user_admin, &self.user_admin),
                    Event::SysAdmin => (&mut config.report_sys_admin, &self.sys_admin),
                    Event::Violation => (&mut config.report_violation, &self.violation),
                    Event::DataOp => return Err("data operations need a scope".to_owned()),
                };
                *field = *on;
                flag.store(*on, Relaxed);
            }
            AuditChange::DataOp { namespace, set, on } => {
                let entry = (namespace.clone(), set.clone());
                config.report_data_op.retain(|e| *e != entry);
                if *on {
                    config.report_data_op.push(entry);
                }
            }
            AuditChange::DataOpRole { role, on } => {
                config.report_data_op_role.retain(|r| r != role);
                if *on {
                    config.report_data_op_role.push(role.clone());
                }
            }
            AuditChange::DataOpUser { user, on } => {
                config.report_data_op_user.retain(|u| u != user);
                if *on {
                    config.report_data_op_user.push(user.clone());
                }
            }
        }
        self.data_ops.store(config.reports_data_ops(), Relaxed);
        Ok(())
    }

    /// Whether a data operation by `user` (holding `roles`) on `namespace`
    /// and `set` is reported.
    pub fn wants_data_op(
        &self,
        user: &str,
        roles: &BTreeSet<String>,
        namespace: &str,
        set: &str,
    ) -> bool {
        let config = self.config.read();
        config
            .report_data_op
            .iter()
            .any(|(ns, s)| ns == namespace && s.as_deref().is_none_or(|s| s == set))
            || config.report_data_op_user.iter().any(|u| u == user)
            || config
                .report_data_op_role
                .iter()
                .any(|role| roles.contains(role))
    }

    /// Reports one event if its kind is reported.
    pub fn log(
        &self,
        event: Event,
        user: &str,
        client: Option<SocketAddr>,
        action: &str,
        detail: &str,
        result: u8,
    ) {
        if event != Event::DataOp && !self.reports(event) {
            return;
        }
        let line = line(event, user, client, action, detail, result);
        self.lines.fetch_add(1, Relaxed);
        tracing::info!(target: "audit", "{line}");
        if let Some(file) = &self.file {
            let mut text = timestamp(SystemTime::now());
            text.push(' ');
            text.push_str(&line);
            text.push('\n');
            if let Err(error) = file.lock().write_all(text.as_bytes()) {
                self.write_failed(&error);
            }
        }
    }

    fn write_failed(&self, error: &std::io::Error) {
        self.write_errors.fetch_add(1, Relaxed);
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.last_error_report_s.load(Relaxed);
        if now_s >= last + 60
            && self
                .last_error_report_s
                .compare_exchange(last, now_s, Relaxed, Relaxed)
                .is_ok()
        {
            tracing::error!(%error, "cannot write the audit file");
        }
    }

    /// Lines reported, and lines the audit file could not take.
    pub fn counts(&self) -> (u64, u64) {
        (self.lines.load(Relaxed), self.write_errors.load(Relaxed))
    }
}

/// One change of the audit settings while the node runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditChange {
    /// `report-authentication`, `report-user-admin`, `report-sys-admin`,
    /// `report-violation`.
    Flag(Event, bool),
    /// `report-data-op NS [SET]` added (true) or removed.
    DataOp {
        namespace: String,
        set: Option<String>,
        on: bool,
    },
    DataOpRole {
        role: String,
        on: bool,
    },
    DataOpUser {
        user: String,
        on: bool,
    },
}

/// One audit line (without timestamp).
pub fn line(
    event: Event,
    user: &str,
    client: Option<SocketAddr>,
    action: &str,
    detail: &str,
    result: u8,
) -> String {
    let mut line = format!("audit: {} user=", event.name());
    push_value(&mut line, if user.is_empty() { "-" } else { user });
    line.push_str(" client=");
    match client {
        Some(client) => {
            let _ = write!(line, "{client}");
        }
        None => line.push('-'),
    }
    line.push_str(" action=");
    push_value(&mut line, action);
    if !detail.is_empty() {
        line.push_str(" detail=");
        push_value(&mut line, detail);
    }
    let _ = write!(line, " result={result}");
    line
}

/// A value as is when it is one plain word, else quoted with escapes (so a
/// user name cannot forge another field or another line).
fn push_value(line: &mut String, value: &str) {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\');
    if plain {
        line.push_str(value);
    } else {
        let _ = write!(line, "{value:?}");
    }
}

/// `2026-11-24T10:15:30.123Z`.
fn timestamp(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lines_name_user_client_action_and_result() {
        let client: SocketAddr = "10.0.0.7:50312".parse().expect("address");
        assert_eq!(
            line(Event::Authentication, "alice", Some(client), "login", "", 0),
            "audit: authentication user=alice client=10.0.0.7:50312 action=login result=0"
        );
        assert_eq!(
            line(
                Event::UserAdmin,
                "admin",
                Some(client),
                "create-user",
                "user=bob roles=read",
                0
            ),
            "audit: user-admin user=admin client=10.0.0.7:50312 action=create-user detail=\"user=bob roles=read\" result=0"
        );
        // A hostile user name stays inside its field.
        let forged = line(Event::Violation, "x result=0\naudit:", None, "read", "", 81);
        assert_eq!(forged.lines().count(), 1);
        assert!(forged.starts_with("audit: violation user=\"x result=0\\naudit:\" client=-"));
        assert!(forged.ends_with(" result=81"));
    }

    #[test]
    fn data_op_scopes() {
        let audit = Audit::open(AuditConfig {
            report_data_op: vec![("test".into(), Some("demo".into())), ("bar".into(), None)],
            report_data_op_user: vec!["carol".into()],
            report_data_op_role: vec!["auditor".into()],
            ..AuditConfig::default()
        })
        .expect("no file");
        let none = BTreeSet::new();
        assert!(audit.wants_data_op("x", &none, "test", "demo"));
        assert!(!audit.wants_data_op("x", &none, "test", "other"));
        assert!(audit.wants_data_op("x", &none, "bar", "anything"));
        assert!(audit.wants_data_op("carol", &none, "ns", ""));
        assert!(audit.wants_data_op("x", &BTreeSet::from(["auditor".to_owned()]), "ns", ""));
        assert!(!audit.wants_data_op("x", &none, "ns", ""));
    }

    #[test]
    fn settings_change_while_running() {
        let audit = Audit::open(AuditConfig::default()).expect("no file");
        assert!(!audit.reports(Event::Authentication));
        assert!(!audit.reports(Event::DataOp));
        audit
            .set(&AuditChange::Flag(Event::Authentication, true))
            .expect("flag");
        assert!(audit.reports(Event::Authentication));
        assert!(audit.config().report_authentication);
        let scope = AuditChange::DataOp {
            namespace: "test".into(),
            set: Some("demo".into()),
            on: true,
        };
        audit.set(&scope).expect("scope");
        audit.set(&scope).expect("twice");
        assert_eq!(audit.config().report_data_op.len(), 1);
        assert!(audit.reports(Event::DataOp));
        let none = BTreeSet::new();
        assert!(audit.wants_data_op("x", &none, "test", "demo"));
        audit
            .set(&AuditChange::DataOp {
                namespace: "test".into(),
                set: Some("demo".into()),
                on: false,
            })
            .expect("off");
        assert!(!audit.reports(Event::DataOp));
        assert!(!audit.wants_data_op("x", &none, "test", "demo"));
        assert!(audit.set(&AuditChange::Flag(Event::DataOp, true)).is_err());
    }

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            timestamp(UNIX_EPOCH + Duration::from_millis(1_709_210_096_789)),
            "2024-02-29T12:34:56.789Z"
        );
        assert_eq!(
            timestamp(UNIX_EPOCH + Duration::from_secs(4_102_444_799)),
            "2099-12-31T23:59:59.000Z"
        );
    }

    #[test]
    fn the_audit_file_gets_one_line_per_event() {
        let dir = std::env::temp_dir().join(format!(
            "bolide-audit-{}-{}",
            std::process::id(),
            crate::random_u64()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("audit.log");
        let audit = Audit::open(AuditConfig {
            report_authentication: true,
            file: Some(path.clone()),
            ..AuditConfig::default()
        })
        .expect("open");
        audit.log(Event::Authentication, "alice", None, "login", "", 0);
        audit.log(Event::UserAdmin, "alice", None, "drop-user", "user=bob", 0);
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert!(
            lines[0].ends_with("audit: authentication user=alice client=- action=login result=0")
        );
        assert_eq!(audit.counts(), (1, 0));
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
}
