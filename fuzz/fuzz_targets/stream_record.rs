//! `stream_record`: arbitrary bytes as the payload of a DynamoDB stream
//! invocation, handed to the two stream handlers the Lambda functions run
//! (`handlers::activity_events`, `handlers::workflow_requests`), then one
//! heartbeat monitor tick, all over the in-memory DynamoDB model.
//!
//! The record parsing (`handlers::parse_record`) is private, so the target
//! drives the public entry the Lambda mains call, with no I/O: a fresh
//! `MemoryBackend` per input, holding a small world the engine itself built
//! (the `wordcount` workflow of `docs/shapes/plan.json`, with its `count-0`
//! activity in one of several states, chosen by the input's length), a
//! fixed clock and a launcher that accepts every launch.
//!
//! Must never panic. Checked after each input:
//! * a payload with a `Records` array is answered (`Ok`), every record
//!   counted exactly once in the summary, one batch item failure per
//!   record to retry; a payload without one is an invocation error;
//! * every item the engine left in the tables still reads as its type;
//! * a terminal activity or workflow never changes state (nor output);
//! * every activity in a non-terminal state after launch has a due marker,
//!   and `due_shard` is present exactly when `due_epoch` is;
//! * a workflow's end counters equal its activities' terminal states.

#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use whimbrel_core::contract::ActivityState;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{Engine, EngineConfig, Environment};
use whimbrel_core::handlers;
use whimbrel_core::launcher::{InvokeError, Launcher};
use whimbrel_core::model::{
    ActivityEvent, ActivityExec, ActivityExecDependency, WorkflowExec, WorkflowLambda,
    WorkflowRequest,
};
use whimbrel_core::plan::Plan;
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{Backend, Item, Store, Tables};

/// The engine's clock: a minute after the sample events' `when_epoch`.
const NOW: i64 = 1_795_306_481;
/// Every attempt token the engine hands out (seeds report with it).
const TOKEN: &str = "fuzz-attempt-token";
/// `events/README.md`: the request, and the activity its events are about.
const REQUEST_ID: &str = "wordcount::7d4e2b1a-5c3f-4e8d-9a6b-2f1e0c9d8b7a";
const COUNT_0: &str = "count-0::4861d566-4530-52ec-8ffe-fa4670ca6e96";
const WORDCOUNT_PLAN: &str = include_str!("../../docs/shapes/plan.json");
const IMAGES_PLAN: &str = include_str!("../../docs/shapes/plan-retries.json");

/// A fixed clock and one constant token: the same input always does the
/// same thing.
#[derive(Debug)]
struct FixedEnv;

impl Environment for FixedEnv {
    fn now(&self) -> Timestamp {
        Timestamp::from_epoch(NOW)
    }
    fn new_token(&self) -> String {
        TOKEN.into()
    }
}

/// Accepts every activity launch (as Lambda's 202 does). As a decider
/// (workflow `decided`), answers the request's `input.plan`, if any.
#[derive(Debug)]
struct FuzzLauncher;

impl Launcher for FuzzLauncher {
    async fn invoke_sync(&self, function: &str, payload: &Value) -> Result<Value, InvokeError> {
        payload
            .get("input")
            .and_then(|i| i.get("plan"))
            .cloned()
            .ok_or_else(|| InvokeError::FunctionError {
                function: function.into(),
                message: "no input.plan".into(),
            })
    }
    async fn invoke_async(&self, function: &str, _payload: &Value) -> Result<(), InvokeError> {
        match function {
            "unavailable" => Err(InvokeError::Unavailable {
                function: function.into(),
                message: "throttled".into(),
            }),
            "missing" => Err(InvokeError::Rejected {
                function: function.into(),
                message: "no such function".into(),
            }),
            _ => Ok(()),
        }
    }
}

fn tables() -> Tables {
    Tables::new("whimbrel_")
}

fn engine(backend: &Arc<MemoryBackend>) -> Engine<FuzzLauncher> {
    let store = Store::with_backend(backend.clone() as Arc<dyn Backend>, tables());
    Engine::with_environment(
        store,
        FuzzLauncher,
        EngineConfig::default(),
        Arc::new(FixedEnv),
    )
}

/// Every table's items.
type Snapshot = Vec<(String, Vec<Item>)>;

fn snapshot(backend: &MemoryBackend) -> Snapshot {
    let t = tables();
    [
        t.workflow_exec(),
        t.activity_exec(),
        t.activity_exec_dependency(),
        t.workflow_lambda(),
    ]
    .into_iter()
    .map(|name| {
        let items = backend.items(&name);
        (name, items)
    })
    .collect()
}

fn event(transition: &str, seed: &str, output: Option<Value>) -> ActivityEvent {
    let mut e = ActivityEvent::new(
        COUNT_0,
        transition,
        Timestamp::from_epoch(NOW),
        "setup",
        seed,
    );
    e.output = output;
    e.attempt = Some(1);
    e.attempt_token = Some(TOKEN.into());
    e
}

/// The worlds an input runs against, built by the engine itself (so each
/// is a state the engine can reach): `count-0` QUEUED (claimed), RUNNING,
/// PREPARING, CANCELLED_RUNNING, COMPLETED, FAILED, QUEUED with an early
/// COMPLETED parked, and no workflow at all (only the registrations).
fn worlds() -> &'static [Snapshot] {
    static WORLDS: OnceLock<Vec<Snapshot>> = OnceLock::new();
    WORLDS.get_or_init(|| {
        let steps: [&[(&str, Option<Value>)]; 8] = [
            &[],
            &[("RUNNING", None)],
            &[("PREPARING", None)],
            &[("RUNNING", None), ("CANCEL", None)],
            &[
                ("RUNNING", None),
                ("COMPLETED", Some(serde_json::json!({"words": 6}))),
            ],
            &[("RUNNING", None), ("FAILED", None)],
            &[("COMPLETED", Some(serde_json::json!({"words": 6})))],
            &[],
        ];
        steps
            .iter()
            .enumerate()
            .map(|(i, steps)| {
                let backend = Arc::new(MemoryBackend::new(&tables(), false));
                let e = engine(&backend);
                let t = tables();
                block_on(async {
                    for (name, plan) in [("wordcount", WORDCOUNT_PLAN), ("images", IMAGES_PLAN)] {
                        let plan: Plan = serde_json::from_str(plan).expect("sample plan");
                        let reg = WorkflowLambda {
                            workflow_name: name.into(),
                            lambda: None,
                            definition: Some(plan),
                            allow: None,
                        };
                        e.store().put(&t.workflow_lambda(), &reg).await.unwrap();
                    }
                    let decided = WorkflowLambda {
                        workflow_name: "decided".into(),
                        lambda: Some("decider".into()),
                        definition: None,
                        allow: None,
                    };
                    e.store().put(&t.workflow_lambda(), &decided).await.unwrap();
                    if i == 7 {
                        return;
                    }
                    let req = WorkflowRequest {
                        parent: None,
                        redrive_workflow_exec_id: None,
                        workflow_request_id: REQUEST_ID.into(),
                        workflow_name: "wordcount".into(),
                        when: None,
                        when_epoch: None,
                        source: Some("setup".into()),
                        manual: None,
                        input: None,
                        expires_at_epoch: None,
                        cancel_workflow_exec_id: None,
                        reason: None,
                    };
                    e.start_workflow(&req).await.expect("setup start");
                    for (n, (transition, output)) in steps.iter().enumerate() {
                        let ev = event(transition, &format!("setup-{i}-{n}"), output.clone());
                        e.apply_event(&ev).await.expect("setup event");
                    }
                });
                snapshot(&backend)
            })
            .collect()
    })
}

fn restore(world: &Snapshot) -> Arc<MemoryBackend> {
    let backend = Arc::new(MemoryBackend::new(&tables(), false));
    for (table, items) in world {
        for item in items {
            block_on(backend.put(table.clone(), item.clone(), None)).expect("restore");
        }
    }
    backend
}

fn decode<T: serde::de::DeserializeOwned>(table: &str, item: &Item) -> T {
    match serde_dynamo::from_item(item.clone()) {
        Ok(v) => v,
        Err(e) => panic!("{table}: an item the engine left does not read back: {e}\n{item:?}"),
    }
}

struct State {
    activities: HashMap<String, ActivityExec>,
    workflows: HashMap<String, WorkflowExec>,
}

fn read_state(backend: &MemoryBackend) -> State {
    let t = tables();
    let activities = backend
        .items(&t.activity_exec())
        .iter()
        .map(|i| decode::<ActivityExec>("activity_exec", i))
        .map(|a| (a.activity_exec_id.clone(), a))
        .collect();
    let workflows = backend
        .items(&t.workflow_exec())
        .iter()
        .map(|i| decode::<WorkflowExec>("workflow_exec", i))
        .map(|w| (w.workflow_exec_id.clone(), w))
        .collect();
    for i in backend.items(&t.activity_exec_dependency()) {
        let _: ActivityExecDependency = decode("activity_exec_dependency", &i);
    }
    State {
        activities,
        workflows,
    }
}

/// Invariants of the tables after `before` → `after`.
fn check(before: &State, after: &State, when: &str) {
    for (id, a) in &after.activities {
        if let Some(b) = before.activities.get(id) {
            if b.state.is_terminal() {
                assert_eq!(
                    (a.state, &a.outcome.output, a.timing.end_time_epoch),
                    (b.state, &b.outcome.output, b.timing.end_time_epoch),
                    "{when}: terminal activity {id} changed"
                );
            }
        }
        assert_eq!(
            a.timing.due_epoch.is_some(),
            a.timing.due_shard.is_some(),
            "{when}: {id}: due_epoch {:?} without due_shard {:?}",
            a.timing.due_epoch,
            a.timing.due_shard
        );
        let watched = match a.state {
            ActivityState::Preparing | ActivityState::Running | ActivityState::CancelledRunning => {
                true
            }
            ActivityState::Queued => a.runner.runs.task_list().is_none() || a.attempt.token_hash.is_some(),
            _ => false,
        };
        assert!(
            !watched || a.timing.due_epoch.is_some(),
            "{when}: activity {id} is {} after launch without a due marker",
            a.state
        );
    }
    for (id, w) in &after.workflows {
        if let Some(b) = before.workflows.get(id) {
            if b.state.is_terminal() {
                assert_eq!(w.state, b.state, "{when}: terminal workflow {id} changed");
            }
        }
        let mine: Vec<&ActivityExec> = after
            .activities
            .values()
            .filter(|a| a.workflow_exec_id == *id)
            .collect();
        let count =
            |f: fn(ActivityState) -> bool| mine.iter().filter(|a| f(a.state)).count() as u64;
        let counted = (w.completed_count, w.failed_count, w.cancelled_count);
        let actual = (
            count(|s| s == ActivityState::Completed),
            count(|s| s.is_failure()),
            count(|s| s == ActivityState::Cancelled),
        );
        assert_eq!(counted, actual, "{when}: workflow {id} end counters");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(payload) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let all = worlds();
    let world = &all[data.len() % all.len()];
    let backend = restore(world);
    let e = engine(&backend);
    let before = read_state(&backend);
    let records = payload
        .get("Records")
        .and_then(Value::as_array)
        .map(Vec::len);
    for (name, result) in [
        (
            "activity_events",
            block_on(handlers::activity_events(&e, &payload)),
        ),
        (
            "workflow_requests",
            block_on(handlers::workflow_requests(&e, &payload)),
        ),
    ] {
        match (records, result) {
            (Some(n), Ok((response, summary))) => {
                let s = &summary;
                assert_eq!(
                    s.applied + s.skipped + s.rejected + s.retried,
                    n as u64,
                    "{name}: records counted {s:?}"
                );
                assert_eq!(s.records.len(), n, "{name}: one report per record");
                assert!(s.parked <= s.applied, "{name}: {s:?}");
                assert_eq!(
                    response.batch_item_failures.len() as u64,
                    s.retried,
                    "{name}: one batch item failure per record to retry"
                );
                serde_json::to_string(&response).expect("response serializes");
            }
            (None, Err(_)) => {}
            (Some(_), Err(e)) => panic!("{name}: a Records array refused: {e}"),
            (None, Ok(_)) => panic!("{name}: a payload without Records answered"),
        }
    }
    let after = read_state(&backend);
    check(&before, &after, "after the batch");
    // Whatever the batch left, a monitor tick long after every deadline
    // (start-to-close is an hour) times out, relaunches or settles it.
    let _ = block_on(e.monitor_tick(NOW + 2 * 3600));
    let swept = read_state(&backend);
    check(&after, &swept, "after a monitor tick");
});
