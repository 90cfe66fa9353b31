//! Activities and users as actors of the simulation. An activity reports
//! RUNNING, heartbeats (through the helper with its token, or by the raw
//! `heartbeat_time_epoch` update an existing client makes), and ends
//! COMPLETED or FAILED; or it dies silently, reports late, reports twice,
//! or keeps reporting after a newer attempt replaced it. Its output is a
//! pure function of what it received, so the checker can tell whether
//! prerequisites' outputs reached it intact.

use std::sync::{Arc, Mutex};
use whimbrel_core::attr;

use rand::Rng;
use serde_json::{json, Value};
use whimbrel_core::activity::Activity;
use whimbrel_core::contract::ActivityState;
use whimbrel_core::engine::{Engine, EngineConfig};
use whimbrel_core::model::ActivityEvent;
use whimbrel_core::plan::LaunchPayload;
use whimbrel_core::store::{n, s, Cond, Store, UpdateRequest};

use crate::shared::{lock, sleep, SimEnv, SimLauncher, World};

/// A report row an actor wrote: for the "a report decides" check.
#[derive(Debug, Clone)]
pub struct Report {
    /// Row id.
    pub event_id: String,
    /// Activity.
    pub activity_exec_id: String,
    /// Attempt it was for.
    pub attempt: u32,
    /// The launch of that attempt it came from, and whether it carried
    /// that launch's token: a tokened report of an earlier launch is
    /// refused by fencing, rightly.
    pub launch: (u32, bool),
    /// Transition name.
    pub transition: String,
    /// World time it was written.
    pub at: i64,
}

/// Reports written by actors.
pub type Reports = Arc<Mutex<Vec<Report>>>;

/// The output an activity computes from its launch payload: its name,
/// its input and its prerequisites' outputs, so the checker sees that each
/// reached it (outputs of multi-level plans pass the activity item's
/// inline size, and go by their event rows).
pub fn output_of(payload_name: &str, input: &Value, prerequisites: &Value) -> Value {
    json!({"by": payload_name, "input": input, "from": prerequisites})
}

/// How one activity instance behaves, drawn from the seed.
#[derive(Debug, Clone)]
struct Behaviour {
    /// A Full Logic API caller: it writes `manual` rows and applies them
    /// in-process, retrying until applied or rejected.
    in_process: bool,
    tokenless: bool,
    dies_before_running: bool,
    prepares: bool,
    raw_heartbeat: bool,
    work_seconds: i64,
    ending: Ending,
    twice: bool,
    late_seconds: i64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ending {
    Complete,
    Fail,
    Die,
}

/// What an activity invocation runs on: the world, its own store (with
/// its crash point), settings, clock, the reports log and the Lambda
/// service (for in-process callers).
pub struct ActorCtx {
    /// The world.
    pub world: World,
    /// The invocation's store.
    pub store: Store,
    /// Engine settings.
    pub config: EngineConfig,
    /// Its clock (with skew) and tokens.
    pub env: Arc<dyn whimbrel_core::engine::Environment>,
    /// Where written reports are logged.
    pub reports: Reports,
    /// The Lambda service.
    pub launcher: SimLauncher,
}

/// Run one delivered invocation of an activity function, or (`claimed`)
/// a task a worker claimed: already RUNNING, so it reports no PREPARING
/// or RUNNING.
pub async fn activity(ctx: ActorCtx, payload: LaunchPayload, require_tokens: bool, claimed: bool) {
    let ActorCtx {
        world,
        store,
        config,
        env: engine_env,
        reports,
        launcher,
    } = ctx;
    let behaviour = {
        let mut w = lock(&world);
        let hb = payload.heartbeat_timeout_seconds.unwrap_or(120);
        Behaviour::draw(&mut w.rng, hb, require_tokens, claimed)
    };
    // A process that applies the contract in-process is the engine: the
    // times it writes (start, history, deadlines) are the engine's, so its
    // clock must be synced as the engine functions' are (docs/design.md
    // § 3.10). Only what clients write (heartbeat times) may be minutes off.
    let skew = engine_env.now().epoch - lock(&world).now;
    let synced = Arc::new(SimEnv {
        world: world.clone(),
        skew: skew.clamp(-2, 2),
    });
    let full = Engine::with_environment(store.clone(), launcher, config.clone(), synced);
    let engine = Engine::with_environment(store.clone(), (), config, engine_env);
    let helper = Activity::with_engine(payload.clone(), engine.clone());
    if behaviour.dies_before_running {
        return;
    }
    let instance = Instance {
        payload,
        behaviour,
        store,
        engine,
        full,
        helper,
        world,
        reports,
    };
    if !instance.start(claimed).await {
        return;
    }
    // From here its work runs, whatever the engine thinks of it (C.4).
    let target = match claimed {
        true => RUNS_ON_TASK_LIST,
        false => RUNS_ON_LAMBDA,
    };
    let p = &instance.payload;
    let id = format!("{} attempt {}", p.activity_exec_id, p.attempt);
    let running = crate::shared::Running::new(&instance.world, target, id);
    if !instance.work().await {
        return;
    }
    // Its work is done: what is left is its report.
    drop(running);
    instance.end().await;
}

/// The target an instance delivered by Lambda runs on
/// ([`crate::shared::Shared::running`]).
pub const RUNS_ON_LAMBDA: &str = "lambda:sim-activity";

/// The target an instance a worker claimed runs on.
pub const RUNS_ON_TASK_LIST: &str = "task_list:sim-list";

impl Behaviour {
    /// Draw one instance's behaviour from the seed's generator, given its
    /// heartbeat timeout `hb`. The draws happen in the order of the fields,
    /// some only when a flag allows them (tokenless without required
    /// tokens, PREPARING when not claimed): that order is part of every
    /// schedule.
    fn draw(r: &mut impl Rng, hb: i64, require_tokens: bool, claimed: bool) -> Self {
        Behaviour {
            in_process: r.gen_bool(0.1),
            tokenless: !require_tokens && r.gen_bool(0.4),
            dies_before_running: r.gen_bool(0.05),
            prepares: !claimed && r.gen_bool(0.1),
            raw_heartbeat: r.gen_bool(0.4),
            work_seconds: r.gen_range(0..(hb * 2).max(10)),
            ending: match r.gen_range(0..100) {
                0..=79 => Ending::Complete,
                80..=94 => Ending::Fail,
                _ => Ending::Die,
            },
            twice: r.gen_bool(0.05),
            late_seconds: if r.gen_bool(0.1) {
                r.gen_range(0..400)
            } else {
                0
            },
        }
    }
}

/// One running activity instance: what it was launched with, how it
/// behaves, and what it reports through (the helper, or its own event rows
/// on the store, applied in-process by the Full Logic engine `full`).
struct Instance {
    payload: LaunchPayload,
    behaviour: Behaviour,
    store: Store,
    engine: Engine<()>,
    full: Engine<SimLauncher>,
    helper: Activity,
    world: World,
    reports: Reports,
}

impl Instance {
    /// Report PREPARING (when it prepares) and RUNNING (unless a worker
    /// claimed it, already RUNNING). False when a report could not be
    /// written: the invocation ends there.
    async fn start(&self, claimed: bool) -> bool {
        if self.behaviour.prepares {
            if !self.report("PREPARING", None, None).await {
                return false;
            }
            sleep(&self.world, 5).await;
        }
        claimed || self.report("RUNNING", None, None).await
    }

    /// Work for the drawn time, heartbeating every third of the heartbeat
    /// timeout. False when the work stops early: a newer attempt replaced
    /// this one, it was cancelled (it acknowledges) or it already ended.
    async fn work(&self) -> bool {
        let b = &self.behaviour;
        let payload = &self.payload;
        let interval = payload
            .heartbeat_timeout_seconds
            .map_or(b.work_seconds.max(1), |t| (t / 3).max(1));
        let mut worked = 0;
        while worked < b.work_seconds {
            sleep(&self.world, interval).await;
            worked += interval;
            if payload.heartbeat_timeout_seconds.is_none() {
                continue;
            }
            let state = if b.raw_heartbeat {
                raw_heartbeat(&self.store, &self.engine, payload).await;
                None
            } else {
                match self.helper.heartbeat().await {
                    Ok(s) => Some(s),
                    Err(_) => return false, // a newer attempt replaced this one
                }
            };
            match state {
                Some(ActivityState::CancelledRunning) => {
                    self.report("CANCEL", None, Some("cancel acknowledged".into()))
                        .await;
                    return false;
                }
                Some(s) if s.is_terminal() => return false,
                _ => {}
            }
        }
        true
    }

    /// The ending, after any lateness: COMPLETED with the output computed
    /// from the payload, or FAILED with an error name the retry policies
    /// tell apart (both reported twice when it reports twice), or nothing
    /// when it dies.
    async fn end(&self) {
        let b = &self.behaviour;
        let payload = &self.payload;
        if b.late_seconds > 0 {
            sleep(&self.world, b.late_seconds).await;
        }
        let output = output_of(
            &payload.activity_name,
            &payload.input,
            &serde_json::to_value(&payload.prerequisites).unwrap_or_default(),
        );
        for _ in 0..if b.twice { 2 } else { 1 } {
            match b.ending {
                Ending::Complete => {
                    self.report("COMPLETED", Some(output.clone()), None).await;
                }
                Ending::Fail => {
                    // Error names the retry policies tell apart.
                    let name = if payload.attempt.is_multiple_of(2) {
                        "Fatal"
                    } else {
                        "Busy"
                    };
                    self.report(
                        "FAILED",
                        None,
                        Some(format!(
                            "{name}: {} failed on purpose",
                            payload.activity_name
                        )),
                    )
                    .await;
                }
                Ending::Die => return,
            }
        }
    }

    /// Report `transition`: through the helper, or (tokenless and
    /// in-process callers) by writing the event row itself; a written
    /// report is logged for the checker. False when the write failed: like
    /// `activity.running()?` in a Lambda, the invocation ends with an error.
    async fn report(
        &self,
        transition: &'static str,
        output: Option<Value>,
        error: Option<String>,
    ) -> bool {
        let t: whimbrel_core::contract::Transition = transition.parse().expect("known");
        let b = &self.behaviour;
        let id = if b.tokenless || b.in_process {
            self.write_event_row(transition, output, error).await
        } else {
            self.helper.report(t, output, error).await.ok()
        };
        let Some(event_id) = id else {
            return false;
        };
        self.log_report(event_id, transition);
        true
    }

    /// Write the event row of `transition` as a client without the helper
    /// does (without a token when tokenless; `manual` when in-process, and
    /// then applied here). The row id when the put succeeded.
    async fn write_event_row(
        &self,
        transition: &'static str,
        output: Option<Value>,
        error: Option<String>,
    ) -> Option<String> {
        let (b, payload, store, engine) =
            (&self.behaviour, &self.payload, &self.store, &self.engine);
        let now = engine.now();
        let ev = ActivityEvent {
            manual: b.in_process.then_some(true),
            output,
            error,
            attempt: (!b.tokenless).then_some(payload.attempt),
            attempt_token: if b.tokenless {
                None
            } else {
                payload.attempt_token.clone()
            },
            ..ActivityEvent::new(
                &payload.activity_exec_id,
                transition,
                now,
                "sim client",
                &engine.new_token(),
            )
        };
        let written = store
            .put_new(
                &store.tables().activity_event(),
                attr::ACTIVITY_EVENT_ID,
                &ev,
            )
            .await
            .ok()
            .map(|_| ev.activity_event_id.clone());
        if written.is_some() && b.in_process {
            self.apply_in_process(&ev).await;
        }
        written
    }

    /// The Full Logic API duty: apply a written `manual` row until it
    /// applies or is rejected (nothing redelivers a manual row), a second
    /// apart, at most 30 times.
    async fn apply_in_process(&self, ev: &ActivityEvent) {
        for _ in 0..30 {
            match self.full.apply_event(ev).await {
                Err(whimbrel_core::engine::EngineError::Retry(_)) => sleep(&self.world, 1).await,
                _ => break,
            }
        }
    }

    /// Log a written report row, at world time, for the checker's "a
    /// report decides" check.
    fn log_report(&self, event_id: String, transition: &str) {
        let at = lock(&self.world).now;
        self.reports.lock().unwrap().push(Report {
            event_id,
            activity_exec_id: self.payload.activity_exec_id.clone(),
            attempt: self.payload.attempt,
            launch: (
                self.payload.launch,
                !self.behaviour.tokenless && self.payload.attempt_token.is_some(),
            ),
            transition: transition.into(),
            at,
        });
    }
}

/// The heartbeat an existing client makes: an UpdateItem that only SETs
/// `heartbeat_time_epoch`, conditional on `heartbeat_enabled = true`.
async fn raw_heartbeat(store: &Store, engine: &Engine<()>, p: &LaunchPayload) {
    let key = std::collections::HashMap::from([
        (attr::ACTIVITY_EXEC_ID.to_string(), s(&p.activity_exec_id)),
        (attr::WORKFLOW_EXEC_ID.to_string(), s(&p.workflow_exec_id)),
    ]);
    let req = UpdateRequest::new(store.tables().activity_exec(), key)
        .when(Cond::eq(
            attr::HEARTBEAT_ENABLED,
            whimbrel_core::store::Value::Bool(true),
        ))
        .set(attr::HEARTBEAT_TIME_EPOCH, n(engine.now().epoch));
    let _ = store.update(req).await;
}
