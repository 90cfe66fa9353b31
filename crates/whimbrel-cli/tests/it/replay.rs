//! `whimbrel replay` against DynamoDB Local: a workflow request whose
//! stream record the event source mapping gave up on (nothing applied it)
//! is started from its on-failure record, read back from the stream; a
//! second replay changes nothing.

use crate::common;

use std::process::{Command, Output};

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use serde_json::{json, Value};

fn whimbrel(endpoint: &str, prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_whimbrel"))
        .args(args)
        .env("WHIMBREL_ENDPOINT_URL", endpoint)
        .env("WHIMBREL_TABLE_PREFIX", prefix)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run whimbrel")
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test]
async fn replay_applies_given_up_records_from_the_stream() {
    let h = common::Harness::new().await;
    let endpoint = common::dynamodb_endpoint();
    let prefix = h
        .store
        .tables()
        .workflow_request()
        .replace("workflow_request", "");
    let run = |args: &[&str]| whimbrel(&endpoint, &prefix, args);
    // A task-list activity: nothing is invoked, so no Lambda is needed.
    h.register(
        "given-up",
        json!({"activities": [{"name": "only", "task_list": "replay-test"}]}),
    )
    .await;
    let out = ok(run(&["start", "given-up", "--input", "{\"n\": 1}"]));
    let exec = out
        .lines()
        .find_map(|l| l.strip_prefix("workflow_exec_id\t"))
        .expect("exec id")
        .to_string();
    // The request's stream record: where the on-failure record points.
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(whimbrel_core::http_client())
        .endpoint_url(&endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .load()
        .await;
    let table = h.store.tables().workflow_request();
    let arn = h
        .store
        .client()
        .unwrap()
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap()
        .table()
        .and_then(|t| t.latest_stream_arn())
        .unwrap()
        .to_string();
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk);
    let shard = streams
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap()
        .stream_description()
        .unwrap()
        .shards()[0]
        .shard_id()
        .unwrap()
        .to_string();
    let it = streams
        .get_shard_iterator()
        .stream_arn(&arn)
        .shard_id(&shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap();
    let records = streams
        .get_records()
        .shard_iterator(it.shard_iterator().unwrap())
        .send()
        .await
        .unwrap();
    let seq = records.records()[0]
        .dynamodb()
        .and_then(|d| d.sequence_number())
        .unwrap()
        .to_string();
    // Nothing applied the record: no workflow exec yet.
    let status = run(&["status", &exec]);
    assert!(!status.status.success());
    let record = json!({
        "requestContext": {"requestId": "r1", "functionArn": "arn:aws:lambda:us-east-1:000000000000:function:whimbrel-workflow-request",
                           "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "version": "1.0", "timestamp": "2026-11-22T00:13:49.717Z",
        "DDBStreamBatchInfo": {"shardId": shard, "startSequenceNumber": seq, "endSequenceNumber": seq,
                               "approximateArrivalOfFirstRecord": "2026-11-22T00:13:19Z",
                               "approximateArrivalOfLastRecord": "2026-11-22T00:13:19Z",
                               "batchSize": 1, "streamArn": arn}
    });
    let file = std::env::temp_dir().join(format!("whimbrel-replay-{}.jsonl", std::process::id()));
    std::fs::write(&file, format!("{record}\n")).unwrap();
    for round in 0..2 {
        let out = ok(run(&["replay", file.to_str().unwrap()]));
        let line: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(
            (line["records"].as_u64(), line["applied"].as_u64()),
            (Some(1), Some(1)),
            "round {round}: {out}"
        );
        let wf = h.workflow(&exec).await;
        assert_eq!(wf.state.as_str(), "RUNNING", "round {round}");
        assert_eq!(
            h.activity(&exec, "only").await.attempt.number,
            1,
            "queued once"
        );
    }
    // A record that is not an on-failure record is a clear error.
    std::fs::write(&file, "{\"hello\": 1}\n").unwrap();
    let bad = run(&["replay", file.to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not an on-failure record"));
}
