//! Who is asking: the caller every request carries into `execute`, and the
//! one hook access control answers, [`Caller::check`].
//!
//! The connection makes a caller for each client (its address now; its
//! user and privileges once security exists) and passes it with the
//! request. The hook sits where each request's namespace and set are
//! known, before any work: a single record and each batch row
//! (`crate::route`: read, write, delete, record UDF), a scan or query at
//! its start (`crate::scan::plan`: a plain scan or query, an aggregation,
//! a background job), and the server's info commands that change things
//! (truncate, index and UDF module administration, job aborts,
//! reclustering). Today every caller is open, so every check passes; the
//! access-control task writes a [`Policy`] and nothing else.
//!
//! A check returns the result code to answer: 81 (ROLE_VIOLATION) for a
//! refusal, by convention of the admin protocol.

use bolide_types::ResultCode;
use std::net::SocketAddr;
use std::sync::Arc;

/// What a request needs, as the server checks it (Aerospike's permission
/// bits, `as_sec_perm`): a privilege a user holds (`read-write`, …) grants
/// a set of these, which is the policy's business.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Permission {
    /// Read a record (a read, or a write that also reads).
    Read,
    /// Write a record.
    Write,
    /// Delete a record.
    Delete,
    /// Run a record UDF on a record.
    UdfApply,
    /// A scan or query that answers records.
    Query,
    /// A scan or query with a UDF (an aggregation, a background UDF job).
    UdfQuery,
    /// A background scan or query that writes with ops.
    OpsQuery,
    /// Truncate a namespace or set.
    Truncate,
    /// Create or drop a secondary index.
    SindexAdmin,
    /// Register or remove a UDF module.
    UdfAdmin,
    /// Abort a scan or query job.
    QueryAdmin,
    /// Change the configuration.
    SetConfig,
    /// Cluster controls (`recluster`, …).
    ServiceCtrl,
}

/// Decides what a caller may do: the access-control task implements it.
pub trait Policy: Send + Sync {
    /// `Ok` if `caller` may do what needs `permission` on `namespace` (None:
    /// a node-wide action) and `set` (None: no set, or the whole
    /// namespace); else the result code to answer (81).
    fn check(
        &self,
        caller: &Caller,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
    ) -> Result<(), ResultCode>;

    /// As [`Policy::check`], for an info command whose full text is
    /// `command` (what an audit trail reports as the action's detail).
    fn check_command(
        &self,
        caller: &Caller,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
        command: &str,
    ) -> Result<(), ResultCode> {
        let _ = command;
        self.check(caller, permission, namespace, set)
    }
}

/// Who is asking.
#[derive(Clone)]
pub struct Caller {
    address: Option<SocketAddr>,
    access: Access,
}

#[derive(Clone)]
enum Access {
    /// A client of a node without security: everything is allowed.
    Open,
    /// The node's own work on a request already admitted (a proxied
    /// request, a background job's writes, a request run again).
    Node,
    /// Decided by a policy.
    Policy(Arc<dyn Policy>),
}

impl Caller {
    /// A client of a node without security, connected from `address`.
    pub fn client(address: Option<SocketAddr>) -> Caller {
        Caller {
            address,
            access: Access::Open,
        }
    }

    /// The node itself, for work on requests its connections (or another
    /// node) already admitted.
    pub fn node() -> Caller {
        Caller {
            address: None,
            access: Access::Node,
        }
    }

    /// A client whose rights `policy` decides.
    pub fn with_policy(address: Option<SocketAddr>, policy: Arc<dyn Policy>) -> Caller {
        Caller {
            address,
            access: Access::Policy(policy),
        }
    }

    /// The client's address (None for the node's own work).
    pub fn address(&self) -> Option<SocketAddr> {
        self.address
    }

    /// Whether the caller may do what needs `permission` on `namespace`
    /// and `set`; the error is the result code to answer.
    // PERF: hot path: one branch for an open caller.
    #[inline]
    pub fn check(
        &self,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
    ) -> Result<(), ResultCode> {
        match &self.access {
            Access::Open | Access::Node => Ok(()),
            Access::Policy(policy) => policy.check(self, permission, namespace, set),
        }
    }
}

impl Caller {
    /// As [`Caller::check`], for the info command `command` (its full text).
    pub fn check_command(
        &self,
        permission: Permission,
        namespace: Option<&str>,
        set: Option<&[u8]>,
        command: &str,
    ) -> Result<(), ResultCode> {
        match &self.access {
            Access::Open | Access::Node => Ok(()),
            Access::Policy(policy) => {
                policy.check_command(self, permission, namespace, set, command)
            }
        }
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let access = match self.access {
            Access::Open => "open",
            Access::Node => "node",
            Access::Policy(_) => "policy",
        };
        f.debug_struct("Caller")
            .field("address", &self.address)
            .field("access", &access)
            .finish()
    }
}
