//! The activity helper that serves an activity function
//! (`whimbrel_core::activity::run`): one invoked attempt reports RUNNING,
//! runs the handler, and reports what it returned; a cancel seen at a
//! heartbeat stops the handler and is acknowledged. Against DynamoDB
//! Local, with the rows the helper writes applied by the engine.

use std::time::Duration;

use serde_json::{json, Value};
use whimbrel_core::activity::Outcome;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::ids;
use whimbrel_core::model::ActivityEvent;
use whimbrel_core::store::{KeyCond, INDEX_EVENTS_BY_ACTIVITY};

use crate::common::{self, Harness};

/// Every event row of activity `id`, read back (the index gives keys).
async fn rows_of(h: &Harness, id: &str) -> Vec<ActivityEvent> {
    #[derive(serde::Deserialize)]
    struct Key {
        activity_event_id: String,
    }
    let key = KeyCond {
        hash: ("activity_exec_id".into(), common::sv(id)),
        range: None,
    };
    let table = h.store.tables().activity_event();
    let keys: Vec<Key> = h
        .store
        .query(&table, Some(INDEX_EVENTS_BY_ACTIVITY), key)
        .await
        .unwrap();
    let mut rows = Vec::new();
    for k in keys {
        rows.push(h.event_row(id, &k.activity_event_id).await);
    }
    rows.sort_by(|a, b| a.when_epoch.partial_cmp(&b.when_epoch).unwrap());
    rows
}

/// The row of `transition` among `rows`.
fn row<'a>(rows: &'a [ActivityEvent], transition: &str) -> &'a ActivityEvent {
    rows.iter()
        .find(|r| r.transition == transition)
        .unwrap_or_else(|| panic!("no {transition} row among {}", rows.len()))
}

#[tokio::test]
async fn an_attempt_reports_running_then_the_handlers_output() {
    let h = Harness::new().await;
    let plan =
        json!({"activities": [{"name": "hello", "lambda": "noop", "input": {"name": "Ada"}}]});
    h.register("greet", plan).await;
    let wf = h.start("greet").await;
    let greet = |task: whimbrel_core::plan::LaunchPayload| async move {
        let name = task.input["name"].as_str().ok_or("no name")?.to_string();
        Ok::<Value, String>(json!({"greeting": format!("Hello, {name}!")}))
    };
    let outcome = h.attempt("hello", 0).attempt(&greet).await.unwrap();
    assert_eq!(outcome, Outcome::Completed);
    let id = ids::activity_exec_id(&wf, "hello");
    let rows = rows_of(&h, &id).await;
    assert_eq!(rows.len(), 2, "RUNNING and COMPLETED, nothing else");
    for r in ["RUNNING", "COMPLETED"] {
        h.engine.apply_event(row(&rows, r)).await.unwrap();
    }
    let a = h.activity(&wf, "hello").await;
    assert_eq!(a.state, ActivityState::Completed);
    assert_eq!(a.outcome.output, Some(json!({"greeting": "Hello, Ada!"})));
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn a_handlers_error_is_reported_failed_with_its_reason() {
    let h = Harness::new().await;
    h.register(
        "greet",
        json!({"activities": [{"name": "hello", "lambda": "noop"}]}),
    )
    .await;
    let wf = h.start("greet").await;
    let greet = |task: whimbrel_core::plan::LaunchPayload| async move {
        let name = task.input["name"]
            .as_str()
            .ok_or("input.name: a string is required")?;
        Ok::<Value, String>(json!(name))
    };
    let outcome = h.attempt("hello", 0).attempt(&greet).await.unwrap();
    assert_eq!(outcome, Outcome::Failed);
    let rows = rows_of(&h, &ids::activity_exec_id(&wf, "hello")).await;
    let failed = row(&rows, "FAILED");
    assert_eq!(
        failed.error.as_deref(),
        Some("input.name: a string is required")
    );
    assert_eq!(failed.attempt, Some(1));
}

/// The handler runs until a heartbeat finds the attempt CANCELLED_RUNNING:
/// it is stopped (its future dropped), the cancel acknowledged with the
/// attempt's token, and that acknowledgement ends the activity CANCELLED.
#[tokio::test]
async fn a_cancel_stops_the_handler_and_is_acknowledged() {
    let h = Harness::new().await;
    // A 3 s heartbeat timeout: the helper beats every second.
    let plan = json!({"activities": [{"name": "slow", "lambda": "noop",
        "heartbeat_enabled": true, "heartbeat_timeout_seconds": 3}]});
    h.register("c", plan).await;
    let wf = h.start("c").await;
    let id = ids::activity_exec_id(&wf, "slow");
    let attempt = h.attempt("slow", 0);
    let forever = |_| async {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok::<Value, String>(json!("never"))
    };
    let run = attempt.attempt(&forever);
    let cancel = async {
        // Once its RUNNING row is in, apply it and cancel the workflow.
        let running = loop {
            if let Some(r) = rows_of(&h, &id).await.into_iter().next() {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        h.engine.apply_event(&running).await.unwrap();
        h.engine
            .apply_event(&h.event(&wf, "slow", "CANCEL"))
            .await
            .unwrap();
        assert_eq!(
            h.activity(&wf, "slow").await.state,
            ActivityState::CancelledRunning
        );
    };
    let (outcome, ()) =
        tokio::time::timeout(Duration::from_secs(20), async { tokio::join!(run, cancel) })
            .await
            .expect("the cancel stops the handler within a few heartbeats");
    assert_eq!(outcome.unwrap(), Outcome::Abandoned);
    let rows = rows_of(&h, &id).await;
    let ack = rows
        .iter()
        .find(|r| r.transition == "CANCEL" && r.attempt_token.is_some())
        .expect("the attempt's own CANCEL");
    h.engine.apply_event(ack).await.unwrap();
    assert_eq!(
        h.activity(&wf, "slow").await.state,
        ActivityState::Cancelled
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
}
