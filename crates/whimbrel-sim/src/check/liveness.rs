//! The end-of-run checks of one workflow and one activity, once faults
//! stopped and the clock ran on: everything ended, no obligation is left,
//! counts and outcomes agree, outputs are what the activity computed, a
//! completed workflow's result is its sinks' outputs, and
//! a report written well before the monitor acted wins over TIMED_OUT.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use whimbrel_core::contract::{self, ActivityState, NodeKind, WorkflowState};
use whimbrel_core::engine::EngineConfig;
use whimbrel_core::handlers::Outcome;
use whimbrel_core::model::{ActivityExec, WorkflowExec, WorkflowPlan};

use super::signals::{signal_output, stored_output, SignalRows};
use super::Evidence;
use crate::actors::output_of;
use crate::world::GSI_LAG_SECONDS;

/// What was stored that outputs are computed from: the plans by workflow
/// exec id, and every signal row sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct Known<'a> {
    /// The stored plans, whole.
    pub plans: &'a HashMap<String, WorkflowPlan>,
    /// The signal rows seen.
    pub signals: &'a SignalRows,
    /// The inputs of nodes episodic decisions scheduled, by (workflow
    /// exec id, name), as their accepted decisions gave them.
    pub decided: &'a HashMap<(String, String), serde_json::Value>,
}

/// Violations of workflow `w` at the end: it is not terminal, it still
/// has an obligation (due marker), its plan item disagrees with it, or
/// its outcome disagrees with its counts.
pub(super) fn workflow_violations(
    w: &WorkflowExec,
    acts: &[Arc<ActivityExec>],
    known: &Known<'_>,
) -> Vec<String> {
    let mut v = vec![];
    if !w.state.is_terminal() {
        v.push(format!(
            "workflow {} stuck in {}",
            w.workflow_exec_id, w.state
        ));
    }
    if w.due_epoch.is_some() {
        v.push(format!(
            "workflow {} still has an obligation",
            w.workflow_exec_id
        ));
    }
    // An episodic execution has no plan to agree with, its nodes are
    // counted nowhere, and it ends by a decision (check/episodes.rs).
    if w.is_episodic() {
        return v;
    }
    if w.planned_epoch.is_some() {
        v.extend(planned_violation(w, known.plans));
    }
    if w.state.is_terminal() && w.planned_epoch.is_some() {
        v.extend(outcome_violations(w, acts));
    }
    if w.state == WorkflowState::Completed {
        v.extend(result_violation(w, acts, known));
    }
    v
}

/// A COMPLETED workflow whose result is not the outputs of its sink
/// activities (those no activity of its plan depends on), by name, each as
/// the activity function computed it from its input and its prerequisites'
/// outputs (docs/retries.md § 6). A result kept on the activities
/// (`result_in_activities`) is their outputs, which the output check covers.
fn result_violation(
    w: &WorkflowExec,
    acts: &[Arc<ActivityExec>],
    known: &Known<'_>,
) -> Option<String> {
    let id = &w.workflow_exec_id;
    if w.result_in_activities == Some(true) {
        return None;
    }
    let Some(plan) = known.plans.get(id) else {
        return Some(format!("workflow {id} COMPLETED without a readable plan"));
    };
    let sinks = whimbrel_core::engine::outcome::sinks(id, &plan.plan).into_iter();
    let expected: serde_json::Map<String, serde_json::Value> = sinks
        .map(|(name, sink)| {
            let out = acts
                .iter()
                .find(|a| a.activity_exec_id == sink)
                .map_or(serde_json::Value::Null, |a| expected_output(a, acts, known));
            (name, out)
        })
        .collect();
    let expected = serde_json::Value::Object(expected);
    (w.result.as_ref() != Some(&expected)).then(|| {
        format!(
            "workflow {id} COMPLETED with result {:?}, not its sinks' outputs {expected}",
            w.result
        )
    })
}

/// A planned workflow: the exec is marked planned only after its plan
/// item is stored, and both agree on the activity count.
fn planned_violation(w: &WorkflowExec, plans: &HashMap<String, WorkflowPlan>) -> Option<String> {
    match plans.get(&w.workflow_exec_id) {
        None => Some(format!(
            "workflow {} is planned but has no readable plan item",
            w.workflow_exec_id
        )),
        Some(p) if p.plan.activities.len() as u64 != w.activity_count => Some(format!(
            "workflow {} counts {} activities but its plan has {}",
            w.workflow_exec_id,
            w.activity_count,
            p.plan.activities.len()
        )),
        Some(_) => None,
    }
}

/// An ended, planned workflow: its counters equal its activities' ends,
/// and it ended as its counts say (unless its execution timeout ended it).
fn outcome_violations(w: &WorkflowExec, acts: &[Arc<ActivityExec>]) -> Vec<String> {
    let mut v = vec![];
    v.extend(crate::counts::final_violations(acts, w));
    let counts = contract::EndCounts {
        completed: w.completed_count,
        failed: w.failed_count,
        cancelled: w.cancelled_count,
    };
    let expected = contract::workflow_outcome(w.activity_count, counts);
    if expected != Some(w.state) && !ended_by_execution_timeout(w) {
        v.push(format!(
            "workflow {} ended {} but its counts say {expected:?}",
            w.workflow_exec_id, w.state
        ));
    }
    v
}

/// An execution timeout ends the workflow FAILED whatever its activities
/// do afterwards; it must not end before the deadline.
pub(super) fn ended_by_execution_timeout(w: &WorkflowExec) -> bool {
    w.state == WorkflowState::Failed
        && w.error
            .as_deref()
            .is_some_and(|e| e.starts_with("execution timeout"))
        && whimbrel_core::engine::outcome::execution_deadline(w)
            .is_some_and(|d| w.end_time_epoch.is_some_and(|end| end >= d))
}

/// Violations of activity `a` at the end: it is not terminal, it still
/// has an obligation, it took more launch attempts than allowed, its
/// output is not what it computed, or it timed out despite a report.
pub(super) fn activity_violations(
    a: &ActivityExec,
    acts: &[Arc<ActivityExec>],
    known: &Known<'_>,
    cfg: &EngineConfig,
    seen: &Evidence<'_>,
) -> Vec<String> {
    let mut v = vec![];
    if !a.state.is_terminal() {
        let history: Vec<String> = a
            .trail
            .history
            .iter()
            .map(|h| format!("{} by {}", h.state, h.full_event_id(&a.activity_exec_id)))
            .collect();
        v.push(format!(
            "activity {} stuck in {} (attempt {}, {} pending, released {:?}, history {history:?})",
            a.activity_exec_id,
            a.state,
            a.attempt.number,
            a.links.pending_dependency_count,
            a.links.released_prerequisites
        ));
    }
    if a.timing.due_epoch.is_some() {
        v.push(format!(
            "activity {} still has an obligation ({})",
            a.activity_exec_id, a.state
        ));
    }
    let redrives = super::workflow_redrive::redrive_count(a) as u32;
    if a.attempt.number > cfg.max_launch_attempts + redrives {
        v.push(format!(
            "activity {} has {} attempts",
            a.activity_exec_id, a.attempt.number
        ));
    }
    if a.state == ActivityState::Completed {
        v.extend(output_violation(a, acts, known));
    }
    if a.state == ActivityState::TimedOut {
        v.extend(timed_out_despite_report(a, cfg, seen));
    }
    v
}

/// A COMPLETED activity whose output is not what it computed from its
/// name, its planned input and its prerequisites' final outputs.
fn output_violation(
    a: &ActivityExec,
    acts: &[Arc<ActivityExec>],
    known: &Known<'_>,
) -> Option<String> {
    let expected = expected_output(a, acts, known);
    let output = match a.runner.kind() {
        NodeKind::Signal => Some(stored_output(a)),
        _ => a.outcome.output.clone(),
    };
    (output.as_ref() != Some(&expected)).then(|| {
        format!(
            "activity {}: output {:?} is not {expected}",
            a.activity_exec_id, a.outcome.output
        )
    })
}

/// The output activity `a` computes ([`output_of`]) from its name, its
/// planned input and its prerequisites' final outputs (a wide join keeps
/// no list: its prerequisites hold a slot). A timer's is its firing, a
/// signal wait's its signal's input ([`signal_output`]), which is also
/// what a dependent of it must have received, whatever the wait stored.
fn expected_output(
    a: &ActivityExec,
    acts: &[Arc<ActivityExec>],
    known: &Known<'_>,
) -> serde_json::Value {
    match a.runner.kind() {
        NodeKind::Timer => return timer_output(a),
        NodeKind::Signal => return signal_output(a, known.signals),
        // Its child's result, checked on the child (check/children.rs).
        NodeKind::Child => return stored_output(a),
        NodeKind::Lambda | NodeKind::TaskList => {}
    }
    let prereqs: serde_json::Map<String, serde_json::Value> = acts
        .iter()
        .filter(|p| {
            a.links.prerequisites.contains(&p.activity_exec_id)
                || p.links.join_slots.contains_key(&a.activity_exec_id)
        })
        .map(|p| {
            let out = match p.runner.kind() {
                NodeKind::Signal => signal_output(p, known.signals),
                _ => p.outcome.output.clone().unwrap_or_default(),
            };
            (p.activity_name.clone(), out)
        })
        .collect();
    let input = match a.links.scheduled_by {
        Some(_) => known
            .decided
            .get(&(a.workflow_exec_id.clone(), a.activity_name.clone()))
            .cloned(),
        None => known
            .plans
            .get(&a.workflow_exec_id)
            .and_then(|p| p.plan.activities.iter().find(|x| x.name == a.activity_name))
            .and_then(|x| x.input.clone()),
    }
    .unwrap_or_default();
    output_of(
        &a.activity_name,
        &input,
        &serde_json::Value::Object(prereqs),
    )
}

/// A fired timer's output: `{"fired_at": t}` with `t` the firing engine's
/// clock, at or after its fire time (anything else is returned as a
/// description, which no output equals).
fn timer_output(a: &ActivityExec) -> serde_json::Value {
    let fire = whimbrel_core::engine::deadline::timer_fire_epoch(a);
    let fired_at = a
        .outcome
        .output
        .as_ref()
        .and_then(|o| o["fired_at"].as_i64());
    match (fired_at, fire) {
        (Some(t), Some(f)) if t >= f => serde_json::json!({ "fired_at": t }),
        _ => serde_json::json!(format!("a timer's firing at or after {fire:?}")),
    }
}

/// A TIMED_OUT activity whose current attempt had written a COMPLETED or
/// FAILED report well before the monitor timed it out (more than the
/// report grace): the report should have decided. A tokened report of an
/// earlier launch of the attempt does not count: fencing refuses it
/// (a launch Lambda held in its queue past the relaunch runs late). Nor
/// does one written while the GSIs were stalled past the report grace (or
/// just before): the monitor could not see it, and a timeout is final
/// (docs/design.md § 8.4), if the timeout came soon enough after the
/// stall to rest on a read made during it. Nor does one of an attempt
/// one of whose reports a hostile write overwrote before the timeout (the
/// report itself, or the RUNNING before it).
fn timed_out_despite_report(
    a: &ActivityExec,
    cfg: &EngineConfig,
    seen: &Evidence<'_>,
) -> Option<String> {
    let at = a
        .trail
        .history
        .iter()
        .rfind(|h| h.state == ActivityState::TimedOut)
        .map_or(i64::MAX, |h| h.at_epoch);
    let r = seen.reports.iter().find(|r| {
        r.activity_exec_id == a.activity_exec_id
            && r.attempt == a.attempt.number
            && (r.launch.0 == a.attempt.launches || !r.launch.1)
            && matches!(r.transition.as_str(), "COMPLETED" | "FAILED")
            && r.at + cfg.report_grace_seconds + 2 <= at
            && !overwritten_before(seen, &a.activity_exec_id, a.attempt.number, at)
            && !seen.gsi_stalls.iter().any(|&(from, until)| {
                (from - GSI_LAG_SECONDS..until).contains(&r.at) && at < until + STALLED_READ
            })
    })?;
    Some(format!(
        "activity {} TIMED_OUT at {at} though its {} report {} was written at {} (outcomes {:?}; history {:?})",
        a.activity_exec_id, r.transition, r.event_id, r.at, seen.outcomes.get(&r.event_id),
        a.trail.history.iter().map(|h| format!("{}@{} by {}", h.state, h.at_epoch, h.full_event_id(&a.activity_exec_id))).collect::<Vec<_>>()
    ))
}

/// Seconds after a GSI stall ends within which a timeout may still rest on
/// a read made during it: the index's usual lag, and the monitor's
/// function timeout (60 s in template.yaml), which bounds how long after
/// its read its write can land.
const STALLED_READ: i64 = GSI_LAG_SECONDS + 60;

/// Whether a hostile write overwrote a report row of attempt `attempt` of
/// `activity_exec_id` (the report itself, or the RUNNING before it) before
/// world time `at`, when it was timed out.
fn overwritten_before(seen: &Evidence<'_>, activity_exec_id: &str, attempt: u32, at: i64) -> bool {
    seen.reports.iter().any(|r| {
        r.activity_exec_id == activity_exec_id
            && r.attempt == attempt
            && seen
                .overwritten
                .get(&r.event_id)
                .is_some_and(|&when| when <= at + ENGINE_CLOCK_SKEW)
    })
}

/// Seconds an engine clock may be off the world's: `at`, the timeout's
/// time, is the monitor's clock, and an overwrite's time the world's.
/// Seed 1313: a row overwritten at world time 651, while the monitor's
/// tick ran, is read overwritten by it; its clock said 649 when it timed
/// the attempt out.
const ENGINE_CLOCK_SKEW: i64 = 2;

/// Rows (other than those dead-lettered) whose stream and redrive
/// outcomes were only ever retries: nothing decided them, though every
/// given-up row must take effect (design.md § 8.6).
pub(super) fn rows_only_retried(
    outcomes: &HashMap<String, Vec<Outcome>>,
    lost: &HashSet<String>,
) -> Vec<String> {
    let mut v = vec![];
    for (id, outs) in outcomes {
        if !lost.contains(id) && outs.iter().all(|o| matches!(o, Outcome::Retry(_))) {
            v.push(format!("row {id} was only ever retried: {outs:?}"));
        }
    }
    v
}
