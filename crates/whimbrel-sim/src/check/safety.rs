//! The safety invariants of one activity (and the terminal states the
//! checker remembers between steps): its due marker, the steps of its
//! history, its attempts.

use whimbrel_core::contract::{self, ActivityState, NodeKind};
use whimbrel_core::engine::decide::deadline;
use whimbrel_core::engine::EngineConfig;
use whimbrel_core::model::{ActivityExec, WorkflowExec};

use super::Checker;

impl Checker {
    /// A terminal activity whose state changed since the checker first saw
    /// it terminal; the first terminal state seen is remembered.
    pub(super) fn terminal_state_change(&mut self, a: &ActivityExec) -> Option<String> {
        let id = &a.activity_exec_id;
        match (self.terminal.get(id), a.state.is_terminal()) {
            (Some(s), _) if *s != a.state => {
                Some(format!("{id}: terminal state {s} changed to {}", a.state))
            }
            (None, true) => {
                self.terminal.insert(id.clone(), a.state);
                None
            }
            _ => None,
        }
    }

    /// The same for a workflow.
    pub(super) fn workflow_terminal_state_change(&mut self, w: &WorkflowExec) -> Option<String> {
        let id = &w.workflow_exec_id;
        match (self.workflow_terminal.get(id), w.state.is_terminal()) {
            (Some(s), _) if *s != w.state => Some(format!(
                "workflow {id}: terminal state {s} changed to {}",
                w.state
            )),
            (None, true) => {
                self.workflow_terminal.insert(id.clone(), w.state);
                None
            }
            _ => None,
        }
    }
}

/// Never late: a live activity with a deadline carries a due marker no
/// later than it (markers may be early: lazy markers; the monitor moves
/// an early one when it looks).
pub(super) fn due_marker_violation(a: &ActivityExec, cfg: &EngineConfig) -> Option<String> {
    if a.state.is_terminal() {
        return None;
    }
    let id = &a.activity_exec_id;
    let (deadline, kind) = whimbrel_core::engine::decide::next_deadline(a, cfg)?;
    match a.timing.due_epoch {
        None => Some(format!(
            "{id}: {} with a {kind:?} deadline at {deadline} but no due marker",
            a.state
        )),
        Some(m) if m > deadline => Some(format!(
            "{id}: {} due marker {m} is after its {kind:?} deadline {deadline}",
            a.state
        )),
        Some(_) => None,
    }
}

/// Violations of `a`'s history: every accepted step is a row of the
/// contract table, a relaunch (QUEUED → QUEUED) or a retried failure
/// (`contract::retry_state`), so no state ever goes back otherwise; and at
/// most one terminal transition is accepted.
/// Index and parking hygiene: only a QUEUED activity is in the task-list
/// index (a worker may claim only it), and no event parked on an activity
/// is one its history has applied (applying an event removes it from
/// `parked` in the same write).
pub(super) fn hygiene_violations(a: &ActivityExec) -> Vec<String> {
    let id = &a.activity_exec_id;
    let mut v = vec![];
    if a.runner.task_list_shard.is_some() && a.state != ActivityState::Queued {
        v.push(format!(
            "{id}: {} but still in the task-list index",
            a.state
        ));
    }
    for p in &a.trail.parked {
        if a.trail
            .history
            .iter()
            .any(|h| h.full_event_id(id) == p.activity_event_id)
        {
            v.push(format!(
                "{id}: event {} is parked though applied",
                p.activity_event_id
            ));
        }
    }
    v
}

pub(super) fn history_violations(a: &ActivityExec) -> Vec<String> {
    let mut v = vec![];
    let id = &a.activity_exec_id;
    let mut from = ActivityState::Requested;
    for h in &a.trail.history {
        let retried = h
            .transition
            .parse::<contract::Transition>()
            .ok()
            .and_then(|t| contract::retry_state(from, t))
            == Some(h.state);
        let allowed = (from == ActivityState::Queued && h.state == ActivityState::Queued)
            || retried
            || contract::table(a.runner.kind())
                .iter()
                .any(|(f, t, to, _)| *f == from && t.as_str() == h.transition && *to == h.state);
        if !allowed {
            v.push(format!(
                "{id}: {from} -> {} by {} is not in the contract ({})",
                h.state,
                h.transition,
                h.full_event_id(id)
            ));
        }
        from = h.state;
    }
    let ends = a
        .trail
        .history
        .iter()
        .filter(|h| h.state.is_terminal())
        .count();
    if ends > 1 {
        v.push(format!("{id}: {ends} terminal transitions accepted"));
    }
    v
}

/// A timer (design.md § 9.1) holds no attempt token and completes only by
/// its own firing (`timer-fired:`), never before its fire time: the
/// firing engine's clock at the COMPLETED entry is at or past it. That it
/// completes once is [`history_violations`]' one terminal transition; that
/// it fired within an engine's skew of its time by the world's clock is
/// [`Checker::timer_fired_early`].
pub(super) fn timer_violations(a: &ActivityExec) -> Vec<String> {
    if a.runner.kind() != NodeKind::Timer {
        return vec![];
    }
    let id = &a.activity_exec_id;
    let mut v = vec![];
    if a.attempt.token_hash.is_some() || a.attempt.launches > 0 {
        v.push(format!("{id}: a timer was claimed or launched"));
    }
    let fire = deadline::timer_fire_epoch(a);
    for h in a
        .trail
        .history
        .iter()
        .filter(|h| h.state == ActivityState::Completed)
    {
        let by = h.full_event_id(id);
        if !by.starts_with("timer-fired:") {
            v.push(format!(
                "{id}: a timer COMPLETED by {by}, not by its firing"
            ));
        }
        if fire.is_none_or(|f| h.at_epoch < f) {
            v.push(format!(
                "{id}: a timer fired at {} before its time {fire:?}",
                h.at_epoch
            ));
        }
    }
    v
}

impl Checker {
    /// A timer first seen COMPLETED at world time `now` (epoch seconds)
    /// whose fire time is more than an engine clock's skew (2 s) after
    /// `now`: it fired early by the world's clock.
    pub(super) fn timer_fired_early(&self, a: &ActivityExec, now: i64) -> Option<String> {
        let fire = deadline::timer_fire_epoch(a)?;
        let first_seen = self.ended_at.get(&a.activity_exec_id) == Some(&now);
        (a.runner.kind() == NodeKind::Timer
            && a.state == ActivityState::Completed
            && first_seen
            && now < fire - 2)
            .then(|| {
                format!(
                    "{}: timer due at {fire} fired at world time {now}",
                    a.activity_exec_id
                )
            })
    }
}

/// Violations of `a`'s attempts: at most its retry policy's attempts;
/// each attempt before the live one has exactly one recorded outcome (its
/// retried failure), in order; each attempt is claimed by a worker at most
/// once.
pub(super) fn attempt_violations(a: &ActivityExec) -> Vec<String> {
    let mut v = vec![];
    let id = &a.activity_exec_id;
    let max = a.attempt.retry.as_ref().map_or(1, |r| r.attempts());
    if a.attempt.number > max {
        v.push(format!(
            "{id}: attempt {} of at most {max}",
            a.attempt.number
        ));
    }
    let failed: Vec<u32> = a.trail.history.iter().filter_map(|h| h.attempt).collect();
    let want: Vec<u32> = (1..a.attempt.number.max(1)).collect();
    if failed != want {
        v.push(format!(
            "{id}: attempt {} with failures recorded for {failed:?}",
            a.attempt.number
        ));
    }
    let mut claims: Vec<&str> = a
        .trail
        .history
        .iter()
        .filter(|h| h.event_id.starts_with("claim:"))
        .map(|h| h.event_id.as_str())
        .collect();
    let n = claims.len();
    claims.dedup();
    if claims.len() != n {
        v.push(format!("{id}: one attempt claimed by two workers"));
    }
    v
}
