//! `whimbrel show`: the timeline of a workflow exec, every accepted
//! transition of each activity (its `history`) and the workflow's own, in
//! time order, with who caused each (Temporal's `workflow show`).

mod chain;
mod format;

use std::collections::HashMap;
use whimbrel_core::attr;

use serde::Serialize;
use whimbrel_core::contract::{ActivityState, NodeKind, WorkflowState};
use whimbrel_core::model::{ActivityExec, HistoryEntry, WorkflowExec};

use crate::status::Snapshot;
pub use chain::{chain, decisions, with_decisions};
pub use format::{as_json, render};

/// Who caused a transition, from the history entry's `event_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    /// The engine: launches, cascades, starting and finishing workflows.
    Engine,
    /// A task-list worker's claim.
    Worker,
    /// The heartbeat monitor: timeouts.
    Monitor,
    /// A report: an activity, a user, any client writing event rows.
    Client,
    /// An episodic execution's decider: a decision committed or refused.
    Decider,
}

impl Actor {
    fn as_str(self) -> &'static str {
        match self {
            Actor::Engine => "engine",
            Actor::Worker => "worker",
            Actor::Monitor => "monitor",
            Actor::Client => "client",
            Actor::Decider => "decider",
        }
    }
}

/// One line of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// UTC time of day, HH:MM:SS.
    pub time: String,
    /// Epoch seconds.
    pub epoch: i64,
    /// The activity, or `None` for the workflow itself.
    pub activity: Option<String>,
    /// The transition applied (for the workflow: the state reached).
    pub transition: String,
    /// The state before (`None` for the workflow's creation).
    pub from: Option<String>,
    /// The state reached.
    pub to: String,
    /// Who caused it.
    pub actor: Actor,
    /// What about it: `launch`, `relaunch (launch 2)`, the worker's name,
    /// `heartbeat or start-to-close`...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The event (or engine step) id recorded in the history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// The attempt (1-based) the transition belongs to; `None` before the
    /// first is queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The error: of a retried attempt (from the history), of the final
    /// failure or cancel (the activity's `error`), of the workflow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For a retried attempt: when the next one is due, epoch seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_epoch: Option<i64>,
    /// True when the time is not stored but inferred (the workflow's move
    /// to RUNNING: shown at its first activity transition).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inferred_time: bool,
}

/// UTC HH:MM:SS of `epoch`.
fn hms(epoch: i64) -> String {
    chrono::DateTime::from_timestamp(epoch, 0)
        .map(|t| t.format("%H:%M:%S").to_string())
        .unwrap_or_else(|| "-".into())
}

/// The number after the last `:` of an engine event id
/// (`launcher:(activity_exec_id):(attempt)`, `relaunch:...:(launch)`).
fn last_number(event_id: &str) -> Option<u32> {
    event_id.rsplit(':').next()?.parse().ok()
}

/// Who caused the history entry `event_id` of activity `a` at `attempt`,
/// and a word about it. The engine's own steps have fixed prefixes
/// (`whimbrel-rules/src/decide/attempts.rs`, the engine's `effects.rs`, `monitor.rs`, `outcome.rs`); any
/// other id is an event row's `activity_event_id`.
pub fn cause(event_id: &str, a: &ActivityExec, attempt: Option<u32>) -> (Actor, Option<String>) {
    let (prefix, _) = event_id.split_once(':').unwrap_or(("", ""));
    match prefix {
        "launcher" if a.runner.kind() == NodeKind::Timer => {
            (Actor::Engine, Some("timer started".into()))
        }
        "launcher" if a.runner.kind() == NodeKind::Signal => {
            (Actor::Engine, Some("waiting for a signal".into()))
        }
        "launcher" if a.runner.kind() == NodeKind::Child => (
            Actor::Engine,
            Some(format!("child workflow {} requested", first_child(a))),
        ),
        "child-ended" => (
            Actor::Engine,
            Some(format!("child workflow {} ended", child_of(a))),
        ),
        "parent-failing" => (
            Actor::Engine,
            Some(
                "cancelled: another activity failed (its child is closed per parent_close)".into(),
            ),
        ),
        "signal" => (
            Actor::Client,
            Some(match event_id.rsplit_once('#') {
                Some((_, id)) => format!("signal received (id {id})"),
                None => "signal received".into(),
            }),
        ),
        "launcher" => (Actor::Engine, Some(attr::LAUNCH.into())),
        "timer-fired" => (Actor::Monitor, Some("timer fired".into())),
        "redrive" => (Actor::Client, Some("redriven (whimbrel redrive)".into())),
        "relaunch" => (
            Actor::Engine,
            Some(match last_number(event_id) {
                Some(n) => format!("relaunch (launch {n})"),
                None => "relaunch".into(),
            }),
        ),
        // The item names only the worker of the live attempt.
        "claim" => (
            Actor::Worker,
            a.runner
                .worker
                .clone()
                .filter(|_| attempt == Some(a.attempt.number)),
        ),
        "timed-out" => (Actor::Monitor, Some("timeout".into())),
        "not-started" => (Actor::Monitor, Some("never started".into())),
        "upstream-ended" => (Actor::Engine, Some("prerequisite ended".into())),
        "launch-failed" => (Actor::Engine, Some("launch failed".into())),
        "execution-timeout" => (Actor::Engine, Some("execution timeout".into())),
        _ => (Actor::Client, None),
    }
}

/// Longest path from a root to each activity (index in `activities`): the
/// tie-break of transitions in the same second, so a prerequisite's come
/// before its dependents'.
fn depths(activities: &[ActivityExec]) -> Vec<usize> {
    let index: HashMap<&str, usize> = activities
        .iter()
        .enumerate()
        .map(|(i, a)| (a.activity_exec_id.as_str(), i))
        .collect();
    // What each waits for: its own list, and (a wide join keeps none) the
    // activities that name it among their dependents.
    let mut waits: Vec<Vec<usize>> = activities
        .iter()
        .map(|a| {
            a.links
                .prerequisites
                .iter()
                .filter_map(|p| index.get(p.as_str()).copied())
                .collect()
        })
        .collect();
    for (j, a) in activities.iter().enumerate() {
        for d in &a.links.dependents {
            if let Some(&i) = index.get(d.as_str()) {
                if !waits[i].contains(&j) {
                    waits[i].push(j);
                }
            }
        }
    }
    let mut depth: Vec<Option<usize>> = vec![None; activities.len()];
    fn visit(
        i: usize,
        waits: &[Vec<usize>],
        depth: &mut Vec<Option<usize>>,
        on_path: &mut Vec<bool>,
    ) -> usize {
        if let Some(d) = depth[i] {
            return d;
        }
        if on_path[i] {
            return 0; // a cycle: validated plans have none
        }
        on_path[i] = true;
        let mut d = 0;
        for &j in &waits[i] {
            d = d.max(1 + visit(j, waits, depth, on_path));
        }
        on_path[i] = false;
        depth[i] = Some(d);
        d
    }
    let mut on_path = vec![false; activities.len()];
    (0..activities.len())
        .map(|i| visit(i, &waits, &mut depth, &mut on_path))
        .collect()
}

/// The rows of one activity's history, oldest first: each entry's "from"
/// is the state the one before led to (REQUESTED for the first).
fn activity_rows(a: &ActivityExec) -> Vec<Row> {
    let mut from = ActivityState::Requested;
    let mut attempt = 0;
    let last = a.trail.history.len().saturating_sub(1);
    let final_error = matches!(
        a.state,
        ActivityState::Failed
            | ActivityState::TimedOut
            | ActivityState::Cancelled
            | ActivityState::CancelledRunning
    );
    a.trail
        .history
        .iter()
        .enumerate()
        .map(|(i, h): (usize, &HistoryEntry)| {
            let shown = match h.attempt {
                // A retried failure: of attempt k, the next is k + 1.
                Some(k) => {
                    attempt = k + 1;
                    Some(k)
                }
                None => {
                    if h.state == ActivityState::Queued && attempt == 0 {
                        attempt = 1;
                    }
                    (attempt > 0).then_some(attempt)
                }
            };
            let event_id = h.full_event_id(&a.activity_exec_id);
            let (actor, detail) = cause(&event_id, a, shown);
            let error = h.error.clone().or_else(|| {
                (i == last && final_error)
                    .then(|| a.outcome.error.clone())
                    .flatten()
            });
            let row = Row {
                time: hms(h.at_epoch),
                epoch: h.at_epoch,
                activity: Some(a.activity_name.clone()),
                transition: h.transition.clone(),
                from: Some(from.as_str().into()),
                to: h.state.as_str().into(),
                actor,
                detail,
                event_id: Some(event_id),
                attempt: shown,
                error,
                next_attempt_epoch: h.next_attempt_epoch,
                inferred_time: false,
            };
            from = h.state;
            row
        })
        .collect()
}

/// A row of the workflow's own, caused by the engine: its move from
/// `from` (`None`: its creation) to `to` at `epoch`.
fn workflow_row(epoch: i64, from: Option<WorkflowState>, to: WorkflowState) -> Row {
    Row {
        time: hms(epoch),
        epoch,
        activity: None,
        transition: to.as_str().into(),
        from: from.map(|f| f.as_str().into()),
        to: to.as_str().into(),
        actor: Actor::Engine,
        detail: None,
        event_id: None,
        attempt: None,
        error: None,
        next_attempt_epoch: None,
        inferred_time: false,
    }
}

/// The workflow exec id of the first child a `workflow` node requested
/// in its generation (design.md § 9.5): derived from the node's id; empty
/// for any other node.
fn first_child(a: &ActivityExec) -> String {
    a.child_ids().map_or(String::new(), |(_, exec_id)| exec_id)
}

/// The workflow exec id of the child a `workflow` node waits on (design.md
/// § 9.5): derived from the node's id and generation, or the execution
/// its child's chain continued as; empty for any other node.
pub fn child_of(a: &ActivityExec) -> String {
    a.current_child().unwrap_or_default()
}

/// The workflow execution's creation: REQUESTED by the client that
/// inserted the workflow request row, or by its parent's node.
fn requested_row(w: &WorkflowExec) -> Row {
    Row {
        actor: Actor::Client,
        detail: Some(match (&w.parent, &w.source) {
            (Some(p), _) => format!(
                "child of {} (node {}, depth {})",
                p.workflow_exec_id,
                whimbrel_core::ids::name_of(&p.activity_exec_id).unwrap_or("?"),
                p.depth
            ),
            (None, Some(source)) => format!("request from {source}"),
            (None, None) => "request".into(),
        }),
        event_id: w.workflow_request_id.clone(),
        ..workflow_row(w.start_time_epoch, None, WorkflowState::Requested)
    }
}

/// The workflow execution's move to RUNNING, at `at`: inferred, as the
/// item does not time it.
fn running_row(at: i64) -> Row {
    Row {
        detail: Some("plan stored".into()),
        inferred_time: true,
        ..workflow_row(at, Some(WorkflowState::Requested), WorkflowState::Running)
    }
}

/// The workflow execution's end at `at`, from RUNNING (or from REQUESTED
/// if it never `ran`), with its error.
fn ended_row(w: &WorkflowExec, at: i64, ran: bool) -> Row {
    let from = if ran {
        WorkflowState::Running
    } else {
        WorkflowState::Requested
    };
    Row {
        detail: Some(attr::ENDED.into()),
        error: w.error.clone(),
        ..workflow_row(at, Some(from), w.state)
    }
}

/// The whole timeline of `snap`, in time order. Transitions in the same
/// second: the workflow's creation and start first, then activities by
/// depth in the plan (each activity's in its history's order), the
/// workflow's end last.
pub fn timeline(snap: &Snapshot) -> Vec<Row> {
    let w = &snap.workflow;
    // (epoch, rank, depth, row): a stable sort keeps history order.
    let mut rows: Vec<(i64, u8, usize, Row)> = vec![(w.start_time_epoch, 0, 0, requested_row(w))];
    let first_activity = snap
        .activities
        .iter()
        .flat_map(|a| a.trail.history.iter().map(|h| h.at_epoch))
        .min();
    // The move to RUNNING is not timed on the item: the activities were
    // written just before it and the roots are queued just after.
    let ran = w.state == WorkflowState::Running || !snap.activities.is_empty();
    if ran {
        let at = first_activity.unwrap_or(w.start_time_epoch);
        rows.push((at, 1, 0, running_row(at)));
    }
    let depth = depths(&snap.activities);
    for (i, a) in snap.activities.iter().enumerate() {
        for row in activity_rows(a) {
            rows.push((row.epoch, 2, depth[i], row));
        }
    }
    if w.state.is_terminal() {
        let at = w
            .end_time_epoch
            .unwrap_or_else(|| rows.iter().map(|r| r.0).max().unwrap_or(w.start_time_epoch));
        rows.push((at, 3, 0, ended_row(w, at, ran)));
    }
    rows.sort_by_key(|(epoch, rank, depth, _)| (*epoch, *rank, *depth));
    rows.into_iter().map(|r| r.3).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use whimbrel_core::contract::Transition;
    use whimbrel_core::model::WorkflowExec;

    fn entry(t: Transition, s: ActivityState, at: i64, id: &str) -> HistoryEntry {
        HistoryEntry::new(t, s, at, id)
    }

    fn activity(name: &str, prerequisites: &[&str], history: Vec<HistoryEntry>) -> ActivityExec {
        let state = history.last().map_or(ActivityState::Requested, |h| h.state);
        serde_json::from_value(json!({
            "activity_exec_id": format!("{name}::u"),
            "workflow_exec_id": "w::u",
            "workflow_name": "w",
            "lambda": "f",
            "activity_name": name,
            "state": state,
            "heartbeat_enabled": false,
            "heartbeat_time_epoch": -1,
            "start_time_epoch": -1,
            "attempt": 1,
            "prerequisites": prerequisites.iter().map(|p| format!("{p}::u")).collect::<Vec<_>>(),
            "history": history,
        }))
        .unwrap()
    }

    fn snapshot(activities: Vec<ActivityExec>, state: WorkflowState) -> Snapshot {
        let workflow: WorkflowExec = serde_json::from_value(json!({
            "workflow_exec_id": "w::u",
            "workflow_name": "w",
            "state": state,
            "workflow_request_id": "w::r",
            "start_time": [2026, 1, 1, 0, 0, 0],
            "start_time_epoch": 100,
            "end_time_epoch": 110,
            "source": "tests",
            "activity_count": activities.len(),
            "error": "b: boom",
        }))
        .unwrap();
        Snapshot {
            workflow,
            activities,
            targets: vec![],
        }
    }

    /// The wait loops stop at a closed workflow, not at its first terminal
    /// write: a FAILED workflow whose activity is still QUEUED is closing
    /// (e2e-workers § 4 read it so once, between the two writes).
    #[test]
    fn a_workflow_is_closed_once_it_ended_and_no_activity_is_left_to_cancel() {
        let at = |s: ActivityState| entry(Transition::Cancel, s, 105, "e");
        let queued = activity("waits", &[], vec![at(ActivityState::Queued)]);
        let cancelled = activity("waits", &[], vec![at(ActivityState::Cancelled)]);
        let asked = activity("runs", &[], vec![at(ActivityState::CancelledRunning)]);
        let closed = |acts: Vec<ActivityExec>, s| snapshot(acts, s).closed();
        assert!(!closed(vec![queued.clone()], WorkflowState::Failed));
        assert!(!closed(vec![cancelled.clone()], WorkflowState::Running));
        assert!(closed(vec![cancelled.clone()], WorkflowState::Failed));
        assert!(closed(
            vec![cancelled, asked.clone()],
            WorkflowState::Cancelled
        ));
        assert!(!closed(vec![asked, queued], WorkflowState::Cancelled));
        assert!(closed(vec![], WorkflowState::Completed));
    }

    #[test]
    fn causes_from_event_ids() {
        let mut a = activity("a", &[], vec![]);
        a.runner.worker = Some("w-1".into());
        a.attempt.number = 2;
        let c = |id: &str, attempt| cause(id, &a, Some(attempt));
        assert_eq!(
            c("launcher:a::u:1", 1),
            (Actor::Engine, Some("launch".into()))
        );
        assert_eq!(
            c("relaunch:a::u:1:3", 1),
            (Actor::Engine, Some("relaunch (launch 3)".into()))
        );
        assert_eq!(c("claim:a::u:2", 2), (Actor::Worker, Some("w-1".into())));
        assert_eq!(
            c("claim:a::u:1", 1),
            (Actor::Worker, None),
            "an earlier worker"
        );
        assert_eq!(c("timed-out:a::u:1", 1).0, Actor::Monitor);
        assert_eq!(c("not-started:a::u:1", 1).0, Actor::Monitor);
        assert_eq!(c("upstream-ended:b::u", 1).0, Actor::Engine);
        assert_eq!(c("launch-failed:a::u:1", 1).0, Actor::Engine);
        assert_eq!(c("execution-timeout:w::u", 1).0, Actor::Engine);
        assert_eq!(c("a::u::6f1f4f8e", 1), (Actor::Client, None));
    }

    #[test]
    fn a_retried_failure_then_a_cascade_in_time_order() {
        use ActivityState as S;
        use Transition as T;
        let retried = HistoryEntry {
            attempt: Some(1),
            error: Some("flaky".into()),
            next_attempt_epoch: Some(104),
            ..entry(T::Failed, S::Queued, 103, "b::u::e2")
        };
        // "b" sorts before its dependent "a"... by depth, not by name.
        let b = activity(
            "b",
            &[],
            vec![
                entry(T::Queued, S::Queued, 101, "launcher:b::u:1"),
                entry(T::Running, S::Running, 102, "b::u::e1"),
                retried,
                entry(T::Running, S::Running, 105, "b::u::e3"),
                entry(T::Failed, S::Failed, 106, "b::u::e4"),
            ],
        );
        let mut b = b;
        b.outcome.error = Some("b: boom".into());
        let mut a = activity(
            "a",
            &["b"],
            vec![entry(T::Cancel, S::Cancelled, 106, "upstream-ended:b::u")],
        );
        a.outcome.error = Some("prerequisite b ended FAILED".into());
        let snap = snapshot(vec![a, b], WorkflowState::Failed);
        let rows = timeline(&snap);
        let seen: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{} {} {}→{} {} {}",
                    r.epoch,
                    r.activity.as_deref().unwrap_or("-"),
                    r.from.as_deref().unwrap_or("-"),
                    r.to,
                    r.actor.as_str(),
                    r.attempt.map_or("-".into(), |a| a.to_string()),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                "100 - -→REQUESTED client -",
                "101 - REQUESTED→RUNNING engine -",
                "101 b REQUESTED→QUEUED engine 1",
                "102 b QUEUED→RUNNING client 1",
                "103 b RUNNING→QUEUED client 1",
                "105 b QUEUED→RUNNING client 2",
                "106 b RUNNING→FAILED client 2",
                "106 a REQUESTED→CANCELLED engine -",
                "110 - RUNNING→FAILED engine -",
            ]
        );
        assert_eq!(rows[4].error.as_deref(), Some("flaky"));
        assert_eq!(rows[4].next_attempt_epoch, Some(104));
        assert_eq!(rows[6].error.as_deref(), Some("b: boom"));
        assert_eq!(
            rows[7].error.as_deref(),
            Some("prerequisite b ended FAILED")
        );
        assert_eq!(rows[8].error.as_deref(), Some("b: boom"));
        assert!(rows[1].inferred_time);
        let table = render(&snap, &rows);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("workflow w::u  FAILED  started 1970-01-01 00:01:40 UTC"));
        assert!(
            lines[1].starts_with("TIME      ACTIVITY    FROM → TO"),
            "{table}"
        );
        assert!(
            lines[6].ends_with("FAILED: flaky (next attempt at 00:01:44)"),
            "{table}"
        );
        assert!(lines[4].contains("engine (launch)"), "{table}");
        assert!(lines[5].contains("client event e1"), "{table}");
        assert!(lines[9].contains("engine (prerequisite ended)"), "{table}");
    }

    #[test]
    fn status_shows_the_target_slots_across_workflows() {
        let mut held = activity("a", &[], vec![]);
        held.links.target_limit = Some("lambda:resize".into());
        held.links.target_slot_held = true;
        let mut snap = snapshot(vec![held], WorkflowState::Running);
        snap.targets = vec![serde_json::from_value(json!({
            "target": "lambda:resize",
            "max_concurrency": 3,
            "slots_free": 0,
            "slot_waiters": ["0000000100#0004w::ub", "0000000101#0004x::uc"],
        }))
        .unwrap()];
        let text = crate::status::render(&snap);
        assert!(
            text.contains("target slots, across workflows:\n  lambda:resize")
                && text.contains("3 of 3 in use (1 here), 2 waiting (1 here)"),
            "{text}"
        );
        snap.targets.clear();
        assert!(!crate::status::render(&snap).contains("target slots"));
    }
}
