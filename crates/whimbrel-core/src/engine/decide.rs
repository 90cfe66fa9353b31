//! The engine's rules as pure functions: from the items read, one input and
//! the time, the typed conditional writes to make and the monitor's
//! verdicts. No I/O, no clock, no randomness: everything comes in as
//! arguments, so each rule is unit-tested without a server.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::EngineConfig;
use crate::contract::{self, ActivityState, Actor, Transition};
use crate::dates::Timestamp;
use crate::ids;
use crate::model::{ActivityExec, HistoryEntry, ParkedEvent};
use crate::store::{self, av, n, s, Action, Cond, Item, Tables, UpdateRequest};

/// Longest `error` text stored, bytes; longer texts are cut (on a character
/// boundary) and marked, so a report can never fail for its error's size.
pub const MAX_ERROR_BYTES: usize = 2048;

/// `text` cut to [`MAX_ERROR_BYTES`].
pub fn cap_error(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_string();
    }
    // Room for the marker: " [... N bytes cut]" with N up to 10 digits.
    let mut end = MAX_ERROR_BYTES - 32;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [... {} bytes cut]", &text[..end], text.len() - end)
}

/// What an input carries besides its transition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    /// Output (COMPLETED).
    pub output: Option<serde_json::Value>,
    /// Error text (FAILED, CANCEL, TIMED_OUT), capped when written.
    pub error: Option<String>,
    /// The time of the change, epoch seconds; the engine's now when absent.
    pub at: Option<i64>,
    /// For TIMED_OUT by heartbeat: the write requires
    /// `heartbeat_time_epoch < stale_before` (architecture: Heartbeat
    /// Monitor), so a heartbeat that lands meanwhile wins.
    pub stale_before: Option<i64>,
}

/// The key of an activity exec item.
pub fn activity_key(id: &str, workflow_exec_id: &str) -> Item {
    HashMap::from([
        ("activity_exec_id".into(), s(id)),
        ("workflow_exec_id".into(), s(workflow_exec_id)),
    ])
}

/// The key of a workflow exec item.
pub fn workflow_key(id: &str, name: &str) -> Item {
    HashMap::from([
        ("workflow_exec_id".into(), s(id)),
        ("workflow_name".into(), s(name)),
    ])
}

/// The heartbeat timeout of an activity, seconds; `None` when heartbeats
/// are disabled.
pub fn heartbeat_timeout(exec: &ActivityExec, cfg: &EngineConfig) -> Option<i64> {
    exec.heartbeat_enabled.then(|| {
        exec.heartbeat_timeout_seconds
            .unwrap_or(cfg.default_heartbeat_timeout_seconds)
    })
}

/// The start-to-close timeout of an activity, seconds: its own
/// (`timeout_seconds`) or the configured default. Also the PREPARING limit.
pub fn start_to_close(exec: &ActivityExec, cfg: &EngineConfig) -> i64 {
    exec.timeout_seconds
        .unwrap_or(cfg.default_start_to_close_seconds)
}

/// When a RUNNING activity times out, epoch seconds, judged from what its
/// item holds (the architecture's rule: `heartbeat_time_epoch` + timeout,
/// whoever wrote the heartbeat), and whether the heartbeat is what fires.
pub fn running_deadline(exec: &ActivityExec, cfg: &EngineConfig) -> (i64, bool) {
    let close = exec.start_time_epoch.max(0) + start_to_close(exec, cfg);
    match heartbeat_timeout(exec, cfg) {
        Some(t) if exec.heartbeat_time_epoch.max(exec.start_time_epoch) + t < close => (
            exec.heartbeat_time_epoch.max(exec.start_time_epoch) + t,
            true,
        ),
        _ => (close, false),
    }
}

/// Who a report is from, by its attempt and token (DESIGN: attempts are
/// fenced): [`Actor::Attempt`] when its token matches the live attempt's
/// hash, [`Actor::Client`] for a tokenless row of an existing client.
///
/// Errors (the reason a report is refused): a token that does not match
/// (stale or forged), an attempt number that is not the live one, or no
/// token where the activity requires one.
pub fn report_actor(
    exec: &ActivityExec,
    attempt: Option<u32>,
    token: Option<&str>,
) -> Result<Actor, String> {
    if let Some(a) = attempt {
        if a != exec.attempt {
            return Err(format!(
                "report for attempt {a}; the live attempt is {}",
                exec.attempt
            ));
        }
    }
    match token {
        Some(t) if exec.attempt_token_hash.as_deref() == Some(ids::token_hash(t).as_str()) => {
            Ok(Actor::Attempt)
        }
        Some(_) => Err("attempt token does not match the live attempt (stale or forged)".into()),
        None if exec.require_tokens => Err("this activity requires the attempt token".into()),
        None => Ok(Actor::Client),
    }
}

fn due(id: &str, epoch: i64) -> [Action; 2] {
    [
        Action::Set("due_epoch".into(), n(epoch)),
        Action::Set("due_shard".into(), n(store::shard_of(id))),
    ]
}

fn history(
    transition: Transition,
    state: ActivityState,
    at: i64,
    event_id: &str,
) -> AttributeValue {
    av(&HistoryEntry {
        transition: transition.as_str().into(),
        state,
        at_epoch: at,
        event_id: event_id.into(),
    })
}

fn versioned(tables: &Tables, exec: &ActivityExec) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq("version", n(exec.version)))
    .set("version", n(exec.version + 1))
}

/// One accepted transition: what was asked, the state it leads to, and the
/// event (or engine step) that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change<'a> {
    /// The transition.
    pub transition: Transition,
    /// The state reached.
    pub next: ActivityState,
    /// The event id recorded as `last_event_id` and in the history.
    pub event_id: &'a str,
}

/// The conditional UpdateItem of one accepted transition `exec.state →
/// next`, conditioned on the `version` read. It sets the due marker of the
/// new state (its deadline, or for a terminal state the obligation to run
/// its side effects), removes `event_id` from the parked events (all of
/// them once terminal), and records output, capped error, times, history.
pub fn transition_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    change: Change<'_>,
    details: &Details,
    now: i64,
) -> UpdateRequest {
    let Change {
        transition,
        next,
        event_id,
    } = change;
    let t = Timestamp::from_epoch(now);
    let id = &exec.activity_exec_id;
    let mut req = versioned(tables, exec)
        .set("state", s(next.as_str()))
        .set("last_event_id", s(event_id))
        .act(Action::Append(
            "history".into(),
            vec![history(transition, next, now, event_id)],
        ));
    let rest: Vec<&ParkedEvent> = exec
        .parked
        .iter()
        .filter(|p| p.activity_event_id != event_id)
        .collect();
    if next.is_terminal() || rest.is_empty() {
        if !exec.parked.is_empty() {
            req = req.remove("parked");
        }
    } else if rest.len() != exec.parked.len() {
        req = req.set("parked", av(&rest));
    }
    let deadline = match next {
        ActivityState::Running => {
            req = req
                .set("start_time", av(&t.date_list()))
                .set("start_time_epoch", n(now));
            let mut started = exec.clone();
            started.start_time_epoch = now;
            if exec.heartbeat_enabled {
                req = req
                    .set("heartbeat_time", av(&t.date_list()))
                    .set("heartbeat_time_epoch", n(now));
                started.heartbeat_time_epoch = now;
            }
            Some(running_deadline(&started, cfg).0)
        }
        ActivityState::Preparing => Some(now + start_to_close(exec, cfg)),
        // The cancel grace alone: heartbeats do not extend it.
        ActivityState::CancelledRunning => Some(now + cfg.cancel_grace_seconds),
        s if s.is_terminal() => {
            req = req
                .set("end_time", av(&t.date_list()))
                .set("end_time_epoch", n(now));
            Some(now + cfg.settle_grace_seconds)
        }
        _ => None,
    };
    // Events still parked are owed too: if the function dies before it
    // applies them, the monitor does soon, not at the state's deadline.
    let owed = (!next.is_terminal() && !rest.is_empty()).then(|| now + cfg.settle_grace_seconds);
    if let Some(at) = [deadline, owed].into_iter().flatten().min() {
        for a in due(id, at) {
            req = req.act(a);
        }
    }
    if let Some(cut) = details.stale_before {
        req = req.when(Cond::lt("heartbeat_time_epoch", n(cut)));
    }
    if let (Some(out), ActivityState::Completed) = (&details.output, next) {
        req = req.set("output", av(out));
    }
    if let Some(err) = details
        .error
        .as_deref()
        .filter(|_| next != ActivityState::Completed)
    {
        req = req.set("error", s(cap_error(err)));
    }
    req
}

/// The workflow counter update that goes in the same transaction as an
/// activity's terminal transition, so each activity is counted exactly once
/// (DESIGN 3.3). A failure records the first reason on the workflow.
pub fn count_end(
    tables: &Tables,
    exec: &ActivityExec,
    end: ActivityState,
    error: Option<&str>,
) -> UpdateRequest {
    let counter = contract::end_counter(end).expect("terminal state");
    let mut req = UpdateRequest::new(
        tables.workflow_exec(),
        workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
    )
    .when(Cond::exists("workflow_exec_id"))
    .act(Action::Add(counter.into(), n(1)));
    if end.is_failure() {
        let why = error.unwrap_or("no reason given");
        let reason = cap_error(&format!("activity {} {end}: {why}", exec.activity_name));
        req = req.act(Action::SetIfNotExists("error".into(), s(reason)));
    }
    req
}

/// Keep an event that arrived too early on its activity (conditioned on the
/// version read, so a concurrent transition makes the caller decide again).
pub fn park_update(tables: &Tables, exec: &ActivityExec, event: &ParkedEvent) -> UpdateRequest {
    versioned(tables, exec).act(Action::Append("parked".into(), vec![av(event)]))
}

/// Claim the first attempt of an activity whose prerequisites all completed:
/// REQUESTED → QUEUED for roots, REQUESTED → READY → QUEUED otherwise
/// (contract: "Launching A New Activity"), with the attempt's token hash
/// and the schedule-to-start deadline as its due marker. Conditioned on the
/// version read and a zero pending count: exactly one caller wins the
/// claim, and only the winner invokes.
pub fn queue_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    token_hash: &str,
    now: i64,
) -> UpdateRequest {
    let attempt = exec.attempt + 1;
    let event_id = format!("launcher:{}:{attempt}", exec.activity_exec_id);
    let mut entries = vec![];
    if exec.state == ActivityState::Requested && !exec.prerequisites.is_empty() {
        entries.push(history(
            Transition::Ready,
            ActivityState::Ready,
            now,
            &event_id,
        ));
    }
    entries.push(history(
        Transition::Queued,
        ActivityState::Queued,
        now,
        &event_id,
    ));
    claim(tables, cfg, exec, attempt, token_hash, now, &event_id)
        .when(Cond::eq("pending_dependency_count", n(0)))
        .when(Cond::In(
            "state".into(),
            vec![
                s(ActivityState::Requested.as_str()),
                s(ActivityState::Ready.as_str()),
            ],
        ))
        .set("state", s(ActivityState::Queued.as_str()))
        .act(Action::Append("history".into(), entries))
}

/// Claim a new attempt of an activity still QUEUED past its
/// schedule-to-start deadline (the launch or the invocation was lost).
pub fn relaunch_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    token_hash: &str,
    now: i64,
) -> UpdateRequest {
    let attempt = exec.attempt + 1;
    let event_id = format!("relaunch:{}:{attempt}", exec.activity_exec_id);
    claim(tables, cfg, exec, attempt, token_hash, now, &event_id).act(Action::Append(
        "history".into(),
        vec![history(
            Transition::Queued,
            ActivityState::Queued,
            now,
            &event_id,
        )],
    ))
}

fn claim(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    attempt: u32,
    token_hash: &str,
    now: i64,
    event_id: &str,
) -> UpdateRequest {
    let t = Timestamp::from_epoch(now);
    let mut req = versioned(tables, exec)
        .set("attempt", n(attempt))
        .set("attempt_token_hash", s(token_hash))
        .set("last_event_id", s(event_id))
        .set("queued_time", av(&t.date_list()))
        .set("queued_time_epoch", n(now))
        .remove("launched_time")
        .remove("launched_time_epoch");
    for a in due(&exec.activity_exec_id, now + cfg.queued_redrive_seconds) {
        req = req.act(a);
    }
    req
}

/// Record that attempt `attempt` was invoked (for operators; no rule reads
/// it). Conditioned on the attempt still being live.
pub fn launched_update(tables: &Tables, exec: &ActivityExec, now: i64) -> UpdateRequest {
    let t = Timestamp::from_epoch(now);
    UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq("attempt", n(exec.attempt)))
    .set("launched_time", av(&t.date_list()))
    .set("launched_time_epoch", n(now))
}

/// Release one edge: lower the waiting activity's pending count and add the
/// prerequisite to its `released_prerequisites` set, in one conditional
/// update that succeeds once per edge (DESIGN 3.2).
pub fn release_update(
    tables: &Tables,
    waiting_id: &str,
    workflow_exec_id: &str,
    prerequisite_id: &str,
) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_exec(),
        activity_key(waiting_id, workflow_exec_id),
    )
    .when(Cond::Compare(
        "pending_dependency_count".into(),
        store::Cmp::Gt,
        n(0),
    ))
    .when(Cond::not_contains(
        "released_prerequisites",
        s(prerequisite_id),
    ))
    .act(Action::Add("pending_dependency_count".into(), n(-1)))
    .act(Action::Add(
        "released_prerequisites".into(),
        AttributeValue::Ss(vec![prerequisite_id.into()]),
    ))
}

/// Clear the due marker of an activity whose obligations are done, if it is
/// still in the state `exec` shows.
pub fn clear_due(tables: &Tables, exec: &ActivityExec) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq("state", s(exec.state.as_str())))
    .when(Cond::exists("due_epoch"))
    .remove("due_epoch")
    .remove("due_shard")
}

/// Move the due marker of a live activity to `at` (a heartbeat pushed its
/// deadline), if it is still at the version read.
pub fn extend_due(tables: &Tables, exec: &ActivityExec, at: i64) -> UpdateRequest {
    let mut req = UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq("version", n(exec.version)));
    for a in due(&exec.activity_exec_id, at) {
        req = req.act(a);
    }
    req
}

/// When the activity entered its current state (its last history entry),
/// epoch seconds. The deadlines of PREPARING and CANCELLED_RUNNING count
/// from it; the due marker only says when to look.
fn entered_at(exec: &ActivityExec) -> Option<i64> {
    exec.history
        .iter()
        .rev()
        .find(|h| h.state == exec.state)
        .map(|h| h.at_epoch)
}

/// A deadline not passed yet: wait if the marker already says it, else
/// move the marker there.
fn look_again(exec: &ActivityExec, deadline: i64) -> Verdict {
    if exec.due_epoch == Some(deadline) {
        Verdict::Wait
    } else {
        Verdict::Extend(deadline)
    }
}

/// What the monitor does with an activity whose due time came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Terminal: run its side effects, then clear the marker.
    Settle,
    /// Not due after all (a heartbeat moved its deadline): move the marker.
    Extend(i64),
    /// Due, within the report grace: look again next tick.
    Wait,
    /// No marker should be there (not launched): clear it.
    Clear,
    /// The deadline passed: TIMED_OUT with this reason; `stale_before` is
    /// the heartbeat cut-off the write must be conditioned on.
    TimeOut {
        /// Which timeout fired.
        reason: String,
        /// Heartbeat cut-off, when the heartbeat timeout fired.
        stale_before: Option<i64>,
    },
    /// QUEUED past schedule-to-start with attempts left: claim a new one.
    Relaunch,
    /// QUEUED past schedule-to-start on its last attempt: FAILED.
    FailNotStarted(String),
}

/// The monitor's verdict on `exec` at `now` (the item read consistently).
/// A deadline is acted on only `report_grace_seconds` after it passed, so
/// reports written before it are visible in the event index first.
pub fn monitor_verdict(exec: &ActivityExec, cfg: &EngineConfig, now: i64) -> Verdict {
    let grace = cfg.report_grace_seconds;
    if exec.state.is_terminal() {
        return Verdict::Settle;
    }
    let passed = |deadline: i64| now >= deadline + grace;
    match exec.state {
        ActivityState::Requested | ActivityState::Ready => Verdict::Clear,
        ActivityState::Queued => {
            let deadline = exec.queued_time_epoch.unwrap_or(0) + cfg.queued_redrive_seconds;
            if !passed(deadline) {
                Verdict::Wait
            } else if exec.attempt >= cfg.max_launch_attempts {
                Verdict::FailNotStarted(format!(
                    "not started after {} attempts ({}s each, schedule-to-start)",
                    exec.attempt, cfg.queued_redrive_seconds
                ))
            } else {
                Verdict::Relaunch
            }
        }
        ActivityState::Preparing => match entered_at(exec).map(|t| t + start_to_close(exec, cfg)) {
            Some(d) if !passed(d) => look_again(exec, d),
            _ => Verdict::TimeOut {
                reason: format!(
                    "PREPARING for more than {}s (start-to-close)",
                    start_to_close(exec, cfg)
                ),
                stale_before: None,
            },
        },
        ActivityState::Running => {
            let (deadline, by_heartbeat) = running_deadline(exec, cfg);
            if !passed(deadline) {
                return look_again(exec, deadline);
            }
            if by_heartbeat {
                let t = heartbeat_timeout(exec, cfg).unwrap_or(0);
                Verdict::TimeOut {
                    reason: format!("no heartbeat for {t}s (heartbeat timeout)"),
                    stale_before: Some(now - t),
                }
            } else {
                Verdict::TimeOut {
                    reason: format!(
                        "not finished within {}s of starting (start-to-close)",
                        start_to_close(exec, cfg)
                    ),
                    stale_before: None,
                }
            }
        }
        ActivityState::CancelledRunning => {
            match entered_at(exec).map(|t| t + cfg.cancel_grace_seconds) {
                Some(d) if !passed(d) => look_again(exec, d),
                _ => Verdict::TimeOut {
                    reason: format!(
                        "cancel not acknowledged within {}s",
                        cfg.cancel_grace_seconds
                    ),
                    stale_before: None,
                },
            }
        }
        _ => Verdict::Wait,
    }
}

pub use super::items::activity_items;

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
