//! The engine's rules as pure functions: from the items read, one input and
//! the time, the typed conditional writes to make and the monitor's
//! verdicts. No I/O, no clock, no randomness: everything comes in as
//! arguments, so each rule is unit-tested without a server.

use crate::attr;
use crate::write::Value as AttributeValue;

use crate::config::EngineConfig;
use crate::contract::{self, ActivityState, Actor, Transition};
use crate::dates::Timestamp;
use crate::ids;
use crate::keys::{self, Tables};
pub use crate::keys::{activity_key, group_item_key, join_group_key, workflow_key};
use crate::model::{ActivityExec, HistoryEntry, ParkedEvent};
use crate::write::{av, n, s, Action, Cond, UpdateRequest};

/// Longest `error` text stored, bytes; longer texts are cut (on a character
/// boundary) and marked, so a report can never fail for its error's size.
pub const MAX_ERROR_BYTES: usize = 2048;

/// `text` cut to [`MAX_ERROR_BYTES`].
pub fn cap_error(text: &str) -> String {
    cap_text(text, MAX_ERROR_BYTES)
}

/// `text` in at most `max` bytes: whole when it fits, else cut on a
/// character boundary and marked ` [... N bytes cut]` (N the bytes cut).
/// Every free text the engine keeps is capped so: reasons
/// ([`cap_error`]), a request's `source` (`workflow::MAX_SOURCE_BYTES`).
pub fn cap_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    // Room for the marker: " [... N bytes cut]" with N up to 10 digits.
    let kept = crate::history::cut(text, max.saturating_sub(32));
    format!("{kept} [... {} bytes cut]", text.len() - kept.len())
}

/// What an input carries besides its transition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    /// Output (COMPLETED), kept on the item.
    pub output: Option<serde_json::Value>,
    /// The event row that keeps the output (COMPLETED), instead of
    /// `output` ([`crate::payloads`]).
    pub output_event_id: Option<String>,
    /// With `output_event_id`: the output's digest
    /// ([`crate::payloads::output_digest`]), stored on the item.
    pub output_sha256: Option<String>,
    /// With `output_event_id`: the output itself, which a COMPLETED that
    /// applies copies to its output row ([`crate::model::OutputRow`])
    /// before the item names the row (`output_ref`). Never stored inline.
    pub output_copy: Option<serde_json::Value>,
    /// Error text (FAILED, CANCEL, TIMED_OUT), capped when written.
    pub error: Option<String>,
    /// The time of the change, epoch seconds; the engine's now when absent.
    pub at: Option<i64>,
    /// For TIMED_OUT by heartbeat: the write requires
    /// `heartbeat_time_epoch < stale_before` (architecture: Heartbeat
    /// Monitor), so a heartbeat that lands meanwhile wins.
    pub stale_before: Option<i64>,
    /// For TIMED_OUT by heartbeat: the write requires
    /// `heartbeat_time_epoch` to be this value still, or not a number
    /// (`decide::unchanged_heartbeat`).
    pub unchanged_heartbeat: Option<i64>,
    /// A failure that ends the activity whatever its retry policy says
    /// (schedule-to-close).
    pub no_retry: bool,
    /// Already the bare FAILED that stands for a report DynamoDB refused:
    /// if this is refused too, nothing ever will be stored.
    pub unstorable: bool,
}

/// Who a report is from, by its attempt and token (docs/design.md § 3.9: attempts are
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
    let hash = token.map(ids::token_hash);
    report_actor_by_hash(exec, attempt, hash.as_deref())
}

/// [`report_actor`] for a report known by its token's hash
/// ([`ids::token_hash`]): the engine keeps only hashes (of parked reports
/// too), never a token.
pub fn report_actor_by_hash(
    exec: &ActivityExec,
    attempt: Option<u32>,
    token_hash: Option<&str>,
) -> Result<Actor, String> {
    if let Some(a) = attempt {
        if a != exec.attempt.number {
            return Err(format!(
                "report for attempt {a}; the live attempt is {}",
                exec.attempt.number
            ));
        }
    }
    match token_hash {
        Some(h) if exec.attempt.token_hash.as_deref() == Some(h) => Ok(Actor::Attempt),
        Some(_) => Err("attempt token does not match the live attempt (stale or forged)".into()),
        None if exec.attempt.require_tokens => {
            Err("this activity requires the attempt token".into())
        }
        None => Ok(Actor::Client),
    }
}

fn due(id: &str, epoch: i64) -> [Action; 2] {
    [
        Action::Set(attr::DUE_EPOCH.into(), n(epoch)),
        Action::Set(attr::DUE_SHARD.into(), n(keys::shard_of(id))),
    ]
}

/// The due marker a write of `exec` leaves, for a state whose deadline is
/// `at` (epoch seconds; `None` = nothing owed): set to `at`, removed, or
/// kept. Lazy, because every move of it is a GSI write: a marker within
/// `keep` is kept, with the write conditional on it (a marker the monitor
/// moved meanwhile fails the write, which is then decided again). Live
/// states keep any marker still ahead and not after the deadline
/// ([`live_keep`]): an early marker is safe, the monitor looks, finds
/// nothing due and moves it ([`Verdict::Extend`]), one read and a move for
/// an activity that outlives it, where moving it on every transition would
/// cost two GSI writes each. A terminal state's obligation keeps a marker
/// from the settle grace to one grace later ([`settle_keep`]): the function
/// has its grace, and a function that died is covered at most one grace
/// later.
pub(crate) fn with_due(
    mut req: UpdateRequest,
    exec: &ActivityExec,
    at: Option<i64>,
    keep: std::ops::RangeInclusive<i64>,
) -> UpdateRequest {
    match at {
        Some(_) if exec.timing.due_epoch.is_some_and(|cur| keep.contains(&cur)) => {
            req.when(Cond::eq(
                attr::DUE_EPOCH,
                n(exec.timing.due_epoch.expect("checked above")),
            ))
        }
        Some(at) => {
            for a in due(&exec.activity_exec_id, at) {
                req = req.act(a);
            }
            req
        }
        None if exec.timing.due_epoch.is_some() => {
            req.remove(attr::DUE_EPOCH).remove(attr::DUE_SHARD)
        }
        None => req,
    }
}

/// The markers a live state's write keeps for its deadline `at`: after
/// `now`, no later than `at` (see [`with_due`]).
pub(crate) fn live_keep(now: i64, at: Option<i64>) -> std::ops::RangeInclusive<i64> {
    now.saturating_add(1)..=at.unwrap_or(i64::MIN)
}

/// The markers a terminal state's write keeps for its obligation due at
/// `at` (now + settle grace): from `at` to one grace later (see
/// [`with_due`]).
pub(crate) fn settle_keep(at: i64, cfg: &EngineConfig) -> std::ops::RangeInclusive<i64> {
    at..=at.saturating_add(cfg.settle_grace_seconds)
}

pub(crate) fn history(
    activity_exec_id: &str,
    transition: Transition,
    state: ActivityState,
    at: i64,
    event_id: &str,
) -> AttributeValue {
    av(&HistoryEntry::new(transition, state, at, event_id).stored(activity_exec_id))
}

pub(crate) fn versioned(tables: &Tables, exec: &ActivityExec) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq(attr::VERSION, n(exec.version)))
    .set(attr::VERSION, n(exec.version + 1))
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

/// The condition `state IN (states)` on an activity item: the contract's
/// sources of a move ([`contract::sources`], [`contract::RETRY_FROM`]).
pub fn state_in(states: &[ActivityState]) -> Cond {
    let names = states.iter().map(|st| s(st.as_str())).collect();
    Cond::In(attr::STATE.into(), names)
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
    let entry = history(&exec.activity_exec_id, transition, next, now, event_id);
    let req = versioned(tables, exec)
        .when(state_in(&contract::sources(
            exec.runner.kind(),
            transition,
            next,
        )))
        .set(attr::STATE, s(next.as_str()))
        .remove(attr::LAST_EVENT_ID)
        .act(Action::Append(attr::HISTORY.into(), vec![entry]));
    let rest: Vec<&ParkedEvent> = exec
        .trail
        .parked
        .iter()
        .filter(|p| p.activity_event_id != event_id)
        .collect();
    let req = keep_parked(req, exec, next, &rest);
    // The state's own deadline, judged on the item as it will be.
    let mut after = exec.clone();
    after.state = next;
    after.trail.last_event_id = None;
    after
        .trail
        .history
        .push(HistoryEntry::new(transition, next, now, event_id));
    let mut req = set_times(req, exec, &mut after, now);
    if next != ActivityState::Queued && exec.runner.task_list_shard.is_some() {
        // Out of the task-list index: no worker may claim it any more.
        req = req
            .remove(attr::TASK_LIST_SHARD)
            .remove(attr::TASK_QUEUED_EPOCH);
    }
    let deadline = if next.is_terminal() {
        Some(now + cfg.settle_grace_seconds)
    } else {
        next_deadline(&after, cfg).map(|(at, _)| at)
    };
    // Events still parked are owed too: if the function dies before it
    // applies them, the monitor does soon, not at the state's deadline.
    let owed = (!next.is_terminal() && !rest.is_empty()).then(|| now + cfg.settle_grace_seconds);
    let due = [deadline, owed].into_iter().flatten().min();
    let keep = match due {
        Some(at) if next.is_terminal() => settle_keep(at, cfg),
        _ => live_keep(now, due),
    };
    req = with_due(req, exec, due, keep);
    req = heartbeat_guards(req, details);
    set_outcome(req, exec, next, details)
}

/// The condition of a heartbeat timeout's write (architecture: Heartbeat
/// Monitor): the heartbeat is still older than `cut` (epoch seconds), so
/// one that lands meanwhile wins. A `heartbeat_time_epoch` that is missing
/// or not a number (the activity role may write it, docs/design.md
/// § 3.10) is no heartbeat: it cannot hold the timeout off for ever.
pub(crate) fn stale_heartbeat(cut: i64) -> Cond {
    or_no_heartbeat(Cond::lt(attr::HEARTBEAT_TIME_EPOCH, n(cut)))
}

/// `cond`, or a `heartbeat_time_epoch` that is missing or not a number
/// (no heartbeat).
fn or_no_heartbeat(cond: Cond) -> Cond {
    let a_number = Cond::Compare(
        attr::HEARTBEAT_TIME_EPOCH.into(),
        crate::write::Cmp::Ge,
        n(i64::MIN),
    );
    Cond::Or(vec![cond, Cond::Not(Box::new(a_number))])
}

/// The conditions a timeout's write takes from `details`: a stale
/// heartbeat ([`stale_heartbeat`]), an unchanged one
/// ([`unchanged_heartbeat`]).
pub(crate) fn heartbeat_guards(mut req: UpdateRequest, details: &Details) -> UpdateRequest {
    if let Some(cut) = details.stale_before {
        req = req.when(stale_heartbeat(cut));
    }
    if let Some(read) = details.unchanged_heartbeat {
        req = req.when(unchanged_heartbeat(read));
    }
    req
}

/// The condition of a heartbeat timeout's write (docs/design.md § 3.10):
/// `heartbeat_time_epoch` is still `read`, the value the deadline counted
/// from, so a heartbeat written since wins, whatever the clock it was
/// written on (an older value is a write too). One that is missing or not
/// a number is no heartbeat, as in [`stale_heartbeat`].
pub(crate) fn unchanged_heartbeat(read: i64) -> Cond {
    or_no_heartbeat(Cond::eq(attr::HEARTBEAT_TIME_EPOCH, n(read)))
}

/// The parked events left once `event_id` applied (`rest`): none once
/// terminal.
fn keep_parked(
    req: UpdateRequest,
    exec: &ActivityExec,
    next: ActivityState,
    rest: &[&ParkedEvent],
) -> UpdateRequest {
    if next.is_terminal() || rest.is_empty() {
        if exec.trail.parked.is_empty() {
            req
        } else {
            req.remove(attr::PARKED)
        }
    } else if rest.len() != exec.trail.parked.len() {
        req.set(attr::PARKED, av(&rest))
    } else {
        req
    }
}

/// The times the state reached (`after.state`) sets at `now` (epoch
/// seconds): start when RUNNING, end when terminal; `after` gets them too,
/// for its deadline.
fn set_times(
    mut req: UpdateRequest,
    exec: &ActivityExec,
    after: &mut ActivityExec,
    now: i64,
) -> UpdateRequest {
    let t = Timestamp::from_epoch(now);
    if after.state == ActivityState::Running {
        req = req
            .set(attr::START_TIME, av(&t.date_list()))
            .set(attr::START_TIME_EPOCH, n(now));
        after.timing.start_time_epoch = now;
        if exec.timeouts.heartbeat_enabled {
            // No heartbeat yet (one written before the start, by anyone,
            // is not this attempt's): until the client's first one, the
            // deadline counts from this start (engine time). A heartbeat
            // time the engine wrote would share its values with the
            // client's clock: one behind would write it again later, and
            // the monitor would take that heartbeat for no change (seed
            // 4047 at a4685b1, docs/design.md § 3.10).
            req = req
                .set(attr::HEARTBEAT_TIME_EPOCH, n(-1))
                .remove(attr::HEARTBEAT_TIME)
                .remove(attr::HEARTBEAT_SEEN)
                .remove(attr::HEARTBEAT_SEEN_EPOCH);
            after.timing.heartbeat_time_epoch = -1;
            after.timing.heartbeat_time = None;
            after.timing.heartbeat_seen = None;
            after.timing.heartbeat_seen_epoch = None;
        }
    }
    if after.state.is_terminal() {
        req = req
            .set(attr::END_TIME, av(&t.date_list()))
            .set(attr::END_TIME_EPOCH, n(now));
        if exec.timing.next_attempt_epoch.is_some() {
            req = req.remove(attr::NEXT_ATTEMPT_EPOCH);
        }
    }
    req
}

/// The output (or the row that keeps it) of a COMPLETED, or the capped
/// error of any other state; an earlier attempt's error goes once the
/// activity succeeded after all.
fn set_outcome(
    mut req: UpdateRequest,
    exec: &ActivityExec,
    next: ActivityState,
    details: &Details,
) -> UpdateRequest {
    if next == ActivityState::Completed {
        if let Some(out) = &details.output {
            req = req.set(attr::OUTPUT, av(out));
        }
        match (&details.output_copy, &details.output_sha256) {
            (Some(_), Some(digest)) => {
                let key = crate::ids::output_row_key(&exec.workflow_exec_id, digest);
                req = req.set(attr::OUTPUT_REF, s(key));
            }
            _ => {
                if let Some(row) = &details.output_event_id {
                    req = req.set(attr::OUTPUT_EVENT_ID, s(row));
                }
            }
        }
        if let Some(digest) = &details.output_sha256 {
            req = req.set(attr::OUTPUT_SHA256, s(digest));
        }
        if exec.outcome.error.is_some() {
            req = req.remove(attr::ERROR);
        }
    } else if let Some(err) = details.error.as_deref() {
        req = req.set(attr::ERROR, s(cap_error(err)));
    }
    req
}

/// The workflow counter update that goes in the same transaction as an
/// activity's terminal transition, so each activity is counted exactly once
/// (design.md § 3.3). A failure records the first reason on the workflow.
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
    .when(Cond::exists(attr::WORKFLOW_EXEC_ID))
    .act(Action::Add(counter.into(), n(1)));
    if end.is_failure() {
        let why = error.unwrap_or("no reason given");
        let reason = cap_error(&format!("activity {} {end}: {why}", exec.activity_name));
        req = req.act(Action::SetIfNotExists(attr::ERROR.into(), s(reason)));
    }
    req
}

/// Keep an event that arrived too early on its activity (conditioned on the
/// version read, so a concurrent transition makes the caller decide again).
pub fn park_update(tables: &Tables, exec: &ActivityExec, event: &ParkedEvent) -> UpdateRequest {
    versioned(tables, exec).act(Action::Append(attr::PARKED.into(), vec![av(event)]))
}

/// Whether the release of edge `marker` is already counted on `exec` (the
/// item as read): its marker is in `released_prerequisites`, or nothing is
/// pending any more (a redelivery, or a crash after the release). The same
/// test as [`release_update`]'s condition, on the item in hand.
pub fn release_counted(exec: &ActivityExec, marker: &str) -> bool {
    exec.links.pending_dependency_count == 0
        || exec
            .links
            .released_prerequisites
            .iter()
            .any(|r| r == marker)
}

/// Release one edge: lower the waiting activity's pending count and add the
/// prerequisite to its `released_prerequisites` set, in one conditional
/// update that succeeds once per edge (design.md § 3.2). For a wide join,
/// `prerequisite_id` is a complete group's [`ids::join_marker`].
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
        attr::PENDING_DEPENDENCY_COUNT.into(),
        crate::write::Cmp::Gt,
        n(0),
    ))
    .when(Cond::not_contains(
        attr::RELEASED_PREREQUISITES,
        s(prerequisite_id),
    ))
    .act(Action::Add(attr::PENDING_DEPENDENCY_COUNT.into(), n(-1)))
    .act(Action::Add(
        attr::RELEASED_PREREQUISITES.into(),
        AttributeValue::Ss(vec![prerequisite_id.into()]),
    ))
}

/// Release one edge into a wide join's group: add the prerequisite's
/// activity name to the group's `released` set, creating the item on the
/// first release; conditional on the name not being there, so it succeeds
/// once per edge. The item stays under 1 KB for names of up to
/// about 25 bytes at the default group size, whatever the join's width.
pub fn join_release_update(
    tables: &Tables,
    join_id: &str,
    group: u32,
    prerequisite_name: &str,
) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_exec_dependency(),
        join_group_key(join_id, group),
    )
    .when(Cond::not_contains(attr::RELEASED, s(prerequisite_name)))
    .act(Action::Add(
        attr::RELEASED.into(),
        AttributeValue::Ss(vec![prerequisite_name.into()]),
    ))
}

/// Clear the due marker of an activity whose obligations are done, if it is
/// still in the state `exec` shows.
pub fn clear_due(tables: &Tables, exec: &ActivityExec) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq(attr::STATE, s(exec.state.as_str())))
    .when(Cond::exists(attr::DUE_EPOCH))
    .remove(attr::DUE_EPOCH)
    .remove(attr::DUE_SHARD)
}

/// Move the due marker of the terminal `exec`, whose settle is owed, to
/// `at` (epoch seconds), conditioned on the item still in `exec`'s state
/// and on its marker being `read` (`None`: any marker; issue 42 A.9).
/// Two uses: a monitor tick takes a settle longer than one chunk in hand
/// (`read`: the marker it found due; `at`: when its invocation has surely
/// ended), so the ticks that overlap it find the marker ahead and leave
/// it; and a settle cut by its budget hands the rest back (`at`: now), so
/// the next tick resumes it rather than the settle grace later. Fails on
/// its condition when another tick took the marker first.
pub fn move_settle_due(
    tables: &Tables,
    exec: &ActivityExec,
    read: Option<i64>,
    at: i64,
) -> UpdateRequest {
    let req = UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq(attr::STATE, s(exec.state.as_str())))
    .when(match read {
        Some(due) => Cond::eq(attr::DUE_EPOCH, n(due)),
        None => Cond::exists(attr::DUE_EPOCH),
    });
    due(&exec.activity_exec_id, at)
        .into_iter()
        .fold(req, |r, a| r.act(a))
}

/// Record that the first `through` dependents of the COMPLETED `exec` are
/// released (`released_through`, issue 42 A.9), never lowering what is
/// recorded: a release cut by its budget resumes there. Conditioned on
/// the item still COMPLETED.
pub fn released_through_update(
    tables: &Tables,
    exec: &ActivityExec,
    through: u64,
) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq(attr::STATE, s(ActivityState::Completed.as_str())))
    .when(Cond::Or(vec![
        Cond::not_exists(attr::RELEASED_THROUGH),
        Cond::lt(attr::RELEASED_THROUGH, n(through)),
    ]))
    .set(attr::RELEASED_THROUGH, n(through))
}

/// Every attribute [`mark_rejected`] names: the event row's key and the
/// mark (template.yaml `KeepRejections` allows these alone).
pub const REJECTION_WRITES: [&str; 4] = [
    attr::ACTIVITY_EVENT_ID,
    attr::ACTIVITY_EXEC_ID,
    attr::REJECTED_EPOCH,
    attr::REJECTED_REASON,
];

/// Record on the event row `(activity_event_id, activity_exec_id)` that the
/// engine rejected it for good at `now` (epoch seconds) for `reason`
/// (capped as an error is). Only an existing, unmarked row is written: the
/// first rejection stands, and a row TTL removed is not put back.
/// (design.md § 3.8: a rejection is remembered, so the monitor never
/// applies a row the stream refused, e.g. an earlier attempt's late report
/// to the next attempt.)
pub fn mark_rejected(tables: &Tables, row: (&str, &str), reason: &str, now: i64) -> UpdateRequest {
    UpdateRequest::new(
        tables.activity_event(),
        crate::keys::event_key(row.0, row.1),
    )
    .when(Cond::exists(attr::ACTIVITY_EVENT_ID))
    .when(Cond::not_exists(attr::REJECTED_EPOCH))
    .set(attr::REJECTED_EPOCH, n(now))
    .set(attr::REJECTED_REASON, s(cap_error(reason)))
}

/// Move the due marker of a live activity to `at` (a heartbeat pushed its
/// deadline), if it is still at the version read and its heartbeat time
/// has not gone back below the one read. A heartbeat does not change the
/// version, and two instances of one launch (Lambda may deliver an invoke
/// twice) heartbeat with clocks apart: one landing between the read and
/// this write with an older time would leave the marker after the
/// heartbeat deadline (contract.md § 4: never later). A newer one only
/// makes the moved marker early, which is allowed.
///
/// A heartbeat the engine had not seen ([`deadline::unseen_heartbeat`]) is
/// recorded as seen at `now` (epoch seconds, the engine's clock), which
/// [`deadline::heartbeat_deadline`] counts from; then the write requires
/// exactly the heartbeat read, so what it records is what it saw.
pub fn extend_due(tables: &Tables, exec: &ActivityExec, at: i64, now: i64) -> UpdateRequest {
    let mut req = UpdateRequest::new(
        tables.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq(attr::VERSION, n(exec.version)));
    let read = exec.timing.heartbeat_time_epoch;
    if deadline::unseen_heartbeat(exec) {
        req = req
            .when(Cond::eq(attr::HEARTBEAT_TIME_EPOCH, n(read)))
            .set(attr::HEARTBEAT_SEEN, n(read))
            .set(attr::HEARTBEAT_SEEN_EPOCH, n(now));
    } else if read >= 0 {
        let not_older = Cond::Compare(
            attr::HEARTBEAT_TIME_EPOCH.into(),
            crate::write::Cmp::Ge,
            n(read),
        );
        req = req.when(not_older);
    }
    for a in due(&exec.activity_exec_id, at) {
        req = req.act(a);
    }
    req
}

pub use attempts::*;
pub use deadline::*;
pub use items::activity_items;
pub use owed::{owed, Obligation};
pub use slots::{
    drop_all_waiters, drop_waiter, give_back_slot, slot_limit, take_slot, wait_for_slot,
    waiter_entry, waiter_name,
};
pub use step::{
    applicable, applied_locally, report_details, transition_step, unstorable, Source,
    TransitionStep,
};
pub use wake::{wake_up_for, WakeUp};
pub use workflow::{
    check_request, execution_deadline, failing_exec, finish_as_counted, requested_exec,
    start_refusal, started_update, workflow_move, WorkflowMove, MAX_SOURCE_BYTES,
};

pub mod attempts;
pub mod deadline;
pub mod decided;
pub mod episodes;
pub mod items;
pub mod owed;
pub mod redrive;
pub mod slots;
pub mod step;
pub mod target_limits;
pub mod wake;
pub mod workflow;

#[cfg(test)]
mod episodes_tests;
#[cfg(test)]
mod step_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timer_tests;
