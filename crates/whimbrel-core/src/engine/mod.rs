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
//! * [`monitor`]: the due-index sweep and heartbeats;
//! * [`signals`]: signal rows → the signal waits of their name.
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
pub mod budget;
pub mod cancel;
pub mod children;
pub mod claim;
pub mod counting;
pub mod decided;
pub mod effects;
pub mod episodes;
pub mod heartbeat;
pub mod limits;
pub mod monitor;
pub mod outcome;
pub mod payloads;
pub mod plans;
pub mod release;
pub mod signals;
pub mod slots;
pub mod start;
pub mod workflow_redrive;

use crate::attr;
use std::collections::HashMap;
use std::sync::Arc;

use crate::contract::{ActivityState, WorkflowState};
use crate::dates::Timestamp;
use crate::model::ActivityExec;
use crate::store::{self, s, Item, Store, StoreError};

pub use decide::activity_items;
pub use monitor::MonitorReport;
pub use whimbrel_rules::config::{EngineConfig, PlanParting};
pub use whimbrel_rules::decide::{self, attempts, deadline, items};

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

/// How a rejection for an item that cannot be read as its type begins
/// ([`StoreError::Shape`]: something other than the engine wrote it).
/// Such an item is quarantined, not retried: a stream record for it is
/// rejected with this reason (its row stays in its table, and the monitor
/// applies it once the item is repaired), and the monitor's tick skips it.
/// Neither blocks a shard or aborts a sweep (docs/design.md § 3.10).
pub const QUARANTINED: &str = "quarantined (item unreadable)";

/// True for the rejection of a quarantined item ([`QUARANTINED`]).
pub fn is_quarantined(e: &EngineError) -> bool {
    matches!(e, EngineError::Rejected(r) if r.starts_with(QUARANTINED))
}

impl From<StoreError> for EngineError {
    /// Transient and deployment errors are retried; an invalid request
    /// (which can never succeed) is a rejection, and so is an item that
    /// cannot be read as its type ([`QUARANTINED`]). Callers that can turn an
    /// invalid write into a recorded failure do so before this conversion.
    fn from(e: StoreError) -> Self {
        if let StoreError::Shape { .. } = e {
            return EngineError::Rejected(format!("{QUARANTINED}: {e}"));
        }
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
    /// Wait until `epoch` (seconds) by this clock: the monitor's sleep to
    /// a due marker within its look-ahead
    /// (`EngineConfig::monitor_lookahead_seconds`). The default sleeps on
    /// the tokio timer for the whole seconds left by [`Self::now`].
    fn sleep_until(&self, epoch: i64) -> futures::future::BoxFuture<'static, ()> {
        let left = u64::try_from(epoch - self.now().epoch).unwrap_or(0);
        Box::pin(tokio::time::sleep(std::time::Duration::from_secs(left)))
    }
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
    /// To the start of second `epoch` by the system clock, to the
    /// millisecond.
    fn sleep_until(&self, epoch: i64) -> futures::future::BoxFuture<'static, ()> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let at_ms = u128::try_from(epoch).unwrap_or(0) * 1000;
        let left = u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(u64::MAX);
        Box::pin(tokio::time::sleep(std::time::Duration::from_millis(left)))
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
            (attr::WORKFLOW_EXEC_ID.into(), s(id)),
            (attr::WORKFLOW_NAME.into(), s(name)),
        ])
    }

    fn activity_key(&self, id: &str, workflow_exec_id: &str) -> Item {
        HashMap::from([
            (attr::ACTIVITY_EXEC_ID.into(), s(id)),
            (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
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

    /// The activity execs of `workflow_exec_id` with these ids that
    /// exist, read 100 to a BatchGetItem (strongly consistent), in no
    /// particular order. An item with no state is none: a stub the
    /// activity role's heartbeat left under a derivable id
    /// (`decided::node_put`). One read per 100, so a loop over many items
    /// that a restart runs again (a wide cancel cut by its function's
    /// timeout) pays little for those it finished (issue 42 C.1).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn activities_with_ids(
        &self,
        workflow_exec_id: &str,
        ids: impl Iterator<Item = String>,
    ) -> Result<Vec<ActivityExec>, EngineError> {
        let keys: Vec<_> = ids
            .map(|id| self.activity_key(&id, workflow_exec_id))
            .collect();
        if keys.is_empty() {
            return Ok(vec![]);
        }
        let table = self.store.tables().activity_exec();
        let items = self.store.batch_get_items(&table, keys).await?;
        items
            .into_iter()
            .filter(|i| i.contains_key(attr::STATE))
            .map(|i| serde_dynamo::from_item(i).map_err(|e| store::shape(&table)(e).into()))
            .collect()
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
    /// hash key (events carry only `activity_exec_id`). Only the item whose
    /// range key is its own workflow's is read ([`crate::ids::is_activity_key`]):
    /// a stray item beside it, made by a heartbeat write on another key,
    /// is neither taken for it nor makes it unreadable.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable; a
    /// quarantine ([`QUARANTINED`]) when the activity's own item is not an
    /// activity.
    pub async fn find_activity(
        &self,
        activity_exec_id: &str,
    ) -> Result<Option<ActivityExec>, EngineError> {
        let table = self.store.tables().activity_exec();
        let key = store::KeyCond {
            hash: (attr::ACTIVITY_EXEC_ID.into(), s(activity_exec_id)),
            range: None,
        };
        let own = self
            .store
            .query_raw(&table, None, key)
            .await?
            .into_iter()
            .find(|item| match item.get(attr::WORKFLOW_EXEC_ID) {
                Some(store::Value::S(wf)) => crate::ids::is_activity_key(activity_exec_id, wf),
                _ => false,
            });
        let Some(item) = own else { return Ok(None) };
        let exec = serde_dynamo::from_item(item).map_err(store::shape(&table))?;
        Ok(Some(exec))
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
    /// A child's parent link: its end owes the parent a report.
    #[serde(default)]
    parent: Option<crate::model::ParentLink>,
    /// Set on an episodic execution, which a decision ends, not its
    /// counts (design.md § 10.1).
    #[serde(default)]
    decide_on: Option<Vec<crate::decider::EventKind>>,
}

impl WorkflowCounts {
    const ATTRIBUTES: [&'static str; 8] = [
        attr::DECIDE_ON,
        attr::PARENT,
        attr::START_TIME_EPOCH,
        attr::STATE,
        attr::ACTIVITY_COUNT,
        attr::COMPLETED_COUNT,
        attr::FAILED_COUNT,
        attr::CANCELLED_COUNT,
    ];
}

/// The table key of an item, as a KEYS_ONLY GSI returns it.
#[derive(Debug, Clone, serde::Deserialize)]
struct ActivityKey {
    activity_exec_id: String,
    workflow_exec_id: String,
    #[serde(default)]
    due_epoch: Option<i64>,
}
