//! Retries, timeouts, task-list workers and the workflow result, against
//! DynamoDB Local: each rule of `whimbrel-rules/src/decide/attempts.rs`, `decide/deadline.rs`,
//! `engine/outcome.rs` and `worker.rs` through real conditional writes and
//! real GSIs.

use crate::common::Harness;
use serde_json::json;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::{Applied, Engine};
use whimbrel_core::worker::{Worker, WorkerOptions};

/// Fail the live attempt of `name` (its launch `i`) with `error`.
async fn fail(h: &Harness, wf: &str, name: &str, i: usize, error: &str) -> Applied {
    let mut ev = h.attempt_event(wf, name, "FAILED", i);
    ev.error = Some(error.into());
    h.engine.apply_event(&ev).await.expect("FAILED applied")
}

fn flaky_plan(retry: serde_json::Value) -> serde_json::Value {
    json!({"activities": [
        {"name": "flaky", "lambda": "f", "retry": retry},
        {"name": "after", "lambda": "f", "depends_on": ["flaky"]}
    ]})
}

#[tokio::test]
async fn a_failing_activity_is_retried_with_backoff_and_completes_on_attempt_3() {
    let h = Harness::new().await;
    h.register(
        "flaky",
        flaky_plan(json!({"max_attempts": 3, "interval_seconds": 2, "backoff_rate": 3.0})),
    )
    .await;
    let wf = h.start("flaky").await;
    let t0 = h.now();
    assert_eq!(
        fail(&h, &wf, "flaky", 0, "Busy: try later").await,
        Applied::State(ActivityState::Queued)
    );
    let a = h.activity(&wf, "flaky").await;
    assert_eq!((a.state, a.attempt.number), (ActivityState::Queued, 2));
    assert_eq!(
        a.attempt.token_hash, None,
        "not claimed until the delay ends"
    );
    let next = a.timing.next_attempt_epoch.expect("next attempt time");
    assert!((t0 + 2..=t0 + 3).contains(&next), "{next} vs {t0}");
    assert_eq!(
        a.timing.due_epoch,
        Some(next),
        "the delay is the due marker"
    );
    // The dependent was neither released nor cancelled.
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Requested
    );
    assert_eq!(h.workflow(&wf).await.failed_count, 0);
    // Before the delay ends nothing is launched; at its end the monitor
    // claims and launches attempt 2.
    assert_eq!(h.tick(next - 1).await.retries_launched, 0);
    assert_eq!(h.launcher.launches_of("flaky").len(), 1);
    assert_eq!(h.tick(next).await.retries_launched, 1);
    let second = h.launcher.payload("flaky", 1);
    assert_eq!((second.attempt, second.launch), (2, 1));
    // A report of attempt 1 (its token) is refused now.
    let stale = h.attempt_event(&wf, "flaky", "COMPLETED", 0);
    assert!(h.engine.apply_event(&stale).await.is_err());
    // Attempt 2 fails: three times the interval.
    let t1 = h.now();
    fail(&h, &wf, "flaky", 1, "Busy").await;
    let a = h.activity(&wf, "flaky").await;
    let next = a.timing.next_attempt_epoch.unwrap();
    assert!((t1 + 6..=t1 + 7).contains(&next), "{next} vs {t1}");
    h.tick(next).await;
    // Attempt 3 runs and completes; only then is the dependent released.
    h.attempt("flaky", 2).running().await.unwrap();
    let run = h.attempt_event(&wf, "flaky", "RUNNING", 2);
    h.engine.apply_event(&run).await.unwrap();
    let done = h.attempt_event(&wf, "flaky", "COMPLETED", 2);
    assert_eq!(
        h.engine.apply_event(&done).await.unwrap(),
        Applied::State(ActivityState::Completed)
    );
    let a = h.activity(&wf, "flaky").await;
    assert_eq!((a.state, a.attempt.number), (ActivityState::Completed, 3));
    let failures: Vec<_> = a
        .trail
        .history
        .iter()
        .filter(|e| e.attempt.is_some())
        .collect();
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0].error.as_deref(), Some("Busy: try later"));
    assert_eq!(
        failures
            .iter()
            .map(|e| e.next_attempt_epoch.unwrap() - e.at_epoch)
            .collect::<Vec<_>>(),
        vec![2, 6]
    );
    assert_eq!(h.launcher.launches_of("after").len(), 1, "released once");
    // Counted once, as COMPLETED: the retried failures are not ends.
    let group: whimbrel_core::model::CountGroup = h
        .store
        .get(
            &h.store.tables().activity_exec_dependency(),
            whimbrel_core::engine::counting::count_group_key(&wf, 0),
        )
        .await
        .unwrap()
        .expect("count group");
    assert_eq!(group.ended, vec!["flaky".to_string()]);
    assert_eq!((group.completed_count, group.failed_count), (1, 0));
}

#[tokio::test]
async fn a_no_retry_on_error_fails_at_once_and_the_last_attempt_is_terminal() {
    let h = Harness::new().await;
    h.register(
        "strict",
        flaky_plan(json!({"max_attempts": 3, "interval_seconds": 0, "no_retry_on": ["Fatal"]})),
    )
    .await;
    let wf = h.start("strict").await;
    assert_eq!(
        fail(&h, &wf, "flaky", 0, "Fatal: bad input").await,
        Applied::State(ActivityState::Failed)
    );
    assert_eq!(
        h.activity(&wf, "after").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);

    // Zero delay: the failing call launches the next attempt itself.
    let wf = h.start("strict").await;
    let before = h.launcher.launches_of("flaky").len();
    for i in 0..2 {
        assert_eq!(
            fail(&h, &wf, "flaky", before - 1 + i, "Busy").await,
            Applied::State(ActivityState::Queued)
        );
    }
    assert_eq!(h.launcher.launches_of("flaky").len(), before + 2);
    assert_eq!(
        fail(&h, &wf, "flaky", before + 1, "Busy").await,
        Applied::State(ActivityState::Failed),
        "attempt 3 of 3 is terminal"
    );
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert!(w.error.unwrap().contains("Busy"));
}

#[tokio::test]
async fn heartbeat_timeouts_are_retried_and_schedule_to_close_ends_for_good() {
    let h = Harness::new().await;
    h.register(
        "beats",
        json!({"activities": [{"name": "a", "lambda": "f", "heartbeat_timeout_seconds": 30,
            "schedule_to_close_seconds": 200,
            "retry": {"max_attempts": 5, "interval_seconds": 1, "retry_on": ["TIMED_OUT"]}}]}),
    )
    .await;
    let wf = h.start("beats").await;
    h.engine
        .apply_event(&h.attempt_event(&wf, "a", "RUNNING", 0))
        .await
        .unwrap();
    let a = h.activity(&wf, "a").await;
    let grace = h.config().report_grace_seconds;
    let report = h.tick(a.timing.due_epoch.unwrap() + grace).await;
    assert_eq!((report.retried, report.timed_out), (1, 0));
    let a = h.activity(&wf, "a").await;
    assert_eq!((a.state, a.attempt.number), (ActivityState::Queued, 2));
    let last = a.trail.history.last().unwrap();
    assert_eq!(last.transition, "TIMED_OUT");
    assert!(last.error.as_deref().unwrap().contains("heartbeat timeout"));
    // Launch attempt 2; it runs and goes quiet until schedule-to-close
    // (200 s from the first queue) passes: TIMED_OUT for good.
    h.tick(a.timing.next_attempt_epoch.unwrap()).await;
    h.engine
        .apply_event(&h.attempt_event(&wf, "a", "RUNNING", 1))
        .await
        .unwrap();
    let first = a.timing.first_queued_epoch.unwrap();
    // It heartbeats (so the heartbeat deadline is past 200 s) ...
    h.clock.set(first + 195);
    assert_eq!(
        h.attempt("a", 1).heartbeat().await.unwrap(),
        ActivityState::Running
    );
    let report = h.tick(first + 200 + grace).await;
    assert_eq!((report.timed_out, report.retried), (1, 0));
    let a = h.activity(&wf, "a").await;
    assert_eq!(a.state, ActivityState::TimedOut);
    assert!(a.outcome.error.unwrap().contains("schedule-to-close"));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}

#[tokio::test]
async fn workers_claim_each_task_once_and_the_result_is_stored() {
    let h = Harness::new().await;
    let acts: Vec<_> = (0..6)
        .map(|i| json!({"name": format!("t{i}"), "task_list": "pool", "input": i}))
        .collect();
    h.register("tasks", json!({"activities": acts})).await;
    let wf = h.start("tasks").await;
    assert_eq!(h.launcher.launch_count(), 0, "nothing is invoked");
    let t = h.activity(&wf, "t0").await;
    assert_eq!((t.state, t.attempt.number), (ActivityState::Queued, 1));
    assert!(t
        .runner
        .task_list_shard
        .as_deref()
        .unwrap()
        .starts_with("pool#"));
    let engine = Engine::with_environment(h.store.clone(), (), h.config(), h.clock.clone());
    let worker = |name: &str| Worker::new(engine.clone(), "pool", name, WorkerOptions::default());
    let (w1, w2, w3) = (worker("w1"), worker("w2"), worker("w3"));
    // Three workers race for the same six tasks: every claim is distinct.
    let mut claimed = std::collections::HashSet::new();
    for _ in 0..2 {
        let (a, b, c) = tokio::join!(w1.claim(), w2.claim(), w3.claim());
        for x in [a, b, c] {
            let x = x.unwrap().expect("a task for each worker");
            assert!(
                claimed.insert(x.payload.activity_exec_id.clone()),
                "claimed twice"
            );
            x.completed(json!({"n": x.payload.input})).await.unwrap();
        }
    }
    assert_eq!(claimed.len(), 6);
    assert!(w1.claim().await.unwrap().is_none(), "the list is drained");
    let t = h.activity(&wf, "t0").await;
    assert_eq!(t.state, ActivityState::Running, "claims make it RUNNING");
    assert!(t.runner.worker.is_some() && t.runner.task_list_shard.is_none());
    // No stream here: the monitor finds the COMPLETED rows in flight when
    // the start-to-close deadline comes, and applies them (a report
    // written before a deadline decides).
    let mut due = 0;
    for i in 0..6 {
        due = due.max(
            h.activity(&wf, &format!("t{i}"))
                .await
                .timing
                .due_epoch
                .unwrap(),
        );
    }
    let report = h.tick(due + h.config().report_grace_seconds).await;
    assert_eq!((report.reports_applied, report.timed_out), (6, 0));
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Completed);
    let result = w.result.expect("result stored");
    for i in 0..6 {
        assert_eq!(result[format!("t{i}")], json!({"n": i}));
    }
    assert_eq!(
        h.engine.workflow_result(&wf, "tasks").await.unwrap(),
        Some(result)
    );
}

#[tokio::test]
async fn a_dead_worker_is_caught_by_the_heartbeat_and_the_task_is_claimed_again() {
    let h = Harness::new().await;
    h.register(
        "one",
        json!({"activities": [{"name": "t", "task_list": "solo", "heartbeat_timeout_seconds": 20,
            "retry": {"max_attempts": 2, "interval_seconds": 0}}]}),
    )
    .await;
    let wf = h.start("one").await;
    let engine = Engine::with_environment(h.store.clone(), (), h.config(), h.clock.clone());
    let w = Worker::new(engine, "solo", "doomed", WorkerOptions::default());
    let first = w.claim().await.unwrap().expect("claimed");
    // The worker dies: no heartbeat. Its claim stamped the worker's clock,
    // which the engine does not trust: at the first look it counts the
    // heartbeat from then (docs/design.md § 3.10). One timeout later the
    // monitor times the attempt out and queues attempt 2 for a worker
    // (zero delay).
    let grace = h.config().report_grace_seconds;
    let due = h.activity(&wf, "t").await.timing.due_epoch.unwrap();
    let report = h.tick(due + grace).await;
    assert_eq!(report.retried, 0);
    let armed = h.activity(&wf, "t").await.timing;
    assert_eq!(armed.heartbeat_seen_epoch, Some(due + grace));
    assert_eq!(armed.due_epoch, Some(due + grace + 20));
    let report = h.tick(due + grace + 20 + grace).await;
    assert_eq!(report.retried, 1);
    let second = w.claim().await.unwrap().expect("claimed again");
    assert_eq!((second.payload.attempt, first.payload.attempt), (2, 1));
    // The dead attempt's late report is refused; the live one completes.
    assert!(
        first.completed(json!("late")).await.is_ok(),
        "the row is written"
    );
    assert_eq!(h.activity(&wf, "t").await.state, ActivityState::Running);
    second.completed(json!("ok")).await.unwrap();
    // No stream here: the monitor applies the report it finds in flight
    // once a deadline passes (the first look arms the second claim's
    // heartbeat, as above).
    for _ in 0..2 {
        let due = h.activity(&wf, "t").await.timing.due_epoch.unwrap();
        h.tick(due + grace).await;
    }
    let t = h.activity(&wf, "t").await;
    assert_eq!((t.state, t.attempt.number), (ActivityState::Completed, 2));
    assert_eq!(t.outcome.output, Some(json!("ok")));
}

#[tokio::test]
async fn an_execution_timeout_fails_the_workflow_and_cancels_what_is_left() {
    let h = Harness::new().await;
    h.register(
        "slow",
        json!({"execution_timeout_seconds": 100, "activities": [
            {"name": "a", "lambda": "f"},
            {"name": "b", "lambda": "f", "depends_on": ["a"]},
            {"name": "c", "task_list": "nobody"}
        ]}),
    )
    .await;
    let wf = h.start("slow").await;
    h.engine
        .apply_event(&h.attempt_event(&wf, "a", "RUNNING", 0))
        .await
        .unwrap();
    let w = h.workflow(&wf).await;
    let deadline = w.start_time_epoch + 100;
    assert_eq!(w.due_epoch, Some(deadline));
    assert_eq!(h.tick(deadline - 1).await.workflows_timed_out, 0);
    assert_eq!(h.tick(deadline).await.workflows_timed_out, 1);
    let w = h.workflow(&wf).await;
    assert_eq!(w.state, WorkflowState::Failed);
    assert!(
        w.error.unwrap().contains("execution timeout"),
        "reason named"
    );
    assert_eq!(w.due_epoch, None, "the cancel sweep finished");
    assert_eq!(
        (
            h.activity(&wf, "a").await.state,
            h.activity(&wf, "b").await.state,
            h.activity(&wf, "c").await.state
        ),
        (
            ActivityState::CancelledRunning,
            ActivityState::Cancelled,
            ActivityState::Cancelled
        )
    );
    // The running one's late COMPLETED releases nothing.
    h.engine
        .apply_event(&h.attempt_event(&wf, "a", "COMPLETED", 0))
        .await
        .unwrap();
    assert_eq!(h.launcher.launches_of("b").len(), 0);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
}

/// A heartbeat the monitor reads late in its tick counts from the read,
/// not the tick's start (design.md § 3.10; simulation seed 5574). The
/// client's clock is 25 s ahead; the tick started at `tick`, and its read
/// came 29 s later, just after the heartbeat. Counted from the tick's
/// start the deadline was `tick + 30`, before the heartbeat was 30 s old.
#[tokio::test]
async fn a_heartbeat_read_late_in_a_tick_is_seen_at_the_read() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use whimbrel_core::engine::decide;
    use whimbrel_core::store::UpdateRequest;
    let h = Harness::new().await;
    let plan = json!({"activities": [
        {"name": "beating", "lambda": "f", "heartbeat_timeout_seconds": 30, "timeout_seconds": 3600},
    ]});
    h.register("late", plan).await;
    let wf = h.start("late").await;
    h.deliver(&[h.event(&wf, "beating", "RUNNING")], 1).await;
    let start = h.activity(&wf, "beating").await.timing.start_time_epoch;
    let tick = start + 31;
    let read = tick + 29;
    // Written at `read - 1` by a clock 25 s ahead.
    let id = whimbrel_core::ids::activity_exec_id(&wf, "beating");
    let beat = UpdateRequest::new(
        h.store.tables().activity_exec(),
        decide::activity_key(&id, &wf),
    )
    .set(
        "heartbeat_time_epoch",
        AttributeValue::N((read - 1 + 25).to_string()).into(),
    );
    h.clients.update(beat).await.expect("heartbeat");
    h.clock.freeze(read);
    let report = h.engine.monitor_tick(tick).await.expect("tick");
    h.clock.set(read);
    assert_eq!(report.timed_out, 0);
    let exec = h.activity(&wf, "beating").await;
    assert_eq!(
        exec.timing.heartbeat_seen_epoch,
        Some(read),
        "seen when read"
    );
    assert_eq!(exec.timing.due_epoch, Some(read + 30));
}
