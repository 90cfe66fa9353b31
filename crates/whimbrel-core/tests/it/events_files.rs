//! The handlers fed with every sample event in `events/`, against DynamoDB
//! Local started by the test, with the default `whimbrel_` tables.

use crate::common;

use crate::common::{counts, failures, Harness};
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::handlers;

fn event(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../events")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// (applied, skipped, rejected, retried, parked), as [`counts`] gives them.
type Counts = (u64, u64, u64, u64, u64);

fn summary(applied: u64, skipped: u64, rejected: u64, retried: u64) -> Counts {
    (applied, skipped, rejected, retried, 0)
}

fn parked(n: u64) -> Counts {
    (n, 0, 0, 0, n)
}

#[tokio::test]
async fn every_sample_event_is_handled_as_documented() {
    let h = Harness::with_prefix("whimbrel_").await;
    let e = &h.engine;
    let plan: Vec<Value> = (0..8)
        .map(|i| json!({"name": format!("count-{i}"), "lambda": "wordcount-count", "heartbeat_timeout_seconds": 30}))
        .chain([json!({"name": "merge", "lambda": "wordcount-merge",
            "depends_on": (0..8).map(|i| format!("count-{i}")).collect::<Vec<_>>()})])
        .collect();
    h.register("wordcount", json!({"version": 1, "activities": plan}))
        .await;

    // Nothing exists yet: only rejections and skips, never a retry.
    let cases: &[(&str, Counts)] = &[
        ("workflow-request-malformed.json", summary(0, 0, 1, 0)),
        ("workflow-request-manual.json", summary(0, 1, 0, 0)),
        ("workflow-request-modify.json", summary(0, 1, 0, 0)),
    ];
    for (file, want) in cases {
        let (resp, got) = handlers::workflow_requests(e, &event(file)).await.unwrap();
        assert_eq!(&counts(&got), want, "{file}");
        assert!(failures(&resp).is_empty(), "{file}");
    }
    let cases: &[(&str, Counts)] = &[
        (
            "activity-event-unknown-transition.json",
            summary(0, 0, 1, 0),
        ),
        ("activity-event-foreign-table.json", summary(0, 0, 1, 0)),
        ("activity-event-modify.json", summary(0, 1, 0, 0)),
        // malformed + foreign + MODIFY + RUNNING of an unknown activity
        ("activity-event-mixed-batch.json", summary(0, 1, 3, 0)),
        ("activity-event-running.json", summary(0, 0, 1, 0)),
    ];
    for (file, want) in cases {
        let (resp, got) = handlers::activity_events(e, &event(file)).await.unwrap();
        assert_eq!(&counts(&got), want, "{file}");
        assert!(failures(&resp).is_empty(), "{file}");
    }
    // An activity event sent to the workflow-request function: wrong table.
    let (_, got) = handlers::workflow_requests(e, &event("activity-event-running.json"))
        .await
        .unwrap();
    assert_eq!(counts(&got), summary(0, 0, 1, 0));

    // The request starts the workflow; its count-0 is the activity the
    // event files name.
    let (_, got) = handlers::workflow_requests(e, &event("workflow-request-insert.json"))
        .await
        .unwrap();
    assert_eq!(counts(&got), summary(1, 0, 0, 0));
    let req = event("workflow-request-insert.json");
    let rid = req["Records"][0]["dynamodb"]["NewImage"]["workflow_request_id"]["S"]
        .as_str()
        .unwrap()
        .to_string();
    let wf = whimbrel_core::ids::workflow_exec_id("wordcount", &rid);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
    assert_eq!(h.launcher.launch_count(), 8);
    assert_eq!(
        h.activity(&wf, "count-0").await.state,
        ActivityState::Queued
    );
    // A request redelivered changes nothing.
    handlers::workflow_requests(e, &event("workflow-request-insert.json"))
        .await
        .unwrap();
    assert_eq!(h.launcher.launch_count(), 8);

    // COMPLETED before RUNNING: parked on the activity, not a batch item
    // failure; applied as soon as RUNNING is.
    let (resp, got) = handlers::activity_events(e, &event("activity-event-completed.json"))
        .await
        .unwrap();
    assert_eq!(counts(&got), parked(1));
    assert!(failures(&resp).is_empty());
    let count0 = h.activity(&wf, "count-0").await;
    assert_eq!(count0.state, ActivityState::Queued);
    assert_eq!(count0.trail.parked.len(), 1);
    assert_eq!(count0.trail.parked[0].transition, "COMPLETED");
    let cases: &[(&str, Counts, ActivityState)] = &[
        // RUNNING, then the parked COMPLETED.
        (
            "activity-event-running.json",
            summary(1, 0, 0, 0),
            ActivityState::Completed,
        ),
        // A second RUNNING (another event id): the activity has ended.
        (
            "activity-event-existing-client.json",
            summary(0, 0, 1, 0),
            ActivityState::Completed,
        ),
        // The COMPLETED redelivered: already applied.
        (
            "activity-event-completed.json",
            summary(1, 0, 0, 0),
            ActivityState::Completed,
        ),
        (
            "activity-event-completed.json",
            summary(1, 0, 0, 0),
            ActivityState::Completed,
        ),
        (
            "activity-event-failed.json",
            summary(0, 0, 1, 0),
            ActivityState::Completed,
        ),
    ];
    for (file, want, state) in cases {
        let (resp, got) = handlers::activity_events(e, &event(file)).await.unwrap();
        assert_eq!(&counts(&got), want, "{file}");
        assert!(failures(&resp).is_empty(), "{file}");
        assert_eq!(h.activity(&wf, "count-0").await.state, *state, "{file}");
    }
    assert!(h.activity(&wf, "count-0").await.trail.parked.is_empty());
    let out = h.activity(&wf, "count-0").await.outcome.output;
    assert!(out.is_some(), "COMPLETED stored the output");

    // The Scheduled Event runs a monitor tick; a stream event is not one.
    let report = handlers::scheduled_event(e, &event("scheduled-event.json"))
        .await
        .unwrap();
    assert_eq!(report.timed_out, 0);
    assert!(
        handlers::scheduled_event(e, &event("activity-event-running.json"))
            .await
            .is_err()
    );
}

/// The redrive function's sample event: its records cannot be read back
/// here (no such shard), so the message is named for SQS to deliver again.
#[tokio::test]
async fn the_sample_redrive_event_is_delivered_again_when_its_records_cannot_be_read() {
    let h = Harness::with_prefix("whimbrel_").await;
    let streams = aws_sdk_dynamodbstreams::Client::new(&common::sdk_config().await);
    let reader = whimbrel_core::redrive::DynamoDbStreamReader::new(streams, "us-east-1".into());
    let (resp, done) = whimbrel_core::redrive::given_up_batches(
        &h.engine,
        &reader,
        &event("stream-redrive-given-up.json"),
    )
    .await
    .unwrap();
    let ids: Vec<&str> = resp
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(ids, ["0f6a4b2c-8d1e-4f3a-9b7c-5e2d1a0c9b8f"]);
    assert_eq!(done, vec![None]);
}

/// Whatever the payload, the handlers answer (a response or an invocation
/// error) and never panic; records they cannot read are rejected.
#[tokio::test]
async fn odd_payloads_never_panic() {
    let h = Harness::new().await;
    let e = &h.engine;
    let arn = format!(
        "arn:aws:dynamodb:us-east-1:000000000000:table/{}/stream/x",
        h.store.tables().activity_event()
    );
    let payloads = [
        json!(null),
        json!(42),
        json!("Records"),
        json!([]),
        json!({"Records": null}),
        json!({"Records": {}}),
        json!({"Records": [null, 1, "x", [], {}]}),
        json!({"Records": [{"eventName": "INSERT", "eventSourceARN": arn, "dynamodb": {}}]}),
        json!({"Records": [{"eventName": "INSERT", "eventSourceARN": arn, "dynamodb": {"NewImage": {"activity_exec_id": {"N": "1"}}}}]}),
        json!({"Records": [{"eventName": "INSERT", "eventSourceARN": arn, "dynamodb": {"NewImage": {
            "activity_event_id": {"S": "::"}, "activity_exec_id": {"S": ""}, "transition": {"S": ""}}}}]}),
        json!({"Records": [{"eventName": "INSERT", "eventSourceARN": arn, "dynamodb": {"NewImage": {
            "activity_event_id": {"S": "a::b"}, "activity_exec_id": {"S": "a"}, "transition": {"L": []},
            "when": {"S": "yesterday"}}}}]}),
        json!({"Records": [{"eventName": "INSERT", "eventSourceARN": "not an arn", "dynamodb": {"NewImage": {}}}]}),
    ];
    for p in &payloads {
        if let Ok((resp, sum)) = handlers::activity_events(e, p).await {
            assert!(
                failures(&resp).is_empty(),
                "{p}: nothing here may be retried"
            );
            assert_eq!(sum.applied, 0, "{p}");
        }
        if let Ok((resp, _)) = handlers::workflow_requests(e, p).await {
            assert!(failures(&resp).is_empty(), "{p}");
        }
        assert!(handlers::scheduled_event(e, p).await.is_err(), "{p}");
    }
}
