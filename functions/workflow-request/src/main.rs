//! `whimbrel-workflow-request`: fed by the DynamoDB stream of
//! `whimbrel_workflow_request`; starts each inserted workflow and returns a
//! partial batch response (see `whimbrel_core::handlers::workflow_requests`).

use serde_json::Value;
use whimbrel_core::lambda::{serve, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let engine = whimbrel_core::engine_from_env().await?;
    let engine = &engine;
    serve(
        "whimbrel-workflow-request",
        engine.store().metrics(),
        |event: Value, _| async move {
            Ok::<_, Error>(
                whimbrel_core::handlers::workflow_requests(engine, &event)
                    .await?
                    .0,
            )
        },
    )
    .await
}
