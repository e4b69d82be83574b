//! Node-wide counters of client connections and requests (relaxed
//! atomics: statistics). Connections count what they see here; `info`
//! reports it in `statistics`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Counters shared by every event loop.
pub struct NodeCounters {
    pub started: Instant,
    pub connections_opened: AtomicU64,
    pub connections_closed: AtomicU64,
    pub connections_refused: AtomicU64,
    pub info_requests: AtomicU64,
    pub admin_requests: AtomicU64,
    pub bad_frames: AtomicU64,
    /// TLS handshakes that failed (a plain client on a TLS port, a bad
    /// certificate, a timeout).
    pub tls_handshake_failures: AtomicU64,
    /// Client connections whose TLS handshake succeeded, and those of them
    /// closed since.
    pub tls_connections_opened: AtomicU64,
    pub tls_connections_closed: AtomicU64,
    /// Times a TLS context's files were read again and had changed (the
    /// new certificate is in force), and reads that failed (the old one
    /// stays).
    pub tls_certificate_reloads: AtomicU64,
    pub tls_certificate_reload_failures: AtomicU64,
}

impl Default for NodeCounters {
    fn default() -> NodeCounters {
        NodeCounters {
            started: Instant::now(),
            connections_opened: AtomicU64::new(0),
            connections_closed: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            info_requests: AtomicU64::new(0),
            admin_requests: AtomicU64::new(0),
            bad_frames: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
            tls_connections_opened: AtomicU64::new(0),
            tls_connections_closed: AtomicU64::new(0),
            tls_certificate_reloads: AtomicU64::new(0),
            tls_certificate_reload_failures: AtomicU64::new(0),
        }
    }
}

impl NodeCounters {
    /// Client connections open now.
    pub fn open_connections(&self) -> u64 {
        self.connections_opened
            .load(Relaxed)
            .saturating_sub(self.connections_closed.load(Relaxed))
    }

    /// Client connections over TLS open now.
    pub fn open_tls_connections(&self) -> u64 {
        self.tls_connections_opened
            .load(Relaxed)
            .saturating_sub(self.tls_connections_closed.load(Relaxed))
    }
}
