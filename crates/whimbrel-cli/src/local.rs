//! `whimbrel local`: what AWS wires and no local tool does (DESIGN 6).
//!
//! * **Event source mappings**: poll the DynamoDB stream shards of
//!   `workflow_request` and `activity_event` and deliver batches of real
//!   DynamoDB stream event JSON to the functions, as Lambda would: INSERT
//!   filter, batch size, partial batch responses (retry from the lowest
//!   failed sequence number), retries with backoff, bisect on function
//!   error, and an on-failure destination (a JSON-lines file).
//! * **Schedule**: invoke the heartbeat monitor with an EventBridge
//!   Scheduled Event every `--monitor-interval-seconds`.
//! * **Invoke API front**: `POST /2015-03-31/functions/{name}/invocations`
//!   on `--listen`, forwarded to `cargo lambda watch`; `InvocationType=Event`
//!   answers 202 at once and runs in the background, ARNs resolve to
//!   binary names, and a function error becomes 200 + `X-Amz-Function-Error`.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::dynamodb::{Event, EventRecord, StreamRecord, StreamViewType};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use aws_sdk_dynamodbstreams::types::{OperationType, Record, ShardIteratorType};
use aws_sdk_lambda::error::SdkError;
use aws_sdk_lambda::primitives::Blob;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use serde_json::{json, Value};
use tracing::{error, info, warn};
use whimbrel_core::store::Tables;

use crate::{CliError, Global};

/// Options of `whimbrel local`.
#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    /// The Lambda Invoke API that runs the functions (`cargo lambda watch`).
    #[arg(
        long,
        env = "WHIMBREL_LAMBDA_UPSTREAM",
        default_value = "http://127.0.0.1:9000"
    )]
    lambda_upstream: String,
    /// Where the Invoke API front listens (point AWS_ENDPOINT_URL_LAMBDA here).
    #[arg(long, default_value = "127.0.0.1:9001")]
    listen: SocketAddr,
    /// Records per batch (event source mapping BatchSize).
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Retries of a failing batch before it goes to the on-failure file
    /// (MaximumRetryAttempts).
    #[arg(long, default_value_t = 30)]
    maximum_retry_attempts: u32,
    /// Seconds between heartbeat monitor invocations (the schedule).
    #[arg(long, default_value_t = 5)]
    monitor_interval_seconds: u64,
    /// Milliseconds between polls of an idle shard.
    #[arg(long, default_value_t = 200)]
    poll_interval_ms: u64,
    /// On-failure destination: batches that exhausted their retries are
    /// appended here as JSON lines.
    #[arg(long, default_value = ".stack/on-failure.jsonl")]
    on_failure_file: PathBuf,
    /// Function fed by the workflow_request stream.
    #[arg(long, default_value = "whimbrel-workflow-request")]
    workflow_request_function: String,
    /// Function fed by the activity_event stream.
    #[arg(long, default_value = "whimbrel-activity-event")]
    activity_event_function: String,
    /// Function run on the schedule.
    #[arg(long, default_value = "whimbrel-heartbeat-monitor")]
    heartbeat_monitor_function: String,
}

/// Invocation counters, by function name and kind.
type Counters = Arc<Mutex<BTreeMap<String, u64>>>;

struct Runner {
    args: LocalArgs,
    lambda: aws_sdk_lambda::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    counters: Counters,
    region: String,
}

/// The outcome of one invocation on the upstream.
enum Invoked {
    /// 2xx and no function error: the answer.
    Ok(Bytes),
    /// The function ran and failed: its error payload.
    FunctionError(Bytes),
}

/// `ARN` or `name[:qualifier]` → the bare binary name (DESIGN 6: only the
/// bare name resolves under `cargo lambda watch`).
pub fn function_name(name_or_arn: &str) -> &str {
    match name_or_arn.split_once(":function:") {
        Some((_, rest)) => rest.split(':').next().unwrap_or(rest),
        None => name_or_arn.split(':').next().unwrap_or(name_or_arn),
    }
}

impl Runner {
    fn count(&self, key: String) {
        *self
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    /// Invoke `function` on the upstream, synchronously, without retries.
    async fn invoke(&self, function: &str, payload: Bytes) -> Result<Invoked, String> {
        let r = self
            .lambda
            .invoke()
            .function_name(function)
            .payload(Blob::new(payload.to_vec()))
            .send()
            .await;
        match r {
            Ok(out) => {
                let body = Bytes::from(out.payload.map(|b| b.into_inner()).unwrap_or_default());
                if out.function_error.is_some() {
                    Ok(Invoked::FunctionError(body))
                } else {
                    Ok(Invoked::Ok(body))
                }
            }
            Err(SdkError::ServiceError(se)) if se.raw().status().as_u16() >= 500 => {
                // cargo lambda watch answers a function error with HTTP 500.
                let body = se
                    .raw()
                    .body()
                    .bytes()
                    .map(Bytes::copy_from_slice)
                    .unwrap_or_default();
                Ok(Invoked::FunctionError(body))
            }
            Err(e) => Err(aws_smithy_types::error::display::DisplayErrorContext(&e).to_string()),
        }
    }
}

// ----- Invoke API front -----------------------------------------------------

async fn front_invoke(
    State(runner): State<Arc<Runner>>,
    Path(target): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let name = function_name(&target).to_string();
    let asynchronous = headers
        .get("x-amz-invocation-type")
        .and_then(|v| v.to_str().ok())
        == Some("Event");
    runner.count(name.clone());
    if asynchronous {
        let r = runner.clone();
        tokio::spawn(async move {
            match r.invoke(&name, body).await {
                Ok(Invoked::Ok(_)) => {}
                Ok(Invoked::FunctionError(e)) => {
                    warn!(function = %name, error = %String::from_utf8_lossy(&e), "async invocation failed")
                }
                Err(e) => error!(function = %name, error = %e, "async invocation not delivered"),
            }
        });
        return StatusCode::ACCEPTED.into_response();
    }
    match runner.invoke(&name, body).await {
        Ok(Invoked::Ok(b)) => (StatusCode::OK, b).into_response(),
        Ok(Invoked::FunctionError(b)) => {
            let mut resp = (StatusCode::OK, b).into_response();
            resp.headers_mut().insert(
                "x-amz-function-error",
                HeaderValue::from_static("Unhandled"),
            );
            resp
        }
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            Json(json!({"Type": "Service", "message": e})),
        )
            .into_response(),
    }
}

async fn front_counters(State(runner): State<Arc<Runner>>) -> Json<Value> {
    let c = runner
        .counters
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    Json(json!(c))
}

// ----- event source mappings -------------------------------------------------

/// A stream record as the Lambda event source mapping delivers it.
fn lambda_record(r: &Record, stream_arn: &str, region: &str) -> EventRecord {
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

fn seq_of(r: &Record) -> Option<&str> {
    r.dynamodb().and_then(|d| d.sequence_number())
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(5)).min(2_000))
}

impl Runner {
    /// The table's latest stream ARN, waiting for the table to exist.
    async fn stream_arn(&self, table: &str) -> String {
        loop {
            match self
                .dynamodb
                .describe_table()
                .table_name(table)
                .send()
                .await
            {
                Ok(out) => {
                    if let Some(arn) = out.table().and_then(|t| t.latest_stream_arn()) {
                        return arn.to_string();
                    }
                    warn!(table, "table has no stream; run `whimbrel install`");
                }
                Err(e) => {
                    warn!(table, error = %aws_smithy_types::error::display::DisplayErrorContext(&e), "waiting for table")
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// The event source mapping of one table: discover shards, poll each.
    async fn map_table(self: Arc<Self>, table: String, function: String) {
        let arn = self.stream_arn(&table).await;
        info!(%table, %function, stream = %arn, "event source mapping started");
        let mut started = HashSet::new();
        loop {
            match self.streams.describe_stream().stream_arn(&arn).send().await {
                Ok(out) => {
                    let shards = out
                        .stream_description()
                        .map(|d| d.shards().to_vec())
                        .unwrap_or_default();
                    for s in shards {
                        let Some(id) = s.shard_id() else { continue };
                        if started.insert(id.to_string()) {
                            let r = self.clone();
                            let (arn, id, f) = (arn.clone(), id.to_string(), function.clone());
                            tokio::spawn(async move { r.poll_shard(arn, id, f).await });
                        }
                    }
                }
                Err(e) => {
                    warn!(%table, error = %aws_smithy_types::error::display::DisplayErrorContext(&e), "DescribeStream failed")
                }
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }

    async fn iterator(&self, arn: &str, shard: &str, after: Option<&str>) -> Option<String> {
        let mut req = self
            .streams
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard);
        req = match after {
            Some(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
            None => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        match req.send().await {
            Ok(out) => out.shard_iterator().map(str::to_string),
            Err(e) => {
                warn!(shard, error = %aws_smithy_types::error::display::DisplayErrorContext(&e), "GetShardIterator failed");
                None
            }
        }
    }

    /// Poll one shard and deliver its INSERT records in order.
    async fn poll_shard(self: Arc<Self>, arn: String, shard: String, function: String) {
        let batch_size = self.args.batch_size.max(1);
        let mut last_read: Option<String> = None;
        let mut iterator = self.iterator(&arn, &shard, None).await;
        let mut pending: Vec<Record> = Vec::new();
        let mut attempts = 0u32;
        let mut limit = batch_size;
        let idle = Duration::from_millis(self.args.poll_interval_ms);
        loop {
            if pending.len() < batch_size {
                if iterator.is_none() {
                    iterator = self.iterator(&arn, &shard, last_read.as_deref()).await;
                }
                if let Some(it) = iterator.clone() {
                    match self
                        .streams
                        .get_records()
                        .shard_iterator(it)
                        .limit((batch_size - pending.len()) as i32)
                        .send()
                        .await
                    {
                        Ok(out) => {
                            for r in out.records() {
                                if let Some(seq) = seq_of(r) {
                                    last_read = Some(seq.to_string());
                                }
                                // FilterCriteria {"eventName": ["INSERT"]}.
                                if r.event_name() == Some(&OperationType::Insert) {
                                    pending.push(r.clone());
                                }
                            }
                            iterator = out.next_shard_iterator().map(str::to_string);
                        }
                        Err(e) => {
                            // DynamoDB Local: an iterator taken on a shard
                            // with no record yet fails (TrimmedDataAccess)
                            // once another table is written first;
                            // re-open after the last record read.
                            warn!(shard, error = %aws_smithy_types::error::display::DisplayErrorContext(&e), "GetRecords failed; reopening the iterator");
                            iterator = None;
                            tokio::time::sleep(idle).await;
                            continue;
                        }
                    }
                }
            }
            if pending.is_empty() {
                tokio::time::sleep(idle).await;
                continue;
            }
            let n = limit.min(pending.len());
            let mut event = Event::default();
            event.records = pending[..n]
                .iter()
                .map(|r| lambda_record(r, &arn, &self.region))
                .collect();
            let body = Bytes::from(serde_json::to_vec(&event).unwrap_or_default());
            self.count(format!("{function} (stream batches)"));
            let done = match self.invoke(&function, body).await {
                Ok(Invoked::Ok(answer)) => {
                    // An empty answer is success; one that is not a partial
                    // batch response fails the whole batch, as on AWS.
                    let resp: Option<DynamoDbEventResponse> =
                        if answer.iter().all(u8::is_ascii_whitespace) || answer.as_ref() == b"null"
                        {
                            Some(DynamoDbEventResponse::default())
                        } else {
                            serde_json::from_slice(&answer).ok()
                        };
                    let Some(resp) = resp else {
                        attempts += 1;
                        warn!(%function, answer = %String::from_utf8_lossy(&answer), "answer is not a partial batch response; retrying the batch");
                        if attempts > self.args.maximum_retry_attempts {
                            let k = n.min(pending.len());
                            let dropped: Vec<Value> = pending
                                .drain(..k)
                                .map(|r| json!(lambda_record(&r, &arn, &self.region)))
                                .collect();
                            self.on_failure(&function, dropped);
                            attempts = 0;
                        } else {
                            tokio::time::sleep(backoff(attempts)).await;
                        }
                        continue;
                    };
                    let failed: Vec<usize> = resp
                        .batch_item_failures
                        .iter()
                        .map(|f| {
                            pending[..n]
                                .iter()
                                .position(|r| seq_of(r) == f.item_identifier.as_deref())
                                // An unknown identifier fails the whole batch.
                                .unwrap_or(0)
                        })
                        .collect();
                    match failed.into_iter().min() {
                        None => Some(n),
                        Some(first) => {
                            attempts += 1;
                            info!(%function, retry_from = first, attempts, "partial batch failure");
                            if first > 0 {
                                // Records before the first failure are done.
                                pending.drain(..first);
                                attempts = 1;
                            }
                            None
                        }
                    }
                }
                Ok(Invoked::FunctionError(e)) => {
                    attempts += 1;
                    warn!(%function, records = n, error = %String::from_utf8_lossy(&e), "function error; bisecting");
                    limit = (n / 2).max(1);
                    None
                }
                Err(e) => {
                    // Not delivered (or the answer was lost): counts as an
                    // attempt, like a function error.
                    attempts += 1;
                    warn!(%function, attempts, error = %e, "function not reachable; retrying");
                    None
                }
            };
            match done {
                Some(k) => {
                    pending.drain(..k);
                    attempts = 0;
                    limit = batch_size;
                }
                None if attempts > self.args.maximum_retry_attempts => {
                    let k = limit.min(pending.len());
                    let dropped: Vec<Value> = pending
                        .drain(..k)
                        .map(|r| json!(lambda_record(&r, &arn, &self.region)))
                        .collect();
                    error!(%function, records = dropped.len(), file = %self.args.on_failure_file.display(), "retries exhausted; batch sent to the on-failure destination");
                    self.on_failure(&function, dropped);
                    attempts = 0;
                    limit = batch_size;
                }
                None => tokio::time::sleep(backoff(attempts)).await,
            }
        }
    }

    fn on_failure(&self, function: &str, records: Vec<Value>) {
        use std::io::Write;
        let line = json!({"function": function, "records": records});
        if let Some(dir) = self.args.on_failure_file.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.args.on_failure_file)
        {
            Ok(mut f) => {
                let _ = writeln!(f, "{line}");
            }
            Err(e) => error!(error = %e, "cannot write the on-failure file"),
        }
    }

    /// The schedule: a Scheduled Event to the heartbeat monitor every tick.
    async fn schedule(self: Arc<Self>) {
        let every = Duration::from_secs(self.args.monitor_interval_seconds.max(1));
        let function = self.args.heartbeat_monitor_function.clone();
        loop {
            tokio::time::sleep(every).await;
            let payload = scheduled_event(&self.region);
            self.count(format!("{function} (schedule)"));
            match self
                .invoke(&function, Bytes::from(payload.to_string()))
                .await
            {
                Ok(Invoked::Ok(_)) => {}
                Ok(Invoked::FunctionError(e)) => {
                    warn!(%function, error = %String::from_utf8_lossy(&e), "heartbeat monitor failed")
                }
                Err(e) => warn!(%function, error = %e, "heartbeat monitor not reachable"),
            }
        }
    }
}

/// An EventBridge Scheduled Event, as a schedule rule delivers it.
pub fn scheduled_event(region: &str) -> Value {
    let mut ev: EventBridgeEvent = EventBridgeEvent::default();
    ev.version = Some("0".into());
    ev.id = Some(uuid::Uuid::new_v4().to_string());
    ev.detail_type = "Scheduled Event".into();
    ev.source = "aws.events".into();
    ev.account = Some("000000000000".into());
    ev.time = Some(chrono::Utc::now());
    ev.region = Some(region.into());
    ev.resources = Some(vec![format!(
        "arn:aws:events:{region}:000000000000:rule/whimbrel-local-heartbeat-monitor"
    )]);
    ev.detail = json!({});
    serde_json::to_value(ev).unwrap_or_default()
}

/// Run the local runner until interrupted.
pub async fn run(g: Global, args: LocalArgs) -> Result<(), CliError> {
    let sdk = whimbrel_core::aws_config(g.endpoint_url.as_deref()).await;
    let region = sdk
        .region()
        .map(|r| r.to_string())
        .unwrap_or_else(|| "us-east-1".into());
    let lambda_conf = aws_sdk_lambda::config::Builder::from(&sdk)
        .endpoint_url(&args.lambda_upstream)
        .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled())
        .build();
    let tables = Tables::new(g.table_prefix.clone());
    let runner = Arc::new(Runner {
        lambda: aws_sdk_lambda::Client::from_conf(lambda_conf),
        streams: aws_sdk_dynamodbstreams::Client::new(&sdk),
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        counters: Counters::default(),
        region,
        args: args.clone(),
    });
    let app = Router::new()
        .route(
            "/2015-03-31/functions/{name}/invocations",
            post(front_invoke),
        )
        .route("/whimbrel/invocations", get(front_counters))
        .with_state(runner.clone());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError(format!("cannot listen on {}: {e}", args.listen)))?;
    info!(listen = %args.listen, upstream = %args.lambda_upstream, "Lambda Invoke API front listening");
    tokio::spawn(runner.clone().map_table(
        tables.workflow_request(),
        args.workflow_request_function.clone(),
    ));
    tokio::spawn(runner.clone().map_table(
        tables.activity_event(),
        args.activity_event_function.clone(),
    ));
    tokio::spawn(runner.clone().schedule());
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| CliError(format!("front failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arns_resolve_to_binary_names() {
        assert_eq!(function_name("wordcount-count"), "wordcount-count");
        assert_eq!(function_name("wordcount-count:live"), "wordcount-count");
        assert_eq!(
            function_name("arn:aws:lambda:us-east-1:123456789012:function:wordcount-count:3"),
            "wordcount-count"
        );
    }

    #[test]
    fn scheduled_event_parses_as_eventbridge() {
        let v = scheduled_event("us-east-1");
        assert_eq!(v["detail-type"], "Scheduled Event");
        assert_eq!(v["source"], "aws.events");
    }
}
