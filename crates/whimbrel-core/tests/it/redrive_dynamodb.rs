//! Redrive against a real DynamoDB API and its stream (DynamoDB Local,
//! started by the tests): a row whose stream record the event source
//! mapping gave up on takes effect when the redrive function gets the
//! on-failure record from the queue (design.md § 8.6), and a record it
//! cannot apply stays on the queue (a batch item failure).

use crate::common::{sdk_config, Harness};
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::ids;
use whimbrel_core::redrive::{
    self, BatchInfo, Condition, DynamoDbStreamReader, OnFailureRecord, RequestContext,
    ResponseContext,
};

/// The stream of `table` and its records' (sequence number, keys), in
/// stream order (DynamoDB Local has one shard per table here).
async fn stream_records(table: &str) -> (String, String, Vec<(String, Value)>) {
    let sdk = sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let arn = ddb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .table()
        .and_then(|t| t.latest_stream_arn())
        .unwrap()
        .to_string();
    let stream = streams
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap();
    let shard = stream.stream_description().unwrap().shards()[0]
        .shard_id()
        .unwrap()
        .to_string();
    let mut iterator = streams
        .get_shard_iterator()
        .stream_arn(&arn)
        .shard_id(&shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap()
        .shard_iterator()
        .map(str::to_string);
    let (mut records, mut empty) = (Vec::new(), 0);
    while let Some(i) = iterator.take() {
        let page = streams
            .get_records()
            .shard_iterator(i)
            .send()
            .await
            .unwrap();
        for r in page.records() {
            let change = r.dynamodb().unwrap();
            let record = redrive::lambda_record(r, &arn, "us-east-1");
            let keys = serde_json::to_value(&record).unwrap()["dynamodb"]["Keys"].clone();
            records.push((change.sequence_number().unwrap().to_string(), keys));
        }
        empty = if page.records().is_empty() {
            empty + 1
        } else {
            0
        };
        if empty < 2 {
            iterator = page.next_shard_iterator().map(str::to_string);
        }
    }
    (arn, shard, records)
}

/// The on-failure record Lambda sends for the records `first..=last` of
/// the shard (`count` of them), given up after its retries.
fn on_failure(arn: &str, shard: &str, first: &str, last: &str, count: usize) -> OnFailureRecord {
    OnFailureRecord {
        request_context: RequestContext {
            request_id: "r-1".into(),
            function_arn: "arn:aws:lambda:us-east-1:000000000000:function:f".into(),
            condition: Condition::RetryAttemptsExhausted,
            approximate_invoke_count: 11,
        },
        response_context: ResponseContext {
            status_code: 200,
            executed_version: "$LATEST".into(),
            function_error: Some("Unhandled".into()),
        },
        version: "1.0".into(),
        timestamp: "2026-11-26T00:00:00.000Z".into(),
        batch_info: BatchInfo {
            start_sequence_number: first.into(),
            end_sequence_number: last.into(),
            batch_size: count,
            shard_id: shard.into(),
            approximate_arrival_of_first_record: "2026-11-26T00:00:00Z".into(),
            approximate_arrival_of_last_record: "2026-11-26T00:00:00Z".into(),
            stream_arn: arn.into(),
        },
    }
}

/// The SQS event the redrive function gets: one message per body.
fn sqs_event(bodies: &[String]) -> Value {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            json!({"messageId": format!("m{i}"), "receiptHandle": format!("h{i}"), "body": b,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1795306411000",
                    "SenderId": "AIDA", "ApproximateFirstReceiveTimestamp": "1795306411000"},
                "messageAttributes": {}, "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:StreamFailureQueue",
                "awsRegion": "us-east-1"})
        })
        .collect();
    json!({ "Records": records })
}

/// The message ids the redrive function asks SQS to deliver again.
async fn redrive_failures(h: &Harness, bodies: &[String]) -> Vec<String> {
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk_config().await);
    let reader = DynamoDbStreamReader::new(streams, "us-east-1".into());
    let (response, _) = redrive::given_up_batches(&h.engine, &reader, &sqs_event(bodies))
        .await
        .unwrap();
    response
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect()
}

/// Fresh tables with workflow `w` registered: one activity `a`.
async fn one_activity() -> Harness {
    let h = Harness::new().await;
    h.register(
        "w",
        json!({"activities": [{"name": "a", "lambda": "noop"}]}),
    )
    .await;
    h
}

/// A request whose record was given up before any exec existed (nothing
/// else would ever start it) starts its workflow once redriven; a second
/// redrive of the same record changes nothing.
#[tokio::test]
async fn a_request_the_mapping_gave_up_on_starts_its_workflow() {
    let h = one_activity().await;
    let req = h.request("w", None);
    h.put_request(&req).await;
    let wf = ids::workflow_exec_id("w", &req.workflow_request_id);
    let (arn, shard, records) = stream_records(&h.store.tables().workflow_request()).await;
    let (seq, _) = records.last().unwrap().clone();
    let body = serde_json::to_string(&on_failure(&arn, &shard, &seq, &seq, 1)).unwrap();
    assert!(redrive_failures(&h, std::slice::from_ref(&body))
        .await
        .is_empty());
    assert_eq!(
        h.workflow(&wf).await.state.as_str(),
        WorkflowState::Running.as_str()
    );
    assert_eq!(h.launcher.launches_of("a").len(), 1);
    assert!(redrive_failures(&h, &[body]).await.is_empty());
    assert_eq!(h.launcher.launches_of("a").len(), 1, "applied once");
}

/// A COMPLETED given up after RUNNING applied would otherwise wait for
/// start-to-close (up to 7 days): redriven, it completes the workflow.
#[tokio::test]
async fn a_given_up_completion_applies_when_redriven() {
    let h = one_activity().await;
    let wf = h.start("w").await;
    h.deliver(&[h.event(&wf, "a", "RUNNING")], 1).await;
    let done = h.event(&wf, "a", "COMPLETED");
    h.put_event(&done).await;
    let (arn, shard, records) = stream_records(&h.store.tables().activity_event()).await;
    let (seq, keys) = records.last().unwrap().clone();
    assert_eq!(
        keys["activity_event_id"]["S"],
        done.activity_event_id.as_str()
    );
    let body = serde_json::to_string(&on_failure(&arn, &shard, &seq, &seq, 1)).unwrap();
    assert!(redrive_failures(&h, &[body]).await.is_empty());
    assert_eq!(h.activity(&wf, "a").await.state, ActivityState::Completed);
    assert_eq!(
        h.workflow(&wf).await.state.as_str(),
        WorkflowState::Completed.as_str()
    );
}

/// What cannot be applied stays on the queue, each message on its own:
/// a range whose last record cannot be read back (gone from the stream),
/// a stream of another table, and a body that is not an on-failure
/// record. The good message beside them is done, though it names more
/// records than its range holds (the count is only logged: a range may
/// hold records the mapping's filter left out).
#[tokio::test]
async fn what_cannot_be_applied_is_delivered_again() {
    let h = one_activity().await;
    let req = h.request("w", None);
    h.put_request(&req).await;
    let (arn, shard, records) = stream_records(&h.store.tables().workflow_request()).await;
    let (seq, _) = records.last().unwrap().clone();
    let good = on_failure(&arn, &shard, &seq, &seq, 3);
    // A range whose last record is never read back (gone from the stream).
    let short = on_failure(&arn, &shard, &seq, &format!("{seq}0"), 2);
    let mut other = good.clone();
    other.batch_info.stream_arn = arn.replace("workflow_request", "workflow_plan");
    let bodies = [&good, &short, &other].map(|r| serde_json::to_string(r).unwrap());
    let mut bodies = bodies.to_vec();
    bodies.push("{\"not\": \"an on-failure record\"}".into());
    assert_eq!(redrive_failures(&h, &bodies).await, vec!["m1", "m2", "m3"]);
    let wf = ids::workflow_exec_id("w", &req.workflow_request_id);
    assert_eq!(
        h.workflow(&wf).await.state.as_str(),
        WorkflowState::Running.as_str()
    );
}
