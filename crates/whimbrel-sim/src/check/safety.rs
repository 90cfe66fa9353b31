//! The safety invariants of one activity (and the terminal states the
//! checker remembers between steps): its due marker, the steps of its
//! history, its attempts.

use whimbrel_core::contract::WorkflowState;
use whimbrel_core::contract::{self, ActivityState, NodeKind};
use whimbrel_core::engine::decide::deadline;
use whimbrel_core::engine::EngineConfig;
use whimbrel_core::model::{ActivityExec, WorkflowExec};

use super::workflow_redrive::{generation, is_redrive, redrive_count};
use super::Checker;

impl Checker {
    /// A terminal activity whose state changed since the checker first saw
    /// it terminal; the first terminal state seen is remembered (and
    /// forgotten when a redrive starts its next generation:
    /// `workflow_redrive.rs`, which also judges workflows' terminal
    /// states).
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
/// contract table, a relaunch (QUEUED → QUEUED), a retried failure
/// (`contract::retry_state`) or a redrive of an end other than COMPLETED
/// (`REDRIVE`, to REQUESTED), so no state ever goes back otherwise; and
/// at most one terminal transition is accepted in each generation (since
/// the last redrive).
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
        // A redrive (design.md § 9.4): an end other than COMPLETED back
        // to REQUESTED, outside the table.
        let redriven = is_redrive(h)
            && h.state == ActivityState::Requested
            && matches!(
                from,
                ActivityState::Failed | ActivityState::TimedOut | ActivityState::Cancelled
            );
        let allowed = (from == ActivityState::Queued && h.state == ActivityState::Queued)
            || retried
            || redriven
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
    let ends = generation(a)
        .iter()
        .filter(|h| h.state.is_terminal())
        .count();
    if ends > 1 {
        v.push(format!(
            "{id}: {ends} terminal transitions accepted since its last redrive"
        ));
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

/// Seconds a timer may fire after its time in world time with no fault
/// to explain it, when the monitor looks ahead (issue 42 C.2): the engine
/// clock's skew (2 s), SQS's delivery (up to 1 s late), and the
/// simulation's own time for the store calls of a sweep (each a step
/// among every task that is ready; up to 15 s seen in 3,000 seeds, 99 %
/// within 6 s). Without a look-ahead, a tick finds it: within two ticks
/// (a marker written within the GSI's usual lag before a tick is found
/// by the next), plus this.
pub const TIMER_TOLERANCE: i64 = 20;

/// Seconds an execution may run past its execution deadline once the
/// faults stopped: the monitor's sweep of the due index, up to two ticks
/// of a minute, and [`TIMER_TOLERANCE`].
pub const EXECUTION_TIMEOUT_BOUND: i64 = 120 + TIMER_TOLERANCE;

/// Seconds after the faults stop before timers are judged for lateness:
/// an invocation stalled or cut in the faulty phase (a function's timeout,
/// 120 s) and a wake-up lost there (the next two ticks) are the faults'
/// doing, not the engine's.
pub const QUIET_MARGIN: i64 = 300;

impl Checker {
    /// The faults stopped at world time `now` (epoch seconds): timers due
    /// `QUIET_MARGIN` (300 s) after it are judged for lateness.
    pub fn faults_stopped(&mut self, now: i64) {
        self.quiet_since = Some(now);
    }

    /// Whether timer `a` is due (its fire time, or its release if that
    /// came after) [`QUIET_MARGIN`] after the faults stopped, so that
    /// [`Checker::timer_fired_late`] judges it.
    pub(super) fn lateness_judged(&self, a: &ActivityExec) -> bool {
        let due = deadline::timer_fire_epoch(a).map(|f| f.max(a.timing.start_time_epoch));
        matches!((due, self.quiet_since), (Some(d), Some(q)) if d >= q + QUIET_MARGIN)
    }

    /// A timer first seen COMPLETED at world time `now` (epoch seconds)
    /// that ended (`end_time_epoch`, the engine's clock, within seconds of
    /// the world's) later than its time (its fire time, or its release if
    /// that came after) allows, when no modelled fault explains it (issue
    /// 42 C.2). Judged by when it ended, not when the checker saw it: in
    /// a wide world the checker looks only every few changed steps
    /// ([`Checker::changed`]; seed 1258 saw a timer 133 s after it fired).
    /// The faults had stopped [`QUIET_MARGIN`] before that time, so a
    /// wake-up (`monitor_lookahead_seconds` > 0, design.md § 9) fires it
    /// within [`TIMER_TOLERANCE`], or with no look-ahead one of the next
    /// two minutes' ticks does.
    pub(super) fn timer_fired_late(
        &self,
        a: &ActivityExec,
        cfg: &EngineConfig,
        now: i64,
    ) -> Option<String> {
        let fire = deadline::timer_fire_epoch(a)?;
        let due = fire.max(a.timing.start_time_epoch);
        let judged = self.lateness_judged(a);
        let first_seen = self.ended_at.get(&a.activity_exec_id) == Some(&now);
        let bound = match cfg.monitor_lookahead_seconds {
            0 => 120 + TIMER_TOLERANCE,
            _ => TIMER_TOLERANCE,
        };
        let ended = a.timing.end_time_epoch.unwrap_or(now);
        (a.runner.kind() == NodeKind::Timer
            && a.state == ActivityState::Completed
            && first_seen
            && judged
            && ended > due + bound)
            .then(|| {
                format!(
                    "{}: timer due at {due} (fire time {fire}) fired at {ended} (seen at world \
                     time {now}), {}s late with no fault since {:?} (at most {bound}s allowed)",
                    a.activity_exec_id,
                    ended - due,
                    self.quiet_since
                )
            })
    }

    /// An execution still RUNNING at world time `now` (epoch seconds)
    /// more than [`EXECUTION_TIMEOUT_BOUND`] after its execution deadline,
    /// when the faults had stopped [`QUIET_MARGIN`] before the deadline:
    /// the monitor fails it on a tick after its deadline, whatever a
    /// decision in flight does (issue 42 A.10, C.2).
    pub(super) fn execution_timeout_late(&self, w: &WorkflowExec, now: i64) -> Option<String> {
        let deadline = whimbrel_core::engine::decide::execution_deadline(w)?;
        let judged = matches!(self.quiet_since, Some(q) if deadline >= q + QUIET_MARGIN);
        (w.state == WorkflowState::Running && judged && now > deadline + EXECUTION_TIMEOUT_BOUND)
            .then(|| {
                format!(
                    "{}: its execution deadline {deadline} passed {}s ago (world time {now}) with no fault since {:?}, and it still runs (at most {EXECUTION_TIMEOUT_BOUND}s allowed)",
                    w.workflow_exec_id,
                    now - deadline,
                    self.quiet_since
                )
            })
    }

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

/// Violations of `a`'s attempts: at most its retry policy's attempts,
/// and one more per redrive; each attempt before the live one has exactly
/// one recorded outcome (its retried failure, or the redrive of its end),
/// in order; each attempt is claimed by a worker at most once.
pub(super) fn attempt_violations(a: &ActivityExec) -> Vec<String> {
    let mut v = vec![];
    let id = &a.activity_exec_id;
    // A redrive gives one attempt more, even to a spent policy.
    let redrives = redrive_count(a) as u32;
    let max = a.attempt.retry.as_ref().map_or(1, |r| r.attempts()) + redrives;
    if a.attempt.number > max {
        v.push(format!(
            "{id}: attempt {} of at most {max}",
            a.attempt.number
        ));
    }
    let (failed, unclaimed) = ended_attempts(a);
    let live = if unclaimed { 1 } else { 0 };
    let want: Vec<u32> = (1..(a.attempt.number + live).max(1)).collect();
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

/// The attempts of `a` whose ends its history records, in order: each
/// retried failure's, and the attempt a `REDRIVE` entry kept (none when
/// nothing had been claimed: attempt 0; once when two redrives came with
/// no claim between them); and whether the last of them is a redrive's
/// not claimed again yet (then the item's attempt ended too).
fn ended_attempts(a: &ActivityExec) -> (Vec<u32>, bool) {
    let mut ended: Vec<u32> = vec![];
    let mut unclaimed = false;
    for h in &a.trail.history {
        let Some(k) = h.attempt else { continue };
        if is_redrive(h) {
            if k > 0 && ended.last() != Some(&k) {
                ended.push(k);
            }
            unclaimed = k > 0 && k == a.attempt.number;
        } else {
            ended.push(k);
            unclaimed = false;
        }
    }
    (ended, unclaimed)
}
