//! Redrive (design.md § 9.4), against DynamoDB Local: a FAILED workflow
//! goes back to RUNNING with the same exec id; its COMPLETED activities
//! keep their outputs and never run again, the failed one gets its next
//! attempt and the cancelled one waits for it; the history records the
//! redrive; a request redrives once; a redrive that died after its first
//! write is finished by the monitor; one of an unfinished workflow is
//! refused with its reason.

use crate::common::Harness;
use serde_json::json;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::{Applied, EngineError};
use whimbrel_core::model::WorkflowRequest;

/// `a` → `b` → `c`, and `d` alone.
fn chain() -> serde_json::Value {
    json!({"activities": [
        {"name": "a", "lambda": "f"},
        {"name": "b", "lambda": "f", "depends_on": ["a"]},
        {"name": "c", "lambda": "f", "depends_on": ["b"]},
        {"name": "d", "lambda": "f"},
    ]})
}

fn redrive(h: &Harness, wf: &str) -> WorkflowRequest {
    WorkflowRequest {
        redrive_workflow_exec_id: Some(wf.to_string()),
        ..h.request("chain", None)
    }
}

/// `chain` with `a` and `d` COMPLETED, `b` FAILED and `c` CANCELLED.
async fn failed_chain(h: &Harness) -> String {
    h.register("chain", chain()).await;
    let wf = h.start("chain").await;
    h.run_to_completion(&wf, "a").await;
    h.run_to_completion(&wf, "d").await;
    for t in ["RUNNING", "FAILED"] {
        h.engine.apply_event(&h.event(&wf, "b", t)).await.unwrap();
    }
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    assert_eq!(h.activity(&wf, "c").await.state, ActivityState::Cancelled);
    wf
}

#[tokio::test]
async fn a_redrive_reruns_only_what_did_not_complete_and_the_workflow_completes() {
    let h = Harness::new().await;
    let wf = failed_chain(&h).await;
    let a_before = h.activity(&wf, "a").await;
    let req = redrive(&h, &wf);
    let applied = h.engine.redrive_workflow(&req).await.unwrap();
    assert_eq!(applied, Applied::Workflow(WorkflowState::Running));
    let running = h.workflow(&wf).await;
    assert_eq!(running.state, WorkflowState::Running);
    assert_eq!(
        (running.error.clone(), running.redriving.clone()),
        (None, None)
    );
    assert_eq!(running.redrive_count, Some(1));
    assert_eq!(
        h.activity(&wf, "a").await,
        a_before,
        "a COMPLETED item is untouched"
    );
    let b = h.activity(&wf, "b").await;
    assert_eq!((b.state, b.attempt.number), (ActivityState::Queued, 2));
    let entry = b
        .trail
        .history
        .iter()
        .find(|e| e.event_id.starts_with("redrive:"));
    assert_eq!(
        entry.map(|e| e.event_id.clone()),
        Some(format!("redrive:{}", req.workflow_request_id))
    );
    assert_eq!(h.activity(&wf, "c").await.state, ActivityState::Requested);
    assert_eq!(h.launcher.launches_of("b").len(), 2);
    // The same request again changes nothing.
    h.engine.redrive_workflow(&req).await.unwrap();
    assert_eq!(h.launcher.launches_of("b").len(), 2);
    h.run_to_completion(&wf, "b").await;
    h.run_to_completion(&wf, "c").await;
    let done = h.workflow(&wf).await;
    assert_eq!(done.state, WorkflowState::Completed);
    assert_eq!(done.completed_count, 4);
    assert_eq!(h.launcher.launches_of("a").len(), 1, "a never ran again");
    assert_eq!(h.launcher.launches_of("d").len(), 1, "d never ran again");
    // A COMPLETED workflow is not redriven; the old request is done.
    assert_eq!(
        h.engine.redrive_workflow(&req).await.unwrap(),
        Applied::Workflow(WorkflowState::Completed)
    );
    let again = h.engine.redrive_workflow(&redrive(&h, &wf)).await;
    assert!(matches!(again, Err(EngineError::Rejected(_))), "{again:?}");
}

#[tokio::test]
async fn a_redrive_that_died_after_its_first_write_is_finished_by_the_monitor() {
    let h = Harness::new().await;
    let wf = failed_chain(&h).await;
    let req = redrive(&h, &wf);
    let failed = h.workflow(&wf).await;
    let first = whimbrel_core::engine::decide::redrive::redrive_update(
        h.store.tables(),
        &failed,
        &req.workflow_request_id,
        h.now(),
        &h.config(),
    );
    h.store.update(first).await.unwrap();
    assert_eq!(h.activity(&wf, "b").await.state, ActivityState::Failed);
    let due = h
        .workflow(&wf)
        .await
        .due_epoch
        .expect("the redrive's marker");
    let report = h.tick(due).await;
    assert_eq!((report.redrives_finished, report.restarted), (1, 0));
    let b = h.activity(&wf, "b").await;
    assert_eq!((b.state, b.attempt.number), (ActivityState::Queued, 2));
    assert_eq!(h.workflow(&wf).await.redriving, None);
    h.run_to_completion(&wf, "b").await;
    h.run_to_completion(&wf, "c").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn a_running_workflow_is_not_redriven() {
    let h = Harness::new().await;
    h.register("chain", chain()).await;
    let wf = h.start("chain").await;
    let e = h.engine.redrive_workflow(&redrive(&h, &wf)).await;
    match e {
        Err(EngineError::Rejected(why)) => {
            assert!(why.contains("only a FAILED or CANCELLED one"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_redriven_activity_that_fails_again_cancels_its_dependents_again() {
    let h = Harness::new().await;
    let wf = failed_chain(&h).await;
    h.engine.redrive_workflow(&redrive(&h, &wf)).await.unwrap();
    // `b` fails again: `c` is cancelled again (the same engine step id as
    // in the first generation, `upstream-ended:b`), and the workflow fails.
    for t in ["RUNNING", "FAILED"] {
        h.engine.apply_event(&h.event(&wf, "b", t)).await.unwrap();
    }
    assert_eq!(h.activity(&wf, "c").await.state, ActivityState::Cancelled);
    let failed = h.workflow(&wf).await;
    assert_eq!(failed.state, WorkflowState::Failed);
    assert_eq!(
        (
            failed.completed_count,
            failed.failed_count,
            failed.cancelled_count
        ),
        (2, 1, 1)
    );
    // A second redrive: generation 2, and this time it completes.
    h.engine.redrive_workflow(&redrive(&h, &wf)).await.unwrap();
    assert_eq!(h.workflow(&wf).await.redrive_count, Some(2));
    h.run_to_completion(&wf, "b").await;
    h.run_to_completion(&wf, "c").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    assert_eq!(h.launcher.launches_of("b").len(), 3);
}

/// Fail every attempt of activity `x` of `wf` until the workflow ends,
/// from its launch `launch` on, each report with an event id and an error
/// of `id_bytes` bytes (0: the usual ones); returns the next launch's index.
async fn fail_until_ended(h: &Harness, wf: &str, mut launch: usize, id_bytes: usize) -> usize {
    while h.workflow(wf).await.state == WorkflowState::Running {
        for t in ["RUNNING", "FAILED"] {
            let mut ev = h.attempt_event(wf, "x", t, launch);
            if id_bytes > 0 {
                let own = format!("{}::{launch}-{t}-", ev.activity_exec_id);
                let pad = "e".repeat(id_bytes - own.len());
                ev.activity_event_id = format!("{own}{pad}");
                ev.error = (t == "FAILED").then(|| "r".repeat(id_bytes));
            }
            let applied = h.engine.apply_event(&ev).await;
            assert!(applied.is_ok(), "launch {launch} {t}: {applied:?}");
        }
        launch += 1;
    }
    launch
}

/// `x` with a policy of `attempts` attempts and no delay.
async fn failing_x(h: &Harness, attempts: u32) -> String {
    let retry = json!({"max_attempts": attempts, "interval_seconds": 0});
    let plan = json!({"activities": [{"name": "x", "lambda": "f", "retry": retry}]});
    h.register("full", plan).await;
    h.start("full").await
}

fn redrive_of(h: &Harness, wf: &str) -> WorkflowRequest {
    WorkflowRequest {
        redrive_workflow_exec_id: Some(wf.to_string()),
        ..h.request("full", None)
    }
}

/// Issue 42 D (docs/limits.md § 1, history): an activity whose 100
/// attempts all fail, each report with the longest event id (2,048 bytes)
/// and error the engine admits, runs to its end: every report is applied
/// and the workflow FAILS. Each history entry keeps at most 128 bytes of
/// its event id (a longer one as its start and digest), so an attempt's
/// entries are bounded whatever the reporter writes.
#[tokio::test]
async fn the_most_attempts_with_the_longest_ids_run_to_their_end() {
    let h = Harness::new().await;
    let wf = failing_x(&h, 100).await;
    assert_eq!(fail_until_ended(&h, &wf, 0, 2_048).await, 100);
    let x = h.activity(&wf, "x").await;
    assert_eq!((x.state, x.attempt.number), (ActivityState::Failed, 100));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    // Within what the start kept room for: entries per attempt, bytes
    // per entry.
    use whimbrel_core::history::{self as hist, HISTORY_ID_BYTES};
    assert!(x.trail.history.len() <= 100 * hist::ATTEMPT_HISTORY_ENTRIES);
    assert!(x
        .trail
        .history
        .iter()
        .all(|e| e.event_id.len() <= HISTORY_ID_BYTES));
    let (size, _) = x.item_bytes_over(0);
    assert!(
        size <= 4_096 + hist::generation_history_bytes(100),
        "{size}"
    );
}

/// Issue 42 D (docs/limits.md § 5, redrives): a workflow is redriven at
/// most 100 times (each redrive adds a generation of history to what it
/// runs again, and its request id to the workflow item). The 100th runs
/// to its end; the 101st is refused with the reason, writing nothing.
#[tokio::test]
async fn the_hundredth_redrive_runs_and_the_next_is_refused() {
    let h = Harness::new().await;
    let wf = failing_x(&h, 1).await;
    let mut launch = fail_until_ended(&h, &wf, 0, 0).await;
    for generation in 1..=100 {
        let applied = h.engine.redrive_workflow(&redrive_of(&h, &wf)).await;
        assert_eq!(
            applied.unwrap(),
            Applied::Workflow(WorkflowState::Running),
            "redrive {generation}"
        );
        launch = fail_until_ended(&h, &wf, launch, 0).await;
    }
    assert_eq!(h.workflow(&wf).await.redrive_count, Some(100));
    match h.engine.redrive_workflow(&redrive_of(&h, &wf)).await {
        Err(EngineError::Rejected(why)) => assert!(why.contains("at most 100 redrives"), "{why}"),
        other => panic!("the 101st redrive: {other:?}"),
    }
    let still = h.workflow(&wf).await;
    assert_eq!(
        (still.state, still.redrive_count),
        (WorkflowState::Failed, Some(100))
    );
}
