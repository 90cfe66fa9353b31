//! The `greet` activity: `{"name": "..."}` in, `{"greeting": "Hello, ...!"}`
//! out. `whimbrel_core::activity::run` reports RUNNING, heartbeats while
//! the handler runs, stops it on a cancel, and reports COMPLETED with what
//! it returns (or FAILED with its error, retried per the node's policy).

use serde_json::{json, Value};
use whimbrel_core::plan::LaunchPayload;

/// The greeting for `input` (the node's `input` in the definition).
fn greeting(input: &Value) -> Result<Value, String> {
    let name = input["name"].as_str().ok_or("input.name: a string is required")?;
    Ok(json!({ "greeting": format!("Hello, {name}!") }))
}

/// The activity's handler: one attempt's work.
async fn greet(task: LaunchPayload) -> Result<Value, String> {
    greeting(&task.input)
}

#[tokio::main]
async fn main() -> Result<(), whimbrel_core::lambda::Error> {
    whimbrel_core::activity::run(greet).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets_by_name_and_refuses_no_name() {
        assert_eq!(greeting(&json!({"name": "Ada"})), Ok(json!({"greeting": "Hello, Ada!"})));
        assert!(greeting(&json!({})).is_err());
    }
}
