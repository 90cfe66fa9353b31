//! `whimbrel-task-claim`: invoked synchronously by task-list workers with
//! `{"task_lists": [...], "worker": "..."}`; claims the oldest claimable
//! task of those lists and answers its launch payload, attempt token
//! included (see `whimbrel_core::handlers::claim_event`). The lists it
//! serves are `WHIMBREL_CLAIM_TASK_LISTS` (comma-separated names and
//! `prefix*` patterns; unset: every list).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;
use whimbrel_core::worker::ClaimScope;

#[tokio::main]
async fn main() -> Result<(), Error> {
    whimbrel_core::telemetry::init_lambda();
    whimbrel_core::metrics::init("whimbrel-task-claim");
    let engine = whimbrel_core::engine_from_env().await?;
    let scope = std::env::var("WHIMBREL_CLAIM_TASK_LISTS")
        .map_or_else(|_| ClaimScope::all(), |l| ClaimScope::parse(&l));
    let (engine, scope) = (&engine, &scope);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        // The function's timeout, less a reserve: long loops stop starting
        // work past it and leave the rest owed (engine::budget).
        let result = whimbrel_core::engine::budget::within_lambda(
            event.context.deadline,
            whimbrel_core::metrics::measured(
                "whimbrel-task-claim",
                engine.store().metrics(),
                whimbrel_core::handlers::claim_event(engine, scope, &event.payload),
            ),
        )
        .await;
        Ok::<_, Error>(result?)
    }))
    .await
}
