//! The SQS API the engine calls, on the front's address: `SendMessage`
//! in the JSON protocol the AWS SDKs speak (`POST /`, `X-Amz-Target:
//! AmazonSQS.SendMessage`, `application/x-amz-json-1.0`; SQS API
//! Reference, "Making query API requests using AWS JSON protocol"), into
//! the template's queues ([`super::queues`]) with `DelaySeconds`. The
//! engine sends wake-ups to the `TimerQueue` this way (design.md § 9):
//! `WHIMBREL_TIMER_QUEUE_URL=http://<front>/000000000000/TimerQueue`, its
//! last path segment the queue's logical id, and `AWS_ENDPOINT_URL_SQS` the
//! front. Only SendMessage is served: the mappings receive and delete
//! inside this process. `MD5OfMessageBody` is not computed (the Rust SDK
//! does not check it).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tracing::info;

use super::Runner;

/// The fields of a SendMessage request this emulation reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SendMessage {
    queue_url: String,
    message_body: String,
    #[serde(default)]
    delay_seconds: Option<i64>,
}

/// An SQS JSON-protocol error: HTTP 400 with its `__type`.
fn sqs_error(kind: &str, message: String) -> Response {
    let body = json!({"__type": format!("com.amazonaws.sqs#{kind}"), "message": message});
    let headers = [("content-type", "application/x-amz-json-1.0")];
    (StatusCode::BAD_REQUEST, headers, body.to_string()).into_response()
}

/// `POST /`: one SQS API call.
pub(super) async fn serve(
    State(runner): State<Arc<Runner>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if target != "AmazonSQS.SendMessage" {
        return sqs_error("InvalidAction", format!("{target:?} is not served locally"));
    }
    let req: SendMessage = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return sqs_error("InvalidParameterValue", e.to_string()),
    };
    let max = whimbrel_aws_model::sqs::MAX_DELAY_SECONDS;
    let delay = req.delay_seconds.unwrap_or(0);
    let Some(delay) = u64::try_from(delay).ok().filter(|d| *d <= max) else {
        let why = format!("DelaySeconds {delay} is outside 0..={max}");
        return sqs_error("InvalidParameterValue", why);
    };
    let queue = req.queue_url.rsplit('/').next().unwrap_or_default();
    let Some(id) = runner.queues.send_delayed(queue, &req.message_body, delay) else {
        return sqs_error(
            "QueueDoesNotExist",
            format!("no queue {queue} in the template"),
        );
    };
    info!(queue, delay_seconds = delay, message_id = %id, "SendMessage");
    let body = json!({"MessageId": id, "MD5OfMessageBody": ""});
    let headers = [("content-type", "application/x-amz-json-1.0")];
    (StatusCode::OK, headers, body.to_string()).into_response()
}
