//! Wide joins against a real DynamoDB API (DynamoDB Local, started by the
//! tests): an activity with more prerequisites than the join group size is
//! released through join group items, exactly once per edge,
//! launched once with every prerequisite's output, and a group completed by
//! a function that died before releasing the join is finished by the
//! monitor; outputs that would pass Lambda's 1 MB go by reference.

use crate::common::{terminal_write_only, Harness};
use serde_json::{json, Value};
use whimbrel_core::activity::Activity;
use whimbrel_core::contract::{ActivityState, Transition};
use whimbrel_core::engine::decide::{self, Details};
use whimbrel_core::ids;
use whimbrel_core::model::{GroupSlot, JoinGroup};
use whimbrel_core::plan::{JOIN_GROUP_SIZE, MAX_LAUNCH_PAYLOAD_BYTES};

/// `width` roots `p0..` and `join`, which waits for all of them.
fn fan_in(width: usize) -> Value {
    let mut acts: Vec<Value> = (0..width)
        .map(|i| json!({"name": format!("p{i}"), "lambda": "noop"}))
        .collect();
    let deps: Vec<String> = (0..width).map(|i| format!("p{i}")).collect();
    acts.push(json!({"name": "join", "lambda": "noop", "depends_on": deps}));
    json!({"version": 1, "activities": acts})
}

async fn group(h: &Harness, join_id: &str, g: u32) -> Option<JoinGroup> {
    h.store
        .get(
            &h.store.tables().activity_exec_dependency(),
            decide::join_group_key(join_id, g),
        )
        .await
        .expect("read join group")
}

#[tokio::test]
async fn a_wide_join_is_released_through_its_groups_once_per_edge() {
    let h = Harness::new().await;
    let width = JOIN_GROUP_SIZE + 8;
    h.register("wide", fan_in(width)).await;
    let wf = h.start("wide").await;
    let join = h.activity(&wf, "join").await;
    let join_id = join.activity_exec_id.clone();
    // Two groups, no list of prerequisites on the join item.
    assert_eq!(join.links.join_groups, Some(2));
    assert_eq!(join.links.pending_dependency_count, 2);
    assert!(join.links.prerequisites.is_empty());
    assert_eq!(
        h.activity(&wf, "p0").await.links.join_slots.get(&join_id),
        Some(&GroupSlot {
            group: 0,
            size: JOIN_GROUP_SIZE as u32
        })
    );
    assert_eq!(
        h.activity(&wf, &format!("p{}", width - 1))
            .await
            .links
            .join_slots
            .get(&join_id),
        Some(&GroupSlot { group: 1, size: 8 })
    );
    assert_eq!(h.launcher.launches_of("p0").len(), 1);

    // Every prerequisite reports through the stream; p0's COMPLETED comes
    // three times (two redeliveries, one in the same batch).
    let mut seq = 1;
    for i in 0..width {
        let name = format!("p{i}");
        let done = h.event(&wf, &name, "COMPLETED");
        let mut batch = vec![h.event(&wf, &name, "RUNNING"), done.clone()];
        if i == 0 {
            batch.push(done.clone());
        }
        let (retry, _) = h.deliver(&batch, seq).await;
        assert!(retry.is_empty(), "{name}: {retry:?}");
        seq += 10;
        if i == 0 {
            h.deliver(&[done], seq).await;
            seq += 10;
        }
        let j = h.activity(&wf, "join").await;
        let groups_done = u64::from(i + 1 >= JOIN_GROUP_SIZE) + u64::from(i + 1 == width);
        assert_eq!(
            j.links.pending_dependency_count,
            2 - groups_done,
            "after {name}"
        );
        // The claim that releases the last group drops the markers.
        let kept = if groups_done == 2 { 0 } else { groups_done };
        assert_eq!(j.links.released_prerequisites.len() as u64, kept);
        let expect_launch = usize::from(i + 1 == width);
        assert_eq!(
            h.launcher.launches_of("join").len(),
            expect_launch,
            "after {name}"
        );
    }
    let first = group(&h, &join_id, 0).await.expect("group 0");
    let second = group(&h, &join_id, 1).await.expect("group 1");
    assert_eq!(first.released.len(), JOIN_GROUP_SIZE);
    assert_eq!(second.released.len(), 8);
    assert!(second.released.contains(&format!("p{}", width - 1)));
    let j = h.activity(&wf, "join").await;
    assert_eq!(j.state, ActivityState::Queued);
    assert_eq!(j.links.pending_dependency_count, 0);
    assert!(j.links.released_prerequisites.is_empty());
    // The launch carries every prerequisite's output, read through the plan.
    let payload = h.launcher.payload("join", 0);
    assert_eq!(payload.prerequisites.len(), width);
    assert_eq!(
        payload.prerequisites[&format!("p{}", width - 1)],
        json!({"from": format!("p{}", width - 1)})
    );
    // The join runs to the end and so does the workflow.
    h.run_to_completion(&wf, "join").await;
    assert_eq!(
        h.workflow(&wf).await.state,
        whimbrel_core::contract::WorkflowState::Completed
    );
}

#[tokio::test]
async fn a_group_completed_by_a_function_that_died_is_released_by_the_monitor() {
    let h = Harness::new().await;
    let width = JOIN_GROUP_SIZE + 1;
    h.register("wide", fan_in(width)).await;
    let wf = h.start("wide").await;
    let join_id = ids::activity_exec_id(&wf, "join");
    for i in 0..JOIN_GROUP_SIZE {
        h.run_to_completion(&wf, &format!("p{i}")).await;
    }
    assert_eq!(
        h.activity(&wf, "join").await.links.pending_dependency_count,
        1
    );
    // The last prerequisite: its COMPLETED is written, its group's update
    // done, and the function dies before it releases the join.
    let last = format!("p{JOIN_GROUP_SIZE}");
    h.engine
        .apply_event(&h.event(&wf, &last, "RUNNING"))
        .await
        .unwrap();
    let owed = terminal_write_only(
        &h,
        &wf,
        &last,
        Transition::Completed,
        ActivityState::Completed,
        "died-after-group",
        Details::default(),
    )
    .await;
    h.store
        .update(decide::join_release_update(
            h.store.tables(),
            &join_id,
            1,
            &last,
        ))
        .await
        .expect("group update");
    assert_eq!(
        group(&h, &join_id, 1).await.unwrap().released,
        vec![last.clone()]
    );
    assert_eq!(
        h.activity(&wf, "join").await.links.pending_dependency_count,
        1
    );
    assert!(h.launcher.launches_of("join").is_empty());

    // The monitor resumes the owed side effects: the group is complete, so
    // the join is released and launched, once.
    let report = h.tick(owed).await;
    assert_eq!(report.settled, 1, "{report:?}");
    let j = h.activity(&wf, "join").await;
    assert_eq!(j.links.pending_dependency_count, 0);
    assert_eq!(j.state, ActivityState::Queued);
    assert_eq!(h.launcher.launches_of("join").len(), 1);
    // A late redelivery of the report changes nothing.
    h.deliver(&[h.event(&wf, &last, "COMPLETED")], 100).await;
    assert_eq!(h.launcher.launches_of("join").len(), 1);
    let j = h.activity(&wf, "join").await;
    assert_eq!(j.links.pending_dependency_count, 0);
    let queued = j
        .trail
        .history
        .iter()
        .filter(|e| e.state == ActivityState::Queued);
    assert_eq!(queued.count(), 1);
}

#[tokio::test]
async fn outputs_that_would_pass_lambdas_1_mb_go_by_reference() {
    let h = Harness::new().await;
    // 12 prerequisites of ~95 KB outputs: 1.1 MB, more than an async
    // Invoke takes.
    let width = 12;
    h.register("big", fan_in(width)).await;
    let wf = h.start("big").await;
    for i in 0..width {
        let name = format!("p{i}");
        h.engine
            .apply_event(&h.event(&wf, &name, "RUNNING"))
            .await
            .unwrap();
        let mut done = h.event(&wf, &name, "COMPLETED");
        done.output = Some(json!({"i": i, "pad": "x".repeat(95_000)}));
        // The row the stream record comes from: the output stays on it.
        h.put_event(&done).await;
        h.engine.apply_event(&done).await.unwrap();
    }
    let payload = h.launcher.payload("join", 0);
    let size = serde_json::to_vec(&payload).unwrap().len();
    assert!(size <= MAX_LAUNCH_PAYLOAD_BYTES, "{size}");
    assert!(!payload.prerequisites_by_reference.is_empty());
    assert_eq!(
        payload.prerequisites.len() + payload.prerequisites_by_reference.len(),
        width
    );
    // Only as many go by reference as needed: one more inline would pass.
    assert!(size + 95_000 > MAX_LAUNCH_PAYLOAD_BYTES, "{size}");
    // The activity reads the rest back and sees every output.
    let activity = Activity::new(payload, h.store.clone(), h.config());
    let outputs = activity.prerequisite_outputs().await.unwrap();
    assert_eq!(outputs.len(), width);
    for i in 0..width {
        assert_eq!(outputs[&format!("p{i}")]["i"], json!(i));
    }
}
