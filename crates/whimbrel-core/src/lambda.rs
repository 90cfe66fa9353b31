//! Serving a function on AWS Lambda: what every function's `main` shares,
//! so that a `main` is the function's handler and one call.
//!
//! [`serve`] sets up logging as Lambda's logging controls ask
//! ([`crate::telemetry::init_lambda`]) and the metrics recorder
//! ([`crate::metrics::init`]), then runs the Lambda runtime
//! (`lambda_runtime`, the Runtime API client AWS maintains), timing each
//! invocation and emitting what its store did ([`crate::metrics::measured`],
//! which `make bench` sums).
//!
//! ```no_run
//! use whimbrel_core::plan::{DeciderRequest, Plan};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), whimbrel_core::lambda::Error> {
//!     let none = whimbrel_core::store::Metrics::default();
//!     whimbrel_core::lambda::serve("my-decider", &none, |req: DeciderRequest, _| async move {
//!         let plan: Plan = serde_json::from_value(serde_json::json!({"activities": []}))?;
//!         let _ = req.workflow_exec_id;
//!         Ok::<_, whimbrel_core::lambda::Error>(plan)
//!     })
//!     .await
//! }
//! ```

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use lambda_runtime::{Context, Error};

use crate::store::Metrics;

/// This function's name: `AWS_LAMBDA_FUNCTION_NAME` (set by Lambda, and by
/// `whimbrel instances` on the local stack), else `fallback`.
pub fn function_name(fallback: &str) -> String {
    std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| fallback.to_string())
}

/// Run the Lambda runtime with `handler`, which gets each invocation's
/// payload (deserialized from its JSON as `A`) and its [`Context`] (the
/// request id, and the deadline in epoch milliseconds), and returns the
/// response (serialized as JSON) or an error (Lambda's function error).
/// Each invocation runs within the function's deadline less a reserve
/// ([`crate::engine::budget::within_lambda`]: the engine's long loops stop
/// starting work past it and leave the rest owed), is timed, and is
/// followed by what `metrics` counted ([`crate::metrics::measured`], under
/// `name`). Logging and the metrics recorder are set up first.
///
/// Errors: the runtime's (the Runtime API unreachable: outside Lambda,
/// `AWS_LAMBDA_RUNTIME_API` unset). An invocation's error is reported to
/// Lambda as that invocation's, and the function serves the next.
pub async fn serve<A, R, H, F>(name: &str, metrics: &Metrics, handler: H) -> Result<(), Error>
where
    A: DeserializeOwned + Send + 'static,
    R: Serialize,
    H: Fn(A, Context) -> F,
    F: Future<Output = Result<R, Error>>,
{
    crate::telemetry::init_lambda();
    crate::metrics::init(name);
    let handler = &handler;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<A>| async move {
            let deadline = event.context.deadline;
            let work = handler(event.payload, event.context);
            let measured = crate::metrics::measured(name, metrics, work);
            crate::engine::budget::within_lambda(deadline, measured).await
        },
    ))
    .await
}
