//! The Lambda Invoke API front: synchronous invokes are forwarded with the
//! function's timeout; async invokes (`InvocationType=Event`) are answered
//! 202 at once and delivered in the background as Lambda's internal queue
//! does, with the function's `EventInvokeConfig`.
//!
//! Async delivery, as on AWS:
//! * a function error (or a timeout) is retried up to
//!   `MaximumRetryAttempts` times, about 1 minute before the first retry and
//!   2 minutes before the second (times `--async-retry-delay-scale`);
//! * an invocation that could not be delivered (the upstream refused the
//!   connection: Lambda's throttling and system errors) is retried with
//!   backoff, without using up retries;
//! * an event older than `MaximumEventAgeInSeconds` is discarded
//!   (`EventAgeExceeded`), as is one whose retries are used up
//!   (`RetriesExhausted`). The template configures no async destination:
//!   discarded events are logged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tracing::{error, info, warn};

use super::chaos::PREFIX;
use super::template::AsyncConfig;
use super::{function_name, Outcome, Runner};

/// AWS waits about this long before the first and the second retry of a
/// failed async invoke.
const ASYNC_RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(60), Duration::from_secs(120)];

/// The wait before retry `retry` (1-based) after a function error, scaled.
pub fn async_retry_delay(retry: u32, scale: f64) -> Duration {
    let i = (retry.max(1) as usize - 1).min(ASYNC_RETRY_DELAYS.len() - 1);
    ASYNC_RETRY_DELAYS[i].mul_f64(scale.max(0.0))
}

/// The wait before delivery attempt `n` (1-based) after the upstream could
/// not be reached: 1 s doubling up to 5 min, scaled.
pub fn async_redelivery_delay(n: u32, scale: f64) -> Duration {
    Duration::from_secs((1u64 << n.saturating_sub(1).min(9)).min(300)).mul_f64(scale.max(0.0))
}

/// Why an async event was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// `MaximumEventAgeInSeconds` passed.
    EventAgeExceeded,
    /// `MaximumRetryAttempts` used up.
    RetriesExhausted,
}

/// What to do after one delivery attempt of an async event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Delivered.
    Done,
    /// Try again after this wait.
    RetryAfter(Duration),
    /// Give up.
    Discard(Discard),
}

/// The async retry policy (pure): after an attempt that ended with
/// `function_failed` (a function error or timeout; `false`: not
/// delivered) or success (`None`), given the function errors so far
/// (`errors`, this one included), the delivery failures so far
/// (`undelivered`, this one included), and the event's age.
pub fn next_step(
    config: AsyncConfig,
    scale: f64,
    failed: Option<bool>,
    errors: u32,
    undelivered: u32,
    age: Duration,
) -> Next {
    let Some(function_failed) = failed else {
        return Next::Done;
    };
    if function_failed && errors > config.maximum_retry_attempts {
        return Next::Discard(Discard::RetriesExhausted);
    }
    let wait = if function_failed {
        async_retry_delay(errors, scale)
    } else {
        async_redelivery_delay(undelivered, scale)
    };
    if age + wait > config.maximum_event_age {
        return Next::Discard(Discard::EventAgeExceeded);
    }
    Next::RetryAfter(wait)
}

/// `POST /2015-03-31/functions/{name}/invocations`.
pub(super) async fn invoke(
    State(runner): State<Arc<Runner>>,
    Path(target): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let name = runner
        .template
        .local_name(function_name(&target))
        .to_string();
    let asynchronous = headers
        .get("x-amz-invocation-type")
        .and_then(|v| v.to_str().ok())
        == Some("Event");
    let request_id = uuid::Uuid::new_v4().to_string();
    runner.count(name.clone());
    let resp = if asynchronous {
        accept_async(runner, name, body, &request_id);
        StatusCode::ACCEPTED.into_response()
    } else {
        let timeout = runner.timeout(&name);
        let outcome = runner.invoke(&name, body, timeout).await;
        sync_response(&name, outcome, &request_id)
    };
    with_request_id(resp, &request_id)
}

/// An async invoke (`InvocationType=Event`): queue its delivery in the
/// background, as Lambda's internal queue does, unless chaos drops it;
/// chaos may also deliver it a second time and delay it. Each delivery is
/// work under way until it ends ([`super::pause`]).
fn accept_async(runner: Arc<Runner>, name: String, body: Bytes, request_id: &str) {
    let received = Instant::now();
    let chaos = runner
        .chaos
        .as_ref()
        .map(|c| c.async_invoke(&name, &body))
        .unwrap_or_default();
    if chaos.drop {
        warn!(function = %name, %request_id, "{PREFIX} dropping async invoke (answered 202, never run)");
        return;
    }
    if let Some(after) = chaos.duplicate_after {
        warn!(function = %name, %request_id, after_ms = after.as_millis() as u64, "{PREFIX} duplicating async invoke");
        let (r, n, b, id) = (
            runner.clone(),
            name.clone(),
            body.clone(),
            format!("{request_id}-dup"),
        );
        let work = runner.work();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            r.count(format!("{n} (chaos duplicate)"));
            r.deliver_async(n, b, id, received).await;
            drop(work);
        });
    }
    if let Some(d) = chaos.delay {
        warn!(function = %name, %request_id, delay_ms = d.as_millis() as u64, "{PREFIX} delaying async invoke");
    }
    let id = request_id.to_string();
    let work = runner.work();
    tokio::spawn(async move {
        if let Some(d) = chaos.delay {
            tokio::time::sleep(d).await;
        }
        runner.deliver_async(name, body, id, received).await;
        drop(work);
    });
}

/// The answer to a synchronous invoke of `name` that ended with
/// `outcome`: the payload; a function error (or a timeout) as 200 with
/// `X-Amz-Function-Error`; 502 if it was not delivered.
fn sync_response(name: &str, outcome: Outcome, request_id: &str) -> Response {
    match &outcome {
        Outcome::Answered(b) => (StatusCode::OK, b.clone()).into_response(),
        Outcome::FunctionError(_) | Outcome::TimedOut(_) => {
            if let Outcome::TimedOut(t) = outcome {
                warn!(function = %name, timeout_s = t.as_secs(), "synchronous invocation timed out");
            }
            let payload = outcome.error_payload(request_id).unwrap_or_default();
            let mut resp = (StatusCode::OK, payload).into_response();
            resp.headers_mut().insert(
                "x-amz-function-error",
                HeaderValue::from_static("Unhandled"),
            );
            resp
        }
        Outcome::NotDelivered(e) => (
            StatusCode::BAD_GATEWAY,
            Json(json!({"Type": "Service", "message": e})),
        )
            .into_response(),
    }
}

/// `resp` with the `x-amzn-requestid` header Lambda answers every invoke
/// with.
fn with_request_id(mut resp: Response, request_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert("x-amzn-requestid", v);
    }
    resp
}

/// `GET /whimbrel/invocations`: the counters.
pub(super) async fn counters(State(runner): State<Arc<Runner>>) -> Json<Value> {
    let c = runner
        .counters
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    Json(json!(c))
}

impl Runner {
    /// The semaphore of `function`'s async invocations in flight, with
    /// `--function-concurrency` permits (made on first use).
    fn async_slot(&self, function: &str) -> Arc<tokio::sync::Semaphore> {
        let mut slots = self.async_slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .entry(function.to_string())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    self.args.function_concurrency.max(1),
                ))
            })
            .clone()
    }

    /// Deliver one async event with the function's `EventInvokeConfig`.
    async fn deliver_async(
        self: Arc<Self>,
        function: String,
        payload: Bytes,
        request_id: String,
        received: Instant,
    ) {
        let config = self.async_config(&function);
        let timeout = self.timeout(&function);
        let scale = self.args.async_retry_delay_scale;
        let (mut errors, mut undelivered, mut attempts) = (0u32, 0u32, 0u32);
        loop {
            // Lambda's async queue: at most the function's concurrency run
            // at once; the others wait, and their age keeps counting.
            let _slot = self.async_slot(&function).acquire_owned().await;
            if received.elapsed() > config.maximum_event_age {
                error!(%function, %request_id, attempts, condition = "EventAgeExceeded", "async invoke discarded");
                return;
            }
            attempts += 1;
            if attempts > 1 {
                self.count(format!("{function} (async retry)"));
            }
            let outcome = self.invoke(&function, payload.clone(), timeout).await;
            let failed = match &outcome {
                Outcome::Answered(_) => None,
                Outcome::FunctionError(_) | Outcome::TimedOut(_) => {
                    errors += 1;
                    Some(true)
                }
                Outcome::NotDelivered(_) => {
                    undelivered += 1;
                    Some(false)
                }
            };
            let next = next_step(
                config,
                scale,
                failed,
                errors,
                undelivered,
                received.elapsed(),
            );
            let why = outcome
                .error_payload(&request_id)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            match next {
                Next::Done => return,
                Next::RetryAfter(wait) => {
                    info!(%function, %request_id, attempts, wait_ms = wait.as_millis() as u64, error = %why, "async invoke failed; retrying");
                    tokio::time::sleep(wait).await;
                }
                Next::Discard(d) => {
                    error!(%function, %request_id, attempts, condition = ?d, error = %why, "async invoke discarded");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(retries: u32, age_s: u64) -> AsyncConfig {
        AsyncConfig {
            maximum_retry_attempts: retries,
            maximum_event_age: Duration::from_secs(age_s),
        }
    }

    #[test]
    fn aws_default_retries_twice_after_one_then_two_minutes() {
        let c = AsyncConfig::default();
        let s = |errors, age| next_step(c, 1.0, Some(true), errors, 0, Duration::from_secs(age));
        assert_eq!(s(1, 0), Next::RetryAfter(Duration::from_secs(60)));
        assert_eq!(s(2, 60), Next::RetryAfter(Duration::from_secs(120)));
        assert_eq!(s(3, 180), Next::Discard(Discard::RetriesExhausted));
        assert_eq!(next_step(c, 1.0, None, 0, 0, Duration::ZERO), Next::Done);
    }

    #[test]
    fn scaled_delays_and_no_retries() {
        let c = config(2, 21_600);
        assert_eq!(
            next_step(c, 0.05, Some(true), 1, 0, Duration::ZERO),
            Next::RetryAfter(Duration::from_secs(3))
        );
        // EventInvokeConfig MaximumRetryAttempts 0: one attempt only.
        assert_eq!(
            next_step(config(0, 60), 1.0, Some(true), 1, 0, Duration::ZERO),
            Next::Discard(Discard::RetriesExhausted)
        );
    }

    #[test]
    fn undelivered_events_retry_until_their_age() {
        let c = config(0, 60);
        // Not delivered: no retry used up, backoff 1 s, 2 s, 4 s ...
        assert_eq!(
            next_step(c, 1.0, Some(false), 0, 1, Duration::ZERO),
            Next::RetryAfter(Duration::from_secs(1))
        );
        assert_eq!(
            next_step(c, 1.0, Some(false), 0, 3, Duration::from_secs(3)),
            Next::RetryAfter(Duration::from_secs(4))
        );
        // ... until the next try would be past MaximumEventAgeInSeconds.
        assert_eq!(
            next_step(c, 1.0, Some(false), 0, 6, Duration::from_secs(50)),
            Next::Discard(Discard::EventAgeExceeded)
        );
        assert_eq!(async_redelivery_delay(40, 1.0), Duration::from_secs(300));
    }
}
