//! What a state owes, as data (design.md § 8.2): the one answer to "what
//! happens after COMPLETED" (or FAILED, TIMED_OUT, CANCELLED). The engine's
//! settle asks [`owed`] for the obligations of the state an activity
//! reached and performs them in order; the monitor settles again while
//! the item's due marker says they are not all done. Each is idempotent,
//! so a settle cut short (a function's timeout, a budget spent) is resumed
//! from the start.

use crate::contract::ActivityState;
use crate::model::ActivityExec;

/// One thing a state owes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obligation {
    /// Give back the slot its attempt held under a plan's or a target's
    /// concurrency limit, and hand it to a waiter.
    FreeSlot,
    /// Release the dependents whose last prerequisite it was (COMPLETED
    /// only). May stop short of the end, under the invocation's budget:
    /// then the obligations after it stay owed.
    ReleaseDependents,
    /// Cancel a child workflow node's child, unless its `parent_close` is
    /// `abandon`.
    CloseChild,
    /// Cancel the children a failing workflow started.
    CancelChildren,
    /// Cancel the dependents that can no longer run.
    CancelDependents,
    /// Count its end toward its workflow's finish (or append it to the
    /// decider's log, for a node a decision scheduled), and finish the
    /// workflow when it was the last.
    EndCounted,
    /// Remove its due marker: nothing is owed any more.
    ClearDue,
}

/// The obligations of `exec`'s state, in the order they are performed:
/// none while it is not terminal (a claimed attempt is launched by its
/// claimer; a lost launch is the monitor's), and the due marker cleared
/// last, only when it has one.
pub fn owed(exec: &ActivityExec) -> Vec<Obligation> {
    use Obligation::*;
    let mut owed = match exec.state {
        ActivityState::Completed => vec![FreeSlot, ReleaseDependents, EndCounted],
        s if s.is_terminal() => vec![
            FreeSlot,
            CloseChild,
            CancelChildren,
            CancelDependents,
            EndCounted,
        ],
        _ => return Vec::new(),
    };
    if exec.timing.due_epoch.is_some() {
        owed.push(ClearDue);
    }
    owed
}

#[cfg(test)]
mod tests {
    use super::*;
    use Obligation::*;

    fn at(state: ActivityState, due: Option<i64>) -> ActivityExec {
        let mut a = crate::decide::tests::running(None, None);
        a.state = state;
        a.timing.due_epoch = due;
        a
    }

    #[test]
    fn a_completed_activity_releases_its_dependents_before_it_counts_and_clears() {
        assert_eq!(
            owed(&at(ActivityState::Completed, Some(100))),
            [FreeSlot, ReleaseDependents, EndCounted, ClearDue]
        );
    }

    #[test]
    fn every_other_end_cancels_what_can_no_longer_run() {
        for s in [
            ActivityState::Failed,
            ActivityState::TimedOut,
            ActivityState::Cancelled,
        ] {
            assert_eq!(
                owed(&at(s, Some(100))),
                [
                    FreeSlot,
                    CloseChild,
                    CancelChildren,
                    CancelDependents,
                    EndCounted,
                    ClearDue
                ],
                "{s}"
            );
        }
    }

    #[test]
    fn a_live_state_owes_nothing_and_a_settled_one_no_marker() {
        for s in [
            ActivityState::Requested,
            ActivityState::Queued,
            ActivityState::Running,
            ActivityState::CancelledRunning,
        ] {
            assert!(owed(&at(s, Some(100))).is_empty(), "{s}");
        }
        assert!(!owed(&at(ActivityState::Completed, None)).contains(&ClearDue));
    }
}
