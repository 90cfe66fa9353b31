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
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::model::ActivityEvent;
use crate::plan::LaunchPayload;
use crate::store::{Store, StoreError, Tables};

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
        Activity::with_engine(payload, Engine::new(store, (), config))
    }

    /// An activity reporting through `engine` (whose environment gives the
    /// time and the event ids: the simulation's clock).
    pub fn with_engine(payload: LaunchPayload, engine: Engine<()>) -> Self {
        let source = std::env::var("AWS_LAMBDA_FUNCTION_NAME")
            .map(|f| format!("lambda:{f}"))
            .unwrap_or_else(|_| "whimbrel activity".into());
        Activity {
            payload,
            engine,
            source,
        }
    }

    /// The same activity, writing `source` on its event rows.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// An activity using the AWS configuration and `WHIMBREL_*` settings of
    /// the environment. Loads them on every call: a Lambda should build one
    /// [`Reporter`] in `main` and call [`Reporter::activity`] per invocation.
    pub async fn from_env(payload: LaunchPayload) -> Result<Self, ActivityError> {
        Ok(Reporter::from_env().await?.activity(payload))
    }

    /// Insert one event row for `transition` (contract: "Update Activity
    /// State"), carrying this attempt's number and token so a stale copy's
    /// reports are refused. Returns the new `activity_event_id`.
    pub async fn report(
        &self,
        transition: Transition,
        output: Option<Value>,
        error: Option<String>,
    ) -> Result<String, ActivityError> {
        let now = self.engine.now();
        let p = &self.payload;
        let ev = ActivityEvent {
            output,
            error,
            activity_name: Some(p.activity_name.clone()),
            workflow_exec_id: Some(p.workflow_exec_id.clone()),
            workflow_name: Some(p.workflow_name.clone()),
            attempt: Some(p.attempt),
            attempt_token: p.attempt_token.clone(),
            ..ActivityEvent::new(
                &p.activity_exec_id,
                transition.as_str(),
                now,
                &self.source,
                &self.engine.new_token(),
            )
        };
        let store = self.engine.store();
        store
            .put_new(&store.tables().activity_event(), "activity_event_id", &ev)
            .await?;
        Ok(ev.activity_event_id)
    }

    /// Report RUNNING. Nothing else: until the engine applies it the
    /// activity stays QUEUED with its schedule-to-start deadline, and the
    /// monitor reads this row from the event table before it would launch
    /// another attempt.
    pub async fn running(&self) -> Result<String, ActivityError> {
        self.report(Transition::Running, None, None).await
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

    /// Acknowledge a cancel (CANCELLED_RUNNING → CANCELLED): only this
    /// attempt's own report, with its token, may end that state.
    pub async fn cancelled(&self, reason: impl Into<String>) -> Result<String, ActivityError> {
        self.report(Transition::Cancel, None, Some(reason.into()))
            .await
    }

    /// Record a heartbeat (`heartbeat_time_epoch`, the architecture's
    /// attribute) and return the activity's state: stop working if it is
    /// CANCELLED_RUNNING (then report [`Activity::cancelled`]) or ended.
    ///
    /// Errors: [`EngineError::Rejected`] when this attempt is no longer the
    /// live one (a newer attempt was launched): stop working.
    pub async fn heartbeat(&self) -> Result<ActivityState, ActivityError> {
        Ok(self
            .engine
            .heartbeat_attempt(
                &self.payload.activity_exec_id,
                self.payload.attempt_token.as_deref(),
            )
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
