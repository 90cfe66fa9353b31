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
        let (created_exec, past_budget) = self.create_exec(&fresh).await?;
        let oversized = oversized.or(past_budget);
        let exec = if created_exec {
            fresh
        } else {
            self.load_workflow(&fresh.workflow_exec_id, &fresh.workflow_name)
                .await?
        };
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
        match self
            .store
            .update(decide::started_update(t, &exec), false)
            .await
        {
            Ok(_) | Err(StoreError::ConditionFailed) => {}
            Err(e) => return Err(e.into()),
        }
        info!(workflow_exec_id = %id, activities = activities.len(), "workflow running");
        Ok(Applied::Workflow(WorkflowState::Running))
    }

    /// The plan of `exec`: one recorded by an earlier start (on the plan
    /// table even when that start died before marking the exec) is
    /// replayed, never asked for again; otherwise it is obtained, stored
    /// and the exec marked planned. With whether this call stored it (then
    /// no activity item exists yet). A plan that cannot be had fails the
    /// workflow.
    async fn plan_for_start(
        &self,
        mut exec: WorkflowExec,
        req: &WorkflowRequest,
        created_exec: bool,
    ) -> Result<Planned, EngineError> {
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        // A freshly created exec has none.
        let stored = if created_exec {
            None
        } else {
            self.load_plan(id, name).await?
        };
        match stored {
            Some(p) if exec.planned_epoch.is_some() => {
                return Ok(Planned::Plan(
                    Box::new(exec),
                    p.plan,
                    false,
                    p.episodic.map(Box::new),
                ))
            }
            // Stored by a start that died before marking the exec.
            Some(p) => {
                let exec = self.mark_planned(&exec, &p).await?;
                return Ok(Planned::Plan(
                    Box::new(exec),
                    p.plan,
                    false,
                    p.episodic.map(Box::new),
                ));
            }
            None if exec.planned_epoch.is_some() => {
                return Err(EngineError::Rejected(format!(
                    "workflow exec {id} is planned but its item in {} is missing",
                    self.store.tables().workflow_plan()
                )));
            }
            None => {}
        }
        let (plan, episodic) = match self.obtain_plan(&exec, req).await? {
            Ok(obtained) => obtained,
            Err(reason) => return self.fail_start(&exec, &reason).await.map(Planned::Ended),
        };
        let input = exec.input.clone().or_else(|| req.input.clone());
        let (item, stored_now) = match self.store_plan(&exec, plan, input, episodic).await? {
            Ok(stored) => stored,
            Err(reason) => return self.fail_start(&exec, &reason).await.map(Planned::Ended),
        };
        exec = self.mark_planned(&exec, &item).await?;
        Ok(Planned::Plan(
            Box::new(exec),
            item.plan,
            stored_now,
            item.episodic.map(Box::new),
        ))
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
        match self.store.update(bump, false).await {
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

    /// Cancel a workflow that has not started yet (REQUESTED, no plan
    /// stored: no activity exists): REQUESTED → CANCELLED with `reason`, in
    /// one conditional write. A start running meanwhile cannot store its
    /// plan afterwards (that write requires REQUESTED). Returns the
    /// workflow's state after the call.
    ///
    /// Errors: [`EngineError::Retry`] when its plan is stored but it is
    /// still REQUESTED (its activities are being created: cancel them in a
    /// moment); [`EngineError::Rejected`] for an unknown workflow.
    pub async fn cancel_requested_workflow(
        &self,
        id: &str,
        name: &str,
        reason: &str,
    ) -> Result<WorkflowState, EngineError> {
        let (from, to) = (WorkflowState::Requested, WorkflowState::Cancelled);
        // A child's end owes its parent a report (design.md § 9.5): the
        // marker stays until it is told (whether it is a child is on the
        // item, not read here).
        let mv = WorkflowMove {
            unplanned: true,
            owes_until: Some(self.now().epoch),
            ..WorkflowMove::new(from, to, self.now(), Some(reason))
        };
        let req = decide::workflow_move(self.store.tables(), id, name, &mv)
            .map_err(EngineError::Rejected)?;
        match self.store.update(req, false).await {
            Ok(_) => {
                self.tell_parent(id, name).await?;
                Ok(WorkflowState::Cancelled)
            }
            Err(StoreError::ConditionFailed) => {
                let wf = self
                    .store
                    .get::<WorkflowExec>(
                        &self.store.tables().workflow_exec(),
                        decide::workflow_key(id, name),
                    )
                    .await?
                    .ok_or_else(|| EngineError::Rejected(format!("no workflow exec {id}")))?;
                if wf.state == WorkflowState::Requested {
                    Err(EngineError::Retry(format!(
                        "{id} is creating its activities; cancel them in a moment"
                    )))
                } else {
                    Ok(wf.state)
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The plan from the registered definition or decider, and for an
    /// episodic execution its decider's first answer (the plan then has no
    /// node: the answer's decisions schedule them). `Ok(Err(reason))`
    /// means the workflow must fail; `Err` means retry.
    async fn obtain_plan(
        &self,
        exec: &WorkflowExec,
        req: &WorkflowRequest,
    ) -> Result<Result<Obtained, String>, EngineError> {
        let t = self.store.tables();
        let Some(reg) = self.registration_of(&exec.workflow_name).await? else {
            return Ok(Err(format!(
                "workflow {:?} is not registered in {}",
                exec.workflow_name,
                t.workflow_lambda()
            )));
        };
        let plan = if let Some(def) = reg.definition {
            def
        } else if let Some(lambda) = reg.lambda {
            match self.ask_decider(exec, req, &lambda).await? {
                Ok(DeciderAnswer::Plan(plan)) => plan,
                Ok(DeciderAnswer::Decisions(answer)) => {
                    return Ok(self.first_answer(lambda, answer, reg.allow.as_ref()));
                }
                Err(reason) => return Ok(Err(reason)),
            }
        } else {
            return Ok(Err(format!(
                "workflow {:?} has neither a lambda nor a definition",
                exec.workflow_name
            )));
        };
        if let Err(e) = plan
            .validate()
            .and_then(|()| plan.check_at(self.now().epoch))
        {
            return Ok(Err(format!("invalid plan: {e}")));
        }
        let targets = &self.config.launch_targets;
        match crate::targets::plan_refusal(&plan, targets, reg.allow.as_ref()) {
            Some(why) => Ok(Err(format!("invalid plan: {why}"))),
            None => Ok(Ok((plan, None))),
        }
    }

    /// The registration of workflow `name` (`whimbrel_workflow_lambda`),
    /// if there is one.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub async fn registration_of(&self, name: &str) -> Result<Option<WorkflowLambda>, EngineError> {
        let key = HashMap::from([(attr::WORKFLOW_NAME.to_string(), s(name))]);
        let table = self.store.tables().workflow_lambda();
        Ok(self.store.get::<WorkflowLambda>(&table, key).await?)
    }

    /// The answer of decider `lambda` to the `workflow_started` request
    /// (shapes.md § 1). `Ok(Err(reason))`: the workflow must fail.
    async fn ask_decider(
        &self,
        exec: &WorkflowExec,
        req: &WorkflowRequest,
        lambda: &str,
    ) -> Result<Result<DeciderAnswer, String>, EngineError> {
        let request = DeciderRequest {
            version: SHAPE_VERSION,
            kind: "workflow_started".into(),
            workflow_exec_id: exec.workflow_exec_id.clone(),
            workflow_name: exec.workflow_name.clone(),
            workflow_request_id: req.workflow_request_id.clone(),
            input: req.input.clone().unwrap_or(Value::Null),
        };
        if let Some(why) = self.config.launch_targets.refusal(lambda) {
            return Ok(Err(format!("decider refused: {why}")));
        }
        let payload = serde_json::to_value(&request).expect("serializable");
        match self.launcher.invoke_sync(lambda, &payload).await {
            Ok(v) => Ok(DeciderAnswer::from_value(v)
                .map_err(|e| format!("decider {lambda} returned no valid plan: {e}"))),
            Err(e) if e.is_transient() => Err(EngineError::Retry(e.to_string())),
            Err(e) => Ok(Err(format!("decider failed: {e}"))),
        }
    }

    /// An episodic execution's first answer, judged as any decision is
    /// against an execution with no node yet (design.md § 10.1): an empty
    /// plan and the answer, or why the workflow fails.
    fn first_answer(
        &self,
        decider: String,
        answer: DecisionsAnswer,
        allow: Option<&crate::targets::Allowed>,
    ) -> Result<Obtained, String> {
        let ctx = DecisionContext {
            now: self.now().epoch,
            first: true,
            ..DecisionContext::default()
        };
        if let Err(why) = crate::decider::validate(&answer, &ctx) {
            return Err(format!(
                "decider {decider} returned invalid decisions: {why}"
            ));
        }
        let scheduled = super::episodes::scheduled(&answer);
        let targets = &self.config.launch_targets;
        if let Some(why) = crate::targets::plan_refusal(&scheduled, targets, allow) {
            return Err(format!("invalid decisions: {why}"));
        }
        let plan = Plan {
            execution_timeout_seconds: answer.execution_timeout_seconds,
            ..Plan::of(vec![])
        };
        Ok((plan, Some(EpisodicStart { decider, answer })))
    }

    /// Mark the exec planned by the stored `item` (once, while REQUESTED):
    /// its `planned_epoch`, activity count and execution timeout; its input
    /// removed (it is on the plan item). Returns the exec as it now is: the
    /// one read again when another start marked it first or it ended
    /// meanwhile (a user's cancel, the monitor's give-up), which the caller
    /// sees and then creates nothing.
    ///
    /// Errors: [`EngineError::Rejected`] for an exec neither planned nor
    /// ended that the write still refused.
    async fn mark_planned(
        &self,
        exec: &WorkflowExec,
        item: &WorkflowPlan,
    ) -> Result<WorkflowExec, EngineError> {
        let count = item.plan.activities.len();
        let timeout = item.plan.execution_timeout_seconds;
        let mut mark = UpdateRequest::new(
            self.store.tables().workflow_exec(),
            decide::workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
        )
        .when(Cond::eq(attr::STATE, s(WorkflowState::Requested.as_str())))
        .when(Cond::not_exists(attr::PLANNED_EPOCH))
        .set(attr::PLANNED_EPOCH, n(item.recorded_epoch))
        .set(attr::ACTIVITY_COUNT, n(count))
        .remove(attr::INPUT);
        if let Some(secs) = timeout {
            mark = mark.set(attr::EXECUTION_TIMEOUT_SECONDS, n(secs));
        }
        let decide_on = item.episodic.as_ref().map(|e| {
            (e.answer.decide_on.clone()).unwrap_or_else(super::episodes::every_event_kind)
        });
        if let (Some(kinds), Some(start)) = (&decide_on, &item.episodic) {
            mark = mark
                .set(attr::DECIDE_ON, av(kinds))
                .set(attr::DECIDER, s(&start.decider));
        }
        match self.store.update(mark, false).await {
            Ok(_) => Ok(WorkflowExec {
                decide_on,
                decider: item.episodic.as_ref().map(|e| e.decider.clone()),
                planned_epoch: Some(item.recorded_epoch),
                execution_timeout_seconds: timeout,
                activity_count: count as u64,
                input: None,
                ..exec.clone()
            }),
            Err(StoreError::ConditionFailed) => {
                let e = self
                    .load_workflow(&exec.workflow_exec_id, &exec.workflow_name)
                    .await?;
                if e.planned_epoch.is_none() && !e.state.is_terminal() {
                    return Err(EngineError::Rejected(format!(
                        "workflow exec {} is {} without a plan",
                        e.workflow_exec_id, e.state
                    )));
                }
                Ok(e)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// REQUESTED → FAILED with `reason`, only while no plan is stored: a
    /// start that stored its plan meanwhile wins, and goes on to create
    /// the activities (the monitor's give-up, a start that could not plan).
    /// Whether this write ended the workflow.
    async fn fail_unplanned(&self, exec: &WorkflowExec, reason: &str) -> Result<bool, EngineError> {
        self.fail_requested(exec, reason, true).await
    }

    /// REQUESTED → FAILED with `reason`; with `unplanned`, only while no
    /// plan is stored. Whether this write ended the workflow.
    async fn fail_requested(
        &self,
        exec: &WorkflowExec,
        reason: &str,
        unplanned: bool,
    ) -> Result<bool, EngineError> {
        let (from, to) = (WorkflowState::Requested, WorkflowState::Failed);
        let mv = WorkflowMove {
            unplanned,
            owes_until: exec.parent.is_some().then_some(self.now().epoch),
            ..WorkflowMove::new(from, to, self.now(), Some(reason))
        };
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        let req = decide::workflow_move(self.store.tables(), id, name, &mv)
            .map_err(EngineError::Rejected)?;
        match self.store.update(req, false).await {
            Ok(_) => {
                warn!(workflow_exec_id = %id, %reason, "workflow failed before it started");
                if exec.parent.is_some() {
                    self.tell_parent(id, name).await?;
                }
                Ok(true)
            }
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Put the REQUESTED exec `fresh` unless it exists; returns whether
    /// this call created it, and why it must fail. A child counts among
    /// its tree's executions in the same transaction
    /// ([`decide::episodes::count_in_tree`], issue 42 B.6), so a start
    /// applied again counts once; one past the deployment's
    /// `max_tree_executions` is created uncounted, to fail with the
    /// reason.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable or the
    /// count is contended.
    async fn create_exec(
        &self,
        fresh: &WorkflowExec,
    ) -> Result<(bool, Option<String>), EngineError> {
        let t = self.store.tables();
        let table = t.workflow_exec();
        let Some(parent) = &fresh.parent else {
            return Ok((
                self.store
                    .put_new(&table, attr::WORKFLOW_EXEC_ID, fresh)
                    .await?,
                None,
            ));
        };
        let (root, max) = (parent.tree_root(), self.config.max_tree_executions);
        let put = crate::store::Write::Put {
            table: table.clone(),
            item: serde_dynamo::to_item(fresh).map_err(|e| EngineError::Rejected(e.to_string()))?,
            cond: Some(Cond::not_exists(attr::WORKFLOW_EXEC_ID)),
        };
        let count = decide::episodes::count_in_tree(t, root, max).into_write();
        match self.store.transact(vec![put, count]).await {
            Ok(()) => return Ok((true, None)),
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
        let created = self
            .store
            .put_new(&table, attr::WORKFLOW_EXEC_ID, fresh)
            .await?;
        let why = format!(
            "the workflow tree of {root} has started {max} executions below its root; at most {max} are allowed (WHIMBREL_MAX_TREE_EXECUTIONS)"
        );
        Ok((created, created.then_some(why)))
    }

    /// A start that cannot plan fails the workflow ([`Self::fail_unplanned`]):
    /// unless another start planned it meanwhile, whose plan stands. Returns
    /// the workflow's state as it then is.
    async fn fail_start(&self, exec: &WorkflowExec, reason: &str) -> Result<Applied, EngineError> {
        if self.fail_unplanned(exec, reason).await? {
            return Ok(Applied::Workflow(WorkflowState::Failed));
        }
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        let now = self.load_workflow(id, name).await?;
        info!(workflow_exec_id = %id, %reason, state = %now.state, "start could not plan; another start planned or ended the workflow meanwhile");
        Ok(Applied::Workflow(now.state))
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

/// A plan obtained, and an episodic execution's first answer.
type Obtained = (Plan, Option<EpisodicStart>);

/// What obtaining a workflow's plan came to.
enum Planned {
    /// The exec (marked planned), its plan, whether this call stored it,
    /// and an episodic execution's first answer.
    Plan(Box<WorkflowExec>, Plan, bool, Option<Box<EpisodicStart>>),
    /// The workflow could not be planned and ended so.
    Ended(Applied),
}
