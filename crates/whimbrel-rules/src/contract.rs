//! The Whimbrel contract as one table: activity states, the transitions that
//! move between them, and who may request each transition.
//!
//! Pure logic, no I/O. Every rule about which state accepts which transition
//! lives in [`TRANSITIONS`]; everything else (the engine, the handlers, the
//! CLI) asks this module.
//!
//! Sources: contract = the public Whimbrel contract, "Update Activity States
//! and Transitions"; design.md § n.m = `docs/design.md`, section n.m.

use crate::attr;
pub use crate::kind::NodeKind;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// State of one activity execution (`whimbrel_activity_exec.state`).
///
/// Source: contract, "States". Stored as the upper-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActivityState {
    /// Inserted into `whimbrel_activity_exec`, waiting for prerequisites.
    Requested,
    /// Every prerequisite COMPLETED.
    Ready,
    /// Submitted for execution: an attempt is queued. A Lambda attempt is
    /// claimed by a conditional update and launched (launched again, same
    /// attempt, if it never starts); a task-list attempt waits for a
    /// worker's claim; a retried attempt waits out its delay first.
    Queued,
    /// The environment that runs the activity is being set up.
    Preparing,
    /// The activity runs and, if heartbeats are enabled, heartbeats.
    Running,
    /// Cancelled before it ran. Terminal.
    Cancelled,
    /// Cancelled while running; waits for the activity's final report
    /// (design.md § 3.5).
    CancelledRunning,
    /// The heartbeat went stale. Terminal.
    TimedOut,
    /// Ended with an error. Terminal.
    Failed,
    /// Ended without error. Terminal.
    Completed,
}

/// Every activity state, in contract order.
pub const ALL_STATES: [ActivityState; 10] = [
    ActivityState::Requested,
    ActivityState::Ready,
    ActivityState::Queued,
    ActivityState::Preparing,
    ActivityState::Running,
    ActivityState::Cancelled,
    ActivityState::CancelledRunning,
    ActivityState::TimedOut,
    ActivityState::Failed,
    ActivityState::Completed,
];

/// A requested change of activity state (`whimbrel_activity_event.transition`).
///
/// Source: contract, "Transitions", plus `TIMED_OUT` applied by the heartbeat
/// monitor (design.md § 3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Transition {
    /// Cancel: to CANCELLED, or CANCELLED_RUNNING when running.
    Cancel,
    /// Every prerequisite completed.
    Ready,
    /// Submitted for execution.
    Queued,
    /// Environment set-up started.
    Preparing,
    /// The activity started.
    Running,
    /// The activity (or its environment) failed.
    Failed,
    /// The activity finished without error.
    Completed,
    /// The heartbeat monitor found the heartbeat stale.
    TimedOut,
}

/// Every transition name.
pub const ALL_TRANSITIONS: [Transition; 8] = [
    Transition::Cancel,
    Transition::Ready,
    Transition::Queued,
    Transition::Preparing,
    Transition::Running,
    Transition::Failed,
    Transition::Completed,
    Transition::TimedOut,
];

/// Who requests a transition. The table says which actors may apply which
/// transition (contract: "the activity state change should only be handled
/// from the activities themselves"; READY / QUEUED belong to the launcher).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    /// A row in `whimbrel_activity_event` written by an activity or a user
    /// (Simple Lambda API) without the live attempt's token.
    Client,
    /// A row in `whimbrel_activity_event` carrying the live attempt's token:
    /// the running activity itself. It may do what a client may, and end
    /// CANCELLED_RUNNING with CANCEL (design.md § 3.5: only the activity's own
    /// report acknowledges a cancel).
    Attempt,
    /// The engine itself: dependency release, launching, cancel propagation.
    Engine,
    /// The heartbeat monitor.
    Monitor,
}

/// Which actors may request a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Actors {
    client: bool,
    attempt: bool,
    engine: bool,
    monitor: bool,
}

const CLIENT: Actors = Actors {
    client: true,
    attempt: true,
    engine: false,
    monitor: false,
};
const ATTEMPT: Actors = Actors {
    client: false,
    attempt: true,
    engine: false,
    monitor: false,
};
const ENGINE: Actors = Actors {
    client: false,
    attempt: false,
    engine: true,
    monitor: false,
};
const CLIENT_OR_ENGINE: Actors = Actors {
    client: true,
    attempt: true,
    engine: true,
    monitor: false,
};
const MONITOR: Actors = Actors {
    client: false,
    attempt: false,
    engine: false,
    monitor: true,
};

impl Actors {
    fn allows(self, actor: Actor) -> bool {
        match actor {
            Actor::Client => self.client,
            Actor::Attempt => self.attempt,
            Actor::Engine => self.engine,
            Actor::Monitor => self.monitor,
        }
    }
}

use ActivityState as S;
use Transition as T;

/// One row of a contract table: (from state, transition, to state, who may
/// request it).
pub type Row = (ActivityState, Transition, ActivityState, ActorsSet);

/// The contract table: (from state, transition, to state, who may request it).
///
/// Every row comes from the contract's "Transitions" list, except the
/// CANCELLED_RUNNING rows and the TIMED_OUT rows, which come from design.md § 3.5
/// and 3.6. A pair not in this table is rejected.
#[rustfmt::skip]
pub const TRANSITIONS: &[Row] = &[
    // contract: Current state REQUESTED
    (S::Requested, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Requested, T::Ready, S::Ready, ActorsSet(ENGINE)),
    (S::Requested, T::Queued, S::Queued, ActorsSet(ENGINE)),
    // contract: Current state READY
    (S::Ready, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Ready, T::Queued, S::Queued, ActorsSet(ENGINE)),
    (S::Ready, T::Preparing, S::Preparing, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Ready, T::Running, S::Running, ActorsSet(CLIENT_OR_ENGINE)),
    // contract: Current state QUEUED
    (S::Queued, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Queued, T::Preparing, S::Preparing, ActorsSet(CLIENT)),
    (S::Queued, T::Running, S::Running, ActorsSet(CLIENT)),
    (S::Queued, T::Failed, S::Failed, ActorsSet(CLIENT_OR_ENGINE)),
    // Extension: schedule-to-start and schedule-to-close fire in QUEUED.
    (S::Queued, T::TimedOut, S::TimedOut, ActorsSet(MONITOR)),
    // contract: Current state PREPARING
    (S::Preparing, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Preparing, T::Running, S::Running, ActorsSet(CLIENT)),
    (S::Preparing, T::Failed, S::Failed, ActorsSet(CLIENT)),
    // Extension: every non-terminal state after launch has a deadline; a
    // PREPARING activity that never runs is timed out by the monitor.
    (S::Preparing, T::TimedOut, S::TimedOut, ActorsSet(MONITOR)),
    // contract: Current state RUNNING (+ design.md § 3.6 TIMED_OUT)
    (S::Running, T::Cancel, S::CancelledRunning, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Running, T::Failed, S::Failed, ActorsSet(CLIENT)),
    (S::Running, T::Completed, S::Completed, ActorsSet(CLIENT)),
    (S::Running, T::TimedOut, S::TimedOut, ActorsSet(MONITOR)),
    // design.md § 3.5: CANCELLED_RUNNING accepts the activity's final report and
    // the monitor's TIMED_OUT. Its CANCEL acknowledgement must carry the
    // live attempt's token: a second user CANCEL must not end it.
    (S::CancelledRunning, T::Cancel, S::Cancelled, ActorsSet(ATTEMPT)),
    (S::CancelledRunning, T::Completed, S::Completed, ActorsSet(CLIENT)),
    (S::CancelledRunning, T::Failed, S::Failed, ActorsSet(CLIENT)),
    (S::CancelledRunning, T::TimedOut, S::TimedOut, ActorsSet(MONITOR)),
];

/// A durable timer's own table (design.md § 9.1), in place of
/// [`TRANSITIONS`] for [`NodeKind::Timer`]: its release takes it to RUNNING
/// (nothing is queued or invoked), only the monitor completes it at its
/// fire time, and a CANCEL ends it at once (no attempt runs to acknowledge
/// it). It has no PREPARING, FAILED or TIMED_OUT: nothing runs that could
/// fail or be late. Its terminal states are the base table's.
#[rustfmt::skip]
pub const TIMER_TRANSITIONS: &[Row] = &[
    (S::Requested, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Requested, T::Ready, S::Ready, ActorsSet(ENGINE)),
    (S::Requested, T::Running, S::Running, ActorsSet(ENGINE)),
    (S::Ready, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Ready, T::Running, S::Running, ActorsSet(ENGINE)),
    (S::Running, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Running, T::Completed, S::Completed, ActorsSet(MONITOR)),
];

/// Extension (design.md § 9.2): the transitions of a signal wait. The
/// timer's, but COMPLETED by the engine when a signal of its name is
/// delivered (the signal stream's handler, its release, or the monitor's
/// last read before a timeout), and TIMED_OUT by the monitor when its
/// `timeout_seconds` pass first.
#[rustfmt::skip]
pub const SIGNAL_TRANSITIONS: &[Row] = &[
    (S::Requested, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Requested, T::Ready, S::Ready, ActorsSet(ENGINE)),
    (S::Requested, T::Running, S::Running, ActorsSet(ENGINE)),
    (S::Ready, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Ready, T::Running, S::Running, ActorsSet(ENGINE)),
    (S::Running, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Running, T::Completed, S::Completed, ActorsSet(ENGINE)),
    (S::Running, T::TimedOut, S::TimedOut, ActorsSet(MONITOR)),
];

/// Extension (design.md § 9.5): the transitions of a child workflow
/// node. Released to RUNNING like a timer; COMPLETED or FAILED by the
/// engine only, as its child workflow ends (the child's end reports it);
/// cancelled like any node. No timeout of its own: the child's plan
/// bounds it (`execution_timeout_seconds`).
#[rustfmt::skip]
pub const CHILD_TRANSITIONS: &[Row] = &[
    (S::Requested, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Requested, T::Ready, S::Ready, ActorsSet(ENGINE)),
    (S::Requested, T::Running, S::Running, ActorsSet(ENGINE)),
    (S::Ready, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Ready, T::Running, S::Running, ActorsSet(ENGINE)),
    (S::Running, T::Cancel, S::Cancelled, ActorsSet(CLIENT_OR_ENGINE)),
    (S::Running, T::Completed, S::Completed, ActorsSet(ENGINE)),
    (S::Running, T::Failed, S::Failed, ActorsSet(ENGINE)),
];

/// The contract table of a node of `kind`: [`TIMER_TRANSITIONS`] for
/// timers, [`SIGNAL_TRANSITIONS`] for signal waits, [`CHILD_TRANSITIONS`]
/// for child workflows, [`TRANSITIONS`] for everything that runs code.
pub fn table(kind: NodeKind) -> &'static [Row] {
    match kind {
        NodeKind::Timer => TIMER_TRANSITIONS,
        NodeKind::Signal => SIGNAL_TRANSITIONS,
        NodeKind::Child => CHILD_TRANSITIONS,
        NodeKind::Lambda | NodeKind::TaskList => TRANSITIONS,
    }
}

/// The states from which `transition` reaches `to`, by the rows of the
/// table of `kind` ([`table`]): what a write of that move requires of the
/// item (its `state IN (...)` condition), so a move the table does not
/// have is refused by DynamoDB itself, in every build.
pub fn sources(kind: NodeKind, transition: Transition, to: ActivityState) -> Vec<ActivityState> {
    table(kind)
        .iter()
        .filter(|(_, t, target, _)| *t == transition && *target == to)
        .map(|(from, ..)| *from)
        .collect()
}

/// Extension (retries, after the task-server spec's "Running to Terminated
/// with `retry_count < max_retry_count`" rule): the states from which a
/// failed attempt may go back to QUEUED for the next attempt instead of
/// ending. The failure itself must be a row of [`TRANSITIONS`] (so the same
/// actors may cause it: the activity's FAILED report, the engine's FAILED
/// when a launch is refused or never starts, the monitor's TIMED_OUT);
/// whether attempts are left is the retry policy's
/// ([`crate::retry::RetryPolicy`]). Not from CANCELLED_RUNNING: a cancelled
/// activity is never retried.
pub const RETRY_FROM: [ActivityState; 3] = [S::Queued, S::Preparing, S::Running];

/// The state a failure (`FAILED` or `TIMED_OUT` from `state`, accepted by
/// [`next_state`]) leads to when the retry policy has attempts left:
/// `Some(QUEUED)`, or `None` when this failure can never be retried.
pub fn retry_state(state: ActivityState, transition: Transition) -> Option<ActivityState> {
    (RETRY_FROM.contains(&state) && matches!(transition, T::Failed | T::TimedOut))
        .then_some(S::Queued)
}

/// Opaque set of actors allowed to request one row of [`TRANSITIONS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActorsSet(Actors);

impl ActorsSet {
    /// True if `actor` may request this row's transition.
    pub fn allows(self, actor: Actor) -> bool {
        self.0.allows(actor)
    }
}

/// Why a transition cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The state is terminal: nothing may change it (contract: "Terminal
    /// states (no transitions)"). The request can never apply.
    #[error("activity is in terminal state {state}; transition {transition} can never apply")]
    Terminal {
        /// Current state.
        state: ActivityState,
        /// Requested transition.
        transition: Transition,
    },
    /// The pair is not in the table, but the transition is allowed from a
    /// state still reachable from the current one (e.g. COMPLETED while
    /// QUEUED, before RUNNING was applied). Retry later (design.md § 3.8).
    #[error("transition {transition} is not valid from {state} yet")]
    NotYet {
        /// Current state.
        state: ActivityState,
        /// Requested transition.
        transition: Transition,
    },
    /// The pair is not in the table and never will be for this activity.
    #[error("transition {transition} is not allowed from {state}")]
    NotAllowed {
        /// Current state.
        state: ActivityState,
        /// Requested transition.
        transition: Transition,
    },
    /// A report of progress while no attempt is claimed.
    #[error("transition {transition}: the activity ({state}) has no launched attempt")]
    NeverLaunched {
        /// Current state.
        state: ActivityState,
        /// Requested transition.
        transition: Transition,
    },
    /// The transition exists from this state but `actor` may not request it
    /// (for example a client asking for QUEUED or TIMED_OUT).
    #[error("transition {transition} from {state} may not be requested by {actor:?}")]
    Forbidden {
        /// Current state.
        state: ActivityState,
        /// Requested transition.
        transition: Transition,
        /// Who asked.
        actor: Actor,
    },
}

impl TransitionError {
    /// True when the same request may succeed later, so a stream record
    /// carrying it must be retried rather than rejected (design.md § 3.8).
    pub fn is_retryable(&self) -> bool {
        matches!(self, TransitionError::NotYet { .. })
    }
}

impl ActivityState {
    /// True for CANCELLED, TIMED_OUT, FAILED and COMPLETED (contract:
    /// "Terminal states").
    pub fn is_terminal(self) -> bool {
        !TRANSITIONS.iter().any(|(from, ..)| *from == self)
    }

    /// True when the activity never ran and can still be cancelled without
    /// its cooperation (REQUESTED, READY, QUEUED, PREPARING): the targets of
    /// failure propagation (design.md § 3.4).
    pub fn is_not_started(self) -> bool {
        matches!(self, S::Requested | S::Ready | S::Queued | S::Preparing)
    }

    /// True while the activity runs and must heartbeat (RUNNING,
    /// CANCELLED_RUNNING): the states the heartbeat monitor watches.
    pub fn is_running(self) -> bool {
        matches!(self, S::Running | S::CancelledRunning)
    }

    /// The stored name, e.g. `"CANCELLED_RUNNING"`.
    pub fn as_str(self) -> &'static str {
        match self {
            S::Requested => "REQUESTED",
            S::Ready => "READY",
            S::Queued => "QUEUED",
            S::Preparing => "PREPARING",
            S::Running => "RUNNING",
            S::Cancelled => "CANCELLED",
            S::CancelledRunning => "CANCELLED_RUNNING",
            S::TimedOut => "TIMED_OUT",
            S::Failed => "FAILED",
            S::Completed => "COMPLETED",
        }
    }

    /// States reachable from `self` by zero or more rows of `rows`,
    /// whoever requests them.
    fn reachable(self, rows: &[Row]) -> Vec<ActivityState> {
        let mut seen = vec![self];
        let mut i = 0;
        while i < seen.len() {
            let from = seen[i];
            for (f, _, to, _) in rows {
                if *f == from && !seen.contains(to) {
                    seen.push(*to);
                }
            }
            i += 1;
        }
        seen
    }
}

impl Transition {
    /// The stored name, e.g. `"COMPLETED"`.
    pub fn as_str(self) -> &'static str {
        match self {
            T::Cancel => "CANCEL",
            T::Ready => "READY",
            T::Queued => "QUEUED",
            T::Preparing => "PREPARING",
            T::Running => "RUNNING",
            T::Failed => "FAILED",
            T::Completed => "COMPLETED",
            T::TimedOut => "TIMED_OUT",
        }
    }
}

/// Apply `transition`, requested by `actor`, to a node of `kind` in
/// `state`, by the kind's table ([`table`]).
///
/// Returns the new state, or why it cannot apply (see [`TransitionError`];
/// only [`TransitionError::NotYet`] is worth retrying).
///
/// Source: contract, "Transitions"; design.md § 3.5, 3.6, 3.8, 9.1.
pub fn next_state(
    kind: NodeKind,
    state: ActivityState,
    transition: Transition,
    actor: Actor,
) -> Result<ActivityState, TransitionError> {
    let rows = table(kind);
    if let Some((_, _, to, actors)) = rows
        .iter()
        .find(|(from, t, ..)| *from == state && *t == transition)
    {
        return if actors.allows(actor) {
            Ok(*to)
        } else {
            Err(TransitionError::Forbidden {
                state,
                transition,
                actor,
            })
        };
    }
    if state.is_terminal() {
        return Err(TransitionError::Terminal { state, transition });
    }
    let later = state.reachable(rows).into_iter().skip(1).any(|s| {
        rows.iter()
            .any(|(from, t, _, a)| *from == s && *t == transition && a.allows(actor))
    });
    if later {
        Err(TransitionError::NotYet { state, transition })
    } else {
        Err(TransitionError::NotAllowed { state, transition })
    }
}

/// [`next_state`] for a report (an event row) about a node of `kind` whose
/// live attempt is `launched` (claimed: invoked, or taken by a worker) or
/// not: a report of progress (PREPARING, RUNNING, COMPLETED, FAILED) while
/// no attempt is claimed (never queued, a retry's delay, a task waiting for
/// a worker, a timer) cannot be legitimate and is refused at once
/// (design.md § 3.8), where [`next_state`] alone would call it "not yet".
pub fn next_state_of_report(
    kind: NodeKind,
    state: ActivityState,
    launched: bool,
    transition: Transition,
    actor: Actor,
) -> Result<ActivityState, TransitionError> {
    let progress = matches!(
        transition,
        T::Preparing | T::Running | T::Completed | T::Failed
    );
    if !launched && progress && matches!(actor, Actor::Client | Actor::Attempt) {
        return Err(TransitionError::NeverLaunched { state, transition });
    }
    next_state(kind, state, transition, actor)
}

/// Error for a state or transition name that is not in the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownName {
    kind: &'static str,
    value: String,
}

impl FromStr for ActivityState {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_STATES
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| UnknownName {
                kind: "activity state",
                value: s.to_string(),
            })
    }
}

impl FromStr for Transition {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_TRANSITIONS
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| UnknownName {
                kind: "transition",
                value: s.to_string(),
            })
    }
}

impl fmt::Display for ActivityState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// State of one workflow execution (`whimbrel_workflow_exec.state`).
///
/// Source: design.md § 3.1: `REQUESTED → RUNNING → COMPLETED | FAILED | CANCELLED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkflowState {
    /// Created; the plan is being obtained and written.
    Requested,
    /// Activities exist and run.
    Running,
    /// Every activity COMPLETED.
    Completed,
    /// An activity FAILED or TIMED_OUT, or the plan could not be obtained.
    Failed,
    /// Cancelled (some activity cancelled, none failed).
    Cancelled,
}

impl WorkflowState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Requested => "REQUESTED",
            WorkflowState::Running => "RUNNING",
            WorkflowState::Completed => "COMPLETED",
            WorkflowState::Failed => "FAILED",
            WorkflowState::Cancelled => "CANCELLED",
        }
    }

    /// True for COMPLETED, FAILED, CANCELLED.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WorkflowState::Completed | WorkflowState::Failed | WorkflowState::Cancelled
        )
    }

    /// True if a workflow exec may move from `self` to `to` (design.md § 3.1:
    /// REQUESTED → RUNNING → COMPLETED | FAILED | CANCELLED; a workflow whose
    /// plan cannot be obtained goes REQUESTED → FAILED).
    pub fn may_move_to(self, to: WorkflowState) -> bool {
        use WorkflowState as W;
        matches!(
            (self, to),
            (W::Requested, W::Running) | (W::Requested, W::Failed) | (W::Requested, W::Cancelled)
        ) || (self == W::Running && to.is_terminal())
    }
}

impl fmt::Display for WorkflowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counts of activities that ended, per outcome, kept on the workflow exec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndCounts {
    /// Activities that ended COMPLETED.
    pub completed: u64,
    /// Activities that ended FAILED or TIMED_OUT.
    pub failed: u64,
    /// Activities that ended CANCELLED.
    pub cancelled: u64,
}

/// The workflow's final state once its last activity ended, or `None` while
/// activities remain (`total` = activities in the plan).
///
/// Source: design.md § 3.3: COMPLETED when all COMPLETED; FAILED when any FAILED or
/// TIMED_OUT; CANCELLED when cancelled.
pub fn workflow_outcome(total: u64, ended: EndCounts) -> Option<WorkflowState> {
    if ended.completed + ended.failed + ended.cancelled < total {
        None
    } else if ended.failed > 0 {
        Some(WorkflowState::Failed)
    } else if ended.cancelled > 0 {
        Some(WorkflowState::Cancelled)
    } else {
        Some(WorkflowState::Completed)
    }
}

impl ActivityState {
    /// True for the ends that fail the workflow: FAILED and TIMED_OUT
    /// (design.md § 3.3).
    pub fn is_failure(self) -> bool {
        matches!(self, S::Failed | S::TimedOut)
    }
}

/// Which end counter a terminal activity state increments.
pub fn end_counter(state: ActivityState) -> Option<&'static str> {
    match state {
        S::Completed => Some(attr::COMPLETED_COUNT),
        s if s.is_failure() => Some(attr::FAILED_COUNT),
        S::Cancelled => Some(attr::CANCELLED_COUNT),
        _ => None,
    }
}

#[cfg(test)]
#[path = "contract_tests.rs"]
mod contract_tests;
