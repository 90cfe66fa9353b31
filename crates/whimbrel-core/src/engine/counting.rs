//! Counting activity ends (design.md § 3.3): each terminal
//! activity is counted once into its count group (a small item per group
//! of at most `EngineConfig::join_group_size` activities, in plan order),
//! and a complete group adds its counters to the workflow exec once. The
//! workflow exec is written once per group, not once per activity, and the
//! terminal write is a plain conditional update, not a transaction with
//! the workflow's counter. A function that dies between the terminal write
//! and the count leaves the count owed: the settle (a redelivery, or the
//! monitor at the activity's due marker) does it, and the markers make it
//! once. Items without a count slot (written before count groups) are
//! counted in the terminal transaction, as before.

use crate::attr;
use crate::store::Value as AttributeValue;

use super::decide::redrive::GROUPS_PER_GENERATION;
use super::decide::{cap_error, group_item_key, workflow_key};
use super::{Engine, EngineError};
use crate::contract;
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, CountGroup};
use crate::store::{n, s, Action, Cond, Item, StoreError, Tables, UpdateRequest};

/// The key of count group `group` of workflow exec `workflow_exec_id`.
pub fn count_group_key(workflow_exec_id: &str, group: u32) -> Item {
    group_item_key(
        ids::count_group_id(workflow_exec_id, group),
        workflow_exec_id,
    )
}

/// Count the terminal `exec` into its count group (design.md § 3.3): add
/// its name to `ended` and one to its state's counter, creating the item
/// on the first end; conditional on the name not being there, so each
/// activity is counted once however often its settle runs.
pub fn count_into_group(tables: &Tables, exec: &ActivityExec, group: u32) -> UpdateRequest {
    let counter = contract::end_counter(exec.state).expect("terminal state");
    UpdateRequest::new(
        tables.activity_exec_dependency(),
        count_group_key(&exec.workflow_exec_id, group),
    )
    .when(Cond::not_contains(
        attr::ENDED,
        s(exec.activity_name.as_str()),
    ))
    .act(Action::Add(
        attr::ENDED.into(),
        AttributeValue::Ss(vec![exec.activity_name.clone()]),
    ))
    .act(Action::Add(counter.into(), n(1)))
}

/// The condition that count group `group_number` is of its workflow's
/// current generation (design.md § 9.4: `redrive_count`, absent before
/// the first redrive). A redrive clears `counted_groups`, so a late count
/// of an earlier generation (a settle that read its group whole before
/// the redrive and writes after it) would otherwise add that group's
/// ends into the counters the redrive started anew.
fn of_current_generation(group_number: u32) -> Cond {
    match group_number / GROUPS_PER_GENERATION {
        0 => Cond::not_exists(attr::REDRIVE_COUNT),
        g => Cond::eq(attr::REDRIVE_COUNT, n(g)),
    }
}

/// Add a complete count group's counters to its workflow exec, once (the
/// group's marker in `counted_groups`), and only in the group's own
/// generation.
pub fn count_group_into_workflow(
    tables: &Tables,
    exec: &ActivityExec,
    group_number: u32,
    group: &CountGroup,
) -> UpdateRequest {
    let marker = ids::count_marker(group_number);
    UpdateRequest::new(
        tables.workflow_exec(),
        workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
    )
    .when(Cond::exists(attr::WORKFLOW_EXEC_ID))
    .when(of_current_generation(group_number))
    .when(Cond::not_contains(attr::COUNTED_GROUPS, s(marker.as_str())))
    .act(Action::Add(
        attr::COMPLETED_COUNT.into(),
        n(group.completed_count),
    ))
    .act(Action::Add(
        attr::FAILED_COUNT.into(),
        n(group.failed_count),
    ))
    .act(Action::Add(
        attr::CANCELLED_COUNT.into(),
        n(group.cancelled_count),
    ))
    .act(Action::Add(
        attr::COUNTED_GROUPS.into(),
        AttributeValue::Ss(vec![marker]),
    ))
}

/// Record a failed activity's reason as its workflow's `error`, unless one
/// is there (the first failure counted wins): what the terminal
/// transaction's counter update does for an item without a count slot.
/// Only in the generation of the activity's count group (`group_number`):
/// a late settle of an earlier generation would leave a redriven workflow
/// an error of the failure it redrove.
pub fn first_failure(tables: &Tables, exec: &ActivityExec, group_number: u32) -> UpdateRequest {
    let why = exec.outcome.error.as_deref().unwrap_or("no reason given");
    let reason = cap_error(&format!(
        "activity {} {}: {why}",
        exec.activity_name, exec.state
    ));
    UpdateRequest::new(
        tables.workflow_exec(),
        workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
    )
    .when(Cond::exists(attr::WORKFLOW_EXEC_ID))
    .when(of_current_generation(group_number))
    .act(Action::SetIfNotExists(attr::ERROR.into(), s(reason)))
}

impl<L: Launcher> Engine<L> {
    /// Count the terminal `exec` (see the module); nothing for an item
    /// counted in its terminal transaction (no count slot). A failure also
    /// records the workflow's first reason ([`first_failure`]).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn count_ended(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let Some(slot) = exec.links.count_slot else {
            return Ok(());
        };
        let t = self.store.tables();
        if exec.state.is_failure() {
            match self.store.update(first_failure(t, exec, slot.group)).await {
                Ok(_) | Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let req = count_into_group(t, exec, slot.group);
        let group: CountGroup = match self.store.update_returning_new(req).await {
            Ok(Some(item)) => serde_dynamo::from_item(item).map_err(|e| {
                EngineError::Retry(format!(
                    "{} count group {}: {e}",
                    exec.workflow_exec_id, slot.group
                ))
            })?,
            Ok(None) => {
                return Err(EngineError::Retry(format!(
                    "{}: no count group returned",
                    exec.activity_exec_id
                )))
            }
            // Counted already (a redelivery, the monitor settling after a
            // crash): read the group, and finish its part if it is complete.
            Err(StoreError::ConditionFailed) => self
                .store
                .get(
                    &t.activity_exec_dependency(),
                    count_group_key(&exec.workflow_exec_id, slot.group),
                )
                .await?
                .ok_or_else(|| {
                    EngineError::Retry(format!(
                        "{}: count group {} vanished",
                        exec.workflow_exec_id, slot.group
                    ))
                })?,
            Err(e) => return Err(e.into()),
        };
        if (group.ended.len() as u64) < u64::from(slot.size) {
            return Ok(());
        }
        let req = count_group_into_workflow(t, exec, slot.group, &group);
        match self.store.update(req).await {
            // Added once: by this call, or by whoever completed it first.
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
