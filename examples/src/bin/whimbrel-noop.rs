//! A no-op activity for benchmarks: reports RUNNING then COMPLETED with an
//! empty output.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::json;
use whimbrel_core::activity::Reporter;
use whimbrel_core::plan::LaunchPayload;

async fn handle(reporter: &Reporter, payload: LaunchPayload) -> Result<(), Error> {
    let activity = reporter.activity(payload);
    activity.running().await?;
    activity.completed(json!({})).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let reporter = Reporter::from_env().await?;
    let reporter = &reporter;
    lambda_runtime::run(service_fn(move |e: LambdaEvent<LaunchPayload>| {
        handle(reporter, e.payload)
    }))
    .await
}
