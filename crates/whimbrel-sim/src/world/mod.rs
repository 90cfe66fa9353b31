//! One simulated schedule: the tables (in-memory DynamoDB model), their
//! streams and event source mappings, the heartbeat schedule, the Lambda
//! service, activities, users and hostile rows, all driven by one seed.
//!
//! Phase 1 runs with faults; phase 2 stops the faults and lets the clock
//! run until every workflow ends (liveness). Safety invariants are checked
//! after every step, liveness at the end (see [`crate::check`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rand::Rng;
use whimbrel_core::engine::{Engine, EngineConfig};
use whimbrel_core::handlers::{BatchSummary, Outcome};
use whimbrel_core::store::memory::{MemoryBackend, StreamRecord};
use whimbrel_core::store::{Item, Store, Tables};

use crate::actors::Reports;
use crate::check::Checker;
use crate::exec::{Executor, FunctionTimeout, Invocation, Polled};
use crate::shared::{lock, Faults, Shared, SimBackend, SimEnv, SimLauncher, World};
use crate::template::EsmSettings;

mod approvers;
mod background;
mod children;
mod episodes;
mod esm;
mod hostile;
mod lambda;
mod redrive;
mod scenario;
mod schedule;
mod signals;
mod target_limits;
mod workflow_redrive;
pub use episodes::{EPISODIC_CHILD, NUDGE};
use esm::{lock_now, stream_tables, MAIN_SHARDS, STREAM_SHARDS};
pub use scenario::{SIGNAL_NAMES, TASK_LIST};

/// What a schedule is made of (the shrinker lowers these).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Workflows started.
    pub workflows: usize,
    /// Largest plan, activities.
    pub max_activities: usize,
    /// Fault level (0 = none, 1 = default mix).
    pub fault_level: f64,
    /// Steps of the faulty phase.
    pub fault_steps: usize,
    /// Users cancel workflows.
    pub cancels: bool,
    /// Hostile rows arrive.
    pub hostile: bool,
    /// Users redrive workflows (`workflow_redrive.rs`).
    pub redrives: bool,
    /// Operators limit targets' concurrency (`target_limits.rs`).
    pub target_limits: bool,
    /// Episodic workflows run beside the planned ones (`episodes.rs`).
    pub episodes: bool,
    /// Clients' clocks may be off by minutes
    /// ([`crate::shared::Faults::client_skew`]). On by default
    /// (`tests/it/clocks.rs`); `--trusted-client-clocks` turns it off.
    pub client_clock_minutes: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            workflows: 3,
            max_activities: 6,
            fault_level: 1.0,
            fault_steps: 1500,
            cancels: true,
            hostile: true,
            redrives: true,
            target_limits: true,
            episodes: true,
            client_clock_minutes: true,
        }
    }
}

/// A run that ended with every invariant holding.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Executor steps and world actions.
    pub steps: u64,
    /// Simulated seconds.
    pub sim_seconds: i64,
    /// Activities created.
    pub activities: usize,
    /// Stream batches delivered.
    pub batches: u64,
    /// Invocations that crashed.
    pub crashes: u64,
    /// Records sent to the on-failure destination.
    pub on_failure: u64,
    /// On-failure messages the redrive function applied.
    pub redriven: u64,
    /// On-failure messages moved to the dead-letter queue (their rows are
    /// excused from liveness).
    pub dead_lettered: u64,
    /// Requests whose record the mapping gave up on before any exec
    /// existed (they need the on-failure record replayed).
    pub requests_given_up: u64,
    /// Activities by the state they ended in (name → count), so a run
    /// shows that every outcome was exercised.
    pub ended: std::collections::BTreeMap<String, u64>,
    /// Monitor actions seen in the trace: timeouts, relaunches, reports
    /// applied from the event table.
    pub relaunches: u64,
    /// Retries, worker claims and the new timeouts seen at the end
    /// ([`crate::check::Checker::features`]).
    pub features: std::collections::BTreeMap<String, u64>,
    /// How often each injected fault happened (name → count; see
    /// [`crate::shared::Shared::exercise`]), so a run shows every fault
    /// was exercised.
    pub faults: std::collections::BTreeMap<String, u64>,
}

/// A run that broke an invariant.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The violations.
    pub violations: Vec<String>,
    /// The last lines of the trace.
    pub trace: Vec<String>,
}

const START: i64 = 1_795_306_411;
/// Longest usual GSI lag, seconds, below the engine's report grace
/// (longer lag is a fault: `Faults::gsi_stall`).
pub(crate) const GSI_LAG_SECONDS: i64 = 5;
/// Longest a schedule may run in simulated time before liveness fails,
/// besides three relaunch windows (a launch lost at each of an attempt's
/// launches waits one each).
const LIVENESS_LIMIT: i64 = 12 * 3600;

struct Shard {
    table: String,
    records: Vec<(StreamRecord, i64)>,
    cursor: usize,
    inflight: Option<(u64, usize)>,
    attempts: u32,
    limit: usize,
    /// Retries back off: no delivery before this time.
    not_before: i64,
    /// Until then every invocation for this shard fails (a broken deploy,
    /// a throttled function): long enough for the mapping to give up.
    poisoned_until: i64,
}

/// Whose clock an invocation runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clock {
    /// An engine function's: Lambda hosts keep time with the Amazon Time
    /// Sync Service (NTP), so it is off by two seconds at most.
    Engine,
    /// A client's (an activity, a worker, a user): off by two seconds, or,
    /// with [`crate::shared::Faults::client_skew`], by one to five minutes
    /// either way (a host without NTP; nothing in AWS keeps it in time).
    Client,
}

impl Clock {
    /// Draw the skew of one invocation's clock, seconds; a client's off
    /// by minutes is counted.
    fn skew(self, w: &mut Shared) -> i64 {
        let p = w.faults.client_skew;
        if self == Clock::Client && w.chance(p) {
            w.exercise("client clocks off by minutes");
            let minutes = w.rng.gen_range(60..=300);
            if w.rng.gen_bool(0.5) {
                minutes
            } else {
                -minutes
            }
        } else {
            w.rng.gen_range(-2..=2)
        }
    }
}

/// Per-task results of stream batch invocations.
type Results = Arc<Mutex<HashMap<u64, Result<BatchSummary, String>>>>;

/// The simulated world of one schedule.
pub struct Sim {
    world: World,
    mem: Arc<MemoryBackend>,
    tables: Tables,
    cfg: EngineConfig,
    esm: EsmSettings,
    exec: Executor,
    shards: Vec<Shard>,
    results: Results,
    next_tick: i64,
    /// Schedule ticks still to miss in a run of missed ticks.
    ticks_to_skip: u32,
    /// NOT_STARTED steps already checked against the async queue.
    not_started: HashSet<String>,
    /// When a worker polls the task list next.
    next_poll: i64,
    /// The GSIs' lag (`background.rs`).
    index_lag: background::IndexLag,
    reports: Reports,
    /// Row ids written as hostile (must be rejected).
    pub hostile: HashSet<String>,
    /// Row ids given an outcome or marked hostile since the last safety
    /// check: only their outcomes can break the outcome invariants
    /// ([`Sim::outcome_violations`]) that held at the last check.
    touched: Vec<String>,
    /// Row ids of reports a hostile write overwrote, and when it first
    /// did, world time (`hostile.rs`).
    pub overwritten: HashMap<String, i64>,
    /// Users' cancel requests by row id (`check/cancels.rs`).
    pub cancels: HashMap<String, crate::check::cancels::CancelRequest>,
    /// Stream outcomes per row id.
    pub outcomes: HashMap<String, Vec<Outcome>>,
    /// Ids of the rows of `whimbrel_workflow_request` seen on its stream
    /// (users' and the engine's), whose outcomes the trace shows.
    request_rows: HashSet<String>,
    /// Row ids of on-failure messages that moved to the dead-letter
    /// queue: the redrive function could not apply them.
    pub lost: HashSet<String>,
    /// The on-failure queue and the redrive function (`redrive.rs`).
    failures: redrive::FailureQueue,
    require_tokens: HashMap<String, bool>,
    /// The users who send signals, and what they sent (`signals.rs`).
    signals: signals::Signals,
    /// The users who redrive workflows, and what they sent
    /// (`workflow_redrive.rs`).
    redrives: workflow_redrive::Redrives,
    stats: Stats,
    params: Params,
    checker: Checker,
    /// Steps at which more instances ran on a target than its limit let
    /// hold slots, and the most past it (issue 42 C.4; [`Sim::count_running`]).
    running_over: (u64, i64),
}

/// The engine settings of a schedule; odd seeds also record launch times
/// (an optional write racing every other write of the activity).
fn settings(seed: u64) -> EngineConfig {
    EngineConfig {
        table_prefix: "sim_".into(),
        default_heartbeat_timeout_seconds: 60,
        relaunch_after_seconds: 120,
        launch_event_age_seconds: None,
        max_launch_attempts: 3,
        default_start_to_close_seconds: 900,
        cancel_grace_seconds: 120,
        report_grace_seconds: 10,
        // The monitor's look-ahead (design.md § 9), one schedule in two,
        // independently of the settings below: a tick sleeps to each
        // marker due within the minute.
        monitor_lookahead_seconds: if seed / 81 % 2 == 1 { 60 } else { 0 },
        settle_grace_seconds: 60,
        start_retry_seconds: 60,
        max_start_attempts: 5,
        default_schedule_to_start_seconds: None,
        default_schedule_to_close_seconds: None,
        require_tokens: false,
        concurrency: 4,
        // DynamoDB TTL deletes our writers' rows four hours after they
        // were written, one schedule in five (above the simulation's
        // workflows but the longest, as docs/tables.md asks of
        // `RowRetentionDays`; TTL's deletes: `Sim::advance`).
        row_retention_seconds: (seed % 5 == 2).then_some(4 * 3600),
        record_launches: seed % 2 == 1,
        // Wide joins (release through join groups) on two seeds in three:
        // groups of one, of two, or the default (joins here are narrower).
        join_group_size: [1, 2, whimbrel_core::plan::JOIN_GROUP_SIZE][(seed % 3) as usize],
        // Wide fan-outs (dependents derived from the plan) on two seeds in
        // three, independently of the joins.
        fan_out_list_max: [whimbrel_core::plan::FAN_OUT_LIST_MAX, 1, 0][(seed / 3 % 3) as usize],
        launch_targets: Default::default(),
        // Plans stored in parts, one schedule in three (independently of
        // the join groups and fan-outs above): the simulation's
        // plans are a few KB, so parts of at most 400 bytes of activities.
        plan_parting: if seed / 27 % 3 == 1 {
            whimbrel_core::engine::PlanParting {
                whole_max: 1_000,
                part_max: 400,
            }
        } else {
            Default::default()
        },
        decisions: Default::default(),
        // A workflow tree's budget (issue 42 B.6), one schedule in seven
        // so small that its children past the second fail at their start.
        max_tree_executions: if seed % 7 == 3 { 2 } else { 100_000 },
    }
}

impl Sim {
    /// A world for `seed`.
    pub fn new(seed: u64, params: Params) -> Self {
        let mut cfg = settings(seed);
        let tables = Tables::new(cfg.table_prefix.clone());
        let mem = Arc::new(MemoryBackend::new(&tables, true));
        let esm = EsmSettings::from_template();
        let shards = stream_tables(&tables)
            .into_iter()
            .flat_map(|t| (0..STREAM_SHARDS).map(move |_| t.clone()))
            .map(|table| Shard {
                table,
                records: vec![],
                cursor: 0,
                inflight: None,
                attempts: 0,
                limit: esm.batch_size,
                not_before: 0,
                poisoned_until: 0,
            })
            .collect();
        let mut shared = Shared::new(seed, START);
        // The stack's LaunchEventAgeSeconds, which the template gives both
        // the engine (its relaunch window) and the activities (their
        // maximum event age): its default, Lambda's 6 hours, one schedule
        // in four; else an operator who lowered it to a minute.
        let age = if seed / 9 % 4 == 3 {
            crate::template::activity_max_event_age()
        } else {
            60
        };
        shared.max_event_age = age;
        cfg.launch_event_age_seconds = Some(age);
        Sim {
            world: Arc::new(Mutex::new(shared)),
            mem,
            tables,
            cfg,
            esm,
            exec: Executor::default(),
            shards,
            results: Arc::default(),
            next_tick: START + 60,
            ticks_to_skip: 0,
            not_started: HashSet::new(),
            next_poll: START + 7,
            index_lag: background::IndexLag::new(START),
            reports: Arc::default(),
            hostile: HashSet::new(),
            touched: vec![],
            overwritten: HashMap::new(),
            outcomes: HashMap::new(),
            request_rows: HashSet::new(),
            cancels: HashMap::new(),
            lost: HashSet::new(),
            failures: redrive::FailureQueue::new(crate::template::redrive_settings()),
            require_tokens: HashMap::new(),
            signals: signals::Signals::default(),
            redrives: workflow_redrive::Redrives::default(),
            stats: Stats::default(),
            params,
            checker: Checker::default(),
            running_over: (0, 0),
        }
    }

    fn rng<T>(&self, f: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.world).rng)
    }

    fn log(&self, line: String) {
        lock(&self.world).log(line);
    }

    /// A store and clock for one invocation (its own crash point and
    /// skew; see [`Clock`]); an engine `function` (its binary's name) is
    /// stopped at its timeout in `template.yaml`.
    fn invocation(
        &self,
        faulty: bool,
        clock: Clock,
        function: Option<&str>,
    ) -> (Arc<Invocation>, Store, Arc<SimEnv>) {
        let (crash_after, skew) = {
            let mut w = lock(&self.world);
            let p = w.faults.crash;
            let crash = faulty && w.chance(p);
            // Any store call of the invocation, late ones included (a monitor tick
            // or a large batch makes many).
            let k = w.rng.gen_range(1..=48);
            (crash.then_some(k), clock.skew(&mut w))
        };
        let timeout = function.map(|f| self.function_timeout(f, faulty));
        let invocation = Arc::new(Invocation {
            crash_after,
            faulty,
            timeout,
            ..Invocation::default()
        });
        let backend = SimBackend::new(self.mem.clone(), self.world.clone(), invocation.clone());
        let store = Store::with_backend(Arc::new(backend), self.tables.clone());
        let env = Arc::new(SimEnv {
            world: self.world.clone(),
            skew,
        });
        (invocation, store, env)
    }

    /// When an invocation of the engine function `function` starting now
    /// is stopped, and whether (under faults) one of its store calls
    /// stalls: for up to twice the timeout, so it is stopped one time in
    /// two.
    fn function_timeout(&self, function: &str, faulty: bool) -> FunctionTimeout {
        let timeout = crate::template::function_timeout(function);
        let mut w = lock(&self.world);
        let p = w.faults.function_timeout;
        let stall = (faulty && w.chance(p)).then(|| {
            w.exercise("engine function calls stalled");
            (w.rng.gen_range(1..=24), w.rng.gen_range(1..=2 * timeout))
        });
        FunctionTimeout {
            deadline: w.now + timeout,
            stall,
        }
    }

    fn engine(
        &self,
        faulty: bool,
        clock: Clock,
        function: Option<&str>,
    ) -> (Arc<Invocation>, Arc<Engine<SimLauncher>>) {
        let (inv, store, env) = self.invocation(faulty, clock, function);
        let launcher = SimLauncher {
            world: self.world.clone(),
            faulty,
        };
        (
            inv,
            Arc::new(Engine::with_environment(
                store,
                launcher,
                self.cfg.clone(),
                env,
            )),
        )
    }

    /// Put an item directly (set-up and hostile rows; not an invocation).
    fn put_raw(&self, table: &str, item: Item) {
        use futures::FutureExt;
        use whimbrel_core::store::Backend;
        let r = self
            .mem
            .put(table.to_string(), item, None)
            .now_or_never()
            .expect("the model answers at once");
        r.expect("set-up put");
    }

    fn advance(&mut self, seconds: i64) {
        let mut w = lock(&self.world);
        w.now += seconds;
        let now = w.now;
        let timers = std::mem::take(&mut w.timers);
        for (at, waker) in timers {
            if at <= now {
                waker.wake();
            } else {
                w.timers.push((at, waker));
            }
        }
        drop(w);
        self.background(now);
    }

    /// One world action; returns false when nothing at all can happen.
    fn act(&mut self) -> bool {
        self.stats.steps += 1;
        self.drain_streams();
        for i in 0..self.shards.len() {
            self.finish_batch(i);
        }
        self.poll_failure_queue();
        let now = lock(&self.world).now;
        if now >= self.next_poll {
            self.next_poll += 7;
            self.worker_poll();
        }
        self.scheduled_ticks();
        self.deliver_wake_ups();
        self.deliver_signal_batch();
        let choice = self.rng(|r| r.gen_range(0..100));
        match choice {
            0..=54 => {
                let pick = self.rng(|r| r.gen::<usize>());
                match self.exec.step(pick) {
                    Some(Polled::Crashed(id)) => self.log(format!("task {id} crashed")),
                    Some(_) => {}
                    None => self.advance(1),
                }
            }
            55..=69 => {
                let i = self.rng(|r| r.gen_range(0..MAIN_SHARDS));
                self.deliver(i);
            }
            70..=79 => self.deliver_invoke(),
            80..=94 => {
                if self.rng(|r| r.gen_bool(0.5)) {
                    self.propagate_some();
                } else {
                    let s = self.rng(|r| r.gen_range(0..3));
                    self.advance(s);
                }
            }
            _ => {}
        }
        true
    }

    fn quiet(&self) -> bool {
        self.exec.is_empty()
            && self.failures.is_idle()
            && lock(&self.world).invokes.is_empty()
            && self
                .shards
                .iter()
                .all(|s| s.inflight.is_none() && s.cursor >= s.records.len())
    }

    /// Run the schedule and check it: set up, draw the disruptions, run
    /// the faulty phase, then the quiet phase, then the end-of-run checks.
    pub fn run(mut self) -> Result<Stats, Failure> {
        self.setup();
        lock(&self.world).faults = self.fault_mix(Faults::at(self.params.fault_level));
        let mut disruptions = self.draw_disruptions();
        disruptions.episodic_starts = self.set_up_episodes();
        self.faulty_phase(&mut disruptions)?;
        self.quiet_phase()?;
        self.finish()
    }

    fn quiet_enough(&self) -> bool {
        lock(&self.world)
            .invokes
            .iter()
            .all(|i| i.not_before > lock_now(&self.world))
            && self
                .shards
                .iter()
                .all(|s| s.inflight.is_none() && s.cursor >= s.records.len())
    }

    /// Count what actually runs against each target's limit (issue 42
    /// C.4): the instances doing their work now ([`Shared::running`])
    /// against the most slots the limit lets be held (its limit, or the
    /// slots still held after it was lowered). Measured, not an
    /// invariant: an instance runs on after the engine ended its attempt
    /// (timed out while it still works, or delivered twice by Lambda)
    /// until it learns so from a heartbeat or its report.
    fn count_running(&mut self) {
        let running = lock(&self.world).running.clone();
        for l in crate::check::target_slots::limits(&self.mem, &self.tables) {
            let max = i64::from(l.max_concurrency.unwrap_or(0));
            let cap = max - l.slots_free.min(0);
            let runs = running.get(l.target.as_str()).cloned().unwrap_or_default();
            let over = runs.len() as i64 - cap;
            if over > 0 {
                if self.running_over.1 < over {
                    let line =
                        format!("{} run on {} (limit {max}): {runs:?}", runs.len(), l.target);
                    self.log(line);
                }
                self.running_over.0 += 1;
                self.running_over.1 = self.running_over.1.max(over);
            }
        }
    }

    fn check_safety(&mut self) -> Result<(), Failure> {
        self.count_running();
        let mut v = std::mem::take(&mut lock(&self.world).violations);
        let now = lock(&self.world).now;
        if let Some(read) = self.checker.changed(&self.mem, &self.tables) {
            v.extend(self.not_started_while_queued(&read.0));
            let w = lock(&self.world);
            v.extend(self.checker.episode_safety(
                &self.mem,
                &self.tables,
                &read.0,
                &w.given,
                &w.asks,
            ));
            drop(w);
            v.extend(
                self.checker
                    .safety_of(read, &self.mem, &self.tables, &self.cfg, Some(now)),
            );
        }
        v.extend(self.overdue_redrives(now));
        v.extend(self.outcome_violations());
        if v.is_empty() {
            Ok(())
        } else {
            Err(self.failure(v))
        }
    }

    /// Mark row `id` hostile: the engine must reject it with a reason.
    fn mark_hostile(&mut self, id: String) {
        self.touched.push(id.clone());
        self.hostile.insert(id);
    }

    /// The outcome invariants, on the rows touched since the last check
    /// (the others' held then and have not changed):
    /// - a hostile row is rejected with a reason (or retried), never
    ///   applied;
    /// - no row is rejected because the engine could not read an item of
    ///   `whimbrel_decision`, which only the engine writes (no hostile
    ///   write reaches it): a decision that cannot be asked for waits
    ///   until its timeout fails the workflow, which would pass for a slow
    ///   decider.
    fn outcome_violations(&mut self) -> Vec<String> {
        let shape = format!("{}: item does not match its type", self.tables.decision());
        let unreadable = |o: &&Outcome| matches!(o, Outcome::Rejected(r) if r.contains(&shape));
        let not_rejected = |o: &&Outcome| match o {
            Outcome::Rejected(r) => r.is_empty(),
            Outcome::Retry(_) => false,
            _ => true,
        };
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort();
        touched.dedup();
        let mut v = vec![];
        for id in touched {
            let outs = self.outcomes.get(&id).map_or(&[][..], Vec::as_slice);
            if let Some(o) = outs.iter().find(unreadable) {
                v.push(format!(
                    "row {id}: the engine could not read its own log: {o:?}"
                ));
            }
            if self.hostile.contains(&id) {
                if let Some(o) = outs.iter().find(not_rejected) {
                    v.push(format!(
                        "hostile row {id} was not rejected with a reason: {o:?}"
                    ));
                }
            }
        }
        v
    }

    /// The failure report: the violations and the trace's tail (main.rs
    /// says which variables widen it).
    fn failure(&self, violations: Vec<String>) -> Failure {
        if let Ok(text) = std::env::var("WHIMBREL_SIM_DEBUG") {
            for item in self.mem.items(&self.tables.activity_exec()) {
                let dump = format!("{item:?}");
                if dump.contains(&text) {
                    eprintln!("activity item at the failure: {dump}");
                }
            }
        }
        let w = lock(&self.world);
        let keep = if std::env::var("WHIMBREL_SIM_TRACE").is_ok() {
            usize::MAX
        } else {
            80
        };
        let from = w.trace.len().saturating_sub(keep);
        Failure {
            violations,
            trace: w.trace[from..].to_vec(),
        }
    }
}
