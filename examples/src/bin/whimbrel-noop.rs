//! A no-op activity for benchmarks: reports RUNNING then COMPLETED with an
//! empty output.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::json;
use whimbrel_core::activity::Activity;
use whimbrel_core::plan::LaunchPayload;

async fn handle(payload: LaunchPayload) -> Result<(), Error> {
    let activity = Activity::from_env(payload).await?;
    activity.running().await?;
    activity.completed(json!({})).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    lambda_runtime::run(service_fn(|e: LambdaEvent<LaunchPayload>| {
        handle(e.payload)
    }))
    .await
}
