//! Reading given-up records back from DynamoDB Streams (AWS, or DynamoDB
//! Local's streams endpoint).

use aws_lambda_events::event::dynamodb::{EventRecord, StreamRecord, StreamViewType};
use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use serde_json::Value;

use super::{BatchInfo, RedriveError, StreamReader};

/// A stream record as the Lambda event source mapping delivers it
/// (`aws:dynamodb`, `NEW_IMAGE` view), from the DynamoDB Streams API's
/// shape; `region` stands in when the record names none.
pub fn lambda_record(r: &Record, stream_arn: &str, region: &str) -> EventRecord {
    let mut out = EventRecord::default();
    out.aws_region = r.aws_region().unwrap_or(region).to_string();
    out.event_id = r.event_id().unwrap_or_default().to_string();
    out.event_name = r
        .event_name()
        .map(|o| o.as_str().to_string())
        .unwrap_or_default();
    out.event_source = Some("aws:dynamodb".into());
    out.event_version = Some(r.event_version().unwrap_or("1.1").to_string());
    out.event_source_arn = Some(stream_arn.to_string());
    let mut c = StreamRecord::default();
    if let Some(sr) = r.dynamodb() {
        if let Some(t) = sr.approximate_creation_date_time() {
            c.approximate_creation_date_time =
                chrono::DateTime::from_timestamp(t.secs(), 0).unwrap_or_default();
        }
        c.keys = sr.keys().cloned().unwrap_or_default().into();
        c.new_image = sr.new_image().cloned().unwrap_or_default().into();
        c.old_image = sr.old_image().cloned().unwrap_or_default().into();
        c.sequence_number = sr.sequence_number().map(str::to_string);
        c.size_bytes = sr.size_bytes().unwrap_or(0);
        c.stream_view_type = Some(StreamViewType::NewImage);
    }
    out.change = c;
    out
}

/// `a <= b` for DynamoDB stream sequence numbers (decimal strings of any
/// length).
pub(crate) fn sequence_le(a: &str, b: &str) -> bool {
    (a.len(), a) <= (b.len(), b)
}

/// Reads ranges back with the DynamoDB Streams API (GetShardIterator
/// `AT_SEQUENCE_NUMBER`, then GetRecords until a record past the range's
/// end, the end of a closed shard, or three empty pages of an open one).
/// Throttling (`LimitExceededException`) is retried by the SDK's standard
/// retry policy.
#[derive(Debug, Clone)]
pub struct DynamoDbStreamReader {
    client: aws_sdk_dynamodbstreams::Client,
    region: String,
}

impl DynamoDbStreamReader {
    /// A reader over `client`; `region` is put on records that name none.
    pub fn new(client: aws_sdk_dynamodbstreams::Client, region: String) -> Self {
        DynamoDbStreamReader { client, region }
    }

    /// A reader over the DynamoDB Streams endpoint the environment names
    /// (`AWS_ENDPOINT_URL*`, region, credentials): what the redrive
    /// function runs.
    pub async fn from_env() -> Self {
        let sdk = crate::aws_config(None).await;
        let region = sdk.region().map_or("us-east-1".into(), |r| r.to_string());
        DynamoDbStreamReader::new(aws_sdk_dynamodbstreams::Client::new(&sdk), region)
    }

    /// The first shard iterator of `info`'s range.
    async fn iterator(&self, info: &BatchInfo) -> Result<Option<String>, RedriveError> {
        let it = self
            .client
            .get_shard_iterator()
            .stream_arn(&info.stream_arn)
            .shard_id(&info.shard_id)
            .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
            .sequence_number(&info.start_sequence_number)
            .send()
            .await
            .map_err(|e| read_error(info, DisplayErrorContext(&e).to_string()))?;
        Ok(it.shard_iterator().map(str::to_string))
    }
}

fn read_error(info: &BatchInfo, reason: String) -> RedriveError {
    RedriveError::Read {
        shard: info.shard_id.clone(),
        start: info.start_sequence_number.clone(),
        reason,
    }
}

impl StreamReader for DynamoDbStreamReader {
    async fn read_range(&self, info: &BatchInfo) -> Result<Vec<Value>, RedriveError> {
        let mut iterator = self.iterator(info).await?;
        let (mut out, mut empty) = (Vec::new(), 0);
        while let Some(i) = iterator.take() {
            let page = self
                .client
                .get_records()
                .shard_iterator(i)
                .send()
                .await
                .map_err(|e| read_error(info, DisplayErrorContext(&e).to_string()))?;
            for r in page.records() {
                let seq = r.dynamodb().and_then(|d| d.sequence_number());
                if !sequence_le(seq.unwrap_or_default(), &info.end_sequence_number) {
                    return Ok(out);
                }
                let record = lambda_record(r, &info.stream_arn, &self.region);
                out.push(
                    serde_json::to_value(record).map_err(|e| read_error(info, e.to_string()))?,
                );
            }
            // An open shard answers empty pages at its end. Not the count
            // of records given up: the range may hold records the mapping's
            // filter left out (TTL's REMOVEs), and a page ends at 1 MB.
            empty = if page.records().is_empty() {
                empty + 1
            } else {
                0
            };
            if empty >= 3 {
                break;
            }
            iterator = page.next_shard_iterator().map(str::to_string);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::sequence_le;

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        assert!(sequence_le("9", "10"));
        assert!(sequence_le("100", "100"));
        assert!(!sequence_le("101", "100"));
        assert!(!sequence_le("1000", "999"));
    }
}
