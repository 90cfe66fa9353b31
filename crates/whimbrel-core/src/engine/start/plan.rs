//! A start's plan: the registered definition, or the decider's plan or
//! first answer, recorded once so a start run again replays it
//! (design.md § 3.7), and the exec marked planned.

use super::*;

impl<L: Launcher> Engine<L> {
    /// The plan of `exec`: one recorded by an earlier start (on the plan
    /// table even when that start died before marking the exec) is
    /// replayed, never asked for again; otherwise it is obtained, stored
    /// and the exec marked planned. With whether this call stored it (then
    /// no activity item exists yet). A plan that cannot be had fails the
    /// workflow.
    pub(super) async fn plan_for_start(
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
        let scheduled = crate::engine::episodes::scheduled(&answer);
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
            (e.answer.decide_on.clone()).unwrap_or_else(crate::engine::episodes::every_event_kind)
        });
        if let (Some(kinds), Some(start)) = (&decide_on, &item.episodic) {
            mark = mark
                .set(attr::DECIDE_ON, av(kinds))
                .set(attr::DECIDER, s(&start.decider));
        }
        match self.store.update(mark).await {
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
}

/// A plan obtained, and an episodic execution's first answer.
type Obtained = (Plan, Option<EpisodicStart>);

/// What obtaining a workflow's plan came to.
pub(super) enum Planned {
    /// The exec (marked planned), its plan, whether this call stored it,
    /// and an episodic execution's first answer.
    Plan(Box<WorkflowExec>, Plan, bool, Option<Box<EpisodicStart>>),
    /// The workflow could not be planned and ended so.
    Ended(Applied),
}
