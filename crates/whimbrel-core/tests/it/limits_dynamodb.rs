//! A plan's `max_concurrency` (design.md § 9.3), against DynamoDB Local:
//! at most N of its activities hold a slot (claimed and not ended) at
//! once, the others wait and are claimed in plan order as slots free,
//! and a slot is given back exactly once, also when the function that
//! ended its activity died before the give-back.

use crate::common;

use crate::common::Harness;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, Transition, WorkflowState};

const WIDTH: usize = 12;
const LIMIT: i64 = 3;

fn wide() -> Value {
    let acts: Vec<Value> = (0..WIDTH)
        .map(|i| json!({"name": format!("a{i:02}"), "lambda": "f"}))
        .collect();
    json!({"max_concurrency": LIMIT, "activities": acts})
}

/// (slots_used, waiters) on the workflow, and the names of the
/// activities holding a slot.
async fn slots(h: &Harness, wf: &str) -> (i64, usize, Vec<String>) {
    let key = whimbrel_core::keys::workflow_key(wf, "wide");
    let w: Value = h
        .store
        .get_projected(&h.store.tables().workflow_exec(), key, &[])
        .await
        .unwrap()
        .unwrap();
    let used = w["slots_used"].as_i64().unwrap_or(0);
    let waiters = w["slot_waiters"].as_array().map_or(0, Vec::len);
    let mut held = vec![];
    for i in 0..WIDTH {
        let a = h.activity(wf, &format!("a{i:02}")).await;
        if a.links.slot_held {
            held.push(a.activity_name);
        }
    }
    (used, waiters, held)
}

/// The entries of `slot_waiters` on workflow `wf` of workflow `name`.
async fn waiting(h: &Harness, wf: &str, name: &str) -> usize {
    let key = whimbrel_core::keys::workflow_key(wf, name);
    let item: Value = (h.store)
        .get_projected(&h.store.tables().workflow_exec(), key, &[])
        .await
        .unwrap()
        .unwrap();
    item["slot_waiters"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn at_most_n_hold_a_slot_and_the_rest_start_in_plan_order() {
    let h = Harness::new().await;
    h.register("wide", wide()).await;
    let wf = h.start("wide").await;
    let (used, waiters, held) = slots(&h, &wf).await;
    assert_eq!((used, waiters), (LIMIT, WIDTH - LIMIT as usize));
    assert_eq!(held, ["a00", "a01", "a02"]);
    assert_eq!(h.launcher.launch_count(), LIMIT as usize);
    // Each end hands its slot to the first waiter in plan order.
    for i in 0..WIDTH {
        let name = format!("a{i:02}");
        h.run_to_completion(&wf, &name).await;
        let (used, _, held) = slots(&h, &wf).await;
        assert!(
            used <= LIMIT && used == held.len() as i64,
            "{used} {held:?}"
        );
        assert!(!held.contains(&name), "{name} ended holding its slot");
        let next = i + LIMIT as usize;
        if next < WIDTH {
            assert!(
                held.contains(&format!("a{next:02}")),
                "{held:?} after {name}"
            );
        }
    }
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    assert_eq!(slots(&h, &wf).await, (0, 0, vec![]));
    assert_eq!(h.launcher.launch_count(), WIDTH);
}

#[tokio::test]
async fn a_slot_owed_by_a_function_that_died_is_given_back_by_the_monitor_once() {
    let h = Harness::new().await;
    h.register("wide", wide()).await;
    let wf = h.start("wide").await;
    h.engine
        .apply_event(&h.attempt_event(&wf, "a00", "RUNNING", 0))
        .await
        .unwrap();
    let owed = common::terminal_write_only(
        &h,
        &wf,
        "a00",
        Transition::Completed,
        ActivityState::Completed,
        "died",
        Default::default(),
    )
    .await;
    // Ended, still holding its slot: nobody else started.
    let (used, _, held) = slots(&h, &wf).await;
    assert_eq!((used, held.len()), (LIMIT, 3));
    assert_eq!(h.launcher.launch_count(), LIMIT as usize);
    h.tick(owed).await;
    let (used, _, held) = slots(&h, &wf).await;
    assert_eq!(used, LIMIT);
    assert_eq!(held, ["a01", "a02", "a03"]);
    // A second settle (redelivery) gives nothing back twice.
    h.tick(owed + 60).await;
    assert_eq!(slots(&h, &wf).await.0, LIMIT);
    // A cancelled workflow's waiters leave, its slots come back.
    let cancel = whimbrel_core::model::WorkflowRequest {
        cancel_workflow_exec_id: Some(wf.clone()),
        ..h.request("wide", None)
    };
    h.engine.cancel_workflow(&cancel).await.unwrap();
    for name in ["a01", "a02", "a03"] {
        let ev = h.attempt_event(&wf, name, "CANCEL", 0);
        let _ = h.engine.apply_event(&ev).await;
    }
    h.tick(h.now() + 600).await;
    h.tick(h.now() + 1200).await;
    let (used, waiters, held) = slots(&h, &wf).await;
    assert_eq!((used, held), (0, vec![]));
    assert!(waiters <= WIDTH, "{waiters}");
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
}

/// docs/limits.md § 6 (issue 42 D, Open 5): a `max_concurrency` plan
/// whose waiting nodes' names make `MAX_SLOT_WAITERS_BYTES` (1,875 nodes
/// of 121-byte names, 128 bytes each on `slot_waiters`) runs on DynamoDB
/// under a limit of 5, 1,870 waiting on the workflow item at the start,
/// hands its slots on, and ends when cancelled. A plan one byte past it, registered by hand (as an old
/// client could), fails its start with the reason and launches nothing.
#[tokio::test]
async fn a_limited_plans_waiters_run_at_their_bound_and_one_byte_past_fails_the_start() {
    use whimbrel_core::plan::MAX_SLOT_WAITERS_BYTES;
    const NODES: usize = 1_875;
    let name = |i: usize, extra: usize| {
        let pad = if i == 0 { 121 + extra } else { 121 };
        format!("{i:0>pad$}")
    };
    let plan = |extra: usize| {
        let acts: Vec<Value> = (0..NODES)
            .map(|i| json!({"name": name(i, extra), "lambda": "f"}))
            .collect();
        json!({"max_concurrency": 5, "activities": acts})
    };
    assert_eq!(NODES * (121 + 7), MAX_SLOT_WAITERS_BYTES);
    let h = Harness::new().await;
    h.register("waiters", plan(0)).await;
    let wf = h.start("waiters").await;
    assert_eq!(waiting(&h, &wf, "waiters").await, NODES - 5);
    // Slots handed on with the list at its largest, then the execution
    // cancelled: every waiting node is cancelled and it ends (completing
    // all 1,875 would take minutes and show nothing more).
    for i in 0..10 {
        h.run_to_completion(&wf, &name(i, 0)).await;
    }
    assert_eq!(h.launcher.launch_count(), 15);
    let mut cancel = h.request("waiters", None);
    cancel.cancel_workflow_exec_id = Some(wf.clone());
    h.engine.cancel_workflow(&cancel).await.unwrap();
    let ended = h.workflow(&wf).await;
    assert_eq!(ended.state, WorkflowState::Cancelled);
    assert_eq!(waiting(&h, &wf, "waiters").await, 0, "none left waiting");
    h.register("past", plan(1)).await;
    let past = h.start("past").await;
    let failed = h.workflow(&past).await;
    assert_eq!(failed.state, WorkflowState::Failed, "{failed:?}");
    let why = failed.error.unwrap_or_default();
    assert!(
        why.contains(&format!(
            "their names make {} bytes",
            MAX_SLOT_WAITERS_BYTES + 1
        )),
        "{why}"
    );
    assert_eq!(
        h.launcher.launch_count(),
        15,
        "the past plan launches nothing"
    );
}

/// A cancelled workflow under `max_concurrency` launches nothing more:
/// the nodes waiting for a slot are cancelled before the slot holders,
/// so no slot a cancel frees is handed to one of them. Before, a cancel
/// of these 40 nodes under a limit of 5 launched 9 waiting nodes (and of
/// 1,875, 575), each cancelled right after its launch
/// (`Engine::cancel_each`).
#[tokio::test]
async fn a_cancel_hands_no_slot_to_a_waiting_node() {
    let h = Harness::new().await;
    let acts: Vec<Value> = (0..40)
        .map(|i| json!({"name": format!("a{i:02}"), "lambda": "f"}))
        .collect();
    h.register("w", json!({"max_concurrency": 5, "activities": acts}))
        .await;
    let wf = h.start("w").await;
    for i in 0..2 {
        h.run_to_completion(&wf, &format!("a{i:02}")).await;
    }
    assert_eq!(h.launcher.launch_count(), 7);
    let mut cancel = h.request("w", None);
    cancel.cancel_workflow_exec_id = Some(wf.clone());
    h.engine.cancel_workflow(&cancel).await.unwrap();
    h.tick(h.now() + 600).await;
    assert_eq!(
        h.launcher.launch_count(),
        7,
        "a cancelled workflow launched its waiting nodes"
    );
    for i in 0..40 {
        let a = h.activity(&wf, &format!("a{i:02}")).await;
        assert!(a.state.is_terminal(), "{} {}", a.activity_name, a.state);
    }
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
}

/// Issue 42 A.3 and C.3, a targeted interleaving on DynamoDB, shown not
/// to happen: under a limit of 1, `a` FAILED and its function died before
/// its settle, so it still holds its slot; the monitor's settle reads it
/// and is held at its give-back. Meanwhile the workflow is cancelled and
/// a redrive is asked for: the workflow cannot end while `a`'s settle is
/// owed, so the redrive is refused, and no give-back of generation 0 can
/// land on generation 1. Once the held give-back lands, the workflow
/// ends, the redrive runs `a` and `b` again, one at a time.
#[tokio::test]
async fn a_give_back_in_flight_holds_the_workflow_from_a_redrive() {
    use whimbrel_core::engine::EngineError;
    use whimbrel_core::model::WorkflowRequest;
    let h = Harness::new().await;
    let plan = json!({"max_concurrency": 1, "activities": [
        {"name": "a", "lambda": "f"}, {"name": "b", "lambda": "f"}]});
    h.register("pair", plan).await;
    let wf = h.start("pair").await;
    (h.engine.apply_event(&h.event(&wf, "a", "RUNNING")).await).unwrap();
    let owed = common::terminal_write_only(
        &h,
        &wf,
        "a",
        Transition::Failed,
        ActivityState::Failed,
        "died",
        Default::default(),
    )
    .await;
    let a = h.activity(&wf, "a").await;
    let (monitor, reached, gate) = common::Stalled::engine(&h, &a.activity_exec_id);
    h.clock.set(owed);
    let redrive = || WorkflowRequest {
        redrive_workflow_exec_id: Some(wf.clone()),
        ..h.request("pair", None)
    };
    let meanwhile = async {
        reached.notified().await;
        let cancel = WorkflowRequest {
            cancel_workflow_exec_id: Some(wf.clone()),
            ..h.request("pair", None)
        };
        h.engine.cancel_workflow(&cancel).await.unwrap();
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
        let refused = h.engine.redrive_workflow(&redrive()).await;
        assert!(
            matches!(refused, Err(EngineError::Rejected(_))),
            "{refused:?}"
        );
        gate.notify_one();
    };
    let (ticked, ()) = tokio::join!(monitor.monitor_tick(owed), meanwhile);
    ticked.unwrap();
    assert_eq!(waiting(&h, &wf, "pair").await, 0);
    assert!(h.workflow(&wf).await.state.is_terminal());
    h.engine.redrive_workflow(&redrive()).await.unwrap();
    let claimed = |s: ActivityState| {
        !s.is_terminal() && !matches!(s, ActivityState::Requested | ActivityState::Ready)
    };
    for first in ["a", "b"] {
        let other = if first == "a" { "b" } else { "a" };
        assert!(claimed(h.activity(&wf, first).await.state));
        assert!(
            !claimed(h.activity(&wf, other).await.state),
            "two under a limit of 1"
        );
        h.run_to_completion(&wf, first).await;
    }
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}
