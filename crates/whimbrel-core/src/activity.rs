//! The activity helper: what an activity Lambda needs to report RUNNING,
//! heartbeat, and end COMPLETED (with output) or FAILED, through the Simple
//! Lambda API (one `whimbrel_activity_event` row per transition).
//!
//! An activity function is its handler and [`run`]: the helper reports
//! RUNNING, heartbeats while the handler works, stops it on a cancel, and
//! reports what it returned (`Ok(output)` → COMPLETED, `Err(reason)` →
//! FAILED):
//!
//! ```no_run
//! use serde_json::{json, Value};
//! use whimbrel_core::plan::LaunchPayload;
//!
//! async fn greet(task: LaunchPayload) -> Result<Value, String> {
//!     let name = task.input["name"].as_str().ok_or("input.name: a string is required")?;
//!     Ok(json!({ "greeting": format!("Hello, {name}!") }))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), whimbrel_core::lambda::Error> {
//!     whimbrel_core::activity::run(greet).await
//! }
//! ```
//!
//! Or one report at a time, for an activity that drives its own reports:
//!
//! ```no_run
//! # async fn run(payload: whimbrel_core::plan::LaunchPayload) -> Result<(), Box<dyn std::error::Error>> {
//! let activity = whimbrel_core::activity::Activity::from_env(payload).await?;
//! activity.running().await?;
//! activity.heartbeat().await?;            // every few seconds while working
//! activity.completed(serde_json::json!({"words": 42})).await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

use crate::attr;
use serde_json::Value;
use tracing::{info, warn};

use crate::contract::{ActivityState, Transition};
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::model::ActivityEvent;
use crate::plan::LaunchPayload;
use crate::store::{Store, StoreError, Tables};

/// The attributes an activity's heartbeat reads (keys first): the IAM
/// `dynamodb:Attributes` of its role's GetItem statement. The state and
/// the fencing attributes only.
pub const HEARTBEAT_READS: [&str; 6] = [
    attr::ACTIVITY_EXEC_ID,
    attr::WORKFLOW_EXEC_ID,
    attr::STATE,
    attr::ATTEMPT_TOKEN_HASH,
    attr::HEARTBEAT_ENABLED,
    attr::REQUIRE_TOKENS,
];

/// The attributes an activity's heartbeat writes (keys first): the IAM
/// `dynamodb:Attributes` of its role's UpdateItem statement. The heartbeat
/// time only, as the reference heartbeat client writes it (contract:
/// Heartbeat): not `state`, not the due marker, not `version`, so no holder
/// of the role can change another activity's state or deadlines, or take
/// it out of the monitor's index. The monitor moves the marker itself
/// when it finds a live heartbeat (docs/design.md § 3.10).
pub const HEARTBEAT_WRITES: [&str; 4] = [
    attr::ACTIVITY_EXEC_ID,
    attr::WORKFLOW_EXEC_ID,
    attr::HEARTBEAT_TIME,
    attr::HEARTBEAT_TIME_EPOCH,
];

/// What a heartbeat reads of its activity ([`HEARTBEAT_READS`]).
#[derive(serde::Deserialize)]
struct HeartbeatSeen {
    state: ActivityState,
    #[serde(default)]
    attempt_token_hash: Option<String>,
    #[serde(default)]
    heartbeat_enabled: bool,
    #[serde(default)]
    require_tokens: bool,
}

/// The attributes [`Activity::prerequisite_outputs`] reads of a
/// prerequisite (keys first): the IAM `dynamodb:Attributes` of its role's
/// second GetItem statement (template.yaml `ReadPrerequisiteOutputs`).
pub const PREREQUISITE_READS: [&str; 7] = [
    attr::ACTIVITY_EXEC_ID,
    attr::WORKFLOW_EXEC_ID,
    attr::ACTIVITY_NAME,
    attr::OUTPUT,
    attr::OUTPUT_REF,
    attr::OUTPUT_EVENT_ID,
    attr::OUTPUT_SHA256,
];

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

    /// Every prerequisite's output by activity name: those the payload
    /// carries, and those it carried by reference
    /// (`prerequisites_by_reference`, when they would have passed Lambda's
    /// 1 MB), each read with a GetItem of [`PREREQUISITE_READS`], 16 at
    /// once, and one more of its event row for an output kept there
    /// (`engine::payloads`). `null` for a prerequisite that reported no
    /// output.
    ///
    /// Errors: a read that fails, or a referenced prerequisite that does not
    /// exist ([`EngineError::Rejected`]).
    pub async fn prerequisite_outputs(
        &self,
    ) -> Result<std::collections::HashMap<String, Value>, ActivityError> {
        use crate::engine::payloads;
        use futures::stream::{self, StreamExt, TryStreamExt};
        #[derive(serde::Deserialize)]
        struct Seen {
            #[serde(default)]
            output: Option<Value>,
            #[serde(default)]
            output_ref: Option<String>,
            #[serde(default)]
            output_event_id: Option<String>,
            #[serde(default)]
            output_sha256: Option<String>,
        }
        let p = &self.payload;
        let store = self.engine.store();
        let table = store.tables().activity_exec();
        let reads = stream::iter(p.prerequisites_by_reference.iter())
            .map(|name| {
                let id = crate::ids::activity_exec_id(&p.workflow_exec_id, name);
                let key = crate::engine::decide::activity_key(&id, &p.workflow_exec_id);
                let table = &table;
                async move {
                    let seen: Option<Seen> =
                        store.get_projected(table, key, &PREREQUISITE_READS).await?;
                    let seen = seen.ok_or_else(|| {
                        EngineError::Rejected(format!("prerequisite {name} ({id}) not found"))
                    })?;
                    let expected = seen.output_sha256.as_deref();
                    let output = match (seen.output_ref, seen.output_event_id) {
                        // Kept on the engine's output row (engine::payloads).
                        (Some(r), _) => {
                            let copy = (r.as_str(), p.workflow_name.as_str());
                            payloads::output_of_copy(store, &id, copy, expected).await?
                        }
                        // Kept on its event row (completed before copies).
                        (None, Some(row)) => {
                            payloads::output_of_row(store, &id, &row, expected).await?
                        }
                        (None, None) => seen.output.unwrap_or(Value::Null),
                    };
                    Ok::<_, ActivityError>((name.clone(), output))
                }
            })
            .buffer_unordered(16);
        let mut all = p.prerequisites.clone();
        all.extend(reads.try_collect::<Vec<_>>().await?);
        Ok(all)
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
        let ev = self.event_row(transition, output, error);
        let store = self.engine.store();
        store
            .put_new(
                &store.tables().activity_event(),
                attr::ACTIVITY_EVENT_ID,
                &ev,
            )
            .await?;
        Ok(ev.activity_event_id)
    }

    /// The event row [`Activity::report`] inserts for `transition`, now:
    /// a fresh `(activity_exec_id)::(uuid)` id, the payload's ids, attempt
    /// and token, and the row's expiry. No I/O (a Full Logic API client
    /// applies it with `Engine::apply_event`; the benchmarks batch it).
    pub fn event_row(
        &self,
        transition: Transition,
        output: Option<Value>,
        error: Option<String>,
    ) -> ActivityEvent {
        let now = self.engine.now();
        let p = &self.payload;
        ActivityEvent {
            output,
            error,
            activity_name: Some(p.activity_name.clone()),
            workflow_exec_id: Some(p.workflow_exec_id.clone()),
            workflow_name: Some(p.workflow_name.clone()),
            attempt: Some(p.attempt),
            attempt_token: p.attempt_token.clone(),
            expires_at_epoch: self.engine.config().row_expiry(now.epoch),
            ..ActivityEvent::new(
                &p.activity_exec_id,
                transition.as_str(),
                now,
                &self.source,
                &self.engine.new_token(),
            )
        }
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
    /// Least privilege: one GetItem of [`HEARTBEAT_READS`] by the payload's
    /// key (no Query), the token checked here, then, while RUNNING with
    /// heartbeats enabled, one UpdateItem of [`HEARTBEAT_WRITES`] only, so
    /// an activity's role can be limited to those attributes
    /// (`dynamodb:Attributes`, template.yaml `ActivityPolicy`).
    /// The due marker stays where the engine put it: the monitor, finding
    /// a fresh heartbeat when it comes due, moves it.
    ///
    /// Errors: [`EngineError::Rejected`] for an unknown activity, or when
    /// this attempt is no longer the live one (a newer attempt was
    /// launched, or a retry queued): stop working.
    pub async fn heartbeat(&self) -> Result<ActivityState, ActivityError> {
        let p = &self.payload;
        let store = self.engine.store();
        let table = store.tables().activity_exec();
        let key = crate::engine::decide::activity_key(&p.activity_exec_id, &p.workflow_exec_id);
        let seen: HeartbeatSeen = store
            .get_projected(&table, key.clone(), &HEARTBEAT_READS)
            .await?
            .ok_or_else(|| {
                EngineError::Rejected(format!("unknown activity exec {}", p.activity_exec_id))
            })?;
        let rejected = |why: &str| {
            ActivityError::Engine(EngineError::Rejected(format!(
                "{}: {why}",
                p.activity_exec_id
            )))
        };
        match p.attempt_token.as_deref() {
            Some(t) if seen.attempt_token_hash.as_deref() != Some(&crate::ids::token_hash(t)) => {
                return Err(rejected(
                    "attempt token does not match the live attempt (stale or forged)",
                ))
            }
            None if seen.require_tokens => {
                return Err(rejected("this activity requires the attempt token"))
            }
            _ => {}
        }
        if seen.state == ActivityState::Running && seen.heartbeat_enabled {
            let now = self.engine.now();
            let beat = crate::store::UpdateRequest::new(table, key)
                .when(crate::store::Cond::exists(attr::ACTIVITY_EXEC_ID))
                .set(attr::HEARTBEAT_TIME, crate::store::av(&now.date_list()))
                .set(attr::HEARTBEAT_TIME_EPOCH, crate::store::n(now.epoch));
            match store.update(beat).await {
                Ok(_) | Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(seen.state)
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
        )
        .priced_from_env();
        Ok(Reporter { store, config })
    }

    /// The store's counters: the requests and capacity of this process's
    /// reports (pass them to [`crate::metrics::measured`] around each invocation
    /// to have them counted by the benchmark).
    pub fn metrics(&self) -> &crate::store::Metrics {
        self.store.metrics()
    }

    /// The activity a launch payload describes.
    pub fn activity(&self, payload: LaunchPayload) -> Activity {
        Activity::new(payload, self.store.clone(), self.config.clone())
    }
}

/// How an attempt driven by [`Activity::drive`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned its output; COMPLETED was reported (or its
    /// report failed, and the attempt's timeout will catch it).
    Completed,
    /// The handler, or the read of its prerequisites, failed; FAILED was
    /// reported.
    Failed,
    /// The handler was stopped: cancelled (the cancel acknowledged), or
    /// no longer this attempt's (a timeout or a newer attempt); nothing
    /// else reported.
    Abandoned,
}

/// Heartbeat period of an attempt: a third of its heartbeat timeout
/// (seconds, at least 1), or 30 s when it has none, so that a cancel is
/// still seen.
fn beat_every(payload: &LaunchPayload) -> Duration {
    Duration::from_secs(
        payload
            .heartbeat_timeout_seconds
            .map_or(30, |t| (t / 3).max(1)) as u64,
    )
}

impl Activity {
    /// Run `handler` as this attempt's work (it is RUNNING already: a
    /// worker's claim or [`Activity::attempt`] made it so), heartbeating
    /// every third of its heartbeat timeout (every 30 s without one, to
    /// learn of a cancel) while it runs, and report what it returned:
    /// `Ok(output)` COMPLETED, `Err(reason)` FAILED. A cancel
    /// (CANCELLED_RUNNING) stops the handler and is acknowledged; an
    /// attempt lost to a timeout or a newer attempt stops it silently. The
    /// handler gets every prerequisite's output in `prerequisites`: those
    /// the payload carried by reference (a wide join's) are read first
    /// ([`Activity::prerequisite_outputs`]); a read that fails fails the
    /// attempt (`PREREQUISITES: …`, retried per its policy). A report that
    /// fails is logged: the attempt's timeout catches it, and its retry
    /// policy applies.
    pub async fn drive<H, F>(&self, handler: &H) -> Outcome
    where
        H: Fn(LaunchPayload) -> F,
        F: Future<Output = Result<Value, String>>,
    {
        let mut payload = self.payload.clone();
        if !payload.prerequisites_by_reference.is_empty() {
            match self.prerequisite_outputs().await {
                Ok(all) => {
                    payload.prerequisites = all;
                    payload.prerequisites_by_reference.clear();
                }
                Err(e) => {
                    self.logged(self.failed(format!("PREREQUISITES: {e}")).await);
                    return Outcome::Failed;
                }
            }
        }
        let Some(result) = self.while_live(handler(payload)).await else {
            return Outcome::Abandoned;
        };
        match result {
            Ok(output) => {
                self.logged(self.completed(output).await);
                Outcome::Completed
            }
            Err(error) => {
                self.logged(self.failed(error).await);
                Outcome::Failed
            }
        }
    }

    /// Report RUNNING, then [`Activity::drive`] `handler`: one invoked
    /// attempt, start to end (what [`run`] does per invocation).
    ///
    /// Errors: the RUNNING report's; the handler is not run then (the
    /// attempt's schedule-to-start timeout launches it again).
    pub async fn attempt<H, F>(&self, handler: &H) -> Result<Outcome, ActivityError>
    where
        H: Fn(LaunchPayload) -> F,
        F: Future<Output = Result<Value, String>>,
    {
        self.running().await?;
        Ok(self.drive(handler).await)
    }

    /// `work`'s result, or `None` when a heartbeat taken while it runs
    /// finds the attempt cancelled (acknowledged here) or no longer live.
    async fn while_live<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::pin!(work);
        let mut beat = tokio::time::interval(beat_every(&self.payload));
        beat.tick().await; // the first tick is immediate
        let id = &self.payload.activity_exec_id;
        loop {
            tokio::select! {
                out = &mut work => return Some(out),
                _ = beat.tick() => match self.heartbeat().await {
                    Ok(ActivityState::Running) => {}
                    Ok(ActivityState::CancelledRunning) => {
                        info!(activity_exec_id = %id, "attempt cancelled; stopping it");
                        self.logged(self.cancelled("cancel acknowledged by the activity").await);
                        return None;
                    }
                    Ok(state) => {
                        warn!(activity_exec_id = %id, %state, "attempt no longer running here; stopping it");
                        return None;
                    }
                    Err(ActivityError::Engine(EngineError::Rejected(r))) => {
                        warn!(activity_exec_id = %id, reason = %r, "attempt taken from this process; stopping it");
                        return None;
                    }
                    Err(e) => warn!(activity_exec_id = %id, error = %e, "heartbeat failed; will try again"),
                },
            }
        }
    }

    /// Log a report that failed (the attempt's timeout catches it).
    fn logged(&self, report: Result<String, ActivityError>) {
        if let Err(e) = report {
            warn!(activity_exec_id = %self.payload.activity_exec_id, error = %e, "report failed");
        }
    }
}

/// Serve `handler` as this Lambda function's activity: each invocation
/// (an async invoke with a [`LaunchPayload`]) runs one
/// [`Activity::attempt`], counted under the function's name
/// (`AWS_LAMBDA_FUNCTION_NAME`) through [`crate::lambda::serve`]. The
/// handler returns the output (`Ok`, reported COMPLETED) or the reason it
/// failed (`Err`, reported FAILED; retried per the activity's policy
/// unless its `no_retry_on` matches). Reports go through the AWS
/// configuration and `WHIMBREL_*` settings of the environment
/// ([`Reporter::from_env`]).
///
/// Errors: an invalid `WHIMBREL_*` variable, or the Lambda runtime's. An
/// invocation whose RUNNING report fails returns that error to Lambda.
pub async fn run<H, F>(handler: H) -> Result<(), crate::lambda::Error>
where
    H: Fn(LaunchPayload) -> F,
    F: Future<Output = Result<Value, String>>,
{
    let reporter = Reporter::from_env().await?;
    let name = crate::lambda::function_name("whimbrel-activity");
    let (reporter, handler) = (&reporter, &handler);
    crate::lambda::serve(
        &name,
        reporter.metrics(),
        |payload: LaunchPayload, _| async move {
            let attempt = reporter.activity(payload).attempt(handler).await;
            attempt.map(|_| ()).map_err(crate::lambda::Error::from)
        },
    )
    .await
}
