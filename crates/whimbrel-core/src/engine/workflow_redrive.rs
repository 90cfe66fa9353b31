//! Redrive (design.md § 9.4): a FAILED or CANCELLED workflow execution
//! back to RUNNING, keeping its exec id. A request row names it
//! (`redrive_workflow_exec_id`, granted with starts and cancels; `whimbrel
//! redrive EXEC` puts one). Its COMPLETED activities keep their outputs
//! and never run again; each FAILED, TIMED_OUT or CANCELLED one is
//! REQUESTED again with its next attempt number and a history entry
//! `redrive:R`, and those with nothing pending are claimed as roots are.
//! Ends are counted anew in the redrive's generation
//! ([`whimbrel_rules::decide::redrive`]). Every step is conditioned on the
//! request id R, and the workflow keeps `redriving = R` and a due marker
//! until the claims are done, so a redelivered record or the monitor
//! finishes what a dead redrive began, and no request redrives twice.

use futures::stream::{self, StreamExt};
use tracing::info;

use super::{decide, Applied, Engine, EngineError};
use crate::contract::{ActivityState, WorkflowState};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, WorkflowExec, WorkflowRequest};
use crate::store::{StoreError, Write};
use whimbrel_rules::decide::redrive as rules;

impl<L: Launcher> Engine<L> {
    /// Apply the redrive request `req` (its `redrive_workflow_exec_id`
    /// set). Safe to apply again: a redrive done is not done twice, one
    /// begun is finished.
    ///
    /// Errors: [`EngineError::Rejected`] for an unknown workflow, one of
    /// another name than the row's, a request id not scoped to it
    /// ([`decide::check_request`]), one not FAILED or CANCELLED, or one
    /// with an activity not ended or settled yet (redrive it later);
    /// [`EngineError::Retry`] when DynamoDB is unavailable, or while the
    /// workflow's end still owes its parent the report
    /// ([`rules::redrive_wait`]).
    pub async fn redrive_workflow(&self, req: &WorkflowRequest) -> Result<Applied, EngineError> {
        let id = req.redrive_workflow_exec_id.as_deref().unwrap_or_default();
        let r = &req.workflow_request_id;
        decide::check_request(req).map_err(EngineError::Rejected)?;
        if ids::name_of(id) != Some(req.workflow_name.as_str()) {
            return Err(EngineError::Rejected(format!(
                "redrive request {r}: workflow exec {id:?} is not of workflow {:?}",
                req.workflow_name
            )));
        }
        let wf: WorkflowExec = self
            .store
            .get(
                &self.store.tables().workflow_exec(),
                self.workflow_key(id, &req.workflow_name),
            )
            .await?
            .ok_or_else(|| {
                EngineError::Rejected(format!("redrive of unknown workflow exec {id}"))
            })?;
        if wf.redriven_by(r) {
            if wf.redriving.as_deref() == Some(r.as_str()) {
                return self.finish_redrive(wf, r).await;
            }
            return Ok(Applied::Workflow(wf.state));
        }
        // Judged before the activities are read: one that ended before it
        // was planned may have a stored plan and no activities.
        if let Some(why) = rules::workflow_refusal(&wf) {
            return Err(EngineError::Rejected(format!("redrive request {r}: {why}")));
        }
        if let Some(why) = rules::redrive_wait(&wf) {
            return Err(EngineError::Retry(format!("redrive request {r}: {why}")));
        }
        let activities = self.all_activities(&wf).await?;
        if let Some(why) = rules::redrive_refusal(&wf, &activities) {
            return Err(EngineError::Rejected(format!("redrive request {r}: {why}")));
        }
        let now = self.now().epoch;
        let req = rules::redrive_update(self.store.tables(), &wf, r, now, &self.config);
        match self.store.update(req).await {
            Ok(_) => {}
            // Redriven meanwhile, by this request (finish it) or another.
            Err(StoreError::ConditionFailed) => {}
            Err(e) => return Err(e.into()),
        }
        let wf = self.load_workflow(id, &wf.workflow_name).await?;
        if wf.redriving.as_deref() != Some(r.as_str()) {
            // Not by this request: another redrive took it (it runs), or
            // its end came to owe its parent meanwhile (try again).
            if let Some(why) = rules::redrive_wait(&wf) {
                return Err(EngineError::Retry(format!("redrive request {r}: {why}")));
            }
            return Ok(Applied::Workflow(wf.state));
        }
        info!(workflow_exec_id = %id, redrive = %r, generation = ?wf.redrive_count, "workflow redriven");
        self.finish_redrive(wf, r).await
    }

    /// Finish redrive `r` of `wf` (RUNNING, `redriving = r`): count its
    /// COMPLETED activities into the new generation, redrive the others,
    /// claim those with nothing pending, then end the redrive (its marker
    /// and due marker go) and finish the workflow if nothing was left to
    /// run. Called by the request's handler and by the monitor.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn finish_redrive(
        &self,
        wf: WorkflowExec,
        r: &str,
    ) -> Result<Applied, EngineError> {
        let generation = wf.redrive_count.unwrap_or(0);
        let t = self.store.tables();
        if wf.state != WorkflowState::Running {
            // Ended meanwhile (everything it redrove ended): nothing to do.
            let dropped = rules::redrive_dropped_update(t, &wf, r);
            return match self.store.update(dropped).await {
                Ok(_) | Err(StoreError::ConditionFailed) => Ok(Applied::Workflow(wf.state)),
                Err(e) => Err(e.into()),
            };
        }
        let mut redriven = Vec::new();
        for a in self.all_activities(&wf).await? {
            match a.state {
                // Redriven by this request already, and ended again: its
                // own settle counts it in this generation (again: once).
                s if s.is_terminal() && rules::redriven_by(&a, r) => self.count_ended(&a).await?,
                ActivityState::Completed => {
                    self.count_ended(&rules::in_generation(&a, generation))
                        .await?
                }
                s if s.is_terminal() => {
                    redriven.push(self.redrive_activity(a, r, generation).await?)
                }
                _ if rules::redriven_by(&a, r) => redriven.push(a),
                _ => {}
            }
        }
        // Claimed one at a time: under a concurrency limit the slots go in
        // plan order (design.md § 9.3). A node an earlier run of this
        // redrive made RUNNING, and that died or failed before what a
        // wait owes once RUNNING (its child's request or end, the signals
        // kept for it), is owed that still: the claim does it.
        for a in redriven {
            let claimable = matches!(a.state, ActivityState::Requested | ActivityState::Running);
            if claimable && a.links.pending_dependency_count == 0 {
                self.queue_and_launch(a).await?;
            }
        }
        self.propagate_ends_again(&wf, r).await?;
        let done = rules::redrive_done_update(t, &wf, r);
        if let Err(e) = self.store.update(done).await {
            if !matches!(e, StoreError::ConditionFailed) {
                return Err(e.into());
            }
            // Ended meanwhile: the marker its end set stays.
            let dropped = rules::redrive_dropped_update(t, &wf, r);
            match self.store.update(dropped).await {
                Ok(_) | Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.finish_workflow(&wf.workflow_exec_id, &wf.workflow_name)
            .await?;
        Ok(Applied::Workflow(WorkflowState::Running))
    }

    /// Cancel again the dependents of each activity redrive `r` put back
    /// that has failed or been cancelled again (a CANCEL row, a timeout):
    /// when it ended while a dependent of it was still ended and not put
    /// back yet, its settle passed that dependent by, and the redrive then
    /// put it back waiting for a prerequisite that will never complete
    /// (simulation seed 3624). Idempotent: the cancels carry the
    /// prerequisite's engine step id, applied once per generation.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn propagate_ends_again(&self, wf: &WorkflowExec, r: &str) -> Result<(), EngineError> {
        for a in self.all_activities(wf).await? {
            let ended_again = a.state.is_terminal() && a.state != ActivityState::Completed;
            if ended_again && rules::redriven_by(&a, r) {
                self.cancel_dependents(&a).await?;
            }
        }
        Ok(())
    }

    /// Redrive the ended `a` (a conditional put of
    /// [`rules::redriven_item`]); returns the item as it now is.
    async fn redrive_activity(
        &self,
        a: ActivityExec,
        r: &str,
        generation: u32,
    ) -> Result<ActivityExec, EngineError> {
        let item = rules::redriven_item(&a, r, generation, self.now().epoch);
        let put = Write::Put {
            table: self.store.tables().activity_exec(),
            item: serde_dynamo::to_item(&item)
                .map_err(|e| EngineError::Retry(format!("{}: {e}", a.activity_exec_id)))?,
            cond: Some(rules::redrive_put_condition(&a)),
        };
        match self.store.transact(vec![put]).await {
            Ok(()) => Ok(item),
            Err(StoreError::ConditionFailed) => self.reload(&a).await,
            Err(e) => Err(e.into()),
        }
    }

    /// Every activity of `wf`'s plan, in plan order (consistent reads).
    async fn all_activities(&self, wf: &WorkflowExec) -> Result<Vec<ActivityExec>, EngineError> {
        let id = &wf.workflow_exec_id;
        let Some(plan) = self.load_plan(id, &wf.workflow_name).await? else {
            return Ok(Vec::new());
        };
        let loads = plan
            .plan
            .activities
            .iter()
            .map(|a| ids::activity_exec_id(id, &a.name));
        let results: Vec<Result<ActivityExec, EngineError>> = stream::iter(loads)
            .map(|a| async move { self.load_activity(&a, id).await })
            .buffered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }
}
