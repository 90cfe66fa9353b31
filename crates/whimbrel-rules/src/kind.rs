//! What runs a node of a plan, defined once (design.md § 9.1, § 9.2): a
//! Lambda the engine invokes, a task list external workers claim from, a
//! durable timer the heartbeat monitor fires, a wait for a signal a
//! client sends, or a child workflow the node starts and waits for. A plan
//! node is exactly one ([`crate::plan::PlannedActivity::kind`]); an activity
//! exec item holds it with its fields ([`crate::model::Runs`]). Every
//! question below is an exhaustive match, so a new kind is answered
//! everywhere the compiler names. Every rule that differs by kind asks the
//! kind: its contract rows
//! ([`crate::contract::table`]), the state its release reaches
//! ([`NodeKind::released_as`]), whether an attempt is invoked
//! ([`NodeKind::is_invoked`]), its deadlines
//! ([`crate::decide::deadline::next_deadline`]).

use serde::{Deserialize, Serialize};

use crate::contract::{ActivityState, Transition};
use crate::plan::PlanError;

/// The kind of a plan node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// `lambda`: each attempt is an asynchronous Invoke of the function.
    Lambda,
    /// `task_list`: each attempt waits in the list's index for a worker's
    /// claim (docs/workers.md); nothing is invoked.
    TaskList,
    /// `wait`: a durable timer. Released, it is RUNNING until its fire time,
    /// when the monitor completes it (output `{"fired_at": epoch}`);
    /// nothing is invoked, no token is minted, no report is taken but
    /// CANCEL.
    Timer,
    /// `signal`: waits for a named signal (a row of `whimbrel_signal`).
    /// Released, it is RUNNING until a signal of its name is delivered (it
    /// COMPLETES with the signal's input as its output) or its
    /// `timeout_seconds` pass (TIMED_OUT by the monitor); nothing is
    /// invoked, no token is minted, no report is taken but CANCEL.
    Signal,
    /// `workflow`: a child workflow (design.md § 9.5). Released, it is
    /// RUNNING while the child runs (the release inserts the child's
    /// request row), and ends as the child ends: COMPLETED with its result,
    /// or FAILED with its reason. Cancelled, it cancels the child unless
    /// its `parent_close` is `abandon`. Nothing is invoked, no token is
    /// minted, no report is taken but CANCEL.
    Child,
}

impl NodeKind {
    /// Every kind, in the order validation names them.
    pub const ALL: [NodeKind; 5] = [
        NodeKind::Lambda,
        NodeKind::TaskList,
        NodeKind::Timer,
        NodeKind::Signal,
        NodeKind::Child,
    ];

    /// The plan field that gives this kind: `lambda`, `task_list`, `wait`,
    /// `signal`, `workflow`.
    pub fn field(self) -> &'static str {
        match self {
            NodeKind::Lambda => "lambda",
            NodeKind::TaskList => "task_list",
            NodeKind::Timer => "wait",
            NodeKind::Signal => "signal",
            NodeKind::Child => "workflow",
        }
    }

    /// True when the engine claims each attempt with a token and invokes
    /// a Lambda (the launcher); false for task lists (a worker claims),
    /// timers and signal waits (nothing runs).
    pub fn is_invoked(self) -> bool {
        match self {
            NodeKind::Lambda => true,
            NodeKind::TaskList | NodeKind::Timer | NodeKind::Signal | NodeKind::Child => false,
        }
    }

    /// The transition and state the release of its first attempt writes
    /// (contract: "Launching A New Activity"): QUEUED for activities,
    /// RUNNING for a timer, a signal wait or a child workflow, which start
    /// waiting at once.
    pub fn released_as(self) -> (Transition, ActivityState) {
        if self.runs_code() {
            (Transition::Queued, ActivityState::Queued)
        } else {
            (Transition::Running, ActivityState::Running)
        }
    }

    /// True when the node runs code that may time out, retry, heartbeat and
    /// report (Lambdas and task lists); a timer or a signal wait does none
    /// of these (a signal wait takes one timeout, `timeout_seconds`).
    pub fn runs_code(self) -> bool {
        match self {
            NodeKind::Lambda | NodeKind::TaskList => true,
            NodeKind::Timer | NodeKind::Signal | NodeKind::Child => false,
        }
    }
}

/// What becomes of a child workflow when its node is cancelled (its
/// parent's cancel, execution timeout, or another activity's failure;
/// design.md § 9.5): plan field `parent_close`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParentClose {
    /// The child is cancelled too (a cancel request row for it).
    #[default]
    Cancel,
    /// The child runs on; its end no longer reaches the parent.
    Abandon,
}

/// Deepest nesting of child workflows: a workflow started by a node of a
/// workflow at depth [`MAX_CHILD_DEPTH`] fails at its start, and the
/// failure reaches every ancestor (a runaway recursion ends).
pub const MAX_CHILD_DEPTH: u32 = 8;

/// How long a timer node waits: exactly one of `seconds` (from its
/// release) and `until` (an RFC 3339 time, e.g. `"2026-12-01T09:00:00Z"`;
/// a time already past fires at once), at most [`MAX_WAIT_SECONDS`] ahead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitSpec {
    /// Seconds from the timer's release to its fire time,
    /// 0..=[`MAX_WAIT_SECONDS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<i64>,
    /// The fire time, RFC 3339 with an offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// Longest wait of a timer node, seconds (366 days).
pub const MAX_WAIT_SECONDS: i64 = 366 * 24 * 3600;

impl WaitSpec {
    /// `until` as epoch seconds; `None` when absent or not RFC 3339.
    pub fn until_epoch(&self) -> Option<i64> {
        let until = self.until.as_deref()?;
        let t = chrono::DateTime::parse_from_rfc3339(until).ok()?;
        Some(t.timestamp())
    }

    /// Exactly one of `seconds` and `until`, in range and well formed.
    pub(crate) fn check(&self, name: &str) -> Result<(), PlanError> {
        let why = match (self.seconds, &self.until) {
            (Some(s), None) if !(0..=MAX_WAIT_SECONDS).contains(&s) => {
                format!("wait.seconds is {s}; it must be within 0..={MAX_WAIT_SECONDS}")
            }
            (None, Some(u)) if self.until_epoch().is_none() => {
                format!("wait.until {u:?} is not an RFC 3339 time")
            }
            (Some(_), None) | (None, Some(_)) => return Ok(()),
            _ => "wait needs exactly one of seconds or until".into(),
        };
        Err(PlanError::BadWait {
            activity: name.into(),
            why,
        })
    }

    /// A `until` more than [`MAX_WAIT_SECONDS`] after `now` (epoch
    /// seconds, the start of the workflow) is refused, with the reason.
    pub fn check_at(&self, name: &str, now: i64) -> Result<(), PlanError> {
        match self.until_epoch() {
            Some(at) if at > now.saturating_add(MAX_WAIT_SECONDS) => Err(PlanError::BadWait {
                activity: name.into(),
                why: format!(
                    "wait.until is {}s ahead; at most {MAX_WAIT_SECONDS}s are allowed",
                    at - now
                ),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lambdas_are_invoked_and_only_timers_skip_the_queue() {
        let invoked: Vec<_> = NodeKind::ALL
            .into_iter()
            .filter(|k| k.is_invoked())
            .collect();
        assert_eq!(invoked, [NodeKind::Lambda]);
        assert_eq!(NodeKind::Timer.released_as().1, ActivityState::Running);
        assert_eq!(NodeKind::TaskList.released_as().1, ActivityState::Queued);
        let fields: Vec<_> = NodeKind::ALL.into_iter().map(NodeKind::field).collect();
        assert_eq!(
            fields,
            ["lambda", "task_list", "wait", "signal", "workflow"]
        );
        assert_eq!(NodeKind::Child.released_as().1, ActivityState::Running);
        assert!(!NodeKind::Child.runs_code() && !NodeKind::Child.is_invoked());
        assert_eq!(NodeKind::Signal.released_as().1, ActivityState::Running);
        assert!(!NodeKind::Signal.runs_code() && !NodeKind::Signal.is_invoked());
    }

    /// docs/limits.md § 1: a `wait.until` exactly [`MAX_WAIT_SECONDS`]
    /// after the start is admitted; one second more is refused with the
    /// reason.
    #[test]
    fn a_wait_until_at_the_longest_wait_is_admitted_and_one_second_more_refused() {
        let now = 1_767_225_600; // 2026-01-01T00:00:00Z
        let until = |epoch: i64| WaitSpec {
            seconds: None,
            until: chrono::DateTime::from_timestamp(epoch, 0).map(|t| t.to_rfc3339()),
        };
        let at = until(now + MAX_WAIT_SECONDS);
        assert_eq!(at.until_epoch(), Some(now + MAX_WAIT_SECONDS));
        assert!(at.check("t").is_ok() && at.check_at("t", now).is_ok());
        let past = until(now + MAX_WAIT_SECONDS + 1).check_at("t", now);
        let why = past.unwrap_err().to_string();
        assert!(
            why.contains("wait.until is 31622401s ahead; at most 31622400s"),
            "{why}"
        );
    }
}
