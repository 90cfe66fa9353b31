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
