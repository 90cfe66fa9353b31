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

use super::episodes::Append;
use super::{Applied, Engine, EngineError};
use crate::contract::{ActivityState, NodeKind, Transition, WorkflowState};
use crate::decider::{Decision, EventKind};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{
    earliest, signal_copy_log_key, signal_key_prefix, ActivityExec, SignalRow, WorkflowExec,
    MAX_SIGNALS_READ,
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
        let row = &self.kept(row).await?;
        let wf = self.signalled_workflow(row).await?;
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
            let exec = self.load_activity(&id, &wf.workflow_exec_id).await?;
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
    /// no longer waits: issue 42 A.2).
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
            let open = self
                .episode_state((id, &wf.workflow_name))
                .await?
                .open_nodes;
            let nodes = self.nodes_named(id, open.iter()).await?;
            return Ok(nodes
                .into_values()
                .filter(|a| a.runner.signal_name.as_deref() == Some(name))
                .filter(|a| !a.state.is_terminal())
                .map(|a| a.activity_exec_id)
                .collect());
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
        let key = (wf.workflow_exec_id.as_str(), wf.workflow_name.as_str());
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
        let rows = self.signals_of(&wf.workflow_exec_id, None).await?;
        let waited: Vec<&str> = (decisions.iter())
            .flat_map(|d| match d {
                Decision::Schedule { activities } => activities.as_slice(),
                _ => &[],
            })
            .filter_map(|a| a.signal.as_deref())
            .collect();
        let mut early: Vec<&SignalRow> = (rows.iter())
            .filter(|r| r.invalid().is_none() && !waited.contains(&r.name.as_str()))
            .collect();
        early.sort_by(|a, b| a.order().cmp(&b.order()));
        let key = (wf.workflow_exec_id.as_str(), wf.workflow_name.as_str());
        for row in early {
            let row = &self.kept(row).await?;
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
        wf: (&'a str, &'a str),
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
        let Some(name) = exec.runner.signal_name.as_deref() else {
            return Ok(false);
        };
        if exec.state != ActivityState::Running || exec.runner.kind() != NodeKind::Signal {
            return Ok(false);
        }
        let rows = self.signals_named(&exec.workflow_exec_id, name).await?;
        let Some(first) = earliest(&rows) else {
            return Ok(false);
        };
        let first = self.kept(first).await?;
        Ok(self.deliver(exec.clone(), &first).await? == Some(ActivityState::Completed))
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
        let Some(name) = exec.runner.signal_name.as_deref() else {
            return Ok(());
        };
        if exec.runner.kind() != NodeKind::Signal || !exec.state.is_terminal() {
            return Ok(());
        }
        let rows = self.signals_named(&exec.workflow_exec_id, name).await?;
        let taken = |r: &SignalRow| exec.has_judged(&delivery_id(&exec.activity_exec_id, r));
        let mut rest: Vec<&SignalRow> = (rows.iter())
            .filter(|r| r.invalid().is_none() && !taken(r))
            .collect();
        if rest.is_empty() {
            return Ok(());
        }
        let wf = (self.load_workflow(&exec.workflow_exec_id, &exec.workflow_name)).await?;
        if !takes_signals(&wf) || !self.signal_waits(&wf, name).await?.is_empty() {
            return Ok(());
        }
        rest.sort_by(|a, b| a.order().cmp(&b.order()));
        for row in rest {
            let row = self.kept(row).await?;
            self.signal_event(&wf, &row).await?;
        }
        Ok(())
    }

    /// The engine's copy of signal `row` (issue 42 B.3): put now from
    /// `row` when there is none (the first time the engine applies it: its
    /// INSERT record, or a look that found the row before its record was
    /// applied), else the copy put first. What a signal delivers, appends
    /// or orders by is its copy, so a signaller's later put over its row
    /// (another input, a spoiled name) changes nothing.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn kept(&self, row: &SignalRow) -> Result<SignalRow, EngineError> {
        let t = self.store.tables();
        if self.store.put_if(episodes::signal_copy_put(t, row)).await? {
            return Ok(row.clone());
        }
        let key = crate::store::Item::from([
            (attr::WORKFLOW_EXEC_ID.into(), s(&row.workflow_exec_id)),
            (
                attr::LOG_KEY.into(),
                s(signal_copy_log_key(&row.signal_key)),
            ),
        ]);
        let copy: Option<SignalRow> = self.store.get(&t.decision(), key).await?;
        Ok(copy.unwrap_or_else(|| row.clone()))
    }

    /// Every signal row of `name` sent to the workflow exec (a consistent
    /// Query: `begins_with(signal_key, "name#")`).
    ///
    /// Errors: the store's; a row that is not a signal is left out.
    pub async fn signals_named(
        &self,
        workflow_exec_id: &str,
        name: &str,
    ) -> Result<Vec<SignalRow>, EngineError> {
        self.signals_of(workflow_exec_id, Some(name)).await
    }

    /// The signals sent to the workflow exec, or only those of `name`:
    /// the engine's copies ([`Engine::kept`]), and the rows that have none
    /// yet (their INSERT records not applied yet), each a consistent Query
    /// (`begins_with`) of at most [`MAX_SIGNALS_READ`] in key order; more
    /// are logged and left unread. A row with a copy is its copy.
    ///
    /// Errors: the store's; a row that is not a signal is left out.
    async fn signals_of(
        &self,
        workflow_exec_id: &str,
        name: Option<&str>,
    ) -> Result<Vec<SignalRow>, EngineError> {
        let t = self.store.tables();
        let prefix = name.map(signal_key_prefix);
        let copy_prefix = signal_copy_log_key(prefix.as_deref().unwrap_or_default());
        let copies = (t.decision(), attr::LOG_KEY, Some(copy_prefix));
        let mut kept = self.query_signals(workflow_exec_id, copies).await?;
        let rows = (t.signal(), attr::SIGNAL_KEY, prefix);
        for row in self.query_signals(workflow_exec_id, rows).await? {
            if !kept.iter().any(|k| k.signal_key == row.signal_key) {
                kept.push(row);
            }
        }
        Ok(kept)
    }

    /// The signals of one Query of `table` (its hash key the workflow
    /// exec id) whose range key `range` begins with `prefix` (`None`:
    /// all; DynamoDB refuses an empty `begins_with`): at most
    /// [`MAX_SIGNALS_READ`]; more are logged and left unread.
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
            .query_at_most(&table, None, key, MAX_SIGNALS_READ)
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
