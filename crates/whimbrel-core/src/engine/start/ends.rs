//! How a workflow ends before it started: REQUESTED → FAILED (a start
//! that cannot plan, the monitor's give-up) or CANCELLED (a cancel
//! request before its plan is stored), each one conditional write that a
//! start storing its plan meanwhile wins.

use super::*;

impl<L: Launcher> Engine<L> {
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
        match self.store.update(req).await {
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

    /// REQUESTED → FAILED with `reason`, only while no plan is stored: a
    /// start that stored its plan meanwhile wins, and goes on to create
    /// the activities (the monitor's give-up, a start that could not plan).
    /// Whether this write ended the workflow.
    pub(super) async fn fail_unplanned(
        &self,
        exec: &WorkflowExec,
        reason: &str,
    ) -> Result<bool, EngineError> {
        self.fail_requested(exec, reason, true).await
    }

    /// REQUESTED → FAILED with `reason`; with `unplanned`, only while no
    /// plan is stored. Whether this write ended the workflow.
    pub(super) async fn fail_requested(
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
        match self.store.update(req).await {
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

    /// A start that cannot plan fails the workflow ([`Self::fail_unplanned`]):
    /// unless another start planned it meanwhile, whose plan stands. Returns
    /// the workflow's state as it then is.
    pub(super) async fn fail_start(
        &self,
        exec: &WorkflowExec,
        reason: &str,
    ) -> Result<Applied, EngineError> {
        if self.fail_unplanned(exec, reason).await? {
            return Ok(Applied::Workflow(WorkflowState::Failed));
        }
        let (id, name) = (&exec.workflow_exec_id, &exec.workflow_name);
        let now = self.load_workflow(id, name).await?;
        info!(workflow_exec_id = %id, %reason, state = %now.state, "start could not plan; another start planned or ended the workflow meanwhile");
        Ok(Applied::Workflow(now.state))
    }
}
