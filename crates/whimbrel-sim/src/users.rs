//! Users: `whimbrel cancel` as a user runs it (CANCEL rows, without a token,
//! for every activity the contract lets a client cancel), sometimes twice.

use whimbrel_core::attr;
use whimbrel_core::contract::{self, Actor, Transition, WorkflowState};
use whimbrel_core::engine::Engine;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityEvent, ActivityExec};
use whimbrel_core::store::{s, KeyCond, INDEX_ACTIVITIES_BY_WORKFLOW};

use crate::shared::{lock, SimLauncher, World};

/// Insert CANCEL rows for the activities of `workflow_exec_id` not ended.
pub async fn cancel(
    engine: &Engine<SimLauncher>,
    world: &World,
    workflow_exec_id: &str,
) -> Result<(), String> {
    let store = engine.store();
    let name = ids::name_of(workflow_exec_id).unwrap_or_default();
    if let Ok(wf) = engine.load_workflow(workflow_exec_id, name).await {
        if wf.state == WorkflowState::Requested {
            // Not started yet: cancelled as a whole (or, while its
            // activities are being created, refused: try later).
            let _ = engine
                .cancel_requested_workflow(workflow_exec_id, name, "cancelled by a user")
                .await;
            return Ok(());
        }
    }
    let key = KeyCond {
        hash: (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
        range: None,
    };
    let acts: Vec<ActivityExec> = store
        .query_keys_only(
            &store.tables().activity_exec(),
            INDEX_ACTIVITIES_BY_WORKFLOW,
            key,
            [attr::ACTIVITY_EXEC_ID, attr::WORKFLOW_EXEC_ID],
        )
        .await
        .map_err(|e| e.to_string())?;
    let twice = lock(world).chance(0.3);
    for _ in 0..if twice { 2 } else { 1 } {
        for a in &acts {
            let kind = a.runner.kind();
            if contract::next_state(kind, a.state, Transition::Cancel, Actor::Client).is_err() {
                continue;
            }
            let ev = ActivityEvent {
                error: Some("cancelled by a user".into()),
                ..ActivityEvent::new(
                    &a.activity_exec_id,
                    "CANCEL",
                    engine.now(),
                    "sim user",
                    &engine.new_token(),
                )
            };
            store
                .put_new(
                    &store.tables().activity_event(),
                    attr::ACTIVITY_EVENT_ID,
                    &ev,
                )
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
