//! Counting activity ends against a real DynamoDB API (DynamoDB Local,
//! started by the tests), design.md § 3.3: each end is counted once into
//! its count group, the workflow exec is written once per complete group,
//! a count owed by a function that died after the terminal write is done
//! by the monitor, and items without a count slot (written before count
//! groups) are still counted in their terminal transaction.

use crate::common::{terminal_write_only, Harness};
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, Transition, WorkflowState};
use whimbrel_core::engine::counting::count_group_key;
use whimbrel_core::engine::decide::{self, Details};
use whimbrel_core::ids;
use whimbrel_core::model::CountGroup;
use whimbrel_core::plan::JOIN_GROUP_SIZE;
use whimbrel_core::store::UpdateRequest;

/// `n` independent roots `r0..`.
fn roots(n: usize) -> Value {
    let acts: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("r{i}"), "lambda": "noop"}))
        .collect();
    json!({"version": 1, "activities": acts})
}

async fn group(h: &Harness, wf: &str, g: u32) -> Option<CountGroup> {
    h.store
        .get(
            &h.store.tables().activity_exec_dependency(),
            count_group_key(wf, g),
        )
        .await
        .expect("read count group")
}

async fn counters(h: &Harness, wf: &str) -> (u64, u64, u64) {
    let w = h.workflow(wf).await;
    (w.completed_count, w.failed_count, w.cancelled_count)
}

#[tokio::test]
async fn the_workflow_is_counted_once_per_complete_group() {
    let h = Harness::new().await;
    let n = JOIN_GROUP_SIZE + 3;
    h.register("many", roots(n)).await;
    let wf = h.start("many").await;
    assert_eq!(
        h.activity(&wf, "r0")
            .await
            .links
            .count_slot
            .map(|s| (s.group, s.size)),
        Some((0, JOIN_GROUP_SIZE as u32))
    );
    assert_eq!(
        h.activity(&wf, &format!("r{}", n - 1))
            .await
            .links
            .count_slot
            .map(|s| (s.group, s.size)),
        Some((1, 3))
    );
    let r0_done = h.event(&wf, "r0", "COMPLETED");
    for i in 0..n {
        if i == 0 {
            h.engine
                .apply_event(&h.event(&wf, "r0", "RUNNING"))
                .await
                .unwrap();
            h.engine.apply_event(&r0_done).await.unwrap();
        } else {
            h.run_to_completion(&wf, &format!("r{i}")).await;
        }
        let want = if i + 1 < JOIN_GROUP_SIZE {
            0
        } else if i + 1 < n {
            JOIN_GROUP_SIZE as u64
        } else {
            n as u64
        };
        assert_eq!(counters(&h, &wf).await, (want, 0, 0), "after r{i}");
    }
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    // A redelivered COMPLETED counts nothing again.
    h.engine.apply_event(&r0_done).await.unwrap();
    assert_eq!(counters(&h, &wf).await, (n as u64, 0, 0));
    assert_eq!(
        group(&h, &wf, 0).await.unwrap().ended.len(),
        JOIN_GROUP_SIZE
    );
}

#[tokio::test]
async fn a_count_owed_by_a_function_that_died_is_done_by_the_monitor() {
    let h = Harness::new().await;
    h.register("three", roots(3)).await;
    let wf = h.start("three").await;
    h.run_to_completion(&wf, "r0").await;
    // r1 fails: the workflow's error is its reason at once.
    h.engine
        .apply_event(&h.event(&wf, "r1", "RUNNING"))
        .await
        .unwrap();
    let mut failed = h.event(&wf, "r1", "FAILED");
    failed.error = Some("Boom: no".into());
    h.engine.apply_event(&failed).await.unwrap();
    assert!(h.workflow(&wf).await.error.unwrap().contains("Boom"));
    assert_eq!(group(&h, &wf, 0).await.unwrap().ended.len(), 2);
    // r2's COMPLETED is written, and the function dies before counting.
    h.engine
        .apply_event(&h.event(&wf, "r2", "RUNNING"))
        .await
        .unwrap();
    let owed = terminal_write_only(
        &h,
        &wf,
        "r2",
        Transition::Completed,
        ActivityState::Completed,
        "died-before-count",
        Details::default(),
    )
    .await;
    assert_eq!(group(&h, &wf, 0).await.unwrap().ended.len(), 2);
    assert_eq!(counters(&h, &wf).await, (0, 0, 0));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    // The monitor settles it at its marker: counted once, the workflow
    // ends FAILED (r1 failed) with all three counted.
    let report = h.tick(owed + 1).await;
    assert!(report.settled >= 1, "{report:?}");
    assert_eq!(counters(&h, &wf).await, (2, 1, 0));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    // Settling again (a late redelivery) changes nothing.
    h.tick(owed + 200).await;
    assert_eq!(counters(&h, &wf).await, (2, 1, 0));
    let g = group(&h, &wf, 0).await.unwrap();
    assert_eq!(
        (g.completed_count, g.failed_count, g.cancelled_count),
        (2, 1, 0)
    );
}

#[tokio::test]
async fn an_item_without_a_count_slot_is_counted_in_its_terminal_transaction() {
    let h = Harness::new().await;
    h.register("old", roots(2)).await;
    let wf = h.start("old").await;
    // Items as written before count groups: no slot.
    for name in ["r0", "r1"] {
        let req = UpdateRequest::new(
            h.store.tables().activity_exec(),
            decide::activity_key(&ids::activity_exec_id(&wf, name), &wf),
        )
        .remove("count_slot");
        h.store.update(req).await.unwrap();
    }
    h.run_to_completion(&wf, "r0").await;
    assert_eq!(counters(&h, &wf).await, (1, 0, 0));
    h.run_to_completion(&wf, "r1").await;
    assert_eq!(counters(&h, &wf).await, (2, 0, 0));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    assert!(group(&h, &wf, 0).await.is_none());
}
