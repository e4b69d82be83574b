//! What each kind of request needs: data operations and info commands.
//!
//! Data (reference §2.3, with Bolide's refinements): a read needs `read`; a
//! write `write`, and `read` too when the same request also reads (an
//! operate with both); a delete `delete`; a record UDF `udf-apply`; a
//! foreground scan or query `query`; one with an aggregation UDF
//! `udf-query`; a background query or scan of operations `ops-query`; a
//! background UDF `udf-query`. Info: the commands of §2.3's table; every
//! other command needs only an authenticated caller.

use crate::privilege::{Needs, Permission};
use bolide_wire::info::InfoCommand;

/// The kinds of data operation the server checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// get, exists, a batch read row, an operate that only reads.
    Read,
    /// put, touch, an operate that only writes.
    Write,
    /// An operate that reads and writes.
    ReadWrite,
    Delete,
    /// A record UDF (apply), alone or as a batch row.
    UdfApply,
    /// A foreground scan or query.
    Query,
    /// A query with an aggregation (stream) UDF.
    QueryUdf,
    /// A background scan or query applying operations.
    BackgroundOps,
    /// A background scan or query applying a record UDF.
    BackgroundUdf,
}

impl Operation {
    pub const ALL: [Operation; 9] = [
        Operation::Read,
        Operation::Write,
        Operation::ReadWrite,
        Operation::Delete,
        Operation::UdfApply,
        Operation::Query,
        Operation::QueryUdf,
        Operation::BackgroundOps,
        Operation::BackgroundUdf,
    ];

    pub fn needs(self) -> Needs {
        match self {
            Operation::Read => Needs::of(Permission::Read),
            Operation::Write => Needs::of(Permission::Write),
            Operation::ReadWrite => Needs::of(Permission::Read).and(Permission::Write),
            Operation::Delete => Needs::of(Permission::Delete),
            Operation::UdfApply => Needs::of(Permission::UdfApply),
            Operation::Query => Needs::of(Permission::Query),
            Operation::QueryUdf => Needs::of(Permission::UdfQuery),
            Operation::BackgroundOps => Needs::of(Permission::OpsQuery),
            Operation::BackgroundUdf => Needs::of(Permission::UdfQuery),
        }
    }

    /// Whether it counts against the read quota (else the write quota).
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Operation::Read | Operation::Query | Operation::QueryUdf
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::ReadWrite => "read-write",
            Operation::Delete => "delete",
            Operation::UdfApply => "udf-apply",
            Operation::Query => "query",
            Operation::QueryUdf => "query-udf",
            Operation::BackgroundOps => "background-ops",
            Operation::BackgroundUdf => "background-udf",
        }
    }
}

/// What an info command needs: a permission, in a namespace and set when
/// the command names them (a truncate of one set needs `truncate` there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoNeeds<'c> {
    pub permission: Permission,
    pub namespace: &'c str,
    pub set: &'c str,
}

/// What `command` needs beyond an authenticated caller; None: nothing.
pub fn info_needs<'c>(command: &InfoCommand<'c>) -> Option<InfoNeeds<'c>> {
    let permission = match command.name {
        "set-config" | "config-set" => Permission::SetConfig,
        "log-set" | "set-log" | "log-message" | "jem-stats" => Permission::LoggingCtrl,
        name if name.starts_with("dump-") => Permission::LoggingCtrl,
        "recluster"
        | "quiesce"
        | "quiesce-undo"
        | "revive"
        | "roster-set"
        | "services-alumni-reset"
        | "tip"
        | "tip-clear" => Permission::ServiceCtrl,
        "xdr-set-filter" => Permission::XdrSetFilter,
        "sindex-create" | "sindex-delete" | "sindex-exists" => Permission::SindexAdmin,
        "udf-put" | "udf-remove" | "udf-clear-cache" => Permission::UdfAdmin,
        "truncate" | "truncate-undo" | "truncate-namespace" | "truncate-namespace-undo" => {
            Permission::Truncate
        }
        "query-abort" | "query-abort-all" | "scan-abort" | "scan-abort-all" => {
            Permission::QueryAdmin
        }
        "jobs" if command.param("cmd") == Some("kill-job") => Permission::QueryAdmin,
        "eviction-reset" => Permission::EvictAdmin,
        "debug-record" | "debug-record-meta" => Permission::RecordInfo,
        _ => return None,
    };
    let (namespace, set) = if permission == Permission::Truncate {
        (
            command.param("namespace").unwrap_or(""),
            command.param("set").unwrap_or(""),
        )
    } else {
        ("", "")
    };
    Some(InfoNeeds {
        permission,
        namespace,
        set,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(text: &str) -> Option<(Permission, &str, &str)> {
        info_needs(&InfoCommand::parse(text)).map(|n| (n.permission, n.namespace, n.set))
    }

    #[test]
    fn info_commands_need_what_the_reference_lists() {
        assert_eq!(
            needs("set-config:context=service;x=1"),
            Some((Permission::SetConfig, "", ""))
        );
        assert_eq!(
            needs("truncate:namespace=test;set=demo"),
            Some((Permission::Truncate, "test", "demo"))
        );
        assert_eq!(
            needs("truncate-namespace:namespace=test"),
            Some((Permission::Truncate, "test", ""))
        );
        assert_eq!(
            needs("sindex-create:ns=test;indexname=i;indexdata=b,numeric"),
            Some((Permission::SindexAdmin, "", ""))
        );
        assert_eq!(
            needs("udf-put:filename=a.lua"),
            Some((Permission::UdfAdmin, "", ""))
        );
        assert_eq!(needs("recluster:"), Some((Permission::ServiceCtrl, "", "")));
        assert_eq!(
            needs("dump-fabric:"),
            Some((Permission::LoggingCtrl, "", ""))
        );
        assert_eq!(
            needs("query-abort:trid=1"),
            Some((Permission::QueryAdmin, "", ""))
        );
        assert_eq!(
            needs("jobs:module=query;cmd=kill-job;trid=1"),
            Some((Permission::QueryAdmin, "", ""))
        );
        for free in [
            "namespaces",
            "statistics",
            "get-config:context=service",
            "sindex-list",
            "udf-list",
            "udf-get:filename=a.lua",
            "query-show",
            "jobs:module=query;cmd=get-job;trid=1",
            "peers-clear-std",
            "node",
            "",
        ] {
            assert_eq!(needs(free), None, "{free}");
        }
    }

    #[test]
    fn operate_with_reads_and_writes_needs_both() {
        let needs = Operation::ReadWrite.needs();
        assert!(needs.contains(Permission::Read));
        assert!(needs.contains(Permission::Write));
        assert!(!needs.contains(Permission::Delete));
    }
}
