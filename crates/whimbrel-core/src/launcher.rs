//! Invoking Lambda functions: deciders synchronously, activities
//! asynchronously (design.md § 1, 3.9). [`Launcher`] is the seam; the engine is
//! generic over it so the same engine runs against AWS Lambda, the local
//! runner's Invoke API front, or a recording fake in tests.

use std::future::Future;

use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use serde_json::Value;

use crate::engine::decide::WakeUp;

/// Why an invocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// The function ran and returned an error (`X-Amz-Function-Error`), or
    /// its answer is not JSON. Retrying the same request will not help.
    #[error("function {function} returned an error: {message}")]
    FunctionError {
        /// Function name or ARN.
        function: String,
        /// Its error payload.
        message: String,
    },
    /// The function does not exist or the request is invalid (404, 400,
    /// 413...). Retrying will not help.
    #[error("cannot invoke {function}: {message}")]
    Rejected {
        /// Function name or ARN.
        function: String,
        /// The service's reason.
        message: String,
    },
    /// Throttled, timed out, 5xx or network: may succeed later.
    #[error("{function} unavailable: {message}")]
    Unavailable {
        /// Function name or ARN.
        function: String,
        /// The reason.
        message: String,
    },
}

impl InvokeError {
    /// True when the same invocation may succeed later.
    pub fn is_transient(&self) -> bool {
        matches!(self, InvokeError::Unavailable { .. })
    }
}

/// Invokes Lambda functions for the engine.
pub trait Launcher: Send + Sync {
    /// Invoke `function` synchronously (RequestResponse) with `payload` and
    /// return its JSON answer. Used for deciders.
    fn invoke_sync(
        &self,
        function: &str,
        payload: &Value,
    ) -> impl Future<Output = Result<Value, InvokeError>> + Send;

    /// Invoke `function` asynchronously (InvocationType=Event) with
    /// `payload`. Returns once Lambda accepted the event (HTTP 202).
    fn invoke_async(
        &self,
        function: &str,
        payload: &Value,
    ) -> impl Future<Output = Result<(), InvokeError>> + Send;

    /// Send `wake` to the timer queue with `DelaySeconds` =
    /// `delay_seconds` (0..=`MAX_WAKE_DELAY_SECONDS`, as
    /// `WakeUp::delay_seconds` gives it), so the monitor judges its item at its
    /// second (design.md § 9). The default sends nothing: a launcher
    /// without a timer queue leaves the marker to the next tick.
    fn wake_up(
        &self,
        wake: &WakeUp,
        delay_seconds: i64,
    ) -> impl Future<Output = Result<(), InvokeError>> + Send {
        let _ = (wake, delay_seconds);
        async { Ok(()) }
    }
}

/// [`Launcher`] over the AWS Lambda Invoke API (`aws-sdk-lambda`). Honours
/// `AWS_ENDPOINT_URL_LAMBDA`, so locally it talks to `whimbrel local`.
/// With a timer queue ([`LambdaLauncher::with_timer_queue`]) it also sends
/// wake-ups there (`aws-sdk-sqs`, honouring `AWS_ENDPOINT_URL_SQS`).
#[derive(Debug, Clone)]
pub struct LambdaLauncher {
    client: aws_sdk_lambda::Client,
    timer_queue: Option<(aws_sdk_sqs::Client, String)>,
}

impl LambdaLauncher {
    /// A launcher over `client`, with no timer queue.
    pub fn new(client: aws_sdk_lambda::Client) -> Self {
        LambdaLauncher {
            client,
            timer_queue: None,
        }
    }

    /// The same, sending wake-ups to the queue at `queue_url`
    /// (`WHIMBREL_TIMER_QUEUE_URL`, the template's `TimerQueue`).
    pub fn with_timer_queue(self, sqs: aws_sdk_sqs::Client, queue_url: String) -> Self {
        LambdaLauncher {
            timer_queue: Some((sqs, queue_url)),
            ..self
        }
    }

    async fn invoke(
        &self,
        function: &str,
        payload: &Value,
        kind: InvocationType,
    ) -> Result<Option<Value>, InvokeError> {
        let body = serde_json::to_vec(payload).map_err(|e| InvokeError::Rejected {
            function: function.into(),
            message: e.to_string(),
        })?;
        let r = self
            .client
            .invoke()
            .function_name(function)
            .invocation_type(kind)
            .payload(Blob::new(body))
            .send()
            .await;
        let out = match r {
            Ok(out) => out,
            Err(e) => return Err(classify(function, e)),
        };
        let text = out
            .payload
            .map(|b| String::from_utf8_lossy(b.as_ref()).into_owned())
            .unwrap_or_default();
        if let Some(fe) = out.function_error {
            let message = format!("{fe}: {text}");
            // A timeout, a crash or running out of memory says nothing about
            // the request: the same call may succeed (errorType
            // `Sandbox.Timedout`, `Runtime.ExitError`, `Runtime.OutOfMemory`).
            return Err(if is_infrastructure_error(&text) {
                InvokeError::Unavailable {
                    function: function.into(),
                    message,
                }
            } else {
                InvokeError::FunctionError {
                    function: function.into(),
                    message,
                }
            });
        }
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| InvokeError::FunctionError {
                function: function.into(),
                message: format!("answer is not JSON: {e}"),
            })
    }
}

/// True when a function error's payload names a failure of the runtime or
/// its sandbox (timeout, crash, out of memory), not of the code's logic.
pub fn is_infrastructure_error(payload: &str) -> bool {
    serde_json::from_str::<Value>(payload)
        .ok()
        .and_then(|v| v["errorType"].as_str().map(str::to_string))
        .is_some_and(|t| t.starts_with("Sandbox.") || t.starts_with("Runtime."))
}

fn classify<E>(
    function: &str,
    e: SdkError<E, aws_sdk_lambda::config::http::HttpResponse>,
) -> InvokeError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let text = aws_smithy_types::error::display::DisplayErrorContext(&e).to_string();
    match &e {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let code = se.err().code().unwrap_or("");
            // 408 and 409 (ResourceConflict: an update in progress,
            // SnapStartNotReady) pass too.
            if status == 429
                || status == 408
                || status == 409
                || status >= 500
                || code.contains("Throttl")
                || code == "TooManyRequestsException"
            {
                InvokeError::Unavailable {
                    function: function.into(),
                    message: text,
                }
            } else {
                InvokeError::Rejected {
                    function: function.into(),
                    message: text,
                }
            }
        }
        _ => InvokeError::Unavailable {
            function: function.into(),
            message: text,
        },
    }
}

impl Launcher for LambdaLauncher {
    async fn invoke_sync(&self, function: &str, payload: &Value) -> Result<Value, InvokeError> {
        Ok(self
            .invoke(function, payload, InvocationType::RequestResponse)
            .await?
            .unwrap_or(Value::Null))
    }

    async fn invoke_async(&self, function: &str, payload: &Value) -> Result<(), InvokeError> {
        self.invoke(function, payload, InvocationType::Event)
            .await
            .map(|_| ())
    }

    async fn wake_up(&self, wake: &WakeUp, delay_seconds: i64) -> Result<(), InvokeError> {
        let Some((sqs, url)) = &self.timer_queue else {
            return Ok(());
        };
        let body = serde_json::to_string(wake).expect("serializable");
        // Already within SQS's bounds (`WakeUp::delay_seconds`).
        let delay = i32::try_from(delay_seconds).unwrap_or(0);
        let sent = sqs
            .send_message()
            .queue_url(url)
            .message_body(body)
            .delay_seconds(delay)
            .send()
            .await;
        sent.map(|_| ()).map_err(|e| classify(url, e))
    }
}

#[cfg(test)]
mod infrastructure_tests {
    use super::is_infrastructure_error;

    #[test]
    fn timeouts_and_crashes_are_retried_logic_errors_are_not() {
        assert!(is_infrastructure_error(
            r#"{"errorType":"Sandbox.Timedout","errorMessage":"Task timed out"}"#
        ));
        assert!(is_infrastructure_error(
            r#"{"errorType":"Runtime.ExitError"}"#
        ));
        assert!(!is_infrastructure_error(
            r#"{"errorType":"&alloc::boxed::Box<dyn Error>","errorMessage":"bad input"}"#
        ));
        assert!(!is_infrastructure_error("not json"));
    }
}
