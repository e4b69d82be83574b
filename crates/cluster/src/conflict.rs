//! Which of two copies of a record wins when they meet (a migration, a
//! replica write, a merge after a split). Deletes are tombstones with a
//! generation and a last-update time, so they take part like any record.

use crate::routing::ConflictPolicy;

/// What decides between two copies of one record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    /// 1..=65535, wrapping to 1.
    pub generation: u16,
    /// Milliseconds since 2010-01-01 of the write.
    pub last_update_ms: u64,
}

/// Whether `incoming` replaces `local` (None: nothing held). Equal stamps
/// keep the local copy, so applying a copy twice changes nothing.
pub fn incoming_wins(policy: ConflictPolicy, local: Option<Stamp>, incoming: Stamp) -> bool {
    let Some(local) = local else {
        return true;
    };
    match policy {
        ConflictPolicy::Generation => {
            (incoming.generation, incoming.last_update_ms)
                > (local.generation, local.last_update_ms)
        }
        ConflictPolicy::LastUpdateTime => {
            match incoming.last_update_ms.cmp(&local.last_update_ms) {
                std::cmp::Ordering::Greater => true,
                std::cmp::Ordering::Less => false,
                std::cmp::Ordering::Equal => {
                    generation_newer(incoming.generation, local.generation)
                }
            }
        }
    }
}

/// Whether generation `a` is newer than `b`, allowing for wrap-around: `a`
/// is newer when it is ahead by less than half the range.
pub fn generation_newer(a: u16, b: u16) -> bool {
    let ahead = a.wrapping_sub(b);
    ahead != 0 && ahead < 0x8000
}

/// The stamp of a new write over a copy with `old` (if any): the next
/// generation, and a last-update time that moves forward even if the clock
/// did not, so replicas order two writes of one record the same way.
pub fn next_stamp(old: Option<Stamp>, now_ms: u64) -> Stamp {
    match old {
        None => Stamp {
            generation: 1,
            last_update_ms: now_ms,
        },
        Some(old) => Stamp {
            generation: if old.generation == u16::MAX {
                1
            } else {
                old.generation + 1
            },
            last_update_ms: now_ms.max(old.last_update_ms + 1),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(generation: u16, last_update_ms: u64) -> Stamp {
        Stamp {
            generation,
            last_update_ms,
        }
    }

    #[test]
    fn generation_policy() {
        let policy = ConflictPolicy::Generation;
        assert!(incoming_wins(policy, None, stamp(1, 1)));
        assert!(incoming_wins(policy, Some(stamp(3, 100)), stamp(4, 50)));
        assert!(!incoming_wins(policy, Some(stamp(4, 50)), stamp(3, 100)));
        assert!(incoming_wins(policy, Some(stamp(4, 50)), stamp(4, 51)));
        assert!(!incoming_wins(policy, Some(stamp(4, 50)), stamp(4, 50)));
    }

    #[test]
    fn last_update_policy() {
        let policy = ConflictPolicy::LastUpdateTime;
        assert!(incoming_wins(policy, Some(stamp(9, 100)), stamp(1, 101)));
        assert!(!incoming_wins(policy, Some(stamp(1, 101)), stamp(9, 100)));
        // Equal times: the newer generation across the wrap.
        assert!(incoming_wins(policy, Some(stamp(65535, 7)), stamp(1, 7)));
        assert!(!incoming_wins(policy, Some(stamp(1, 7)), stamp(65535, 7)));
    }

    #[test]
    fn next_stamp_moves_forward() {
        assert_eq!(next_stamp(None, 10), stamp(1, 10));
        assert_eq!(next_stamp(Some(stamp(65535, 10)), 5), stamp(1, 11));
        assert_eq!(next_stamp(Some(stamp(2, 10)), 50), stamp(3, 50));
    }
}
