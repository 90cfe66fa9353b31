//! Invoking a function on the upstream (`whimbrel lambda-apis`): once,
//! synchronously, within a timeout, with the outcome Lambda would report;
//! and the schedule, a Scheduled Event to the scheduled function every
//! tick.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_sdk_lambda::error::SdkError;
use aws_sdk_lambda::primitives::Blob;
use axum::body::Bytes;
use serde_json::{json, Value};
use tracing::warn;

use super::{timeline, Runner};

/// The outcome of one invocation on the upstream.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// 2xx and no function error: the answer.
    Answered(Bytes),
    /// The function ran and failed: its error payload.
    FunctionError(Bytes),
    /// No answer within the function's timeout (a hung instance).
    TimedOut(Duration),
    /// Not delivered, or the answer was lost (connection refused or reset,
    /// a 4xx from the upstream): the reason.
    NotDelivered(String),
}

impl Outcome {
    /// The error payload Lambda gives for a function error, a timeout or
    /// a dead instance; `None` for an answer.
    pub(super) fn error_payload(&self, request_id: &str) -> Option<Bytes> {
        match self {
            Outcome::Answered(_) => None,
            Outcome::FunctionError(b) => Some(b.clone()),
            Outcome::TimedOut(t) => Some(Bytes::from(
                json!({
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": format!("RequestId: {request_id} Error: Task timed out after {:.2} seconds", t.as_secs_f64()),
                })
                .to_string(),
            )),
            Outcome::NotDelivered(e) => Some(Bytes::from(
                json!({"errorType": "Runtime.Unavailable", "errorMessage": e}).to_string(),
            )),
        }
    }
}

impl Runner {
    /// Invoke `function` on the upstream, synchronously, once, waiting at
    /// most `timeout`.
    pub(super) async fn invoke(
        &self,
        function: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Outcome {
        let start = timeline::now_ms();
        let outcome = self.invoke_once(function, payload.clone(), timeout).await;
        self.timeline
            .record(function, &payload, start, timeline::now_ms());
        outcome
    }

    async fn invoke_once(&self, function: &str, payload: Bytes, timeout: Duration) -> Outcome {
        let call = self
            .lambda
            .invoke()
            .function_name(function)
            .payload(Blob::new(payload.to_vec()))
            .send();
        let r = match tokio::time::timeout(timeout, call).await {
            Ok(r) => r,
            Err(_) => return Outcome::TimedOut(timeout),
        };
        match r {
            Ok(out) => {
                let body = Bytes::from(out.payload.map(|b| b.into_inner()).unwrap_or_default());
                if out.function_error.is_some() {
                    Outcome::FunctionError(body)
                } else {
                    Outcome::Answered(body)
                }
            }
            Err(SdkError::ServiceError(se)) if se.raw().status().as_u16() >= 500 => {
                // An upstream may answer a function error with HTTP 500
                // (cargo lambda watch did, for a panic or an exit).
                let body = se
                    .raw()
                    .body()
                    .bytes()
                    .map(Bytes::copy_from_slice)
                    .unwrap_or_default();
                Outcome::FunctionError(body)
            }
            Err(e) => Outcome::NotDelivered(
                aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
            ),
        }
    }

    /// The schedule: a Scheduled Event to `function` every tick.
    pub(super) async fn schedule(self: Arc<Self>, function: String) {
        let every = Duration::from_secs(self.args.monitor_interval_seconds.max(1));
        let timeout = self.timeout(&function);
        loop {
            tokio::time::sleep(every).await;
            // A rate schedule fires on time whether or not the last
            // invocation ended (a tick that sleeps to the markers of its
            // look-ahead runs up to an interval): each tick is its own
            // asynchronous invocation, as EventBridge makes it.
            let (runner, function) = (self.clone(), function.clone());
            tokio::spawn(async move { runner.tick(&function, timeout).await });
        }
    }

    /// One scheduled invocation of `function`.
    async fn tick(&self, function: &str, timeout: Duration) {
        let _work = self.start_work().await;
        let payload = scheduled_event(&self.region);
        self.count(format!("{function} (schedule)"));
        // An EventBridge target is invoked asynchronously; the monitor's
        // EventInvokeConfig has no retries: the next tick does the work.
        match self
            .invoke(function, Bytes::from(payload.to_string()), timeout)
            .await
        {
            Outcome::Answered(_) => {}
            o => {
                let e = o.error_payload("-").unwrap_or_default();
                warn!(%function, error = %String::from_utf8_lossy(&e), "scheduled invocation failed")
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
