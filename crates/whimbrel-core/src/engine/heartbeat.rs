//! Heartbeats (design.md § 3.6): a running attempt records that it is
//! alive on its item (`heartbeat_time_epoch`), fenced by its token like a
//! report, and learns its state (CANCELLED_RUNNING: stop).

use super::{Engine, EngineError};
use crate::attr;
use crate::contract::ActivityState;
use crate::launcher::Launcher;
use crate::model::ActivityExec;
use crate::store::{av, n, s, Cond, StoreError, UpdateRequest};
use whimbrel_rules::decide;

impl<L: Launcher> Engine<L> {
    /// Record a heartbeat for a running activity (a direct conditional
    /// update of `whimbrel_activity_exec`, the architecture's
    /// `heartbeat_time_epoch`; not a state change). Returns the activity's
    /// state, so a running activity learns it was cancelled
    /// (CANCELLED_RUNNING) or timed out. Same as
    /// [`Engine::heartbeat_attempt`] without a token.
    pub async fn heartbeat(&self, activity_exec_id: &str) -> Result<ActivityState, EngineError> {
        self.heartbeat_attempt(activity_exec_id, None).await
    }

    /// A heartbeat from the attempt holding `token` (when given).
    ///
    /// Errors: [`EngineError::Rejected`] for an unknown activity, or a token
    /// that is not the live attempt's (the attempt should stop).
    pub async fn heartbeat_attempt(
        &self,
        activity_exec_id: &str,
        token: Option<&str>,
    ) -> Result<ActivityState, EngineError> {
        let exec = self.find_activity(activity_exec_id).await?.ok_or_else(|| {
            EngineError::Rejected(format!("unknown activity exec {activity_exec_id}"))
        })?;
        // The same fencing as reports: a stale or forged token, or none
        // where the activity requires one, is refused.
        decide::report_actor(&exec, None, token)
            .map_err(|r| EngineError::Rejected(format!("{activity_exec_id}: {r}")))?;
        if !exec.state.is_running() || !exec.timeouts.heartbeat_enabled {
            return Ok(exec.state);
        }
        let now = self.now();
        let mut req = UpdateRequest::new(
            self.store.tables().activity_exec(),
            self.activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
        )
        .when(Cond::In(
            attr::STATE.into(),
            vec![
                s(ActivityState::Running.as_str()),
                s(ActivityState::CancelledRunning.as_str()),
            ],
        ))
        .set(attr::HEARTBEAT_TIME, av(&now.date_list()))
        .set(attr::HEARTBEAT_TIME_EPOCH, n(now.epoch));
        if let Some(h) = &exec.attempt.token_hash {
            if token.is_some() {
                req = req.when(Cond::eq(attr::ATTEMPT_TOKEN_HASH, s(h)));
            }
        }
        match self.store.update_returning_new(req).await {
            Ok(Some(item)) => Ok(serde_dynamo::from_item::<_, ActivityExec>(item)
                .map(|e| e.state)
                .unwrap_or(exec.state)),
            Ok(None) => Ok(exec.state),
            Err(StoreError::ConditionFailed) => Ok(self
                .find_activity(activity_exec_id)
                .await?
                .map_or(exec.state, |e| e.state)),
            Err(e) => Err(e.into()),
        }
    }
}
