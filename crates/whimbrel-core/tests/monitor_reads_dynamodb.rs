//! On DynamoDB Local: a monitor tick reads what went stale, not what is
//! alive, so a tick's cost grows with the stale activities only.
//! Heartbeats through the `Activity` helper move the due marker
//! (`deadline::heartbeat_marker`), so a tick never looks at those
//! activities; a client's raw heartbeat does not, so the
//! monitor still looks at those once per heartbeat timeout and moves their
//! markers; the activities that stopped heartbeating are timed out.

mod common;

use common::Harness;
use serde_json::json;
use whimbrel_core::contract::ActivityState;
use whimbrel_core::engine::decide::{self, HEARTBEAT_MARKER_SKEW_SECONDS as SKEW};
use whimbrel_core::ids;
use whimbrel_core::store::Value as AttributeValue;
use whimbrel_core::store::{n, Cond, UpdateRequest};

const HEARTBEAT: i64 = 100;

fn names(prefix: &str, k: usize) -> Vec<String> {
    (0..k).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test]
async fn a_tick_reads_the_stale_and_raw_heartbeating_activities_only() {
    let h = Harness::new().await;
    let (helper, raw, stale) = (names("helper-", 12), names("raw-", 4), names("stale-", 3));
    let all: Vec<&String> = helper.iter().chain(&raw).chain(&stale).collect();
    let activities: Vec<_> = all
        .iter()
        .map(|a| json!({"name": a, "lambda": "noop", "heartbeat_timeout_seconds": HEARTBEAT, "timeout_seconds": 3600}))
        .collect();
    h.register("many", json!({ "activities": activities }))
        .await;
    let wf = h.start("many").await;
    let t0 = h.now();
    for a in &all {
        h.engine
            .apply_event(&h.attempt_event(&wf, a, "RUNNING", 0))
            .await
            .unwrap();
        let exec = h.activity(&wf, a).await;
        assert_eq!(
            exec.timing.due_epoch,
            Some(exec.timing.start_time_epoch + HEARTBEAT),
            "{a}"
        );
        assert!(exec.timing.start_time_epoch < t0 + 10);
    }

    // Half-way through the heartbeat timeout and after: every helper
    // activity heartbeats; the raw ones update heartbeat_time_epoch only.
    h.clock.set(t0 + 60);
    for a in &helper {
        let state = h.attempt(a, 0).heartbeat().await.unwrap();
        assert_eq!(state, ActivityState::Running);
        let exec = h.activity(&wf, a).await;
        assert_eq!(
            exec.timing.due_epoch,
            Some(exec.timing.heartbeat_time_epoch + HEARTBEAT - SKEW),
            "{a}: moved"
        );
        assert!(exec.timing.heartbeat_time_epoch >= t0 + 60);
    }
    for a in &raw {
        let req = UpdateRequest::new(
            h.store.tables().activity_exec(),
            decide::activity_key(&ids::activity_exec_id(&wf, a), &wf),
        )
        .when(Cond::eq("heartbeat_enabled", AttributeValue::Bool(true)))
        .set("heartbeat_time_epoch", n(t0 + 60));
        h.store.update(req, false).await.unwrap();
    }
    // A second helper heartbeat soon after leaves the marker: one write.
    h.clock.set(t0 + 70);
    h.store.metrics().take();
    h.store.metrics().take_capacity();
    let before = h.activity(&wf, &helper[0]).await.timing.due_epoch;
    h.attempt(&helper[0], 0).heartbeat().await.unwrap();
    let ops = h.store.metrics().take();
    assert_eq!(ops["UpdateItem"].requests, 1, "{ops:?}");
    let exec = h.activity(&wf, &helper[0]).await;
    assert_eq!(exec.timing.due_epoch, before, "left alone");

    // Past the first deadline and its report grace.
    let report = h.tick(t0 + HEARTBEAT + 15).await;
    assert_eq!(report.timed_out, 3, "{report:?}");
    assert_eq!(
        report.swept,
        (raw.len() + stale.len()) as u64,
        "only the stale and the raw-heartbeating activities came due: {report:?}"
    );
    for a in &stale {
        assert_eq!(h.activity(&wf, a).await.state, ActivityState::TimedOut);
    }
    for a in &raw {
        let exec = h.activity(&wf, a).await;
        assert_eq!(exec.state, ActivityState::Running, "{a}");
        assert_eq!(
            exec.timing.due_epoch,
            Some(t0 + 60 + HEARTBEAT),
            "{a}: extended"
        );
    }
    for a in &helper {
        assert_eq!(h.activity(&wf, a).await.state, ActivityState::Running);
    }
    // The next tick finds nothing due but the settling of the timed-out.
    let quiet = h.tick(t0 + HEARTBEAT + 20).await;
    assert_eq!(quiet.timed_out, 0, "{quiet:?}");
}

#[tokio::test]
async fn a_moving_heartbeat_that_lost_to_an_engine_write_is_written_plain() {
    let h = Harness::new().await;
    h.register(
        "one",
        json!({"activities": [{"name": "a", "lambda": "noop", "heartbeat_timeout_seconds": HEARTBEAT}]}),
    )
    .await;
    let wf = h.start("one").await;
    let t0 = h.now();
    h.engine
        .apply_event(&h.attempt_event(&wf, "a", "RUNNING", 0))
        .await
        .unwrap();
    // The engine writes the item after the activity read it: a user's
    // cancel (RUNNING -> CANCELLED_RUNNING) keeps the marker and bumps
    // the version. Simulated by bumping the version under the helper.
    let exec = h.activity(&wf, "a").await;
    let bump = UpdateRequest::new(
        h.store.tables().activity_exec(),
        decide::activity_key(&exec.activity_exec_id, &wf),
    )
    .set("version", n(exec.version + 1));
    let plain = UpdateRequest::new(
        h.store.tables().activity_exec(),
        decide::activity_key(&exec.activity_exec_id, &wf),
    )
    .set("heartbeat_time_epoch", n(t0 + 60));
    let moving = decide::heartbeat_moving_marker(&plain, &exec, &h.config(), t0 + 60)
        .expect("due within half the timeout");
    h.store.update(bump, false).await.unwrap();
    let lost = h.store.update(moving, false).await;
    assert!(
        matches!(lost, Err(whimbrel_core::store::StoreError::ConditionFailed)),
        "{lost:?}"
    );
    // Through the helper, the same heartbeat re-reads and moves it.
    h.clock.set(t0 + 60);
    h.attempt("a", 0).heartbeat().await.unwrap();
    let after = h.activity(&wf, "a").await;
    assert!(after.timing.heartbeat_time_epoch >= t0 + 60);
    assert_eq!(
        after.timing.due_epoch,
        Some(after.timing.heartbeat_time_epoch + HEARTBEAT - SKEW)
    );
}
