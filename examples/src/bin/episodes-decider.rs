//! The episodic examples' decider (`whimbrel_examples::episodes`): answers
//! both requests a decider receives (`workflow_started` and each episode's
//! `decision`) for the workflows `images`, `polling`, `orders` and
//! `marathon`, by workflow name. Its Lambda nodes run `EPISODE_STEP_LAMBDA`
//! (set by template.yaml), or the bare binary name locally.

use serde_json::Value;
use whimbrel_core::lambda::{serve, Error};
use whimbrel_core::store::Metrics;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let step = std::env::var("EPISODE_STEP_LAMBDA")
        .unwrap_or_else(|_| whimbrel_examples::episodes::STEP_LAMBDA.into());
    let step = &step;
    serve(
        "episodes-decider",
        &Metrics::default(),
        |req: Value, _| async move {
            let name = req["workflow_name"].as_str().unwrap_or_default();
            let decider = whimbrel_examples::episodes::decider_for(name, step)
                .ok_or_else(|| format!("no decider for workflow {name:?}"))?;
            Ok::<_, Error>(whimbrel_core::deciding::answer(decider.as_ref(), req)?)
        },
    )
    .await
}
