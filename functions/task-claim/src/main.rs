//! `whimbrel-task-claim`: invoked synchronously by task-list workers with
//! `{"task_lists": [...], "worker": "..."}`; claims the oldest claimable
//! task of those lists and answers its launch payload, attempt token
//! included (see `whimbrel_core::handlers::claim_event`). The lists it
//! serves are `WHIMBREL_CLAIM_TASK_LISTS` (comma-separated names and
//! `prefix*` patterns; unset: every list).

use serde_json::Value;
use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::worker::ClaimScope;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let engine = whimbrel_core::engine_from_env().await?;
    let scope = std::env::var("WHIMBREL_CLAIM_TASK_LISTS")
        .map_or_else(|_| ClaimScope::all(), |l| ClaimScope::parse(&l));
    let (engine, scope) = (&engine, &scope);
    serve(
        "whimbrel-task-claim",
        engine.store().metrics(),
        |event: Value, _| async move {
            Ok::<_, Error>(whimbrel_core::handlers::claim_event(engine, scope, &event).await?)
        },
    )
    .await
}
