//! The end-of-run checks of child workflows (the liveness half of
//! `children.rs`'s module docs): every node ended with its child's
//! chain, every child ended and told its node, parent closes reached
//! their children.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use whimbrel_core::contract::{ActivityState, NodeKind, WorkflowState};
use whimbrel_core::engine::outcome::sinks;
use whimbrel_core::handlers::Outcome;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, WorkflowExec, WorkflowPlan};
use whimbrel_core::plan::{ParentClose, MAX_CHILD_DEPTH, MAX_OUTPUT_BYTES};

use super::{chain_ended, closed_before_continue, derived_child, Checker, Read};

/// What the end-of-run checks of child workflows read: the activities
/// (their outputs put back) and workflows, the stored plans, the stream
/// outcomes and the dead-lettered rows.
pub(in crate::check) struct End<'a> {
    /// Activities and workflows by id.
    pub read: Read<'a>,
    /// The stored plans, whole, by workflow exec id.
    pub plans: &'a HashMap<String, WorkflowPlan>,
    /// Stream outcomes per row id.
    pub outcomes: &'a HashMap<String, Vec<Outcome>>,
    /// Row ids dead-lettered.
    pub lost: &'a HashSet<String>,
    /// The inputs of nodes episodic deciders scheduled: (execution, node
    /// name) → input.
    pub decided: &'a HashMap<(String, String), Value>,
}

impl End<'_> {
    /// Whether the execution that chain member `w` continued as never
    /// started because its request row was dead-lettered.
    fn successor_lost(&self, w: &WorkflowExec) -> bool {
        let request = ids::continued_request_id(&w.workflow_exec_id, &w.workflow_name);
        w.continued_as.is_some() && self.lost.contains(&request)
    }
}

impl Checker {
    /// The liveness invariants of child workflows (module docs).
    pub(in crate::check) fn child_liveness(&self, end: &End<'_>) -> Vec<String> {
        let mut v = vec![];
        for a in end.read.acts.values() {
            if a.runner.kind() == NodeKind::Child {
                v.extend(self.node_at_end(a, end));
                v.extend(lost_close(a, end));
            }
        }
        for w in end.read.wfs.values() {
            let forged = self.children.forged(&w.workflow_exec_id);
            v.extend(child_at_end(w, end, forged));
        }
        v.sort();
        v
    }

    /// Node `a` at the end: ended, with its child's result, and its
    /// child closed if it was cancelled.
    fn node_at_end(&self, a: &ActivityExec, end: &End<'_>) -> Vec<String> {
        let id = &a.activity_exec_id;
        let child = end.read.child_of(a);
        let (request, exec) = derived_child(a).unwrap_or_default();
        let exec = child.map_or(exec, |w| w.workflow_exec_id.clone());
        let mut v = vec![];
        match a.state {
            ActivityState::Running if child.is_none() && end.lost.contains(&request) => {}
            ActivityState::Running if child.is_some_and(|w| end.successor_lost(w)) => {}
            ActivityState::Running => v.push(format!(
                "{id}: still RUNNING at the end; its child {exec} is {:?} (continued as {:?})",
                child.map(|w| w.state),
                child.and_then(|w| w.continued_as.as_deref())
            )),
            ActivityState::Failed => {
                let result = child
                    .filter(|w| w.state == WorkflowState::Completed && w.continued_as.is_none())
                    .filter(|w| !crate::check::workflow_redrive::ended_before_redriven_child(a, w))
                    .map(|w| child_result(w, end).to_string().len());
                if result.is_some_and(|n| n <= MAX_OUTPUT_BYTES) {
                    v.push(format!(
                        "{id}: FAILED though its child {exec} COMPLETED with a result of {result:?} bytes"
                    ));
                }
            }
            ActivityState::Completed => {
                let expected = child.map(|w| child_result(w, end));
                let output = a.outcome.output.clone().unwrap_or(Value::Null);
                if expected.as_ref() != Some(&output) {
                    v.push(format!(
                        "{id}: COMPLETED with output {output}, not its child's result {expected:?}"
                    ));
                }
            }
            ActivityState::Cancelled => v.extend(self.close_violation(a, child, end)),
            _ => {}
        }
        v
    }

    /// Node `a`, CANCELLED: when it closes with its parent and its child
    /// started, the execution of the child's chain it waited on ended and
    /// its cancel request was written. (A chain whose successor's request
    /// row was dead-lettered ends there: the cancel named the successor.)
    pub(super) fn close_violation(
        &self,
        a: &ActivityExec,
        child: Option<&WorkflowExec>,
        end: &End<'_>,
    ) -> Option<String> {
        let c = a.runner.runs.child()?;
        let w = child?;
        if c.parent_close == ParentClose::Abandon || end.successor_lost(w) {
            return None;
        }
        let id = &a.activity_exec_id;
        let cancel = ids::child_cancel_request_id(&w.workflow_name, &w.workflow_exec_id);
        if !self.children.cancels.contains(&cancel) {
            return Some(format!(
                "{id}: CANCELLED (parent_close cancel) but no cancel request {cancel} for its child {}",
                w.workflow_exec_id
            ));
        }
        (!chain_ended(w)).then(|| {
            format!(
                "{id}: CANCELLED (parent_close cancel) but its child {} is {} (continued as {:?})",
                w.workflow_exec_id, w.state, w.continued_as
            )
        })
    }
}

/// Node `a`, CANCELLED with `parent_close: cancel`, whose child's cancel
/// request was rejected because the child did not exist yet, and whose
/// child then started after all and ended other than CANCELLED: the
/// parent close was lost (the child ran on unstopped). The request
/// stream orders records per item only, so the cancel row can be applied
/// before the start row it follows (or a release that read the node
/// RUNNING puts the start row after the close put the cancel): the
/// child's start must see its node ended and cancel it (seed 61 lost it
/// before `Engine::orphaned`). A child a user redrove since runs anew; one
/// that never got a plan (its start failed: too deep, seed 749) ran
/// nothing.
pub(super) fn lost_close(a: &ActivityExec, end: &End<'_>) -> Option<String> {
    let c = a.runner.runs.child()?;
    let w = end.read.child_of(a)?;
    if a.state != ActivityState::Cancelled
        || c.parent_close == ParentClose::Abandon
        || w.state == WorkflowState::Cancelled
        || w.planned_epoch.is_none()
        || !w.redrives.is_empty()
    {
        return None;
    }
    let cancel = ids::child_cancel_request_id(&w.workflow_name, &w.workflow_exec_id);
    let rejected = end.outcomes.get(&cancel)?.iter().find_map(|o| match o {
        Outcome::Rejected(r) if r.contains("unknown workflow exec") => Some(r.clone()),
        _ => None,
    })?;
    Some(format!(
        "{}: CANCELLED (parent_close cancel), its child's cancel {cancel} was rejected ({rejected}) but the child {} started after all and ended {}",
        a.activity_exec_id, w.workflow_exec_id, w.state
    ))
}

/// Child exec `w` at the end: it ended, told its parent (no due marker,
/// its node not RUNNING unless it continued as new), with its node's
/// input when it is the first of its chain, and at its depth; one
/// CANCELLED because its node closed it before it continued was closed
/// by its node.
fn child_at_end(w: &WorkflowExec, end: &End<'_>, forged: bool) -> Vec<String> {
    let Some(p) = &w.parent else {
        return vec![];
    };
    let id = &w.workflow_exec_id;
    let mut v = vec![];
    let failed = matches!(w.state, WorkflowState::Failed | WorkflowState::Cancelled);
    if forged && !failed {
        v.push(format!(
            "{id}: its parent link is forged, but it ended {}, not FAILED (or CANCELLED)",
            w.state
        ));
    }
    if w.state.is_terminal() && w.due_epoch.is_some() {
        v.push(format!(
            "child workflow {id} ended {} but still owes its parent its end (due marker)",
            w.state
        ));
    }
    if let Some(node) = end.read.acts.get(p.activity_exec_id.as_str()) {
        if chain_ended(w) && node.state == ActivityState::Running {
            v.push(format!(
                "the end of child workflow {id} ({}) never reached its node {}",
                w.state, node.activity_exec_id
            ));
        }
        if closed_before_continue(w) && !closed_child(node) {
            v.push(format!(
                "child workflow {id} ended CANCELLED for its node {}, which is {} and did not close it",
                node.activity_exec_id, node.state
            ));
        }
        if w.continued_from.is_none() && !forged {
            v.extend(input_violation(w, node, end));
        }
    }
    if p.depth > MAX_CHILD_DEPTH
        && !matches!(w.state, WorkflowState::Failed | WorkflowState::Cancelled)
    {
        v.push(format!(
            "child workflow {id} at depth {} ended {}, not FAILED",
            p.depth, w.state
        ));
    }
    v
}

/// Whether child node `node` ended and closes its child with it
/// (`parent_close: cancel`).
fn closed_child(node: &ActivityExec) -> bool {
    let closes = node.runner.runs.child();
    node.state.is_terminal() && closes.is_some_and(|c| c.parent_close == ParentClose::Cancel)
}

/// The first execution of node `node`'s child chain, `w`, started with
/// the node's input: as its plan gave it, or the decision that scheduled
/// it.
fn input_violation(w: &WorkflowExec, node: &ActivityExec, end: &End<'_>) -> Option<String> {
    let parent = &node.workflow_exec_id;
    let in_plan = (end.plans.get(parent))
        .and_then(|plan| (plan.plan.activities.iter()).find(|x| x.name == node.activity_name))
        .and_then(|x| x.input.clone());
    let decided = || {
        let key = (parent.clone(), node.activity_name.clone());
        end.decided.get(&key).cloned()
    };
    let planned = in_plan.or_else(decided).filter(|i| *i != Value::Null);
    // On the exec until it is planned, then on its plan item.
    let input = match end.plans.get(&w.workflow_exec_id) {
        Some(plan) => plan.input.clone(),
        None => w.input.clone(),
    };
    (planned != input).then(|| {
        format!(
            "child workflow {}: input {input:?}, its node's is {planned:?}",
            w.workflow_exec_id
        )
    })
}

/// A COMPLETED child's result: kept on its exec, or (too large there)
/// the outputs of its sinks by name, as the engine reads them.
fn child_result(w: &WorkflowExec, end: &End<'_>) -> Value {
    if let Some(r) = &w.result {
        return r.clone();
    }
    let Some(plan) = end.plans.get(&w.workflow_exec_id) else {
        return Value::Null;
    };
    let sinks = sinks(&w.workflow_exec_id, &plan.plan).into_iter();
    let outputs = sinks.map(|(name, id)| {
        let act = end.read.acts.get(id.as_str());
        let out = act.and_then(|a| a.outcome.output.clone());
        (name, out.unwrap_or(Value::Null))
    });
    Value::Object(outputs.collect())
}
