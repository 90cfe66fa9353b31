//! Unit tests of the redrive invariants (`workflow_redrive.rs`, and the
//! generation-aware history, attempt and count checks): each catches
//! what it is about, and lets the honest redrive pass.

use super::*;
use futures::FutureExt;
use serde_json::json;
use whimbrel_core::contract::Transition;
use whimbrel_core::model::WorkflowRequest;
use whimbrel_core::store::Backend;

/// Redrive request ids of the tests.
const R1: &str = "w::r1";
const R2: &str = "w::r2";

/// Activity `name` of workflow w::1 in `state`, at attempt `attempt`.
fn act(name: &str, state: &str, attempt: u32) -> ActivityExec {
    serde_json::from_value(json!({
        "activity_exec_id": format!("w::1::{name}"), "workflow_exec_id": "w::1",
        "workflow_name": "w", "activity_name": name, "state": state,
        "lambda": "f", "heartbeat_enabled": false, "start_time_epoch": 1000,
        "attempt": attempt,
    }))
    .expect("an activity item")
}

/// `a` with an entry to `to` by `transition` (event `by`).
fn step(mut a: ActivityExec, transition: Transition, to: ActivityState, by: &str) -> ActivityExec {
    a.trail
        .history
        .push(HistoryEntry::new(transition, to, 1010, by));
    a.state = to;
    a
}

/// Activity `name` claimed and launched (attempt 1), RUNNING, then
/// ended `to` by `transition`.
fn ended(name: &str, transition: Transition, to: ActivityState) -> ActivityExec {
    let a = step(
        act(name, "REQUESTED", 1),
        Transition::Queued,
        ActivityState::Queued,
        "launcher:1",
    );
    let a = step(a, Transition::Running, ActivityState::Running, "e0");
    step(a, transition, to, "e1")
}

/// `a` redriven by `r`, as `decide::redrive::redriven_item` writes it.
fn redriven(a: &ActivityExec, r: &str) -> ActivityExec {
    whimbrel_core::engine::decide::redrive::redriven_item(a, r, 1, 1020)
}

/// Workflow w::1 in `state`, redriven by `redrives`.
fn workflow(state: &str, redrives: &[&str]) -> WorkflowExec {
    let mut w: WorkflowExec = serde_json::from_value(json!({
        "workflow_exec_id": "w::1", "workflow_name": "w", "state": state,
        "start_time": [], "start_time_epoch": 1000,
    }))
    .expect("a workflow exec item");
    w.redrives = redrives.iter().map(|r| r.to_string()).collect();
    w.redrive_count = (!redrives.is_empty()).then_some(redrives.len() as u32);
    w
}

/// A table model holding a redrive request row for w::1 by each of `ids`.
fn requests(ids: &[&str]) -> (MemoryBackend, Tables) {
    let tables = Tables::new("t_");
    let mem = MemoryBackend::new(&tables, false);
    for id in ids {
        let row: WorkflowRequest = serde_json::from_value(json!({
            "workflow_request_id": id, "workflow_name": "w",
            "redrive_workflow_exec_id": "w::1",
        }))
        .expect("a request row");
        let item = serde_dynamo::to_item(&row).expect("item");
        mem.put(tables.workflow_request(), item, None)
            .now_or_never()
            .expect("at once")
            .expect("put");
    }
    (mem, tables)
}

/// The violations of one look at `acts` and `wfs`.
fn look(c: &mut Checker, acts: &[ActivityExec], wfs: &[WorkflowExec], ids: &[&str]) -> Vec<String> {
    let (mem, t) = requests(ids);
    c.redrive_violations(&crate::check::arcs(acts), wfs, &mem, &t, Some(1000))
}

fn has(v: &[String], what: &str) -> bool {
    v.iter().any(|m| m.contains(what))
}

#[test]
fn a_completed_activity_never_changes() {
    let done = step(
        act("a", "RUNNING", 1),
        Transition::Completed,
        ActivityState::Completed,
        "e1",
    );
    let mut done = done;
    done.outcome.output = Some(json!({"x": 1}));
    let wf = [workflow("FAILED", &[])];
    let mut c = Checker::default();
    assert!(look(&mut c, std::slice::from_ref(&done), &wf, &[]).is_empty());
    assert!(look(&mut c, std::slice::from_ref(&done), &wf, &[]).is_empty());
    let mut other_output = done.clone();
    other_output.outcome.output = Some(json!({"x": 2}));
    let mut other_attempt = done.clone();
    other_attempt.attempt.number = 2;
    let redone = redriven(&done, R1);
    let wf1 = [workflow("RUNNING", &[R1])];
    for (a, wfs) in [(other_output, &wf), (other_attempt, &wf), (redone, &wf1)] {
        let mut c = Checker::default();
        look(&mut c, std::slice::from_ref(&done), &wf, &[R1]);
        let v = look(&mut c, &[a], wfs, &[R1]);
        assert!(has(&v, "COMPLETED as"), "{v:?}");
    }
}

#[test]
fn an_activity_leaves_its_end_only_by_a_redrive_of_its_workflow() {
    let failed = step(
        act("b", "RUNNING", 1),
        Transition::Failed,
        ActivityState::Failed,
        "e1",
    );
    let mut c = Checker::default();
    assert!(look(
        &mut c,
        std::slice::from_ref(&failed),
        &[workflow("FAILED", &[])],
        &[]
    )
    .is_empty());
    // Back to REQUESTED with no redrive.
    let mut back = failed.clone();
    back.state = ActivityState::Requested;
    let v = look(&mut c, &[back], &[workflow("FAILED", &[])], &[]);
    assert!(
        has(&v, "terminal state FAILED changed to REQUESTED"),
        "{v:?}"
    );
    // Redriven by R1, a redrive of its workflow: fine.
    let mut c = Checker::default();
    look(
        &mut c,
        std::slice::from_ref(&failed),
        &[workflow("FAILED", &[])],
        &[R1],
    );
    let again = redriven(&failed, R1);
    let running = [workflow("RUNNING", &[R1])];
    assert!(look(&mut c, std::slice::from_ref(&again), &running, &[R1]).is_empty());
    // A redrive its workflow never had, or the same one twice.
    let v = entry_violations(&redriven(&failed, R2), Some(&running[0]));
    assert!(has(&v, "not a redrive of its workflow"), "{v:?}");
    let ended_again = step(
        again,
        Transition::Cancel,
        ActivityState::Cancelled,
        "upstream-ended:x",
    );
    let v = entry_violations(&redriven(&ended_again, R1), Some(&running[0]));
    assert!(has(&v, "redriven twice by"), "{v:?}");
}

#[test]
fn a_workflow_leaves_its_end_only_by_a_recorded_redrive() {
    let failed = [workflow("FAILED", &[])];
    let run = |before: &[WorkflowExec], after: &[WorkflowExec], ids: &[&str]| {
        let mut c = Checker::default();
        assert!(look(&mut c, &[], before, ids).is_empty());
        look(&mut c, &[], after, ids)
    };
    let v = run(&failed, &[workflow("RUNNING", &[])], &[R1]);
    assert!(has(&v, "changed to RUNNING without a redrive"), "{v:?}");
    let v = run(&failed, &[workflow("RUNNING", &[R1])], &[]);
    assert!(has(&v, "a request to redrive None"), "{v:?}");
    assert!(run(&failed, &[workflow("RUNNING", &[R1])], &[R1]).is_empty());
    let v = run(
        &[workflow("COMPLETED", &[])],
        &[workflow("RUNNING", &[R1])],
        &[R1],
    );
    assert!(has(&v, "while it was Some(Completed)"), "{v:?}");
    let v = run(
        &[workflow("RUNNING", &[])],
        &[workflow("RUNNING", &[R1])],
        &[R1],
    );
    assert!(has(&v, "while it was Some(Running)"), "{v:?}");
    let mut c = Checker::default();
    look(&mut c, &[], &failed, &[R1, R2]);
    look(&mut c, &[], &[workflow("RUNNING", &[R1])], &[R1, R2]);
    let v = look(&mut c, &[], &[workflow("RUNNING", &[R2])], &[R1, R2]);
    assert!(has(&v, "became"), "{v:?}");
    // Applied twice: counted twice, one id in the set.
    let mut twice = workflow("RUNNING", &[R1]);
    twice.redrive_count = Some(2);
    let v = run(&failed, &[twice], &[R1]);
    assert!(has(&v, "redrive_count Some(2)"), "{v:?}");
    // An earlier generation's error on a COMPLETED workflow.
    let mut done = workflow("COMPLETED", &[R1]);
    done.error = Some("activity a FAILED: old".into());
    assert!(has(&bookkeeping_violations(&done), "COMPLETED with error"));
}

#[test]
fn a_redrive_done_left_no_activity_of_its_workflow_behind() {
    let done = step(
        act("a", "RUNNING", 1),
        Transition::Completed,
        ActivityState::Completed,
        "e1",
    );
    let failed = step(
        act("b", "RUNNING", 1),
        Transition::Failed,
        ActivityState::Failed,
        "e2",
    );
    let mut under_way = workflow("RUNNING", &[R1]);
    under_way.redriving = Some(R1.into());
    let finished = workflow("RUNNING", &[R1]);
    let acts = [done.clone(), failed.clone()];
    let sweep = |last: &[ActivityExec]| {
        let mut c = Checker::default();
        look(&mut c, &acts, &[workflow("FAILED", &[])], &[R1]);
        look(&mut c, &acts, std::slice::from_ref(&under_way), &[R1]);
        look(&mut c, last, std::slice::from_ref(&finished), &[R1])
    };
    let v = sweep(&[done.clone(), failed.clone()]);
    assert!(has(&v, "never redriven by w::r1"), "{v:?}");
    assert!(sweep(&[done, redriven(&failed, R1)]).is_empty());
    assert!(has(
        &liveness_violations(&[under_way]),
        "under way at the end"
    ));
}

#[test]
fn a_redriven_history_and_its_attempts_are_checked_per_generation() {
    let failed = ended("b", Transition::Failed, ActivityState::Failed);
    let again = redriven(&failed, R1);
    assert!(super::super::safety::history_violations(&again).is_empty());
    assert!(super::super::safety::attempt_violations(&again).is_empty());
    // Claimed again: attempt 2, the policy of one attempt spent.
    let mut claimed = step(
        again,
        Transition::Queued,
        ActivityState::Queued,
        "launcher:2",
    );
    claimed.attempt.number = 2;
    assert!(super::super::safety::attempt_violations(&claimed).is_empty());
    let claimed = step(claimed, Transition::Running, ActivityState::Running, "e2");
    let failed_again = step(claimed, Transition::Failed, ActivityState::Failed, "e3");
    let v = super::super::safety::history_violations(&failed_again);
    assert!(v.is_empty(), "{v:?}");
    // Two ends in one generation; a COMPLETED one redriven; attempt 3.
    let twice = step(
        failed_again.clone(),
        Transition::Failed,
        ActivityState::Failed,
        "e4",
    );
    let v = super::super::safety::history_violations(&twice);
    assert!(has(&v, "2 terminal transitions"), "{v:?}");
    let done = ended("a", Transition::Completed, ActivityState::Completed);
    let v = super::super::safety::history_violations(&redriven(&done, R1));
    assert!(has(&v, "COMPLETED -> REQUESTED by REDRIVE"), "{v:?}");
    let mut third = failed_again;
    third.attempt.number = 3;
    let v = super::super::safety::attempt_violations(&third);
    assert!(has(&v, "attempt 3 of at most 2"), "{v:?}");
}

#[test]
fn an_earlier_generations_count_group_counts_for_nothing_but_never_into_the_next() {
    use whimbrel_core::store::{n, s, Value as V};
    let tables = Tables::new("t_");
    let mem = MemoryBackend::new(&tables, false);
    let put = |table: String, item: Vec<(&str, V)>| {
        let item = item.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        mem.put(table, item, None)
            .now_or_never()
            .expect("at once")
            .expect("put");
    };
    // a0 FAILED in generation 0 (group 0), redriven into generation 1.
    let mut a0 = redriven(
        &step(
            act("a0", "RUNNING", 1),
            Transition::Failed,
            ActivityState::Failed,
            "e",
        ),
        R1,
    );
    a0.links.count_slot = Some(whimbrel_core::model::GroupSlot {
        group: 100_000,
        size: 1,
    });
    put(
        tables.activity_exec_dependency(),
        vec![
            ("activity_exec_dependency", s("w::1#count-0")),
            ("activity_exec_id", s("w::1")),
            ("ended", V::Ss(vec!["a0".into()])),
            ("failed_count", n(1)),
        ],
    );
    let wf = |counted: Vec<String>, failed: u64| {
        vec![
            ("workflow_exec_id", s("w::1")),
            ("workflow_name", s("w")),
            ("state", s("RUNNING")),
            ("start_time", V::L(vec![])),
            ("start_time_epoch", n(1000)),
            ("activity_count", n(1)),
            ("redrive_count", n(1)),
            ("redrives", V::Ss(vec![R1.into()])),
            ("failed_count", n(failed)),
            ("counted_groups", V::Ss(counted)),
        ]
    };
    // The old group names a0, now REQUESTED: it counts for nothing.
    put(tables.workflow_exec(), wf(vec![], 0));
    let v = crate::counts::violations(&[Arc::new(a0.clone())], &mem, &tables);
    assert!(v.is_empty(), "{v:?}");
    // A late count of it into generation 1 (seed 3 before the fix).
    put(tables.workflow_exec(), wf(vec!["#count-0".into()], 1));
    let v = crate::counts::violations(&[Arc::new(a0.clone())], &mem, &tables);
    assert!(has(&v, "counted group 0 does not exist"), "{v:?}");
}

#[test]
fn a_node_may_keep_the_end_it_took_before_its_child_was_redriven() {
    let node = step(
        act("c", "RUNNING", 0),
        Transition::Failed,
        ActivityState::Failed,
        "child-ended:w::1::c",
    );
    let mut child = workflow("COMPLETED", &[R1]);
    child.end_time_epoch = Some(1100);
    assert!(ended_before_redriven_child(&node, &child));
    child.end_time_epoch = Some(1000);
    assert!(!ended_before_redriven_child(&node, &child));
    let never = workflow("COMPLETED", &[]);
    assert!(!ended_before_redriven_child(&node, &never));
}
