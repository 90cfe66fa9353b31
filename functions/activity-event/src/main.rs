//! `whimbrel-activity-event`: fed by the DynamoDB streams of
//! `whimbrel_activity_event` and `whimbrel_signal`; applies each inserted
//! transition or signal and returns a partial batch response (see
//! `whimbrel_core::handlers::client_rows`).

use serde_json::Value;
use whimbrel_core::lambda::{serve, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let engine = whimbrel_core::engine_from_env().await?;
    let engine = &engine;
    serve(
        "whimbrel-activity-event",
        engine.store().metrics(),
        |event: Value, _| async move {
            Ok::<_, Error>(
                whimbrel_core::handlers::client_rows(engine, &event)
                    .await?
                    .0,
            )
        },
    )
    .await
}
