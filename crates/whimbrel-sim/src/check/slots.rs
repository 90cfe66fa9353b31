//! The invariants of a plan's concurrency limit (design.md § 9.3), read
//! after every write: a workflow's `slots_used` is exactly the number of
//! its activities holding a slot (`slot_held`: the take and the give-back
//! are transactions with the count), never below 0 nor above its
//! `max_concurrency`; every limited activity in flight (claimed, not
//! ended) holds one; and once all its limited activities ended, no slot
//! is held (none leaked).

use std::collections::HashMap;
use std::sync::Arc;

use whimbrel_core::attr;
use whimbrel_core::contract::ActivityState;
use whimbrel_core::keys::Tables;
use whimbrel_core::model::ActivityExec;
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Value;

/// Every violation of the slot invariants among `acts` (all activity
/// items) and the workflow items of `mem`.
pub fn violations(acts: &[Arc<ActivityExec>], mem: &MemoryBackend, t: &Tables) -> Vec<String> {
    let mut v = Vec::new();
    let mut by_workflow: HashMap<&str, Vec<&ActivityExec>> = HashMap::new();
    for a in acts.iter().filter(|a| a.links.max_concurrency.is_some()) {
        by_workflow.entry(&a.workflow_exec_id).or_default().push(a);
        let claimed = !matches!(a.state, ActivityState::Requested | ActivityState::Ready);
        if claimed && !a.state.is_terminal() && !a.links.slot_held {
            v.push(format!(
                "{}: {} under a concurrency limit without a slot",
                a.activity_exec_id, a.state
            ));
        }
    }
    let used = slots_used(mem, t);
    for (wf, limited) in by_workflow {
        let limit = i64::from(limited[0].links.max_concurrency.unwrap_or(0));
        let held = limited.iter().filter(|a| a.links.slot_held).count() as i64;
        let count = used.get(wf).copied().unwrap_or(0);
        if count != held || !(0..=limit).contains(&count) {
            v.push(format!(
                "workflow {wf}: slots_used {count}, {held} activities hold a slot, limit {limit}"
            ));
        }
        if held > 0
            && limited
                .iter()
                .all(|a| a.state.is_terminal() && a.timing.due_epoch.is_none())
        {
            v.push(format!(
                "workflow {wf}: {held} slots leaked (every limited activity ended and settled)"
            ));
        }
    }
    v
}

/// `slots_used` of each workflow exec item that has one.
fn slots_used(mem: &MemoryBackend, t: &Tables) -> HashMap<String, i64> {
    let read = |_: &str, i: &whimbrel_core::store::Item| {
        let id = match i.get(attr::WORKFLOW_EXEC_ID) {
            Some(Value::S(id)) => id.clone(),
            _ => return None,
        };
        match i.get(attr::SLOTS_USED) {
            Some(Value::N(n)) => Some((id, n.parse().unwrap_or(i64::MIN))),
            _ => None,
        }
    };
    mem.decoded(&t.workflow_exec(), read)
        .into_iter()
        .flatten()
        .collect()
}
