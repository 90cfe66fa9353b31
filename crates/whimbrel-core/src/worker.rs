//! External workers: processes that claim task-list activities instead of
//! being invoked (the task-server spec's work stealing; SWF task lists).
//!
//! A [`Worker`] polls its task list's sparse GSI
//! (`task_list_shard-task_queued_epoch-index`, every shard) for the oldest
//! claimable task, claims it with one conditional write (QUEUED → RUNNING
//! with a fresh attempt token: [`crate::engine::decide::claim_task_update`]),
//! runs a handler while heartbeating in the background, and reports
//! COMPLETED or FAILED through the Simple Lambda API like any activity. A
//! worker that dies is caught by the heartbeat or start-to-close timeout
//! and the activity is retried per its policy. The row-level protocol, for
//! workers in other languages, is in `docs/workers.md`.
//!
//! ```no_run
//! # async fn run(engine: whimbrel_core::engine::Engine<()>) -> Result<(), whimbrel_core::engine::EngineError> {
//! use whimbrel_core::worker::{Worker, WorkerOptions};
//! let worker = Worker::new(engine, "resize", "host-1", WorkerOptions::default());
//! worker
//!     .run(|task| async move { Ok(serde_json::json!({"echo": task.input})) })
//!     .await?;
//! # Ok(()) }
//! ```

use crate::attr;
use std::future::Future;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::activity::Activity;
use crate::contract::ActivityState;
use crate::engine::{decide, Engine, EngineError};
use crate::ids;
use crate::model::ActivityExec;
use crate::plan::LaunchPayload;
use crate::store::{self, n, s, Cmp, KeyCond, StoreError};

/// How a worker polls and stops.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// First wait after a poll that found nothing, milliseconds; doubled
    /// on each empty poll up to `max_poll_ms`, reset by a claim.
    pub min_poll_ms: u64,
    /// Longest wait between polls, milliseconds.
    pub max_poll_ms: u64,
    /// Stop after this many tasks (`None`: never).
    pub max_tasks: Option<u64>,
    /// Stop after this long without a task, seconds (`None`: never).
    pub idle_exit_seconds: Option<u64>,
    /// Candidates read per shard and poll (the oldest first).
    pub candidates: i32,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            min_poll_ms: 100,
            max_poll_ms: 5_000,
            max_tasks: None,
            idle_exit_seconds: None,
            candidates: 5,
        }
    }
}

/// What a worker did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerStats {
    /// Tasks claimed.
    pub claimed: u64,
    /// Tasks reported COMPLETED.
    pub completed: u64,
    /// Tasks reported FAILED.
    pub failed: u64,
    /// Tasks given up because they were cancelled (acknowledged) or lost
    /// to a timeout (nothing reported).
    pub abandoned: u64,
    /// Claims lost to another worker (a conditional write that failed).
    pub lost_claims: u64,
}

#[derive(Debug, Deserialize)]
struct TaskKey {
    activity_exec_id: String,
    workflow_exec_id: String,
    task_queued_epoch: i64,
}

/// A worker of one task list, or of several ([`Worker::also_on`]).
#[derive(Debug, Clone)]
pub struct Worker {
    engine: Engine<()>,
    task_lists: Vec<String>,
    identity: String,
    options: WorkerOptions,
}

impl Worker {
    /// A worker of `task_list`, naming itself `identity` on the items it
    /// claims (`worker`), reporting through `engine`'s store.
    pub fn new(
        engine: Engine<()>,
        task_list: impl Into<String>,
        identity: impl Into<String>,
        options: WorkerOptions,
    ) -> Self {
        Worker {
            engine,
            task_lists: vec![task_list.into()],
            identity: identity.into(),
            options,
        }
    }

    /// Also claim from `task_list`: a worker on its host's own list and a
    /// shared one (the Flow framework's routing of a task to the host that
    /// holds its file, design.md § 10). A poll takes the oldest claimable
    /// task of all its lists.
    pub fn also_on(mut self, task_list: impl Into<String>) -> Self {
        self.task_lists.push(task_list.into());
        self
    }

    /// One poll: claim the oldest claimable task of the list
    /// (`task_queued_epoch` ≤ now), trying the next candidate when another
    /// worker wins one. `Ok(None)` when there is nothing to claim.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub async fn claim(&self) -> Result<Option<Activity>, EngineError> {
        self.claim_counted(&mut WorkerStats::default()).await
    }

    async fn claim_counted(
        &self,
        stats: &mut WorkerStats,
    ) -> Result<Option<Activity>, EngineError> {
        let store = self.engine.store();
        let table = store.tables().activity_exec();
        let now = self.engine.now().epoch;
        let mut found: Vec<TaskKey> = Vec::new();
        let shards = (self.task_lists.iter())
            .flat_map(|list| (0..decide::TASK_LIST_SHARDS).map(move |shard| (list, shard)));
        for (list, shard) in shards {
            let key = KeyCond {
                hash: (attr::TASK_LIST_SHARD.into(), s(format!("{list}#{shard}"))),
                range: Some((attr::TASK_QUEUED_EPOCH.into(), Cmp::Le, n(now))),
            };
            found.extend(
                store
                    .query_first::<TaskKey>(
                        &table,
                        Some(store::INDEX_TASK_LIST),
                        key,
                        self.options.candidates,
                    )
                    .await?,
            );
        }
        found.sort_by_key(|k| k.task_queued_epoch);
        for k in found {
            let Some(exec) = store
                .get::<ActivityExec>(
                    &table,
                    decide::activity_key(&k.activity_exec_id, &k.workflow_exec_id),
                )
                .await?
            else {
                continue;
            };
            if exec.state != ActivityState::Queued
                || exec.runner.task_list_shard.is_none()
                || exec.attempt.token_hash.is_some()
            {
                continue; // the index lags: claimed or cancelled already
            }
            let token = self.engine.new_token();
            let req = decide::claim_task_update(
                store.tables(),
                self.engine.config(),
                &exec,
                &ids::token_hash(&token),
                &self.identity,
                self.engine.now().epoch,
            );
            match store.update(req, true).await {
                Ok(Some(item)) => {
                    let claimed: ActivityExec = serde_dynamo::from_item(item)
                        .map_err(|e| EngineError::Retry(format!("{}: {e}", k.activity_exec_id)))?;
                    info!(activity_exec_id = %claimed.activity_exec_id, attempt = claimed.attempt.number, worker = %self.identity, "task claimed");
                    let payload = self.engine.launch_payload(&claimed, &token).await?;
                    return Ok(Some(
                        Activity::with_engine(payload, self.engine.clone())
                            .with_source(format!("worker:{}", self.identity)),
                    ));
                }
                Ok(None) => {}
                Err(StoreError::ConditionFailed) => stats.lost_claims += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// Poll, claim and run tasks with `handler` until `max_tasks` or
    /// `idle_exit_seconds` (see [`WorkerOptions`]); forever otherwise.
    /// Each task runs through [`Worker::run_task`]. A store error while
    /// polling is logged and polled again after the backoff.
    pub async fn run<H, F>(&self, handler: H) -> Result<WorkerStats, EngineError>
    where
        H: Fn(LaunchPayload) -> F,
        F: Future<Output = Result<Value, String>>,
    {
        let mut stats = WorkerStats::default();
        let mut wait = self.options.min_poll_ms;
        let mut idle_since = std::time::Instant::now();
        loop {
            if self.options.max_tasks.is_some_and(|m| stats.claimed >= m) {
                return Ok(stats);
            }
            match self.claim_counted(&mut stats).await {
                Ok(Some(activity)) => {
                    stats.claimed += 1;
                    wait = self.options.min_poll_ms;
                    self.run_task(&activity, &handler, &mut stats).await;
                    idle_since = std::time::Instant::now();
                    continue;
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, task_lists = ?self.task_lists, "worker poll failed"),
            }
            if self
                .options
                .idle_exit_seconds
                .is_some_and(|s| idle_since.elapsed() >= Duration::from_secs(s))
            {
                return Ok(stats);
            }
            tokio::time::sleep(Duration::from_millis(wait)).await;
            wait = (wait * 2).min(self.options.max_poll_ms);
        }
    }

    /// Run one claimed task: report RUNNING is not needed (the claim made
    /// it RUNNING); heartbeat every third of the heartbeat timeout (every
    /// 30 s without heartbeats, to learn of a cancel) while `handler`
    /// runs; report COMPLETED with its output or FAILED with its error. A
    /// cancel (CANCELLED_RUNNING) stops the handler and is acknowledged; a
    /// task lost to a timeout or a newer attempt stops it silently.
    pub async fn run_task<H, F>(&self, activity: &Activity, handler: &H, stats: &mut WorkerStats)
    where
        H: Fn(LaunchPayload) -> F,
        F: Future<Output = Result<Value, String>>,
    {
        let every = activity
            .payload
            .heartbeat_timeout_seconds
            .map_or(30, |t| (t / 3).max(1));
        let work = handler(activity.payload.clone());
        tokio::pin!(work);
        let mut beat = tokio::time::interval(Duration::from_secs(every as u64));
        beat.tick().await; // the first tick is immediate
        let id = &activity.payload.activity_exec_id;
        let outcome = loop {
            tokio::select! {
                out = &mut work => break Some(out),
                _ = beat.tick() => match activity.heartbeat().await {
                    Ok(ActivityState::Running) => {}
                    Ok(ActivityState::CancelledRunning) => {
                        info!(activity_exec_id = %id, "task cancelled; stopping it");
                        if let Err(e) = activity.cancelled("cancel acknowledged by the worker").await {
                            warn!(activity_exec_id = %id, error = %e, "cancel not acknowledged");
                        }
                        break None;
                    }
                    Ok(state) => {
                        warn!(activity_exec_id = %id, %state, "task no longer running here; stopping it");
                        break None;
                    }
                    Err(crate::activity::ActivityError::Engine(EngineError::Rejected(r))) => {
                        warn!(activity_exec_id = %id, reason = %r, "task taken from this worker; stopping it");
                        break None;
                    }
                    Err(e) => warn!(activity_exec_id = %id, error = %e, "heartbeat failed; will try again"),
                },
            }
        };
        let report = match outcome {
            None => {
                stats.abandoned += 1;
                return;
            }
            Some(Ok(output)) => {
                stats.completed += 1;
                activity.completed(output).await
            }
            Some(Err(error)) => {
                stats.failed += 1;
                activity.failed(error).await
            }
        };
        if let Err(e) = report {
            // The heartbeat or start-to-close timeout catches it, and the
            // policy retries it.
            warn!(activity_exec_id = %id, error = %e, "report failed");
        }
    }
}
