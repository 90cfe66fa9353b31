//! The episodic examples' decider (`whimbrel_examples::episodes`): answers
//! both requests a decider receives (`workflow_started` and each episode's
//! `decision`) for the workflows `images`, `polling`, `orders` and
//! `marathon`, by workflow name. Its Lambda nodes run `EPISODE_STEP_LAMBDA`
//! (set by template.yaml), or the bare binary name locally.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    whimbrel_core::telemetry::init_lambda();
    let step = std::env::var("EPISODE_STEP_LAMBDA")
        .unwrap_or_else(|_| whimbrel_examples::episodes::STEP_LAMBDA.into());
    let step = &step;
    lambda_runtime::run(service_fn(move |e: LambdaEvent<Value>| async move {
        let name = e.payload["workflow_name"].as_str().unwrap_or_default();
        let decider = whimbrel_examples::episodes::decider_for(name, step)
            .ok_or_else(|| format!("no decider for workflow {name:?}"))?;
        let answer = whimbrel_core::deciding::answer(decider.as_ref(), e.payload)?;
        Ok::<_, Error>(answer)
    }))
    .await
}
