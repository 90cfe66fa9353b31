//! What a state owes, run after the write that reached it and again by the
//! monitor while the due marker says it is not done: release dependents
//! (COMPLETED), cancel them (FAILED, TIMED_OUT, CANCELLED), finish the
//! workflow; and launching a claimed attempt. Every step is idempotent.

use std::collections::HashMap;

use futures::stream::{self, StreamExt};
use serde_json::Value;
use tracing::{info, warn};

use super::apply::Source;
use super::decide::{self, Details};
use super::{decoded, Engine, EngineError, WorkflowCounts};
use crate::contract::{self, ActivityState, Transition, WorkflowState};
use crate::ids;
use crate::launcher::{InvokeError, Launcher};
use crate::model::ActivityExec;
use crate::plan::{LaunchPayload, SHAPE_VERSION};
use crate::store::{av, n, s, Cond, StoreError, UpdateRequest};

/// Immediate retries of an invoke that failed for a transient reason before
/// the launch is left to the monitor's schedule-to-start relaunch.
const INVOKE_TRIES: u32 = 3;

impl<L: Launcher> Engine<L> {
    /// Run the side effects of the activity's state, then, once they are
    /// done for a terminal activity, clear its due marker. Idempotent.
    pub(crate) async fn settle(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        match exec.state {
            ActivityState::Completed => {
                self.release_dependents(exec).await?;
                self.finish_workflow(&exec.workflow_exec_id, &exec.workflow_name)
                    .await?;
            }
            s if s.is_terminal() => {
                self.cancel_dependents(exec).await?;
                self.finish_workflow(&exec.workflow_exec_id, &exec.workflow_name)
                    .await?;
            }
            // A claimed attempt is launched by its claimer only; a lost
            // launch is the monitor's (schedule-to-start).
            _ => return Ok(()),
        }
        if exec.due_epoch.is_some() {
            match self
                .store
                .update(decide::clear_due(self.store.tables(), exec), false)
                .await
            {
                Ok(_) | Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Lower each dependent's pending count exactly once for this edge, and
    /// claim and launch those that reach zero.
    async fn release_dependents(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let results: Vec<Result<(), EngineError>> = stream::iter(exec.dependents.iter())
            .map(|dep| async move {
                let req = decide::release_update(
                    self.store.tables(),
                    dep,
                    &exec.workflow_exec_id,
                    &exec.activity_exec_id,
                );
                let waiting: ActivityExec = match self.store.update(req, true).await {
                    Ok(Some(item)) => decoded(dep, item)?,
                    Ok(None) => return Err(EngineError::Retry(format!("{dep}: no item returned"))),
                    // Released by this edge already (a redelivery, or a
                    // crash after the release): resume from the item.
                    Err(StoreError::ConditionFailed) => {
                        self.load_activity(dep, &exec.workflow_exec_id).await?
                    }
                    Err(e) => return Err(e.into()),
                };
                self.queue_and_launch(waiting).await
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Claim the first attempt of an activity whose prerequisites all
    /// completed, and launch it if this call won the claim. An activity not
    /// ready, or claimed by someone else, is left alone.
    pub(crate) async fn queue_and_launch(&self, mut exec: ActivityExec) -> Result<(), EngineError> {
        loop {
            // Only a first claim: REQUESTED or READY with nothing pending.
            // Anything further along (QUEUED, PREPARING...) is someone
            // else's attempt.
            if !matches!(exec.state, ActivityState::Requested | ActivityState::Ready)
                || exec.pending_dependency_count > 0
            {
                return Ok(());
            }
            let token = self.env.new_token();
            let now = self.now().epoch;
            let req = decide::queue_update(
                self.store.tables(),
                &self.config,
                &exec,
                &ids::token_hash(&token),
                now,
            );
            match self.store.update(req, true).await {
                Ok(Some(item)) => {
                    let queued = decoded(&exec.activity_exec_id, item)?;
                    return self.launch(&queued, &token).await;
                }
                Ok(None) => {
                    return Err(EngineError::Retry(format!(
                        "{}: no item returned",
                        exec.activity_exec_id
                    )))
                }
                // Someone else changed it (claimed it, cancelled it): look again.
                Err(StoreError::ConditionFailed) => {
                    exec = self
                        .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                        .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Invoke the activity's Lambda asynchronously for the attempt `exec`
    /// holds, whose claim this caller won (DESIGN 3.9): the four ids,
    /// `attempt`, its token, `input` and the prerequisites' outputs. A
    /// function that refuses for good fails the activity; one that cannot
    /// be reached is retried a little, then left to the monitor.
    pub(crate) async fn launch(&self, exec: &ActivityExec, token: &str) -> Result<(), EngineError> {
        let mut prerequisites = HashMap::new();
        if !exec.prerequisites.is_empty() {
            let keys = exec
                .prerequisites
                .iter()
                .map(|p| self.activity_key(p, &exec.workflow_exec_id))
                .collect();
            let prereqs: Vec<ActivityExec> = self
                .store
                .batch_get(&self.store.tables().activity_exec(), keys)
                .await?;
            for p in prereqs {
                prerequisites.insert(p.activity_name, p.output.unwrap_or(Value::Null));
            }
        }
        let payload = LaunchPayload {
            version: SHAPE_VERSION,
            activity_exec_id: exec.activity_exec_id.clone(),
            activity_name: exec.activity_name.clone(),
            workflow_exec_id: exec.workflow_exec_id.clone(),
            workflow_name: exec.workflow_name.clone(),
            attempt: exec.attempt,
            input: exec.input.clone().unwrap_or(Value::Null),
            prerequisites,
            timeout_seconds: exec.timeout_seconds,
            heartbeat_timeout_seconds: decide::heartbeat_timeout(exec, &self.config),
            attempt_token: Some(token.to_string()),
        };
        let body = serde_json::to_value(&payload).expect("serializable");
        let mut tries = 0;
        loop {
            tries += 1;
            match self.launcher.invoke_async(&exec.lambda, &body).await {
                Ok(()) => {
                    info!(activity_exec_id = %exec.activity_exec_id, lambda = %exec.lambda, attempt = exec.attempt, "activity launched");
                    let req = decide::launched_update(self.store.tables(), exec, self.now().epoch);
                    if let Err(e) = self.store.update(req, false).await {
                        // Only for operators' eyes; nothing depends on it.
                        info!(activity_exec_id = %exec.activity_exec_id, error = %e, "launch time not recorded");
                    }
                    return Ok(());
                }
                Err(e @ InvokeError::Unavailable { .. }) => {
                    if tries >= INVOKE_TRIES {
                        warn!(activity_exec_id = %exec.activity_exec_id, error = %e, "launch failed; the monitor relaunches it after schedule-to-start");
                        return Ok(());
                    }
                    self.store.pause(100 * u64::from(tries)).await;
                }
                Err(e) => {
                    warn!(activity_exec_id = %exec.activity_exec_id, error = %e, "launch refused; failing the activity");
                    let event_id =
                        format!("launch-failed:{}:{}", exec.activity_exec_id, exec.attempt);
                    let details = Details {
                        error: Some(format!("launch failed: {e}")),
                        ..Details::default()
                    };
                    self.decree(
                        exec.clone(),
                        Transition::Failed,
                        Source::Engine,
                        &event_id,
                        details,
                    )
                    .await?;
                    return Ok(());
                }
            }
        }
    }

    /// Cancel every dependent of `exec` that has not started (DESIGN 3.4);
    /// each cancelled one propagates further through its own settle.
    async fn cancel_dependents(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let event_id = format!("upstream-ended:{}", exec.activity_exec_id);
        let reason = format!("prerequisite {} ended {}", exec.activity_name, exec.state);
        let results: Vec<Result<(), EngineError>> = stream::iter(exec.dependents.iter())
            .map(|dep| {
                let event_id = event_id.clone();
                let reason = reason.clone();
                async move {
                    let d = self.load_activity(dep, &exec.workflow_exec_id).await?;
                    if !(d.state.is_not_started() || d.last_event_id.as_deref() == Some(&event_id))
                    {
                        return Ok(());
                    }
                    let details = Details {
                        error: Some(reason),
                        ..Details::default()
                    };
                    self.decree(d, Transition::Cancel, Source::Engine, &event_id, details)
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Finish the workflow if its last activity ended: counted, not scanned
    /// (DESIGN 3.3). The write is conditional on RUNNING, so concurrent
    /// finishers agree and a redelivery changes nothing.
    pub(crate) async fn finish_workflow(&self, id: &str, name: &str) -> Result<(), EngineError> {
        let wf: WorkflowCounts = self
            .store
            .get_projected(
                &self.store.tables().workflow_exec(),
                self.workflow_key(id, name),
                &WorkflowCounts::ATTRIBUTES,
            )
            .await?
            .ok_or_else(|| EngineError::Retry(format!("workflow exec {id} not found")))?;
        if wf.state != WorkflowState::Running {
            return Ok(());
        }
        let counts = contract::EndCounts {
            completed: wf.completed_count,
            failed: wf.failed_count,
            cancelled: wf.cancelled_count,
        };
        let Some(outcome) = contract::workflow_outcome(wf.activity_count, counts) else {
            return Ok(());
        };
        if self
            .move_workflow(id, name, WorkflowState::Running, outcome, None)
            .await?
        {
            info!(workflow_exec_id = id, state = %outcome, "workflow finished");
        }
        Ok(())
    }

    /// Move a workflow exec from `from` to `to` with a conditional write
    /// ([`WorkflowState::may_move_to`]), recording `error` and, for an end,
    /// the end time; an end also clears its due marker. Returns false if it
    /// was not in `from`.
    pub(crate) async fn move_workflow(
        &self,
        id: &str,
        name: &str,
        from: WorkflowState,
        to: WorkflowState,
        error: Option<&str>,
    ) -> Result<bool, EngineError> {
        debug_assert!(from.may_move_to(to), "{from} -> {to}");
        let mut req = UpdateRequest::new(
            self.store.tables().workflow_exec(),
            self.workflow_key(id, name),
        )
        .when(Cond::eq("state", s(from.as_str())))
        .set("state", s(to.as_str()));
        if let Some(e) = error {
            req = req.set("error", s(decide::cap_error(e)));
        }
        if to.is_terminal() {
            let now = self.now();
            req = req
                .set("end_time", av(&now.date_list()))
                .set("end_time_epoch", n(now.epoch))
                .remove("due_epoch")
                .remove("due_shard");
        }
        match self.store.update(req, false).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
