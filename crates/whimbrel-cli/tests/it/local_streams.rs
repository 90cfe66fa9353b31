//! The local DynamoDB's stream records as `whimbrel local` reads them (the
//! Rust SDK's GetRecords): rows holding empty maps must come back whole.
//! DynamoDB Local 3.1-3.3 writes `{"M": {}}` into stream records as `{}`,
//! which no SDK can parse, and the local stack's stream stalls for good
//! (see scripts/dynamodb-local.sh); this catches such a version.

use crate::common;

use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use serde_json::json;

async fn streams_client() -> aws_sdk_dynamodbstreams::Client {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(whimbrel_core::http_client())
        .endpoint_url(common::dynamodb_endpoint())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .load()
        .await;
    aws_sdk_dynamodbstreams::Client::new(&sdk)
}

/// Every NewImage in the stream of `table`, read from TRIM_HORIZON.
async fn images(
    h: &common::Harness,
    streams: &aws_sdk_dynamodbstreams::Client,
    table: &str,
) -> Vec<std::collections::HashMap<String, AttributeValue>> {
    let described = h
        .store
        .client()
        .expect("a DynamoDB store")
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap();
    let arn = described
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("stream enabled")
        .to_string();
    let stream = streams
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap();
    let mut out = Vec::new();
    for shard in stream.stream_description().unwrap().shards() {
        let it = streams
            .get_shard_iterator()
            .stream_arn(&arn)
            .shard_id(shard.shard_id().unwrap())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap();
        let records = streams
            .get_records()
            .shard_iterator(it.shard_iterator().unwrap())
            .send()
            .await
            .expect("GetRecords answer parses");
        for r in records.records() {
            out.extend(r.dynamodb().and_then(|d| d.new_image()).cloned());
        }
    }
    out
}

#[tokio::test]
async fn stream_records_keep_empty_maps() {
    let h = common::Harness::new().await;
    let streams = streams_client().await;
    let wf = "w::00000000-0000-0000-0000-000000000001";
    let mut ev = h.event(wf, "a", "COMPLETED");
    ev.output = Some(json!({"empty": {}, "list": [{}]}));
    h.store
        .put(&h.store.tables().activity_event(), &ev)
        .await
        .unwrap();
    let req = h.request("w", Some(json!({})));
    h.store
        .put(&h.store.tables().workflow_request(), &req)
        .await
        .unwrap();

    let events = images(&h, &streams, &h.store.tables().activity_event()).await;
    assert_eq!(events.len(), 1);
    let AttributeValue::M(output) = &events[0]["output"] else {
        panic!("output is not a map: {:?}", events[0]["output"]);
    };
    assert_eq!(output["empty"], AttributeValue::M(Default::default()));
    assert_eq!(
        output["list"],
        AttributeValue::L(vec![AttributeValue::M(Default::default())])
    );
    let requests = images(&h, &streams, &h.store.tables().workflow_request()).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["input"], AttributeValue::M(Default::default()));
}
