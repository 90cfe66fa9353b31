//! Timer nodes (design.md § 9.1) and the monitor's look-ahead (§ 9),
//! against DynamoDB Local: a released timer is RUNNING with its due marker
//! at its fire time and nothing invoked; the monitor completes it at its
//! time, releasing its dependents; a CANCEL row ends it at once; a tick
//! with a look-ahead sleeps to a marker due within it and fires it in the
//! same tick.

use crate::common;

use crate::common::Harness;
use serde_json::json;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::{Engine, EngineConfig};

#[tokio::test]
async fn a_timer_runs_without_a_launch_and_fires_at_its_time() {
    let h = Harness::new().await;
    h.register(
        "cooling",
        json!({"activities": [
            {"name": "cool-off", "wait": {"seconds": 30}},
            {"name": "after", "lambda": "f", "depends_on": ["cool-off"]},
        ]}),
    )
    .await;
    let wf = h.start("cooling").await;
    let t = h.activity(&wf, "cool-off").await;
    assert_eq!(t.state, ActivityState::Running);
    let due = t.timing.start_time_epoch + 30;
    assert_eq!(t.timing.due_epoch, Some(due));
    assert_eq!(h.launcher.launch_count(), 0, "a timer invokes nothing");
    assert_eq!(h.tick(due - 1).await.timers_fired, 0, "not before its time");
    assert_eq!(h.tick(due).await.timers_fired, 1);
    let t = h.activity(&wf, "cool-off").await;
    assert_eq!(t.state, ActivityState::Completed);
    assert_eq!(t.outcome.output, Some(json!({"fired_at": due})));
    // Its dependent is launched with the timer's output.
    assert_eq!(h.launcher.launches_of("after").len(), 1);
    assert_eq!(
        h.launcher.payload("after", 0).prerequisites["cool-off"],
        json!({"fired_at": due})
    );
    assert_eq!(h.tick(due + 1).await.timers_fired, 0, "fired once");
}

#[tokio::test]
async fn a_cancel_row_ends_a_waiting_timer_and_cancels_its_dependents() {
    let h = Harness::new().await;
    h.register(
        "hour",
        json!({"activities": [
            {"name": "hour", "wait": {"seconds": 3600}},
            {"name": "after", "lambda": "f", "depends_on": ["hour"]},
        ]}),
    )
    .await;
    let wf = h.start("hour").await;
    let ev = h.event(&wf, "hour", "CANCEL");
    let (retry, _) = h.deliver(&[ev], 1).await;
    assert!(retry.is_empty(), "{retry:?}");
    assert_eq!(
        h.activity(&wf, "hour").await.state,
        ActivityState::Cancelled
    );
    h.tick(h.now() + 120).await;
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
    // A COMPLETED report for a timer is never taken.
    let h2 = Harness::new().await;
    h2.register(
        "t",
        json!({"activities": [{"name": "t", "wait": {"seconds": 60}}]}),
    )
    .await;
    let wf2 = h2.start("t").await;
    let (retry, sum) = h2.deliver(&[h2.event(&wf2, "t", "COMPLETED")], 1).await;
    assert!(retry.is_empty());
    assert_eq!(sum.rejected, 1, "{sum:?}");
    assert_eq!(h2.activity(&wf2, "t").await.state, ActivityState::Running);
}

#[tokio::test]
async fn a_tick_with_a_look_ahead_fires_a_timer_due_within_it_at_its_second() {
    let h = Harness::new().await;
    h.register(
        "soon",
        json!({"activities": [{"name": "soon", "wait": {"seconds": 2}}]}),
    )
    .await;
    let wf = h.start("soon").await;
    let due = h.activity(&wf, "soon").await.timing.due_epoch.unwrap();
    let ahead = looking_ahead(&h, 5);
    let now = h.now();
    assert!(due > now, "due {due}, now {now}");
    let report = ahead.monitor_tick(now).await.unwrap();
    assert_eq!(report.timers_fired, 1, "{report:?}");
    let t = h.activity(&wf, "soon").await;
    assert_eq!(t.state, ActivityState::Completed);
    // Judged once its second came, in the tick that read it ahead.
    assert!(
        t.timing.end_time_epoch >= Some(due),
        "{:?}",
        t.timing.end_time_epoch
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

/// An engine on `h`'s tables whose monitor looks `ahead` seconds ahead
/// (so its writers owe wake-ups for markers due sooner).
fn looking_ahead(h: &Harness, ahead: i64) -> Engine<common::RecordingLauncher> {
    let config = EngineConfig {
        monitor_lookahead_seconds: ahead,
        ..h.config()
    };
    Engine::with_environment(h.store.clone(), h.launcher.clone(), config, h.clock.clone())
}

#[tokio::test]
async fn a_timer_due_before_the_next_tick_is_woken_and_fired_at_its_second() {
    let h = Harness::new().await;
    h.register(
        "brief",
        json!({"activities": [{"name": "brief", "wait": {"seconds": 1}}]}),
    )
    .await;
    let engine = looking_ahead(&h, 60);
    let req = h.request("brief", None);
    engine.start_workflow(&req).await.unwrap();
    let wf = whimbrel_core::ids::workflow_exec_id("brief", &req.workflow_request_id);
    let due = h.activity(&wf, "brief").await.timing.due_epoch.unwrap();
    let sent = h.launcher.wake_ups.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (wake, delay) = &sent[0];
    assert_eq!(wake.due_epoch, due);
    assert!((0..=1).contains(delay), "{delay}");
    // The timer queue delivers it: the monitor judges the item at its due.
    let report = engine.wake(wake).await.unwrap();
    assert_eq!(report.timers_fired, 1, "{report:?}");
    assert_eq!(
        h.activity(&wf, "brief").await.state,
        ActivityState::Completed
    );
    // Delivered again (SQS is at least once): nothing left to do.
    assert_eq!(engine.wake(wake).await.unwrap().timers_fired, 0);
}

#[tokio::test]
async fn a_retry_delay_shorter_than_a_tick_sends_a_wake_up_and_a_long_one_does_not() {
    let h = Harness::new().await;
    h.register(
        "flaky",
        json!({"activities": [
            {"name": "soon", "lambda": "f", "retry": {"max_attempts": 2, "interval_seconds": 3}},
            {"name": "late", "lambda": "f", "retry": {"max_attempts": 2, "interval_seconds": 300}},
        ]}),
    )
    .await;
    let engine = looking_ahead(&h, 60);
    let req = h.request("flaky", None);
    engine.start_workflow(&req).await.unwrap();
    let wf = whimbrel_core::ids::workflow_exec_id("flaky", &req.workflow_request_id);
    for name in ["soon", "late"] {
        engine
            .apply_event(&h.attempt_event(&wf, name, "FAILED", 0))
            .await
            .unwrap();
    }
    let sent = h.launcher.wake_ups.lock().unwrap().clone();
    let ids: Vec<_> = sent
        .iter()
        .map(|(w, _)| w.activity_exec_id.as_str())
        .collect();
    assert_eq!(
        ids,
        [whimbrel_core::ids::activity_exec_id(&wf, "soon")],
        "{sent:?}"
    );
    assert!((2..=3).contains(&sent[0].1), "{sent:?}");
    let soon = h.activity(&wf, "soon").await;
    assert_eq!(Some(sent[0].0.due_epoch), soon.timing.next_attempt_epoch);
}

/// Issue 42 A.3 and C.3, a targeted interleaving on DynamoDB: a monitor
/// tick reads a timer due and decides to fire it; before its write lands,
/// the workflow is cancelled and redriven, and the timer waits again in
/// a new generation, due a minute later. The stalled write then lands:
/// it must not fire the new generation's timer early (the write is
/// conditioned on the generation it read, and deciding again from a
/// fresh read finds the timer not due). The timer fires at its new time.
#[tokio::test]
async fn a_fire_stalled_across_a_redrive_does_not_fire_the_new_generation() {
    use whimbrel_core::model::WorkflowRequest;
    let h = Harness::new().await;
    h.register(
        "w",
        json!({"activities": [{"name": "t", "wait": {"seconds": 60}}]}),
    )
    .await;
    let wf = h.start("w").await;
    let timer = h.activity(&wf, "t").await;
    let due = h.deadline(&timer);
    let (monitor, reached, gate) = common::Stalled::engine(&h, &timer.activity_exec_id);
    h.clock.set(due + 1);
    // Meanwhile (the tick held at its write): cancelled, and redriven at
    // the same second.
    let meanwhile = async {
        reached.notified().await;
        let cancel = WorkflowRequest {
            cancel_workflow_exec_id: Some(wf.clone()),
            ..h.request("w", None)
        };
        h.engine.cancel_workflow(&cancel).await.unwrap();
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
        let redrive = WorkflowRequest {
            redrive_workflow_exec_id: Some(wf.clone()),
            ..h.request("w", None)
        };
        h.engine.redrive_workflow(&redrive).await.unwrap();
        let again = h.activity(&wf, "t").await;
        assert_eq!(again.state, ActivityState::Running);
        let new_due = h.deadline(&again);
        assert!(new_due >= due + 60, "{new_due} {due}");
        gate.notify_one();
        new_due
    };
    let (ticked, new_due) = tokio::join!(monitor.monitor_tick(due + 1), meanwhile);
    let report = ticked.unwrap();
    assert_eq!(report.timers_fired, 0, "{report:?}");
    let after = h.activity(&wf, "t").await;
    assert_eq!(
        (after.state, h.deadline(&after)),
        (ActivityState::Running, new_due),
        "the stalled fire of generation 0 fired generation 1"
    );
    h.tick(new_due + 1).await;
    assert_eq!(h.activity(&wf, "t").await.state, ActivityState::Completed);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}
