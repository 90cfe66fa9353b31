//! The invariants. Safety after every step; liveness at the end of a
//! schedule, once faults stopped and the clock ran on.
//!
//! Safety: a terminal state never changes and is reached by one accepted
//! terminal transition; each end is counted once, in its count group, and
//! the workflow's counters are the sums of its complete groups
//! (`counts.rs`); each edge is released once, wide joins' groups included
//! (`edges.rs`); attempts stay within the
//! limit; one token per claimed attempt (checked by the launcher); hostile
//! rows are rejected with a reason; a child workflow is its node's own,
//! and its node ends only by its end, once (`check/children.rs`).
//!
//! Liveness: every workflow and activity ends, no obligation (due marker)
//! is left, the workflow's counters equal its activities' ends and its
//! outcome agrees with them, completed
//! outputs are what the activity computed from its prerequisites' final
//! outputs, a report written well before the monitor acted wins over
//! TIMED_OUT, and every child's end reached its node, with its result.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use whimbrel_core::attr;

use whimbrel_core::contract::ActivityState;
use whimbrel_core::engine::{payloads, EngineConfig};
use whimbrel_core::handlers::Outcome;
use whimbrel_core::ids;
use whimbrel_core::model::{
    ActivityEvent, ActivityExec, InputRow, JoinGroup, OutputRow, WorkflowExec, WorkflowPlan,
    WorkflowPlanPart, WorkflowRequest,
};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

use crate::actors::Report;

pub mod cancels;
mod children;
pub mod episodes;
mod features;
mod liveness;
mod safety;
mod signals;
mod slots;
pub mod target_slots;
mod timing;
mod workflow_redrive;

pub use signals::signal_rows;

pub use timing::HEARTBEAT_TOLERANCE;

/// What the world saw happen, for the end-of-run checks.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// Report rows actors wrote.
    pub reports: &'a [Report],
    /// Stream outcomes per row id.
    pub outcomes: &'a HashMap<String, Vec<Outcome>>,
    /// Row ids whose on-failure message reached the dead-letter queue
    /// (the redrive function could not apply it).
    pub lost: &'a HashSet<String>,
    /// Users' cancel requests by row id, and when each was applied.
    pub cancels: &'a HashMap<String, cancels::CancelRequest>,
    /// When the GSIs stalled past the report grace: (from, until), world
    /// time. A report written then may lose to a timeout (docs/design.md
    /// § 8.4).
    pub gsi_stalls: &'a [(i64, i64)],
    /// Report rows a hostile write overwrote, and when it first did
    /// (world time): the report may be lost.
    pub overwritten: &'a HashMap<String, i64>,
}

/// Activities per changed step between two looks of the checker
/// ([`Checker::changed`]): below this many it looks at every one.
pub const LOOK_STRIDE: usize = 100;

/// What the checker remembers between steps.
#[derive(Debug, Default)]
pub struct Checker {
    seen_writes: u64,
    /// Changed steps not looked at since the last look ([`Checker::changed`]).
    unlooked: usize,
    /// Activities at the last look.
    looked_at: usize,
    terminal: HashMap<String, ActivityState>,
    /// When each activity was first seen ended, world time.
    ended_at: HashMap<String, i64>,
    timing: timing::Timing,
    signals: signals::Seen,
    children: children::Seen,
    redrive: workflow_redrive::Seen,
    target_slots: target_slots::Seen,
    episodes: episodes::Seen,
    /// When the faults stopped (world time), once they have.
    quiet_since: Option<i64>,
}

/// Every activity exec item, read; with a violation for each item that
/// does not parse (named by its key). A stray item, one that a hostile
/// heartbeat write created under an activity's hash key with another
/// workflow's range key, is not an activity and is skipped.
pub fn activities(mem: &MemoryBackend, t: &Tables) -> (Vec<Arc<ActivityExec>>, Vec<String>) {
    let mut bad = vec![];
    let mut out = vec![];
    for read in mem.decoded(&t.activity_exec(), read_activity) {
        match read {
            Some(Ok(a)) => out.push(a),
            Some(Err(e)) => bad.push(e),
            None => {}
        }
    }
    (out, bad)
}

/// One activity exec item as [`activities`] reads it: `None` for a stray
/// item, else the activity or why it does not parse.
fn read_activity(
    _: &str,
    item: &whimbrel_core::store::Item,
) -> Option<Result<Arc<ActivityExec>, String>> {
    if is_stray(item) {
        return None;
    }
    Some(
        serde_dynamo::from_item::<_, ActivityExec>(item.clone())
            .map(Arc::new)
            .map_err(|e| {
                let key = format!("{:?}", item.get(attr::ACTIVITY_EXEC_ID));
                format!("activity item {key} does not parse ({e})")
            }),
    )
}

/// `acts`, each shared as [`activities`] reads them (for unit tests).
#[cfg(test)]
pub(crate) fn arcs(acts: &[ActivityExec]) -> Vec<Arc<ActivityExec>> {
    acts.iter().cloned().map(Arc::new).collect()
}

/// Whether an activity exec item's key is not an activity's own
/// (`ids::is_activity_key`, the rule `Engine::find_activity` reads by).
fn is_stray(item: &whimbrel_core::store::Item) -> bool {
    let text = |k: &str| match item.get(k) {
        Some(whimbrel_core::store::Value::S(v)) => v.as_str(),
        _ => "",
    };
    !whimbrel_core::ids::is_activity_key(text(attr::ACTIVITY_EXEC_ID), text(attr::WORKFLOW_EXEC_ID))
}

/// Put back the outputs kept on the engine's output rows (`output_ref`) or
/// on event rows (`output_event_id`, as
/// `engine::payloads::outputs_of` reads them) into `output`; a referenced
/// row that is missing, or an input too large for the item kept on it, is a
/// violation.
fn with_outputs(
    mut acts: Vec<Arc<ActivityExec>>,
    mem: &MemoryBackend,
    t: &Tables,
) -> (Vec<Arc<ActivityExec>>, Vec<String>) {
    let mut v = vec![];
    let rows: HashMap<String, Option<serde_json::Value>> = mem
        .items(&t.activity_event())
        .into_iter()
        .filter_map(|i| serde_dynamo::from_item::<_, ActivityEvent>(i).ok())
        .map(|e| (e.activity_event_id, e.output))
        .collect();
    let copies: HashMap<String, serde_json::Value> = mem
        .items(&t.workflow_plan())
        .into_iter()
        .filter_map(|i| serde_dynamo::from_item::<_, OutputRow>(i).ok())
        .map(|r| (r.workflow_exec_id, r.output))
        .collect();
    for a in &mut acts {
        let a = Arc::make_mut(a);
        if let Some(r) = &a.outcome.output_ref {
            match copies.get(r) {
                Some(out) => a.outcome.output = Some(out.clone()),
                None => v.push(format!(
                    "activity {}: its output is on output row {r}, which does not exist",
                    a.activity_exec_id
                )),
            }
        }
        if let Some(row) = &a.outcome.output_event_id {
            match rows.get(row) {
                Some(out) => a.outcome.output = out.clone(),
                None => v.push(format!(
                    "activity {}: its output is on event row {row}, which does not exist",
                    a.activity_exec_id
                )),
            }
        }
        if a.runner
            .input
            .as_ref()
            .is_some_and(|i| !payloads::inline(i))
        {
            v.push(format!(
                "activity {}: an input over {} bytes is kept on the item",
                a.activity_exec_id,
                payloads::INLINE_PAYLOAD_BYTES
            ));
        }
    }
    (acts, v)
}

/// One item of `whimbrel_workflow_plan`, read as [`stored_plans`] and
/// [`inputs_kept_twice`] read it: a plan part (an item with
/// [`attr::PART`]), else a plan head, and an input row (an item with
/// [`attr::INPUT`] and no [`attr::PLAN`]), each when it parses; and the
/// inputs over the inline limit the part or head keeps inline.
#[derive(Debug, Clone, Default)]
struct PlanRow {
    part: Option<WorkflowPlanPart>,
    head: Option<WorkflowPlan>,
    input: Option<InputRow>,
    kept_twice: Vec<String>,
}

fn read_plan_row(_: &str, i: &whimbrel_core::store::Item) -> PlanRow {
    let mut row = PlanRow::default();
    let acts = if i.contains_key(attr::PART) {
        row.part = serde_dynamo::from_item::<_, WorkflowPlanPart>(i.clone()).ok();
        (row.part.as_ref()).map(|p| (p.workflow_exec_id.clone(), &p.activities))
    } else {
        row.head = serde_dynamo::from_item::<_, WorkflowPlan>(i.clone()).ok();
        (row.head.as_ref()).map(|p| (p.workflow_exec_id.clone(), &p.plan.activities))
    };
    if let Some((key, acts)) = acts {
        for a in acts {
            if a.input.as_ref().is_some_and(|x| !payloads::inline(x)) {
                row.kept_twice.push(format!(
                    "plan {key}: activity {} keeps an input over {} bytes inline",
                    a.name,
                    payloads::INLINE_PAYLOAD_BYTES
                ));
            }
        }
    }
    if i.contains_key(attr::INPUT) && !i.contains_key(attr::PLAN) {
        row.input = serde_dynamo::from_item::<_, InputRow>(i.clone()).ok();
    }
    row
}

/// Every stored plan, whole, by workflow exec id: a head's parts put
/// together in order as `engine::plans::load` does; a head whose parts
/// are not all there is left out (as unreadable).
fn stored_plans(mem: &MemoryBackend, t: &Tables) -> HashMap<String, WorkflowPlan> {
    let rows = mem.decoded(&t.workflow_plan(), read_plan_row);
    let parts: HashMap<String, &WorkflowPlanPart> = (rows.iter())
        .filter_map(|r| r.part.as_ref())
        .map(|p| (p.workflow_exec_id.clone(), p))
        .collect();
    let inputs: HashMap<&str, &serde_json::Value> = (rows.iter())
        .filter_map(|r| r.input.as_ref())
        .map(|r| (r.workflow_exec_id.as_str(), &r.input))
        .collect();
    let mut out = HashMap::new();
    for mut head in rows.iter().filter_map(|r| r.head.clone()) {
        if let Some(named) = head.parts.clone() {
            let whole: Option<Vec<_>> = (0..named.count)
                .map(|k| {
                    parts
                        .get(&ids::plan_part_key(
                            &head.workflow_exec_id,
                            &named.digest,
                            k,
                        ))
                        .map(|p| p.activities.clone())
                })
                .collect();
            let Some(whole) = whole else { continue };
            head.plan.activities = whole.into_iter().flatten().collect();
        }
        // Inputs kept by reference (`payloads::by_reference`) put back
        // from their rows; a missing row leaves the input absent, and the
        // output check then reports the activity.
        for a in &mut head.plan.activities {
            if let Some(key) = &a.input_ref {
                a.input = inputs.get(key.as_str()).map(|v| (*v).clone());
            }
        }
        out.insert(head.workflow_exec_id.clone(), head);
    }
    out
}

/// Stored plans (heads and parts) that keep an input too large for the
/// activity item inline: it belongs on its input row only
/// (`payloads::by_reference`).
fn inputs_kept_twice(mem: &MemoryBackend, t: &Tables) -> Vec<String> {
    (mem.decoded(&t.workflow_plan(), read_plan_row).into_iter())
        .flat_map(|r| r.kept_twice)
        .collect()
}

/// Give each wide fan-out (`dependents_in_plan`) the dependents and join
/// slots the engine derives from its stored plan, so the checks see every
/// edge. A workflow whose plan item cannot be read keeps its lists empty
/// (the planned check reports that).
fn with_planned_dependents(
    mut acts: Vec<Arc<ActivityExec>>,
    mem: &MemoryBackend,
    t: &Tables,
    cfg: &EngineConfig,
) -> Vec<Arc<ActivityExec>> {
    if acts.iter().all(|a| a.links.dependents_in_plan.is_none()) {
        return acts;
    }
    let plans = stored_plans(mem, t);
    for a in acts
        .iter_mut()
        .filter(|a| a.links.dependents_in_plan.is_some())
    {
        if let Some(p) = plans.get(&a.workflow_exec_id) {
            let derived = whimbrel_core::engine::items::planned_dependents(
                &a.workflow_exec_id,
                &p.plan,
                &a.activity_name,
                cfg,
            );
            let a = Arc::make_mut(a);
            (a.links.dependents, a.links.join_slots) = derived;
        }
    }
    acts
}

/// The join group items of wide joins (the dependency table's items that
/// are not edges).
fn join_groups(mem: &MemoryBackend, t: &Tables) -> Vec<JoinGroup> {
    let read = |_: &str, i: &whimbrel_core::store::Item| {
        (!i.contains_key(attr::DEPENDENT_ACTIVITY_EXEC_ID))
            .then(|| serde_dynamo::from_item(i.clone()).ok())
            .flatten()
    };
    mem.decoded(&t.activity_exec_dependency(), read)
        .into_iter()
        .flatten()
        .collect()
}

/// Every item of `table` that parses as a `T` (the rest are left out),
/// in key order, each parsed once per write ([`MemoryBackend::decoded`]).
pub fn parsed<T>(mem: &MemoryBackend, table: &str) -> Vec<T>
where
    T: serde::de::DeserializeOwned + Clone + Send + 'static,
{
    // A closure of a generic function is its own type for each `T`, so
    // each `T` keeps a memo of its own.
    let read =
        |_: &str, i: &whimbrel_core::store::Item| serde_dynamo::from_item::<_, T>(i.clone()).ok();
    mem.decoded(table, read).into_iter().flatten().collect()
}

/// Every workflow exec item that parses (the rest are left out).
pub fn workflows(mem: &MemoryBackend, t: &Tables) -> Vec<WorkflowExec> {
    parsed(mem, &t.workflow_exec())
}

/// Every row of `whimbrel_workflow_request` that parses (the rest are
/// left out).
pub fn requests(mem: &MemoryBackend, t: &Tables) -> Vec<WorkflowRequest> {
    parsed(mem, &t.workflow_request())
}

/// A row of `whimbrel_workflow_request`, read as a start or not (a row
/// that cancels or redrives a workflow is not one; a row that does not
/// parse counts as one), with its request id when it has one.
fn read_start(_: &str, row: &whimbrel_core::store::Item) -> (bool, Option<String>) {
    let not_a_start = serde_dynamo::from_item::<_, WorkflowRequest>(row.clone())
        .is_ok_and(|r| r.cancel_workflow_exec_id.is_some() || r.redrive_workflow_exec_id.is_some());
    let id = row
        .get(attr::WORKFLOW_REQUEST_ID)
        .and_then(whimbrel_core::store::as_s)
        .cloned();
    (!not_a_start, id)
}

/// How many rows of `whimbrel_workflow_request` start a workflow (users'
/// and child workflows' alike; cancels, users' or a parent close's, and
/// redrives left out).
pub fn start_requests(mem: &MemoryBackend, t: &Tables) -> usize {
    requests_not_lost(mem, t, &HashSet::new())
}

/// How many workflow request rows there are, leaving out those whose
/// stream record the mappings gave up on (`lost`).
fn requests_not_lost(mem: &MemoryBackend, t: &Tables, lost: &HashSet<String>) -> usize {
    (mem.decoded(&t.workflow_request(), read_start).iter())
        .filter(|(start, id)| *start && id.as_ref().is_none_or(|id| !lost.contains(id)))
        .count()
}

impl Checker {
    /// Ids of the activity execs that exist.
    pub fn activity_ids(&self, mem: &MemoryBackend, t: &Tables) -> Vec<String> {
        activities(mem, t)
            .0
            .into_iter()
            .map(|a| a.activity_exec_id.clone())
            .collect()
    }

    /// Ids of the workflow execs that exist.
    pub fn workflow_ids(&self, mem: &MemoryBackend, t: &Tables) -> Vec<String> {
        workflows(mem, t)
            .into_iter()
            .map(|w| w.workflow_exec_id)
            .collect()
    }

    /// How many activities ended in each terminal state.
    pub fn ended_states(
        &self,
        mem: &MemoryBackend,
        t: &Tables,
    ) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for a in activities(mem, t)
            .0
            .into_iter()
            .filter(|a| a.state.is_terminal())
        {
            *out.entry(a.state.to_string()).or_insert(0) += 1;
        }
        out
    }

    /// True when every workflow requested so far ended.
    pub fn all_ended(&self, mem: &MemoryBackend, t: &Tables, lost: &HashSet<String>) -> bool {
        let requests = requests_not_lost(mem, t, lost);
        let wfs = workflows(mem, t);
        wfs.len() >= requests
            && wfs
                .iter()
                .all(|w| w.state.is_terminal() && w.due_epoch.is_none())
            && activities(mem, t)
                .0
                .iter()
                .all(|a| a.state.is_terminal() && a.timing.due_epoch.is_none())
    }

    /// The safety invariants on the tables as they are now (checked
    /// again only when something was written since the last look).
    pub fn safety(&mut self, mem: &MemoryBackend, t: &Tables, cfg: &EngineConfig) -> Vec<String> {
        self.safety_at(mem, t, cfg, None)
    }

    /// [`Checker::safety`], and with the world time `now`, the timing
    /// invariants (`check/timing.rs`).
    pub fn safety_at(
        &mut self,
        mem: &MemoryBackend,
        t: &Tables,
        cfg: &EngineConfig,
        now: Option<i64>,
    ) -> Vec<String> {
        match self.changed(mem, t) {
            Some(read) => self.safety_of(read, mem, t, cfg, now),
            None => vec![],
        }
    }

    /// The activity exec items read (as [`activities`] gives them) when
    /// something was written since the last look; `None` otherwise.
    ///
    /// A look reads every item, so its cost grows with the world: in a
    /// schedule of a few hundred activities it looks at every changed
    /// step, in one with a 500-wide round (issue 42 C.1: 1,500 activities,
    /// where looks were 94% of the run) once per [`LOOK_STRIDE`]
    /// activities' worth of changed steps. What it checks is history kept
    /// on the items (each attempt, each event behind a state), so a
    /// violation still shows at the next look, and the end of the run
    /// looks at everything.
    pub fn changed(
        &mut self,
        mem: &MemoryBackend,
        t: &Tables,
    ) -> Option<(Vec<Arc<ActivityExec>>, Vec<String>)> {
        let writes = mem.writes();
        if writes == self.seen_writes {
            return None;
        }
        self.seen_writes = writes;
        self.unlooked += 1;
        if self.unlooked < 1 + self.looked_at / LOOK_STRIDE {
            return None;
        }
        self.unlooked = 0;
        let read = activities(mem, t);
        self.looked_at = read.0.len();
        Some(read)
    }

    /// [`Checker::safety_at`] on the activities [`Checker::changed`] read.
    pub fn safety_of(
        &mut self,
        (acts, mut v): (Vec<Arc<ActivityExec>>, Vec<String>),
        mem: &MemoryBackend,
        t: &Tables,
        cfg: &EngineConfig,
        now: Option<i64>,
    ) -> Vec<String> {
        if let Some(now) = now {
            v.extend(self.timing(&acts, cfg, now));
        }
        let acts = with_planned_dependents(acts, mem, t, cfg);
        let wfs = workflows(mem, t);
        if let Some(now) = now {
            v.extend(
                wfs.iter()
                    .filter_map(|w| self.execution_timeout_late(w, now)),
            );
        }
        v.extend(self.redrive_violations(&acts, &wfs, mem, t, now));
        self.note_signals(mem, t, now);
        for a in &acts {
            if let (true, Some(now)) = (a.state.is_terminal(), now) {
                self.ended_at
                    .entry(a.activity_exec_id.clone())
                    .or_insert(now);
                v.extend(self.timer_fired_early(a, now));
                v.extend(self.timer_fired_late(a, cfg, now));
            }
            v.extend(self.signal_violations(a, now));
            v.extend(safety::due_marker_violation(a, cfg));
            v.extend(safety::history_violations(a));
            v.extend(safety::timer_violations(a));
            v.extend(safety::hygiene_violations(a));
            v.extend(safety::attempt_violations(a));
        }
        v.extend(crate::edges::violations(&acts, &join_groups(mem, t)));
        v.extend(inputs_kept_twice(mem, t));
        v.extend(self.child_violations(&acts, &wfs, mem, t));
        v.extend(crate::counts::violations(&acts, mem, t));
        v.extend(slots::violations(&acts, mem, t));
        v.extend(target_slots::violations(
            &acts,
            mem,
            t,
            &mut self.target_slots,
        ));
        v
    }

    /// The liveness invariants and the end-of-run checks.
    pub fn liveness(
        &mut self,
        mem: &MemoryBackend,
        t: &Tables,
        cfg: &EngineConfig,
        seen: &Evidence<'_>,
    ) -> Vec<String> {
        self.seen_writes = u64::MAX;
        let mut v = self.safety(mem, t, cfg);
        let acts = with_planned_dependents(activities(mem, t).0, mem, t, cfg);
        let (acts, missing) = with_outputs(acts, mem, t);
        v.extend(missing);
        let plans = stored_plans(mem, t);
        let wfs = workflows(mem, t);
        // A request row whose stream record the mapping gave up on is
        // started by the redrive function; only one whose on-failure
        // message reached the dead-letter queue is excused.
        let requests = requests_not_lost(mem, t, seen.lost);
        if wfs.len() < requests {
            v.push(format!(
                "{requests} requests but {} workflow execs",
                wfs.len()
            ));
        }
        let decided = episodes::decided_inputs(&episodes::logs(mem, t).0);
        let known = liveness::Known {
            plans: &plans,
            signals: &self.signals.rows,
            decided: &decided,
        };
        for w in &wfs {
            v.extend(liveness::workflow_violations(w, &acts, &known));
        }
        for a in &acts {
            v.extend(liveness::activity_violations(a, &acts, &known, cfg, seen));
        }
        let running: HashSet<&str> = wfs
            .iter()
            .filter(|w| !w.state.is_terminal())
            .map(|w| w.workflow_exec_id.as_str())
            .collect();
        let rows = signal_rows(mem, t);
        v.extend(signals::lost_signals(&acts, &running, &rows, seen.lost));
        v.extend(liveness::rows_only_retried(seen.outcomes, seen.lost));
        v.extend(self.child_liveness(&children::End {
            read: children::Read::new(&acts, &wfs),
            plans: &plans,
            outcomes: seen.outcomes,
            lost: seen.lost,
            decided: &decided,
        }));
        // A decider consulted on cancel requests decides what one does
        // (check/episodes.rs); every other request cancels at once.
        let decided_cancels = episodes::cancels_decided(&wfs);
        let cancels: HashMap<String, cancels::CancelRequest> = (seen.cancels.iter())
            .filter(|(_, c)| !decided_cancels.contains(c.workflow_exec_id.as_str()))
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        v.extend(cancels::violations(
            &cancels,
            &acts,
            &self.ended_at,
            self.redrive.applied_at(),
        ));
        v.extend(workflow_redrive::liveness_violations(&wfs));
        v
    }
}
