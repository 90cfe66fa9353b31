//! Attempts as pure writes: queueing an activity, claiming an attempt (the
//! launcher before its invoke, or a worker taking a task), relaunching a
//! lost invocation, and sending a failed attempt back to QUEUED for a
//! retry. Each is one conditional UpdateItem on the `version` read, so
//! exactly one caller wins, and each sets the due marker of the state it
//! leads to ([`next_deadline`]).

use super::deadline::next_deadline;
use super::{cap_error, history, live_keep, versioned, with_due, Change, Details};
use crate::attr;
use crate::config::EngineConfig;
use crate::contract::{self, ActivityState, Transition};
use crate::dates::Timestamp;
use crate::history::history_error;
use crate::keys::{self, Tables};
use crate::model::{ActivityExec, HistoryEntry};
use crate::retry;
use crate::write::{av, n, s, Action, Cond, UpdateRequest};

/// Shards of the task-list GSI per task list: workers query every shard
/// and take the oldest task; writes of one busy list spread over them.
pub const TASK_LIST_SHARDS: u32 = 4;

/// The task-list GSI hash key of an activity: `(task_list)#(shard)`, the
/// shard from [`keys::shard_of`] of its id modulo [`TASK_LIST_SHARDS`].
pub fn task_list_shard(task_list: &str, activity_exec_id: &str) -> String {
    format!(
        "{task_list}#{}",
        keys::shard_of(activity_exec_id) % TASK_LIST_SHARDS
    )
}

/// Put a task-list activity's attempt in its list's index, claimable from
/// `at` (epoch seconds).
fn offer(req: UpdateRequest, exec: &ActivityExec, at: i64) -> UpdateRequest {
    match exec.runner.runs.task_list() {
        Some(list) => req
            .set(
                attr::TASK_LIST_SHARD,
                s(task_list_shard(list, &exec.activity_exec_id)),
            )
            .set(attr::TASK_QUEUED_EPOCH, n(at)),
        None => req,
    }
}

/// Queue the first attempt of an activity whose prerequisites all
/// completed: REQUESTED → QUEUED for roots, REQUESTED → READY → QUEUED
/// otherwise (contract: "Launching A New Activity"). A Lambda activity's
/// attempt is claimed in the same write (`token_hash`; only the winner
/// invokes); a task-list activity's waits in its list's index for a
/// worker's claim. Conditioned on the version read and a zero pending
/// count: exactly one caller wins.
pub fn queue_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    token_hash: Option<&str>,
    now: i64,
) -> UpdateRequest {
    queue_after(tables, cfg, exec, token_hash, now, None)
}

/// The last release and the first attempt in one write (design.md § 3.2:
/// the update that reaches 0 takes it REQUESTED → READY → QUEUED): releases
/// `marker` (a prerequisite's id, or a join group's marker) on `exec`, read
/// with one pending prerequisite and `marker` not released, and queues it as
/// [`queue_update`] does. Conditioned on the version read, the pending count
/// of 1 and the marker, so it is the release of that edge, once, or
/// nothing: one write instead of two (a release, then a claim). Like every
/// first claim it removes `released_prerequisites`: with nothing pending
/// the markers guard nothing, and the item's later writes are billed by
/// its size.
pub fn release_and_queue_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    marker: &str,
    token_hash: Option<&str>,
    now: i64,
) -> UpdateRequest {
    queue_after(tables, cfg, exec, token_hash, now, Some(marker))
}

fn queue_after(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    token_hash: Option<&str>,
    now: i64,
    release: Option<&str>,
) -> UpdateRequest {
    let attempt = exec.attempt.number + 1;
    let event_id = launcher_event_id(attempt);
    let (transition, state) = exec.runner.kind().released_as();
    let entries = released_entries(exec, (transition, state), now, &event_id);
    let mut after = exec.clone();
    after.state = state;
    after.attempt.number = attempt;
    after.timing.first_queued_epoch = Some(now);
    after.timing.scheduled_epoch = Some(now);
    let req = match release {
        None => versioned(tables, exec).when(Cond::eq(attr::PENDING_DEPENDENCY_COUNT, n(0))),
        Some(marker) => versioned(tables, exec)
            .when(Cond::eq(attr::PENDING_DEPENDENCY_COUNT, n(1)))
            .when(Cond::not_contains(attr::RELEASED_PREREQUISITES, s(marker)))
            .set(attr::PENDING_DEPENDENCY_COUNT, n(0)),
    };
    // The release markers only guard a count above 0 (a release is
    // conditioned on `pending_dependency_count > 0`): at 0 they are
    // derivable, and every later write of the item would pay for them.
    let req = req
        .remove(attr::RELEASED_PREREQUISITES)
        .when(super::state_in(&contract::sources(
            exec.runner.kind(),
            transition,
            state,
        )))
        .set(attr::STATE, s(state.as_str()))
        .set(attr::ATTEMPT, n(attempt))
        .set(attr::FIRST_QUEUED_EPOCH, n(now))
        .set(attr::SCHEDULED_EPOCH, n(now))
        .act(Action::Append(attr::HISTORY.into(), entries));
    let req = started(req, &mut after, now);
    match token_hash {
        Some(h) => claim(req, cfg, after, h, 1, now),
        None => {
            let req = offer(req, exec, now).remove(attr::LAST_EVENT_ID);
            let due = next_deadline(&after, cfg).map(|d| d.0);
            with_due(req, exec, due, live_keep(now, due))
        }
    }
}

/// The history of a first release: READY (when it had prerequisites),
/// then the state its kind is released to ([`NodeKind::released_as`]:
/// QUEUED, or RUNNING for a timer).
///
/// [`NodeKind::released_as`]: crate::kind::NodeKind::released_as
fn released_entries(
    exec: &ActivityExec,
    (transition, state): (Transition, ActivityState),
    now: i64,
    event_id: &str,
) -> Vec<crate::write::Value> {
    let id = &exec.activity_exec_id;
    let mut entries = vec![];
    if exec.state == ActivityState::Requested && exec.has_prerequisites() {
        let ready = (Transition::Ready, ActivityState::Ready);
        entries.push(history(id, ready.0, ready.1, now, event_id));
    }
    entries.push(history(id, transition, state, now, event_id));
    entries
}

/// A node released straight to RUNNING (a timer) starts at `now`: its
/// wait counts from the start time this sets.
fn started(req: UpdateRequest, after: &mut ActivityExec, now: i64) -> UpdateRequest {
    if after.state != ActivityState::Running {
        return req;
    }
    after.timing.start_time_epoch = now;
    req.set(
        attr::START_TIME,
        av(&Timestamp::from_epoch(now).date_list()),
    )
    .set(attr::START_TIME_EPOCH, n(now))
}

/// Claim a new launch of the live attempt, still QUEUED past its relaunch
/// deadline (the invocation was lost or never started): same attempt, a
/// new token (the lost invocation's reports are refused from now on).
pub fn relaunch_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    token_hash: &str,
    now: i64,
) -> UpdateRequest {
    let launch = exec.attempt.launches.max(1) + 1;
    let event_id = format!(
        "relaunch:{}:{}:{launch}",
        exec.activity_exec_id, exec.attempt.number
    );
    let req = versioned(tables, exec).act(queued_again(exec, now, &event_id));
    claim(req, cfg, exec.clone(), token_hash, launch, now)
}

/// The history entry of a new launch of a QUEUED attempt (a relaunch, or
/// the launch of a retried attempt): QUEUED again, by `event_id`.
fn queued_again(exec: &ActivityExec, now: i64, event_id: &str) -> Action {
    let entry = history(
        &exec.activity_exec_id,
        Transition::Queued,
        ActivityState::Queued,
        now,
        event_id,
    );
    Action::Append(attr::HISTORY.into(), vec![entry])
}

/// The event id a launcher's claim records in the history.
fn launcher_event_id(attempt: u32) -> String {
    crate::ids::EngineStep::Launcher(attempt).event_id()
}

/// Claim the attempt a retry queued, once its delay ended (Lambda
/// activities: the monitor, or the failing call itself when the delay is
/// zero). Conditioned on the version read and no claim yet.
pub fn launch_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    token_hash: &str,
    now: i64,
) -> UpdateRequest {
    // Boundary check (debug builds): only an invoked node's queued,
    // unclaimed attempt is launched; the write's conditions refuse the
    // rest in every build.
    debug_assert!(
        exec.runner.kind().is_invoked() && exec.attempt.token_hash.is_none(),
        "launch of {} ({:?}), which the launcher does not claim",
        exec.activity_exec_id,
        exec.runner.kind()
    );
    let req = versioned(tables, exec)
        .when(Cond::eq(attr::STATE, s(ActivityState::Queued.as_str())))
        .when(Cond::not_exists(attr::ATTEMPT_TOKEN_HASH))
        .remove(attr::NEXT_ATTEMPT_EPOCH)
        .act(queued_again(
            exec,
            now,
            &launcher_event_id(exec.attempt.number),
        ));
    let mut after = exec.clone();
    after.timing.next_attempt_epoch = None;
    claim(req, cfg, after, token_hash, 1, now)
}

/// The claim of a launch by the launcher: token, launch number, queue time,
/// and the due marker of the claimed QUEUED state (relaunch,
/// schedule-to-start, schedule-to-close).
fn claim(
    req: UpdateRequest,
    cfg: &EngineConfig,
    mut after: ActivityExec,
    token_hash: &str,
    launch: u32,
    now: i64,
) -> UpdateRequest {
    let t = Timestamp::from_epoch(now);
    let before = after.clone();
    after.attempt.token_hash = Some(token_hash.into());
    after.timing.queued_time_epoch = Some(now);
    after.attempt.launches = launch;
    let req = req
        .set(attr::ATTEMPT_TOKEN_HASH, s(token_hash))
        .set(attr::LAUNCH, n(launch))
        .remove(attr::LAST_EVENT_ID)
        .set(attr::QUEUED_TIME, av(&t.date_list()))
        .set(attr::QUEUED_TIME_EPOCH, n(now))
        .remove(attr::LAUNCHED_TIME)
        .remove(attr::LAUNCHED_TIME_EPOCH);
    let due = next_deadline(&after, cfg).map(|d| d.0);
    with_due(req, &before, due, live_keep(now, due))
}

/// A worker's claim of a task: QUEUED (waiting in its list's index) →
/// RUNNING with a fresh attempt token, in one conditional write on the
/// version read (contract row QUEUED → RUNNING, by the attempt itself).
/// Two workers never hold the same attempt: the loser's condition fails.
/// Sets the start and heartbeat times, the worker's name, and the due
/// marker of the RUNNING state; removes the item from the index. The
/// row-level protocol is in `docs/workers.md`.
pub fn claim_task_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    token_hash: &str,
    worker: &str,
    now: i64,
) -> UpdateRequest {
    let t = Timestamp::from_epoch(now);
    let event_id =
        crate::ids::EngineStep::Claim(&exec.activity_exec_id, exec.attempt.number).event_id();
    let mut after = exec.clone();
    after.state = ActivityState::Running;
    after.timing.start_time_epoch = now;
    let mut req = versioned(tables, exec)
        .when(Cond::eq(attr::STATE, s(ActivityState::Queued.as_str())))
        .when(Cond::exists(attr::TASK_LIST_SHARD))
        .when(Cond::not_exists(attr::ATTEMPT_TOKEN_HASH))
        .set(attr::STATE, s(ActivityState::Running.as_str()))
        .set(attr::ATTEMPT_TOKEN_HASH, s(token_hash))
        .set(attr::WORKER, s(worker))
        .set(attr::LAUNCH, n(1))
        .remove(attr::LAST_EVENT_ID)
        .set(attr::LAUNCHED_TIME, av(&t.date_list()))
        .set(attr::LAUNCHED_TIME_EPOCH, n(now))
        .set(attr::START_TIME, av(&t.date_list()))
        .set(attr::START_TIME_EPOCH, n(now))
        .remove(attr::TASK_LIST_SHARD)
        .remove(attr::TASK_QUEUED_EPOCH)
        .remove(attr::NEXT_ATTEMPT_EPOCH)
        .act(Action::Append(
            attr::HISTORY.into(),
            vec![history(
                &exec.activity_exec_id,
                Transition::Running,
                ActivityState::Running,
                now,
                &event_id,
            )],
        ));
    if exec.timeouts.heartbeat_enabled {
        // The worker's clock: the engine has not seen this heartbeat yet
        // (the monitor arms it when it looks, deadline::heartbeat_deadline).
        req = req
            .set(attr::HEARTBEAT_TIME, av(&t.date_list()))
            .set(attr::HEARTBEAT_TIME_EPOCH, n(now))
            .remove(attr::HEARTBEAT_SEEN)
            .remove(attr::HEARTBEAT_SEEN_EPOCH);
        after.timing.heartbeat_time_epoch = now;
        after.timing.heartbeat_seen = None;
        after.timing.heartbeat_seen_epoch = None;
    }
    let due = next_deadline(&after, cfg).map(|d| d.0);
    with_due(req, exec, due, live_keep(now, due))
}

/// Record that the live launch was invoked (for operators; no rule reads
/// it). Conditioned on the same attempt and launch still being live.
pub fn launched_update(tables: &Tables, exec: &ActivityExec, now: i64) -> UpdateRequest {
    let t = Timestamp::from_epoch(now);
    let mut req = UpdateRequest::new(
        tables.activity_exec(),
        super::activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::eq(attr::ATTEMPT, n(exec.attempt.number)))
    .set(attr::LAUNCHED_TIME, av(&t.date_list()))
    .set(attr::LAUNCHED_TIME_EPOCH, n(now));
    if let Some(h) = &exec.attempt.token_hash {
        req = req.when(Cond::eq(attr::ATTEMPT_TOKEN_HASH, s(h)));
    }
    req
}

/// When the next attempt is due (epoch seconds) if the failure `change`
/// (FAILED or TIMED_OUT from `exec.state`) is retried, or `None` if it
/// ends the activity: the contract allows a retry from this state, the
/// failure is `retryable` (schedule-to-close never is), the policy has
/// attempts left and retries this error name, and the next attempt would
/// begin before schedule-to-close passes.
pub fn retry_after(
    exec: &ActivityExec,
    change: &Change<'_>,
    details: &Details,
    retryable: bool,
    now: i64,
) -> Option<i64> {
    contract::retry_state(exec.state, change.transition)?;
    let policy = exec.attempt.retry.as_ref().filter(|_| retryable)?;
    if exec.attempt.number >= policy.attempts() {
        return None;
    }
    let name = if change.transition == Transition::TimedOut {
        retry::TIMED_OUT
    } else {
        retry::error_name(details.error.as_deref().unwrap_or(""))
    };
    if !policy.retries(name) {
        return None;
    }
    let unit = retry::jitter_unit(&exec.activity_exec_id, exec.attempt.number);
    let at = now + policy.delay_seconds(exec.attempt.number, unit);
    let close = exec
        .timeouts
        .schedule_to_close_seconds
        .zip(exec.timing.first_queued_epoch)
        .map(|(t, from)| from + t);
    match close {
        Some(c) if at >= c => None,
        _ => Some(at),
    }
}

/// The write of a retried failure: the attempt's failure goes in the
/// history (with its number, error and the next attempt's time) and the
/// activity goes back to QUEUED as attempt + 1, unclaimed, due at `at`
/// (contract: [`contract::RETRY_FROM`]). A task-list activity is offered
/// to workers from `at`. Conditioned on the version read (and, for a
/// heartbeat timeout, on the heartbeat still being stale).
pub fn retry_update(
    tables: &Tables,
    cfg: &EngineConfig,
    exec: &ActivityExec,
    change: &Change<'_>,
    details: &Details,
    at: i64,
    now: i64,
) -> UpdateRequest {
    let error = details.error.as_deref().unwrap_or("no reason given");
    let entry = HistoryEntry {
        attempt: Some(exec.attempt.number),
        error: Some(history_error(error)),
        next_attempt_epoch: Some(at),
        ..HistoryEntry::new(
            change.transition,
            ActivityState::Queued,
            now,
            change.event_id,
        )
    };
    let mut req = versioned(tables, exec)
        .when(super::state_in(&contract::RETRY_FROM))
        .set(attr::STATE, s(ActivityState::Queued.as_str()))
        .set(attr::ATTEMPT, n(exec.attempt.number + 1))
        .set(attr::LAUNCH, n(0))
        .remove(attr::LAST_EVENT_ID)
        .set(attr::ERROR, s(cap_error(error)))
        .set(attr::NEXT_ATTEMPT_EPOCH, n(at))
        .set(attr::SCHEDULED_EPOCH, n(at))
        .set(attr::START_TIME_EPOCH, n(-1))
        .set(attr::HEARTBEAT_TIME_EPOCH, n(-1))
        .remove(attr::ATTEMPT_TOKEN_HASH)
        .remove(attr::WORKER)
        .remove(attr::START_TIME)
        .remove(attr::HEARTBEAT_TIME)
        .remove(attr::HEARTBEAT_SEEN)
        .remove(attr::HEARTBEAT_SEEN_EPOCH)
        .remove(attr::LAUNCHED_TIME)
        .remove(attr::LAUNCHED_TIME_EPOCH)
        .act(Action::Append(
            attr::HISTORY.into(),
            vec![av(&entry.stored(&exec.activity_exec_id))],
        ));
    if !exec.trail.parked.is_empty() {
        // Reports of the failed attempt can never apply to the next one.
        req = req.remove(attr::PARKED);
    }
    req = super::heartbeat_guards(req, details);
    let mut after = exec.clone();
    after.state = ActivityState::Queued;
    after.attempt.number += 1;
    after.attempt.token_hash = None;
    after.timing.next_attempt_epoch = Some(at);
    after.timing.scheduled_epoch = Some(at);
    let req = offer(req, exec, at);
    let due = next_deadline(&after, cfg).map(|d| d.0);
    with_due(req, exec, due, live_keep(now, due))
}
