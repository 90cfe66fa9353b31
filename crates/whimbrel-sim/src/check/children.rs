//! The invariants of child workflows (design.md § 9.5): a child's end
//! reaches its parent exactly once.
//!
//! Safety, after every step:
//! - each workflow exec with a parent link is the child of a child node
//!   of that parent (its workflow, its name), at the exec id derived from
//!   the node's ([`ids::child_request_id`]), from the request id derived
//!   so, with the node's depth, one more than its parent's; so a node
//!   starts at most one child. Every request row with a parent link has
//!   the derived id too;
//! - a child node is COMPLETED or FAILED only by its child's end
//!   (`child-ended:(node)`, at most one such entry), and only once its
//!   child is terminal: COMPLETED when the child COMPLETED, FAILED when
//!   it FAILED or was CANCELLED, with the child's state in its error, or
//!   when it COMPLETED with a result too large for a node's output
//!   (checked at the end); a request id taken by a foreign row would fail
//!   it too, but nothing in the simulation writes one, so that is a
//!   violation here. A cancelled node
//!   never ends by its child's end (its history has no `child-ended:`);
//! - a child deeper than `MAX_CHILD_DEPTH` never gets a plan: it fails at
//!   its start (or a cancel ends it first), and no child within the limit
//!   fails for its depth.
//!
//! Liveness, at the end:
//! - every child node ended (none RUNNING, waiting for a child whose end
//!   never reached it), unless its child's request row was dead-lettered;
//! - every child ended and told its parent (no due marker left), and no
//!   node is RUNNING while its child ended;
//! - a COMPLETED node's output, as its dependents read it, is its child's
//!   result (a node FAILED for a COMPLETED child had a result over
//!   `MAX_OUTPUT_BYTES`, or took the child's end before a user redrove
//!   the child); the child's input is the node's planned input;
//! - the child of a node CANCELLED with `parent_close: cancel` ended and
//!   was sent its cancel request; if that request was rejected because
//!   the child did not exist yet, the child must not have been started
//!   after all (it would run on unstopped);
//! - a child deeper than the limit ended FAILED (or CANCELLED).

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use whimbrel_core::contract::{ActivityState, NodeKind, WorkflowState};
use whimbrel_core::handlers::Outcome;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, WorkflowExec, WorkflowPlan, WorkflowRequest};
use whimbrel_core::plan::{ParentClose, MAX_CHILD_DEPTH, MAX_OUTPUT_BYTES};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

use super::Checker;

/// How the error of a start that failed for its depth begins (an
/// ancestor's, which the failure reached through its node, quotes it
/// further on).
const TOO_DEEP: &str = "child workflow depth ";

/// The error of a node whose child COMPLETED with a result larger than
/// a node's output may be.
const TOO_LARGE: &str = "COMPLETED, but its result is";

/// The error of a node whose request id a foreign row took.
const TAKEN: &str = "is taken by a row the engine did not write";

/// What the checker remembers of child workflows between steps.
#[derive(Debug, Default)]
pub struct Seen {
    /// The request rows with a parent link seen, by request id (kept
    /// after TTL deleted them).
    requests: HashMap<String, WorkflowRequest>,
    /// The ids of the cancel request rows seen.
    cancels: HashSet<String>,
    /// Each child node seen COMPLETED or FAILED, with its child's state
    /// when it was first seen so (`None`: no child exec).
    ended_with: HashMap<String, Option<WorkflowState>>,
}

/// The generations a child node's request id is looked for in.
const MAX_GENERATIONS: u32 = 64;

impl Seen {
    /// Forget node `id`'s end (a redrive starts it anew: it takes its
    /// child's end again).
    pub(super) fn forget(&mut self, id: &str) {
        self.ended_with.remove(id);
    }
}

/// The request id and exec id of the child that node `a` starts, if it
/// is a child node.
pub fn derived_child(a: &ActivityExec) -> Option<(String, String)> {
    a.child_ids()
}

/// The ids of the child node `a` started in the generation whose child is
/// exec `id` (one of its generations so far: a redrive starts a new
/// child), else in its current generation.
fn started_child(a: &ActivityExec, id: &str) -> Option<(String, String)> {
    let name = &a.runner.child.as_ref()?.workflow_name;
    let node = &a.activity_exec_id;
    (0..a.generation())
        .map(|g| {
            (
                ids::child_request_id(name, node, g),
                ids::child_exec_id(name, node, g),
            )
        })
        .find(|(_, exec)| exec == id)
        .or_else(|| derived_child(a))
}

/// A workflow's depth: its parent link's, 0 for a top-level one.
fn depth_of(w: &WorkflowExec) -> u32 {
    w.parent.as_ref().map_or(0, |p| p.depth)
}

/// The workflows and activities read, by id.
pub(super) struct Read<'a> {
    /// Workflow execs by id.
    pub wfs: HashMap<&'a str, &'a WorkflowExec>,
    /// Activity execs by id.
    pub acts: HashMap<&'a str, &'a ActivityExec>,
}

impl<'a> Read<'a> {
    /// Index `acts` and `wfs` by id.
    pub fn new(acts: &'a [ActivityExec], wfs: &'a [WorkflowExec]) -> Self {
        Read {
            wfs: wfs
                .iter()
                .map(|w| (w.workflow_exec_id.as_str(), w))
                .collect(),
            acts: acts
                .iter()
                .map(|a| (a.activity_exec_id.as_str(), a))
                .collect(),
        }
    }

    /// The child exec node `a` started, if any.
    fn child_of(&self, a: &ActivityExec) -> Option<&'a WorkflowExec> {
        let (_, exec) = derived_child(a)?;
        self.wfs.get(exec.as_str()).copied()
    }
}

/// Violations of child exec `w`'s parent link (module docs): its node, its
/// ids, its depth.
pub(super) fn link_violations(w: &WorkflowExec, read: &Read<'_>) -> Vec<String> {
    let Some(p) = &w.parent else {
        return vec![];
    };
    let id = &w.workflow_exec_id;
    let mut v = vec![];
    let Some(node) = read.acts.get(p.activity_exec_id.as_str()) else {
        return vec![format!(
            "child workflow {id} names node {}, which does not exist",
            p.activity_exec_id
        )];
    };
    if node.workflow_exec_id != p.workflow_exec_id || node.workflow_name != p.workflow_name {
        v.push(format!(
            "child workflow {id}: its parent link names {}/{}, its node is of {}/{}",
            p.workflow_exec_id, p.workflow_name, node.workflow_exec_id, node.workflow_name
        ));
    }
    let (Some(c), Some((request, exec))) = (&node.runner.child, started_child(node, id)) else {
        return vec![format!(
            "child workflow {id}: its node {} is not a child node",
            p.activity_exec_id
        )];
    };
    if c.workflow_name != w.workflow_name || exec != *id {
        v.push(format!(
            "child workflow {id} ({}) of node {} is not the one it starts: {exec} ({})",
            w.workflow_name, p.activity_exec_id, c.workflow_name
        ));
    }
    if w.workflow_request_id.as_deref() != Some(request.as_str()) {
        v.push(format!(
            "child workflow {id}: request {:?}, not the derived {request}",
            w.workflow_request_id
        ));
    }
    if p.depth != c.depth {
        v.push(format!(
            "child workflow {id}: depth {} but its node's child is at depth {}",
            p.depth, c.depth
        ));
    }
    if let Some(parent) = read.wfs.get(p.workflow_exec_id.as_str()) {
        if p.depth != depth_of(parent) + 1 {
            v.push(format!(
                "child workflow {id}: depth {}, its parent's is {}",
                p.depth,
                depth_of(parent)
            ));
        }
    }
    v.extend(depth_violation(w, p.depth));
    v
}

/// A child exec deeper than the limit that got a plan or a state other
/// than REQUESTED, FAILED (for its depth) or CANCELLED; or one within the
/// limit failed for its depth.
fn depth_violation(w: &WorkflowExec, depth: u32) -> Option<String> {
    let id = &w.workflow_exec_id;
    let for_depth = w.error.as_deref().is_some_and(|e| e.starts_with(TOO_DEEP));
    if depth <= MAX_CHILD_DEPTH {
        return for_depth
            .then(|| format!("child workflow {id} at depth {depth} failed for its depth"));
    }
    let allowed = match w.state {
        WorkflowState::Requested | WorkflowState::Cancelled => true,
        WorkflowState::Failed => for_depth,
        _ => false,
    };
    (!allowed || w.planned_epoch.is_some() || w.activity_count > 0).then(|| {
        format!(
            "child workflow {id} at depth {depth} (limit {MAX_CHILD_DEPTH}) is {} (planned {:?}, {} activities, error {:?})",
            w.state, w.planned_epoch, w.activity_count, w.error
        )
    })
}

/// Violations of child node `a`'s history: an end by `child-ended:`
/// other than its own, more than one in a generation (a redrive starts
/// the next), or after a cancel; a COMPLETED or FAILED end by anything
/// else.
pub(super) fn history_violations(a: &ActivityExec) -> Vec<String> {
    if a.runner.kind() != NodeKind::Child {
        return vec![];
    }
    let id = &a.activity_exec_id;
    let own = ids::EngineStep::ChildEnded(id).event_id();
    let mut v = vec![];
    let mut ended_by_child = 0;
    let mut cancelled = false;
    for h in &a.trail.history {
        let by = h.full_event_id(id);
        if super::workflow_redrive::is_redrive(h) {
            // A new generation: the node takes its child's end again.
            if ended_by_child > 1 {
                v.push(format!(
                    "{id}: ended by its child's end {ended_by_child} times"
                ));
            }
            (ended_by_child, cancelled) = (0, false);
        } else if by.starts_with("child-ended:") {
            ended_by_child += 1;
            if by != own {
                v.push(format!("{id}: ended by {by}, another node's child"));
            }
            if cancelled {
                v.push(format!(
                    "{id}: ended by its child ({by}) after it was cancelled"
                ));
            }
        } else if matches!(h.state, ActivityState::Completed | ActivityState::Failed) {
            v.push(format!(
                "{id}: a child node {} by {by}, not by its child's end",
                h.state
            ));
        }
        cancelled |= h.state == ActivityState::Cancelled;
    }
    if ended_by_child > 1 {
        v.push(format!(
            "{id}: ended by its child's end {ended_by_child} times"
        ));
    }
    v
}

/// A node first seen COMPLETED or FAILED while its child was in `child`
/// (`None`: no child exec): it must have ended, as the node did.
fn end_violation(a: &ActivityExec, child: Option<&WorkflowExec>) -> Option<String> {
    let id = &a.activity_exec_id;
    let Some(w) = child else {
        return Some(format!("{id}: {} though its child never started", a.state));
    };
    let error = a.outcome.error.as_deref().unwrap_or_default();
    if error.contains(TAKEN) {
        return Some(format!("{id}: FAILED for a foreign request row: {error}"));
    }
    let agrees = match (a.state, w.state) {
        (ActivityState::Completed, s) => s == WorkflowState::Completed,
        // A result too large for a node's output (checked at the end).
        (_, WorkflowState::Completed) => error.contains(TOO_LARGE),
        (_, s) => {
            matches!(s, WorkflowState::Failed | WorkflowState::Cancelled)
                && error.contains(&format!("ended {s}"))
        }
    };
    (!agrees).then(|| {
        format!(
            "{id}: {} ({error:?}) while its child {} is {}",
            a.state, w.workflow_exec_id, w.state
        )
    })
}

impl Checker {
    /// Remember the request rows with a parent link and the cancel rows.
    fn note_requests(&mut self, mem: &MemoryBackend, t: &Tables) {
        for item in mem.items(&t.workflow_request()) {
            let Ok(row) = serde_dynamo::from_item::<_, WorkflowRequest>(item) else {
                continue;
            };
            if row.cancel_workflow_exec_id.is_some() {
                self.children.cancels.insert(row.workflow_request_id);
            } else if row.parent.is_some() {
                let id = row.workflow_request_id.clone();
                self.children.requests.entry(id).or_insert(row);
            }
        }
    }

    /// The safety invariants of child workflows (module docs) on the
    /// activities and workflows read now.
    pub(super) fn child_violations(
        &mut self,
        acts: &[ActivityExec],
        wfs: &[WorkflowExec],
        mem: &MemoryBackend,
        t: &Tables,
    ) -> Vec<String> {
        self.note_requests(mem, t);
        let nodes: Vec<&ActivityExec> = acts
            .iter()
            .filter(|a| a.runner.kind() == NodeKind::Child)
            .collect();
        if nodes.is_empty() && self.children.requests.is_empty() {
            return vec![];
        }
        let read = Read::new(acts, wfs);
        let mut v = vec![];
        for w in wfs {
            v.extend(link_violations(w, &read));
        }
        for (id, row) in &self.children.requests {
            let node = row.parent.as_ref().map(|p| p.activity_exec_id.as_str());
            // Derived from the node and one of its generations (a redrive
            // starts a new child).
            let node = node.unwrap_or_default();
            let derived = ids::child_request_id(&row.workflow_name, node, 0);
            let any_generation = (0..=MAX_GENERATIONS)
                .any(|g| *id == ids::child_request_id(&row.workflow_name, node, g));
            if !any_generation {
                v.push(format!(
                    "child request row {id} is not the derived {derived}"
                ));
            }
        }
        for a in nodes {
            v.extend(history_violations(a));
            if let (Some(c), Some(parent)) =
                (&a.runner.child, read.wfs.get(a.workflow_exec_id.as_str()))
            {
                if c.depth != depth_of(parent) + 1 {
                    v.push(format!(
                        "{}: starts its child at depth {}, its workflow is at {}",
                        a.activity_exec_id,
                        c.depth,
                        depth_of(parent)
                    ));
                }
            }
            if !matches!(a.state, ActivityState::Completed | ActivityState::Failed)
                || self.children.ended_with.contains_key(&a.activity_exec_id)
            {
                continue;
            }
            let child = read.child_of(a);
            let state = child.map(|w| w.state);
            self.children
                .ended_with
                .insert(a.activity_exec_id.clone(), state);
            if child.is_none_or(|w| !w.state.is_terminal()) {
                v.push(format!(
                    "{}: {} while its child is {state:?}",
                    a.activity_exec_id, a.state
                ));
            } else {
                v.extend(end_violation(a, child));
            }
        }
        v
    }
}

/// What the end-of-run checks of child workflows read: the activities
/// (their outputs put back) and workflows, the stored plans, the stream
/// outcomes and the dead-lettered rows.
pub(super) struct End<'a> {
    /// Activities and workflows by id.
    pub read: Read<'a>,
    /// The stored plans, whole, by workflow exec id.
    pub plans: &'a HashMap<String, WorkflowPlan>,
    /// Stream outcomes per row id.
    pub outcomes: &'a HashMap<String, Vec<Outcome>>,
    /// Row ids dead-lettered.
    pub lost: &'a HashSet<String>,
}

impl Checker {
    /// The liveness invariants of child workflows (module docs).
    pub(super) fn child_liveness(&self, end: &End<'_>) -> Vec<String> {
        let mut v = vec![];
        for a in end.read.acts.values() {
            if a.runner.kind() == NodeKind::Child {
                v.extend(self.node_at_end(a, end));
                v.extend(lost_close(a, end));
            }
        }
        for w in end.read.wfs.values() {
            v.extend(child_at_end(w, end));
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
        let mut v = vec![];
        match a.state {
            ActivityState::Running if child.is_none() && end.lost.contains(&request) => {}
            ActivityState::Running => v.push(format!(
                "{id}: still RUNNING at the end; its child {exec} is {:?}",
                child.map(|w| w.state)
            )),
            ActivityState::Failed => {
                let result = child
                    .filter(|w| w.state == WorkflowState::Completed)
                    .filter(|w| !super::workflow_redrive::ended_before_redriven_child(a, w))
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
            ActivityState::Cancelled => v.extend(self.close_violation(a, child)),
            _ => {}
        }
        v
    }

    /// Node `a`, CANCELLED: when it closes with its parent and its child
    /// started, the child ended and its cancel request was written.
    fn close_violation(&self, a: &ActivityExec, child: Option<&WorkflowExec>) -> Option<String> {
        let c = a.runner.child.as_ref()?;
        let w = child?;
        if c.parent_close == ParentClose::Abandon {
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
        (!w.state.is_terminal()).then(|| {
            format!(
                "{id}: CANCELLED (parent_close cancel) but its child {} is {}",
                w.workflow_exec_id, w.state
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
    let c = a.runner.child.as_ref()?;
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
/// its node not RUNNING), with the node's input, and at its depth.
fn child_at_end(w: &WorkflowExec, end: &End<'_>) -> Vec<String> {
    let Some(p) = &w.parent else {
        return vec![];
    };
    let id = &w.workflow_exec_id;
    let mut v = vec![];
    if w.state.is_terminal() && w.due_epoch.is_some() {
        v.push(format!(
            "child workflow {id} ended {} but still owes its parent its end (due marker)",
            w.state
        ));
    }
    let node = end.read.acts.get(p.activity_exec_id.as_str());
    if let Some(node) = node {
        if w.state.is_terminal() && node.state == ActivityState::Running {
            v.push(format!(
                "the end of child workflow {id} ({}) never reached its node {}",
                w.state, node.activity_exec_id
            ));
        }
        let planned = end
            .plans
            .get(&p.workflow_exec_id)
            .and_then(|plan| {
                plan.plan
                    .activities
                    .iter()
                    .find(|x| x.name == node.activity_name)
            })
            .and_then(|x| x.input.clone())
            .filter(|i| *i != Value::Null);
        // On the exec until it is planned, then on its plan item.
        let input = match end.plans.get(id) {
            Some(plan) => plan.input.clone(),
            None => w.input.clone(),
        };
        if planned != input {
            v.push(format!(
                "child workflow {id}: input {input:?}, its node's is {planned:?}"
            ));
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

/// A COMPLETED child's result: kept on its exec, or (too large there)
/// the outputs of its sinks by name, as the engine reads them.
fn child_result(w: &WorkflowExec, end: &End<'_>) -> Value {
    if let Some(r) = &w.result {
        return r.clone();
    }
    let Some(plan) = end.plans.get(&w.workflow_exec_id) else {
        return Value::Null;
    };
    let needed: HashSet<&str> = plan
        .plan
        .activities
        .iter()
        .flat_map(|a| a.depends_on.iter().map(String::as_str))
        .collect();
    let sinks = plan
        .plan
        .activities
        .iter()
        .filter(|a| !needed.contains(a.name.as_str()))
        .map(|s| {
            let id = ids::activity_exec_id(&w.workflow_exec_id, &s.name);
            let out = end
                .read
                .acts
                .get(id.as_str())
                .and_then(|a| a.outcome.output.clone())
                .unwrap_or(Value::Null);
            (s.name.clone(), out)
        });
    Value::Object(sinks.collect())
}

/// What child workflows exercised, counted at the end (`features.rs`).
pub(super) fn features(read: &Read<'_>, add: &mut impl FnMut(&str, u64)) {
    for w in read.wfs.values() {
        let Some(p) = &w.parent else { continue };
        add("child workflows started", 1);
        if p.depth >= 2 {
            add("nested child workflows", 1);
        }
        if w.error.as_deref().is_some_and(|e| e.starts_with(TOO_DEEP)) {
            add("child starts failed for their depth", 1);
        }
    }
    for a in read.acts.values() {
        let Some(c) = &a.runner.child else { continue };
        let child = read.child_of(a);
        match (a.state, child.map(|w| w.state)) {
            (ActivityState::Completed, _) => add("child workflows completed", 1),
            (ActivityState::Failed, Some(WorkflowState::Failed)) => {
                add("child workflows failed", 1)
            }
            (ActivityState::Failed, Some(WorkflowState::Cancelled)) => {
                add("child workflows cancelled (their node failed)", 1)
            }
            (ActivityState::Cancelled, Some(s)) if c.parent_close == ParentClose::Abandon => {
                add("children abandoned", 1);
                if s != WorkflowState::Cancelled {
                    add("abandoned children that ran on", 1);
                }
            }
            (ActivityState::Cancelled, Some(WorkflowState::Cancelled)) => {
                add("children cancelled by parent close", 1)
            }
            _ => {}
        }
        if a.trail
            .history
            .iter()
            .any(|h| h.event_id.starts_with("parent-failing:"))
        {
            add("child nodes cancelled by a failing sibling", 1);
        }
    }
}

#[cfg(test)]
#[path = "children_tests.rs"]
mod children_tests;
