//! Crashes found by the cargo-fuzz targets (`make fuzz`, `fuzz/README.md`),
//! each reproduced as a plain test. The minimized inputs are in
//! `fuzz/regressions/<target>/`.
//!
//! A crash not fixed yet is `#[ignore]`d with its reason, so `make test`
//! stays green while it is open; reproduce it with
//! `cargo test -p whimbrel-core --test it fuzz_regressions:: -- --ignored`,
//! and remove the `ignore` (and the target's `known_crash_*` guard) with the
//! fix.
//!
//! Crash 1: every deadline in `engine::deadline` adds saturating, so a
//! client's `heartbeat_time_epoch` near `i64::MAX` cannot overflow it.

use std::sync::Arc;

use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{decide, Engine, EngineConfig};
use whimbrel_core::model::{ActivityExec, WorkflowExec};
use whimbrel_core::plan::Plan;
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{self, Backend, Store, Tables};

const START: i64 = 1_795_306_411;

fn workflow(plan: &Plan) -> WorkflowExec {
    WorkflowExec {
        slots_used: None,
        redrive_count: None,
        redrives: vec![],
        redriving: None,
        decide_on: None,
        decider: None,
        continued_from: None,
        continued_as: None,
        parent: None,
        workflow_exec_id: "w::5b0f8e1c-2d7a-4f3e-9c61-7a2b9d0e4f13".into(),
        workflow_name: "w".into(),
        state: WorkflowState::Running,
        workflow_request_id: None,
        start_time: Timestamp::from_epoch(START).date_list(),
        start_time_epoch: START,
        end_time: None,
        end_time_epoch: None,
        input: None,
        planned_epoch: Some(START),
        execution_timeout_seconds: plan.execution_timeout_seconds,
        activity_count: 1,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        error: None,
        source: None,
        due_epoch: None,
        due_shard: None,
        start_attempts: 0,
        result: None,
        result_in_activities: None,
    }
}

/// A RUNNING activity with heartbeats (30 s) whose `heartbeat_time_epoch` a
/// client set to `heartbeat` with a raw UpdateItem (docs/tables.md: "a
/// client's UpdateItem that only sets it keeps the activity alive").
fn running_with_heartbeat(heartbeat: i64) -> (WorkflowExec, ActivityExec) {
    let plan: Plan = serde_json::from_value(serde_json::json!({"activities": [
        {"name": "a", "lambda": "f", "heartbeat_timeout_seconds": 30}
    ]}))
    .unwrap();
    let wf = workflow(&plan);
    let mut a = decide::activity_items(&wf, &plan, &EngineConfig::default())
        .0
        .remove(0);
    a.state = ActivityState::Running;
    a.attempt.number = 1;
    a.timing.first_queued_epoch = Some(START);
    a.timing.scheduled_epoch = Some(START);
    a.timing.start_time_epoch = START;
    a.timing.heartbeat_time_epoch = heartbeat;
    a.timing.due_epoch = Some(START + 30);
    a.timing.due_shard = Some(store::shard_of(&a.activity_exec_id));
    (wf, a)
}

/// Crash 1, `apply_event` (fuzz/regressions/apply_event/crash-1-running-deadline-overflow):
/// `engine::deadline::running_deadline` computes
/// `heartbeat_time_epoch.max(start_time_epoch) + heartbeat timeout`
/// (deadline.rs:77) unchecked, so a RUNNING item whose client-written
/// heartbeat is within the timeout of `i64::MAX` panics with "attempt to
/// add with overflow" in `next_deadline` / `monitor_verdict` (builds with
/// overflow checks: tests, the simulation, debug Lambdas); without overflow
/// checks it wraps to a deadline in the past whose heartbeat timeout can
/// never be written. Start-to-close must still bound the activity
/// ("once an attempt starts it must end within this long ... heartbeats or
/// not", plan.rs).
#[test]
fn a_raw_heartbeat_near_i64_max_neither_panics_nor_escapes_start_to_close() {
    let cfg = EngineConfig::default();
    for heartbeat in [i64::MAX, i64::MAX - 29, i64::MAX - 30, i64::MAX - 127] {
        let (_, a) = running_with_heartbeat(heartbeat);
        let (at, _) = decide::next_deadline(&a, &cfg).expect("RUNNING has a deadline");
        assert!(
            at <= START + cfg.default_start_to_close_seconds,
            "heartbeat {heartbeat}: deadline {at} past start-to-close"
        );
        let late = START + cfg.default_start_to_close_seconds + cfg.report_grace_seconds;
        match decide::monitor_verdict(&a, &cfg, late) {
            // A timeout the monitor can write: its stale-heartbeat condition
            // (`heartbeat_time_epoch < stale_before`) holds on this item.
            decide::Verdict::TimeOut { stale_before, .. } => assert!(
                stale_before.is_none_or(|cut| heartbeat < cut),
                "heartbeat {heartbeat}: a heartbeat timeout whose write can never apply (cut {stale_before:?})"
            ),
            v => panic!("heartbeat {heartbeat}: {v:?} after start-to-close"),
        }
    }
}

/// Crash 1 through the engine: the heartbeat monitor's tick, over the
/// in-memory DynamoDB model, past start-to-close. With overflow checks the
/// panic ends the whole tick (no other due item is swept either); without
/// them (`CARGO_PROFILE_DEV_OVERFLOW_CHECKS=false`, as release builds) the
/// tick reports `errors: 1`, `timed_out: 0`: its heartbeat TIMED_OUT write
/// fails its stale condition every round, so the activity stays RUNNING
/// past start-to-close on every tick.
#[tokio::test]
async fn the_monitor_times_out_a_running_activity_whose_heartbeat_is_near_i64_max() {
    let tables = Tables::new("whimbrel_");
    let backend = Arc::new(MemoryBackend::new(&tables, false));
    let store = Store::with_backend(backend.clone() as Arc<dyn Backend>, tables.clone());
    let cfg = EngineConfig::default();
    let engine = Engine::new(store, (), cfg.clone());
    let (wf, a) = running_with_heartbeat(i64::MAX);
    engine
        .store()
        .put(&tables.workflow_exec(), &wf)
        .await
        .unwrap();
    engine
        .store()
        .put(&tables.activity_exec(), &a)
        .await
        .unwrap();
    let late = START + cfg.default_start_to_close_seconds + cfg.report_grace_seconds;
    let report = engine.monitor_tick(late).await.expect("monitor tick");
    assert_eq!(report.timed_out, 1, "{report:?}");
    let items = backend.items(&tables.activity_exec());
    let after: ActivityExec = serde_dynamo::from_item(items[0].clone()).unwrap();
    assert_eq!(after.state, ActivityState::TimedOut);
}
