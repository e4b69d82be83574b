//! Access control for a secured node: users, roles and privileges over
//! Aerospike's admin protocol (proto type 2), session tokens, allowlists,
//! quotas, the audit trail, and what each request needs.
//!
//! - [`privilege`]: privileges, permissions and the table between them;
//!   [`needs`]: what each data operation and info command needs.
//! - [`catalog`]: users, roles and the session key as versioned entries
//!   (what travels between nodes); [`file`]: the node's copy on disk.
//! - [`password`], [`token`], [`allowlist`], [`limits`]: stored passwords,
//!   signed session tokens, role allowlists, quotas and the wrong-password
//!   brake.
//! - [`service`]: [`Security`], which answers admin messages and checks
//!   every request of a connection's [`Session`]; [`audit`]: the trail.
//!
//! Sits beside `transaction`, above `wire`: depends on `bolide-types` and
//! `bolide-wire` only. It does no network I/O; the server hands it admin
//! message bodies and asks it before executing requests.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
#![cfg_attr(
    test,
    allow(clippy::indexing_slicing, clippy::panic, clippy::unwrap_used)
)]

pub mod allowlist;
pub mod audit;
pub mod catalog;
pub mod config;
pub mod file;
pub mod limits;
pub mod needs;
pub mod password;
pub mod privilege;
pub mod service;
pub mod settings;
pub mod token;

pub use config::{AuditConfig, SecurityConfig};
pub use needs::{info_needs, Operation};
pub use privilege::{Needs, Permission, Privilege, PrivilegeKind, Scope};
pub use service::{Refusal, Security, Session};

/// Fills `bytes` from the operating system's random source. A node that
/// cannot get randomness cannot make salts, keys or tokens safely, so it
/// stops.
pub(crate) fn random_bytes(bytes: &mut [u8]) {
    if let Err(error) = getrandom::fill(bytes) {
        // Not input-driven: the OS refused randomness.
        #[expect(clippy::panic, reason = "no safe way on without randomness")]
        {
            panic!("the operating system gives no random bytes: {error}");
        }
    }
}

pub(crate) fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    random_bytes(&mut bytes);
    u64::from_be_bytes(bytes)
}
