//! The invariants of workflow redrive (design.md § 9.4): a FAILED or
//! CANCELLED workflow taken back to RUNNING by a redrive request R.
//!
//! Safety, after every step:
//! - a COMPLETED activity never changes: its state, its output (inline,
//!   on an output row or on an event row) and its attempt stay as first
//!   seen, across redrives;
//! - an activity leaves a terminal state only by a redrive: its history
//!   gains a `REDRIVE` entry `redrive:R` (after FAILED, TIMED_OUT or
//!   CANCELLED only: `safety::history_violations`), R names a redrive of
//!   its workflow (in its `redrives`), and no R twice;
//! - a workflow's terminal state changes only through a recorded redrive:
//!   its `redrives` set grows by R, a redrive request row seen naming
//!   it, while it was FAILED or CANCELLED at the last look; its
//!   `redrive_count` is the size of that set (a request applied twice
//!   would count twice), which never loses an id, and `redriving` is one
//!   of them; a COMPLETED workflow holds no `error` (none of an earlier
//!   generation either);
//! - once redrive R is done (`redriving` no longer R), every activity of
//!   its workflow that was not COMPLETED when R took the workflow back to
//!   RUNNING holds the entry `redrive:R`.
//!
//! Liveness, at the end: no redrive is left under way (`redriving`); that
//! a redriven workflow ends again is the end-of-run check of every
//! workflow (`liveness.rs`), and that the requests the engine must refuse
//! were refused with a reason is the world's check of rejected rows.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::decide::redrive::{redrive_event_id, REDRIVE_TRANSITION};
use whimbrel_core::history::HistoryEntry;
use whimbrel_core::model::{ActivityExec, WorkflowExec};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

use super::Checker;

/// What a COMPLETED activity keeps for good.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Kept {
    state: ActivityState,
    output: Option<Value>,
    output_ref: Option<String>,
    output_event_id: Option<String>,
    attempt: u32,
}

impl Kept {
    /// What `a` holds now.
    pub(super) fn of(a: &ActivityExec) -> Self {
        Kept {
            state: a.state,
            output: a.outcome.output.clone(),
            output_ref: a.outcome.output_ref.clone(),
            output_event_id: a.outcome.output_event_id.clone(),
            attempt: a.attempt.number,
        }
    }
}

/// A workflow as the checker last saw it.
#[derive(Debug, Clone)]
pub(super) struct Look {
    /// Its state.
    pub state: WorkflowState,
    /// Its first terminal state seen since its last redrive.
    pub ended: Option<WorkflowState>,
    /// Its `redrives`.
    pub redrives: BTreeSet<String>,
}

/// What the checker remembers of redrives between steps.
#[derive(Debug, Default)]
pub struct Seen {
    /// The `REDRIVE` entries of each activity at the last look.
    redriven: HashMap<String, usize>,
    /// Each COMPLETED activity as first seen so.
    completed: HashMap<String, Kept>,
    /// Each workflow at the last look.
    workflows: HashMap<String, Look>,
    /// The workflow exec each redrive request row seen names, by request
    /// id (kept after TTL deleted the row).
    requests: HashMap<String, String>,
    /// The redrive under way of each workflow, to be checked once done:
    /// its request id and the activities COMPLETED when it was applied.
    sweeps: HashMap<String, (String, HashSet<String>)>,
    /// When each redrive was applied (its workflow's RUNNING write), world
    /// time, by request id.
    applied_at: HashMap<String, i64>,
}

impl Seen {
    /// When each redrive was applied, world time, by request id.
    pub fn applied_at(&self) -> &HashMap<String, i64> {
        &self.applied_at
    }
}

/// Whether `h` is a redrive's entry.
pub fn is_redrive(h: &HistoryEntry) -> bool {
    h.transition == REDRIVE_TRANSITION
}

/// How many times `a` was redriven (its `REDRIVE` entries).
pub fn redrive_count(a: &ActivityExec) -> usize {
    a.trail.history.iter().filter(|h| is_redrive(h)).count()
}

/// The entries of `a`'s current generation: those after its last
/// `REDRIVE` entry (all of them when it was never redriven).
pub fn generation(a: &ActivityExec) -> &[HistoryEntry] {
    let h = &a.trail.history;
    let from = h.iter().rposition(is_redrive).map_or(0, |i| i + 1);
    &h[from..]
}

/// Violations of `a`'s `REDRIVE` entries: one naming no redrive of its
/// workflow `w` (its `redrives`), or the same redrive twice.
pub(super) fn entry_violations(a: &ActivityExec, w: Option<&WorkflowExec>) -> Vec<String> {
    let id = &a.activity_exec_id;
    let mut v = vec![];
    let mut seen = HashSet::new();
    for h in a.trail.history.iter().filter(|h| is_redrive(h)) {
        let r = h.event_id.strip_prefix("redrive:").unwrap_or_default();
        if !seen.insert(r) {
            v.push(format!("{id}: redriven twice by {r}"));
        }
        if !w.is_some_and(|w| w.redriven_by(r)) {
            v.push(format!(
                "{id}: redriven by {:?}, not a redrive of its workflow ({:?})",
                h.event_id,
                w.map(|w| &w.redrives)
            ));
        }
    }
    v
}

/// Violations of workflow `w`'s redrive bookkeeping in itself: its
/// `redrive_count` is not the size of its `redrives`, or `redriving` is
/// not one of them; or it COMPLETED with an `error` (an earlier
/// generation's failure, written after the redrive cleared it).
fn bookkeeping_violations(w: &WorkflowExec) -> Vec<String> {
    let id = &w.workflow_exec_id;
    let mut v = vec![];
    if w.state == WorkflowState::Completed && w.error.is_some() {
        v.push(format!(
            "workflow {id} COMPLETED with error {:?} (redrives {:?})",
            w.error, w.redrives
        ));
    }
    let ids: HashSet<&String> = w.redrives.iter().collect();
    if w.redrive_count.unwrap_or(0) as usize != ids.len() {
        v.push(format!(
            "workflow {id}: redrive_count {:?} but redrives {:?}",
            w.redrive_count, w.redrives
        ));
    }
    if let Some(r) = &w.redriving {
        if !ids.contains(r) {
            v.push(format!(
                "workflow {id}: redriving {r}, not among its redrives"
            ));
        }
    }
    v
}

impl Checker {
    /// Remember the redrive request rows in the table.
    fn note_redrive_requests(&mut self, mem: &MemoryBackend, t: &Tables) {
        for row in super::requests(mem, t) {
            if let Some(exec) = row.redrive_workflow_exec_id {
                self.redrive
                    .requests
                    .entry(row.workflow_request_id)
                    .or_insert(exec);
            }
        }
    }

    /// The safety invariants of redrives (module docs) on the activities
    /// and workflows read now (at world time `now`, when known). Run
    /// before the other checks of a look: an activity redriven since the
    /// last look starts a new generation, and what the checker remembers
    /// of its last one is forgotten.
    pub(super) fn redrive_violations(
        &mut self,
        acts: &[Arc<ActivityExec>],
        wfs: &[WorkflowExec],
        mem: &MemoryBackend,
        t: &Tables,
        now: Option<i64>,
    ) -> Vec<String> {
        self.note_redrive_requests(mem, t);
        let by_id: HashMap<&str, &WorkflowExec> = wfs
            .iter()
            .map(|w| (w.workflow_exec_id.as_str(), w))
            .collect();
        let mut v = vec![];
        for a in acts {
            let n = redrive_count(a);
            let before = self.redrive.redriven.insert(a.activity_exec_id.clone(), n);
            if n > before.unwrap_or(0) {
                self.forget_generation(&a.activity_exec_id);
            }
            if n > 0 {
                v.extend(entry_violations(
                    a,
                    by_id.get(a.workflow_exec_id.as_str()).copied(),
                ));
            }
            v.extend(self.kept_violation(a));
            v.extend(self.terminal_state_change(a));
        }
        for w in wfs {
            v.extend(bookkeeping_violations(w));
            v.extend(self.workflow_look(w, acts));
            for r in w.redrives.iter().filter_map(|r| Some(r).zip(now)) {
                self.redrive.applied_at.entry(r.0.clone()).or_insert(r.1);
            }
        }
        v
    }

    /// Forget what the checker remembers of activity `id`'s last
    /// generation: its terminal state, when it ended, its signal wait's
    /// start and its child node's end.
    fn forget_generation(&mut self, id: &str) {
        self.terminal.remove(id);
        self.ended_at.remove(id);
        self.signals.forget(id);
        self.children.forget(id);
    }

    /// A COMPLETED activity that changed since it was first seen so.
    fn kept_violation(&mut self, a: &ActivityExec) -> Option<String> {
        let id = &a.activity_exec_id;
        let now = Kept::of(a);
        match self.redrive.completed.get(id) {
            Some(k) if *k != now => Some(format!(
                "{id}: COMPLETED as {k:?}, now {now:?} (history {:?})",
                a.trail
                    .history
                    .iter()
                    .map(|h| format!("{} by {}", h.state, h.full_event_id(id)))
                    .collect::<Vec<_>>()
            )),
            Some(_) => None,
            None => {
                if a.state == ActivityState::Completed {
                    self.redrive.completed.insert(id.clone(), now);
                }
                None
            }
        }
    }

    /// Workflow `w` against the checker's last look at it: its terminal
    /// state changes only by a new redrive, a new redrive names it, and
    /// took it from FAILED or CANCELLED; the sweep of a redrive done.
    fn workflow_look(&mut self, w: &WorkflowExec, acts: &[Arc<ActivityExec>]) -> Vec<String> {
        let id = &w.workflow_exec_id;
        let mut v = self.sweep_violations(w, acts);
        let now: BTreeSet<String> = w.redrives.iter().cloned().collect();
        let prev = self.redrive.workflows.get(id).cloned();
        let before = prev
            .as_ref()
            .map(|p| p.redrives.clone())
            .unwrap_or_default();
        if !before.is_subset(&now) {
            v.push(format!("workflow {id}: redrives {before:?} became {now:?}"));
        }
        let new: Vec<&String> = now.difference(&before).collect();
        let from = prev.as_ref().map(|p| p.state);
        for r in &new {
            let named = self.redrive.requests.get(*r);
            if named != Some(id) {
                v.push(format!(
                    "workflow {id} redriven by {r}, a request to redrive {named:?}"
                ));
            }
            if !matches!(from, Some(WorkflowState::Failed | WorkflowState::Cancelled)) {
                v.push(format!(
                    "workflow {id} redriven by {r} while it was {from:?}"
                ));
            }
            let done = acts
                .iter()
                .filter(|a| a.workflow_exec_id == *id && a.state == ActivityState::Completed)
                .map(|a| a.activity_exec_id.clone())
                .collect();
            self.redrive.sweeps.insert(id.clone(), ((*r).clone(), done));
        }
        let mut ended = prev.and_then(|p| p.ended);
        match ended {
            Some(s) if new.is_empty() && s != w.state => v.push(format!(
                "workflow {id}: terminal state {s} changed to {} without a redrive",
                w.state
            )),
            _ if !new.is_empty() => ended = None,
            _ => {}
        }
        if ended.is_none() && w.state.is_terminal() {
            ended = Some(w.state);
        }
        let look = Look {
            state: w.state,
            ended,
            redrives: now,
        };
        self.redrive.workflows.insert(id.clone(), look);
        v
    }

    /// Once the redrive under way of `w` is done (`redriving` is no longer
    /// its id), every activity of `w` not COMPLETED when it was applied
    /// holds its entry.
    fn sweep_violations(&mut self, w: &WorkflowExec, acts: &[Arc<ActivityExec>]) -> Vec<String> {
        let id = &w.workflow_exec_id;
        let under_way = |(r, _): &(String, HashSet<String>)| w.redriving.as_ref() == Some(r);
        if self.redrive.sweeps.get(id).is_none_or(under_way) {
            return vec![];
        }
        let Some((r, done)) = self.redrive.sweeps.remove(id) else {
            return vec![];
        };
        let event = redrive_event_id(&r);
        acts.iter()
            .filter(|a| a.workflow_exec_id == *id && !done.contains(&a.activity_exec_id))
            .filter(|a| !a.trail.history.iter().any(|h| h.event_id == event))
            .map(|a| {
                format!(
                    "{}: {} and never redriven by {r}, though that redrive of its workflow is done",
                    a.activity_exec_id, a.state
                )
            })
            .collect()
    }
}

/// Seconds two engine clocks may differ by (each within two of the
/// world's).
const ENGINE_SKEWS: i64 = 4;

/// Whether child node `a` ended (by its child's end) before child `w`,
/// redriven by a user since, ended last: the node keeps the end it took,
/// whatever the redriven child did after. Judged by the engines' clocks,
/// so an end within their skews of the child's counts as before.
pub(super) fn ended_before_redriven_child(a: &ActivityExec, w: &WorkflowExec) -> bool {
    let node_end = generation(a)
        .iter()
        .rfind(|h| h.state.is_terminal())
        .map(|h| h.at_epoch);
    match (w.redrives.is_empty(), node_end, w.end_time_epoch) {
        (false, Some(node), Some(child)) => node <= child + ENGINE_SKEWS,
        (false, _, _) => true,
        _ => false,
    }
}

/// At the end: a workflow whose redrive is still under way.
pub(super) fn liveness_violations(wfs: &[WorkflowExec]) -> Vec<String> {
    wfs.iter()
        .filter_map(|w| {
            let r = w.redriving.as_ref()?;
            Some(format!(
                "workflow {} ({}) still has redrive {r} under way at the end",
                w.workflow_exec_id, w.state
            ))
        })
        .collect()
}

/// What redrives exercised, counted at the end (`features.rs`).
pub(super) fn features(
    acts: &[Arc<ActivityExec>],
    wfs: &[WorkflowExec],
    add: &mut impl FnMut(&str, u64),
) {
    for w in wfs.iter().filter(|w| !w.redrives.is_empty()) {
        add("workflows redriven", 1);
        add("redrives applied", w.redrives.len() as u64);
        if w.redrives.len() > 1 {
            add("workflows redriven twice or more", 1);
        }
        if w.parent.is_some() {
            add("child workflows redriven", 1);
        }
        match w.state {
            WorkflowState::Completed => add("redriven workflows completed", 1),
            s if s.is_terminal() => add("redriven workflows ended FAILED or CANCELLED again", 1),
            _ => {}
        }
    }
    for a in acts {
        let n = redrive_count(a) as u64;
        add("activities redriven", n);
        if n > 0 && a.state == ActivityState::Completed {
            add("redriven activities completed", 1);
        }
    }
}

#[cfg(test)]
#[path = "workflow_redrive_tests.rs"]
mod workflow_redrive_tests;
