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
