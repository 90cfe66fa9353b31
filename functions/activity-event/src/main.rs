//! `whimbrel-activity-event`: fed by the DynamoDB streams of
//! `whimbrel_activity_event` and `whimbrel_signal`; applies each inserted
//! transition or signal and returns a partial batch response (see
//! `whimbrel_core::handlers::client_rows`).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    whimbrel_core::telemetry::init_lambda();
    whimbrel_core::metrics::init("whimbrel-activity-event");
    let engine = whimbrel_core::engine_from_env().await?;
    let engine = &engine;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        // The function's timeout, less a reserve: long loops stop starting
        // work past it and leave the rest owed (engine::budget).
        let result = whimbrel_core::engine::budget::within_lambda(
            event.context.deadline,
            whimbrel_core::metrics::measured(
                "whimbrel-activity-event",
                engine.store().metrics(),
                whimbrel_core::handlers::client_rows(engine, &event.payload),
            ),
        )
        .await;
        let (response, _) = result?;
        Ok::<_, Error>(response)
    }))
    .await
}
