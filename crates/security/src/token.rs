//! Session tokens: what LOGIN hands out and AUTHENTICATE brings back.
//!
//! A token is signed with the cluster's session key (HMAC-SHA256), which
//! every node holds (it travels with the users and roles), so any node can
//! verify a token another issued, and no node keeps a table of sessions.
//!
//! ```text
//! byte 0      1..9          9..17         17..25   25      26..26+n   last 32
//! +---------+-------------+-------------+--------+-------+----------+-----------+
//! | version | expires (s) | user epoch  | nonce  | n     | user     | HMAC      |
//! | 1       | unix, u64   | u64         | random | u8    | n bytes  | of before |
//! +---------+-------------+-------------+--------+-------+----------+-----------+
//! ```
//!
//! The user epoch is a random number the user gets when created (and anew
//! when an administrator sets its password): a dropped and recreated user,
//! or one whose password was reset, does not inherit old sessions.
//! Clients treat the token as opaque bytes.

use crate::random_bytes;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

const VERSION: u8 = 1;
const MAC_BYTES: usize = 32;
/// What the MAC covers starts with this, so no other HMAC of the key can
/// pass for a token.
const DOMAIN: &[u8] = b"bolide-session-token";
pub const KEY_BYTES: usize = 32;

/// A session key.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey(pub [u8; KEY_BYTES]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

impl SessionKey {
    pub fn random() -> SessionKey {
        let mut key = [0u8; KEY_BYTES];
        random_bytes(&mut key);
        SessionKey(key)
    }

    fn mac(&self) -> HmacSha256 {
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            // HMAC takes keys of any length.
            Err(_) => unreachable!("HMAC refused a 32-byte key"),
        };
        mac.update(DOMAIN);
        mac
    }

    /// A token for `user` (epoch `epoch`) that expires at `expires_s`.
    pub fn sign(&self, user: &str, epoch: u64, expires_s: u64) -> Vec<u8> {
        let user = user.as_bytes();
        let user = user.get(..user.len().min(255)).unwrap_or(user);
        let mut nonce = [0u8; 8];
        random_bytes(&mut nonce);
        let mut token = Vec::with_capacity(26 + user.len() + MAC_BYTES);
        token.push(VERSION);
        token.extend_from_slice(&expires_s.to_be_bytes());
        token.extend_from_slice(&epoch.to_be_bytes());
        token.extend_from_slice(&nonce);
        token.push(user.len() as u8);
        token.extend_from_slice(user);
        let mut mac = self.mac();
        mac.update(&token);
        token.extend_from_slice(&mac.finalize().into_bytes());
        token
    }

    /// The claims of `token` if this key signed it (constant-time MAC
    /// comparison); expiry is the caller's to judge.
    pub fn open<'t>(&self, token: &'t [u8]) -> Option<Claims<'t>> {
        let (signed, tag) = token.split_at_checked(token.len().checked_sub(MAC_BYTES)?)?;
        let mut mac = self.mac();
        mac.update(signed);
        mac.verify_slice(tag).ok()?;
        Claims::decode(signed)
    }
}

/// What a token says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claims<'t> {
    pub user: &'t str,
    pub epoch: u64,
    pub expires_s: u64,
}

impl<'t> Claims<'t> {
    fn decode(signed: &'t [u8]) -> Option<Claims<'t>> {
        let (&version, rest) = signed.split_first()?;
        if version != VERSION {
            return None;
        }
        let (expires, rest) = rest.split_first_chunk::<8>()?;
        let (epoch, rest) = rest.split_first_chunk::<8>()?;
        let (_nonce, rest) = rest.split_first_chunk::<8>()?;
        let (&length, user) = rest.split_first()?;
        if user.len() != usize::from(length) {
            return None;
        }
        Some(Claims {
            user: std::str::from_utf8(user).ok()?,
            epoch: u64::from_be_bytes(*epoch),
            expires_s: u64::from_be_bytes(*expires),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_token_opens_with_its_key_only() {
        let key = SessionKey::random();
        let token = key.sign("alice", 7, 1_000);
        assert_eq!(
            key.open(&token),
            Some(Claims {
                user: "alice",
                epoch: 7,
                expires_s: 1_000
            })
        );
        assert_eq!(SessionKey::random().open(&token), None);
        // Two tokens of the same claims differ (nonce).
        assert_ne!(key.sign("alice", 7, 1_000), token);
    }

    #[test]
    fn any_damage_is_refused() {
        let key = SessionKey::random();
        let token = key.sign("bob", 1, 99);
        for at in 0..token.len() {
            for bit in 0..8 {
                let mut bad = token.clone();
                bad[at] ^= 1 << bit;
                assert_eq!(key.open(&bad), None, "byte {at} bit {bit}");
            }
        }
        for cut in 0..token.len() {
            assert_eq!(key.open(&token[..cut]), None);
        }
        assert_eq!(key.open(&[token.clone(), vec![0]].concat()), None);
    }
}
