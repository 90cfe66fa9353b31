//! The effects of a committed decision (design.md § 10.3, § 10.5), as
//! writes: the items of the nodes it schedules, their links to
//! prerequisites still open, its markers, and the mark that its effects
//! are all written. Each is idempotent, so the monitor may write a
//! decision's effects again after a crash between any two of them.

use crate::keys::WorkflowRef;
use serde_json::Value;

use crate::attr;
use crate::config::EngineConfig;
use crate::contract::{ActivityState, WorkflowState};
use crate::decider::{Decision, DecisionsAnswer};
use crate::ids;
use crate::keys::Tables;
use crate::model::{ActivityExec, ActivityExecDependency, WorkflowExec};
use crate::plan::{Plan, PlannedActivity};
use crate::write::{av, n, s, Action, Cond, Item, UpdateRequest, Value as Av, Write};

use super::episodes::{decision_log_key, DecisionRecord, EpisodeState};

/// How a request row started by `continue_as_new` names its source
/// (`source`): this prefix and the execution it continues.
pub const CONTINUED_FROM_SOURCE: &str = "continue_as_new:";

/// The execution a request's `source` says it continues, if any
/// ([`CONTINUED_FROM_SOURCE`]).
pub fn continued_from(source: Option<&str>) -> Option<String> {
    source?
        .strip_prefix(CONTINUED_FROM_SOURCE)
        .map(str::to_string)
}

/// The REQUESTED items and dependency edges of `nodes`, scheduled by
/// decision `number` of the episodic execution `wf`. A prerequisite may be
/// a node of the same answer or one scheduled before: every node lists its
/// prerequisites and counts them pending; those scheduled before learn of
/// it by [`link_dependent`]. Nodes are counted nowhere
/// ([`crate::model::Links::scheduled_by`]): the decider ends the
/// execution.
pub fn decided_items(
    wf: &WorkflowExec,
    nodes: &[PlannedActivity],
    number: u64,
    config: &EngineConfig,
) -> (Vec<ActivityExec>, Vec<ActivityExecDependency>) {
    let inside: std::collections::HashSet<&str> = nodes.iter().map(|a| a.name.as_str()).collect();
    // The plan `activity_items` builds from: the nodes with the
    // prerequisites of this answer only (lists, never join groups).
    let own = nodes
        .iter()
        .map(|a| PlannedActivity {
            depends_on: (a.depends_on.iter())
                .filter(|p| inside.contains(p.as_str()))
                .cloned()
                .collect(),
            ..a.clone()
        })
        .collect();
    let (mut items, _) = super::items::activity_items(wf, &Plan::of(own), config);
    let mut edges = vec![];
    for (item, node) in items.iter_mut().zip(nodes) {
        let prerequisites: Vec<String> = (node.depends_on.iter())
            .map(|p| ids::activity_exec_id(&wf.workflow_exec_id, p))
            .collect();
        edges.extend(
            prerequisites
                .iter()
                .enumerate()
                .map(|(i, p)| ActivityExecDependency {
                    activity_exec_dependency: ids::dependency_id(&item.activity_exec_id, i),
                    activity_exec_id: item.activity_exec_id.clone(),
                    prerequisite_activity_exec_id: p.clone(),
                    workflow_exec_id: wf.workflow_exec_id.clone(),
                }),
        );
        let links = &mut item.links;
        links.pending_dependency_count = prerequisites.len() as u64;
        links.prerequisites = prerequisites;
        // Listed whole, however wide: an episodic execution has no stored
        // plan to derive them from.
        links.dependents = (nodes.iter())
            .filter(|d| d.depends_on.contains(&node.name))
            .map(|d| ids::activity_exec_id(&wf.workflow_exec_id, &d.name))
            .collect();
        links.dependents_in_plan = None;
        links.join_slots.clear();
        links.join_groups = None;
        links.count_slot = None;
        links.closes_children = false;
        links.scheduled_by = Some(number);
    }
    (items, edges)
}

/// The names of the nodes `decisions` (a [`DecisionRecord`]'s, as
/// validated: a JSON array of [`Decision`]s) schedule, in order. A record
/// the engine wrote always reads; one that does not schedules nothing.
///
/// [`DecisionRecord`]: super::episodes::DecisionRecord
pub fn scheduled_names(decisions: &Value) -> Vec<String> {
    let decisions: Vec<Decision> = serde_json::from_value(decisions.clone()).unwrap_or_default();
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Schedule { activities } => Some(activities),
            _ => None,
        })
        .flatten()
        .map(|a| a.name.clone())
        .collect()
}

/// `update` of the workflow item, opening the nodes `names` (design.md
/// § 10.9): added to its open nodes and its activity count. The accepted
/// commit that schedules them writes it, so its transaction counts them
/// once; their items are put after, each by [`node_put`], by the effects
/// or, if the execution ends first, by its close.
pub fn open_scheduled(update: UpdateRequest, names: &[String]) -> UpdateRequest {
    if names.is_empty() {
        return update;
    }
    update
        .act(Action::Add(attr::OPEN_NODES.into(), Av::Ss(names.to_vec())))
        .act(Action::Add(attr::ACTIVITY_COUNT.into(), n(names.len())))
}

/// The put of a decided node's `item` (an [`ActivityExec`] item), only if
/// no node is there yet: its commit counted it ([`open_scheduled`]), so a
/// put written twice, or by both the effects and the close, creates it
/// once. A false condition means it was created before. "No node" is no
/// `state`, not no item: the activity role's heartbeat (an UpdateItem,
/// which creates what it names) may have left a stub of keys and a
/// heartbeat time under the node's derivable id first, and the node
/// replaces it (issue 42 B.6).
pub fn node_put(t: &Tables, item: Item) -> Write {
    Write::Put {
        table: t.activity_exec(),
        item,
        cond: Some(Cond::not_exists(attr::STATE)),
    }
}

/// The parent's child node `node`, as read, waiting on an execution that
/// continues as new as `next` (a workflow exec id): it waits on `next`
/// from now on (`child_run`, design.md § 9.5). Written in the
/// `continue_as_new` transaction, conditioned on the node as read (RUNNING,
/// its `version`, its `child_run`), so a node cancelled, redriven or moved
/// meanwhile fails the transaction, and the continue is judged again. It
/// adds 1 to `version`, so a write conditioned on the node as read before
/// (a cancel that then closes the child it read) fails and reads it again.
pub fn child_run_move(t: &Tables, node: &ActivityExec, next: &str) -> UpdateRequest {
    let key = crate::keys::activity_key(&node.activity_exec_id, &node.workflow_exec_id);
    let as_read = match &node.runner.child_run {
        Some(run) => Cond::eq(attr::CHILD_RUN, s(run)),
        None => Cond::not_exists(attr::CHILD_RUN),
    };
    UpdateRequest::new(t.activity_exec(), key)
        .when(Cond::eq(attr::STATE, s(ActivityState::Running.as_str())))
        .when(Cond::eq(attr::VERSION, n(node.version)))
        .when(as_read)
        .set(attr::CHILD_RUN, s(ids::child_run(node.generation(), next)))
        .act(Action::Add(attr::VERSION.into(), n(1)))
}

/// Add `dependent` (an activity exec id) to the dependents of the
/// prerequisite `prerequisite` (activity exec id) of execution
/// `workflow_exec_id`, while it has not ended and lists it not yet: its
/// COMPLETED then releases it (design.md § 10.5). A failed condition means
/// it is listed already, or it ended: read it, and release or cancel the
/// dependent as its end says.
pub fn link_dependent(
    t: &Tables,
    prerequisite: &str,
    workflow_exec_id: &str,
    dependent: &str,
) -> UpdateRequest {
    let ended: Vec<_> = [
        ActivityState::Completed,
        ActivityState::Failed,
        ActivityState::TimedOut,
        ActivityState::Cancelled,
    ]
    .iter()
    .map(|st| s(st.as_str()))
    .collect();
    UpdateRequest::new(
        t.activity_exec(),
        crate::keys::activity_key(prerequisite, workflow_exec_id),
    )
    .act(Action::Append(attr::DEPENDENTS.into(), vec![s(dependent)]))
    .when(Cond::exists(attr::ACTIVITY_EXEC_ID))
    .when(Cond::Not(Box::new(Cond::In(attr::STATE.into(), ended))))
    .when(Cond::Not(Box::new(Cond::Contains(
        attr::DEPENDENTS.into(),
        s(dependent),
    ))))
}

/// The range key of marker `name` on `whimbrel_decision`.
pub fn marker_log_key(name: &str) -> String {
    format!("marker#{name}")
}

/// The put of marker `name` = `details`, recorded by decision `number` of
/// `workflow_exec_id`: over an older decision's value only, so a decision
/// written again never puts back what a later one changed.
pub fn marker_put(
    t: &Tables,
    workflow_exec_id: &str,
    name: &str,
    details: &Value,
    number: u64,
) -> Write {
    let mut item = Item::new();
    item.insert(attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id));
    item.insert(attr::LOG_KEY.into(), s(marker_log_key(name)));
    item.insert("name".into(), s(name));
    item.insert("details".into(), av(details));
    item.insert("decision".into(), n(number));
    Write::Put {
        table: t.decision(),
        item,
        cond: Some(Cond::Or(vec![
            Cond::not_exists(attr::LOG_KEY),
            Cond::lt("decision", n(number)),
        ])),
    }
}

/// Decision `number`'s effects are all written (whatever state the
/// execution is in now: a closing decision ends it): the next decision
/// may start. Conditioned on no later decision's mark.
pub fn effects_applied(t: &Tables, wf: WorkflowRef<'_>, number: u64) -> UpdateRequest {
    UpdateRequest::new(t.workflow_exec(), wf.key())
        .set(attr::DECISIONS_APPLIED, n(number))
        .when(Cond::Or(vec![
            Cond::not_exists(attr::DECISIONS_APPLIED),
            Cond::lt(attr::DECISIONS_APPLIED, n(number)),
        ]))
}

/// The due marker of episodic execution `wf` (id, name) with nothing
/// owed as read in `state` (no event waits, no decision in flight, every
/// decision's effects written): its execution deadline, or none. Only
/// while all of that still holds: a write since owes something, and its
/// marker stays. `None` when the marker is there already: a write that
/// changes nothing still costs a write unit.
pub fn idle_due(t: &Tables, wf: WorkflowRef<'_>, state: &EpisodeState) -> Option<UpdateRequest> {
    let rest = at_rest(t, wf, state, state.decision_count);
    (state.due_epoch != rest_due(state)).then_some(rest)
}

/// Decision `number`'s effects are all written and, as `state` says (the
/// state the commit left, [`committed_state`], or one read before the
/// effects), nothing else is owed (it is the last committed
/// decision, no event came since, none is in flight, it does not close
/// the execution): one write marks them written and rests the due marker
/// as [`idle_due`]'s, conditioned on all of that as read (design.md
/// § 10.9: one write instead of two an episode). `None` when something is
/// owed: [`effects_applied`] alone, and the driver goes on.
pub fn applied_at_rest(
    t: &Tables,
    wf: WorkflowRef<'_>,
    number: u64,
    state: &EpisodeState,
) -> Option<UpdateRequest> {
    let owes = state.decision_count != number
        || state.decisions_applied + 1 != number
        || state.decision_id.is_some()
        || state.has_new_events()
        || state.closed_by_decision.is_some()
        || state.state != Some(WorkflowState::Running);
    (!owes).then(|| at_rest(t, wf, state, number - 1).set(attr::DECISIONS_APPLIED, n(number)))
}

/// When an execution with nothing owed is due: its execution deadline
/// (epoch seconds), or never.
fn rest_due(state: &EpisodeState) -> Option<i64> {
    state
        .execution_timeout_seconds
        .map(|secs| state.start_time_epoch.saturating_add(secs))
}

/// The update of `wf` read as `state` moving its due marker to
/// [`rest_due`], only while it is RUNNING, marked due, with no decision in
/// flight or closing it, no event since `state`'s, and decisions applied
/// up to `applied`.
fn at_rest(t: &Tables, wf: WorkflowRef<'_>, state: &EpisodeState, applied: u64) -> UpdateRequest {
    use super::episodes::counter_is;
    let update = UpdateRequest::new(t.workflow_exec(), wf.key())
        .when(Cond::eq(attr::STATE, s(WorkflowState::Running.as_str())))
        .when(Cond::exists(attr::DUE_EPOCH))
        .when(Cond::not_exists(attr::DECISION_ID))
        .when(Cond::not_exists(attr::CLOSED_BY_DECISION))
        .when(counter_is(attr::EVENT_SEQ, state.event_seq))
        .when(counter_is(attr::DECIDED_SEQ, state.decided_seq))
        .when(counter_is(attr::DECISIONS_APPLIED, applied));
    match rest_due(state) {
        Some(at) => update.set(attr::DUE_EPOCH, n(at)),
        None => update.remove(attr::DUE_EPOCH).remove(attr::DUE_SHARD),
    }
}

/// The episode state an accepted, non-closing commit of `record` leaves,
/// from `state`, the one it was built on ([`super::episodes::commit_decision`]):
/// the decision counted and out of flight, its events decided, its node
/// ends taken, its nodes opened. The effects' writer judges the rest by
/// it ([`applied_at_rest`]) instead of reading the item again: every
/// field that write conditions on is checked by DynamoDB, so a guess that
/// is wrong (an event appended since the read) fails it, and the mark
/// alone is written (design.md § 10.9).
pub fn committed_state(state: &EpisodeState, record: &DecisionRecord) -> EpisodeState {
    let names = scheduled_names(&record.decisions);
    let mut after = state.clone();
    after.decision_count = state.decision_number();
    after.decided_seq = record.to_seq;
    after.decision_refusals = 0;
    after.decision_id = None;
    after.decision_attempt = 0;
    after.decision_due_epoch = None;
    after.decision_first_epoch = None;
    let taken: Vec<String> = (state.ended_between(record.from_seq, record.to_seq))
        .into_iter()
        .map(|(seq, node)| super::episodes::ended_entry(seq, node))
        .collect();
    after.ended_events.retain(|e| !taken.contains(e));
    after.activity_count += names.len() as u64;
    for name in names {
        if !after.open_nodes.contains(&name) {
            after.open_nodes.push(name);
        }
    }
    if let Some(kinds) = &record.decide_on {
        after.decide_on = Some(kinds.clone());
    }
    after
}

/// The commit of an episodic execution's first answer (`answer`, to the
/// `workflow_started` request, recorded with its plan) as decision 1 at
/// `now`: the RUNNING workflow's first decision, once, and its record.
/// The workflow is due at once: the decision's effects are owed.
pub fn commit_first(
    t: &Tables,
    wf: WorkflowRef<'_>,
    answer: &DecisionsAnswer,
    now: i64,
) -> Vec<Write> {
    use super::episodes::{due_at, log_item, put_new, running, workflow_update};
    let mut update = workflow_update(t, wf)
        .set(attr::DECISION_COUNT, n(1))
        .when(running())
        .when(Cond::not_exists(attr::DECISION_COUNT));
    if answer.closes() {
        update = update
            .set(attr::CLOSED_BY_DECISION, n(1))
            .when(Cond::not_exists(attr::EVENT_SEQ));
    }
    let record = DecisionRecord {
        decision_id: super::episodes::decision_id(wf.exec_id, 1, 1),
        from_seq: 0,
        to_seq: 0,
        decided_epoch: now,
        decisions: serde_json::to_value(&answer.decisions).unwrap_or(Value::Null),
        refused: None,
        decide_on: answer.decide_on.clone(),
        ended: vec![],
        known_seq: None,
    };
    let update = open_scheduled(update, &scheduled_names(&record.decisions));
    let item = log_item(wf.exec_id, decision_log_key(1), &record);
    vec![
        due_at(update, wf.exec_id, now).into_write(),
        put_new(t, item),
    ]
}
