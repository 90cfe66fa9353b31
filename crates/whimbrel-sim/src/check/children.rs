//! The invariants of child workflows (design.md § 9.5): a child's end
//! reaches its parent exactly once. A child that continues as new is its
//! chain: its node waits on the chain's last execution ([`Read`]'s
//! `child_of`), and "its child" below means that one.
//!
//! Safety, after every step:
//! - each workflow exec with a parent link is the child of a child node
//!   of that parent (its workflow, its name), at the exec id derived from
//!   the node's ([`ids::child_request_id`]), from the request id derived
//!   so, with the node's depth, one more than its parent's; so a node
//!   starts at most one child. A successor in a chain has its ids derived
//!   from the execution it continues ([`ids::continued_request_id`]),
//!   which continued as it under the same node. Every request row with a
//!   parent link has a derived id too, unless it is a hostile client's:
//!   an execution whose parent link the engine did not write never gets
//!   a plan, and is FAILED with the reason (or still REQUESTED);
//! - each tree's count of executions started below its root equals the
//!   executions counted on it (issue 42 B.6): none twice, no forged one;
//! - a child node is COMPLETED or FAILED only by its child's end
//!   (`child-ended:(node)`, at most one such entry), and only once its
//!   child is terminal and did not continue as new: COMPLETED when the
//!   child COMPLETED, FAILED when it FAILED or was CANCELLED, with the
//!   child's state in its error, or when it COMPLETED with a result too
//!   large for a node's output (checked at the end); a request id taken
//!   by a foreign row would fail it too, but nothing in the simulation
//!   writes one, so that is a violation here. A cancelled node never
//!   ends by its child's end (its history has no `child-ended:`);
//! - a child deeper than `MAX_CHILD_DEPTH` never gets a plan: it fails at
//!   its start (or a cancel ends it first), and no child within the limit
//!   fails for its depth.
//!
//! Liveness, at the end (`children_end.rs`):
//! - every child node ended (none RUNNING, waiting for a child whose end
//!   never reached it), unless its child's request row (or its chain's
//!   next one) was dead-lettered;
//! - every child ended and told its parent (no due marker left), and no
//!   node is RUNNING while its child ended;
//! - a COMPLETED node's output, as its dependents read it, is its child's
//!   result (a node FAILED for a COMPLETED child had a result over
//!   `MAX_OUTPUT_BYTES`, or took the child's end before a user redrove
//!   the child); the first execution's input is the node's, as its plan
//!   or the decision that scheduled it gave it;
//! - the child of a node CANCELLED with `parent_close: cancel` ended and
//!   was sent its cancel request; if that request was rejected because
//!   the child did not exist yet, the child must not have been started
//!   after all (it would run on unstopped). An execution that ended
//!   CANCELLED because its node closed it before it continued as new was
//!   closed by its node;
//! - a child deeper than the limit ended FAILED (or CANCELLED).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use whimbrel_core::contract::{ActivityState, NodeKind, WorkflowState};
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, WorkflowExec, WorkflowRequest};
use whimbrel_core::plan::{ParentClose, MAX_CHILD_DEPTH};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

use super::Checker;

/// What the error of an execution whose parent link the engine did not
/// write says (`Engine::forged_link`).
const FORGED: &str = "names no node that starts it";

/// Whether `w` is an execution whose parent link the engine did not
/// write: created to fail its start with [`FORGED`].
pub(super) fn forged(w: &WorkflowExec) -> bool {
    w.error.as_deref().is_some_and(|e| e.contains(FORGED))
}

/// How the error of a child that failed for its tree's budget begins.
const PAST_BUDGET: &str = "the workflow tree of";

/// How the error of a start that failed for its depth begins (an
/// ancestor's, which the failure reached through its node, quotes it
/// further on).
const TOO_DEEP: &str = "child workflow depth ";

/// The error of a node whose child COMPLETED with a result larger than
/// a node's output may be.
const TOO_LARGE: &str = "COMPLETED, but its result is";

/// The error of a node whose request id a foreign row took.
const TAKEN: &str = "is taken by a row the engine did not write";

/// The error of a child execution that would have continued as new after
/// its node closed it: it ends CANCELLED instead (design.md § 9.5).
pub(super) const CLOSED_BEFORE_CONTINUE: &str = "before it continued as new";

/// Whether child exec `w` ended for the node that waits on its chain:
/// terminal, and not continued as new (a continued execution's end is
/// its successor's).
fn chain_ended(w: &WorkflowExec) -> bool {
    w.state.is_terminal() && w.continued_as.is_none()
}

/// Whether `w` is an execution its node closed before it could continue
/// as new.
pub(super) fn closed_before_continue(w: &WorkflowExec) -> bool {
    w.parent.is_some()
        && w.state == WorkflowState::Cancelled
        && (w.error.as_deref()).is_some_and(|e| e.contains(CLOSED_BEFORE_CONTINUE))
}

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
    /// The executions seen created to fail their start uncounted on any
    /// tree (issue 42 B.6), by id: `true` for a parent link the engine
    /// did not write, `false` past the tree's budget. Kept, since a
    /// cancel may end one with its own reason.
    refused: HashMap<String, bool>,
}

impl Seen {
    /// Note the executions of `wfs` created to fail their start.
    fn note_refused(&mut self, wfs: &[WorkflowExec]) {
        for w in wfs.iter().filter(|w| w.planned_epoch.is_none()) {
            let past_budget = w
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with(PAST_BUDGET));
            if forged(w) || past_budget {
                self.refused.insert(w.workflow_exec_id.clone(), forged(w));
            }
        }
    }

    /// Whether execution `id` was seen created with a forged parent link.
    pub(super) fn forged(&self, id: &str) -> bool {
        self.refused.get(id).copied().unwrap_or(false)
    }
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
    let name = &a.runner.runs.child()?.workflow_name;
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
    pub fn new(acts: &'a [Arc<ActivityExec>], wfs: &'a [WorkflowExec]) -> Self {
        Read {
            wfs: wfs
                .iter()
                .map(|w| (w.workflow_exec_id.as_str(), w))
                .collect(),
            acts: acts
                .iter()
                .map(|a| (a.activity_exec_id.as_str(), &**a))
                .collect(),
        }
    }

    /// The child exec whose end node `a` takes, if any: the one its
    /// current generation started, or the last of the executions that one
    /// continued as new while they kept the parent link to `a`
    /// (design.md § 9.5). It may itself have continued, its successor not
    /// started yet.
    fn child_of(&self, a: &ActivityExec) -> Option<&'a WorkflowExec> {
        let (_, first) = derived_child(a)?;
        let mut w = *self.wfs.get(first.as_str())?;
        while let Some(next) = (w.continued_as.as_deref()).and_then(|n| self.wfs.get(n)) {
            let linked = next.parent.as_ref();
            if linked.is_none_or(|p| p.activity_exec_id != a.activity_exec_id) {
                break;
            }
            w = next;
        }
        Some(w)
    }

    /// Whether request row `id` (with a parent link naming node `node`)
    /// has a derived id: the child of one of the node's generations, or
    /// the successor of an execution whose parent link names the node.
    fn derived_request(&self, id: &str, row: &WorkflowRequest, node: &str) -> bool {
        let name = &row.workflow_name;
        let first = (0..=MAX_GENERATIONS).any(|g| id == ids::child_request_id(name, node, g));
        first
            || self.wfs.values().any(|w| {
                w.parent
                    .as_ref()
                    .is_some_and(|p| p.activity_exec_id == node)
                    && id == ids::continued_request_id(&w.workflow_exec_id, name)
            })
    }
}

/// The request id and exec id child exec `w` of node `node` must have: the
/// first execution of a chain, derived from the node and one of its
/// generations; a successor (`continued_from`), derived from the
/// execution it continues, which must have continued as it under the same
/// node.
fn expected_ids(
    w: &WorkflowExec,
    node: &ActivityExec,
    read: &Read<'_>,
) -> Result<(String, String), String> {
    let id = &w.workflow_exec_id;
    let Some(prev_id) = &w.continued_from else {
        return started_child(node, id).ok_or_else(|| {
            format!(
                "child workflow {id}: its node {} is not a child node",
                node.activity_exec_id
            )
        });
    };
    let prev = read.wfs.get(prev_id.as_str()).copied();
    let under = |p: &&WorkflowExec| {
        let link = p.parent.as_ref();
        p.continued_as.as_deref() == Some(id.as_str())
            && link.is_some_and(|l| l.activity_exec_id == node.activity_exec_id)
    };
    if prev.filter(under).is_none() {
        return Err(format!(
            "child workflow {id} continues {prev_id}, which did not continue as it under node {}",
            node.activity_exec_id
        ));
    }
    let request = ids::continued_request_id(prev_id, &w.workflow_name);
    let exec = ids::workflow_exec_id(&w.workflow_name, &request);
    Ok((request, exec))
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
    let Some(c) = node.runner.runs.child() else {
        return vec![format!(
            "child workflow {id}: its node {} is not a child node",
            p.activity_exec_id
        )];
    };
    let (request, exec) = match expected_ids(w, node, read) {
        Ok(ids) => ids,
        Err(e) => return vec![e],
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

/// An execution whose parent link the engine did not write (a hostile
/// client's start row, or a child's row applied after its node moved
/// on): it never gets a plan, and is REQUESTED (its start under way),
/// FAILED with the reason, or CANCELLED (a cancel came first) (issue 42
/// B.6).
fn forged_violation(w: &WorkflowExec) -> Option<String> {
    let failing = matches!(
        w.state,
        WorkflowState::Requested | WorkflowState::Failed | WorkflowState::Cancelled
    );
    (!failing || w.planned_epoch.is_some()).then(|| {
        format!(
            "{}: its parent link is not the engine's, but it is {} (planned: {:?})",
            w.workflow_exec_id, w.state, w.planned_epoch
        )
    })
}

/// Each tree's count of the executions started below its root (the
/// `tree` item on `whimbrel_decision`) against the executions with a
/// parent link naming that root that were counted: all but those created
/// to fail (past the budget, or with a forged link). A count that differs
/// is a start counted twice, a forged row counted, or one not counted
/// (issue 42 B.6).
fn tree_violations(
    wfs: &[WorkflowExec],
    refused: &HashMap<String, bool>,
    mem: &MemoryBackend,
    t: &Tables,
) -> Vec<String> {
    use whimbrel_core::store::Value;
    let mut below: HashMap<&str, u64> = HashMap::new();
    for w in wfs {
        let uncounted = refused.contains_key(&w.workflow_exec_id);
        if let (Some(p), false) = (&w.parent, uncounted) {
            *below.entry(p.tree_root()).or_default() += 1;
        }
    }
    let mut v = vec![];
    for item in mem.items(&t.decision()) {
        let text = |k: &str| match item.get(k) {
            Some(Value::S(s)) => s.clone(),
            Some(Value::N(n)) => n.clone(),
            _ => String::new(),
        };
        if text(whimbrel_core::attr::LOG_KEY)
            != whimbrel_core::engine::decide::episodes::TREE_LOG_KEY
        {
            continue;
        }
        let root = text(whimbrel_core::attr::WORKFLOW_EXEC_ID);
        let started: u64 = text(whimbrel_core::attr::TREE_STARTED).parse().unwrap_or(0);
        let counted = below.get(root.as_str()).copied().unwrap_or(0);
        if started != counted {
            v.push(format!(
                "tree of {root}: counts {started} executions started below it, {counted} were"
            ));
        }
    }
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
        for row in super::requests(mem, t) {
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
        acts: &[Arc<ActivityExec>],
        wfs: &[WorkflowExec],
        mem: &MemoryBackend,
        t: &Tables,
    ) -> Vec<String> {
        self.note_requests(mem, t);
        self.children.note_refused(wfs);
        let nodes: Vec<&ActivityExec> = acts
            .iter()
            .filter(|a| a.runner.kind() == NodeKind::Child)
            .map(|a| &**a)
            .collect();
        if nodes.is_empty() && self.children.requests.is_empty() {
            return vec![];
        }
        let read = Read::new(acts, wfs);
        let mut v = vec![];
        for w in wfs {
            if self.children.forged(&w.workflow_exec_id) {
                v.extend(forged_violation(w));
            } else {
                v.extend(link_violations(w, &read));
            }
        }
        v.extend(tree_violations(wfs, &self.children.refused, mem, t));
        for (id, row) in &self.children.requests {
            let node = row.parent.as_ref().map(|p| p.activity_exec_id.as_str());
            // Derived from the node and one of its generations (a redrive
            // starts a new child), or from the execution it continues.
            let node = node.unwrap_or_default();
            let exec = ids::workflow_exec_id(&row.workflow_name, id);
            let forged = !read.wfs.contains_key(exec.as_str()) || self.children.forged(&exec);
            if !read.derived_request(id, row, node) && !forged {
                let derived = ids::child_request_id(&row.workflow_name, node, 0);
                v.push(format!(
                    "child request row {id} is neither the derived {derived} nor a successor's"
                ));
            }
        }
        for a in nodes {
            v.extend(history_violations(a));
            if let (Some(c), Some(parent)) = (
                a.runner.runs.child(),
                read.wfs.get(a.workflow_exec_id.as_str()),
            ) {
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
            if child.is_none_or(|w| !chain_ended(w)) {
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

/// What child workflows exercised, counted at the end (`features.rs`).
pub(super) fn features(read: &Read<'_>, add: &mut impl FnMut(&str, u64)) {
    for w in read.wfs.values() {
        let Some(p) = &w.parent else { continue };
        if forged(w) {
            add("executions with forged parent links failed", 1);
            continue;
        }
        add("child workflows started", 1);
        if p.depth >= 2 {
            add("nested child workflows", 1);
        }
        if w.error.as_deref().is_some_and(|e| e.starts_with(TOO_DEEP)) {
            add("child starts failed for their depth", 1);
        }
        let past_budget = |e: &str| e.starts_with(PAST_BUDGET);
        if w.error.as_deref().is_some_and(past_budget) {
            add("child starts failed for their tree's budget", 1);
        }
        if w.continued_as.is_some() {
            add("child executions continued as new", 1);
        }
        if closed_before_continue(w) {
            add("child executions closed before they continued", 1);
        }
    }
    for a in read.acts.values() {
        let Some(c) = a.runner.runs.child() else {
            continue;
        };
        let child = read.child_of(a);
        if child.is_some_and(|w| w.continued_from.is_some() && chain_ended(w)) {
            add("child nodes ended by a later execution of their chain", 1);
        }
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

#[path = "children_end.rs"]
mod end;
#[cfg(test)]
use end::lost_close;
pub(super) use end::End;

#[cfg(test)]
#[path = "children_chain_tests.rs"]
mod children_chain_tests;
#[cfg(test)]
#[path = "children_tests.rs"]
mod children_tests;
