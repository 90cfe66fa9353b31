//! Concurrency limits of a plan (design.md § 9.3), as writes: a limited
//! activity's first claim takes one of the workflow's `max_concurrency`
//! slots (`slots_used` on the workflow exec) in the same transaction;
//! when none is free it joins the workflow's `slot_waiters` instead, on
//! the condition that none is free (so a slot freed meanwhile is never
//! missed); the settle of its end gives the slot back once (the item's
//! `slot_held`, removed in the same transaction), then hands free slots to
//! the waiters in plan order. Pure.

use crate::attr;
use crate::keys::WorkflowRef;
use crate::keys::{activity_key, workflow_key, Tables};
use crate::model::ActivityExec;
use crate::write::{n, s, Action, Cmp, Cond, UpdateRequest, Value as AttributeValue};

/// The limit `exec` is claimed under: its plan's `max_concurrency`, for
/// an activity that runs code of a limited plan; `None` otherwise.
pub fn slot_limit(exec: &ActivityExec) -> Option<u32> {
    exec.links.max_concurrency
}

/// `exec`'s entry in `slot_waiters`: `(plan index, 6 digits)#(name)`, so
/// the set's order is the plan's.
pub fn waiter_entry(exec: &ActivityExec) -> String {
    format!(
        "{:06}#{}",
        exec.links.plan_index.unwrap_or(0),
        exec.activity_name
    )
}

/// The activity name of a `slot_waiters` entry.
pub fn waiter_name(entry: &str) -> &str {
    entry.split_once('#').map_or(entry, |(_, name)| name)
}

fn workflow_update(t: &Tables, exec: &ActivityExec) -> UpdateRequest {
    UpdateRequest::new(
        t.workflow_exec(),
        workflow_key(&exec.workflow_exec_id, &exec.workflow_name),
    )
}

fn set_of(entry: &str) -> AttributeValue {
    AttributeValue::Ss(vec![entry.to_string()])
}

/// `slots_used < limit`, a missing count being 0.
fn slot_free(limit: u32) -> Cond {
    Cond::Or(vec![
        Cond::not_exists(attr::SLOTS_USED),
        Cond::lt(attr::SLOTS_USED, n(limit)),
    ])
}

/// The workflow's half of a claim that takes a slot: `slots_used + 1`
/// while below `limit`; for a waiter handed a slot, also out of
/// `slot_waiters`, on the condition that it is still there (once).
pub fn take_slot(t: &Tables, exec: &ActivityExec, limit: u32, waiter: bool) -> UpdateRequest {
    let req = workflow_update(t, exec)
        .when(slot_free(limit))
        .act(Action::Add(attr::SLOTS_USED.into(), n(1)));
    if !waiter {
        return req;
    }
    let entry = waiter_entry(exec);
    req.when(Cond::Contains(attr::SLOT_WAITERS.into(), s(&entry)))
        .act(Action::Delete(attr::SLOT_WAITERS.into(), set_of(&entry)))
}

/// Empty `slot_waiters` of workflow `wf` (id, name): run by a cancel of
/// all its nodes once those not claimed are cancelled (every waiter
/// among them), so a slot it frees next hands nothing on and walks no
/// cancelled waiter one write at a time (each a write of the whole
/// workflow item: 1,870 waiters made 1,870 writes of 240 KB). A waiter
/// claimed meanwhile has left the set already.
pub fn drop_all_waiters(t: &Tables, wf: WorkflowRef<'_>) -> UpdateRequest {
    UpdateRequest::new(t.workflow_exec(), wf.key())
        .when(Cond::exists(attr::SLOT_WAITERS))
        .remove(attr::SLOT_WAITERS)
}

/// Join `slot_waiters`, on the condition that no slot is free (else the
/// caller claims again).
pub fn wait_for_slot(t: &Tables, exec: &ActivityExec, limit: u32) -> UpdateRequest {
    workflow_update(t, exec)
        .when(Cond::Compare(attr::SLOTS_USED.into(), Cmp::Ge, n(limit)))
        .act(Action::Add(
            attr::SLOT_WAITERS.into(),
            set_of(&waiter_entry(exec)),
        ))
}

/// Leave `slot_waiters` without a slot: a waiter that ended (cancelled)
/// before a slot came.
pub fn drop_waiter(t: &Tables, exec: &ActivityExec) -> UpdateRequest {
    workflow_update(t, exec).act(Action::Delete(
        attr::SLOT_WAITERS.into(),
        set_of(&waiter_entry(exec)),
    ))
}

/// The condition of every give-back of a slot held by `exec`: the item is
/// still in the state its settle read. A settle run again from a stale
/// read (a redelivery, the monitor) after a redrive put the item back to
/// run and its new attempt took a slot would otherwise give back the new
/// attempt's slot, and the limit would be exceeded (issue 42 A.3,
/// torture seed 103125).
pub fn ended_as_read(exec: &ActivityExec) -> Cond {
    Cond::eq(attr::STATE, crate::write::s(exec.state.as_str()))
}

/// The give-back of `exec`'s slot, a transaction of two: the item's
/// `slot_held` removed (the condition: still there, so once) and the
/// workflow's `slots_used - 1`;
/// and only while the item is as its settle read it ([`ended_as_read`]).
pub fn give_back_slot(t: &Tables, exec: &ActivityExec) -> (UpdateRequest, UpdateRequest) {
    let item = UpdateRequest::new(
        t.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::exists(attr::SLOT_HELD))
    .when(ended_as_read(exec))
    .remove(attr::SLOT_HELD);
    let wf = workflow_update(t, exec).act(Action::Add(attr::SLOTS_USED.into(), n(-1)));
    (item, wf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_sort_in_plan_order_and_name_their_activity() {
        let mut a = crate::decide::tests::running(None, None);
        a.activity_name = "b".into();
        a.links.plan_index = Some(12);
        let mut b = a.clone();
        b.activity_name = "a".into();
        b.links.plan_index = Some(3);
        let (ea, eb) = (waiter_entry(&a), waiter_entry(&b));
        assert_eq!(ea, "000012#b");
        assert!(eb < ea, "plan order, not name order");
        assert_eq!(waiter_name(&ea), "b");
        let t = Tables::new("x_");
        let take = take_slot(&t, &a, 5, true);
        assert!(take.cond.is_some());
        let (item, wf) = give_back_slot(&t, &a);
        assert_eq!(item.table, "x_activity_exec");
        assert_eq!(wf.table, "x_workflow_exec");
    }
}
