//! A committed decision's effects (design.md § 10.3, § 10.5): the nodes it
//! schedules (created, linked to prerequisites still open, the ready ones
//! launched), the nodes it cancels, its markers, and the execution's end.
//! Written in the decision's order, each idempotent, under the workflow's
//! due marker until `decisions_applied` says they are all written: a crash
//! between two of them leaves them to the next driver (an event, the
//! monitor).

use std::collections::HashSet;
use whimbrel_rules::keys::WorkflowRef;

use futures::stream::StreamExt;
use serde_json::Value;
use tracing::{info, warn};

use super::apply::Source;
use super::children::ChainLink;
use super::decide::{self, Details, WorkflowMove};
use super::{Engine, EngineError};
use crate::attr;
use crate::contract::{Transition, WorkflowState};
use crate::decider::Decision;
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{EpisodicStart, WorkflowExec, WorkflowRequest};
use crate::plan::PlannedActivity;
use crate::store::{av, s, Item, StoreError};
use whimbrel_rules::decide::decided;
use whimbrel_rules::decide::episodes::{self, DecisionRecord, EpisodeState};

/// Who ends an episodic execution ([`WorkflowMove::closing_decision`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    /// The effect of the decision that closed it.
    Decision,
    /// Anything else (a cancel request, a failed decision attempt): only
    /// while no decision closed it.
    Other,
}

impl<L: Launcher> Engine<L> {
    /// Commit an episodic execution's first answer as decision 1 (once:
    /// a start run again finds it committed) and drive its decisions, the
    /// effects of decision 1 first (design.md § 10.1).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn begin_episodes(
        &self,
        exec: &WorkflowExec,
        start: &EpisodicStart,
    ) -> Result<(), EngineError> {
        let wf = WorkflowRef::new(&exec.workflow_exec_id, &exec.workflow_name);
        let now = self.now().epoch;
        let writes = decided::commit_first(self.store.tables(), wf, &start.answer, now);
        match self.store.transact(writes).await {
            Ok(()) | Err(StoreError::ConditionFailed) => {}
            Err(e) => return Err(e.into()),
        }
        self.drive_decisions(wf).await
    }

    /// Write the effects of committed decision `number` of `wf` (for
    /// decision 1, the signals sent before it committed too:
    /// [`Engine::take_early_signals`]), then mark them written, in the
    /// same write as the due marker's rest when nothing else is owed as
    /// `known` says (`decided::applied_at_rest`:
    /// the state read before the effects, or the one the commit left,
    /// `decided::committed_state`; its write checks all it judged by).
    /// Returns true when it rested: nothing is left to drive.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable or its
    /// record is not there; [`EngineError::Rejected`] when the record
    /// cannot be read as decisions.
    pub(crate) async fn apply_decision(
        &self,
        wf: WorkflowRef<'_>,
        number: u64,
        known: &EpisodeState,
    ) -> Result<bool, EngineError> {
        let decisions = self.recorded_decisions(wf, number).await?;
        if !decisions.is_empty() || number == 1 {
            let exec = self.load_workflow(wf.exec_id, wf.name).await?;
            for d in &decisions {
                self.apply_one(&exec, number, d).await?;
            }
            if number == 1 {
                self.take_early_signals(&exec, &decisions).await?;
            }
        }
        let t = self.store.tables();
        if let Some(rest) = decided::applied_at_rest(t, wf, number, known) {
            match self.store.update(rest).await {
                Ok(_) => return Ok(true),
                Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let done = decided::effects_applied(t, wf, number);
        match self.store.update(done).await {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The decisions committed decision `number` of `wf` took, from its
    /// record: none for a refused answer.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable or the
    /// record is not there; [`EngineError::Rejected`] when it cannot be
    /// read as decisions.
    pub(crate) async fn recorded_decisions(
        &self,
        wf: WorkflowRef<'_>,
        number: u64,
    ) -> Result<Vec<Decision>, EngineError> {
        let key = Item::from([
            (attr::WORKFLOW_EXEC_ID.into(), s(wf.exec_id)),
            (attr::LOG_KEY.into(), s(episodes::decision_log_key(number))),
        ]);
        let table = self.store.tables().decision();
        let record: DecisionRecord = self.store.get(&table, key).await?.ok_or_else(|| {
            EngineError::Retry(format!("{}: decision {number} is not recorded", wf.exec_id))
        })?;
        if record.refused.is_some() {
            return Ok(vec![]);
        }
        serde_json::from_value(record.decisions)
            .map_err(|e| EngineError::Rejected(format!("{}: decision {number}: {e}", wf.exec_id)))
    }

    /// The nodes of `wf` (ended) that committed decisions opened but whose
    /// effects were not marked written when it ended, put now (each only if
    /// new), so the close cancels them as any open node, and an effect
    /// written late finds them there, ended (design.md § 10.9). Run by
    /// every close, the execution timeout's included: a decision that
    /// closes the execution is still owed as it closes (its nodes, put
    /// before its close, are found there), and one the timeout overtook
    /// may not have put them.
    pub(crate) async fn write_owed_nodes(&self, wf: &WorkflowExec) -> Result<(), EngineError> {
        let key = WorkflowRef::new(&wf.workflow_exec_id, &wf.workflow_name);
        let state = self.episode_state(key).await?;
        for number in state.decisions_applied + 1..=state.decision_count {
            for d in self.recorded_decisions(key, number).await? {
                if let Decision::Schedule { activities } = d {
                    self.write_nodes(wf, number, &activities).await?;
                }
            }
        }
        Ok(())
    }

    /// One decision of committed decision `number` of `exec`.
    async fn apply_one(
        &self,
        exec: &WorkflowExec,
        number: u64,
        d: &Decision,
    ) -> Result<(), EngineError> {
        let wf = WorkflowRef::new(&exec.workflow_exec_id, &exec.workflow_name);
        match d {
            Decision::Schedule { activities } => {
                self.schedule_nodes(exec, number, activities).await
            }
            Decision::Cancel { names } => self.cancel_nodes(exec, number, names).await,
            Decision::RecordMarker { name, details } => {
                let put =
                    decided::marker_put(self.store.tables(), wf.exec_id, name, details, number);
                match self.store.put_if(put).await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
            Decision::CompleteWorkflow { result } => {
                let set = |r: crate::store::UpdateRequest| r.set(attr::RESULT, av(result));
                self.close_episodic(exec, WorkflowState::Completed, None, By::Decision, set)
                    .await
            }
            Decision::FailWorkflow { reason } => {
                let to = WorkflowState::Failed;
                self.close_episodic(exec, to, Some(reason), By::Decision, |r| r)
                    .await
            }
            Decision::CancelWorkflow { reason } => {
                let to = WorkflowState::Cancelled;
                self.close_episodic(exec, to, reason.as_deref(), By::Decision, |r| r)
                    .await
            }
            Decision::ContinueAsNew { input } => self.continue_as_new(exec, input).await,
        }
    }

    /// Create the nodes decision `number` schedules ([`Self::write_nodes`]),
    /// link those that depend on nodes scheduled before, and claim and
    /// launch those with no prerequisite. A close that came meanwhile
    /// cancels them (it puts the nodes too: [`Self::finish_close`]): one
    /// it cancelled first is not launched, one launched first is
    /// cancelled.
    async fn schedule_nodes(
        &self,
        exec: &WorkflowExec,
        number: u64,
        nodes: &[PlannedActivity],
    ) -> Result<(), EngineError> {
        let items = self.write_nodes(exec, number, nodes).await?;
        let inside: HashSet<&str> = nodes.iter().map(|a| a.name.as_str()).collect();
        for node in nodes {
            for p in node
                .depends_on
                .iter()
                .filter(|p| !inside.contains(p.as_str()))
            {
                self.link_node(exec, p, &node.name).await?;
            }
        }
        for item in items.into_iter().filter(|a| !a.has_prerequisites()) {
            self.queue_and_launch(item).await?;
        }
        Ok(())
    }

    /// Put the nodes decision `number` schedules (their input rows, edges
    /// and items), each item only if new: the commit opened and counted
    /// them (design.md § 10.9). Returns the items as built.
    async fn write_nodes(
        &self,
        exec: &WorkflowExec,
        number: u64,
        nodes: &[PlannedActivity],
    ) -> Result<Vec<crate::model::ActivityExec>, EngineError> {
        let t = self.store.tables();
        let (items, edges) = decided::decided_items(exec, nodes, number, &self.config);
        let plan = crate::plan::Plan::of(nodes.to_vec());
        let rows = super::payloads::input_rows(exec, &plan);
        self.store.batch_put(&t.workflow_plan(), &rows).await?;
        self.store
            .batch_put(&t.activity_exec_dependency(), &edges)
            .await?;
        let puts = items.iter().map(|item| async move {
            let raw = serde_dynamo::to_item(item)
                .map_err(|e| EngineError::Rejected(format!("{}: {e}", item.activity_exec_id)))?;
            self.store.put_if(decided::node_put(t, raw)).await?;
            Ok::<_, EngineError>(())
        });
        let results: Vec<_> = futures::stream::iter(puts)
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect::<Result<(), _>>()?;
        Ok(items)
    }

    /// Make node `dependent` wait for `prerequisite`, scheduled by an
    /// earlier decision: listed on it while it is open; released at once
    /// if it completed; cancelled if it ended otherwise (it never could
    /// run, as a static plan's dependents of a failure).
    async fn link_node(
        &self,
        exec: &WorkflowExec,
        prerequisite: &str,
        dependent: &str,
    ) -> Result<(), EngineError> {
        let wf = &exec.workflow_exec_id;
        let (p, d) = (
            ids::activity_exec_id(wf, prerequisite),
            ids::activity_exec_id(wf, dependent),
        );
        // The dependent exists: `write_nodes` put it first, whatever state
        // the execution is in (sim seed 2400 found a link to a node whose
        // creation the execution's end had refused, which the
        // prerequisite's settle waited for ever to release).
        let link = decided::link_dependent(self.store.tables(), &p, wf, &d);
        match self.store.update(link).await {
            Ok(_) => return Ok(()),
            Err(StoreError::ConditionFailed) => {}
            Err(e) => return Err(e.into()),
        }
        let before = self.load_activity(&p, wf).await?;
        // Listed: its own settle releases or cancels the dependent.
        if before.links.dependents.contains(&d) {
            return Ok(());
        }
        if before.state == crate::contract::ActivityState::Completed {
            return self.release_edge(&d, wf, &p).await;
        }
        let waiting = self.load_activity(&d, wf).await?;
        let step = ids::EngineStep::UpstreamEnded(&p).event_id();
        let details = Details {
            error: Some(format!(
                "prerequisite {prerequisite} ended {}",
                before.state
            )),
            ..Details::default()
        };
        self.decree(waiting, Transition::Cancel, Source::Engine, &step, details)
            .await
            .map(|_| ())
    }

    /// Cancel the nodes `names` of `exec` not ended, as decision `number`.
    async fn cancel_nodes(
        &self,
        exec: &WorkflowExec,
        number: u64,
        names: &[String],
    ) -> Result<(), EngineError> {
        let wf = &exec.workflow_exec_id;
        let step = ids::EngineStep::Decision(wf, number).event_id();
        let nodes = self.nodes_named(wf, names.iter()).await?;
        for node in nodes.into_values().filter(|a| !a.state.is_terminal()) {
            let details = Details {
                error: Some(format!("cancelled by decision {number}")),
                ..Details::default()
            };
            self.decree(node, Transition::Cancel, Source::Engine, &step, details)
                .await?;
        }
        Ok(())
    }

    /// End episodic execution `wf` in `to` with `reason` (a cancel request
    /// its decider is not consulted on), unless a committed decision closes
    /// it already: that decision's end stands and is written now (sim seed
    /// 1567: a cancel request between a `continue_as_new` commit and its
    /// effect ended the execution CANCELLED, and no successor started).
    /// Returns the state the execution is in afterwards.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn end_episodic(
        &self,
        wf: WorkflowRef<'_>,
        to: WorkflowState,
        reason: &str,
    ) -> Result<WorkflowState, EngineError> {
        let exec = self.load_workflow(wf.exec_id, wf.name).await?;
        // Conditioned on no closing decision (WorkflowMove::closing_decision).
        self.close_episodic(&exec, to, Some(reason), By::Other, |r| r)
            .await?;
        if self.episode_state(wf).await?.closed_by_decision.is_some() {
            Box::pin(self.drive_decisions(wf)).await?;
        }
        Ok(self.load_workflow(wf.exec_id, wf.name).await?.state)
    }

    /// Fail episodic execution `wf` with `reason` because its decision
    /// attempt `id` failed for good (timed out, or answers refused too
    /// often): only while that attempt is still the one in flight, so an
    /// answer that committed meanwhile stands.
    pub(crate) async fn fail_decision(
        &self,
        wf: WorkflowRef<'_>,
        id: &str,
        reason: &str,
    ) -> Result<(), EngineError> {
        let exec = self.load_workflow(wf.exec_id, wf.name).await?;
        let in_flight = |r: crate::store::UpdateRequest| {
            r.when(crate::store::Cond::eq(attr::DECISION_ID, s(id)))
        };
        self.close_episodic(
            &exec,
            WorkflowState::Failed,
            Some(reason),
            By::Other,
            in_flight,
        )
        .await
    }

    /// RUNNING → `to` (with `error`, and what `extra` sets), unless `by`
    /// is not the closing decision and one closed it, keeping the
    /// due marker for what the end owes (design.md § 10.3), then what it
    /// owes: [`Self::finish_close`]. Written again, the move changes
    /// nothing and the rest is done again.
    async fn close_episodic(
        &self,
        exec: &WorkflowExec,
        to: WorkflowState,
        error: Option<&str>,
        by: By,
        extra: impl FnOnce(crate::store::UpdateRequest) -> crate::store::UpdateRequest,
    ) -> Result<(), EngineError> {
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        let now = self.now();
        let mv = WorkflowMove {
            owes_until: Some(now.epoch + self.config.settle_grace_seconds),
            closing_decision: by == By::Decision,
            ..WorkflowMove::new(WorkflowState::Running, to, now, error)
        };
        let req = decide::workflow_move(self.store.tables(), id, name, &mv)
            .map_err(EngineError::Rejected)?;
        if self.write_move(extra(req)).await? {
            crate::metrics::workflow_duration(now.epoch - exec.start_time_epoch);
            info!(workflow_exec_id = %id, state = %to, "workflow ended by its decider");
        }
        let ended = self.load_workflow(id, name).await?;
        self.finish_close(&ended).await
    }

    /// What an ended episodic execution owes: the nodes its decisions
    /// opened put ([`Self::write_owed_nodes`]), its open nodes cancelled,
    /// its parent told, then its due marker cleared. Run by the close and
    /// again by the monitor while the marker stays.
    pub(crate) async fn finish_close(&self, wf: &WorkflowExec) -> Result<(), EngineError> {
        if !wf.state.is_terminal() {
            return Ok(());
        }
        // The close's own step, after every decision's: `decision:(exec)#(u64::MAX)`.
        let step = ids::EngineStep::Decision(&wf.workflow_exec_id, u64::MAX).event_id();
        self.write_owed_nodes(wf).await?;
        self.cancel_all(wf, &step, "the workflow ended").await?;
        self.tell_parent(&wf.workflow_exec_id, &wf.workflow_name)
            .await?;
        let done = crate::store::UpdateRequest::new(
            self.store.tables().workflow_exec(),
            decide::workflow_key(&wf.workflow_exec_id, &wf.workflow_name),
        )
        .when(crate::store::Cond::eq(attr::STATE, s(wf.state.as_str())))
        .remove(attr::DUE_EPOCH)
        .remove(attr::DUE_SHARD);
        self.write_move(done).await.map(|_| ())
    }

    /// `continue_as_new` (design.md § 10.6): one transaction of this
    /// execution's move RUNNING → COMPLETED with `continued_as`, the
    /// next execution's request row (its id derived from this exec, put
    /// only if new) and, for a child its parent's node waits on, the
    /// node's move to the next ([`Self::chain_link`], design.md § 9.5): all
    /// or none, so an execution that ended otherwise meanwhile starts no
    /// next one, and a rerun starts it only once. Then what the close owes
    /// ([`Self::finish_close`]). A child whose node closed it ends
    /// CANCELLED instead.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable, or the
    /// parent's node changed between its read and the write.
    async fn continue_as_new(&self, exec: &WorkflowExec, input: &Value) -> Result<(), EngineError> {
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        let request_id = ids::continued_request_id(id, name);
        let next = ids::workflow_exec_id(name, &request_id);
        let (parent, moved) = match self.chain_link(exec, &next).await? {
            ChainLink::Closed(why) => {
                let to = WorkflowState::Cancelled;
                return (self.close_episodic(exec, to, Some(&why), By::Decision, |r| r)).await;
            }
            ChainLink::Moves(node) => (exec.parent.clone(), Some(node.into_write())),
            ChainLink::Unlinked => (None, None),
        };
        let now = self.now();
        let row = WorkflowRequest {
            redrive_workflow_exec_id: None,
            workflow_request_id: request_id.clone(),
            workflow_name: name.clone(),
            when: Some(now.date_list()),
            when_epoch: Some(now.epoch as f64),
            source: Some(format!("{}{id}", decided::CONTINUED_FROM_SOURCE)),
            manual: None,
            input: (*input != Value::Null).then(|| input.clone()),
            expires_at_epoch: self.config.row_expiry(now.epoch),
            cancel_workflow_exec_id: None,
            reason: None,
            parent,
        };
        let item: Item = serde_dynamo::to_item(&row)
            .map_err(|e| EngineError::Rejected(format!("{id}: next request: {e}")))?;
        let mv = WorkflowMove {
            owes_until: Some(now.epoch + self.config.settle_grace_seconds),
            closing_decision: true,
            ..WorkflowMove::new(WorkflowState::Running, WorkflowState::Completed, now, None)
        };
        let t = self.store.tables();
        let close = decide::workflow_move(t, id, name, &mv)
            .map_err(EngineError::Rejected)?
            .set(attr::CONTINUED_AS, s(&next));
        let put = crate::store::Write::Put {
            table: t.workflow_request(),
            item,
            cond: Some(crate::store::Cond::not_exists(attr::WORKFLOW_REQUEST_ID)),
        };
        let writes = [close.into_write(), put].into_iter().chain(moved);
        match self.store.transact(writes.collect()).await {
            Ok(()) => info!(workflow_exec_id = %id, next = %next, "workflow continued as new"),
            Err(StoreError::ConditionFailed) => {}
            Err(e) => return Err(e.into()),
        }
        let ended = self.load_workflow(id, name).await?;
        if ended.state == WorkflowState::Running {
            return self.continue_refused(&ended, &request_id).await;
        }
        self.finish_close(&ended).await
    }

    /// The continue of `exec` (still RUNNING) as new failed on a condition
    /// other than its own state: a row the engine did not write holds the
    /// next execution's request id (guessable: derived), which no retry
    /// clears, so the execution FAILS with that reason; otherwise its
    /// parent's node changed since it was read, and the continue is
    /// retried.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable, or the
    /// node changed.
    async fn continue_refused(
        &self,
        exec: &WorkflowExec,
        request_id: &str,
    ) -> Result<(), EngineError> {
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        let key = crate::keys::request_key(request_id, name);
        let t = self.store.tables();
        let taken: Option<WorkflowRequest> = self.store.get(&t.workflow_request(), key).await?;
        if taken.is_none() {
            return Err(EngineError::Retry(format!(
                "continue of {id} as new: its parent's node changed meanwhile"
            )));
        }
        let why = format!(
            "continue_as_new: the next execution's request id {request_id} is taken by a row the engine did not write"
        );
        warn!(workflow_exec_id = %id, reason = %why, "workflow cannot continue as new");
        let to = WorkflowState::Failed;
        (self.close_episodic(exec, to, Some(&why), By::Decision, |r| r)).await
    }
}
