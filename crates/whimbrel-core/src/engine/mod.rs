//! The engine (the Full Logic API): start a workflow, apply an activity
//! event, release or cancel dependents, launch activities as fenced
//! attempts, finish workflows, and the heartbeat monitor's sweep.
//!
//! Layout: the rules are pure functions in [`decide`] (items read + one
//! input + the time → typed conditional writes and verdicts, no I/O); the
//! [`Engine`] methods are the one executor that reads, asks `decide`,
//! writes through the [`Store`] and performs the effects (invokes):
//! * [`start`]: a workflow request → exec, plan, activities, root launches;
//! * [`apply`]: an event row → a transition (or parked, or refused);
//! * [`effects`]: what a state owes (release, cancel, launch, finish);
//! * [`monitor`]: the due-index sweep and heartbeats.
//!
//! Design rules every step keeps (docs/design.md):
//! * **Idempotent.** Ids are derived, creates conditional, every activity
//!   write is conditioned on the `version` it read, every edge release on
//!   a per-edge marker; a redelivered input resumes what did not finish.
//! * **Nothing waits on redelivery.** A write that leaves an obligation
//!   (side effects of a terminal state, a claimed launch, a REQUESTED
//!   workflow) sets a sparse due marker in the same write; it is cleared
//!   when the obligation is done, and the monitor sweeps what is left.
//! * **Every non-terminal state after launch has a deadline** (the due
//!   marker): QUEUED, PREPARING, RUNNING, CANCELLED_RUNNING.
//! * **Attempts are fenced.** A launch is an attempt claimed by a
//!   conditional write before its invoke, with a token whose hash the item
//!   keeps; only the claimer invokes.

pub mod apply;
pub mod attempts;
pub mod counting;
pub mod deadline;
pub mod decide;
pub mod effects;
pub mod items;
pub mod monitor;
pub mod outcome;
pub mod payloads;
pub mod plans;
pub mod release;
pub mod start;

use std::collections::HashMap;
use std::sync::Arc;

use crate::contract::{ActivityState, WorkflowState};
use crate::dates::Timestamp;
use crate::model::ActivityExec;
use crate::store::{self, s, Item, Store, StoreError};

pub use decide::activity_items;
pub use monitor::MonitorReport;

/// Engine settings, read from the environment by [`EngineConfig::from_env`].
/// Every duration is in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Table name prefix (`WHIMBREL_TABLE_PREFIX`, default `whimbrel_`).
    pub table_prefix: String,
    /// Heartbeat timeout for activities that enable heartbeats without
    /// giving one (`WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS`, default 300).
    pub default_heartbeat_timeout_seconds: i64,
    /// Relaunch window: a launched attempt still QUEUED this long after
    /// its launch is launched again (same attempt, new launch and token)
    /// (`WHIMBREL_QUEUED_REDRIVE_SECONDS`, default 120).
    pub queued_redrive_seconds: i64,
    /// Launches of one attempt that never starts before the attempt fails
    /// with `NOT_STARTED` (then retried per the policy)
    /// (`WHIMBREL_MAX_LAUNCH_ATTEMPTS`, default 3).
    pub max_launch_attempts: u32,
    /// Start-to-close for activities whose plan gives none, and the
    /// PREPARING deadline (`WHIMBREL_START_TO_CLOSE_SECONDS`, default 3600:
    /// longer than Lambda's 15-minute limit, so a killed function is
    /// caught).
    pub default_start_to_close_seconds: i64,
    /// How long CANCELLED_RUNNING waits for the activity's acknowledgement
    /// before the monitor times it out (`WHIMBREL_CANCEL_GRACE_SECONDS`,
    /// default 300).
    pub cancel_grace_seconds: i64,
    /// How long past a deadline the monitor waits before it judges, so a
    /// report written before the deadline is visible in the event index
    /// (`WHIMBREL_REPORT_GRACE_SECONDS`, default 10; GSIs lag by well under
    /// a second).
    pub report_grace_seconds: i64,
    /// How long after a terminal write its side effects may take before the
    /// monitor resumes them (default 60).
    pub settle_grace_seconds: i64,
    /// How long a workflow may stay REQUESTED (or RUNNING with roots not
    /// launched) before the monitor starts it again
    /// (`WHIMBREL_START_RETRY_SECONDS`, default 60).
    pub start_retry_seconds: i64,
    /// Starts of a workflow by the monitor before it is FAILED
    /// (`WHIMBREL_MAX_START_ATTEMPTS`, default 5).
    pub max_start_attempts: u32,
    /// Schedule-to-start for activities whose plan gives none
    /// (`WHIMBREL_SCHEDULE_TO_START_SECONDS`, default none; 0 = none).
    pub default_schedule_to_start_seconds: Option<i64>,
    /// Schedule-to-close for activities whose plan gives none
    /// (`WHIMBREL_SCHEDULE_TO_CLOSE_SECONDS`, default none; 0 = none).
    pub default_schedule_to_close_seconds: Option<i64>,
    /// Refuse reports without the live attempt's token for every workflow
    /// (`WHIMBREL_REQUIRE_TOKENS`, default false).
    pub require_tokens: bool,
    /// How many activities to release, launch or cancel at once, and how
    /// many items of one stream batch the handlers process at once (each
    /// item's records in stream order; default 16; `whimbrel bench-batch`
    /// measures the speed-up).
    pub concurrency: usize,
    /// Days the write-once rows our writers insert (request rows of
    /// `whimbrel start`, event rows of the activity helper, the worker and
    /// the CLI) are kept before DynamoDB TTL may delete them
    /// (`WHIMBREL_ROW_RETENTION_DAYS`, the stack's `RowRetentionDays`;
    /// default none = kept forever; 0 = none). See [`Self::row_expiry`].
    pub row_retention_days: Option<i64>,
    /// Write `launched_time` on the activity exec once Lambda accepted a
    /// launch's async Invoke (`WHIMBREL_RECORD_LAUNCHES`, default false).
    /// For operators only (no rule reads it), and it costs one more write
    /// of the activity item per launch (issue 7), so it is off by default;
    /// `queued_time` (the claim, just before the Invoke) is always written.
    pub record_launches: bool,
    /// Prerequisites per join group (issue 7). An activity with more
    /// prerequisites than this is a wide join: each prerequisite's
    /// COMPLETED updates a small join group item (at most this many names)
    /// and only a complete group updates the join, so no write grows with
    /// the number of prerequisites and no item is written by all of them
    /// (`model::JoinGroup`). Read when a plan is stored; a stored
    /// workflow keeps its groups. Default and largest:
    /// [`crate::plan::JOIN_GROUP_SIZE`] (larger values count as it).
    pub join_group_size: usize,
    /// Most dependents listed on an activity item (issue 7). An activity
    /// with more is a wide fan-out: its item keeps their number
    /// (`dependents_in_plan`), and they are derived from the stored plan
    /// when it ends, so no item grows with the fan-out. Read when a plan
    /// is stored. Default and largest: [`crate::plan::FAN_OUT_LIST_MAX`]
    /// (larger values count as it).
    pub fan_out_list_max: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            table_prefix: store::DEFAULT_TABLE_PREFIX.into(),
            default_heartbeat_timeout_seconds: 300,
            queued_redrive_seconds: 120,
            max_launch_attempts: 3,
            default_start_to_close_seconds: 3600,
            cancel_grace_seconds: 300,
            report_grace_seconds: 10,
            settle_grace_seconds: 60,
            start_retry_seconds: 60,
            max_start_attempts: 5,
            default_schedule_to_start_seconds: None,
            default_schedule_to_close_seconds: None,
            require_tokens: false,
            concurrency: 16,
            row_retention_days: None,
            record_launches: false,
            join_group_size: crate::plan::JOIN_GROUP_SIZE,
            fan_out_list_max: crate::plan::FAN_OUT_LIST_MAX,
        }
    }
}

impl EngineConfig {
    /// Settings from `WHIMBREL_*` environment variables, defaults otherwise.
    ///
    /// Errors: a variable that is set but not a positive integer (or, for
    /// `WHIMBREL_REQUIRE_TOKENS`, not `true` / `false`).
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
        // Unset, empty or 0: none.
        let optional = |k: &str| -> Result<Option<i64>, String> {
            match std::env::var(k) {
                Ok(v) if matches!(v.trim(), "" | "0") => Ok(None),
                Ok(_) => num(k, 0).map(Some),
                Err(_) => Ok(None),
            }
        };
        let count =
            |k: &str, dflt: u32| num(k, i64::from(dflt)).map(|v| v.try_into().unwrap_or(u32::MAX));
        let flag = |k: &str, dflt: bool| match std::env::var(k) {
            Ok(v) => match v.trim() {
                "true" | "1" => Ok(true),
                "false" | "0" | "" => Ok(false),
                _ => Err(format!("{k}={v:?} is not true or false")),
            },
            Err(_) => Ok(dflt),
        };
        let require_tokens = flag("WHIMBREL_REQUIRE_TOKENS", d.require_tokens)?;
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
            max_launch_attempts: count("WHIMBREL_MAX_LAUNCH_ATTEMPTS", d.max_launch_attempts)?,
            default_start_to_close_seconds: num(
                "WHIMBREL_START_TO_CLOSE_SECONDS",
                d.default_start_to_close_seconds,
            )?,
            cancel_grace_seconds: num("WHIMBREL_CANCEL_GRACE_SECONDS", d.cancel_grace_seconds)?,
            report_grace_seconds: num("WHIMBREL_REPORT_GRACE_SECONDS", d.report_grace_seconds)?,
            settle_grace_seconds: d.settle_grace_seconds,
            start_retry_seconds: num("WHIMBREL_START_RETRY_SECONDS", d.start_retry_seconds)?,
            max_start_attempts: count("WHIMBREL_MAX_START_ATTEMPTS", d.max_start_attempts)?,
            default_schedule_to_start_seconds: optional("WHIMBREL_SCHEDULE_TO_START_SECONDS")?,
            default_schedule_to_close_seconds: optional("WHIMBREL_SCHEDULE_TO_CLOSE_SECONDS")?,
            require_tokens,
            concurrency: d.concurrency,
            row_retention_days: optional("WHIMBREL_ROW_RETENTION_DAYS")?,
            record_launches: flag("WHIMBREL_RECORD_LAUNCHES", d.record_launches)?,
            join_group_size: d.join_group_size,
            fan_out_list_max: d.fan_out_list_max,
        })
    }

    /// The `expires_at_epoch` (epoch seconds) of a write-once row written
    /// at `now_epoch`: `now + row_retention_days × 86400`, or `None` (no
    /// attribute: the row is kept) when retention is off. DynamoDB TTL on
    /// that attribute deletes the row some time after (docs/tables.md).
    pub fn row_expiry(&self, now_epoch: i64) -> Option<i64> {
        self.row_retention_days
            .map(|d| now_epoch.saturating_add(d.saturating_mul(86_400)))
    }
}

/// Why an engine operation did not complete.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The input can never apply (malformed, unknown activity, a transition
    /// the contract refuses, a stale attempt). A stream record carrying it
    /// is rejected and logged with this reason.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The operation may succeed later (throttled, network, contention). A
    /// stream record carrying it is reported as a batch item failure.
    #[error("retry later: {0}")]
    Retry(String),
}

impl From<StoreError> for EngineError {
    /// Transient and deployment errors are retried; an invalid request
    /// (which can never succeed) is a rejection. Callers that can turn an
    /// invalid write into a recorded failure do so before this conversion.
    fn from(e: StoreError) -> Self {
        if e.is_permanent() {
            EngineError::Rejected(e.to_string())
        } else {
            EngineError::Retry(e.to_string())
        }
    }
}

/// What an operation did, for logs, handlers and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The state changed (or had already changed with this same event).
    State(ActivityState),
    /// The event arrived before the activity's state allowed it: it is kept
    /// on the activity and applied when the state catches up.
    Parked(ActivityState),
    /// The workflow is in this state.
    Workflow(WorkflowState),
    /// The row was not for the Simple Lambda API (`manual = true`): the
    /// stream handlers skip it, its writer applies it in-process.
    Skipped,
}

/// Where the engine gets the time and fresh attempt tokens: the system, or
/// the simulation's seeded world.
pub trait Environment: Send + Sync + std::fmt::Debug {
    /// The current time (seconds resolution).
    fn now(&self) -> Timestamp;
    /// A fresh, unguessable attempt token.
    fn new_token(&self) -> String;
}

/// The system clock and random (UUID v4) tokens.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemEnvironment;

impl Environment for SystemEnvironment {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
    fn new_token(&self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// The engine: the store, a launcher, the settings and the environment.
#[derive(Debug, Clone)]
pub struct Engine<L> {
    store: Store,
    launcher: L,
    config: EngineConfig,
    env: Arc<dyn Environment>,
}

impl<L> Engine<L> {
    /// An engine over `store` and `launcher`, on the system clock.
    pub fn new(store: Store, launcher: L, config: EngineConfig) -> Self {
        Engine::with_environment(store, launcher, config, Arc::new(SystemEnvironment))
    }

    /// An engine with its own clock and tokens (the simulation's).
    pub fn with_environment(
        store: Store,
        launcher: L,
        config: EngineConfig,
        env: Arc<dyn Environment>,
    ) -> Self {
        Engine {
            store,
            launcher,
            config,
            env,
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

    /// The settings.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The current time of the engine's environment.
    pub fn now(&self) -> Timestamp {
        self.env.now()
    }

    /// A fresh token from the engine's environment.
    pub fn new_token(&self) -> String {
        self.env.new_token()
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
    pub async fn load_workflow(
        &self,
        id: &str,
        name: &str,
    ) -> Result<crate::model::WorkflowExec, EngineError> {
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
    /// hash key (events carry only `activity_exec_id`).
    pub async fn find_activity(
        &self,
        activity_exec_id: &str,
    ) -> Result<Option<ActivityExec>, EngineError> {
        let key = store::KeyCond {
            hash: ("activity_exec_id".into(), s(activity_exec_id)),
            range: None,
        };
        let found: Vec<ActivityExec> = self
            .store
            .query(&self.store.tables().activity_exec(), None, key)
            .await?;
        Ok(found.into_iter().next())
    }
}

/// An activity exec item as an UpdateItem returned it (ALL_NEW).
fn decoded(id: &str, item: crate::store::Item) -> Result<ActivityExec, EngineError> {
    serde_dynamo::from_item(item).map_err(|e| EngineError::Retry(format!("{id}: {e}")))
}

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
    #[serde(default)]
    start_time_epoch: i64,
}

impl WorkflowCounts {
    const ATTRIBUTES: [&'static str; 6] = [
        "start_time_epoch",
        "state",
        "activity_count",
        "completed_count",
        "failed_count",
        "cancelled_count",
    ];
}

/// The table key of an item, as a KEYS_ONLY GSI returns it.
#[derive(Debug, serde::Deserialize)]
struct ActivityKey {
    activity_exec_id: String,
    workflow_exec_id: String,
    #[serde(default)]
    due_epoch: Option<i64>,
}
