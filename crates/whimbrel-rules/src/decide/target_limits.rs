//! Concurrency limits per Lambda function or task list, across workflows
//! (design.md § 9.3), as writes on the target's `whimbrel_limit` item
//! ([`crate::model::TargetLimit`]): a claim takes a slot (`slots_free - 1`
//! while above 0) in its own transaction; when none is free the activity
//! joins the item's `slot_waiters` on the condition that none is free (so
//! a slot given back meanwhile is never missed); the settle of its end
//! gives the slot back once (the item's `target_slot_held`, removed in the
//! same transaction), then hands free slots to the oldest waiters. The
//! same shape as a plan's limit ([`super::slots`]), counted down instead
//! of up so that a limit can be changed without reading what is held.
//! Pure.

use crate::attr;
use crate::keys::{activity_key, limit_key, Tables};
use crate::model::{ActivityExec, Runs};
use crate::targets::function_name;
use crate::write::{n, s, Action, Cmp, Cond, UpdateRequest, Value as AttributeValue};

/// Most activities one target keeps waiting: an entry is at most 309
/// bytes ([`waiter_entry`] with a 128-byte workflow name and node name),
/// so 1,200 make at most 370,800 bytes of the target's item, within
/// DynamoDB's 409,600 (docs/limits.md § 6). A claim that finds them all
/// taken is retried later (the caller's retry), not lost.
pub const MAX_TARGET_WAITERS: u64 = 1_200;

/// The `whimbrel_limit` target of `exec`: `lambda:(function name)` for an
/// activity run by a Lambda (a name, partial or full ARN reduced to its
/// name, qualifier dropped), `task_list:(name)` for a task-list activity,
/// `None` for a node that runs no code.
pub fn target_of(exec: &ActivityExec) -> Option<String> {
    match &exec.runner.runs {
        Runs::Lambda { function } => Some(lambda_target(function)),
        Runs::TaskList { list } => Some(task_list_target(list)),
        Runs::Timer { .. } | Runs::Signal { .. } | Runs::Child(_) => None,
    }
}

/// The target of Lambda `function` (name or ARN): `lambda:(name)`.
pub fn lambda_target(function: &str) -> String {
    format!("lambda:{}", function_name(function))
}

/// The target of task list `list`: `task_list:(list)`.
pub fn task_list_target(list: &str) -> String {
    format!("task_list:{list}")
}

/// A target as a person writes it (`whimbrel limit set`):
/// `lambda:(function name or ARN)` or `task_list:(name)`, the function
/// reduced to its name ([`lambda_target`]). `None` for anything else.
pub fn parse_target(text: &str) -> Option<String> {
    match text.split_once(':')? {
        ("lambda", f) if !function_name(f).is_empty() => Some(lambda_target(f)),
        ("task_list", l) if !l.is_empty() => Some(task_list_target(l)),
        _ => None,
    }
}

/// `exec`'s entry in a target's `slot_waiters`, joined at `now` (epoch
/// seconds): `(now, 10 digits)#(workflow exec id length, 4 digits)(workflow
/// exec id)(activity name)`, so the set sorts oldest first and an entry
/// names its activity whatever characters the names hold.
pub fn waiter_entry(exec: &ActivityExec, now: i64) -> String {
    format!(
        "{:010}#{:04}{}{}",
        now.max(0),
        exec.workflow_exec_id.len(),
        exec.workflow_exec_id,
        exec.activity_name
    )
}

/// The (workflow exec id, activity name) a waiter entry names; `None` for
/// an entry this module did not write.
pub fn waiter_of(entry: &str) -> Option<(&str, &str)> {
    let (_, rest) = entry.split_once('#')?;
    let len: usize = rest.get(..4)?.parse().ok()?;
    let rest = rest.get(4..)?;
    Some((rest.get(..len)?, rest.get(len..)?))
}

fn limit_update(t: &Tables, target: &str) -> UpdateRequest {
    UpdateRequest::new(t.limit(), limit_key(target))
}

fn set_of(entry: &str) -> AttributeValue {
    AttributeValue::Ss(vec![entry.to_string()])
}

/// The target's half of a claim that takes a slot: `slots_free - 1` while
/// above 0; for a waiter handed a slot (`entry`), also out of
/// `slot_waiters`, on the condition that it is still there (once). Fails
/// its condition when the limit item is gone (the limit was removed).
pub fn take_target_slot(t: &Tables, target: &str, entry: Option<&str>) -> UpdateRequest {
    let req = limit_update(t, target)
        .when(Cond::Compare(attr::SLOTS_FREE.into(), Cmp::Gt, n(0)))
        .act(Action::Add(attr::SLOTS_FREE.into(), n(-1)));
    match entry {
        None => req,
        Some(entry) => req
            .when(Cond::Contains(attr::SLOT_WAITERS.into(), s(entry)))
            .act(Action::Delete(attr::SLOT_WAITERS.into(), set_of(entry))),
    }
}

/// Join the target's waiters, on the condition that no slot is free and
/// fewer than [`MAX_TARGET_WAITERS`] wait (else the caller looks again).
pub fn wait_for_target_slot(t: &Tables, target: &str, entry: &str) -> UpdateRequest {
    limit_update(t, target)
        .when(Cond::Compare(attr::SLOTS_FREE.into(), Cmp::Le, n(0)))
        .when(Cond::Or(vec![
            Cond::not_exists(attr::SLOT_WAITERS),
            Cond::SizeLt(attr::SLOT_WAITERS.into(), MAX_TARGET_WAITERS),
        ]))
        .act(Action::Add(attr::SLOT_WAITERS.into(), set_of(entry)))
}

/// Leave the target's waiters without a slot: a waiter that ended, or one
/// that now waits for its plan's slot instead.
pub fn drop_target_waiter(t: &Tables, target: &str, entry: &str) -> UpdateRequest {
    limit_update(t, target)
        .when(Cond::exists(attr::TARGET))
        .act(Action::Delete(attr::SLOT_WAITERS.into(), set_of(entry)))
}

/// The give-back of `exec`'s target slot, a transaction of two: the
/// item's `target_slot_held` removed (the condition: still there, so once)
/// and the target's `slots_free + 1`. `None` when it holds none.
pub fn give_back_target_slot(
    t: &Tables,
    exec: &ActivityExec,
) -> Option<(UpdateRequest, UpdateRequest)> {
    let target = exec.links.target_limit.as_deref()?;
    let item = UpdateRequest::new(
        t.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::exists(attr::TARGET_SLOT_HELD))
    .when(super::slots::ended_as_read(exec))
    .remove(attr::TARGET_SLOT_HELD)
    .remove(attr::TARGET_SLOT_ADOPTED);
    let limit = limit_update(t, target).act(Action::Add(attr::SLOTS_FREE.into(), n(1)));
    Some((item, limit))
}

/// Whether a new limit adopts `exec` (issue 42 A.7): an attempt that runs
/// code and claimed while its target had no limit, so it holds no target
/// slot: QUEUED (claimed, launched or waiting for a worker or its retry's
/// delay) or RUNNING. A waiter for a slot is REQUESTED, not adopted.
pub fn adoptable(exec: &ActivityExec) -> bool {
    use crate::contract::ActivityState::{Queued, Running};
    exec.runner.kind().runs_code()
        && matches!(exec.state, Queued | Running)
        && !exec.links.target_slot_held
}

/// The adoption of `exec` ([`adoptable`]) by `target`'s new limit, a
/// transaction of two: the item's `target_limit` and `target_slot_held`
/// set, on the condition that it holds none and is in the state read
/// (so its settle gives the slot back once, as a claimed one's); and the
/// target's `slots_free - 1`, with no floor, on the condition that the
/// limit exists. A limit set under load is over it until enough end, and
/// no claim takes a slot meanwhile (issue 42 A.7).
pub fn adopt_target_slot(
    t: &Tables,
    exec: &ActivityExec,
    target: &str,
) -> (UpdateRequest, UpdateRequest) {
    let item = UpdateRequest::new(
        t.activity_exec(),
        activity_key(&exec.activity_exec_id, &exec.workflow_exec_id),
    )
    .when(Cond::not_exists(attr::TARGET_SLOT_HELD))
    .when(super::slots::ended_as_read(exec))
    .set(attr::TARGET_LIMIT, s(target))
    .set(attr::TARGET_SLOT_HELD, AttributeValue::Bool(true))
    .set(attr::TARGET_SLOT_ADOPTED, AttributeValue::Bool(true));
    let limit = limit_update(t, target)
        .when(Cond::exists(attr::MAX_CONCURRENCY))
        .act(Action::Add(attr::SLOTS_FREE.into(), n(-1)));
    (item, limit)
}

/// A new limit of `max` on `target`, every slot free; conditioned on
/// there being none yet (`whimbrel limit set`; a removed limit leaves its
/// key, without `max_concurrency`).
pub fn new_limit(t: &Tables, target: &str, max: u32) -> UpdateRequest {
    limit_update(t, target)
        .when(Cond::not_exists(attr::MAX_CONCURRENCY))
        .set(attr::MAX_CONCURRENCY, n(max))
        .set(attr::SLOTS_FREE, n(max))
}

/// `target`'s limit changed from `old` (as read) to `max`: the free slots
/// move by the difference, conditioned on `old` being still the limit.
pub fn change_limit(t: &Tables, target: &str, old: u32, max: u32) -> UpdateRequest {
    limit_update(t, target)
        .when(Cond::eq(attr::MAX_CONCURRENCY, n(old)))
        .set(attr::MAX_CONCURRENCY, n(max))
        .act(Action::Add(
            attr::SLOTS_FREE.into(),
            n(i64::from(max) - i64::from(old)),
        ))
}

/// The removal of `target`'s limit of `max` (`whimbrel limit remove`),
/// only while idle: every slot free and nobody waiting.
pub fn remove_limit(t: &Tables, target: &str, max: u32) -> UpdateRequest {
    limit_update(t, target)
        .when(Cond::eq(attr::MAX_CONCURRENCY, n(max)))
        .when(Cond::eq(attr::SLOTS_FREE, n(max)))
        .when(Cond::not_exists(attr::SLOT_WAITERS))
        .remove(attr::MAX_CONCURRENCY)
        .remove(attr::SLOTS_FREE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::eval::eval;

    fn exec(lambda: &str, task_list: Option<&str>) -> ActivityExec {
        let mut a = crate::decide::tests::running(None, None);
        a.runner.runs = match task_list {
            Some(list) => Runs::TaskList { list: list.into() },
            None => Runs::Lambda {
                function: lambda.into(),
            },
        };
        a
    }

    /// Issue 42 D (docs/limits.md § 6, Open 6): a target's item holds its
    /// most waiters with the longest entries (a 128-byte workflow name's
    /// exec id and a 128-byte node name: 309 bytes each) within DynamoDB's
    /// 409,600 bytes. With 2,000 waiters of about 100 bytes assumed, such
    /// entries made about 618,000 bytes and the join was refused by
    /// DynamoDB with its own text.
    #[test]
    fn a_targets_most_waiters_with_the_longest_entries_fit_its_item() {
        let mut a = exec("f", None);
        a.workflow_exec_id = format!("{}::{}", "w".repeat(128), "8".repeat(36));
        a.activity_name = "n".repeat(128);
        let longest = waiter_entry(&a, i64::from(i32::MAX)).len();
        assert_eq!(longest, 309);
        let entries: Vec<String> = (0..MAX_TARGET_WAITERS)
            .map(|i| format!("{i:0>309}"))
            .collect();
        let mut item = limit_key(&format!("lambda:{}", "f".repeat(140)));
        item.insert(attr::MAX_CONCURRENCY.into(), n(u32::MAX));
        item.insert(attr::SLOTS_FREE.into(), n(-i64::from(u32::MAX)));
        item.insert(attr::SLOT_WAITERS.into(), AttributeValue::Ss(entries));
        let size = crate::write::size::item_size(&item);
        assert!(size <= crate::write::size::MAX_ITEM_BYTES, "{size}");
    }

    #[test]
    fn a_target_is_the_function_name_or_the_task_list() {
        let arn = "arn:aws:lambda:us-east-1:123456789012:function:resize:live";
        assert_eq!(target_of(&exec(arn, None)).unwrap(), "lambda:resize");
        assert_eq!(target_of(&exec("resize", None)).unwrap(), "lambda:resize");
        let worker = exec("", Some("gpu"));
        assert_eq!(target_of(&worker).unwrap(), "task_list:gpu");
        assert_eq!(
            parse_target(&format!("lambda:{arn}")).unwrap(),
            "lambda:resize"
        );
        assert_eq!(parse_target("task_list:gpu").unwrap(), "task_list:gpu");
        for bad in ["resize", "lambda:", "task_list:", "queue:x"] {
            assert_eq!(parse_target(bad), None, "{bad}");
        }
    }

    #[test]
    fn waiter_entries_sort_oldest_first_and_name_their_activity() {
        let mut a = exec("f", None);
        a.workflow_exec_id = "w#1::x".into();
        a.activity_name = "n#2".into();
        let (late, early) = (waiter_entry(&a, 200), waiter_entry(&a, 100));
        assert!(early < late);
        assert_eq!(waiter_of(&late), Some(("w#1::x", "n#2")));
        assert_eq!(waiter_of("junk"), None);
    }

    #[test]
    fn a_slot_is_taken_only_while_free_and_a_waiter_joins_only_when_none_is() {
        let t = Tables::new("x_");
        let mut item = limit_key("lambda:f");
        item.insert(attr::MAX_CONCURRENCY.into(), n(1));
        item.insert(attr::SLOTS_FREE.into(), n(1));
        let take = take_target_slot(&t, "lambda:f", None);
        let wait = wait_for_target_slot(&t, "lambda:f", "e");
        assert!(eval(take.cond.as_ref().unwrap(), Some(&item)));
        assert!(!eval(wait.cond.as_ref().unwrap(), Some(&item)));
        item.insert(attr::SLOTS_FREE.into(), n(0));
        assert!(!eval(take.cond.as_ref().unwrap(), Some(&item)));
        assert!(eval(wait.cond.as_ref().unwrap(), Some(&item)));
        let full: Vec<String> = (0..MAX_TARGET_WAITERS).map(|i| i.to_string()).collect();
        item.insert(attr::SLOT_WAITERS.into(), AttributeValue::Ss(full));
        assert!(!eval(wait.cond.as_ref().unwrap(), Some(&item)), "capped");
        assert!(!eval(take.cond.as_ref().unwrap(), None), "removed limit");
    }
}
