//! The pure rules of a redrive (design.md § 9.4): whether a workflow may
//! be redriven, the write that takes it back to RUNNING, and what becomes
//! of each activity. A redrive is a request row naming the workflow
//! (`redrive_workflow_exec_id`); its request id R marks every step, so a
//! redelivered or resumed redrive finishes what a dead one began and
//! never redrives twice.
//!
//! **Generations.** Each redrive starts a generation G (the workflow's
//! `redrive_count`). Ends are counted anew in G's own count groups:
//! group `g` of the plan is numbered `G × GROUPS_PER_GENERATION + g`, so
//! its item, its marker in `counted_groups` and the group an activity's
//! `count_slot` names differ from every earlier generation's, and no late
//! write of an earlier generation can count into G.

use crate::attr;
use crate::config::EngineConfig;
use crate::contract::{ActivityState, WorkflowState};
use crate::history::{history_error, kept_id, HistoryEntry};
use crate::keys::{self, Tables};
use crate::model::{ActivityExec, Attempt, Outcome, Timing, WorkflowExec};
use crate::write::size::MAX_ITEM_BYTES;
use crate::write::{n, s, Action, Cond, UpdateRequest, Value as AttributeValue};

/// Redrives of one workflow execution, at most (count): each adds its
/// request id (≤ 2,048 bytes) to the workflow item's `redrives` and a
/// generation of history to what it runs again, and generations number
/// count groups in 32 bits (docs/limits.md § 5).
pub const MAX_REDRIVES: u32 = 100;

/// Count group numbers per generation: more than any plan has groups
/// (`plan::MAX_ACTIVITIES` activities, at least one per group).
pub const GROUPS_PER_GENERATION: u32 = 100_000;

/// The event id a redrive writes into each activity it redrives:
/// `redrive:(request id)`.
pub fn redrive_event_id(redrive_id: &str) -> String {
    format!("redrive:{redrive_id}")
}

/// Why `wf` cannot be redriven, judged on the workflow alone (before its
/// activities are read), or `None`: it is not FAILED or CANCELLED, or it
/// ended before it was planned. Such a workflow may have a stored plan
/// but no activities (cancelled or failed while its start created them),
/// so reading them would fail for good.
pub fn workflow_refusal(wf: &WorkflowExec) -> Option<String> {
    let id = &wf.workflow_exec_id;
    if !matches!(wf.state, WorkflowState::Failed | WorkflowState::Cancelled) {
        return Some(format!(
            "workflow exec {id} is {}; only a FAILED or CANCELLED one is redriven",
            wf.state
        ));
    }
    if wf.is_episodic() {
        // Its decider decides what runs (design.md § 10.7): start it anew,
        // or continue it as new.
        return Some(format!(
            "workflow exec {id} is episodic (its decider decides what runs); start it anew"
        ));
    }
    let done = wf.redrive_count.unwrap_or(0);
    if done >= MAX_REDRIVES {
        return Some(format!(
            "workflow exec {id} was redriven {done} times; at most {MAX_REDRIVES} redrives are allowed: start it anew"
        ));
    }
    wf.planned_epoch.is_none().then(|| never_planned(id))
}

/// Why `wf` (FAILED or CANCELLED) is not redriven yet, or `None`: its end
/// still owes something while its due marker stays (a child's report to
/// its parent's node, design.md § 9.5). A redrive in between ran the child
/// again, and the report, decided on the end it had read, then ended the
/// node while the child ran (torture seed 204646). Not a refusal: the
/// request is tried again, and the monitor pays what is owed within a
/// tick. [`redrive_update`] holds it on the same condition.
pub fn redrive_wait(wf: &WorkflowExec) -> Option<String> {
    let owes = wf.state.is_terminal() && wf.due_epoch.is_some();
    owes.then(|| {
        format!(
            "workflow exec {} ended, and its end has not reached its parent yet; redriven once it has",
            wf.workflow_exec_id
        )
    })
}

/// The refusal of a workflow that never created its activities.
fn never_planned(id: &str) -> String {
    format!("workflow exec {id} never created its activities: start it anew")
}

/// Why `wf` cannot be redriven now, or `None` when it can: it must be
/// FAILED or CANCELLED ([`workflow_refusal`]) with every activity
/// (`activities`, all of its plan's) ended and owing nothing (no due
/// marker: a settle not done, a CANCELLED_RUNNING attempt of an execution
/// timeout not ended).
pub fn redrive_refusal(wf: &WorkflowExec, activities: &[ActivityExec]) -> Option<String> {
    let id = &wf.workflow_exec_id;
    if let Some(why) = workflow_refusal(wf) {
        return Some(why);
    }
    if activities.len() as u64 != wf.activity_count {
        return Some(never_planned(id));
    }
    if let Some(old) = activities.iter().find(|a| a.links.count_slot.is_none()) {
        return Some(format!(
            "workflow exec {id}: activity {} was written before count groups; start it anew",
            old.activity_name
        ));
    }
    if let Some(busy) = activities
        .iter()
        .find(|a| !a.state.is_terminal() || a.timing.due_epoch.is_some())
    {
        return Some(format!(
            "workflow exec {id}: activity {} is {} and not settled yet; redrive it once it is",
            busy.activity_name, busy.state
        ));
    }
    activities.iter().find_map(|a| full_for_a_generation(id, a))
}

/// Why activity `a` (ended, of workflow exec `id`) cannot run another
/// generation, or `None`: an activity a redrive runs again (not
/// COMPLETED) must keep room on its item for the history of the attempts
/// it may make (one more, or the rest of its policy's), besides an
/// inline output and the item's reserve, as at the start
/// ([`ActivityExec::item_bytes_over`], docs/limits.md § 5).
fn full_for_a_generation(id: &str, a: &ActivityExec) -> Option<String> {
    if a.state == ActivityState::Completed {
        return None;
    }
    let attempts = a.max_attempts().saturating_sub(a.attempt.number).max(1);
    let (size, worst) = a.item_bytes_over(attempts);
    (worst > MAX_ITEM_BYTES).then(|| {
        format!(
            "workflow exec {id}: activity {} has no room for another generation: its item is {size} bytes, {worst} with {attempts} more attempts' history and an inline output; DynamoDB stores at most {MAX_ITEM_BYTES}: start it anew",
            a.activity_name
        )
    })
}

/// The conditional write that takes `wf` (FAILED or CANCELLED, as read,
/// its end owing nothing: no due marker) back to RUNNING for redrive `redrive_id` at `now`: generation
/// `redrive_count + 1`, the request in `redrives` (a string set: never
/// twice) and in `redriving` (until the redrive is done), the ends'
/// counters and markers, error, end and result cleared, a due marker
/// `start_retry_seconds` ahead (the monitor resumes a redrive that dies),
/// and the execution timeout, if any, counted anew from `now`.
pub fn redrive_update(
    tables: &Tables,
    wf: &WorkflowExec,
    redrive_id: &str,
    now: i64,
    cfg: &EngineConfig,
) -> UpdateRequest {
    let id = &wf.workflow_exec_id;
    let mut req = UpdateRequest::new(
        tables.workflow_exec(),
        keys::workflow_key(id, &wf.workflow_name),
    )
    .when(Cond::eq(attr::STATE, s(wf.state.as_str())))
    .when(Cond::not_contains(attr::REDRIVES, s(kept_id(redrive_id))))
    // Its end owes nothing ([`redrive_wait`]).
    .when(Cond::not_exists(attr::DUE_EPOCH))
    .set(attr::STATE, s(WorkflowState::Running.as_str()))
    .set(attr::COMPLETED_COUNT, n(0))
    .set(attr::FAILED_COUNT, n(0))
    .set(attr::CANCELLED_COUNT, n(0))
    .set(attr::REDRIVING, s(redrive_id))
    .set(attr::DUE_EPOCH, n(now + cfg.start_retry_seconds))
    .set(attr::DUE_SHARD, n(keys::shard_of(id)))
    .act(Action::Add(attr::REDRIVE_COUNT.into(), n(1)))
    .act(Action::Add(
        attr::REDRIVES.into(),
        AttributeValue::Ss(vec![kept_id(redrive_id).into_owned()]),
    ));
    for gone in [
        attr::COUNTED_GROUPS,
        attr::ERROR,
        attr::END_TIME,
        attr::END_TIME_EPOCH,
        attr::RESULT,
        attr::RESULT_IN_ACTIVITIES,
    ] {
        req = req.remove(gone);
    }
    if let Some(t) = wf.execution_timeout_seconds {
        // The deadline is start + timeout: the timeout runs anew from now.
        let anew = (now - wf.start_time_epoch).max(0) + t;
        req = req.set(attr::EXECUTION_TIMEOUT_SECONDS, n(anew));
    }
    req
}

/// The write that ends redrive `redrive_id` once its activities are
/// redriven and claimed: `redriving` goes, and the due marker becomes the
/// execution timeout's (or goes), as at the end of a start.
/// Conditioned on RUNNING too: a workflow that ended meanwhile keeps the
/// marker its end set (a child's report owed), and only `redriving` goes
/// ([`redrive_dropped_update`]).
pub fn redrive_done_update(tables: &Tables, wf: &WorkflowExec, redrive_id: &str) -> UpdateRequest {
    let done = redrive_dropped_update(tables, wf, redrive_id)
        .when(Cond::eq(attr::STATE, s(WorkflowState::Running.as_str())));
    match super::execution_deadline(wf) {
        Some(at) => done
            .set(attr::DUE_EPOCH, n(at))
            .set(attr::DUE_SHARD, n(keys::shard_of(&wf.workflow_exec_id))),
        None => done.remove(attr::DUE_EPOCH).remove(attr::DUE_SHARD),
    }
}

/// The write that drops `redriving` alone (conditioned on it being
/// `redrive_id`): the end of a redrive whose workflow ended meanwhile.
pub fn redrive_dropped_update(
    tables: &Tables,
    wf: &WorkflowExec,
    redrive_id: &str,
) -> UpdateRequest {
    UpdateRequest::new(
        tables.workflow_exec(),
        keys::workflow_key(&wf.workflow_exec_id, &wf.workflow_name),
    )
    .when(Cond::eq(attr::REDRIVING, s(redrive_id)))
    .remove(attr::REDRIVING)
}

/// `exec` as generation `generation` counts it: its count slot's group in
/// that generation's numbering.
pub fn in_generation(exec: &ActivityExec, generation: u32) -> ActivityExec {
    let mut copy = exec.clone();
    if let Some(slot) = copy.links.count_slot.as_mut() {
        slot.group = generation * GROUPS_PER_GENERATION + slot.group % GROUPS_PER_GENERATION;
    }
    copy
}

/// The history transition a redrive records.
pub const REDRIVE_TRANSITION: &str = "REDRIVE";

/// True when `event_id` was applied to `exec` already: an event row's id
/// anywhere in its history, an engine step's only since its last redrive
/// (an engine step's id may repeat in the next generation: the same
/// prerequisite fails again, `upstream-ended:(activity)`).
pub fn applied_before(exec: &ActivityExec, event_id: &str) -> bool {
    let history = &exec.trail.history;
    let since = history
        .iter()
        .rposition(|h| h.transition == REDRIVE_TRANSITION)
        .map_or(0, |i| i + 1);
    let id = &exec.activity_exec_id;
    history.iter().enumerate().any(|(i, h)| {
        h.names(id, event_id) && (i >= since || !crate::ids::is_engine_step(&h.event_id))
    })
}

/// True when `exec` was redriven by `redrive_id` already.
pub fn redriven_by(exec: &ActivityExec, redrive_id: &str) -> bool {
    let id = redrive_event_id(redrive_id);
    (exec.trail.history.iter()).any(|h| h.names(&exec.activity_exec_id, &id))
}

/// The item of the ended `exec` redriven by `redrive_id` into generation
/// `generation` at `now`: REQUESTED again (its claim numbers the next
/// attempt), its output, error, times, token, worker and due marker gone, and a
/// history entry `redrive:R` (transition `REDRIVE`) that keeps its last
/// error, cut as every history entry's ([`history_error`]). Its pending count and release markers are unchanged: the edges
/// of completed prerequisites stay released. Put conditioned on its
/// state and version as read.
pub fn redriven_item(
    exec: &ActivityExec,
    redrive_id: &str,
    generation: u32,
    now: i64,
) -> ActivityExec {
    let mut item = in_generation(exec, generation);
    let mut entry = HistoryEntry::new(
        crate::contract::Transition::Queued,
        ActivityState::Requested,
        now,
        &redrive_event_id(redrive_id),
    );
    entry.transition = REDRIVE_TRANSITION.into();
    entry.attempt = Some(exec.attempt.number);
    entry.error = exec.outcome.error.as_deref().map(history_error);
    item.trail.history.push(entry);
    item.trail.last_event_id = None;
    item.trail.parked.clear();
    item.state = ActivityState::Requested;
    item.version = exec.version + 1;
    // The claim that follows numbers the next attempt, as a first
    // claim numbers the first.
    item.attempt = Attempt {
        number: exec.attempt.number,
        launches: 0,
        token_hash: None,
        ..exec.attempt.clone()
    };
    item.timing = Timing::default();
    item.outcome = Outcome::default();
    item.runner.worker = None;
    item.runner.task_list_shard = None;
    item.runner.task_queued_epoch = None;
    item.links.slot_held = false;
    item.links.target_limit = None;
    item.links.target_slot_held = false;
    // Its next COMPLETED releases its dependents from the first.
    item.links.released_through = None;
    item
}

/// The condition of the put of a redriven item: the item is as read.
pub fn redrive_put_condition(exec: &ActivityExec) -> Cond {
    Cond::eq(attr::STATE, s(exec.state.as_str())).and(Cond::eq(attr::VERSION, n(exec.version)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Transition;

    /// A FAILED activity of `attempts` attempts, with `entries` history
    /// entries of the largest error.
    fn failed(attempts: u32, entries: usize) -> ActivityExec {
        let mut a = crate::decide::tests::running(None, None);
        a.state = ActivityState::Failed;
        a.timing.due_epoch = None;
        a.links.count_slot = Some(crate::model::GroupSlot { group: 0, size: 1 });
        a.attempt.number = attempts;
        let mut e = HistoryEntry::new(Transition::Failed, ActivityState::Failed, 1, "a::e");
        e.error = Some("r".repeat(crate::history::HISTORY_ERROR_BYTES));
        a.trail.history = vec![e; entries];
        a
    }

    /// Issue 42 D: a redrive keeps room on each item it runs again for
    /// one more generation's history; an item without it is refused with
    /// the reason, before anything is written.
    #[test]
    fn a_redrive_needs_room_on_each_item_for_another_generation() {
        let mut wf = WorkflowExec {
            state: WorkflowState::Failed,
            planned_epoch: Some(1),
            ..crate::decide::tests::workflow()
        };
        let roomy = failed(1, 10);
        assert_eq!(full_for_a_generation("w::1", &roomy), None);
        let (size, worst) = roomy.item_bytes_over(1);
        assert!(worst > size + crate::history::generation_history_bytes(1));
        // Entries of about 300 bytes until one more generation passes.
        let full = failed(1, 1_300);
        let why = full_for_a_generation("w::1", &full).expect("refused");
        assert!(why.contains("no room for another generation"), "{why}");
        assert_eq!(redrive_refusal(&wf, std::slice::from_ref(&full)), Some(why));
        // A COMPLETED one does not run again, so it needs no room.
        let mut done = full.clone();
        done.state = ActivityState::Completed;
        assert_eq!(full_for_a_generation("w::1", &done), None);
        // At most 100 redrives, whatever the items.
        wf.redrive_count = Some(MAX_REDRIVES);
        let why = workflow_refusal(&wf).expect("refused");
        assert!(why.contains("at most 100 redrives"), "{why}");
        wf.redrive_count = Some(MAX_REDRIVES - 1);
        assert_eq!(workflow_refusal(&wf), None);
    }
}
