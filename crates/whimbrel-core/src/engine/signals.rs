//! Signals (design.md § 9.2): a client inserts a row of `whimbrel_signal`
//! naming a workflow execution, a signal name, an id and an input; each
//! signal wait of that name (a `signal` node) COMPLETES with the input as
//! its output. The row is the truth and is never deleted while the
//! workflow runs, so the two orders meet:
//!
//! * a node released to RUNNING reads its name's rows right after that
//!   write (`Engine::deliver_kept_signal`), so a signal sent before the
//!   node waited is delivered then;
//! * the stream handler of a row ([`Engine::receive_signal`]) completes
//!   each node of its name that is RUNNING already.
//!
//! Both may try for one node: the decree is conditioned on RUNNING and its
//! event id names the node and the signal
//! ([`ids::EngineStep::SignalDelivered`]), so one wins and a redelivery
//! changes nothing. The monitor, before it times a signal wait out, reads
//! once more (the sweep's `deliver_kept_signal`), so a release that died
//! between its write and its read loses nothing.

use tracing::{info, warn};
use whimbrel_rules::keys::WorkflowRef;

use super::episodes::Append;
use super::{Applied, Engine, EngineError};
use crate::contract::{ActivityState, NodeKind, Transition, WorkflowState};
use crate::decider::{Decision, EventKind};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{
    signal_copy_log_key, signal_key_prefix, ActivityExec, SignalRow, WorkflowExec,
    MAX_SIGNALS_PER_EXECUTION, MAX_SIGNALS_READ,
};
use crate::store::{s, Cmp, KeyCond, Store, StoreError};
use whimbrel_rules::attr;
use whimbrel_rules::decide::episodes::{self, Appended, EpisodeState, StartAt};
use whimbrel_rules::decide::{Details, Source};

impl<L: Launcher> Engine<L> {
    /// Apply a signal row from the stream: complete each signal wait of
    /// its name that is RUNNING (one not released yet takes it when it
    /// is). Safe to apply again.
    ///
    /// Returns [`Applied::State`] COMPLETED when it completed a node,
    /// [`Applied::Workflow`] RUNNING when it is kept for later (the
    /// workflow has not started, or its nodes of that name do not wait
    /// yet).
    ///
    /// Errors: [`EngineError::Rejected`] for a malformed row, an unknown
    /// or ended workflow, or a name no node of its plan waits for (the
    /// row stays: a workflow started later still finds it);
    /// [`EngineError::Retry`] when DynamoDB is unavailable.
    pub async fn receive_signal(&self, row: &SignalRow) -> Result<Applied, EngineError> {
        if let Some(why) = row.invalid() {
            return Err(EngineError::Rejected(format!(
                "signal {:?} for {}: {why}",
                row.signal_key, row.workflow_exec_id
            )));
        }
        let wf = self.signalled_workflow(row).await?;
        let row = &self.kept(row).await?;
        if wf.state == WorkflowState::Requested {
            info!(workflow_exec_id = %row.workflow_exec_id, signal = %row.signal_key, "signal kept: the workflow has not started");
            return Ok(Applied::Workflow(wf.state));
        }
        let waits = self.signal_waits(&wf, &row.name).await?;
        if waits.is_empty() && self.signal_event(&wf, row).await? {
            return Ok(Applied::Workflow(wf.state));
        }
        if waits.is_empty() {
            return Err(EngineError::Rejected(format!(
                "signal {:?}: no node of workflow exec {} waits for {:?}",
                row.signal_key, wf.workflow_exec_id, row.name
            )));
        }
        let mut applied = Applied::Workflow(wf.state);
        let mut taken = false;
        for id in waits {
            // A wait its decision committed but did not put yet takes the
            // signal at its release.
            let key = self.activity_key(&id, &wf.workflow_exec_id);
            let table = self.store.tables().activity_exec();
            let Some(exec) = self.store.get::<ActivityExec>(&table, key).await? else {
                continue;
            };
            if exec.state == ActivityState::Running
                && self.deliver(exec, row).await? == Some(ActivityState::Completed)
            {
                applied = Applied::State(ActivityState::Completed);
            }
            let after = self.load_activity(&id, &wf.workflow_exec_id).await?;
            taken |= after.has_judged(&delivery_id(&id, row));
        }
        // A wait that ended before this signal reached it (it timed out,
        // or another signal won it) no longer waits: a signal no wait
        // took, once none of its name waits, is an event (issue 42 A.2).
        if !taken && wf.is_episodic() && self.signal_waits(&wf, &row.name).await?.is_empty() {
            self.signal_event(&wf, row).await?;
        }
        Ok(applied)
    }

    /// The activity exec ids of the nodes of `wf` that wait for signal
    /// `name`: its plan's, or an episodic execution's open ones not ended
    /// (an ended wait stays open until its end is appended to the log, and
    /// no longer waits: issue 42 A.2), and those a committed decision
    /// opened whose items its owed effects have not put yet (their release
    /// takes the signal: issue 42 A.10, [`Self::owed_waits`]).
    ///
    /// Errors: [`EngineError::Retry`] when its plan is not stored (yet)
    /// or DynamoDB is unavailable.
    async fn signal_waits(
        &self,
        wf: &WorkflowExec,
        name: &str,
    ) -> Result<Vec<String>, EngineError> {
        let id = &wf.workflow_exec_id;
        if wf.is_episodic() {
            let key = WorkflowRef::new(id, &wf.workflow_name);
            let state = self.episode_state(key).await?;
            let nodes = self.nodes_named(id, state.open_nodes.iter()).await?;
            let unput: Vec<&str> = (state.open_nodes.iter())
                .filter(|n| !nodes.contains_key(*n))
                .map(String::as_str)
                .collect();
            let mut waits: Vec<String> = nodes
                .into_values()
                .filter(|a| a.runner.runs.signal_name() == Some(name))
                .filter(|a| !a.state.is_terminal())
                .map(|a| a.activity_exec_id)
                .collect();
            waits.extend(self.owed_waits(key, &state, &unput, name).await?);
            return Ok(waits);
        }
        let plan = self
            .load_plan(id, &wf.workflow_name)
            .await?
            .ok_or_else(|| EngineError::Retry(format!("{id}: no stored plan")))?;
        Ok(plan
            .plan
            .activities
            .iter()
            .filter(|a| a.signal.as_deref() == Some(name))
            .map(|a| ids::activity_exec_id(id, &a.name))
            .collect())
    }

    /// The activity exec ids of the nodes `unput` (open, with no item
    /// yet) that the decisions of `wf` whose effects are owed (as read in
    /// `state`) schedule as waits for signal `name`. None when no effects
    /// are owed.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn owed_waits(
        &self,
        wf: WorkflowRef<'_>,
        state: &EpisodeState,
        unput: &[&str],
        name: &str,
    ) -> Result<Vec<String>, EngineError> {
        let mut waits = vec![];
        if unput.is_empty() {
            return Ok(waits);
        }
        for number in state.decisions_applied + 1..=state.decision_count {
            for d in self.recorded_decisions(wf, number).await? {
                let Decision::Schedule { activities } = d else {
                    continue;
                };
                waits.extend(
                    (activities.iter())
                        .filter(|a| a.signal.as_deref() == Some(name))
                        .filter(|a| unput.contains(&a.name.as_str()))
                        .map(|a| ids::activity_exec_id(wf.exec_id, &a.name)),
                );
            }
        }
        Ok(waits)
    }

    /// A signal no node waits for, appended to the log of episodic
    /// execution `wf` when its decider is consulted on signals (design.md
    /// § 10.1); the row stays, so a wait scheduled later still completes
    /// with it. Returns whether it is an event of the log (false too
    /// before the first answer committed: [`Engine::take_early_signals`]
    /// appends it then).
    async fn signal_event(&self, wf: &WorkflowExec, row: &SignalRow) -> Result<bool, EngineError> {
        if !takes_signals(wf) {
            return Ok(false);
        }
        let key = WorkflowRef::new(&wf.workflow_exec_id, &wf.workflow_name);
        let (source, build) = self.signal_append(key, row);
        self.append_to_log(key, &source, build).await
    }

    /// The signals sent to episodic execution `wf` before its first answer
    /// committed (design.md § 10.2, "Signals before the first decision"):
    /// their stream records found it REQUESTED, unknown or taking no event
    /// yet, and kept the rows. Decision 1's effects (`decisions`, as
    /// recorded) append each valid one as an event, in the order clients
    /// dated them, when its decider is consulted on signals, unless a node
    /// decision 1 scheduled waits for its name (its release takes the
    /// signal, as it would a row sent before it waited; judged from the
    /// record, not the open nodes, which a wait completed by its release
    /// has left). Each append is once per signal (its source), so a rerun
    /// of the effects and the signal's own late stream record add nothing.
    /// An append normally starts nothing (the effects are still owed, and
    /// their caller drives the next decision); one that starts a decision
    /// (another applier marked decision 1 written meanwhile) runs it.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn take_early_signals(
        &self,
        wf: &WorkflowExec,
        decisions: &[Decision],
    ) -> Result<(), EngineError> {
        if !takes_signals(wf) {
            return Ok(());
        }
        let heads = self.heads(&wf.workflow_exec_id, None).await?;
        let waited: Vec<&str> = (decisions.iter())
            .flat_map(|d| match d {
                Decision::Schedule { activities } => activities.as_slice(),
                _ => &[],
            })
            .filter_map(|a| a.signal.as_deref())
            .collect();
        let key = WorkflowRef::new(&wf.workflow_exec_id, &wf.workflow_name);
        for head in heads
            .iter()
            .filter(|h| !waited.contains(&h.row.name.as_str()))
        {
            let Some(row) = &self.whole(head).await? else {
                continue;
            };
            let (source, build) = self.signal_append(key, row);
            if let Append::Appended { started: Some(id) } =
                self.append_only(key, &source, build).await?
            {
                self.run_started(key, &id).await?;
            }
        }
        Ok(())
    }

    /// The source of signal `row` in the log of `wf`, and the builder of
    /// its append: a `signal` event with the signal's name and input.
    fn signal_append<'a>(
        &'a self,
        wf: WorkflowRef<'a>,
        row: &SignalRow,
    ) -> (String, impl Fn(&EpisodeState, StartAt) -> Appended + 'a) {
        let source = format!("signal:{}", row.signal_key);
        let details = serde_json::json!({
            "signal": row.name,
            "output": row.input.clone().unwrap_or(serde_json::Value::Null),
        });
        let at = row.when_epoch.unwrap_or_else(|| self.now().epoch);
        let t = self.store.tables();
        let event_source = source.clone();
        let build = move |state: &EpisodeState, start: StartAt| {
            let event = episodes::NewEvent {
                kind: EventKind::Signal,
                source: &event_source,
                at_epoch: at,
                details: details.clone(),
            };
            episodes::append_event(t, wf, state, event, Some(start))
        };
        (source, build)
    }

    /// The running workflow a signal names.
    ///
    /// Errors: [`EngineError::Rejected`] when it is unknown or ended.
    async fn signalled_workflow(&self, row: &SignalRow) -> Result<WorkflowExec, EngineError> {
        let id = &row.workflow_exec_id;
        let unknown = || EngineError::Rejected(format!("signal for unknown workflow exec {id:?}"));
        let name = ids::name_of(id).ok_or_else(unknown)?;
        let wf: WorkflowExec = self
            .store
            .get(
                &self.store.tables().workflow_exec(),
                self.workflow_key(id, name),
            )
            .await?
            .ok_or_else(unknown)?;
        if wf.state.is_terminal() {
            return Err(EngineError::Rejected(format!(
                "signal {:?} for workflow exec {id}: it already ended {}",
                row.signal_key, wf.state
            )));
        }
        Ok(wf)
    }

    /// Deliver the earliest kept signal of `exec`'s name, if `exec` is a
    /// RUNNING signal wait and one was sent: returns whether it COMPLETED.
    /// Called by the release right after its RUNNING write, and by the
    /// monitor before it times the wait out.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn deliver_kept_signal(
        &self,
        exec: &ActivityExec,
    ) -> Result<bool, EngineError> {
        let Some(name) = exec.runner.runs.signal_name() else {
            return Ok(false);
        };
        if exec.state != ActivityState::Running || exec.runner.kind() != NodeKind::Signal {
            return Ok(false);
        }
        for head in self.heads(&exec.workflow_exec_id, Some(name)).await? {
            if let Some(first) = self.whole(&head).await? {
                let reached = self.deliver(exec.clone(), &first).await?;
                return Ok(reached == Some(ActivityState::Completed));
            }
        }
        Ok(false)
    }

    /// The signals kept for signal wait `exec`, now ended, that it did
    /// not take: in an episodic execution consulted on signals, once no
    /// wait of that name waits, each valid one is taken by no wait, so it
    /// is an event of the log, in the order clients dated them (issue 42
    /// A.2: "a signal no node waits for is an event" holds for signals
    /// kept for a wait that took another). Part of the settle's end
    /// obligation (`end_counted`), before the node's end is appended, so
    /// a function that dies between the two leaves it owed; each append
    /// is once per signal.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn untaken_signals_to_events(
        &self,
        exec: &ActivityExec,
    ) -> Result<(), EngineError> {
        let Some(name) = exec.runner.runs.signal_name() else {
            return Ok(());
        };
        if exec.runner.kind() != NodeKind::Signal || !exec.state.is_terminal() {
            return Ok(());
        }
        let heads = self.heads(&exec.workflow_exec_id, Some(name)).await?;
        let taken = |h: &&Head| exec.has_judged(&delivery_id(&exec.activity_exec_id, &h.row));
        let rest: Vec<&Head> = heads.iter().filter(|h| !taken(h)).collect();
        if rest.is_empty() {
            return Ok(());
        }
        let wf = (self.load_workflow(&exec.workflow_exec_id, &exec.workflow_name)).await?;
        if !takes_signals(&wf) || !self.signal_waits(&wf, name).await?.is_empty() {
            return Ok(());
        }
        for head in rest {
            if let Some(row) = self.whole(head).await? {
                self.signal_event(&wf, &row).await?;
            }
        }
        Ok(())
    }

    /// The engine's copy of signal `row` (issue 42 B.3), once it counts
    /// among the signals its execution keeps (issue 42 B.4,
    /// [`episodes::signal_admit`]): put now from `row` when there is none
    /// (the first time the engine applies it: its INSERT record, or a look
    /// that found the row before its record was applied), else the copy
    /// put first. What a signal delivers, appends or orders by is its
    /// copy, so a signaller's later put over its row (another input, a
    /// spoiled name) changes nothing.
    ///
    /// Errors: [`EngineError::Rejected`] for a signal past
    /// [`MAX_SIGNALS_PER_EXECUTION`]; [`EngineError::Retry`] when DynamoDB
    /// is unavailable.
    async fn kept(&self, row: &SignalRow) -> Result<SignalRow, EngineError> {
        let t = self.store.tables();
        match self.store.update(episodes::signal_admit(t, row)).await {
            Err(StoreError::ConditionFailed) => {
                return Err(EngineError::Rejected(format!(
                    "signal {:?} for {}: the execution keeps {MAX_SIGNALS_PER_EXECUTION} signals already; at most {MAX_SIGNALS_PER_EXECUTION} are kept",
                    row.signal_key, row.workflow_exec_id
                )))
            }
            other => other?,
        };
        if self.store.put_if(episodes::signal_copy_put(t, row)).await? {
            return Ok(row.clone());
        }
        let copy: Option<SignalRow> = self.store.get(&t.decision(), copy_key(row)).await?;
        Ok(copy.unwrap_or_else(|| row.clone()))
    }

    /// The signals sent to the workflow exec, or only those of `name`, as
    /// a look first reads them (issue 42 B.4): without their inputs, in
    /// the order they are taken ([`SignalRow::order`]), those judged
    /// invalid by what they show left out. The engine's copies
    /// ([`Engine::kept`]), and the rows that have none yet (their INSERT
    /// records not applied yet), each a consistent Query (`begins_with`)
    /// of at most [`MAX_SIGNALS_READ`] in key order; more are logged and
    /// left unread. A row with a copy is its copy. [`Engine::whole`] reads
    /// one whole.
    ///
    /// Errors: the store's; a row that is not a signal is left out.
    async fn heads(
        &self,
        workflow_exec_id: &str,
        name: Option<&str>,
    ) -> Result<Vec<Head>, EngineError> {
        let t = self.store.tables();
        let prefix = name.map(signal_key_prefix);
        let copy_prefix = signal_copy_log_key(prefix.as_deref().unwrap_or_default());
        let copies = (t.decision(), attr::LOG_KEY, Some(copy_prefix));
        let mut heads: Vec<Head> = (self.query_signals(workflow_exec_id, copies).await?)
            .into_iter()
            .map(|row| Head { row, copied: true })
            .collect();
        let rows = (t.signal(), attr::SIGNAL_KEY, prefix);
        for row in self.query_signals(workflow_exec_id, rows).await? {
            if !heads.iter().any(|k| k.row.signal_key == row.signal_key) {
                heads.push(Head { row, copied: false });
            }
        }
        heads.retain(|h| h.row.invalid().is_none());
        heads.sort_by(|a, b| a.row.order().cmp(&b.row.order()));
        Ok(heads)
    }

    /// Signal `head` whole, as it is delivered: its copy, or its row read
    /// now and kept ([`Engine::kept`]). `None` for a row gone (TTL),
    /// malformed, invalid (its input) or past the execution's limit: it is
    /// never taken, and the look goes on to the next.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn whole(&self, head: &Head) -> Result<Option<SignalRow>, EngineError> {
        let t = self.store.tables();
        if head.copied {
            return Ok(self.store.get(&t.decision(), copy_key(&head.row)).await?);
        }
        let key = crate::store::Item::from([
            (attr::WORKFLOW_EXEC_ID.into(), s(&head.row.workflow_exec_id)),
            (attr::SIGNAL_KEY.into(), s(&head.row.signal_key)),
        ]);
        let row: SignalRow = match self.store.get(&t.signal(), key).await {
            Ok(Some(row)) => row,
            Ok(None) | Err(StoreError::Shape { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if let Some(why) = row.invalid() {
            info!(signal = %row.signal_key, workflow_exec_id = %row.workflow_exec_id, why, "an invalid signal row is never taken");
            return Ok(None);
        }
        match self.kept(&row).await {
            Ok(copy) => Ok(Some(copy)),
            Err(EngineError::Rejected(why)) => {
                info!(why, "a signal past its execution's limit is never taken");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The signals of one Query of `table` (its hash key the workflow
    /// exec id) whose range key `range` begins with `prefix` (`None`:
    /// all; DynamoDB refuses an empty `begins_with`), without their
    /// inputs ([`HEAD`]): at most [`MAX_SIGNALS_READ`]; more are logged
    /// and left unread.
    ///
    /// Errors: the store's; an item that is not a signal is left out.
    async fn query_signals(
        &self,
        workflow_exec_id: &str,
        (table, range, prefix): (String, &str, Option<String>),
    ) -> Result<Vec<SignalRow>, EngineError> {
        let key = KeyCond {
            hash: (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
            range: prefix.map(|p| (range.into(), Cmp::BeginsWith, s(p))),
        };
        let (items, more) = (self.store)
            .query_at_most((&table, None), key, MAX_SIGNALS_READ, &HEAD)
            .await?;
        if more {
            warn!(
                workflow_exec_id,
                table,
                max = MAX_SIGNALS_READ,
                "more signals than are read; the rest are left unread"
            );
        }
        Ok(items
            .into_iter()
            .filter_map(|i| match serde_dynamo::from_item::<_, SignalRow>(i) {
                Ok(row) => Some(row),
                Err(e) => {
                    warn!(workflow_exec_id, error = %e, "a malformed signal row is left out");
                    None
                }
            })
            .collect())
    }

    /// COMPLETE the signal wait `exec` with `row`'s input (the engine's
    /// decree, event id `signal:(activity):(signal_key)`); returns the
    /// state reached (`None` when it had ended or been cancelled).
    async fn deliver(
        &self,
        exec: ActivityExec,
        row: &SignalRow,
    ) -> Result<Option<ActivityState>, EngineError> {
        let event_id = delivery_id(&exec.activity_exec_id, row);
        let mut details = Details {
            output: Some(row.input.clone().unwrap_or(serde_json::Value::Null)),
            at: Some(self.now().epoch),
            ..Details::default()
        };
        // A large input goes to an output row, as a large report's does.
        super::payloads::output_by_row(&mut details, &event_id);
        let id = exec.activity_exec_id.clone();
        let reached = self
            .decree(
                exec,
                Transition::Completed,
                Source::Engine,
                &event_id,
                details,
            )
            .await?;
        if reached == Some(ActivityState::Completed) {
            info!(activity_exec_id = %id, signal = %row.signal_key, "signal delivered");
            crate::metrics::signal_delivered();
        }
        Ok(reached)
    }
}

/// Send a signal: the client's one write (design.md § 9.2), a PutItem of
/// `row` into `whimbrel_signal` unless a row with its key exists. Returns
/// false for a signal id sent already (the first row stands). Check the
/// row first ([`SignalRow::invalid`]): the engine rejects an invalid one.
///
/// Errors: the store's.
pub async fn send_signal(store: &Store, row: &SignalRow) -> Result<bool, StoreError> {
    store
        .put_new(&store.tables().signal(), attr::WORKFLOW_EXEC_ID, row)
        .await
}

/// Whether episodic execution `wf`'s decider is consulted on signals no
/// node waits for (its `decide_on`, design.md § 10.1).
fn takes_signals(wf: &WorkflowExec) -> bool {
    (wf.decide_on.as_ref()).is_some_and(|k| k.contains(&EventKind::Signal))
}

/// The engine step that delivers signal `row` to wait `activity_exec_id`:
/// `signal:(activity):(signal_key)`, on the wait's history once it took it.
fn delivery_id(activity_exec_id: &str, row: &SignalRow) -> String {
    ids::EngineStep::SignalDelivered(activity_exec_id, &row.signal_key).event_id()
}

/// The attributes a look reads of each signal: all but its input (and
/// its TTL), so a look holds at most 200 small rows however large the
/// signals (issue 42 B.4).
const HEAD: [&str; 5] = [
    attr::WORKFLOW_EXEC_ID,
    attr::SIGNAL_KEY,
    "name",
    "signal_id",
    attr::WHEN_EPOCH,
];

/// A signal as a look first reads it ([`HEAD`]): its row without its
/// input, and whether that is the engine's copy (else a row whose INSERT
/// record is not applied yet).
struct Head {
    row: SignalRow,
    copied: bool,
}

/// The key of the engine's copy of signal `row` on `whimbrel_decision`.
fn copy_key(row: &SignalRow) -> crate::store::Item {
    crate::store::Item::from([
        (attr::WORKFLOW_EXEC_ID.into(), s(&row.workflow_exec_id)),
        (
            attr::LOG_KEY.into(),
            s(signal_copy_log_key(&row.signal_key)),
        ),
    ])
}
