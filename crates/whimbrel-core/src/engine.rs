//! The engine operations (DESIGN 1): start a workflow, apply a transition,
//! release dependents, propagate failure, finish a workflow, time out stale
//! heartbeats and re-drive lost launches. This is the Full Logic API: the
//! Lambda functions and any Rust process call these.
//!
//! Every operation is idempotent (DESIGN 3.7): ids are derived, creates are
//! conditional, state changes carry `last_event_id`, dependency releases
//! carry a per-edge marker. A redelivered record resumes the side effects
//! that did not finish.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::stream::{self, StreamExt};
use serde_json::Value;
use tracing::{info, warn};

use crate::contract::{self, ActivityState, Actor, Transition, WorkflowState};
use crate::dates::Timestamp;
use crate::ids;
use crate::launcher::{InvokeError, Launcher};
use crate::model::{
    ActivityEvent, ActivityExec, ActivityExecDependency, HistoryEntry, WorkflowExec,
    WorkflowLambda, WorkflowRequest,
};
use crate::plan::{
    DeciderRequest, LaunchPayload, Plan, MAX_OUTPUT_BYTES, MAX_WORKFLOW_INPUT_BYTES, SHAPE_VERSION,
};
use crate::store::{self, av, n, s, Item, Store, StoreError, UpdateRequest};

/// Engine settings, read from the environment by [`EngineConfig::from_env`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Table name prefix (`WHIMBREL_TABLE_PREFIX`, default `whimbrel_`).
    pub table_prefix: String,
    /// Heartbeat timeout for activities that enable heartbeats without
    /// giving one, seconds (`WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS`, default 300).
    pub default_heartbeat_timeout_seconds: i64,
    /// An activity still QUEUED this many seconds after its launch is
    /// launched again by the monitor
    /// (`WHIMBREL_QUEUED_REDRIVE_SECONDS`, default 120).
    pub queued_redrive_seconds: i64,
    /// Launches of an activity that never starts before it fails
    /// (`WHIMBREL_MAX_LAUNCH_ATTEMPTS`, default 3).
    pub max_launch_attempts: u32,
    /// How many activities to release, launch or cancel at once.
    pub concurrency: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            table_prefix: store::DEFAULT_TABLE_PREFIX.into(),
            default_heartbeat_timeout_seconds: 300,
            queued_redrive_seconds: 120,
            max_launch_attempts: 3,
            concurrency: 16,
        }
    }
}

impl EngineConfig {
    /// Settings from `WHIMBREL_*` environment variables, defaults otherwise.
    ///
    /// Errors: a variable that is set but not a positive integer.
    pub fn from_env() -> Result<Self, String> {
        let d = EngineConfig::default();
        let num = |k: &str, dflt: i64| -> Result<i64, String> {
            match std::env::var(k) {
                Ok(v) => v
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|x| *x > 0)
                    .ok_or_else(|| format!("{k}={v:?} is not a positive integer")),
                Err(_) => Ok(dflt),
            }
        };
        Ok(EngineConfig {
            table_prefix: std::env::var("WHIMBREL_TABLE_PREFIX").unwrap_or(d.table_prefix),
            default_heartbeat_timeout_seconds: num(
                "WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS",
                d.default_heartbeat_timeout_seconds,
            )?,
            queued_redrive_seconds: num(
                "WHIMBREL_QUEUED_REDRIVE_SECONDS",
                d.queued_redrive_seconds,
            )?,
            max_launch_attempts: num(
                "WHIMBREL_MAX_LAUNCH_ATTEMPTS",
                i64::from(d.max_launch_attempts),
            )?
            .try_into()
            .unwrap_or(u32::MAX),
            concurrency: d.concurrency,
        })
    }
}

/// Why an engine operation did not complete.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The input can never apply (malformed, unknown activity, transition
    /// not allowed...). A stream record carrying it is rejected and logged.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The operation may succeed later (not valid yet, throttled, network).
    /// A stream record carrying it is reported as a batch item failure.
    #[error("retry later: {0}")]
    Retry(String),
}

impl From<StoreError> for EngineError {
    /// Every store error is retried: an unexpected error must not drop a
    /// valid row; the event source mapping's retry limit and on-failure
    /// destination bound the retries.
    fn from(e: StoreError) -> Self {
        EngineError::Retry(e.to_string())
    }
}

/// What an operation did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The state changed (or had already changed with this same event).
    State(ActivityState),
    /// The workflow is in this state.
    Workflow(WorkflowState),
    /// The row was not for the Simple Lambda API (`manual = true`): the
    /// stream handlers skip it, its writer applies it in-process.
    Skipped,
}

/// What one heartbeat monitor tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MonitorReport {
    /// Activities moved to TIMED_OUT.
    pub timed_out: u64,
    /// QUEUED activities launched again.
    pub relaunched: u64,
    /// Activities the tick could not handle (logged); the next tick tries
    /// them again.
    pub errors: u64,
}

/// Details an event carries besides its transition.
#[derive(Debug, Clone, Default)]
struct Details {
    output: Option<Value>,
    error: Option<String>,
    /// The time of the change, epoch seconds; now when absent (the monitor
    /// passes its tick time).
    at: Option<i64>,
    /// The change has no stream record to redeliver (a `manual` event
    /// applied in-process): keep the index markers until `settle`.
    in_process: bool,
}

/// The engine: the store, a launcher and the settings.
#[derive(Debug, Clone)]
pub struct Engine<L> {
    store: Store,
    launcher: L,
    config: EngineConfig,
}

impl<L> Engine<L> {
    /// An engine over `store` and `launcher`.
    pub fn new(store: Store, launcher: L, config: EngineConfig) -> Self {
        Engine {
            store,
            launcher,
            config,
        }
    }

    /// The store (its metrics count every request).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The launcher.
    pub fn launcher(&self) -> &L {
        &self.launcher
    }

    fn workflow_key(&self, id: &str, name: &str) -> Item {
        HashMap::from([
            ("workflow_exec_id".into(), s(id)),
            ("workflow_name".into(), s(name)),
        ])
    }

    fn activity_key(&self, id: &str, workflow_exec_id: &str) -> Item {
        HashMap::from([
            ("activity_exec_id".into(), s(id)),
            ("workflow_exec_id".into(), s(workflow_exec_id)),
        ])
    }

    /// The workflow exec, strongly consistent.
    ///
    /// Errors: [`EngineError::Retry`] if it does not exist (yet).
    pub async fn load_workflow(&self, id: &str, name: &str) -> Result<WorkflowExec, EngineError> {
        self.store
            .get(
                &self.store.tables().workflow_exec(),
                self.workflow_key(id, name),
            )
            .await?
            .ok_or_else(|| EngineError::Retry(format!("workflow exec {id} not found")))
    }

    async fn load_activity(
        &self,
        id: &str,
        workflow_exec_id: &str,
    ) -> Result<ActivityExec, EngineError> {
        self.store
            .get(
                &self.store.tables().activity_exec(),
                self.activity_key(id, workflow_exec_id),
            )
            .await?
            .ok_or_else(|| EngineError::Retry(format!("activity exec {id} not found")))
    }

    /// The activity exec with this id, found by a consistent Query on the
    /// hash key (events carry only `activity_exec_id`; DESIGN 2.1).
    pub async fn find_activity(
        &self,
        activity_exec_id: &str,
    ) -> Result<Option<ActivityExec>, EngineError> {
        let found: Vec<ActivityExec> = self
            .store
            .query(
                &self.store.tables().activity_exec(),
                None,
                "activity_exec_id = :id",
                HashMap::new(),
                HashMap::from([(":id".to_string(), s(activity_exec_id))]),
            )
            .await?;
        Ok(found.into_iter().next())
    }

    /// The heartbeat timeout of an activity, seconds: its own, or the
    /// configured default; `None` when heartbeats are disabled.
    fn heartbeat_timeout(&self, exec: &ActivityExec) -> Option<i64> {
        exec.heartbeat_enabled.then(|| {
            exec.heartbeat_timeout_seconds
                .unwrap_or(self.config.default_heartbeat_timeout_seconds)
        })
    }

    /// When the monitor times out an activity that started at `start` and
    /// last heartbeat at `beat` (epoch seconds): the earlier of its
    /// heartbeat deadline and its start-to-close deadline; `None` when it
    /// has neither, and then nothing times it out (DESIGN 3.6).
    fn deadline(&self, exec: &ActivityExec, start: i64, beat: i64) -> Option<i64> {
        let heartbeat = self.heartbeat_timeout(exec).map(|t| beat + t);
        let start_to_close = exec.timeout_seconds.map(|t| start + t);
        match (heartbeat, start_to_close) {
            (Some(h), Some(c)) => Some(h.min(c)),
            (h, c) => h.or(c),
        }
    }

    /// Move a workflow exec from `from` to `to` with a conditional write
    /// (DESIGN 3.1, [`WorkflowState::may_move_to`]), recording `error` and,
    /// for an end, the end time. Returns false if it was not in `from` (moved
    /// by someone else, or a redelivery).
    async fn move_workflow(
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
        .name("#st", "state")
        .value(":from", s(from.as_str()))
        .value(":to", s(to.as_str()));
        let mut update = "SET #st = :to".to_string();
        if let Some(e) = error {
            update.push_str(", #err = :err");
            req = req.name("#err", "error").value(":err", s(e));
        }
        if to.is_terminal() {
            let now = Timestamp::now();
            update.push_str(", end_time = :end, end_time_epoch = :end_epoch");
            req = req
                .value(":end", av(&now.date_list()))
                .value(":end_epoch", n(now.epoch));
        }
        let req = UpdateRequest {
            update,
            condition: Some("#st = :from".into()),
            ..req
        };
        match self.store.update(req, false).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Record a heartbeat for a running activity (a direct conditional
    /// update of `whimbrel_activity_exec`; not a state change). Returns the
    /// activity's state, so a running activity learns it was cancelled
    /// (CANCELLED_RUNNING) or timed out (DESIGN 3.5).
    ///
    /// Errors: [`EngineError::Rejected`] for an unknown activity.
    pub async fn heartbeat(&self, activity_exec_id: &str) -> Result<ActivityState, EngineError> {
        let exec = self.find_activity(activity_exec_id).await?.ok_or_else(|| {
            EngineError::Rejected(format!("unknown activity exec {activity_exec_id}"))
        })?;
        if !exec.state.is_running() || !exec.heartbeat_enabled {
            return Ok(exec.state);
        }
        let now = Timestamp::now();
        let deadline = self
            .deadline(&exec, exec.start_time_epoch.max(0), now.epoch)
            .expect("heartbeats enabled");
        let req = UpdateRequest::new(
            self.store.tables().activity_exec(),
            self.activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
        )
        .name("#st", "state")
        .value(":run", s(ActivityState::Running.as_str()))
        .value(":crun", s(ActivityState::CancelledRunning.as_str()))
        .value(":now", n(now.epoch))
        .value(":now_list", av(&now.date_list()))
        .value(":deadline", n(deadline));
        let req = UpdateRequest {
            update: "SET heartbeat_time = :now_list, heartbeat_time_epoch = :now, \
                     heartbeat_deadline_epoch = :deadline"
                .into(),
            condition: Some("#st IN (:run, :crun)".into()),
            ..req
        };
        match self.store.update(req, true).await {
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

impl<L: Launcher> Engine<L> {
    // ----- workflow start -------------------------------------------------

    /// Start the workflow a `whimbrel_workflow_request` row asks for
    /// (contract: Full Logic API, "Initiate a New Workflow"; DESIGN 4).
    ///
    /// Creates the workflow exec (REQUESTED), obtains and validates the
    /// plan, writes the activity execs (REQUESTED) and edges, moves the
    /// workflow to RUNNING, then queues and launches the activities without
    /// prerequisites. An unknown workflow, an invalid plan or a decider
    /// error fails the workflow with the reason stored in its `error`.
    ///
    /// Redelivery resumes what did not finish. One caller per request at a
    /// time (a stream shard guarantees it; a Full Logic API client must not
    /// run two `start_workflow` calls for one request concurrently).
    ///
    /// Errors: [`EngineError::Rejected`] for a malformed row;
    /// [`EngineError::Retry`] when DynamoDB or the decider is unavailable.
    pub async fn start_workflow(&self, req: &WorkflowRequest) -> Result<Applied, EngineError> {
        if req.workflow_name.trim().is_empty() {
            return Err(EngineError::Rejected("workflow_name is empty".into()));
        }
        let recommended = ids::check_id(
            "workflow_request_id",
            "workflow_name",
            &req.workflow_request_id,
            &req.workflow_name,
        )
        .map_err(|e| EngineError::Rejected(e.to_string()))?;
        if !recommended {
            info!(workflow_request_id = %req.workflow_request_id, "request id is not (workflow_name)::(uuid); accepted");
        }
        let t = self.store.tables().clone();
        let name = &req.workflow_name;
        let id = ids::workflow_exec_id(name, &req.workflow_request_id);
        let now = Timestamp::now();
        let input_size = req.input.as_ref().map_or(0, |v| v.to_string().len());
        let oversized = (input_size > MAX_WORKFLOW_INPUT_BYTES).then(|| {
            format!(
                "workflow input is {input_size} bytes; at most {MAX_WORKFLOW_INPUT_BYTES} bytes are allowed"
            )
        });
        let fresh = WorkflowExec {
            workflow_exec_id: id.clone(),
            workflow_name: name.clone(),
            state: WorkflowState::Requested,
            workflow_request_id: Some(req.workflow_request_id.clone()),
            start_time: now.date_list(),
            start_time_epoch: now.epoch,
            end_time: None,
            end_time_epoch: None,
            input: if oversized.is_some() {
                None
            } else {
                req.input.clone()
            },
            plan: None,
            activity_count: 0,
            completed_count: 0,
            failed_count: 0,
            cancelled_count: 0,
            error: None,
            source: req.source.clone(),
        };
        let mut exec = if self
            .store
            .put_new(&t.workflow_exec(), "workflow_exec_id", &fresh)
            .await?
        {
            fresh
        } else {
            self.load_workflow(&id, name).await?
        };
        if exec.state.is_terminal() {
            if exec.workflow_request_id.as_deref() == Some(&req.workflow_request_id)
                && exec.start_time_epoch + 3600 < now.epoch
            {
                warn!(workflow_request_id = %req.workflow_request_id, workflow_exec_id = %id,
                    "request id names a workflow exec that ended over an hour ago: a reused id? nothing started");
            }
            return Ok(Applied::Workflow(exec.state));
        }
        if let (Some(reason), None) = (&oversized, &exec.plan) {
            warn!(workflow_exec_id = %id, %reason, "workflow failed before it started");
            self.fail_workflow(&exec, reason).await?;
            return Ok(Applied::Workflow(WorkflowState::Failed));
        }
        // True when this invocation stored the plan: then no activity item
        // can exist yet.
        let mut planned_now = false;
        let plan = match exec.plan.clone() {
            Some(p) => p,
            None => match self.obtain_plan(&exec, req).await? {
                Ok(plan) => {
                    (exec, planned_now) = self.record_plan(&exec, plan).await?;
                    exec.plan.clone().expect("recorded plan")
                }
                Err(reason) => {
                    warn!(workflow_exec_id = %id, %reason, "workflow failed before it started");
                    self.fail_workflow(&exec, &reason).await?;
                    return Ok(Applied::Workflow(WorkflowState::Failed));
                }
            },
        };
        let (activities, edges) = activity_items(&exec, &plan, &self.config);
        if exec.state == WorkflowState::Requested {
            if planned_now {
                // Fresh plan: none of its items exist, write them in batches.
                self.store
                    .batch_put(&t.activity_exec(), &activities)
                    .await?;
            } else {
                // A redelivery: some items may exist, and a client may
                // already have cancelled one; create only the missing ones.
                let table = t.activity_exec();
                let created: Vec<Result<bool, StoreError>> = stream::iter(&activities)
                    .map(|a| self.store.put_new(&table, "activity_exec_id", a))
                    .buffer_unordered(self.config.concurrency)
                    .collect()
                    .await;
                created.into_iter().collect::<Result<Vec<_>, _>>()?;
            }
            // Edges are write-once with deterministic content: re-putting
            // one changes nothing.
            self.store
                .batch_put(&t.activity_exec_dependency(), &edges)
                .await?;
            self.move_workflow(
                &id,
                name,
                WorkflowState::Requested,
                WorkflowState::Running,
                None,
            )
            .await?;
            // Every activity may have ended while the workflow was still
            // REQUESTED (client CANCELs); their finish checks saw REQUESTED.
            self.finish_workflow(&id, name).await?;
        }
        // Queue and launch the roots; on redelivery this resumes launches
        // that did not happen. Items of a fresh plan are as just written;
        // otherwise they are read again.
        let roots: Vec<&ActivityExec> = activities
            .iter()
            .filter(|a| a.prerequisites.is_empty())
            .collect();
        let results: Vec<Result<(), EngineError>> = stream::iter(roots)
            .map(|a| async move {
                let current = if planned_now {
                    a.clone()
                } else {
                    self.load_activity(&a.activity_exec_id, &a.workflow_exec_id)
                        .await?
                };
                self.queue_and_launch(current).await
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<_>, _>>()?;
        info!(workflow_exec_id = %id, activities = activities.len(), "workflow running");
        Ok(Applied::Workflow(WorkflowState::Running))
    }

    /// The plan from the registered definition or decider. `Ok(Err(reason))`
    /// means the workflow must fail; `Err` means retry.
    async fn obtain_plan(
        &self,
        exec: &WorkflowExec,
        req: &WorkflowRequest,
    ) -> Result<Result<Plan, String>, EngineError> {
        let t = self.store.tables();
        let key = HashMap::from([("workflow_name".to_string(), s(&exec.workflow_name))]);
        let Some(reg) = self
            .store
            .get::<WorkflowLambda>(&t.workflow_lambda(), key)
            .await?
        else {
            return Ok(Err(format!(
                "workflow {:?} is not registered in {}",
                exec.workflow_name,
                t.workflow_lambda()
            )));
        };
        let plan = if let Some(def) = reg.definition {
            def
        } else if let Some(lambda) = reg.lambda {
            let request = DeciderRequest {
                version: SHAPE_VERSION,
                kind: "workflow_started".into(),
                workflow_exec_id: exec.workflow_exec_id.clone(),
                workflow_name: exec.workflow_name.clone(),
                workflow_request_id: req.workflow_request_id.clone(),
                input: req.input.clone().unwrap_or(Value::Null),
            };
            let payload = serde_json::to_value(&request).expect("serializable");
            match self.launcher.invoke_sync(&lambda, &payload).await {
                Ok(v) => match serde_json::from_value::<Plan>(v) {
                    Ok(p) => p,
                    Err(e) => {
                        return Ok(Err(format!("decider {lambda} returned no valid plan: {e}")))
                    }
                },
                Err(e) if e.is_transient() => return Err(EngineError::Retry(e.to_string())),
                Err(e) => return Ok(Err(format!("decider failed: {e}"))),
            }
        } else {
            return Ok(Err(format!(
                "workflow {:?} has neither a lambda nor a definition",
                exec.workflow_name
            )));
        };
        Ok(plan
            .validate()
            .map(|_| plan)
            .map_err(|e| format!("invalid plan: {e}")))
    }

    /// Store the plan on the workflow exec (once); returns the exec as
    /// stored, with whichever plan won, and whether this call stored it.
    async fn record_plan(
        &self,
        exec: &WorkflowExec,
        plan: Plan,
    ) -> Result<(WorkflowExec, bool), EngineError> {
        let t = self.store.tables();
        let req = UpdateRequest::new(
            t.workflow_exec(),
            self.workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
        )
        .name("#st", "state")
        .value(":req", s(WorkflowState::Requested.as_str()))
        .name("#plan", "plan")
        .value(":plan", av(&plan))
        .value(":n", n(plan.activities.len()));
        let req = UpdateRequest {
            update: "SET #plan = :plan, activity_count = :n".into(),
            condition: Some("#st = :req AND attribute_not_exists(#plan)".into()),
            ..req
        };
        match self.store.update(req, false).await {
            Ok(_) => {
                let mut e = exec.clone();
                e.activity_count = plan.activities.len() as u64;
                e.plan = Some(plan);
                Ok((e, true))
            }
            Err(StoreError::ConditionFailed) => {
                let e = self
                    .load_workflow(&exec.workflow_exec_id, &exec.workflow_name)
                    .await?;
                if e.plan.is_none() {
                    return Err(EngineError::Rejected(format!(
                        "workflow exec {} is {} without a plan",
                        e.workflow_exec_id, e.state
                    )));
                }
                Ok((e, false))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// REQUESTED → FAILED with `reason` (conditional).
    async fn fail_workflow(&self, exec: &WorkflowExec, reason: &str) -> Result<(), EngineError> {
        self.move_workflow(
            &exec.workflow_exec_id,
            &exec.workflow_name,
            WorkflowState::Requested,
            WorkflowState::Failed,
            Some(reason),
        )
        .await
        .map(|_| ())
    }

    // ----- events ---------------------------------------------------------

    /// Apply a `whimbrel_activity_event` row (contract: Simple Lambda API,
    /// "Update Activity State"), then its side effects: release dependents
    /// on COMPLETED, cancel downstream on FAILED / TIMED_OUT / CANCELLED,
    /// finish the workflow after its last activity.
    ///
    /// A Full Logic API client (event row with `manual = true`) calls this
    /// itself and must retry it with the same event until it returns `Ok`
    /// or `Rejected`: that is what resumes its side effects.
    ///
    /// Errors: [`EngineError::Rejected`] for an unknown transition, a
    /// malformed id, an unknown activity or a transition the contract never
    /// allows from the current state; [`EngineError::Retry`] for a
    /// transition not valid yet (DESIGN 3.8) or an unavailable store.
    pub async fn apply_event(&self, ev: &ActivityEvent) -> Result<Applied, EngineError> {
        let transition: Transition = ev
            .transition
            .parse()
            .map_err(|e: contract::UnknownName| EngineError::Rejected(e.to_string()))?;
        let recommended = ids::check_id(
            "activity_event_id",
            "activity_exec_id",
            &ev.activity_event_id,
            &ev.activity_exec_id,
        )
        .map_err(|e| EngineError::Rejected(e.to_string()))?;
        if !recommended {
            info!(activity_event_id = %ev.activity_event_id, "event id is not (activity_exec_id)::(uuid); accepted");
        }
        let exec = self
            .find_activity(&ev.activity_exec_id)
            .await?
            .ok_or_else(|| {
                EngineError::Rejected(format!("unknown activity exec {}", ev.activity_exec_id))
            })?;
        let mut details = Details {
            output: ev.output.clone(),
            error: ev.error.clone(),
            at: None,
            in_process: false,
        };
        let mut transition = transition;
        let output_size = ev.output.as_ref().map_or(0, |v| v.to_string().len());
        if transition == Transition::Completed && output_size > MAX_OUTPUT_BYTES {
            // Cannot be stored: the activity fails with the reason instead
            // of the record being retried for ever.
            transition = Transition::Failed;
            details.output = None;
            details.error = Some(format!(
                "COMPLETED output is {output_size} bytes; at most {MAX_OUTPUT_BYTES} bytes are allowed"
            ));
        }
        details.in_process = ev.manual == Some(true);
        let state = self
            .transition(
                exec,
                transition,
                Actor::Client,
                &ev.activity_event_id,
                details,
            )
            .await?;
        Ok(Applied::State(state))
    }

    /// Apply `transition` for `actor` with a conditional write, then run the
    /// side effects of the state it reached. If `event_id` already caused
    /// the last change, only the side effects run again (redelivery).
    async fn transition(
        &self,
        mut exec: ActivityExec,
        transition: Transition,
        actor: Actor,
        event_id: &str,
        details: Details,
    ) -> Result<ActivityState, EngineError> {
        for _ in 0..8 {
            if exec.last_event_id.as_deref() == Some(event_id) {
                self.settle(&exec).await?;
                return Ok(exec.state);
            }
            if exec.history.iter().any(|h| h.event_id == event_id) {
                // Applied earlier and superseded since: a redelivery that
                // changes nothing; later states have their own side effects.
                return Ok(exec.state);
            }
            let now = details
                .at
                .map_or_else(Timestamp::now, Timestamp::from_epoch);
            if transition == Transition::TimedOut
                && exec.heartbeat_deadline_epoch.is_none_or(|d| d >= now.epoch)
            {
                return Err(EngineError::Rejected(format!(
                    "{}: its monitor deadline has not passed",
                    exec.activity_exec_id
                )));
            }
            let next = contract::next_state(exec.state, transition, actor).map_err(|e| {
                if e.is_retryable() {
                    EngineError::Retry(format!("{}: {e}", exec.activity_exec_id))
                } else {
                    EngineError::Rejected(format!("{}: {e}", exec.activity_exec_id))
                }
            })?;
            // A terminal write the engine or the monitor makes has no stream
            // record to redeliver: it keeps its index marker until its side
            // effects are done, so the monitor can resume them (`settle`).
            let keep_markers = actor != Actor::Client || details.in_process;
            let update = self.state_update(
                &exec,
                transition,
                next,
                event_id,
                &details,
                now,
                keep_markers,
            );
            let written = if next.is_terminal() {
                let wf = self.count_end(&exec, next, &details);
                self.store.transact_update(vec![update, wf]).await
            } else {
                self.store.update(update, false).await.map(|_| ())
            };
            match written {
                Ok(()) => {
                    info!(
                        activity_exec_id = %exec.activity_exec_id,
                        from = %exec.state, %transition, to = %next, event_id,
                        "transition applied"
                    );
                    // The conditional write succeeded on this version, so
                    // the item is now the one read plus this change: no
                    // read-back needed for the side effects.
                    exec.state = next;
                    exec.version += 1;
                    exec.last_event_id = Some(event_id.to_string());
                    if next.is_terminal() && !keep_markers {
                        exec.heartbeat_shard = None;
                        exec.launch_shard = None;
                    }
                    self.settle(&exec).await?;
                    return Ok(next);
                }
                Err(StoreError::ConditionFailed) => {
                    exec = self
                        .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                        .await?;
                }
                Err(StoreError::Conflict) => {
                    // Another transaction on the same workflow item: back
                    // off a little (jittered) and decide again.
                    let jitter = (uuid::Uuid::new_v4().as_u128() % 40) as u64;
                    tokio::time::sleep(std::time::Duration::from_millis(10 + jitter)).await;
                    exec = self
                        .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                        .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Retry(format!(
            "{}: too much contention applying {transition}",
            exec.activity_exec_id
        )))
    }

    /// The conditional UpdateItem for one accepted transition. With
    /// `keep_markers`, a terminal write leaves the sparse index markers for
    /// `settle` to remove once the side effects are done.
    #[allow(clippy::too_many_arguments)]
    fn state_update(
        &self,
        exec: &ActivityExec,
        transition: Transition,
        next: ActivityState,
        event_id: &str,
        details: &Details,
        now: Timestamp,
        keep_markers: bool,
    ) -> UpdateRequest {
        let entry = HistoryEntry {
            transition: transition.as_str().into(),
            state: next,
            at_epoch: now.epoch,
            event_id: event_id.into(),
        };
        let mut set = vec![
            "#st = :next",
            "#ver = :v1",
            "last_event_id = :eid",
            "#hist = list_append(if_not_exists(#hist, :empty), :h)",
        ];
        let mut remove = vec![];
        let mut req = UpdateRequest::new(
            self.store.tables().activity_exec(),
            self.activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
        )
        .name("#st", "state")
        .name("#ver", "version")
        .name("#hist", "history")
        .value(":next", s(next.as_str()))
        .value(":v0", n(exec.version))
        .value(":v1", n(exec.version + 1))
        .value(":eid", s(event_id))
        .value(":empty", AttributeValue::L(vec![]))
        .value(":h", AttributeValue::L(vec![av(&entry)]))
        .value(":now", n(now.epoch))
        .value(":now_list", av(&now.date_list()));
        let mut condition = "#ver = :v0".to_string();
        match next {
            ActivityState::Running => {
                set.push("start_time = :now_list");
                set.push("start_time_epoch = :now");
                set.push("launched_time = if_not_exists(launched_time, :now_list)");
                set.push("launched_time_epoch = if_not_exists(launched_time_epoch, :now)");
                remove.push("launch_shard");
                if exec.heartbeat_enabled {
                    set.push("heartbeat_time = :now_list");
                    set.push("heartbeat_time_epoch = :now");
                }
                if let Some(deadline) = self.deadline(exec, now.epoch, now.epoch) {
                    set.push("heartbeat_deadline_epoch = :deadline");
                    set.push("heartbeat_shard = :shard");
                    req = req
                        .value(":deadline", n(deadline))
                        .value(":shard", n(store::shard_of(&exec.activity_exec_id)));
                }
            }
            ActivityState::Preparing => remove.push("launch_shard"),
            _ => {}
        }
        if transition == Transition::TimedOut {
            // Contract (architecture, Heartbeat Monitor): only a passed
            // deadline times out, even if a heartbeat arrived since the read.
            condition.push_str(" AND heartbeat_deadline_epoch < :now");
        }
        if next.is_terminal() {
            set.push("end_time = :now_list");
            set.push("end_time_epoch = :now");
            if !keep_markers {
                remove.extend(MARKERS);
            }
        }
        if let Some(out) = &details.output {
            if next == ActivityState::Completed {
                set.push("#out = :out");
                req = req.name("#out", "output").value(":out", av(out));
            }
        }
        if let Some(err) = &details.error {
            if next != ActivityState::Completed {
                set.push("#err = :err");
                req = req.name("#err", "error").value(":err", s(err.as_str()));
            }
        }
        let mut update = format!("SET {}", set.join(", "));
        if !remove.is_empty() {
            update.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        UpdateRequest {
            update,
            condition: Some(condition),
            ..req
        }
    }

    /// The workflow counter update that goes in the same transaction as an
    /// activity's terminal transition, so it counts exactly once (DESIGN 3.3).
    fn count_end(
        &self,
        exec: &ActivityExec,
        end: ActivityState,
        details: &Details,
    ) -> UpdateRequest {
        let counter = contract::end_counter(end).expect("terminal state");
        let mut req = UpdateRequest::new(
            self.store.tables().workflow_exec(),
            self.workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
        )
        .name("#c", counter)
        .value(":one", n(1));
        let mut update = "ADD #c :one".to_string();
        if end.is_failure() {
            let why = details
                .error
                .clone()
                .unwrap_or_else(|| "no reason given".into());
            let reason = format!("activity {} {end}: {why}", exec.activity_name);
            update = format!("SET #err = if_not_exists(#err, :reason) {update}");
            req = req.name("#err", "error").value(":reason", s(reason));
        }
        UpdateRequest {
            update,
            condition: Some("attribute_exists(workflow_exec_id)".into()),
            ..req
        }
    }

    /// Run the side effects of the activity's state, then, for a terminal
    /// activity, remove the sparse index markers an engine- or
    /// monitor-made write left for resuming (see `transition`). Idempotent.
    async fn settle(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        self.after(exec).await?;
        if exec.state.is_terminal()
            && (exec.heartbeat_shard.is_some() || exec.launch_shard.is_some())
        {
            let req = UpdateRequest::new(
                self.store.tables().activity_exec(),
                self.activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
            )
            .name("#st", "state")
            .value(":s", s(exec.state.as_str()));
            let req = UpdateRequest {
                update: format!("REMOVE {}", MARKERS.join(", ")),
                condition: Some("#st = :s".into()),
                ..req
            };
            match self.store.update(req, false).await {
                Ok(_) | Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Side effects of the state an activity is in; idempotent.
    async fn after(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        match exec.state {
            ActivityState::Completed => {
                self.release_dependents(exec).await?;
                self.finish_workflow(&exec.workflow_exec_id, &exec.workflow_name)
                    .await
            }
            ActivityState::Failed | ActivityState::TimedOut | ActivityState::Cancelled => {
                self.cancel_dependents(exec).await?;
                self.finish_workflow(&exec.workflow_exec_id, &exec.workflow_name)
                    .await
            }
            ActivityState::Queued if exec.launched_time_epoch.is_none() => self.launch(exec).await,
            _ => Ok(()),
        }
    }

    // ----- dependencies and launching -------------------------------------

    /// Lower each dependent's `pending_dependency_count` exactly once for
    /// this edge (the edge marker and the decrement are one conditional
    /// update; DESIGN 3.2); queue and launch those that reach zero.
    async fn release_dependents(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let results: Vec<Result<(), EngineError>> = stream::iter(exec.dependents.iter())
            .map(|dep| async move {
                let req = UpdateRequest::new(
                    self.store.tables().activity_exec(),
                    self.activity_key(dep, &exec.workflow_exec_id),
                )
                .value(":one", n(1))
                .value(":zero", n(0))
                .value(
                    ":p",
                    AttributeValue::Ss(vec![exec.activity_exec_id.clone()]),
                )
                .value(":pid", s(&exec.activity_exec_id));
                let req = UpdateRequest {
                    update: "SET pending_dependency_count = pending_dependency_count - :one \
                             ADD released_prerequisites :p"
                        .into(),
                    condition: Some(
                        "pending_dependency_count > :zero AND \
                         NOT contains(released_prerequisites, :pid)"
                            .into(),
                    ),
                    ..req
                };
                let waiting: ActivityExec = match self.store.update(req, true).await {
                    Ok(Some(item)) => serde_dynamo::from_item(item)
                        .map_err(|e| EngineError::Retry(format!("{dep}: {e}")))?,
                    Ok(None) => return Err(EngineError::Retry(format!("{dep}: no item returned"))),
                    // Already released by this edge (redelivery): resume.
                    Err(StoreError::ConditionFailed) => {
                        self.load_activity(dep, &exec.workflow_exec_id).await?
                    }
                    Err(e) => return Err(e.into()),
                };
                if waiting.pending_dependency_count == 0 {
                    self.queue_and_launch(waiting).await?;
                }
                Ok(())
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Move an activity whose prerequisites all completed to QUEUED with a
    /// conditional update (REQUESTED → QUEUED for roots, REQUESTED → READY →
    /// QUEUED otherwise; contract: "Launching A New Activity"), then launch
    /// it. If the condition fails, another part of the system queued it; if
    /// it is QUEUED without a recorded launch, the launch is resumed.
    async fn queue_and_launch(&self, exec: ActivityExec) -> Result<(), EngineError> {
        match exec.state {
            ActivityState::Requested | ActivityState::Ready => {
                if exec.pending_dependency_count > 0 {
                    return Ok(());
                }
            }
            // Queued already, or ended (e.g. its launch was refused): resume
            // what its state still owes (an unrecorded launch, side effects).
            _ => return Box::pin(self.settle(&exec)).await,
        }
        let now = Timestamp::now();
        let event_id = format!("launcher:{}", exec.activity_exec_id);
        let mut steps = vec![];
        if exec.state == ActivityState::Requested && !exec.prerequisites.is_empty() {
            contract::next_state(exec.state, Transition::Ready, Actor::Engine)
                .expect("contract: REQUESTED accepts READY");
            steps.push((Transition::Ready, ActivityState::Ready));
        }
        let from = steps.last().map_or(exec.state, |(_, s)| *s);
        let queued = contract::next_state(from, Transition::Queued, Actor::Engine)
            .expect("contract: REQUESTED and READY accept QUEUED");
        steps.push((Transition::Queued, queued));
        let history: Vec<AttributeValue> = steps
            .iter()
            .map(|(t, st)| {
                av(&HistoryEntry {
                    transition: t.as_str().into(),
                    state: *st,
                    at_epoch: now.epoch,
                    event_id: event_id.clone(),
                })
            })
            .collect();
        let req = UpdateRequest::new(
            self.store.tables().activity_exec(),
            self.activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
        )
        .name("#st", "state")
        .name("#ver", "version")
        .name("#hist", "history")
        .name("#att", "attempt")
        .value(":from", s(exec.state.as_str()))
        .value(":queued", s(queued.as_str()))
        .value(":zero", n(0))
        .value(":v0", n(exec.version))
        .value(":v1", n(exec.version + 1))
        .value(":eid", s(&event_id))
        .value(":empty", AttributeValue::L(vec![]))
        .value(":h", AttributeValue::L(history))
        .value(":now", n(now.epoch))
        .value(":now_list", av(&now.date_list()))
        .value(":shard", n(store::shard_of(&exec.activity_exec_id)))
        .value(":one", n(1));
        let req = UpdateRequest {
            update: "SET #st = :queued, #ver = :v1, last_event_id = :eid, \
                     #hist = list_append(if_not_exists(#hist, :empty), :h), \
                     queued_time = :now_list, queued_time_epoch = :now, \
                     launch_shard = :shard, #att = #att + :one"
                .into(),
            condition: Some(
                "#st = :from AND #ver = :v0 AND pending_dependency_count = :zero".into(),
            ),
            ..req
        };
        match self.store.update(req, true).await {
            Ok(Some(item)) => {
                let queued: ActivityExec = serde_dynamo::from_item(item)
                    .map_err(|e| EngineError::Retry(format!("{}: {e}", exec.activity_exec_id)))?;
                self.launch(&queued).await
            }
            Ok(None) => Ok(()),
            // contract: "if the update fails, then it should be assumed that
            // the activity has been queued by another part of the system".
            Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Invoke the activity's Lambda asynchronously with the launch payload
    /// (DESIGN 3.9), then record the launch (`launched_time`; the activity
    /// stays in the sparse launch GSI until it starts). A launch Lambda
    /// rejects for good fails the activity.
    async fn launch(&self, exec: &ActivityExec) -> Result<(), EngineError> {
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
            attempt: exec.attempt.max(1),
            input: exec.input.clone().unwrap_or(Value::Null),
            prerequisites,
            timeout_seconds: exec.timeout_seconds,
            heartbeat_timeout_seconds: self.heartbeat_timeout(exec),
        };
        let body = serde_json::to_value(&payload).expect("serializable");
        match self.launcher.invoke_async(&exec.lambda, &body).await {
            Ok(()) => {
                info!(activity_exec_id = %exec.activity_exec_id, lambda = %exec.lambda, attempt = payload.attempt, "activity launched");
                let now = Timestamp::now();
                let req = UpdateRequest::new(
                    self.store.tables().activity_exec(),
                    self.activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
                )
                .value(":now", n(now.epoch))
                .value(":now_list", av(&now.date_list()));
                let req = UpdateRequest {
                    // `launch_shard` stays until the activity starts: if it
                    // never does, the monitor launches it again.
                    update: "SET launched_time = :now_list, launched_time_epoch = :now".into(),
                    condition: Some("attribute_exists(activity_exec_id)".into()),
                    ..req
                };
                self.store.update(req, false).await?;
                Ok(())
            }
            Err(e @ InvokeError::Unavailable { .. }) => Err(EngineError::Retry(e.to_string())),
            Err(e) => {
                warn!(activity_exec_id = %exec.activity_exec_id, error = %e, "launch failed; failing the activity");
                let event_id = format!("launch-failed:{}:{}", exec.activity_exec_id, exec.attempt);
                self.engine_transition(
                    exec.clone(),
                    Transition::Failed,
                    &event_id,
                    format!("launch failed: {e}"),
                )
                .await
            }
        }
    }

    /// A transition the engine requests itself (launch failure, cancel
    /// propagation) with `reason` as the error. One the contract refuses by
    /// now (the activity moved on meanwhile) is not an error.
    async fn engine_transition(
        &self,
        exec: ActivityExec,
        transition: Transition,
        event_id: &str,
        reason: String,
    ) -> Result<(), EngineError> {
        let details = Details {
            error: Some(reason),
            ..Details::default()
        };
        match Box::pin(self.transition(exec, transition, Actor::Engine, event_id, details)).await {
            Ok(_) | Err(EngineError::Rejected(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Cancel every activity downstream of `exec` that has not started
    /// (DESIGN 3.4); each cancelled one propagates further in turn.
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
                    self.engine_transition(d, Transition::Cancel, &event_id, reason)
                        .await
                }
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Finish the workflow if its last activity ended: counted, not scanned
    /// (DESIGN 3.3). The counters are read strongly consistent after the
    /// transaction that bumped them; the write is conditional on RUNNING, so
    /// concurrent finishers agree and a redelivery changes nothing.
    async fn finish_workflow(&self, id: &str, name: &str) -> Result<(), EngineError> {
        // Only the state and the counters: the item also holds the plan.
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

    // ----- heartbeats and the monitor -------------------------------------

    /// One heartbeat monitor tick at `now` (epoch seconds): time out
    /// RUNNING / CANCELLED_RUNNING heartbeat-enabled activities whose
    /// heartbeat deadline passed (DESIGN 3.6, a Query per shard of the
    /// sparse heartbeat GSI, never a Scan), propagating like FAILED; then
    /// launch again QUEUED activities whose launch was not recorded within
    /// `queued_redrive_seconds` (DESIGN 3.9).
    pub async fn monitor_tick(&self, now: i64) -> Result<MonitorReport, EngineError> {
        let mut report = MonitorReport::default();
        let t = self.store.tables().clone();
        for shard in 0..store::INDEX_SHARDS {
            let stale: Vec<ActivityKey> = self
                .store
                .query(
                    &t.activity_exec(),
                    Some(store::INDEX_HEARTBEAT),
                    "heartbeat_shard = :s AND heartbeat_deadline_epoch < :now",
                    HashMap::new(),
                    HashMap::from([(":s".to_string(), n(shard)), (":now".to_string(), n(now))]),
                )
                .await?;
            for k in stale {
                match self.time_out(&k, now).await {
                    Ok(Some(ActivityState::TimedOut)) => report.timed_out += 1,
                    Ok(_) => {}
                    Err(e) => {
                        warn!(activity_exec_id = %k.activity_exec_id, error = %e, "heartbeat monitor: will try again next tick");
                        report.errors += 1;
                    }
                }
            }
            let lost: Vec<ActivityKey> = self
                .store
                .query(
                    &t.activity_exec(),
                    Some(store::INDEX_LAUNCH),
                    "launch_shard = :s AND queued_time_epoch < :cut",
                    HashMap::new(),
                    HashMap::from([
                        (":s".to_string(), n(shard)),
                        (
                            ":cut".to_string(),
                            n(now - self.config.queued_redrive_seconds),
                        ),
                    ]),
                )
                .await?;
            for k in lost {
                match self.redrive(&k, now).await {
                    Ok(true) => report.relaunched += 1,
                    Ok(false) => {}
                    Err(e) => {
                        warn!(activity_exec_id = %k.activity_exec_id, error = %e, "heartbeat monitor: will try again next tick");
                        report.errors += 1;
                    }
                }
            }
        }
        Ok(report)
    }

    /// An activity a monitor index returned, read again (strongly
    /// consistent). One that ended already is there because the write that
    /// ended it kept its marker: its side effects are resumed (`settle`) and
    /// `None` is returned.
    async fn monitored(&self, k: &ActivityKey) -> Result<Option<ActivityExec>, EngineError> {
        let exec: Option<ActivityExec> = self
            .store
            .get(
                &self.store.tables().activity_exec(),
                self.activity_key(&k.activity_exec_id, &k.workflow_exec_id),
            )
            .await?;
        match exec {
            Some(e) if e.state.is_terminal() => {
                self.settle(&e).await?;
                Ok(None)
            }
            other => Ok(other),
        }
    }

    /// Time out one activity found in the heartbeat GSI, or finish the side
    /// effects of one timed out earlier (its marker is still there).
    async fn time_out(
        &self,
        k: &ActivityKey,
        now: i64,
    ) -> Result<Option<ActivityState>, EngineError> {
        let Some(exec) = self.monitored(k).await? else {
            return Ok(None);
        };
        if !exec.state.is_running() {
            return Ok(None);
        }
        let event_id = format!(
            "heartbeat-monitor:{}:{}",
            exec.activity_exec_id, exec.heartbeat_time_epoch
        );
        // Which of the two limits passed (`deadline`).
        let reason = match exec.timeout_seconds {
            Some(t) if exec.start_time_epoch >= 0 && exec.start_time_epoch + t < now => {
                format!("not finished within {t}s of starting (timeout_seconds)")
            }
            _ => "heartbeat timed out".to_string(),
        };
        let details = Details {
            error: Some(reason),
            at: Some(now),
            ..Details::default()
        };
        match self
            .transition(
                exec,
                Transition::TimedOut,
                Actor::Monitor,
                &event_id,
                details,
            )
            .await
        {
            Ok(state) => Ok(Some(state)),
            Err(EngineError::Rejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Launch again an activity still QUEUED `queued_redrive_seconds` after
    /// its (last) launch: the launch was lost before or after the invoke
    /// (DESIGN 3.9). Bumps `attempt` and `queued_time_epoch` with a
    /// conditional update so concurrent monitors launch it once. After
    /// `max_launch_attempts` the activity fails (QUEUED → FAILED) with the
    /// reason, so the workflow ends instead of waiting for ever.
    async fn redrive(&self, k: &ActivityKey, now: i64) -> Result<bool, EngineError> {
        match self.monitored(k).await? {
            Some(exec) if exec.state == ActivityState::Queued => {
                // Re-check the age on the fresh read: another tick may have
                // just launched it again.
                let cut = now - self.config.queued_redrive_seconds;
                if exec.queued_time_epoch.is_none_or(|q| q >= cut) {
                    return Ok(false);
                }
                if exec.attempt >= self.config.max_launch_attempts {
                    let event_id =
                        format!("not-started:{}:{}", exec.activity_exec_id, exec.attempt);
                    let reason = format!(
                        "not started after {} launches ({}s each)",
                        exec.attempt, self.config.queued_redrive_seconds
                    );
                    warn!(activity_exec_id = %exec.activity_exec_id, %reason, "failing the activity");
                    self.engine_transition(exec, Transition::Failed, &event_id, reason)
                        .await?;
                    return Ok(false);
                }
            }
            _ => return Ok(false),
        }
        let req = UpdateRequest::new(
            self.store.tables().activity_exec(),
            self.activity_key(&k.activity_exec_id, &k.workflow_exec_id),
        )
        .name("#st", "state")
        .name("#att", "attempt")
        .value(":queued", s(ActivityState::Queued.as_str()))
        .value(":one", n(1))
        .value(":now", n(now))
        .value(":now_list", av(&Timestamp::from_epoch(now).date_list()))
        .value(":cut", n(now - self.config.queued_redrive_seconds));
        let req = UpdateRequest {
            update: "SET #att = #att + :one, queued_time = :now_list, queued_time_epoch = :now \
                     REMOVE launched_time, launched_time_epoch"
                .into(),
            condition: Some(
                "#st = :queued AND attribute_exists(launch_shard) AND queued_time_epoch < :cut"
                    .into(),
            ),
            ..req
        };
        match self.store.update(req, true).await {
            Ok(Some(item)) => {
                let exec: ActivityExec = serde_dynamo::from_item(item)
                    .map_err(|e| EngineError::Retry(format!("{}: {e}", k.activity_exec_id)))?;
                warn!(activity_exec_id = %exec.activity_exec_id, attempt = exec.attempt, "activity did not start; launching it again");
                self.launch(&exec).await?;
                Ok(true)
            }
            Ok(None) | Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// The sparse index attributes: present while the monitor must look at the
/// activity (heartbeats, an unrecorded launch, unfinished side effects).
const MARKERS: [&str; 3] = [
    "heartbeat_shard",
    "heartbeat_deadline_epoch",
    "launch_shard",
];

/// The part of a workflow exec that decides whether it is finished.
#[derive(Debug, serde::Deserialize)]
struct WorkflowCounts {
    state: WorkflowState,
    #[serde(default)]
    activity_count: u64,
    #[serde(default)]
    completed_count: u64,
    #[serde(default)]
    failed_count: u64,
    #[serde(default)]
    cancelled_count: u64,
}

impl WorkflowCounts {
    const ATTRIBUTES: [&'static str; 5] = [
        "state",
        "activity_count",
        "completed_count",
        "failed_count",
        "cancelled_count",
    ];
}

/// The table key of an activity exec, as a KEYS_ONLY GSI returns it.
#[derive(Debug, serde::Deserialize)]
struct ActivityKey {
    activity_exec_id: String,
    workflow_exec_id: String,
}

/// The activity exec items (REQUESTED) and dependency edges for a plan.
/// Pure: the same plan always yields the same items (DESIGN 3.7).
pub fn activity_items(
    wf: &WorkflowExec,
    plan: &Plan,
    config: &EngineConfig,
) -> (Vec<ActivityExec>, Vec<ActivityExecDependency>) {
    let id_of: HashMap<&str, String> = plan
        .activities
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                ids::activity_exec_id(&wf.workflow_exec_id, &a.name),
            )
        })
        .collect();
    let dependents = plan.dependents();
    let mut execs = Vec::with_capacity(plan.activities.len());
    let mut edges = Vec::new();
    for a in &plan.activities {
        let id = id_of[a.name.as_str()].clone();
        // An explicit `heartbeat_enabled` wins; otherwise a timeout enables.
        let heartbeat_enabled = a
            .heartbeat_enabled
            .unwrap_or(a.heartbeat_timeout_seconds.is_some());
        let prerequisites: Vec<String> = a
            .depends_on
            .iter()
            .map(|p| id_of[p.as_str()].clone())
            .collect();
        for (i, p) in prerequisites.iter().enumerate() {
            edges.push(ActivityExecDependency {
                activity_exec_dependency: ids::dependency_id(&id, i),
                activity_exec_id: id.clone(),
                dependent_activity_exec_id: p.clone(),
                workflow_exec_id: wf.workflow_exec_id.clone(),
            });
        }
        execs.push(ActivityExec {
            activity_exec_id: id,
            workflow_exec_id: wf.workflow_exec_id.clone(),
            workflow_name: wf.workflow_name.clone(),
            activity_name: a.name.clone(),
            state: ActivityState::Requested,
            lambda: a.lambda.clone(),
            input: a.input.clone(),
            attempt: 0,
            heartbeat_enabled,
            heartbeat_timeout_seconds: heartbeat_enabled.then(|| {
                a.heartbeat_timeout_seconds
                    .unwrap_or(config.default_heartbeat_timeout_seconds)
            }),
            timeout_seconds: a.timeout_seconds,
            heartbeat_time: None,
            heartbeat_time_epoch: -1,
            heartbeat_deadline_epoch: None,
            heartbeat_shard: None,
            queued_time: None,
            queued_time_epoch: None,
            launch_shard: None,
            launched_time: None,
            launched_time_epoch: None,
            start_time: None,
            start_time_epoch: -1,
            end_time: None,
            end_time_epoch: None,
            output: None,
            error: None,
            pending_dependency_count: prerequisites.len() as u64,
            released_prerequisites: vec![],
            prerequisites,
            dependents: dependents
                .get(a.name.as_str())
                .into_iter()
                .flatten()
                .map(|d| id_of[d].clone())
                .collect(),
            last_event_id: None,
            version: 0,
            history: vec![],
        });
    }
    (execs, edges)
}
