//! Deciders shared by the test files (answered in-process through
//! `Harness::register_decider`).

use serde_json::{json, Value};
use whimbrel_core::decider::{Decision, DecisionRequest, DecisionsAnswer};
use whimbrel_core::deciding::{decisions, lambda_node, schedule, Decider};
use whimbrel_core::plan::DeciderRequest;

/// Runs one step (`step`, Lambda `f`), then continues as new with the
/// count in its input (`n`, from 0), until `n` is 2: then completes with
/// `{"n": 2}`. Three executions in all.
pub struct Chain;

impl Decider for Chain {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        decisions(vec![schedule(lambda_node("step", "f", Value::Null))])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        let n = request.input["n"].as_i64().unwrap_or(0);
        let last = match n {
            2 => Decision::CompleteWorkflow {
                result: json!({"n": n}),
            },
            _ => Decision::ContinueAsNew {
                input: json!({"n": n + 1}),
            },
        };
        decisions(vec![last])
    }
}
