//! A client's request to cancel a workflow execution: one row of
//! `whimbrel_workflow_request` naming it (`cancel_workflow_exec_id`), read
//! from that table's stream like a start (docs/contract.md § 6, "Cancel requests"). Cancels
//! are granted with starts, apart from activity reports, and need no
//! attempt token, so they work where tokens are required.

use tracing::info;

use super::{Applied, Engine, EngineError};
use crate::contract::WorkflowState;
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{WorkflowExec, WorkflowRequest};

/// The reason recorded when a cancel request gives none.
pub const DEFAULT_CANCEL_REASON: &str = "cancelled by request";

impl<L: Launcher> Engine<L> {
    /// Apply the cancel request `req` (its `cancel_workflow_exec_id` set):
    /// a workflow not started yet is CANCELLED as a whole
    /// ([`Engine::cancel_requested_workflow`]); in a running one, every
    /// activity that has not ended is cancelled by the engine (contract:
    /// CANCEL; a RUNNING one goes CANCELLED_RUNNING until it acknowledges,
    /// or the cancel grace ends it), and the workflow then ends CANCELLED
    /// (FAILED if an activity had failed). Safe to apply again: the
    /// activities' cancels carry the request's engine step id.
    ///
    /// Errors: [`EngineError::Rejected`] for a workflow that is unknown,
    /// already ended, or not of the row's `workflow_name`;
    /// [`EngineError::Retry`] when DynamoDB is unavailable, or the
    /// workflow's activities are being created (tried again in a moment).
    pub async fn cancel_workflow(&self, req: &WorkflowRequest) -> Result<Applied, EngineError> {
        let id = req.cancel_workflow_exec_id.as_deref().unwrap_or_default();
        let wf = self.cancelled_workflow(req, id).await?;
        let reason = req.reason.as_deref().unwrap_or(DEFAULT_CANCEL_REASON);
        match wf.state {
            WorkflowState::Requested => {
                match self
                    .cancel_requested_workflow(id, &wf.workflow_name, reason)
                    .await?
                {
                    // Its start moved it to RUNNING between the read and
                    // the write: cancel what the start created.
                    WorkflowState::Running => self.cancel_running(&wf, req, reason).await,
                    state => Ok(Applied::Workflow(state)),
                }
            }
            WorkflowState::Running => self.cancel_running(&wf, req, reason).await,
            ended => Err(EngineError::Rejected(format!(
                "cancel of workflow exec {id}: it already ended {ended}"
            ))),
        }
    }

    /// Cancel every activity of the running workflow `wf` not ended, for
    /// the cancel request `req`.
    async fn cancel_running(
        &self,
        wf: &WorkflowExec,
        req: &WorkflowRequest,
        reason: &str,
    ) -> Result<Applied, EngineError> {
        let step = ids::EngineStep::CancelRequest(&req.workflow_request_id).event_id();
        self.cancel_all(wf, &step, reason).await?;
        info!(workflow_exec_id = %wf.workflow_exec_id, %reason, "workflow cancel requested: its activities are cancelled");
        Ok(Applied::Workflow(WorkflowState::Running))
    }

    /// The workflow exec a cancel request names, checked against the row.
    async fn cancelled_workflow(
        &self,
        req: &WorkflowRequest,
        id: &str,
    ) -> Result<WorkflowExec, EngineError> {
        if ids::name_of(id) != Some(req.workflow_name.as_str()) {
            return Err(EngineError::Rejected(format!(
                "cancel request {}: workflow exec {id:?} is not of workflow {:?}",
                req.workflow_request_id, req.workflow_name
            )));
        }
        self.store
            .get::<WorkflowExec>(
                &self.store.tables().workflow_exec(),
                super::decide::workflow_key(id, &req.workflow_name),
            )
            .await?
            .ok_or_else(|| EngineError::Rejected(format!("cancel of unknown workflow exec {id}")))
    }
}
