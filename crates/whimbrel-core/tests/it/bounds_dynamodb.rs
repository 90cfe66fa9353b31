//! docs/limits.md, the rows that had no test exactly at their limit
//! (issue 42 D): each runs an execution with a field at its limit to its
//! end on DynamoDB Local, and one just past it is refused (or cut, where
//! the table says so) with the reason.

use crate::common::Harness;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::decide::MAX_ERROR_BYTES;
use whimbrel_core::engine::Applied;
use whimbrel_core::ids;
use whimbrel_core::model::WorkflowPlan;
use whimbrel_core::plan::{
    PlannedActivity, MAX_OUTPUT_BYTES, MAX_PLAN_BYTES, MAX_WAIT_SECONDS, MAX_WORKFLOW_INPUT_BYTES,
    PLAN_PART_BYTES as MAX_NODE_BYTES,
};

/// A JSON string value whose text is exactly `bytes` bytes.
fn string_of(bytes: usize) -> Value {
    json!("x".repeat(bytes - 2))
}

/// limits.md § 2: a workflow input of exactly 64,000 bytes is kept whole
/// and the workflow COMPLETES; 64,001 fails the start with the reason.
#[tokio::test]
async fn a_workflow_input_at_its_limit_runs_and_one_byte_more_fails_the_start() {
    let h = Harness::new().await;
    h.register(
        "one",
        json!({"activities": [{"name": "solo", "lambda": "f"}]}),
    )
    .await;
    for bytes in [MAX_WORKFLOW_INPUT_BYTES, MAX_WORKFLOW_INPUT_BYTES + 1] {
        let input = string_of(bytes);
        let req = h.request("one", Some(input.clone()));
        let wf = ids::workflow_exec_id("one", &req.workflow_request_id);
        let applied = h.engine.start_workflow(&req).await.unwrap();
        if bytes > MAX_WORKFLOW_INPUT_BYTES {
            assert_eq!(applied, Applied::Workflow(WorkflowState::Failed));
            let why = h.workflow(&wf).await.error.unwrap_or_default();
            assert!(
                why.contains(&format!("workflow input is {bytes} bytes; at most 64000")),
                "{why}"
            );
            continue;
        }
        // Kept whole: on its plan item once planned.
        let key = whimbrel_core::keys::workflow_key(&wf, "one");
        let plan: Option<WorkflowPlan> = (h.store.get(&h.store.tables().workflow_plan(), key))
            .await
            .unwrap();
        assert_eq!(plan.and_then(|p| p.input), Some(input));
        h.run_to_completion(&wf, "solo").await;
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    }
}

/// limits.md § 3: a COMPLETED output of exactly 100,000 bytes is the
/// workflow's result; 100,001 is applied as FAILED with
/// `OUTPUT_TOO_LARGE`. A FAILED report's error of exactly 2,048 bytes is
/// kept whole; one byte more is cut and marked.
#[tokio::test]
async fn an_output_and_an_error_at_their_limits_are_kept_and_one_byte_more_is_refused_or_cut() {
    let h = Harness::new().await;
    h.register(
        "one",
        json!({"activities": [{"name": "solo", "lambda": "f"}]}),
    )
    .await;
    for bytes in [MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES + 1] {
        let wf = h.start("one").await;
        let running = h.event(&wf, "solo", "RUNNING");
        h.engine.apply_event(&running).await.unwrap();
        let mut done = h.event(&wf, "solo", "COMPLETED");
        done.output = Some(string_of(bytes));
        let applied = h.engine.apply_event(&done).await.unwrap();
        let w = h.workflow(&wf).await;
        if bytes > MAX_OUTPUT_BYTES {
            assert_eq!(applied, Applied::State(ActivityState::Failed));
            let why = h.activity(&wf, "solo").await.outcome.error;
            assert!(why.unwrap_or_default().contains("OUTPUT_TOO_LARGE"));
            assert_eq!(w.state, WorkflowState::Failed);
            continue;
        }
        assert_eq!(w.state, WorkflowState::Completed);
        let result = h.engine.workflow_result(&wf, "one").await.unwrap();
        assert_eq!(result, Some(json!({"solo": string_of(bytes)})));
    }
    for bytes in [MAX_ERROR_BYTES, MAX_ERROR_BYTES + 1] {
        let wf = h.start("one").await;
        let mut failed = h.event(&wf, "solo", "FAILED");
        failed.error = Some("e".repeat(bytes));
        h.engine.apply_event(&failed).await.unwrap();
        let solo = h.activity(&wf, "solo").await;
        assert_eq!(solo.state, ActivityState::Failed);
        let kept = solo.outcome.error.unwrap_or_default();
        if bytes == MAX_ERROR_BYTES {
            assert_eq!(kept, "e".repeat(bytes));
        } else {
            assert!(kept.len() <= MAX_ERROR_BYTES, "{}", kept.len());
            assert!(kept.ends_with("bytes cut]"), "{kept}");
        }
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    }
}

/// limits.md § 1: a timer of the longest `wait.seconds` (366 days) waits
/// that long to the second, fires, and its workflow COMPLETES; one second
/// more is refused when the workflow starts.
#[tokio::test]
async fn a_timer_of_the_longest_wait_fires_on_its_second_and_one_second_more_is_refused() {
    let h = Harness::new().await;
    let timer = |seconds: i64| json!({"activities": [{"name": "t", "wait": {"seconds": seconds}}]});
    h.register("year", timer(MAX_WAIT_SECONDS)).await;
    let from = h.now();
    h.clock.freeze(from);
    let wf = h.start("year").await;
    h.tick(from + MAX_WAIT_SECONDS - 1).await;
    assert_eq!(h.activity(&wf, "t").await.state, ActivityState::Running);
    h.tick(from + MAX_WAIT_SECONDS).await;
    assert_eq!(h.activity(&wf, "t").await.state, ActivityState::Completed);
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    let past: Result<whimbrel_core::plan::Plan, _> =
        serde_json::from_value(timer(MAX_WAIT_SECONDS + 1));
    let why = past.unwrap().validate().unwrap_err().to_string();
    assert!(why.contains("it must be within 0..=31622400"), "{why}");
}

/// The plan of `n` Lambda nodes `a00`… with string inputs of even size,
/// the last one's padded, so the plan's JSON is exactly `bytes` bytes.
fn plan_of_bytes(n: usize, bytes: usize) -> Value {
    let node = |i: usize, input: usize| json!({"name": format!("a{i:02}"), "lambda": "f", "input": string_of(input)});
    let size = |acts: &[Value]| {
        let plan: whimbrel_core::plan::Plan =
            serde_json::from_value(json!({"activities": acts})).unwrap();
        serde_json::to_string(&plan).unwrap().len()
    };
    let base = size(&(0..n).map(|i| node(i, 2)).collect::<Vec<_>>());
    let each = 2 + (bytes - base) / n;
    let mut acts: Vec<Value> = (0..n).map(|i| node(i, each)).collect();
    let short = bytes - size(&acts);
    acts[n - 1] = node(n - 1, each + short);
    assert_eq!(size(&acts), bytes);
    json!({"activities": acts})
}

/// limits.md § 1: a decider's plan of exactly 4,000,000 bytes (27 nodes
/// with inputs of about 148,000 bytes, each within its 150,000), with a
/// workflow input of the largest 64,000 bytes, is stored (in parts) and
/// runs to COMPLETED, each node launched with its input; one byte more
/// fails the start with the reason. So the stored plan's own refusal
/// (limits.md § 2, an item past 409,600 bytes) is not reached by what
/// validation admits.
#[tokio::test]
async fn a_plan_at_its_byte_limit_runs_and_one_byte_more_fails_the_start() {
    let h = Harness::new().await;
    let n = 27;
    for bytes in [MAX_PLAN_BYTES, MAX_PLAN_BYTES + 1] {
        let plan = plan_of_bytes(n, bytes);
        let last: PlannedActivity =
            serde_json::from_value(plan["activities"][n - 1].clone()).unwrap();
        assert!(last
            .input
            .as_ref()
            .is_some_and(|i| i.to_string().len() <= 150_000));
        h.register_planned("big", plan.clone()).await;
        let req = h.request("big", Some(string_of(MAX_WORKFLOW_INPUT_BYTES)));
        let wf = ids::workflow_exec_id("big", &req.workflow_request_id);
        h.engine.start_workflow(&req).await.unwrap();
        let w = h.workflow(&wf).await;
        if bytes > MAX_PLAN_BYTES {
            assert_eq!(w.state, WorkflowState::Failed);
            let why = w.error.unwrap_or_default();
            assert!(
                why.contains(&format!("plan is {bytes} bytes; at most 4000000")),
                "{why}"
            );
            continue;
        }
        let planned = |i: usize| plan["activities"][i]["input"].clone();
        for i in 0..n {
            let name = format!("a{i:02}");
            assert_eq!(h.launcher.payload(&name, 0).input, planned(i), "{name}");
            h.run_to_completion(&wf, &name).await;
        }
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    }
}

/// limits.md § 1: one node as planned of exactly 300,000 bytes of JSON (a
/// join of timers with 128-byte names, and an input padded to the byte)
/// runs to COMPLETED, launched with its input; one byte more fails the
/// start with the reason. The timers wait 0 seconds, so the engine ends
/// them itself.
#[tokio::test]
async fn a_node_at_its_planned_byte_limit_runs_and_one_byte_more_fails_the_start() {
    let h = Harness::new().await;
    let name = |i: usize| format!("{i:05}{}", "t".repeat(123));
    let width = 1_150;
    let join = |input: usize| {
        let deps: Vec<String> = (0..width).map(name).collect();
        json!({"name": "join", "lambda": "f", "depends_on": deps, "input": string_of(input)})
    };
    let node_bytes = |node: &Value| {
        let a: PlannedActivity = serde_json::from_value(node.clone()).unwrap();
        serde_json::to_string(&a).unwrap().len()
    };
    let base = node_bytes(&join(2));
    for bytes in [MAX_NODE_BYTES, MAX_NODE_BYTES + 1] {
        let node = join(2 + bytes - base);
        assert_eq!(node_bytes(&node), bytes);
        let mut acts: Vec<Value> = (0..width)
            .map(|i| json!({"name": name(i), "wait": {"seconds": 0}}))
            .collect();
        acts.push(node.clone());
        let wf_name = format!("join{bytes}");
        h.register_planned(&wf_name, json!({"activities": acts}))
            .await;
        let req = h.request(&wf_name, None);
        let wf = ids::workflow_exec_id(&wf_name, &req.workflow_request_id);
        h.engine.start_workflow(&req).await.unwrap();
        if bytes > MAX_NODE_BYTES {
            let w = h.workflow(&wf).await;
            assert_eq!(w.state, WorkflowState::Failed);
            let why = w.error.unwrap_or_default();
            assert!(
                why.contains(&format!("as planned is {bytes} bytes; at most 300000")),
                "{why}"
            );
            continue;
        }
        for _ in 0..20 {
            if !h.launcher.launches_of("join").is_empty() {
                break;
            }
            h.tick(h.now() + 60).await;
        }
        assert_eq!(h.launcher.payload("join", 0).input, node["input"]);
        h.run_to_completion(&wf, "join").await;
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
    }
}
