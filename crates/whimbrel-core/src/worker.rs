//! External workers: processes that claim task-list activities instead of
//! being invoked (the task-server spec's work stealing; SWF task lists).
//!
//! A [`Worker`] asks the engine for the oldest claimable task of its lists
//! ([`Engine::claim_task`]: the engine makes the conditional write, QUEUED
//! → RUNNING, and mints the attempt token), runs a handler while
//! heartbeating in the background, and reports COMPLETED or FAILED through
//! the Simple Lambda API like any activity. Deployed, it claims through
//! the engine's claim function ([`Claimer::Function`], template.yaml
//! `TaskClaimFunction`), so its role writes no activity item beyond its
//! heartbeat (issue 42 B.1: a worker that could write items could set any
//! task's token and forge its output); a Full Logic API process with the
//! engine's own grant claims in-process ([`Claimer::Engine`]). A worker
//! that dies is caught by the heartbeat or start-to-close timeout and the
//! activity is retried per its policy. The row-level protocol, for workers
//! in other languages, is in `docs/workers.md`.
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

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tracing::{info, warn};

use crate::activity::{Activity, Outcome};
use crate::engine::{Engine, EngineError};
use crate::launcher::{InvokeError, LambdaLauncher, Launcher};
pub use crate::model::claim::{ClaimRequest, ClaimResponse, ClaimScope};
use crate::plan::LaunchPayload;

/// The claim function's name on the local stack (`whimbrel local` serves
/// functions by their binary's name); deployed, the stack's output
/// `TaskClaimFunctionName`. Workers read it from `WHIMBREL_CLAIM_FUNCTION`.
pub const DEFAULT_CLAIM_FUNCTION: &str = "whimbrel-task-claim";

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
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            min_poll_ms: 100,
            max_poll_ms: 5_000,
            max_tasks: None,
            idle_exit_seconds: None,
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

/// Who makes a worker's claims.
#[derive(Debug, Clone)]
pub enum Claimer {
    /// An engine in this process, with the engine's grant on
    /// `activity_exec` (Full Logic API; every list: [`ClaimScope::all`]).
    Engine(Box<Engine<()>>),
    /// The engine's claim function, invoked synchronously
    /// (RequestResponse) with a [`ClaimRequest`]; it answers a
    /// [`ClaimResponse`], or an error whose message is the refusal.
    Function {
        /// Lambda Invoke (`AWS_ENDPOINT_URL_LAMBDA` locally).
        launcher: LambdaLauncher,
        /// Its name or ARN ([`DEFAULT_CLAIM_FUNCTION`] locally).
        name: String,
    },
}

impl Claimer {
    /// The claim function `name`, invoked over the environment's AWS
    /// configuration (`AWS_ENDPOINT_URL_LAMBDA` locally: `whimbrel local`).
    pub async fn function(name: impl Into<String>) -> Self {
        let sdk = crate::aws_config(None).await;
        Claimer::Function {
            launcher: LambdaLauncher::new(aws_sdk_lambda::Client::new(&sdk)),
            name: name.into(),
        }
    }

    /// One claim. Errors: [`EngineError::Rejected`] for a refused request
    /// or a function that does not answer a claim; [`EngineError::Retry`]
    /// when DynamoDB or Lambda is unavailable.
    pub async fn claim(&self, req: &ClaimRequest) -> Result<ClaimResponse, EngineError> {
        match self {
            Claimer::Engine(engine) => engine.claim_task(req, &ClaimScope::all()).await,
            Claimer::Function { launcher, name } => {
                let body = serde_json::to_value(req).expect("a claim request serializes");
                let answer = launcher
                    .invoke_sync(name, &body)
                    .await
                    .map_err(|e| match e {
                        e if e.is_transient() => EngineError::Retry(e.to_string()),
                        InvokeError::FunctionError { message, .. } => {
                            EngineError::Rejected(message)
                        }
                        e => EngineError::Rejected(e.to_string()),
                    })?;
                serde_json::from_value(answer)
                    .map_err(|e| EngineError::Rejected(format!("{name} answered no claim: {e}")))
            }
        }
    }
}

/// A worker of one task list, or of several ([`Worker::also_on`]).
#[derive(Debug, Clone)]
pub struct Worker {
    engine: Engine<()>,
    claimer: Claimer,
    task_lists: Vec<String>,
    identity: String,
    options: WorkerOptions,
}

impl Worker {
    /// A worker of `task_list`, naming itself `identity` on the items it
    /// claims (`worker`), claiming in-process and reporting through
    /// `engine`'s store. [`Worker::claiming_with`] changes who claims.
    pub fn new(
        engine: Engine<()>,
        task_list: impl Into<String>,
        identity: impl Into<String>,
        options: WorkerOptions,
    ) -> Self {
        Worker {
            claimer: Claimer::Engine(Box::new(engine.clone())),
            engine,
            task_lists: vec![task_list.into()],
            identity: identity.into(),
            options,
        }
    }

    /// Claim through `claimer` (the claim function, deployed).
    pub fn claiming_with(mut self, claimer: Claimer) -> Self {
        self.claimer = claimer;
        self
    }

    /// Also claim from `task_list`: a worker on its host's own list and a
    /// shared one (the Flow framework's routing of a task to the host that
    /// holds its file, design.md § 10). A poll takes the oldest claimable
    /// task of all its lists.
    pub fn also_on(mut self, task_list: impl Into<String>) -> Self {
        self.task_lists.push(task_list.into());
        self
    }

    /// One poll: claim the oldest claimable task of the lists.
    /// `Ok(None)` when there is nothing to claim.
    ///
    /// Errors: as [`Claimer::claim`].
    pub async fn claim(&self) -> Result<Option<Activity>, EngineError> {
        self.claim_counted(&mut WorkerStats::default()).await
    }

    async fn claim_counted(
        &self,
        stats: &mut WorkerStats,
    ) -> Result<Option<Activity>, EngineError> {
        let req = ClaimRequest {
            task_lists: self.task_lists.clone(),
            worker: self.identity.clone(),
        };
        let answer = self.claimer.claim(&req).await?;
        stats.lost_claims += answer.lost_claims;
        Ok(answer.task.map(|payload| {
            Activity::with_engine(payload, self.engine.clone())
                .with_source(format!("worker:{}", self.identity))
        }))
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
                    info!(
                        activity_exec_id = %activity.payload.activity_exec_id,
                        attempt = activity.payload.attempt,
                        worker = %self.identity,
                        "task claimed"
                    );
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

    /// Run one claimed task through [`Activity::drive`] (no RUNNING
    /// report: the claim made it RUNNING) and count its [`Outcome`].
    pub async fn run_task<H, F>(&self, activity: &Activity, handler: &H, stats: &mut WorkerStats)
    where
        H: Fn(LaunchPayload) -> F,
        F: Future<Output = Result<Value, String>>,
    {
        match activity.drive(handler).await {
            Outcome::Completed => stats.completed += 1,
            Outcome::Failed => stats.failed += 1,
            Outcome::Abandoned => stats.abandoned += 1,
        }
    }
}
