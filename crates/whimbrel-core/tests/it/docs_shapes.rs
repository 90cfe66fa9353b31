//! The example JSON files in `docs/shapes/` parse as the types they
//! document, and the plan in them is valid: the docs cannot drift from the
//! code unnoticed.

use serde::de::DeserializeOwned;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityEvent, WorkflowRequest};
use whimbrel_core::plan::{DeciderRequest, LaunchPayload, Plan};

fn read(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/shapes")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json<T: DeserializeOwned>(name: &str) -> T {
    serde_json::from_str(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn row<T: DeserializeOwned>(name: &str) -> T {
    let item: serde_dynamo::Item =
        serde_json::from_str(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_dynamo::from_item(item).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn documented_shapes_parse_and_agree() {
    let req: DeciderRequest = json("decider-request.json");
    assert_eq!(req.kind, "workflow_started");
    let plan: Plan = json("plan.json");
    plan.validate().expect("documented plan is valid");
    let launch: LaunchPayload = json("launch-payload.json");
    assert!(plan
        .activities
        .iter()
        .any(|a| a.name == launch.activity_name));
    assert_eq!(
        launch.activity_exec_id,
        ids::activity_exec_id(&launch.workflow_exec_id, &launch.activity_name)
    );
    let request: WorkflowRequest = row("workflow-request-row.json");
    assert_eq!(
        req.workflow_exec_id,
        ids::workflow_exec_id(&request.workflow_name, &request.workflow_request_id)
    );
    let event: ActivityEvent = row("activity-event-row.json");
    let recommended = ids::check_id(
        "activity_event_id",
        "activity_exec_id",
        &event.activity_event_id,
        &event.activity_exec_id,
    )
    .expect("documented event id is not empty");
    assert!(recommended, "documented event id has the recommended form");
    assert!(event
        .transition
        .parse::<whimbrel_core::contract::Transition>()
        .is_ok());
}

/// `docs/shapes/signal-row.json` is a valid signal row, for a workflow
/// exec id of the documented form.
#[test]
fn the_documented_signal_row_is_valid() {
    let signal: whimbrel_core::model::SignalRow = row("signal-row.json");
    assert_eq!(signal.invalid(), None);
    assert_eq!(ids::name_of(&signal.workflow_exec_id), Some("approval"));
    assert_eq!(signal.input.unwrap()["by"], "ana");
}

/// `docs/shapes/plan-retries.json` is valid, and the policies in it give
/// the delays the tables of `docs/retries.md` § 1–2 show.
#[test]
fn documented_retry_plan_matches_the_retries_doc() {
    use whimbrel_core::retry::{jitter_unit, Jitter, TIMED_OUT};

    let plan: Plan = json("plan-retries.json");
    plan.validate().expect("documented retry plan is valid");
    assert_eq!(plan.execution_timeout_seconds, Some(7200));
    let by_name = |n: &str| {
        plan.activities
            .iter()
            .find(|a| a.name == n)
            .unwrap_or_else(|| panic!("no activity {n}"))
    };
    let dflt = plan.retry.clone().expect("a plan-level retry policy");
    // § 2, "Example delay": interval 5, rate 3.0, cap 60 (NONE ignores the unit).
    let delays: Vec<i64> = (1..=4).map(|a| dflt.delay_seconds(a, 0.5)).collect();
    assert_eq!(delays, vec![5, 15, 45, 60]);
    assert_eq!(dflt.attempts(), 5);

    // The task-list activity, with every activity timeout; `timeout_seconds`
    // is the alias of `start_to_close_seconds`.
    let thumb = by_name("thumbnail");
    assert_eq!(thumb.task_list.as_deref(), Some("images"));
    assert!(thumb.lambda.is_empty());
    assert_eq!(thumb.heartbeat_timeout_seconds, Some(30));
    assert_eq!(thumb.start_to_close_seconds, Some(600));
    assert_eq!(thumb.schedule_to_start_seconds, Some(900));
    assert_eq!(thumb.schedule_to_close_seconds, Some(3600));
    let p = thumb.retry.as_ref().expect("thumbnail retry").over(&dflt);
    assert_eq!(p.attempts(), 3);
    let delays: Vec<i64> = (1..=2).map(|a| p.delay_seconds(a, 0.5)).collect();
    assert_eq!(delays, vec![5, 15]);
    assert!(!p.retries("EXIT_2"));
    assert!(
        p.retries("BadInput"),
        "the activity's list replaces the plan's"
    );
    assert!(p.retries(TIMED_OUT));

    let fetch = by_name("fetch");
    assert_eq!(fetch.start_to_close_seconds, Some(300));
    assert_eq!(fetch.schedule_to_start_seconds, Some(600));
    let f = fetch.retry.as_ref().expect("fetch retry").over(&dflt);
    assert_eq!(f.jitter, Some(Jitter::Full));
    assert_eq!(f.attempts(), 5);
    assert!(f.retries("Throttled") && f.retries("NOT_STARTED"));
    assert!(!f.retries("BadInput") && !f.retries("Other"));
    // § 2, the FULL jitter table.
    let id = "fetch::0b8e5d4c-2f1a-5c3b-9e7d-6a5f4e3d2c1b";
    let jittered: Vec<i64> = (1..=4)
        .map(|a| f.delay_seconds(a, jitter_unit(id, a)))
        .collect();
    assert_eq!(jittered, vec![0, 3, 26, 33]);

    let publish = by_name("publish");
    let one = publish.retry.as_ref().expect("publish retry").over(&dflt);
    assert_eq!(one.attempts(), 1);
}

/// The cross-language vectors of `docs/workers.md` § 1 (also checked by
/// `examples/python-worker/test_worker.py`).
#[test]
fn worker_protocol_vectors_match_the_workers_doc() {
    use whimbrel_core::engine::attempts::task_list_shard;
    use whimbrel_core::store::shard_of;

    let merge = "merge::3073c528-a75b-52da-b0f1-b3fade72a32c";
    assert_eq!(shard_of("a"), 0xe40c_292c_u32 % 8);
    assert_eq!(shard_of("a"), 4);
    assert_eq!(shard_of(merge), 3);
    assert_eq!(task_list_shard("resize", "a"), "resize#0");
    assert_eq!(task_list_shard("resize", merge), "resize#3");
    assert_eq!(
        ids::token_hash("4c7e1a9f2b3d4e56a8f0c1d2e3b4a596"),
        "12795d9d-976e-5375-865d-a94409e499ab"
    );
}

/// `docs/shapes/decision-request.json` is a decision request, and
/// `docs/shapes/decisions.json` an answer the rules accept against it
/// (design.md § 10): its cancel names an open node, its `ship` depends on
/// one scheduled with it and one open.
#[test]
fn documented_decision_shapes_parse_and_are_accepted() {
    use whimbrel_core::decider::{validate, DecisionContext, DecisionRequest, DecisionsAnswer};
    let request: DecisionRequest = json("decision-request.json");
    assert_eq!(request.kind, "decision");
    assert!(request.decision_id.starts_with(&request.workflow_exec_id));
    let answer: DecisionsAnswer = json("decisions.json");
    let mut ctx = DecisionContext {
        now: 1_795_850_010,
        ..DecisionContext::default()
    };
    for node in &request.open {
        ctx.state_by_name.insert(node.name.clone(), node.state);
    }
    for e in &request.events {
        if let (Some(node), Some(state)) = (&e.node, e.state) {
            ctx.state_by_name.insert(node.clone(), state);
        }
    }
    ctx.node_count = ctx.state_by_name.len();
    validate(&answer, &ctx).expect("the documented answer is accepted");
}
