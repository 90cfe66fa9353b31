//! The invariants. Safety after every step; liveness at the end of a
//! schedule, once faults stopped and the clock ran on.
//!
//! Safety: a terminal state never changes and is reached by one accepted
//! terminal transition; each end is counted once, in its count group, and
//! the workflow's counters are the sums of its complete groups
//! (`counts.rs`); each edge is released once, wide joins' groups included
//! (`edges.rs`); attempts stay within the
//! limit; one token per claimed attempt (checked by the launcher); hostile
//! rows are rejected with a reason.
//!
//! Liveness: every workflow and activity ends, no obligation (due marker)
//! is left, the workflow's counters equal its activities' ends and its
//! outcome agrees with them, completed
//! outputs are what the activity computed from its prerequisites' final
//! outputs, and a report written well before the monitor acted wins over
//! TIMED_OUT.

use std::collections::{HashMap, HashSet};
use whimbrel_core::attr;

use whimbrel_core::contract::{self, ActivityState, WorkflowState};
use whimbrel_core::engine::{payloads, EngineConfig};
use whimbrel_core::handlers::Outcome;
use whimbrel_core::ids;
use whimbrel_core::model::{
    ActivityEvent, ActivityExec, InputRow, JoinGroup, WorkflowExec, WorkflowPlan, WorkflowPlanPart,
};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

use crate::actors::{output_of, Report};

/// What the world saw happen, for the end-of-run checks.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// Report rows actors wrote.
    pub reports: &'a [Report],
    /// Stream outcomes per row id.
    pub outcomes: &'a HashMap<String, Vec<Outcome>>,
    /// Row ids the mappings gave up on.
    pub lost: &'a HashSet<String>,
}

/// What the checker remembers between steps.
#[derive(Debug, Default)]
pub struct Checker {
    seen_writes: u64,
    terminal: HashMap<String, ActivityState>,
    workflow_terminal: HashMap<String, WorkflowState>,
}

fn activities(mem: &MemoryBackend, t: &Tables) -> (Vec<ActivityExec>, Vec<String>) {
    let mut bad = vec![];
    let mut out = vec![];
    for item in mem.items(&t.activity_exec()) {
        match serde_dynamo::from_item::<_, ActivityExec>(item.clone()) {
            Ok(a) => out.push(a),
            Err(e) => bad.push(format!("activity item does not parse ({e}): {item:?}")),
        }
    }
    (out, bad)
}

/// Put back the outputs kept on event rows (`output_event_id`, as
/// `engine::payloads::outputs_of` reads them) into `output`; a referenced
/// row that is missing, or an input too large for the item kept on it, is a
/// violation.
fn with_outputs(
    mut acts: Vec<ActivityExec>,
    mem: &MemoryBackend,
    t: &Tables,
) -> (Vec<ActivityExec>, Vec<String>) {
    let mut v = vec![];
    let rows: HashMap<String, Option<serde_json::Value>> = mem
        .items(&t.activity_event())
        .into_iter()
        .filter_map(|i| serde_dynamo::from_item::<_, ActivityEvent>(i).ok())
        .map(|e| (e.activity_event_id, e.output))
        .collect();
    for a in &mut acts {
        if let Some(row) = &a.output_event_id {
            match rows.get(row) {
                Some(out) => a.output = out.clone(),
                None => v.push(format!(
                    "activity {}: its output is on event row {row}, which does not exist",
                    a.activity_exec_id
                )),
            }
        }
        if a.input.as_ref().is_some_and(|i| !payloads::inline(i)) {
            v.push(format!(
                "activity {}: an input over {} bytes is kept on the item",
                a.activity_exec_id,
                payloads::INLINE_PAYLOAD_BYTES
            ));
        }
    }
    (acts, v)
}

/// Every stored plan, whole, by workflow exec id: a head's parts put
/// together in order as `engine::plans::load` does; a head whose parts
/// are not all there is left out (as unreadable).
fn stored_plans(mem: &MemoryBackend, t: &Tables) -> HashMap<String, WorkflowPlan> {
    let items = mem.items(&t.workflow_plan());
    let parts: HashMap<String, WorkflowPlanPart> = items
        .iter()
        .filter(|i| i.contains_key(attr::PART))
        .filter_map(|i| serde_dynamo::from_item::<_, WorkflowPlanPart>(i.clone()).ok())
        .map(|p| (p.workflow_exec_id.clone(), p))
        .collect();
    let inputs: HashMap<String, serde_json::Value> = items
        .iter()
        .filter(|i| i.contains_key(attr::INPUT) && !i.contains_key(attr::PLAN))
        .filter_map(|i| serde_dynamo::from_item::<_, InputRow>(i.clone()).ok())
        .map(|r| (r.workflow_exec_id, r.input))
        .collect();
    let mut out = HashMap::new();
    for i in items.into_iter().filter(|i| !i.contains_key(attr::PART)) {
        let Ok(mut head) = serde_dynamo::from_item::<_, WorkflowPlan>(i) else {
            continue;
        };
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
                a.input = inputs.get(key).cloned();
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
    let mut v = vec![];
    for i in mem.items(&t.workflow_plan()) {
        let acts = if i.contains_key(attr::PART) {
            serde_dynamo::from_item::<_, WorkflowPlanPart>(i)
                .map(|p| (p.workflow_exec_id, p.activities))
                .ok()
        } else {
            serde_dynamo::from_item::<_, WorkflowPlan>(i)
                .map(|p| (p.workflow_exec_id, p.plan.activities))
                .ok()
        };
        for (key, a) in acts
            .into_iter()
            .flat_map(|(k, a)| a.into_iter().map(move |a| (k.clone(), a)))
        {
            if a.input.as_ref().is_some_and(|x| !payloads::inline(x)) {
                v.push(format!(
                    "plan {key}: activity {} keeps an input over {} bytes inline",
                    a.name,
                    payloads::INLINE_PAYLOAD_BYTES
                ));
            }
        }
    }
    v
}

/// Give each wide fan-out (`dependents_in_plan`) the dependents and join
/// slots the engine derives from its stored plan, so the checks see every
/// edge. A workflow whose plan item cannot be read keeps its lists empty
/// (the planned check reports that).
fn with_planned_dependents(
    mut acts: Vec<ActivityExec>,
    mem: &MemoryBackend,
    t: &Tables,
    cfg: &EngineConfig,
) -> Vec<ActivityExec> {
    let plans = stored_plans(mem, t);
    for a in acts.iter_mut().filter(|a| a.dependents_in_plan.is_some()) {
        if let Some(p) = plans.get(&a.workflow_exec_id) {
            (a.dependents, a.join_slots) = whimbrel_core::engine::items::planned_dependents(
                &a.workflow_exec_id,
                &p.plan,
                &a.activity_name,
                cfg,
            );
        }
    }
    acts
}

/// The join group items of wide joins (the dependency table's items that
/// are not edges).
fn join_groups(mem: &MemoryBackend, t: &Tables) -> Vec<JoinGroup> {
    mem.items(&t.activity_exec_dependency())
        .into_iter()
        .filter(|i| !i.contains_key(attr::DEPENDENT_ACTIVITY_EXEC_ID))
        .filter_map(|i| serde_dynamo::from_item(i).ok())
        .collect()
}

fn workflows(mem: &MemoryBackend, t: &Tables) -> Vec<WorkflowExec> {
    mem.items(&t.workflow_exec())
        .into_iter()
        .filter_map(|i| serde_dynamo::from_item(i).ok())
        .collect()
}

impl Checker {
    /// Ids of the activity execs that exist.
    pub fn activity_ids(&self, mem: &MemoryBackend, t: &Tables) -> Vec<String> {
        activities(mem, t)
            .0
            .into_iter()
            .map(|a| a.activity_exec_id)
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

    /// How often the features of issue 6 were exercised (so a passing run
    /// is not vacuous): retried attempts, activities that completed after
    /// a retry, worker claims, activities timed out for good by
    /// schedule-to-close or schedule-to-start, workflows ended by their
    /// execution timeout.
    pub fn features(
        &self,
        mem: &MemoryBackend,
        t: &Tables,
    ) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        let mut add = |k: &str, n: u64| *out.entry(k.to_string()).or_insert(0) += n;
        for a in activities(mem, t).0 {
            let retried = a.history.iter().filter(|h| h.attempt.is_some()).count() as u64;
            add("retried attempts", retried);
            if retried > 0 && a.state == ActivityState::Completed {
                add("completed after a retry", 1);
            }
            add(
                "worker claims",
                a.history
                    .iter()
                    .filter(|h| h.event_id.starts_with("claim:"))
                    .count() as u64,
            );
            let err = a.error.as_deref().unwrap_or("");
            if a.state == ActivityState::TimedOut && err.contains("(schedule-to-") {
                add("schedule timeouts", 1);
            }
        }
        for w in workflows(mem, t) {
            if w.error
                .as_deref()
                .is_some_and(|e| e.starts_with("execution timeout"))
            {
                add("execution timeouts", 1);
            }
        }
        out
    }

    /// True when every workflow requested so far ended.
    pub fn all_ended(&self, mem: &MemoryBackend, t: &Tables, lost: &HashSet<String>) -> bool {
        let requests = mem
            .items(&t.workflow_request())
            .iter()
            .filter(|r| {
                r.get(attr::WORKFLOW_REQUEST_ID)
                    .and_then(whimbrel_core::store::as_s)
                    .is_none_or(|id| !lost.contains(id))
            })
            .count();
        let wfs = workflows(mem, t);
        wfs.len() >= requests
            && wfs
                .iter()
                .all(|w| w.state.is_terminal() && w.due_epoch.is_none())
            && activities(mem, t)
                .0
                .iter()
                .all(|a| a.state.is_terminal() && a.due_epoch.is_none())
    }

    /// The safety invariants on the tables as they are now.
    pub fn safety(&mut self, mem: &MemoryBackend, t: &Tables, cfg: &EngineConfig) -> Vec<String> {
        let writes = mem.writes();
        if writes == self.seen_writes {
            return vec![];
        }
        self.seen_writes = writes;
        let (acts, mut v) = activities(mem, t);
        let acts = with_planned_dependents(acts, mem, t, cfg);
        let mut by_wf: HashMap<&str, Vec<&ActivityExec>> = HashMap::new();
        for a in &acts {
            by_wf
                .entry(a.workflow_exec_id.as_str())
                .or_default()
                .push(a);
            let id = &a.activity_exec_id;
            // Never late: a live activity with a deadline carries a due
            // marker no later than it (markers may be early: lazy markers,
            // issue 7; the monitor moves an early one when it looks).
            if !a.state.is_terminal() {
                if let Some((deadline, kind)) = whimbrel_core::engine::decide::next_deadline(a, cfg)
                {
                    match a.due_epoch {
                        None => v.push(format!(
                            "{id}: {} with a {kind:?} deadline at {deadline} but no due marker",
                            a.state
                        )),
                        Some(m) if m > deadline => v.push(format!(
                            "{id}: {} due marker {m} is after its {kind:?} deadline {deadline}",
                            a.state
                        )),
                        Some(_) => {}
                    }
                }
            }
            match (self.terminal.get(id), a.state.is_terminal()) {
                (Some(s), _) if *s != a.state => {
                    v.push(format!("{id}: terminal state {s} changed to {}", a.state))
                }
                (None, true) => {
                    self.terminal.insert(id.clone(), a.state);
                }
                _ => {}
            }
            // Every accepted step is a row of the contract table, a
            // relaunch (QUEUED → QUEUED) or a retried failure
            // (contract::retry_state): no state ever goes back otherwise.
            let mut from = ActivityState::Requested;
            for h in &a.history {
                let retried = h
                    .transition
                    .parse::<contract::Transition>()
                    .ok()
                    .and_then(|t| contract::retry_state(from, t))
                    == Some(h.state);
                let allowed = (from == ActivityState::Queued && h.state == ActivityState::Queued)
                    || retried
                    || contract::TRANSITIONS.iter().any(|(f, t, to, _)| {
                        *f == from && t.as_str() == h.transition && *to == h.state
                    });
                if !allowed {
                    v.push(format!(
                        "{id}: {from} -> {} by {} is not in the contract ({})",
                        h.state,
                        h.transition,
                        h.full_event_id(id)
                    ));
                }
                from = h.state;
            }
            let ends = a.history.iter().filter(|h| h.state.is_terminal()).count();
            if ends > 1 {
                v.push(format!("{id}: {ends} terminal transitions accepted"));
            }
            // Retries: attempts ≤ max_attempts; each attempt before the
            // live one has exactly one recorded outcome (its retried
            // failure), in order; each attempt is claimed by a worker at
            // most once.
            let max = a.retry.as_ref().map_or(1, |r| r.attempts());
            if a.attempt > max {
                v.push(format!("{id}: attempt {} of at most {max}", a.attempt));
            }
            let failed: Vec<u32> = a.history.iter().filter_map(|h| h.attempt).collect();
            let want: Vec<u32> = (1..a.attempt.max(1)).collect();
            if failed != want {
                v.push(format!(
                    "{id}: attempt {} with failures recorded for {failed:?}",
                    a.attempt
                ));
            }
            let mut claims: Vec<&str> = a
                .history
                .iter()
                .filter(|h| h.event_id.starts_with("claim:"))
                .map(|h| h.event_id.as_str())
                .collect();
            let n = claims.len();
            claims.dedup();
            if claims.len() != n {
                v.push(format!("{id}: one attempt claimed by two workers"));
            }
        }
        v.extend(crate::edges::violations(&acts, &join_groups(mem, t)));
        v.extend(inputs_kept_twice(mem, t));
        for w in workflows(mem, t) {
            let id = &w.workflow_exec_id;
            match (self.workflow_terminal.get(id), w.state.is_terminal()) {
                (Some(s), _) if *s != w.state => v.push(format!(
                    "workflow {id}: terminal state {s} changed to {}",
                    w.state
                )),
                (None, true) => {
                    self.workflow_terminal.insert(id.clone(), w.state);
                }
                _ => {}
            }
        }
        v.extend(crate::counts::violations(&acts, mem, t));
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
        let Evidence {
            reports,
            outcomes,
            lost,
        } = *seen;
        self.seen_writes = u64::MAX;
        let mut v = self.safety(mem, t, cfg);
        let acts = with_planned_dependents(activities(mem, t).0, mem, t, cfg);
        let (acts, missing) = with_outputs(acts, mem, t);
        v.extend(missing);
        let plans = stored_plans(mem, t);
        let wfs = workflows(mem, t);
        // A request row whose stream record the mapping gave up on before
        // any exec existed has nothing in the tables to resume from: it
        // needs the on-failure record replayed (a known gap, counted apart).
        let requests = mem
            .items(&t.workflow_request())
            .iter()
            .filter(|r| {
                r.get(attr::WORKFLOW_REQUEST_ID)
                    .and_then(whimbrel_core::store::as_s)
                    .is_none_or(|id| !lost.contains(id))
            })
            .count();
        if wfs.len() < requests {
            v.push(format!(
                "{requests} requests but {} workflow execs",
                wfs.len()
            ));
        }
        for w in &wfs {
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
            if w.planned_epoch.is_some() {
                // The exec is marked planned only after its plan item is
                // stored, and both agree on the activity count.
                let planned = stored_plans(mem, t).remove(&w.workflow_exec_id);
                match planned {
                    None => v.push(format!(
                        "workflow {} is planned but has no readable plan item",
                        w.workflow_exec_id
                    )),
                    Some(p) if p.plan.activities.len() as u64 != w.activity_count => {
                        v.push(format!(
                            "workflow {} counts {} activities but its plan has {}",
                            w.workflow_exec_id,
                            w.activity_count,
                            p.plan.activities.len()
                        ))
                    }
                    Some(_) => {}
                }
            }
            if w.state.is_terminal() && w.planned_epoch.is_some() {
                v.extend(crate::counts::final_violations(&acts, w));
                let counts = contract::EndCounts {
                    completed: w.completed_count,
                    failed: w.failed_count,
                    cancelled: w.cancelled_count,
                };
                let expected = contract::workflow_outcome(w.activity_count, counts);
                // An execution timeout ends the workflow FAILED whatever its
                // activities do afterwards; it must not end before it.
                let expired = w.state == WorkflowState::Failed
                    && w.error
                        .as_deref()
                        .is_some_and(|e| e.starts_with("execution timeout"))
                    && whimbrel_core::engine::outcome::execution_deadline(w)
                        .is_some_and(|d| w.end_time_epoch.is_some_and(|end| end >= d));
                if expected != Some(w.state) && !expired {
                    v.push(format!(
                        "workflow {} ended {} but its counts say {expected:?}",
                        w.workflow_exec_id, w.state
                    ));
                }
            }
        }
        for a in &acts {
            if !a.state.is_terminal() {
                v.push(format!(
                    "activity {} stuck in {} (attempt {})",
                    a.activity_exec_id, a.state, a.attempt
                ));
            }
            if a.due_epoch.is_some() {
                v.push(format!(
                    "activity {} still has an obligation ({})",
                    a.activity_exec_id, a.state
                ));
            }
            if a.attempt > cfg.max_launch_attempts {
                v.push(format!(
                    "activity {} has {} attempts",
                    a.activity_exec_id, a.attempt
                ));
            }
            if a.state == ActivityState::Completed {
                // A wide join keeps no list: its prerequisites hold a slot.
                let prereqs: serde_json::Map<String, serde_json::Value> = acts
                    .iter()
                    .filter(|p| {
                        a.prerequisites.contains(&p.activity_exec_id)
                            || p.join_slots.contains_key(&a.activity_exec_id)
                    })
                    .map(|p| {
                        (
                            p.activity_name.clone(),
                            p.output.clone().unwrap_or_default(),
                        )
                    })
                    .collect();
                let input = plans
                    .get(&a.workflow_exec_id)
                    .and_then(|p| p.plan.activities.iter().find(|x| x.name == a.activity_name))
                    .and_then(|x| x.input.clone())
                    .unwrap_or_default();
                let expected = output_of(
                    &a.activity_name,
                    &input,
                    &serde_json::Value::Object(prereqs),
                );
                if a.output.as_ref() != Some(&expected) {
                    v.push(format!(
                        "activity {}: output {:?} is not {expected}",
                        a.activity_exec_id, a.output
                    ));
                }
            }
            if a.state == ActivityState::TimedOut {
                let at = a
                    .history
                    .iter()
                    .find(|h| h.state == ActivityState::TimedOut)
                    .map_or(i64::MAX, |h| h.at_epoch);
                let early = reports.iter().find(|r| {
                    r.activity_exec_id == a.activity_exec_id
                        && r.attempt == a.attempt
                        && matches!(r.transition.as_str(), "COMPLETED" | "FAILED")
                        && r.at + cfg.report_grace_seconds + 2 <= at
                });
                if let Some(r) = early {
                    v.push(format!(
                        "activity {} TIMED_OUT at {at} though its {} report {} was written at {} (outcomes {:?}; history {:?})",
                        a.activity_exec_id, r.transition, r.event_id, r.at, outcomes.get(&r.event_id),
                        a.history.iter().map(|h| format!("{}@{} by {}", h.state, h.at_epoch, h.full_event_id(&a.activity_exec_id))).collect::<Vec<_>>()
                    ));
                }
            }
        }
        for (id, outs) in outcomes {
            if !lost.contains(id) && outs.iter().all(|o| matches!(o, Outcome::Retry(_))) {
                v.push(format!("row {id} was only ever retried: {outs:?}"));
            }
        }
        v
    }
}
