//! Vocabulary shared by every Bolide layer: the record digest and the
//! partition it maps to, wire result codes, particle (value) types, time
//! conversions and protocol limits.
//!
//! This crate owns no behaviour and depends on nothing. Every other crate may
//! depend on it.
#![forbid(unsafe_code)]

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Partitions per namespace. Fixed by the protocol: every client hard-codes it.
pub const PARTITION_COUNT: usize = 4096;

/// Bytes in a record digest (RIPEMD-160 of set name, key type and key value).
pub const DIGEST_BYTES: usize = 20;

/// Longest bin name the protocol allows (longer → [`ResultCode::BinName`]).
pub const BIN_NAME_BYTES_MAX: usize = 15;
/// Longest namespace name.
pub const NAMESPACE_NAME_BYTES_MAX: usize = 31;
/// Longest set name.
pub const SET_NAME_BYTES_MAX: usize = 63;
/// Most bins a record may hold (the real server's limit).
pub const BINS_PER_RECORD_MAX: usize = 32_767;
/// Largest proto body the server accepts (larger → connection closed).
pub const PROTO_BODY_BYTES_MAX: u64 = 128 * 1024 * 1024;
/// Longest TTL a write may ask for: ten years, in seconds.
pub const TTL_SECONDS_MAX: u32 = 315_360_000;

/// Unix time of 2010-01-01T00:00:00Z, the epoch of void times on the wire.
pub const CITRUSLEAF_EPOCH_UNIX_SECONDS: u64 = 1_262_304_000;

/// A record's 20-byte identity within a namespace.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; DIGEST_BYTES]);

impl Digest {
    /// The partition owning this digest: the first two bytes read as a
    /// little-endian u16, modulo 4096, exactly as the clients compute it.
    #[inline]
    pub fn partition_id(&self) -> PartitionId {
        let low = u16::from(self.0[0]) | (u16::from(self.0[1]) << 8);
        PartitionId(low & (PARTITION_COUNT as u16 - 1))
    }

    /// 64 well-mixed bits for hashing inside a partition. The digest is
    /// already uniformly random; bytes 0..2 chose the partition, so the
    /// hash is taken from bytes 4..12.
    #[inline]
    pub fn hash_bits(&self) -> u64 {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&self.0[4..12]);
        u64::from_le_bytes(eight)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// A partition number, 0..4096.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(pub u16);

impl PartitionId {
    #[inline]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Result codes as they travel on the wire (one byte). Numbers are fixed by
/// the protocol and are never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum ResultCode {
    Ok = 0,
    Unknown = 1,
    NotFound = 2,
    Generation = 3,
    Parameter = 4,
    RecordExists = 5,
    BinExists = 6,
    ClusterKeyMismatch = 7,
    OutOfSpace = 8,
    Timeout = 9,
    Unavailable = 11,
    IncompatibleType = 12,
    RecordTooBig = 13,
    KeyBusy = 14,
    /// A scan or query was aborted.
    QueryAborted = 15,
    UnsupportedFeature = 16,
    BinNotFound = 17,
    /// The storage device's write queue is over its limit.
    DeviceOverload = 18,
    KeyMismatch = 19,
    Namespace = 20,
    BinName = 21,
    Forbidden = 22,
    ElementNotFound = 23,
    ElementExists = 24,
    EnterpriseOnly = 25,
    OpNotApplicable = 26,
    FilteredOut = 27,
    /// A UDF failed (its error string travels in a `FAILURE` bin).
    UdfExecution = 100,
    BatchMaxRequests = 151,
    /// An index of that name (or definition) exists.
    IndexFound = 200,
    IndexNotFound = 201,
    /// The index is still being built.
    IndexNotReadable = 203,
    IndexGeneric = 204,
    IndexNameTooLong = 205,
    IndexMaxCount = 206,
    // The security protocol's codes (admin messages, and refusals of data
    // and info requests on a secured node).
    /// The last record of a user or role query stream.
    QueryEnd = 50,
    SecurityNotSupported = 51,
    SecurityNotEnabled = 52,
    SecuritySchemeNotSupported = 53,
    /// An admin command the server does not know.
    InvalidCommand = 54,
    /// An admin field that cannot be parsed.
    InvalidField = 55,
    IllegalState = 56,
    /// No such user, or a bad user name.
    InvalidUser = 60,
    UserAlreadyExists = 61,
    InvalidPassword = 62,
    ExpiredPassword = 63,
    ForbiddenPassword = 64,
    InvalidCredential = 65,
    ExpiredSession = 66,
    /// No such role, or a bad role name.
    InvalidRole = 70,
    RoleAlreadyExists = 71,
    InvalidPrivilege = 72,
    InvalidWhitelist = 73,
    QuotasNotEnabled = 74,
    InvalidQuota = 75,
    NotAuthenticated = 80,
    /// The caller's roles do not grant what the request needs.
    RoleViolation = 81,
    NotWhitelisted = 82,
    QuotaExceeded = 83,
}

impl ResultCode {
    /// Every code the server may answer.
    pub const ALL: [ResultCode; 59] = [
        ResultCode::Ok,
        ResultCode::Unknown,
        ResultCode::NotFound,
        ResultCode::Generation,
        ResultCode::Parameter,
        ResultCode::RecordExists,
        ResultCode::BinExists,
        ResultCode::ClusterKeyMismatch,
        ResultCode::OutOfSpace,
        ResultCode::Timeout,
        ResultCode::Unavailable,
        ResultCode::IncompatibleType,
        ResultCode::RecordTooBig,
        ResultCode::KeyBusy,
        ResultCode::QueryAborted,
        ResultCode::UnsupportedFeature,
        ResultCode::BinNotFound,
        ResultCode::DeviceOverload,
        ResultCode::KeyMismatch,
        ResultCode::Namespace,
        ResultCode::BinName,
        ResultCode::Forbidden,
        ResultCode::ElementNotFound,
        ResultCode::ElementExists,
        ResultCode::EnterpriseOnly,
        ResultCode::OpNotApplicable,
        ResultCode::FilteredOut,
        ResultCode::UdfExecution,
        ResultCode::BatchMaxRequests,
        ResultCode::IndexFound,
        ResultCode::IndexNotFound,
        ResultCode::IndexNotReadable,
        ResultCode::IndexGeneric,
        ResultCode::IndexNameTooLong,
        ResultCode::IndexMaxCount,
        ResultCode::SecurityNotEnabled,
        ResultCode::QueryEnd,
        ResultCode::SecurityNotSupported,
        ResultCode::SecuritySchemeNotSupported,
        ResultCode::InvalidCommand,
        ResultCode::InvalidField,
        ResultCode::IllegalState,
        ResultCode::InvalidUser,
        ResultCode::UserAlreadyExists,
        ResultCode::InvalidPassword,
        ResultCode::ExpiredPassword,
        ResultCode::ForbiddenPassword,
        ResultCode::InvalidCredential,
        ResultCode::ExpiredSession,
        ResultCode::InvalidRole,
        ResultCode::RoleAlreadyExists,
        ResultCode::InvalidPrivilege,
        ResultCode::InvalidWhitelist,
        ResultCode::QuotasNotEnabled,
        ResultCode::InvalidQuota,
        ResultCode::NotAuthenticated,
        ResultCode::RoleViolation,
        ResultCode::NotWhitelisted,
        ResultCode::QuotaExceeded,
    ];

    #[inline]
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// Particle (value) types, as numbered on the wire.
pub mod particle {
    pub const NULL: u8 = 0;
    pub const INTEGER: u8 = 1;
    pub const FLOAT: u8 = 2;
    pub const STRING: u8 = 3;
    pub const BLOB: u8 = 4;
    pub const JAVA_BLOB: u8 = 7;
    pub const CSHARP_BLOB: u8 = 8;
    pub const PYTHON_BLOB: u8 = 9;
    pub const RUBY_BLOB: u8 = 10;
    pub const PHP_BLOB: u8 = 11;
    pub const ERLANG_BLOB: u8 = 12;
    pub const BOOL: u8 = 17;
    pub const HLL: u8 = 18;
    pub const MAP: u8 = 19;
    pub const LIST: u8 = 20;
    pub const GEOJSON: u8 = 23;

    /// Whether a bin may hold this particle type.
    pub fn is_storable(particle_type: u8) -> bool {
        matches!(
            particle_type,
            INTEGER | FLOAT | STRING | BLOB | 7..=12 | BOOL | HLL | MAP | LIST | GEOJSON
        )
    }

    /// Blob-like types that append/prepend accept.
    pub fn is_blob(particle_type: u8) -> bool {
        matches!(particle_type, BLOB | 7..=12)
    }
}

/// Seconds since the citrusleaf epoch (2010-01-01), the unit of void times.
pub fn now_citrusleaf_seconds() -> u32 {
    u32::try_from(now_citrusleaf_milliseconds() / 1000).unwrap_or(u32::MAX)
}

/// Milliseconds since the citrusleaf epoch, the unit of last-update times.
// PERF: hot path (once per write): a frozen clock costs one thread-local read.
pub fn now_citrusleaf_milliseconds() -> u64 {
    if let Some(frozen) = FROZEN_CLOCK_MS.with(std::cell::Cell::get) {
        return frozen;
    }
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(CITRUSLEAF_EPOCH_UNIX_SECONDS * 1000);
    unix_ms.saturating_sub(CITRUSLEAF_EPOCH_UNIX_SECONDS * 1000)
}

thread_local! {
    static FROZEN_CLOCK_MS: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Freezes this thread's clock at `ms` since the citrusleaf epoch (None:
/// the real clock again). For deterministic replays: a fuzz input answers
/// the same bytes every time, whatever the time of day.
pub fn freeze_thread_clock(ms: Option<u64>) {
    FROZEN_CLOCK_MS.with(|clock| clock.set(ms));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_code_is_listed_once() {
        let mut codes: Vec<u8> = ResultCode::ALL.iter().map(|code| code.as_u8()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ResultCode::ALL.len());
        // A new variant fails to compile here until it is listed in ALL.
        for code in ResultCode::ALL {
            match code {
                ResultCode::Ok
                | ResultCode::Unknown
                | ResultCode::NotFound
                | ResultCode::Generation
                | ResultCode::Parameter
                | ResultCode::RecordExists
                | ResultCode::BinExists
                | ResultCode::ClusterKeyMismatch
                | ResultCode::OutOfSpace
                | ResultCode::Timeout
                | ResultCode::Unavailable
                | ResultCode::IncompatibleType
                | ResultCode::RecordTooBig
                | ResultCode::KeyBusy
                | ResultCode::QueryAborted
                | ResultCode::UnsupportedFeature
                | ResultCode::BinNotFound
                | ResultCode::DeviceOverload
                | ResultCode::KeyMismatch
                | ResultCode::Namespace
                | ResultCode::BinName
                | ResultCode::Forbidden
                | ResultCode::ElementNotFound
                | ResultCode::ElementExists
                | ResultCode::EnterpriseOnly
                | ResultCode::OpNotApplicable
                | ResultCode::FilteredOut
                | ResultCode::UdfExecution
                | ResultCode::BatchMaxRequests
                | ResultCode::IndexFound
                | ResultCode::IndexNotFound
                | ResultCode::IndexNotReadable
                | ResultCode::IndexGeneric
                | ResultCode::IndexNameTooLong
                | ResultCode::IndexMaxCount
                | ResultCode::SecurityNotEnabled
                | ResultCode::QueryEnd
                | ResultCode::SecurityNotSupported
                | ResultCode::SecuritySchemeNotSupported
                | ResultCode::InvalidCommand
                | ResultCode::InvalidField
                | ResultCode::IllegalState
                | ResultCode::InvalidUser
                | ResultCode::UserAlreadyExists
                | ResultCode::InvalidPassword
                | ResultCode::ExpiredPassword
                | ResultCode::ForbiddenPassword
                | ResultCode::InvalidCredential
                | ResultCode::ExpiredSession
                | ResultCode::InvalidRole
                | ResultCode::RoleAlreadyExists
                | ResultCode::InvalidPrivilege
                | ResultCode::InvalidWhitelist
                | ResultCode::QuotasNotEnabled
                | ResultCode::InvalidQuota
                | ResultCode::NotAuthenticated
                | ResultCode::RoleViolation
                | ResultCode::NotWhitelisted
                | ResultCode::QuotaExceeded => {}
            }
        }
    }

    #[test]
    fn partition_id_matches_reference_example() {
        // set "demo", key "k1" → digest b747f585… → partition 0x7b7 (1975).
        let mut bytes = [0u8; 20];
        bytes[0] = 0xb7;
        bytes[1] = 0x47;
        assert_eq!(Digest(bytes).partition_id(), PartitionId(1975));
    }

    #[test]
    fn partition_id_uses_low_twelve_bits_little_endian() {
        let mut bytes = [0u8; 20];
        bytes[0] = 0xff;
        bytes[1] = 0xff;
        assert_eq!(Digest(bytes).partition_id(), PartitionId(4095));
        bytes[1] = 0x10;
        assert_eq!(Digest(bytes).partition_id(), PartitionId(0x0ff));
    }
}
