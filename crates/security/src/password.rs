//! Passwords as the node keeps them.
//!
//! Clients never send a password: they send bcrypt of it with a salt fixed
//! for every Aerospike client (`$2a$10$7EqJtq98hPqEX7fNZaFWoO`), a 60-byte
//! string, both when a password is set (PASSWORD) and at login
//! (CREDENTIAL). That string is therefore password-equivalent, and since
//! the salt is the same everywhere, a table of it for common passwords can
//! be computed once for all deployments. So the node stores neither: it
//! keeps PBKDF2-HMAC-SHA256 of the client's string with a random salt per
//! user ([`ITERATIONS`] rounds), and compares in constant time.

use crate::random_bytes;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// PBKDF2 rounds for a stored password: about 5 ms per login on one core,
/// paid once per connection by clients that log in on each connection.
pub const ITERATIONS: u32 = 10_000;
/// The fewest rounds a stored password may claim (a damaged or forged
/// store must not weaken hashes silently).
pub const ITERATIONS_MIN: u32 = 1_000;
/// The most rounds a stored password may claim (bounds the cost of a
/// login against a damaged or forged store).
pub const ITERATIONS_MAX: u32 = 10_000_000;
const SALT_BYTES: usize = 16;
const HASH_BYTES: usize = 32;

/// The clients' bcrypt salt `7EqJtq98hPqEX7fNZaFWoO` as its 16 raw bytes
/// (bcrypt's base64 alphabet decoded; the test vectors below check it).
const CLIENT_SALT: [u8; 16] = [
    0xf4, 0x6b, 0x0b, 0xbe, 0xcf, 0xfe, 0x8d, 0x1b, 0x06, 0x67, 0xd8, 0x4f, 0x6d, 0xc1, 0xd8, 0xa9,
];
/// The clients' bcrypt cost.
const CLIENT_COST: u32 = 10;

/// What a client sends for `password`: bcrypt with the fixed salt, cost 10,
/// in the `$2a$` form. For tools (and the node's `default-password-file`);
/// the node itself only ever compares what it receives.
pub fn client_hash(password: &str) -> String {
    match bcrypt::hash_with_salt(password, CLIENT_COST, CLIENT_SALT) {
        Ok(parts) => parts.format_for_version(bcrypt::Version::TwoA),
        // Cost and salt are fixed and valid: bcrypt cannot refuse them.
        Err(error) => unreachable!("bcrypt refused a fixed cost and salt: {error}"),
    }
}

/// The client hash of `nopassword`: a user created with it is a PKI user
/// who never logs in with a password (Aerospike 8.1+).
pub const NOPASSWORD_HASH: &str = "$2a$10$7EqJtq98hPqEX7fNZaFWoOePA2sZy..tlOF99W2N0g5KZ3dLaw8WO";

/// A password as stored: PBKDF2-HMAC-SHA256 of the client's hash.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredPassword {
    iterations: u32,
    salt: [u8; SALT_BYTES],
    hash: [u8; HASH_BYTES],
}

impl std::fmt::Debug for StoredPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoredPassword(..)")
    }
}

impl StoredPassword {
    /// Stores `client_hash` with a fresh random salt.
    pub fn new(client_hash: &[u8]) -> StoredPassword {
        StoredPassword::with_iterations(client_hash, ITERATIONS)
    }

    /// Stores `client_hash` with `iterations` rounds (at least
    /// [`ITERATIONS_MIN`]).
    pub fn with_iterations(client_hash: &[u8], iterations: u32) -> StoredPassword {
        let mut salt = [0u8; SALT_BYTES];
        random_bytes(&mut salt);
        StoredPassword::with_salt(
            client_hash,
            salt,
            iterations.clamp(ITERATIONS_MIN, ITERATIONS_MAX),
        )
    }

    fn with_salt(client_hash: &[u8], salt: [u8; SALT_BYTES], iterations: u32) -> StoredPassword {
        let mut hash = [0u8; HASH_BYTES];
        pbkdf2::pbkdf2_hmac::<Sha256>(client_hash, &salt, iterations, &mut hash);
        StoredPassword {
            iterations,
            salt,
            hash,
        }
    }

    /// Whether `client_hash` is the stored password (constant time in the
    /// hash comparison).
    pub fn verify(&self, client_hash: &[u8]) -> bool {
        let candidate = StoredPassword::with_salt(client_hash, self.salt, self.iterations);
        bool::from(candidate.hash.ct_eq(&self.hash))
    }

    /// `pbkdf2-sha256$<iterations>$<salt hex>$<hash hex>`.
    pub fn to_text(&self) -> String {
        format!(
            "pbkdf2-sha256${}${}${}",
            self.iterations,
            hex(&self.salt),
            hex(&self.hash)
        )
    }

    pub fn parse(text: &str) -> Option<StoredPassword> {
        let mut parts = text.split('$');
        if parts.next()? != "pbkdf2-sha256" {
            return None;
        }
        let iterations: u32 = parts.next()?.parse().ok()?;
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return None;
        }
        let salt = unhex(parts.next()?)?.try_into().ok()?;
        let hash = unhex(parts.next()?)?.try_into().ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(StoredPassword {
            iterations,
            salt,
            hash,
        })
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_hashes_match_the_reference_vectors() {
        for (password, expected) in [
            (
                "admin",
                "$2a$10$7EqJtq98hPqEX7fNZaFWoO1mVO/4MLpGzsqojz6E9Gef6iXDjXdDa",
            ),
            ("nopassword", NOPASSWORD_HASH),
            (
                "",
                "$2a$10$7EqJtq98hPqEX7fNZaFWoOLCkFexA7A9eoJ0Ew.mTDdk.E60D.9zS",
            ),
            (
                "test",
                "$2a$10$7EqJtq98hPqEX7fNZaFWoOU4Rn.f3DX0Z38lDGiUMPCvtmdP43AAm",
            ),
        ] {
            assert_eq!(client_hash(password), expected, "{password:?}");
        }
    }

    #[test]
    fn stored_passwords_verify_only_their_hash() {
        let admin = client_hash("admin");
        let stored = StoredPassword::new(admin.as_bytes());
        assert!(stored.verify(admin.as_bytes()));
        assert!(!stored.verify(client_hash("admin2").as_bytes()));
        assert!(!stored.verify(b""));
        // Two stores of one password differ (random salts).
        let again = StoredPassword::new(admin.as_bytes());
        assert_ne!(stored.to_text(), again.to_text());
        assert!(again.verify(admin.as_bytes()));
    }

    #[test]
    fn text_form_round_trips_and_refuses_damage() {
        let stored = StoredPassword::new(b"x");
        let text = stored.to_text();
        assert_eq!(StoredPassword::parse(&text), Some(stored.clone()));
        assert!(!text.contains("x"));
        assert_eq!(StoredPassword::parse(&text[..text.len() - 1]), None);
        assert_eq!(StoredPassword::parse(&text.replace("10000", "10")), None);
        assert_eq!(StoredPassword::parse(&format!("{text}$")), None);
        assert_eq!(StoredPassword::parse("bcrypt$1$2$3"), None);
        assert_eq!(StoredPassword::parse(""), None);
    }
}
