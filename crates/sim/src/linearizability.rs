//! A linearizability checker for per-key registers (write a value, delete,
//! read), over the histories clients saw: each operation has a call time
//! and, if its outcome is known, a return time and result. An operation
//! whose outcome is unknown (a timed-out write: in doubt) may take effect
//! at any point after its call, or never.
//!
//! The search is Wing and Gong's, with Lowe's memoisation of (linearized
//! set, state): pick, among the operations not yet linearized, one that no
//! other pending operation's return precedes, apply it to the register if
//! its result fits, and go on; undo on a dead end. Registers are
//! independent, so each key is checked alone.

use std::collections::HashSet;

/// What an operation did to (or saw of) the register. `None` is "absent".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Write(Option<u64>),
    /// A read that returned this (None: not found).
    Read(Option<u64>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    pub call: u64,
    /// None: in doubt (it may have applied at any time after `call`, or
    /// never). Reads with no outcome are left out by the caller.
    pub ret: Option<u64>,
    pub action: Action,
}

/// Why a history is not linearizable, for the failure report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub operations: usize,
    pub described: String,
}

/// Checks one key's history, starting from `initial`. Gives up (returns
/// Ok) only past `budget` search steps, reported through `exhausted`.
pub fn check(
    initial: Option<u64>,
    history: &[Operation],
    budget: u64,
    exhausted: &mut bool,
) -> Result<(), Violation> {
    check_from(&[initial], history, budget, exhausted)
}

/// As [`check`], from any of `initials` (a register whose value is not
/// known at the start: after a revive it holds whatever a copy kept).
pub fn check_from(
    initials: &[Option<u64>],
    history: &[Operation],
    budget: u64,
    exhausted: &mut bool,
) -> Result<(), Violation> {
    let n = history.len();
    if n == 0 {
        return Ok(());
    }
    assert!(n <= 128, "a key's history holds at most 128 operations");
    // In-doubt ops never need to be linearized: a done search is one where
    // every op with a known outcome is.
    let must: u128 = history
        .iter()
        .enumerate()
        .filter(|(_, op)| op.ret.is_some())
        .fold(0u128, |mask, (i, _)| mask | 1u128 << i);
    let mut seen: HashSet<(u128, Option<u64>)> = HashSet::new();
    let mut steps = 0u64;
    // Depth-first: (linearized mask, state).
    let mut stack: Vec<(u128, Option<u64>)> = initials.iter().map(|&state| (0, state)).collect();
    while let Some((done, state)) = stack.pop() {
        if done & must == must {
            return Ok(());
        }
        if !seen.insert((done, state)) {
            continue;
        }
        steps += 1;
        if steps > budget {
            *exhausted = true;
            return Ok(());
        }
        // The earliest return among pending ops with a known outcome: an
        // op called after it cannot come next.
        let horizon = history
            .iter()
            .enumerate()
            .filter(|(i, _)| done & (1u128 << i) == 0)
            .filter_map(|(_, op)| op.ret)
            .min()
            .unwrap_or(u64::MAX);
        for (i, op) in history.iter().enumerate() {
            if done & (1u128 << i) != 0 || op.call > horizon {
                continue;
            }
            let next = match op.action {
                Action::Write(value) => value,
                Action::Read(seen_value) if seen_value == state => state,
                Action::Read(_) => continue,
            };
            stack.push((done | 1u128 << i, next));
        }
    }
    Err(Violation {
        operations: n,
        described: describe(history),
    })
}

fn describe(history: &[Operation]) -> String {
    let mut ops: Vec<&Operation> = history.iter().collect();
    ops.sort_by_key(|op| op.call);
    ops.iter()
        .map(|op| {
            let ret = op.ret.map_or("in doubt".to_owned(), |ret| format!("{ret}"));
            format!("  [{} .. {ret}] {:?}", op.call, op.action)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: u64, ret: Option<u64>, action: Action) -> Operation {
        Operation { call, ret, action }
    }

    fn ok(initial: Option<u64>, history: &[Operation]) -> bool {
        let mut exhausted = false;
        let result = check(initial, history, 1_000_000, &mut exhausted);
        assert!(!exhausted);
        result.is_ok()
    }

    #[test]
    fn stale_read_after_an_acknowledged_write_is_rejected() {
        let history = [
            op(0, Some(10), Action::Write(Some(1))),
            op(20, Some(30), Action::Write(Some(2))),
            op(40, Some(50), Action::Read(Some(1))),
        ];
        assert!(!ok(None, &history));
    }

    #[test]
    fn lost_acknowledged_write_is_rejected() {
        let history = [
            op(0, Some(10), Action::Write(Some(1))),
            op(20, Some(30), Action::Read(None)),
        ];
        assert!(!ok(None, &history));
    }

    #[test]
    fn concurrent_operations_may_order_either_way() {
        let history = [
            op(0, Some(30), Action::Write(Some(1))),
            op(10, Some(20), Action::Read(Some(1))),
            op(25, Some(40), Action::Read(None)),
        ];
        // The first read saw 1, so the write comes before it; the second
        // read, called after the first returned, cannot see absent.
        assert!(!ok(None, &history));
        let history = [
            op(0, Some(30), Action::Write(Some(1))),
            op(10, Some(20), Action::Read(None)),
            op(25, Some(40), Action::Read(Some(1))),
        ];
        assert!(ok(None, &history));
    }

    #[test]
    fn in_doubt_writes_may_apply_late_or_never() {
        // The in-doubt write of 2 shows up long after its call.
        let history = [
            op(0, None, Action::Write(Some(2))),
            op(10, Some(20), Action::Write(Some(3))),
            op(30, Some(40), Action::Read(Some(3))),
            op(50, Some(60), Action::Read(Some(2))),
        ];
        assert!(ok(None, &history));
        // Never applied.
        let history = [
            op(0, None, Action::Write(Some(2))),
            op(30, Some(40), Action::Read(None)),
        ];
        assert!(ok(None, &history));
        // A value nobody wrote is never read.
        let history = [op(30, Some(40), Action::Read(Some(9)))];
        assert!(!ok(None, &history));
        // A value can not flip back after both were seen in order.
        let history = [
            op(0, None, Action::Write(Some(2))),
            op(10, Some(20), Action::Write(Some(3))),
            op(30, Some(40), Action::Read(Some(2))),
            op(50, Some(60), Action::Read(Some(3))),
        ];
        assert!(!ok(None, &history));
    }

    #[test]
    fn an_unknown_start_is_any_of_the_candidates_then_consistent() {
        // After a revive the register holds one of the values it had.
        let history = [
            op(0, Some(10), Action::Read(Some(2))),
            op(20, Some(30), Action::Read(Some(2))),
        ];
        let mut exhausted = false;
        assert!(check_from(&[None, Some(1), Some(2)], &history, 1000, &mut exhausted).is_ok());
        // ...but one of them, not first one and then another.
        let history = [
            op(0, Some(10), Action::Read(Some(2))),
            op(20, Some(30), Action::Read(Some(1))),
        ];
        assert!(check_from(&[None, Some(1), Some(2)], &history, 1000, &mut exhausted).is_err());
        assert!(!exhausted);
    }

    #[test]
    fn deletes_are_writes_of_absent() {
        let history = [
            op(0, Some(10), Action::Write(Some(1))),
            op(20, Some(30), Action::Write(None)),
            op(40, Some(50), Action::Read(None)),
        ];
        assert!(ok(None, &history));
        let history = [
            op(0, Some(10), Action::Write(Some(1))),
            op(20, Some(30), Action::Write(None)),
            op(40, Some(50), Action::Read(Some(1))),
        ];
        assert!(!ok(None, &history));
    }
}
