//! What a state owes, run after the write that reached it and again by the
//! monitor while the due marker says it is not done: release dependents
//! (COMPLETED), cancel them (FAILED, TIMED_OUT, CANCELLED), close a
//! cancelled child node's child and a failing workflow's children, finish
//! the workflow; and launching a claimed attempt. Every step is idempotent.

use std::collections::HashMap;

use futures::stream::{self, StreamExt};
use tracing::{info, warn};

use super::apply::Source;
use super::decide::{self, Details, Obligation};
use super::{decoded, Engine, EngineError};
use crate::contract::{ActivityState, Transition};
use crate::ids;
use crate::launcher::{InvokeError, Launcher};
use crate::model::ActivityExec;
use crate::plan::{LaunchPayload, SHAPE_VERSION};
use crate::store::StoreError;

/// Immediate retries of an invoke that failed for a transient reason before
/// the launch is left to the monitor's schedule-to-start relaunch.
const INVOKE_TRIES: u32 = 3;

impl<L: Launcher> Engine<L> {
    /// Perform what the activity's state owes ([`decide::owed`]), in
    /// order, the due marker cleared last. Idempotent. A release cut by
    /// the invocation's budget ([`super::budget`]) leaves the rest owed:
    /// the marker stays, and the monitor settles again.
    pub(crate) async fn settle(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        for obligation in decide::owed(exec) {
            if !self.perform(exec, obligation).await? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Perform one obligation of `exec`; false when it stopped short (the
    /// rest stays owed).
    async fn perform(&self, exec: &ActivityExec, ob: Obligation) -> Result<bool, EngineError> {
        match ob {
            Obligation::FreeSlot => self.free_slot(exec).await?,
            Obligation::ReleaseDependents => return self.release_dependents(exec).await,
            Obligation::CloseChild => self.close_child(exec).await?,
            Obligation::CancelChildren => self.cancel_children(exec).await?,
            Obligation::CancelDependents => self.cancel_dependents(exec).await?,
            Obligation::EndCounted => self.end_counted(exec).await?,
            Obligation::ClearDue => {
                let clear = decide::clear_due(self.store.tables(), exec);
                match self.store.update(clear).await {
                    Ok(()) | Err(StoreError::ConditionFailed) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(true)
    }

    /// The end of `exec` told to its workflow: counted toward its finish,
    /// or, for a node a decision scheduled, appended to its log for the
    /// decider (design.md § 10.2).
    async fn end_counted(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        if exec.links.scheduled_by.is_some() {
            self.untaken_signals_to_events(exec).await?;
            return self.append_node_end(exec).await;
        }
        self.count_ended(exec).await?;
        self.finish_workflow(&exec.workflow_exec_id, &exec.workflow_name)
            .await
    }

    /// Send the wake-up `exec` owes as written
    /// ([`decide::wake_up_for`], design.md § 9), if any. Best effort: one
    /// that cannot be sent is logged, and its marker waits for the next
    /// tick.
    pub(crate) async fn send_wake_up(&self, exec: &ActivityExec) {
        let now = self.now().epoch;
        let Some(wake) = decide::wake_up_for(exec, &self.config, now) else {
            return;
        };
        match self.launcher.wake_up(&wake, wake.delay_seconds(now)).await {
            Ok(()) => crate::metrics::wake_up_sent(),
            Err(e) => {
                warn!(activity_exec_id = %exec.activity_exec_id, error = %e, "wake-up not sent; the next monitor tick judges the item")
            }
        }
    }

    /// Claim and launch the attempt a retry queued (a Lambda activity,
    /// QUEUED and unclaimed, its delay over). Returns whether this call won
    /// the claim; anything else (claimed meanwhile, cancelled, a task-list
    /// activity) is left alone.
    pub(crate) async fn launch_attempt(&self, exec: ActivityExec) -> Result<bool, EngineError> {
        if !exec.runner.kind().is_invoked()
            || exec.state != ActivityState::Queued
            || exec.attempt.token_hash.is_some()
        {
            return Ok(false);
        }
        let token = self.env.new_token();
        let req = decide::launch_update(
            self.store.tables(),
            &self.config,
            &exec,
            &ids::token_hash(&token),
            self.now().epoch,
        );
        match self.store.update_returning_new(req).await {
            Ok(Some(item)) => {
                let claimed = decoded(&exec.activity_exec_id, item)?;
                info!(activity_exec_id = %claimed.activity_exec_id, attempt = claimed.attempt.number, "launching the next attempt");
                self.launch(&claimed, &token).await?;
                Ok(true)
            }
            Ok(None) | Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The payload of the claimed attempt `exec` holds (design.md § 3.9): the
    /// four ids, `attempt`, its token, `input` (read from its input row when
    /// kept there, [`super::payloads`]), the timeouts and the prerequisites'
    /// outputs (read consistently, from their event rows when kept there),
    /// the largest by reference when they would pass Lambda's 1 MB
    /// ([`LaunchPayload::fit`]).
    pub async fn launch_payload(
        &self,
        exec: &ActivityExec,
        token: &str,
    ) -> Result<LaunchPayload, EngineError> {
        let mut prerequisites = HashMap::new();
        let ids = self.prerequisite_ids(exec).await?;
        if !ids.is_empty() {
            let keys = ids
                .iter()
                .map(|p| self.activity_key(p, &exec.workflow_exec_id))
                .collect();
            let prereqs: Vec<ActivityExec> = self
                .store
                .batch_get(&self.store.tables().activity_exec(), keys)
                .await?;
            prerequisites = self.outputs_of(prereqs).await?;
        }
        let mut payload = LaunchPayload {
            version: SHAPE_VERSION,
            activity_exec_id: exec.activity_exec_id.clone(),
            activity_name: exec.activity_name.clone(),
            workflow_exec_id: exec.workflow_exec_id.clone(),
            workflow_name: exec.workflow_name.clone(),
            attempt: exec.attempt.number,
            launch: exec.attempt.launches,
            input: self.input_of(exec).await?,
            prerequisites,
            timeout_seconds: exec.timeouts.start_to_close_seconds,
            heartbeat_timeout_seconds: decide::heartbeat_timeout(exec, &self.config),
            attempt_token: Some(token.to_string()),
            prerequisites_by_reference: vec![],
        };
        payload.fit(crate::plan::MAX_LAUNCH_PAYLOAD_BYTES);
        Ok(payload)
    }

    /// The activity exec ids of `exec`'s prerequisites: its own list, or
    /// for a wide join (which keeps none) its `depends_on` in the stored
    /// plan, mapped to ids as they were derived ([`ids::activity_exec_id`]).
    ///
    /// Errors: [`EngineError::Retry`] if the plan cannot be read or lacks
    /// the activity.
    async fn prerequisite_ids(&self, exec: &ActivityExec) -> Result<Vec<String>, EngineError> {
        if exec.links.join_groups.is_none() {
            return Ok(exec.links.prerequisites.clone());
        }
        let stored = self.plan_of(exec).await?;
        let planned = stored
            .plan
            .activities
            .iter()
            .find(|a| a.name == exec.activity_name)
            .ok_or_else(|| {
                EngineError::Retry(format!("{}: not in its plan", exec.activity_exec_id))
            })?;
        Ok(planned
            .depends_on
            .iter()
            .map(|p| ids::activity_exec_id(&exec.workflow_exec_id, p))
            .collect())
    }

    /// Invoke the activity's Lambda asynchronously for the attempt `exec`
    /// holds, whose claim this caller won, with [`Engine::launch_payload`].
    /// A function that refuses for good fails the attempt (retried per the
    /// policy); one that cannot be reached is retried a little, then left
    /// to the monitor's relaunch.
    #[tracing::instrument(skip_all, fields(activity_exec_id = %exec.activity_exec_id, workflow_exec_id = %exec.workflow_exec_id, attempt = exec.attempt.number, launch = exec.attempt.launches))]
    pub(crate) async fn launch(&self, exec: &ActivityExec, token: &str) -> Result<(), EngineError> {
        let payload = self.launch_payload(exec, token).await?;
        let body = serde_json::to_value(&payload).expect("serializable");
        let mut tries = 0;
        loop {
            tries += 1;
            let function = exec.runner.runs.lambda().unwrap_or_default();
            match self.launcher.invoke_async(function, &body).await {
                Ok(()) => {
                    info!(activity_exec_id = %exec.activity_exec_id, lambda = %function, attempt = exec.attempt.number, "activity launched");
                    if self.config.record_launches {
                        let req =
                            decide::launched_update(self.store.tables(), exec, self.now().epoch);
                        if let Err(e) = self.store.update(req).await {
                            // Only for operators' eyes; nothing depends on it.
                            info!(activity_exec_id = %exec.activity_exec_id, error = %e, "launch time not recorded");
                        }
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
                    crate::metrics::launch_failure();
                    let event_id =
                        ids::EngineStep::LaunchFailed(&exec.activity_exec_id, exec.attempt.number)
                            .event_id();
                    let details = Details {
                        error: Some(format!("LAUNCH_FAILED: {e}")),
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

    /// Cancel every dependent of `exec` that has not started (design.md § 3.4);
    /// each cancelled one propagates further through its own settle.
    pub(crate) async fn cancel_dependents(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let event_id = ids::EngineStep::UpstreamEnded(&exec.activity_exec_id).event_id();
        let reason = format!("prerequisite {} ended {}", exec.activity_name, exec.state);
        let (dependents, _) = self.dependents_of(exec).await?;
        let wf = &exec.workflow_exec_id;
        let found = (self.activities_with_ids(wf, dependents.iter().cloned())).await?;
        let open = |d: &ActivityExec| d.state.is_not_started() || d.is_last_event(&event_id);
        let to_cancel: Vec<ActivityExec> = found.iter().filter(|d| open(d)).cloned().collect();
        let results: Vec<Result<(), EngineError>> = stream::iter(to_cancel)
            .map(|d| {
                let event_id = event_id.clone();
                let reason = reason.clone();
                async move {
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
        results.into_iter().collect::<Result<(), _>>()?;
        // A dependent not there yet (an episodic decision's owed effect)
        // is cancelled once it is: the settle stays owed until then.
        match dependents.len() - found.len() {
            0 => Ok(()),
            n => Err(EngineError::Retry(format!(
                "{}: {n} of its dependents are not stored yet",
                exec.activity_exec_id
            ))),
        }
    }
}
