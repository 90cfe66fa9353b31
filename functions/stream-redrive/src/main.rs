//! `whimbrel-stream-redrive`: fed by the SQS queue that receives the
//! on-failure records of both stream event source mappings; reads each
//! given-up range back from its stream and applies it, and returns an SQS
//! partial batch response (see `whimbrel_core::redrive::given_up_batches`).

use serde_json::Value;
use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::redrive::{self, DynamoDbStreamReader};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let engine = whimbrel_core::engine_from_env().await?;
    let reader = DynamoDbStreamReader::from_env().await;
    let (engine, reader) = (&engine, &reader);
    serve(
        "whimbrel-stream-redrive",
        engine.store().metrics(),
        |event: Value, _| async move {
            Ok::<_, Error>(redrive::given_up_batches(engine, reader, &event).await?.0)
        },
    )
    .await
}
