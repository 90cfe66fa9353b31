//! Starting a workflow: the exec item (REQUESTED, with a due marker until
//! its roots are launched), the plan (registered definition or decider),
//! the activity items and edges, RUNNING, and the root launches. Every
//! step is resumable: by a redelivered request record, or by the monitor
//! when the due marker comes up (`Engine::restart_workflow`).

use crate::attr;
use std::collections::{HashMap, HashSet};

use futures::stream::{self, StreamExt};
use serde_json::Value;
use tracing::{info, warn};

use super::decide::{self, WorkflowMove};
use super::{Applied, Engine, EngineError};
use crate::contract::WorkflowState;
use crate::decider::{DeciderAnswer, DecisionContext, DecisionsAnswer};
use crate::launcher::Launcher;
use crate::model::{
    ActivityExec, ActivityExecDependency, EpisodicStart, WorkflowExec, WorkflowLambda,
    WorkflowPlan, WorkflowRequest,
};
use crate::plan::{DeciderRequest, Plan, SHAPE_VERSION};
use crate::store::size::MAX_ITEM_BYTES;
use crate::store::{av, n, s, Cond, StoreError, UpdateRequest};

mod ends;
mod plan;

use plan::Planned;
impl<L: Launcher> Engine<L> {
    /// Start the workflow a `whimbrel_workflow_request` row asks for
    /// (contract: Full Logic API, "Initiate a New Workflow").
    ///
    /// Creates the workflow exec (REQUESTED), obtains and validates the
    /// plan, writes the activity execs (REQUESTED) and edges, moves the
    /// workflow to RUNNING, then claims and launches the activities without
    /// prerequisites, and clears the workflow's due marker. An unknown
    /// workflow, an invalid plan, a plan whose items DynamoDB cannot store
    /// or a decider error fails the workflow with the reason in its
    /// `error`. Safe to call again for the same request at any point.
    ///
    /// Errors: [`EngineError::Rejected`] for a malformed row;
    /// [`EngineError::Retry`] when DynamoDB or the decider is unavailable
    /// (the monitor also starts the workflow again from its due marker).
    #[tracing::instrument(skip_all, fields(workflow_request_id = %req.workflow_request_id, workflow_name = %req.workflow_name))]
    pub async fn start_workflow(&self, req: &WorkflowRequest) -> Result<Applied, EngineError> {
        let recommended = decide::check_request(req).map_err(EngineError::Rejected)?;
        if !recommended {
            info!(workflow_request_id = %req.workflow_request_id, "request id is not (workflow_name)::(uuid); accepted");
        }
        let (fresh, oversized) = decide::requested_exec(req, self.now(), &self.config);
        let t = self.store.tables();
        let created = self.create_exec(&fresh).await?;
        let created_exec = created.is_some();
        let exec = match created {
            Some(exec) => exec,
            None => {
                self.load_workflow(&fresh.workflow_exec_id, &fresh.workflow_name)
                    .await?
            }
        };
        let oversized = oversized.or_else(|| decide::start_refusal(&exec));
        if exec.state.is_terminal() {
            return Ok(Applied::Workflow(exec.state));
        }
        if let (Some(reason), None) = (&oversized, exec.planned_epoch) {
            return self.fail_start(&exec, reason).await;
        }
        // A child whose node was cancelled before it existed (design.md
        // § 9.5): the node's cancel request may have been refused.
        if exec.planned_epoch.is_none() {
            if let Some(reason) = self.orphaned(&exec).await? {
                let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
                let state = self.cancel_requested_workflow(id, name, &reason).await?;
                return Ok(Applied::Workflow(state));
            }
        }
        let (exec, plan, planned_now, episodic) =
            match self.plan_for_start(exec, req, created_exec).await? {
                Planned::Plan(exec, plan, planned_now, episodic) => {
                    (*exec, plan, planned_now, episodic)
                }
                Planned::Ended(applied) => return Ok(applied),
            };
        if exec.state.is_terminal() {
            return Ok(Applied::Workflow(exec.state));
        }
        let (activities, edges) = decide::activity_items(&exec, &plan, &self.config);
        // Which activity items this call created: those it may claim from
        // its own copy; any other is read again.
        let mut created = HashSet::new();
        if exec.state == WorkflowState::Requested {
            match self.create_items(&exec, &plan, &activities, &edges).await? {
                Ok(ids) => created = ids,
                Err(applied) => return Ok(applied),
            }
        }
        let created = if planned_now { created } else { HashSet::new() };
        self.launch_roots(&activities, &created).await?;
        // Every activity may have ended while the workflow was still
        // REQUESTED (client CANCELs): their finish checks saw REQUESTED. Done
        // on every (re)start, before the marker goes.
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        self.finish_workflow(id, name).await?;
        // An episodic execution's first answer is its first decision; its
        // commit keeps the due marker for what the decision owes.
        if let Some(start) = episodic {
            self.begin_episodes(&exec, &start).await?;
            info!(workflow_exec_id = %id, "episodic workflow running");
            return Ok(Applied::Workflow(WorkflowState::Running));
        }
        // The roots are claimed: every later step has its own marker. What
        // is left is the execution timeout's, if the plan sets one.
        match self.store.update(decide::started_update(t, &exec)).await {
            Ok(_) | Err(StoreError::ConditionFailed) => {}
            Err(e) => return Err(e.into()),
        }
        info!(workflow_exec_id = %id, activities = activities.len(), "workflow running");
        Ok(Applied::Workflow(WorkflowState::Running))
    }

    /// Create the activity items and edges of a REQUESTED workflow, then
    /// move it to RUNNING. Returns the ids of the items this call created,
    /// or what the workflow came to when it cannot go on (an item DynamoDB
    /// cannot store, a cancel or give-up that ended it meanwhile).
    async fn create_items(
        &self,
        exec: &WorkflowExec,
        plan: &Plan,
        activities: &[ActivityExec],
        edges: &[ActivityExecDependency],
    ) -> Result<Result<HashSet<String>, Applied>, EngineError> {
        if let Some(reason) = unstorable_activity(activities) {
            // Judged on the stored plan, which every start reads alike: it
            // fails the workflow although the plan is stored (issue 42 D:
            // it was left REQUESTED before).
            let failed = self.fail_requested(exec, &reason, false).await?;
            let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
            let state = match failed {
                true => WorkflowState::Failed,
                false => self.load_workflow(id, name).await?.state,
            };
            return Ok(Err(Applied::Workflow(state)));
        }
        let t = self.store.tables();
        // Inputs too large for the activity items first (write-once,
        // content-addressed: a repeated put writes the same content), so an
        // item never names a row that is not there. Nothing for a plan
        // stored since inputs are kept by reference: its rows were put
        // before it (`store_plan`), and it holds only keys.
        let rows = super::payloads::input_rows(exec, plan);
        self.store.batch_put(&t.workflow_plan(), &rows).await?;
        let created = self.put_new_activities(activities).await?;
        // Edges are write-once with deterministic content.
        self.store
            .batch_put(&t.activity_exec_dependency(), edges)
            .await?;
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        let (from, to) = (WorkflowState::Requested, WorkflowState::Running);
        if !self.move_workflow(id, name, from, to, None).await? {
            // Someone else moved it: on to RUNNING (go on), or ended it (a
            // user's cancel, the monitor's give-up): launch nothing.
            let now_state = self.load_workflow(id, name).await?.state;
            if now_state != WorkflowState::Running {
                return Ok(Err(Applied::Workflow(now_state)));
            }
        }
        Ok(Ok(created))
    }

    /// Conditional creates only: another start of the same request (a
    /// redelivery, the monitor) may already have created, claimed or even
    /// ended an item; an unconditional put would reset it. Returns the ids
    /// of the items created by this call.
    async fn put_new_activities(
        &self,
        activities: &[ActivityExec],
    ) -> Result<HashSet<String>, EngineError> {
        let table = self.store.tables().activity_exec();
        let results: Vec<Result<(String, bool), StoreError>> = stream::iter(activities)
            .map(|a| {
                let table = &table;
                async move {
                    let new = self.store.put_new(table, attr::ACTIVITY_EXEC_ID, a).await?;
                    Ok((a.activity_exec_id.clone(), new))
                }
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        let mut created = HashSet::new();
        for r in results {
            let (id, new) = r?;
            if new {
                created.insert(id);
            }
        }
        Ok(created)
    }

    /// Queue and launch the activities without prerequisites: from this
    /// call's own copy for those in `created` (items it created from a plan
    /// it stored), read again otherwise.
    async fn launch_roots(
        &self,
        activities: &[ActivityExec],
        created: &HashSet<String>,
    ) -> Result<(), EngineError> {
        let roots: Vec<&ActivityExec> = activities
            .iter()
            .filter(|a| !a.has_prerequisites())
            .collect();
        // Under a concurrency limit the roots take their slots in plan
        // order (design.md § 9.3): one at a time; the others at once.
        let taking = self.slot_taking(&roots).await?;
        let (in_order, free): (Vec<&ActivityExec>, Vec<&ActivityExec>) = roots
            .into_iter()
            .partition(|a| taking.contains(&a.activity_exec_id));
        let (ordered, others) = futures::join!(
            self.launch_some(in_order, created, 1),
            self.launch_some(free, created, self.config.concurrency.max(1))
        );
        let results = ordered.into_iter().chain(others);
        results.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }

    /// Queue and launch `roots`, `concurrency` at a time, each from this
    /// call's own copy when in `created`, read again otherwise.
    async fn launch_some(
        &self,
        roots: Vec<&ActivityExec>,
        created: &HashSet<String>,
        concurrency: usize,
    ) -> Vec<Result<(), EngineError>> {
        stream::iter(roots)
            .map(|a| async move {
                let current = if created.contains(&a.activity_exec_id) {
                    a.clone()
                } else {
                    self.load_activity(&a.activity_exec_id, &a.workflow_exec_id)
                        .await?
                };
                self.queue_and_launch(current).await
            })
            .buffered(concurrency)
            .collect()
            .await
    }

    /// The monitor's resumption of a workflow whose due marker came up: it
    /// is still REQUESTED (decider unreachable, the request's stream record
    /// given up on) or RUNNING with its roots not all launched. Counts the
    /// attempt, then runs [`Engine::start_workflow`] again from the request
    /// row. A workflow that cannot get a plan after `max_start_attempts` is
    /// FAILED with the reason. Returns whether it started it again.
    #[tracing::instrument(skip_all, fields(workflow_exec_id = %exec.workflow_exec_id))]
    pub(crate) async fn restart_workflow(
        &self,
        exec: WorkflowExec,
        now: i64,
    ) -> Result<bool, EngineError> {
        let t = self.store.tables();
        if exec.state.is_terminal() || exec.due_epoch.is_none_or(|d| d > now) {
            return Ok(false);
        }
        if exec.state == WorkflowState::Requested
            && exec.planned_epoch.is_none()
            && exec.start_attempts >= self.config.max_start_attempts
        {
            let reason = format!(
                "not started after {} attempts (decider or store unavailable)",
                exec.start_attempts
            );
            self.fail_unplanned(&exec, &reason).await?;
            return Ok(false);
        }
        let bump = UpdateRequest::new(
            t.workflow_exec(),
            decide::workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
        )
        .when(
            Cond::eq(attr::START_ATTEMPTS, n(exec.start_attempts))
                .and(Cond::exists(attr::DUE_EPOCH)),
        )
        .set(attr::START_ATTEMPTS, n(exec.start_attempts + 1))
        .set(attr::DUE_EPOCH, n(now + self.config.start_retry_seconds));
        match self.store.update(bump).await {
            Ok(_) => {}
            Err(StoreError::ConditionFailed) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        let request_id = exec.workflow_request_id.clone().unwrap_or_default();
        let key = crate::keys::request_key(&request_id, &exec.workflow_name);
        let request: Option<WorkflowRequest> = self.store.get(&t.workflow_request(), key).await?;
        // Without its row (a Full Logic API caller may not insert one), the
        // exec holds what a start needs: the ids and the input.
        let request = request.unwrap_or_else(|| WorkflowRequest {
            redrive_workflow_exec_id: None,
            workflow_request_id: request_id,
            workflow_name: exec.workflow_name.clone(),
            when: None,
            when_epoch: None,
            source: exec.source.clone(),
            manual: None,
            input: exec.input.clone(),
            expires_at_epoch: None,
            cancel_workflow_exec_id: None,
            reason: None,
            parent: exec.parent.clone(),
        });
        warn!(workflow_exec_id = %exec.workflow_exec_id, state = %exec.state, attempt = exec.start_attempts + 1, "monitor: starting the workflow again");
        self.start_workflow(&request).await.map(|_| true)
    }

    /// Put the REQUESTED exec `fresh` unless it exists; returns it as put
    /// when this call created it. A child counts among its tree's
    /// executions in the same transaction
    /// ([`decide::episodes::count_in_tree`], issue 42 B.6), so a start
    /// applied again counts once. One past the deployment's
    /// `max_tree_executions`, or one whose parent link the engine did not
    /// write ([`Self::forged_link`]), is created uncounted with the reason
    /// in its `error`: its start fails with it, even one that died after
    /// this write ([`decide::start_refusal`]).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable or the
    /// count is contended.
    async fn create_exec(&self, fresh: &WorkflowExec) -> Result<Option<WorkflowExec>, EngineError> {
        let t = self.store.tables();
        let table = t.workflow_exec();
        let Some(parent) = &fresh.parent else {
            return self.put_exec(fresh.clone()).await;
        };
        if let Some(why) = self.forged_link(fresh).await? {
            return self.put_exec(decide::failing_exec(fresh, why)).await;
        }
        let (root, max) = (parent.tree_root(), self.config.max_tree_executions);
        let put = crate::store::Write::Put {
            table: table.clone(),
            item: serde_dynamo::to_item(fresh).map_err(|e| EngineError::Rejected(e.to_string()))?,
            cond: Some(Cond::not_exists(attr::WORKFLOW_EXEC_ID)),
        };
        let count = decide::episodes::count_in_tree(t, root, max).into_write();
        match self.store.transact(vec![put, count]).await {
            Ok(()) => return Ok(Some(fresh.clone())),
            Err(StoreError::ConditionFailed) => {}
            Err(StoreError::Conflict) => {
                return Err(EngineError::Retry(format!(
                    "{root}: its tree's count is contended"
                )))
            }
            Err(e) => return Err(e.into()),
        }
        // The exec exists (counted when it was created), or the tree has
        // started its most.
        let why = format!(
            "the workflow tree of {root} has started {max} executions below its root; at most {max} are allowed (WHIMBREL_MAX_TREE_EXECUTIONS)"
        );
        self.put_exec(decide::failing_exec(fresh, why)).await
    }

    /// Put `exec` unless an exec is at its key: `Some(exec)` when put.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn put_exec(&self, exec: WorkflowExec) -> Result<Option<WorkflowExec>, EngineError> {
        let table = self.store.tables().workflow_exec();
        let created = self
            .store
            .put_new(&table, attr::WORKFLOW_EXEC_ID, &exec)
            .await?;
        Ok(created.then_some(exec))
    }
}

/// Why one of the activity items could not be stored with an inline
/// output and the history of its attempts (`ActivityExec::item_bytes_over`),
/// measured as DynamoDB measures items; `None` when all fit.
fn unstorable_activity(activities: &[ActivityExec]) -> Option<String> {
    activities.iter().find_map(|a| {
        let (size, worst) = a.item_bytes_over(a.max_attempts());
        (worst > MAX_ITEM_BYTES).then(|| {
            format!(
                "activity {:?}: its item is {size} bytes, {worst} with an inline output and the history of its attempts; DynamoDB stores at most {MAX_ITEM_BYTES}",
                a.activity_name
            )
        })
    })
}
