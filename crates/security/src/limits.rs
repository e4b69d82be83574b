//! Rates: per-user quotas (records per second) and the brake on wrong
//! passwords (per client address).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Counts events per wall-clock second and refuses those past a limit.
/// Lock-free; under contention at a second's boundary a few events may be
/// counted in the neighbouring second, which a rate limit can afford.
#[derive(Debug, Default)]
pub struct Meter {
    second: AtomicU64,
    count: AtomicU32,
    /// The count of the last second that had events.
    previous: AtomicU32,
    previous_second: AtomicU64,
}

impl Meter {
    fn roll(&self, now_s: u64) {
        let second = self.second.load(Relaxed);
        if second != now_s
            && self
                .second
                .compare_exchange(second, now_s, Relaxed, Relaxed)
                .is_ok()
        {
            self.previous.store(self.count.swap(0, Relaxed), Relaxed);
            self.previous_second.store(second, Relaxed);
        }
    }

    /// Counts `n` events at `now_s`; false (and not counted) if that would
    /// pass `limit` events in this second (0: no limit).
    // PERF: hot path (every data request of a user when quotas are on).
    pub fn charge(&self, now_s: u64, n: u32, limit: u32) -> bool {
        self.roll(now_s);
        if limit == 0 {
            self.count.fetch_add(n, Relaxed);
            return true;
        }
        let before = self.count.fetch_add(n, Relaxed);
        if before.saturating_add(n) > limit {
            self.count.fetch_sub(n, Relaxed);
            return false;
        }
        true
    }

    /// Events in the last whole second before `now_s` (what QUERY_USERS
    /// reports as the user's rate).
    pub fn rate(&self, now_s: u64) -> u32 {
        self.roll(now_s);
        if self.previous_second.load(Relaxed) + 1 == now_s {
            self.previous.load(Relaxed)
        } else {
            0
        }
    }
}

/// Failed logins of one user from one address allowed within
/// [`FAILURE_WINDOW_SECONDS`] before that user is held off there.
pub const FAILURES_ALLOWED: u32 = 5;
pub const FAILURE_WINDOW_SECONDS: u64 = 60;
/// How long a user that failed too often from an address is refused there
/// without a look at its password (which also spares the node the hashing).
pub const HOLD_OFF_SECONDS: u64 = 10;
/// (address, user) pairs tracked at once; past that the oldest are forgotten.
pub const ADDRESSES_MAX: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Failures {
    count: u32,
    window_start_s: u64,
    held_until_s: u64,
}

/// Wrong-password brake: per client address and user name,
/// [`FAILURES_ALLOWED`] failures in a minute, then [`HOLD_OFF_SECONDS`] of
/// refusals. Keyed by both, so a guesser holds off only the user it guesses
/// at from its own address: other users behind the same address (a NAT, an
/// application server) keep logging in.
#[derive(Debug, Default)]
pub struct LoginBrake {
    addresses: HashMap<(IpAddr, String), Failures>,
}

impl LoginBrake {
    /// Whether `user` is held off at `address` at `now_s`.
    pub fn held(&self, address: IpAddr, user: &str, now_s: u64) -> bool {
        self.addresses
            .get(&(address, user.to_owned()))
            .is_some_and(|failures| now_s < failures.held_until_s)
    }

    /// Records a failed login; returns true if it starts a hold-off.
    pub fn failed(&mut self, address: IpAddr, user: &str, now_s: u64) -> bool {
        let key = (address, user.to_owned());
        if self.addresses.len() >= ADDRESSES_MAX && !self.addresses.contains_key(&key) {
            self.forget_old(now_s);
        }
        let failures = self.addresses.entry(key).or_insert(Failures {
            count: 0,
            window_start_s: now_s,
            held_until_s: 0,
        });
        if now_s >= failures.window_start_s + FAILURE_WINDOW_SECONDS {
            failures.count = 0;
            failures.window_start_s = now_s;
        }
        failures.count += 1;
        if failures.count >= FAILURES_ALLOWED {
            failures.held_until_s = now_s + HOLD_OFF_SECONDS;
            failures.count = 0;
            failures.window_start_s = now_s;
            return true;
        }
        false
    }

    /// A successful login clears the pair's record.
    pub fn succeeded(&mut self, address: IpAddr, user: &str) {
        self.addresses.remove(&(address, user.to_owned()));
    }

    fn forget_old(&mut self, now_s: u64) {
        self.addresses.retain(|_, failures| {
            now_s < failures.held_until_s
                || now_s < failures.window_start_s + FAILURE_WINDOW_SECONDS
        });
        while self.addresses.len() >= ADDRESSES_MAX {
            let oldest = self
                .addresses
                .iter()
                .min_by_key(|(_, failures)| failures.window_start_s)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => {
                    self.addresses.remove(&key);
                }
                None => break,
            }
        }
    }

    pub fn tracked(&self) -> usize {
        self.addresses.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_refuses_past_its_limit_within_a_second() {
        let meter = Meter::default();
        for _ in 0..10 {
            assert!(meter.charge(100, 1, 10));
        }
        assert!(!meter.charge(100, 1, 10));
        assert!(!meter.charge(100, 1, 10));
        assert!(meter.charge(101, 1, 10));
        assert_eq!(meter.rate(101), 10);
        assert_eq!(meter.rate(103), 0);
        // No limit: always counted.
        let free = Meter::default();
        for _ in 0..1000 {
            assert!(free.charge(5, 1, 0));
        }
        assert_eq!(free.rate(6), 1000);
        // A batch larger than the limit is refused whole.
        assert!(!Meter::default().charge(1, 11, 10));
    }

    #[test]
    fn the_brake_holds_a_user_at_an_address_after_five_failures() {
        let mut brake = LoginBrake::default();
        let address: IpAddr = "10.0.0.1".parse().expect("address");
        let other: IpAddr = "10.0.0.2".parse().expect("address");
        for attempt in 1..FAILURES_ALLOWED {
            assert!(!brake.failed(address, "admin", 1000), "attempt {attempt}");
            assert!(!brake.held(address, "admin", 1000));
        }
        assert!(brake.failed(address, "admin", 1000));
        assert!(brake.held(address, "admin", 1000));
        assert!(brake.held(address, "admin", 1000 + HOLD_OFF_SECONDS - 1));
        assert!(!brake.held(address, "admin", 1000 + HOLD_OFF_SECONDS));
        // Another address, or another user at the same address: not held.
        assert!(!brake.held(other, "admin", 1000));
        assert!(!brake.held(address, "app", 1000));
        // Failures spread over more than a window never hold.
        let mut slow = LoginBrake::default();
        for minute in 0..20 {
            assert!(!slow.failed(address, "admin", minute * FAILURE_WINDOW_SECONDS));
        }
        // Success clears.
        brake.succeeded(address, "admin");
        assert!(!brake.held(address, "admin", 1000));
    }

    #[test]
    fn the_brake_tracks_a_bounded_number_of_addresses() {
        let mut brake = LoginBrake::default();
        for n in 0..(ADDRESSES_MAX as u32 + 100) {
            brake.failed(IpAddr::from(n.to_be_bytes()), "u", u64::from(n));
        }
        assert!(brake.tracked() <= ADDRESSES_MAX);
    }
}
