//! What every simulated function shares with the world: the clock, the one
//! seeded random source, the pending async invokes and timers, and the
//! fault switches; and the adapters the engine runs on in the simulation:
//! a store backend that yields and may throttle or crash, a launcher, and
//! an environment (clock with skew, seeded tokens).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use whimbrel_core::attr;

use futures::future::BoxFuture;
use futures::FutureExt;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::decide::WakeUp;
use whimbrel_core::engine::Environment;
use whimbrel_core::launcher::{InvokeError, Launcher};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{Action, Backend, Cond, Found, Item, KeyCond, Page, StoreError, Write};

use crate::exec::{Invocation, YieldNow};

/// Fault rates of a schedule (each a probability per opportunity).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// A store call fails with throttling.
    pub throttle: f64,
    /// A transaction fails with TransactionConflict.
    pub conflict: f64,
    /// A function invocation crashes after some store call.
    pub crash: f64,
    /// An async invoke is never delivered.
    pub drop_invoke: f64,
    /// An async invoke is delivered twice.
    pub dup_invoke: f64,
    /// An invoke answers "unavailable" (whether or not it was delivered).
    pub invoke_error: f64,
    /// An activity's async invoke is refused for good and not delivered
    /// (a 4xx: the function was deleted or its payload refused): the
    /// engine fails the attempt (`LAUNCH_FAILED`, retried per the policy).
    pub invoke_refused: f64,
    /// A stream batch that succeeded is delivered again.
    pub dup_batch: f64,
    /// A write applies but its answer is lost (a 5xx or a timeout after
    /// DynamoDB applied it): the SDK sends it again, or the caller gets a
    /// retryable error ([`LostAnswer`]).
    pub lost_answer: f64,
    /// An EventBridge schedule tick does not run the monitor: the
    /// monitor's async invoke is throttled past its maximum event age (60
    /// s in `template.yaml`) and dropped, or the schedule misses it. Now
    /// and then a run of ticks is missed.
    pub missed_tick: f64,
    /// A client (an activity, a worker, a user) runs on a clock off by
    /// minutes (engine functions' clocks, NTP-synced Lambda hosts, stay
    /// within seconds).
    pub client_skew: f64,
    /// An async invoke waits in Lambda's queue (its function at its
    /// concurrency limit) for 20 s to 10 minutes; once older than the
    /// function's maximum event age ([`Shared::max_event_age`]) it is
    /// dropped instead.
    pub async_backlog: f64,
    /// DynamoDB answers part of a request: a BatchGetItem or
    /// BatchWriteItem returns some keys or items unprocessed
    /// (`UnprocessedKeys`, `UnprocessedItems`; at least one is processed,
    /// else it would be a throughput error), or a Query returns a short
    /// page with a `LastEvaluatedKey` (its 1 MB page limit).
    pub partial: f64,
    /// An engine function's invocation stalls before one of its store
    /// calls, for up to twice its function's timeout; past the timeout
    /// Lambda stops it ([`crate::exec::FunctionTimeout`]). Its earlier
    /// writes stay, and its later ones come after the world moved on.
    pub function_timeout: f64,
    /// The GSIs stop catching up for 15 s to 2 minutes, past the engine's
    /// report grace (drawn each time the clock moves). DynamoDB's GSI lag
    /// is usually under a second, but a GSI whose writes are throttled
    /// falls behind ("Managing throughput settings for global secondary
    /// indexes", DynamoDB developer guide).
    pub gsi_stall: f64,
}

impl Faults {
    /// No faults (the liveness phase).
    pub const NONE: Faults = Faults {
        throttle: 0.0,
        conflict: 0.0,
        crash: 0.0,
        drop_invoke: 0.0,
        dup_invoke: 0.0,
        invoke_error: 0.0,
        invoke_refused: 0.0,
        dup_batch: 0.0,
        lost_answer: 0.0,
        missed_tick: 0.0,
        client_skew: 0.0,
        async_backlog: 0.0,
        partial: 0.0,
        function_timeout: 0.0,
        gsi_stall: 0.0,
    };

    /// An outage: most store calls are throttled, so event source mappings
    /// run out of retries and give records up.
    pub fn outage() -> Faults {
        Faults {
            throttle: 0.9,
            ..Faults::at(1.0)
        }
    }

    /// Rates scaled by `level` (0 = none, 1 = the default mix).
    pub fn at(level: f64) -> Faults {
        Faults {
            throttle: 0.03 * level,
            conflict: 0.05 * level,
            crash: 0.15 * level,
            drop_invoke: 0.1 * level,
            dup_invoke: 0.1 * level,
            invoke_error: 0.05 * level,
            invoke_refused: 0.02 * level,
            dup_batch: 0.1 * level,
            lost_answer: 0.03 * level,
            missed_tick: 0.1 * level,
            client_skew: 0.2 * level,
            async_backlog: 0.1 * level,
            partial: 0.1 * level,
            function_timeout: 0.03 * level,
            gsi_stall: 0.001 * level,
        }
    }
}

/// What happens to a write whose answer is lost after DynamoDB applied it
/// ([`Faults::lost_answer`]). A 5xx (InternalServerError) or a timeout
/// says nothing of whether the write applied: "the request may or may not
/// have succeeded" (Error handling with DynamoDB,
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html>).
/// The AWS SDK for Rust retries such a request (standard retry mode, 4
/// attempts for DynamoDB): a resent PutItem or UpdateItem is evaluated
/// again against the item as it is by then, so a conditional write that
/// applied answers ConditionalCheckFailed and an unconditional one applies
/// twice; a resent TransactWriteItems carries the `ClientRequestToken` the
/// SDK filled in, and answers success without applying again (idempotent
/// for 10 minutes:
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>).
/// When the SDK's retries run out, the caller sees the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostAnswer {
    /// The SDK sends the request again; the caller gets that answer.
    Resent,
    /// The caller gets a retryable error, though the write applied.
    Failed,
}

/// An async invoke waiting to be delivered.
#[derive(Debug, Clone)]
pub struct PendingInvoke {
    /// Function name.
    pub function: String,
    /// The payload.
    pub payload: Value,
    /// Not delivered before this time.
    pub not_before: i64,
}

/// The world's shared state.
pub struct Shared {
    /// Global time, epoch seconds.
    pub now: i64,
    /// The one random source.
    pub rng: ChaCha8Rng,
    /// The random source of plan nodes added after `rng`'s draws were
    /// fixed (timers): its own stream of the same seed, so the schedules
    /// of earlier seeds (pinned in tests) draw as they did.
    pub node_rng: ChaCha8Rng,
    /// The random source of signals (design.md § 9.2): signal nodes of
    /// plans and what users send. A third stream of the same seed, so
    /// that timers and wake-ups (`node_rng`) and the main draws of a
    /// schedule whose plans wait for no signal stay as they were.
    pub signal_rng: ChaCha8Rng,
    /// The random source of child workflows (design.md § 9.5): the child
    /// nodes of plans and the plans of the child workflows registered. A
    /// fourth stream of the same seed, so that a schedule whose plans
    /// start no child draws everything else as it did.
    pub child_rng: ChaCha8Rng,
    /// The random source of workflow redrives (design.md § 9.4): which
    /// users redrive what, and when. A fifth stream of the same seed, so
    /// that a schedule draws everything else as it did until its first
    /// redrive request changes what happens.
    pub redrive_rng: ChaCha8Rng,
    /// The random source of concurrency limits per target (design.md §
    /// 9.3): which targets are limited, and the changes operators make.
    /// A sixth stream of the same seed, so that a schedule draws
    /// everything else as it did until a limit changes what happens.
    pub limit_rng: ChaCha8Rng,
    /// The random source of episodic workflows (design.md § 10): which
    /// are registered, when they start, and every choice their decider
    /// makes ([`crate::episodes`]). A seventh stream of the same seed, so
    /// that a schedule without episodic workflows draws everything else
    /// as it did.
    pub episode_rng: ChaCha8Rng,
    /// The random source of what episodic workflows drew after
    /// `episode_rng`'s draws were fixed: whether a schedule registers the
    /// episodic child workflow ([`crate::world::EPISODIC_CHILD`]) and its
    /// decider, which child nodes of the plans start it, the child nodes
    /// the episodic deciders schedule, and the execution timeouts their
    /// first answers set. An eighth stream of the same seed, so that a
    /// schedule whose episodic workflows neither start children nor time
    /// out draws everything else as it did.
    pub episode_extra_rng: ChaCha8Rng,
    /// The random source of which episodic workflows open a wide first
    /// round (`EpisodeSpec::wide`, issue 42 C.1). A ninth stream of the
    /// same seed, so that a schedule with none draws everything else as
    /// it did.
    pub wide_rng: ChaCha8Rng,
    /// The episodic workflows' deciders, by workflow name.
    pub episodes: HashMap<String, crate::episodes::EpisodeSpec>,
    /// Every answer their decider gave, in order.
    pub given: Vec<crate::episodes::Given>,
    /// Every attempt their decider was asked, in order (when asked; the
    /// answer may come minutes later).
    pub asks: Vec<String>,
    /// Current fault rates.
    pub faults: Faults,
    /// Sleeping tasks: wake time and waker.
    pub timers: Vec<(i64, Waker)>,
    /// Async invokes not delivered yet.
    pub invokes: Vec<PendingInvoke>,
    /// Wake-ups on the timer queue (design.md § 9): when SQS delivers
    /// each to the monitor (world time), and its body.
    pub wake_ups: Vec<(i64, WakeUp)>,
    /// Decider plans by workflow name (the decider function answers them).
    pub deciders: HashMap<String, Value>,
    /// Claimed launches seen in launch payloads and worker claims:
    /// (activity, attempt, launch) → token.
    pub claims: HashMap<(String, u32, u32), String>,
    /// Until then the decider cannot be reached.
    pub decider_down_until: i64,
    /// Safety violations found.
    pub violations: Vec<String>,
    /// What happened, for the failure report.
    pub trace: Vec<String>,
    /// The activity function's `MaximumEventAgeInSeconds`: an async
    /// invoke older than this is dropped, never delivered.
    pub max_event_age: i64,
    /// How often each fault was injected (name → count), so a summary
    /// shows that every fault was exercised.
    pub exercised: std::collections::BTreeMap<&'static str, u64>,
    /// Activity instances doing their work now, by target (`lambda:f`,
    /// `task_list:l`): from an accepted start (RUNNING, or a worker's
    /// claim) to the end of their work, before their report, or their
    /// crash ([`Running`]). What actually runs,
    /// counted against each target's limit (issue 42 C.4).
    pub running: std::collections::BTreeMap<&'static str, Vec<String>>,
}

/// One activity instance doing its work, counted in
/// [`Shared::running`] from its creation until it is dropped (its end,
/// or its invocation's crash or timeout, which drops its task).
pub struct Running {
    world: Arc<Mutex<Shared>>,
    target: &'static str,
    instance: String,
}

impl Running {
    /// Count `instance` (an activity exec id and attempt) of `target` as
    /// running from now.
    pub fn new(world: &Arc<Mutex<Shared>>, target: &'static str, instance: String) -> Self {
        let mut w = lock(world);
        w.running.entry(target).or_default().push(instance.clone());
        drop(w);
        Running {
            world: world.clone(),
            target,
            instance,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut w = lock(&self.world);
        let running = w.running.entry(self.target).or_default();
        if let Some(i) = running.iter().position(|r| *r == self.instance) {
            running.swap_remove(i);
        }
    }
}

impl Shared {
    /// Record the token of a claimed launch (a launch payload, or a
    /// worker's claim); a second token for the same launch is a double
    /// claim: two holders of one attempt.
    pub fn record_claim(&mut self, id: &str, attempt: u32, launch: u32, token: &str) {
        let key = (id.to_string(), attempt, launch);
        match self.claims.get(&key) {
            Some(t) if t != token => self.violations.push(format!(
                "launch {launch} of attempt {attempt} of {id} was claimed twice (two tokens)"
            )),
            Some(_) => {}
            None => {
                self.claims.insert(key, token.to_string());
            }
        }
    }

    /// A world at `now` with `seed`.
    pub fn new(seed: u64, now: i64) -> Self {
        use rand::SeedableRng;
        Shared {
            now,
            rng: ChaCha8Rng::seed_from_u64(seed),
            node_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(1);
                r
            },
            signal_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(2);
                r
            },
            child_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(3);
                r
            },
            redrive_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(4);
                r
            },
            limit_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(5);
                r
            },
            episode_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(6);
                r
            },
            episode_extra_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(7);
                r
            },
            wide_rng: {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(8);
                r
            },
            episodes: HashMap::new(),
            given: vec![],
            asks: vec![],
            faults: Faults::NONE,
            timers: vec![],
            invokes: vec![],
            wake_ups: vec![],
            deciders: HashMap::new(),
            claims: HashMap::new(),
            decider_down_until: 0,
            violations: vec![],
            trace: vec![],
            exercised: Default::default(),
            running: Default::default(),
            max_event_age: 60,
        }
    }

    /// Count one injection of the fault `what`.
    pub fn exercise(&mut self, what: &'static str) {
        *self.exercised.entry(what).or_insert(0) += 1;
    }

    /// How long an async invoke waits in Lambda's queue before delivery,
    /// seconds, or `None` when it is dropped there. Usually under 20 s; with
    /// probability `backlog` (the function at its concurrency limit) 20 s
    /// to 10 minutes, and dropped when that is over the function's maximum
    /// event age. Lambda keeps a throttled async event and retries it for
    /// up to `MaximumEventAgeInSeconds` (6 hours by default), then discards
    /// it ("How Lambda handles errors and retries with asynchronous
    /// invocation",
    /// <https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>).
    pub fn queue_delay(&mut self, backlog: f64) -> Option<i64> {
        if !self.chance(backlog) {
            return Some(self.rng.gen_range(0..20));
        }
        let delay = self.rng.gen_range(20..=600);
        if delay > self.max_event_age {
            self.exercise("async invokes dropped, older than their maximum age");
            None
        } else {
            self.exercise("async invokes delivered late");
            Some(delay)
        }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p.min(1.0))
    }

    /// Record a trace line (kept bounded).
    pub fn log(&mut self, line: String) {
        let now = self.now;
        self.trace.push(format!("t={now} {line}"));
    }
}

/// The shared state behind a lock (single-threaded: never contended).
pub type World = Arc<Mutex<Shared>>;

/// Lock the world.
pub fn lock(w: &World) -> MutexGuard<'_, Shared> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// The store backend of one invocation: yields before every call (so
/// invocations interleave), injects throttling and conflicts, and crashes
/// the invocation after its k-th call.
#[derive(Debug)]
pub struct SimBackend {
    mem: Arc<MemoryBackend>,
    world: World,
    invocation: Arc<Invocation>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("now", &self.now).finish()
    }
}

impl SimBackend {
    /// A backend for one invocation.
    pub fn new(mem: Arc<MemoryBackend>, world: World, invocation: Arc<Invocation>) -> Self {
        SimBackend {
            mem,
            world,
            invocation,
        }
    }

    async fn before(&self, transaction: bool) -> Result<(), StoreError> {
        YieldNow::new().await;
        if self.invocation.is_crashed() {
            futures::future::pending::<()>().await;
        }
        if let Some(secs) = self.invocation.stall_before_next() {
            let deadline = self.invocation.timeout.map_or(i64::MAX, |t| t.deadline);
            let now = lock(&self.world).now;
            sleep(&self.world, secs.min(deadline - now).max(0)).await;
        }
        let now = lock(&self.world).now;
        if self.invocation.timed_out(now) {
            {
                let mut w = lock(&self.world);
                w.exercise("engine functions stopped at their timeout");
                w.log("an engine function is stopped at its timeout".into());
            }
            futures::future::pending::<()>().await;
        }
        if self.invocation.faulty {
            let mut w = lock(&self.world);
            let f = w.faults;
            if w.chance(f.throttle) {
                return Err(StoreError::Transient {
                    op: "sim",
                    message: "ProvisionedThroughputExceededException (simulated)".into(),
                });
            }
            if transaction && w.chance(f.conflict) {
                return Err(StoreError::Conflict);
            }
        }
        Ok(())
    }

    /// Whether the answer to a write that applied is lost, and how
    /// ([`Faults::lost_answer`]); counted when it is.
    fn lost_answer(&self) -> Option<LostAnswer> {
        if !self.invocation.faulty {
            return None;
        }
        let mut w = lock(&self.world);
        let p = w.faults.lost_answer;
        if !w.chance(p) {
            return None;
        }
        if w.rng.gen_bool(0.5) {
            w.exercise("writes applied, answer lost, resent");
            Some(LostAnswer::Resent)
        } else {
            w.exercise("writes applied, answer lost, error");
            Some(LostAnswer::Failed)
        }
    }

    /// How many of the `len` keys or items of a batch call DynamoDB
    /// processes ([`Faults::partial`]): `Some(n)`, 1 ≤ n < `len`, when it
    /// leaves the rest unprocessed; counted as `what`.
    fn partial(&self, len: usize, what: &'static str) -> Option<usize> {
        if len < 2 {
            return None;
        }
        self.draw_partial(what, |r| r.gen_range(1..len))
    }

    /// The most items a Query page holds ([`Faults::partial`]): `Some(1
    /// ..= 3)` when the page is cut short, counted.
    fn page_size(&self) -> Option<usize> {
        self.draw_partial("query pages cut short", |r| r.gen_range(1..=3))
    }

    /// With [`Faults::partial`]'s chance (in a faulty invocation), count
    /// `what` and draw the size with `size`.
    fn draw_partial(
        &self,
        what: &'static str,
        size: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> usize,
    ) -> Option<usize> {
        if !self.invocation.faulty {
            return None;
        }
        let mut w = lock(&self.world);
        let p = w.faults.partial;
        if !w.chance(p) {
            return None;
        }
        w.exercise(what);
        Some(size(&mut w.rng))
    }

    /// One write request `op` (made by `call`), with the store faults: it
    /// may be throttled or conflict before it runs, and once it applied its
    /// answer may be lost ([`LostAnswer`]): resent (after other calls may
    /// have run; a transaction answers success, as its client request token
    /// makes it idempotent), or answered with a retryable error.
    async fn write<'a, T>(
        &'a self,
        op: &'static str,
        transaction: bool,
        call: impl Fn() -> BoxFuture<'a, Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.before(transaction).await?;
        let mut r = call().await;
        if r.is_ok() {
            match self.lost_answer() {
                Some(LostAnswer::Resent) if !transaction => {
                    YieldNow::new().await;
                    r = call().await;
                }
                Some(LostAnswer::Failed) => {
                    r = Err(StoreError::Transient {
                        op,
                        message: "InternalServerError after the write applied (simulated)".into(),
                    })
                }
                _ => {}
            }
        }
        self.after(r).await
    }

    async fn after<T>(&self, r: T) -> T {
        if self.invocation.called() {
            futures::future::pending::<()>().await;
        }
        r
    }
}

impl Backend for SimBackend {
    fn get(
        &self,
        table: String,
        key: Item,
        projection: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        async move {
            self.before(false).await?;
            let r = self.mem.get(table, key, projection).await;
            self.after(r).await
        }
        .boxed()
    }
    fn put(
        &self,
        table: String,
        item: Item,
        cond: Option<Cond>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let call = move || self.mem.put(table.clone(), item.clone(), cond.clone());
        self.write("PutItem", false, call).boxed()
    }
    fn update(
        &self,
        table: String,
        key: Item,
        actions: Vec<Action>,
        cond: Option<Cond>,
        return_new: bool,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        let call = move || {
            self.mem.update(
                table.clone(),
                key.clone(),
                actions.clone(),
                cond.clone(),
                return_new,
            )
        };
        self.write("UpdateItem", false, call).boxed()
    }
    fn transact(&self, writes: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        let call = move || self.mem.transact(writes.clone());
        self.write("TransactWriteItems", true, call).boxed()
    }
    fn batch_put(
        &self,
        table: String,
        mut items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        let cut = self.partial(items.len(), "batch writes partly unprocessed");
        let rest = cut.map(|n| items.split_off(n)).unwrap_or_default();
        let call = move || self.mem.batch_put(table.clone(), items.clone());
        async move {
            let mut unprocessed = self.write("BatchWriteItem", false, call).await?;
            unprocessed.extend(rest);
            Ok(unprocessed)
        }
        .boxed()
    }
    fn batch_get(
        &self,
        table: String,
        mut keys: Vec<Item>,
    ) -> BoxFuture<'_, Result<Found, StoreError>> {
        async move {
            self.before(false).await?;
            let cut = self.partial(keys.len(), "batch reads partly unprocessed");
            let rest = cut.map(|n| keys.split_off(n)).unwrap_or_default();
            let r = self
                .mem
                .batch_get(table, keys)
                .await
                .map(|(found, mut unprocessed)| {
                    unprocessed.extend(rest);
                    (found, unprocessed)
                });
            self.after(r).await
        }
        .boxed()
    }
    fn query(
        &self,
        table: String,
        index: Option<String>,
        key: KeyCond,
        start: Option<Item>,
    ) -> BoxFuture<'_, Result<Page, StoreError>> {
        async move {
            self.before(false).await?;
            let max = self.page_size();
            let r = self
                .mem
                .query_page(&table, index.as_deref(), &key, start.as_ref(), max);
            self.after(r).await
        }
        .boxed()
    }
    fn pause(&self, _millis: u64) -> BoxFuture<'_, ()> {
        YieldNow::new().boxed()
    }
}

/// A function's view of time and tokens: the world's clock plus its skew.
#[derive(Debug)]
pub struct SimEnv {
    /// The world.
    pub world: World,
    /// Clock skew of this function, seconds.
    pub skew: i64,
}

impl Environment for SimEnv {
    fn now(&self) -> Timestamp {
        Timestamp::from_epoch(lock(&self.world).now + self.skew)
    }
    fn new_token(&self) -> String {
        format!("{:032x}", lock(&self.world).rng.gen::<u128>())
    }
    /// Until this function's clock (the world's plus its skew) reads
    /// `epoch`, in world time.
    fn sleep_until(&self, epoch: i64) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(Sleep {
            world: self.world.clone(),
            until: epoch - self.skew,
        })
    }
}

/// The Lambda service as functions see it: async invokes are queued for the
/// world to deliver 0, 1 or 2 times, late; the decider answers the plans
/// registered for it.
#[derive(Debug, Clone)]
pub struct SimLauncher {
    /// The world.
    pub world: World,
    /// Whether faults apply to this caller.
    pub faulty: bool,
}

/// Lambda's payload limits (the "Lambda quotas" page of the AWS Lambda
/// developer guide): a synchronous request at most 6 MB, an asynchronous
/// event at most 1 MB. The simulated service refuses a larger one as
/// Lambda does (`RequestEntityTooLargeException`, 413), and the engine
/// must never send one: each is a violation (issue 42 C.1).
pub const MAX_SYNC_PAYLOAD_BYTES: usize = 6 * 1024 * 1024;
/// See [`MAX_SYNC_PAYLOAD_BYTES`].
pub const MAX_ASYNC_PAYLOAD_BYTES: usize = 1024 * 1024;

impl SimLauncher {
    /// Lambda's refusal of `payload` past `max` bytes, recorded as a
    /// violation.
    fn too_large(&self, function: &str, payload: &Value, max: usize) -> Result<(), InvokeError> {
        let size = payload.to_string().len();
        if size <= max {
            return Ok(());
        }
        let message = format!("RequestEntityTooLargeException: {size} bytes; at most {max}");
        (lock(&self.world).violations)
            .push(format!("the engine invoked {function} with {message}"));
        Err(InvokeError::Rejected {
            function: function.into(),
            message,
        })
    }
}

impl Launcher for SimLauncher {
    async fn invoke_sync(&self, function: &str, payload: &Value) -> Result<Value, InvokeError> {
        YieldNow::new().await;
        self.too_large(function, payload, MAX_SYNC_PAYLOAD_BYTES)?;
        let name = payload[attr::WORKFLOW_NAME].as_str().unwrap_or("");
        if lock(&self.world).episodes.contains_key(name) {
            return self.episodic_decider(function, payload).await;
        }
        let mut w = lock(&self.world);
        if let Some(e) = self.decider_unreachable(&mut w, function) {
            return Err(e);
        }
        w.deciders
            .get(name)
            .cloned()
            .ok_or_else(|| InvokeError::Rejected {
                function: function.into(),
                message: format!("decider knows no workflow {name}"),
            })
    }

    async fn invoke_async(&self, function: &str, payload: &Value) -> Result<(), InvokeError> {
        YieldNow::new().await;
        self.too_large(function, payload, MAX_ASYNC_PAYLOAD_BYTES)?;
        let mut w = lock(&self.world);
        let f = if self.faulty { w.faults } else { Faults::NONE };
        // Two different tokens for one claimed attempt = a double claim.
        if let (Some(id), Some(attempt), Some(launch), Some(token)) = (
            payload[attr::ACTIVITY_EXEC_ID].as_str(),
            payload[attr::ATTEMPT].as_u64(),
            payload[attr::LAUNCH].as_u64(),
            payload[attr::ATTEMPT_TOKEN].as_str(),
        ) {
            w.record_claim(id, attempt as u32, launch as u32, token);
        }
        if w.chance(f.invoke_refused) {
            w.exercise("async invokes refused for good");
            w.log(format!("invoke {function} refused for good"));
            return Err(InvokeError::Rejected {
                function: function.into(),
                message: "ResourceNotFoundException (simulated)".into(),
            });
        }
        let copies = if w.chance(f.drop_invoke) {
            0
        } else if w.chance(f.dup_invoke) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let Some(delay) = w.queue_delay(f.async_backlog) else {
                continue;
            };
            let not_before = w.now + delay;
            w.invokes.push(PendingInvoke {
                function: function.into(),
                payload: payload.clone(),
                not_before,
            });
        }
        let line = format!(
            "invoke {function} {} attempt {} x{copies}",
            payload[attr::ACTIVITY_EXEC_ID],
            payload[attr::ATTEMPT]
        );
        w.log(line);
        if w.chance(f.invoke_error) {
            return Err(InvokeError::Unavailable {
                function: function.into(),
                message: "ServiceException (simulated)".into(),
            });
        }
        Ok(())
    }

    async fn wake_up(&self, wake: &WakeUp, delay_seconds: i64) -> Result<(), InvokeError> {
        YieldNow::new().await;
        self.queue_wake_up(wake, delay_seconds);
        Ok(())
    }
}

impl SimLauncher {
    /// A decider Invoke that fails: throttled under faults, or while the
    /// decider is down (`Shared::decider_down_until`).
    fn decider_unreachable(&self, w: &mut Shared, function: &str) -> Option<InvokeError> {
        let f = w.faults;
        ((self.faulty && w.chance(f.invoke_error)) || w.now < w.decider_down_until).then(|| {
            InvokeError::Unavailable {
                function: function.into(),
                message: "TooManyRequestsException (simulated)".into(),
            }
        })
    }

    /// The episodic decider's synchronous Invoke ([`crate::episodes`]):
    /// unreachable as the plan decider is; under faults, one call in
    /// twenty takes 30 s to 4 minutes (a slow decider, whose attempt may
    /// be given up and tried again while it runs), drawn from the episode
    /// stream.
    async fn episodic_decider(
        &self,
        function: &str,
        payload: &Value,
    ) -> Result<Value, InvokeError> {
        let slow = {
            let mut w = lock(&self.world);
            if let Some(e) = self.decider_unreachable(&mut w, function) {
                return Err(e);
            }
            w.asks.push(crate::episodes::attempt_asked(payload));
            let slow = self.faulty && w.episode_rng.gen_bool(0.05);
            slow.then(|| w.episode_rng.gen_range(30..=240))
        };
        if let Some(seconds) = slow {
            lock(&self.world).exercise("episodic deciders slow");
            sleep(&self.world, seconds).await;
        }
        let mut w = lock(&self.world);
        let name = payload[attr::WORKFLOW_NAME].as_str().unwrap_or("");
        let spec = w.episodes.get(name).cloned().expect("an episodic workflow");
        let now = w.now;
        let w = &mut *w;
        let streams = crate::episodes::Streams {
            episode: &mut w.episode_rng,
            extra: &mut w.episode_extra_rng,
        };
        let (answer, given) =
            crate::episodes::answer(&spec, payload, streams, now).map_err(|message| {
                InvokeError::Rejected {
                    function: function.into(),
                    message,
                }
            })?;
        w.log(format!(
            "decider answers {}: {}",
            given.decision_id, given.decisions
        ));
        w.given.push(given);
        Ok(answer)
    }

    /// SQS's delivery of a wake-up sent with `delay` seconds: at its time
    /// or a second late, one in twenty lost (the sender's call failed
    /// after all, or the message aged out), one in thirty twice (SQS
    /// delivers at least once). Drawn from the node stream
    /// ([`Shared::node_rng`]), so seeds without wake-ups draw as before.
    fn queue_wake_up(&self, wake: &WakeUp, delay: i64) {
        let mut w = lock(&self.world);
        // Drawn whenever an invocation may be faulty (so the faulty phase
        // draws as before), lost only while faults are on: once they stop,
        // a wake-up arrives, or the timer lateness check (issue 42 C.2)
        // would judge a fault's delay as the engine's.
        let lost = self.faulty && w.node_rng.gen_bool(0.05) && w.faults != Faults::NONE;
        if lost {
            w.exercise("wake-ups lost");
            return;
        }
        let copies = if self.faulty && w.node_rng.gen_bool(1.0 / 30.0) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = w.now + delay + w.node_rng.gen_range(0..=1);
            w.wake_ups.push((at, wake.clone()));
        }
        w.exercise("wake-ups sent");
    }
}

/// Sleep until the world's clock reaches `until`.
pub struct Sleep {
    world: World,
    until: i64,
}

/// Sleep `seconds` of world time.
pub fn sleep(world: &World, seconds: i64) -> Sleep {
    let until = lock(world).now + seconds;
    Sleep {
        world: world.clone(),
        until,
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = lock(&self.world);
        if w.now >= self.until {
            Poll::Ready(())
        } else {
            let until = self.until;
            w.timers.push((until, cx.waker().clone()));
            Poll::Pending
        }
    }
}
