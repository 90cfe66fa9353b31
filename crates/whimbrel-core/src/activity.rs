//! The activity helper: what an activity Lambda needs to report RUNNING,
//! heartbeat, and end COMPLETED (with output) or FAILED, through the Simple
//! Lambda API (one `whimbrel_activity_event` row per transition).
//!
//! ```no_run
//! # async fn run(payload: whimbrel_core::plan::LaunchPayload) -> Result<(), Box<dyn std::error::Error>> {
//! let activity = whimbrel_core::activity::Activity::from_env(payload).await?;
//! activity.running().await?;
//! activity.heartbeat().await?;            // every few seconds while working
//! activity.completed(serde_json::json!({"words": 42})).await?;
//! # Ok(()) }
//! ```

use serde_json::Value;

use crate::contract::{ActivityState, Transition};
use crate::dates::Timestamp;
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::ids;
use crate::model::ActivityEvent;
use crate::plan::LaunchPayload;
use crate::store::{n, s, Store, StoreError, Tables, UpdateRequest};

/// Why a report failed.
#[derive(Debug, thiserror::Error)]
pub enum ActivityError {
    /// DynamoDB refused or could not be reached.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine refused (e.g. unknown activity).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Configuration from the environment is invalid.
    #[error("configuration: {0}")]
    Config(String),
}

/// A launched activity, able to report its own transitions.
#[derive(Debug, Clone)]
pub struct Activity {
    /// What the launcher passed.
    pub payload: LaunchPayload,
    engine: Engine<()>,
    source: String,
}

impl Activity {
    /// An activity reporting through `store`.
    pub fn new(payload: LaunchPayload, store: Store, config: EngineConfig) -> Self {
        let source = std::env::var("AWS_LAMBDA_FUNCTION_NAME")
            .map(|f| format!("lambda:{f}"))
            .unwrap_or_else(|_| "whimbrel activity".into());
        Activity {
            payload,
            engine: Engine::new(store, (), config),
            source,
        }
    }

    /// An activity using the AWS configuration and `WHIMBREL_*` settings of
    /// the environment. Loads them on every call: a Lambda should build one
    /// [`Reporter`] in `main` and call [`Reporter::activity`] per invocation.
    pub async fn from_env(payload: LaunchPayload) -> Result<Self, ActivityError> {
        Ok(Reporter::from_env().await?.activity(payload))
    }

    /// Insert one event row for `transition` (contract: "Update Activity
    /// State"). Returns the new `activity_event_id`.
    pub async fn report(
        &self,
        transition: Transition,
        output: Option<Value>,
        error: Option<String>,
    ) -> Result<String, ActivityError> {
        let now = Timestamp::now();
        let p = &self.payload;
        let ev = ActivityEvent {
            activity_event_id: ids::new_id(&p.activity_exec_id),
            activity_exec_id: p.activity_exec_id.clone(),
            transition: transition.as_str().into(),
            when: Some(now.date_list()),
            when_epoch: Some(now.epoch as f64),
            source: Some(self.source.clone()),
            manual: None,
            output,
            error,
            activity_name: Some(p.activity_name.clone()),
            workflow_exec_id: Some(p.workflow_exec_id.clone()),
            workflow_name: Some(p.workflow_name.clone()),
        };
        let store = self.engine.store();
        store
            .put_new(&store.tables().activity_event(), "activity_event_id", &ev)
            .await?;
        Ok(ev.activity_event_id)
    }

    /// Report RUNNING, then acknowledge the launch on the activity exec
    /// item itself (remove its `launch_shard`, only for this `attempt` and
    /// while still QUEUED), so the monitor does not launch it again while
    /// the RUNNING event waits in the stream. The state is left to the
    /// engine (contract: an activity may update other aspects of its item,
    /// not the state).
    pub async fn running(&self) -> Result<String, ActivityError> {
        let id = self.report(Transition::Running, None, None).await?;
        let p = &self.payload;
        let store = self.engine.store();
        let key = std::collections::HashMap::from([
            ("activity_exec_id".to_string(), s(&p.activity_exec_id)),
            ("workflow_exec_id".to_string(), s(&p.workflow_exec_id)),
        ]);
        let req = UpdateRequest {
            update: "REMOVE launch_shard".into(),
            condition: Some(
                "#st = :queued AND #att = :att AND attribute_exists(launch_shard)".into(),
            ),
            ..UpdateRequest::new(store.tables().activity_exec(), key)
                .name("#st", "state")
                .name("#att", "attempt")
                .value(":queued", s(ActivityState::Queued.as_str()))
                .value(":att", n(p.attempt))
        };
        match store.update(req, false).await {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(id),
            Err(e) => Err(e.into()),
        }
    }

    /// Report COMPLETED with `output` (handed to dependents).
    pub async fn completed(&self, output: Value) -> Result<String, ActivityError> {
        self.report(Transition::Completed, Some(output), None).await
    }

    /// Report FAILED with a reason.
    pub async fn failed(&self, error: impl Into<String>) -> Result<String, ActivityError> {
        self.report(Transition::Failed, None, Some(error.into()))
            .await
    }

    /// Record a heartbeat and return the activity's state: stop working if
    /// it is CANCELLED_RUNNING (then report CANCEL) or TIMED_OUT.
    pub async fn heartbeat(&self) -> Result<ActivityState, ActivityError> {
        Ok(self
            .engine
            .heartbeat(&self.payload.activity_exec_id)
            .await?)
    }
}

/// What activities report through, built once per process (Lambda `main`)
/// from the environment and cheap to clone.
#[derive(Debug, Clone)]
pub struct Reporter {
    store: Store,
    config: EngineConfig,
}

impl Reporter {
    /// The AWS configuration and `WHIMBREL_*` settings of the environment.
    ///
    /// Errors: an invalid `WHIMBREL_*` variable.
    pub async fn from_env() -> Result<Self, ActivityError> {
        let config = EngineConfig::from_env().map_err(ActivityError::Config)?;
        let sdk = crate::aws_config(None).await;
        let store = Store::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            Tables::new(config.table_prefix.clone()),
        );
        Ok(Reporter { store, config })
    }

    /// The activity a launch payload describes.
    pub fn activity(&self, payload: LaunchPayload) -> Activity {
        Activity::new(payload, self.store.clone(), self.config.clone())
    }
}
