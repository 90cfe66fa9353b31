//! `whimbrel-stream-redrive`: fed by the SQS queue that receives the
//! on-failure records of both stream event source mappings; reads each
//! given-up range back from its stream and applies it, and returns an SQS
//! partial batch response (see `whimbrel_core::redrive::given_up_batches`).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;
use whimbrel_core::redrive::{self, DynamoDbStreamReader};

#[tokio::main]
async fn main() -> Result<(), Error> {
    whimbrel_core::telemetry::init_lambda();
    whimbrel_core::metrics::init("whimbrel-stream-redrive");
    let engine = whimbrel_core::engine_from_env().await?;
    let reader = DynamoDbStreamReader::from_env().await;
    let (engine, reader) = (&engine, &reader);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        // The function's timeout, less a reserve: long loops stop starting
        // work past it and leave the rest owed (engine::budget).
        let result = whimbrel_core::engine::budget::within_lambda(
            event.context.deadline,
            whimbrel_core::metrics::measured(
                "whimbrel-stream-redrive",
                engine.store().metrics(),
                redrive::given_up_batches(engine, reader, &event.payload),
            ),
        )
        .await;
        let (response, _) = result?;
        Ok::<_, Error>(response)
    }))
    .await
}
