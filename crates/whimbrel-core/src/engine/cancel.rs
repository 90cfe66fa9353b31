//! A client's request to cancel a workflow execution: one row of
//! `whimbrel_workflow_request` naming it (`cancel_workflow_exec_id`), read
//! from that table's stream like a start (docs/contract.md § 6, "Cancel requests"). Cancels
//! are granted with starts, apart from activity reports, and need no
//! attempt token, so they work where tokens are required.

use tracing::info;
use whimbrel_rules::keys::WorkflowRef;

use super::{decide, Applied, Engine, EngineError};
use crate::contract::WorkflowState;
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{WorkflowExec, WorkflowRequest};

/// The reason recorded when a cancel request gives none.
pub const DEFAULT_CANCEL_REASON: &str = "cancelled by request";

/// Redrives one cancel walks through before it leaves the rest to a retry.
const MAX_REDRIVES_MET: usize = 3;

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
    /// already ended, or not of the row's `workflow_name`, or a request id
    /// not scoped to it ([`decide::check_request`]);
    /// [`EngineError::Retry`] when DynamoDB is unavailable, or the
    /// workflow's activities are being created (tried again in a moment).
    pub async fn cancel_workflow(&self, req: &WorkflowRequest) -> Result<Applied, EngineError> {
        decide::check_request(req).map_err(EngineError::Rejected)?;
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
                    WorkflowState::Running => self.cancel_started(&wf, req, reason).await,
                    state => Ok(Applied::Workflow(state)),
                }
            }
            WorkflowState::Running => self.cancel_started(&wf, req, reason).await,
            ended => Err(EngineError::Rejected(format!(
                "cancel of workflow exec {id}: it already ended {ended}"
            ))),
        }
    }

    /// The cancel request `req` for the RUNNING workflow `wf`: an episodic
    /// execution whose decider is consulted on cancel requests is told, as
    /// an event (design.md § 10.1), and decides; another episodic one ends
    /// CANCELLED with its open nodes; a static one has its activities
    /// cancelled ([`Self::cancel_running`]).
    ///
    /// Errors: as [`Self::cancel_workflow`].
    async fn cancel_started(
        &self,
        wf: &WorkflowExec,
        req: &WorkflowRequest,
        reason: &str,
    ) -> Result<Applied, EngineError> {
        if !wf.is_episodic() {
            return self.cancel_running(wf, req, reason).await;
        }
        let key = WorkflowRef::new(&wf.workflow_exec_id, &wf.workflow_name);
        let kind = crate::decider::EventKind::CancelRequested;
        if wf.decide_on.as_ref().is_some_and(|k| k.contains(&kind)) {
            let source = format!("cancel:{}", req.workflow_request_id);
            let details = serde_json::json!({ "reason": reason });
            let at = self.now().epoch;
            let t = self.store.tables();
            let told = self
                .append_to_log(key, &source, |state, start| {
                    use whimbrel_rules::decide::episodes::{append_event, NewEvent};
                    let event = NewEvent {
                        kind,
                        source: &source,
                        at_epoch: at,
                        details: details.clone(),
                    };
                    append_event(t, key, state, event, Some(start))
                })
                .await?;
            let now = self.load_workflow(key.exec_id, key.name).await?.state;
            if !told && now == WorkflowState::Running {
                // Its first answer is not committed yet, or its closing
                // decision's effects are being written: in a moment.
                return Err(EngineError::Retry(format!(
                    "cancel of {}: the execution takes no event yet",
                    key.exec_id
                )));
            }
            info!(workflow_exec_id = %key.exec_id, %reason, told, "workflow cancel requested");
            return Ok(Applied::Workflow(now));
        }
        let ended = (self.end_episodic(key, WorkflowState::Cancelled, reason)).await?;
        Ok(Applied::Workflow(ended))
    }

    /// Cancel every activity of the running workflow `wf` not ended, for
    /// the cancel request `req`. A redrive under way (`redriving`) is
    /// finished first, and a redrive that began after `wf` was read is
    /// caught by reading it again: either way an activity still ended
    /// when the cancel walks past it, and put back after, would run
    /// despite the cancel (design.md § 9.4).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable, or the
    /// workflow is redriven again and again while it is cancelled.
    async fn cancel_running(
        &self,
        wf: &WorkflowExec,
        req: &WorkflowRequest,
        reason: &str,
    ) -> Result<Applied, EngineError> {
        let step = ids::EngineStep::CancelRequest(&req.workflow_request_id).event_id();
        let (id, name) = (&wf.workflow_exec_id, &wf.workflow_name);
        let mut wf = wf.clone();
        for _ in 0..MAX_REDRIVES_MET {
            if let Some(r) = wf.redriving.clone() {
                self.finish_redrive(wf.clone(), &r).await?;
            }
            self.cancel_all(&wf, &step, reason).await?;
            let now = self.load_workflow(id, name).await?;
            // Read REQUESTED, it was started meanwhile as an episodic
            // execution (its first answer made it so): no plan to cancel.
            if now.is_episodic() && !wf.is_episodic() {
                return Box::pin(self.cancel_started(&now, req, reason)).await;
            }
            if now.redrive_count == wf.redrive_count && now.redriving.is_none() {
                info!(workflow_exec_id = %id, %reason, "workflow cancel requested: its activities are cancelled");
                return Ok(Applied::Workflow(WorkflowState::Running));
            }
            wf = now;
        }
        Err(EngineError::Retry(format!(
            "cancel of workflow exec {id}: redriven {MAX_REDRIVES_MET} times while cancelled"
        )))
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
