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

use crate::shared::{lock, sleep, World};

/// A report row an actor wrote: for the "a report decides" check.
#[derive(Debug, Clone)]
pub struct Report {
    /// Row id.
    pub event_id: String,
    /// Activity.
    pub activity_exec_id: String,
    /// Attempt it was for.
    pub attempt: u32,
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
    pub launcher: crate::shared::SimLauncher,
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
    let b = {
        let mut w = lock(&world);
        let hb = payload.heartbeat_timeout_seconds.unwrap_or(120);
        let r = &mut w.rng;
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
    };
    let full =
        Engine::with_environment(store.clone(), launcher, config.clone(), engine_env.clone());
    let engine = Engine::with_environment(store.clone(), (), config, engine_env);
    let helper = Activity::with_engine(payload.clone(), engine.clone());
    if b.dies_before_running {
        return;
    }
    let report = |transition: &'static str, output: Option<Value>, error: Option<String>| {
        let helper = &helper;
        let payload = &payload;
        let store = &store;
        let engine = &engine;
        let full = &full;
        let world = &world;
        let reports = &reports;
        async move {
            let t: whimbrel_core::contract::Transition = transition.parse().expect("known");
            let id = if b.tokenless || b.in_process {
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
                    // The Full Logic API duty: apply it until it applies or
                    // is rejected (nothing redelivers a manual row).
                    for _ in 0..30 {
                        match full.apply_event(&ev).await {
                            Err(whimbrel_core::engine::EngineError::Retry(_)) => {
                                sleep(world, 1).await
                            }
                            _ => break,
                        }
                    }
                }
                written
            } else {
                helper.report(t, output, error).await.ok()
            };
            let Some(event_id) = id else {
                // The put failed: like `activity.running()?` in a Lambda,
                // the invocation ends with an error.
                return false;
            };
            {
                let at = lock(world).now;
                reports.lock().unwrap().push(Report {
                    event_id,
                    activity_exec_id: payload.activity_exec_id.clone(),
                    attempt: payload.attempt,
                    transition: transition.into(),
                    at,
                });
            }
            true
        }
    };
    if b.prepares {
        if !report("PREPARING", None, None).await {
            return;
        }
        sleep(&world, 5).await;
    }
    if !claimed && !report("RUNNING", None, None).await {
        return;
    }
    let interval = payload
        .heartbeat_timeout_seconds
        .map_or(b.work_seconds.max(1), |t| (t / 3).max(1));
    let mut worked = 0;
    while worked < b.work_seconds {
        sleep(&world, interval).await;
        worked += interval;
        if payload.heartbeat_timeout_seconds.is_none() {
            continue;
        }
        let state = if b.raw_heartbeat {
            raw_heartbeat(&store, &engine, &payload).await;
            None
        } else {
            match helper.heartbeat().await {
                Ok(s) => Some(s),
                Err(_) => return, // a newer attempt replaced this one
            }
        };
        match state {
            Some(ActivityState::CancelledRunning) => {
                report("CANCEL", None, Some("cancel acknowledged".into())).await;
                return;
            }
            Some(s) if s.is_terminal() => return,
            _ => {}
        }
    }
    if b.late_seconds > 0 {
        sleep(&world, b.late_seconds).await;
    }
    let output = output_of(
        &payload.activity_name,
        &payload.input,
        &serde_json::to_value(&payload.prerequisites).unwrap_or_default(),
    );
    for _ in 0..if b.twice { 2 } else { 1 } {
        match b.ending {
            Ending::Complete => {
                report("COMPLETED", Some(output.clone()), None).await;
            }
            Ending::Fail => {
                // Error names the retry policies tell apart.
                let name = if payload.attempt.is_multiple_of(2) {
                    "Fatal"
                } else {
                    "Busy"
                };
                report(
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
    let _ = store.update(req, false).await;
}
