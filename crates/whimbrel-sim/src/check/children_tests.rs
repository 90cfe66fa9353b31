//! Unit tests of the child workflow invariants (`children.rs`): each
//! catches what it is about, and lets the honest case pass.

use super::*;
use serde_json::json;
use whimbrel_core::contract::Transition;
use whimbrel_core::handlers::Outcome;
use whimbrel_core::history::HistoryEntry;
use whimbrel_core::model::ParentLink;

/// Node "c" of top-level workflow p::1, starting a "kid" at depth 1
/// (parent close `close`), in `state`.
pub(super) fn node(state: &str, close: &str) -> ActivityExec {
    let a: ActivityExec = serde_json::from_value(json!({
        "activity_exec_id": "p::1::c", "workflow_exec_id": "p::1", "workflow_name": "p",
        "activity_name": "c", "state": state, "heartbeat_enabled": false,
        "start_time_epoch": 1000,
        "child": {"workflow_name": "kid", "depth": 1, "parent_close": close},
    }))
    .expect("a child node item");
    assert_eq!(a.runner.kind(), NodeKind::Child);
    a
}

/// `a` with an entry to `to` by event `by` at `at`.
pub(super) fn ended(mut a: ActivityExec, to: ActivityState, by: &str, at: i64) -> ActivityExec {
    let t: Transition = match to {
        ActivityState::Cancelled => Transition::Cancel,
        s => s.as_str().parse().expect("a transition"),
    };
    a.trail.history.push(HistoryEntry::new(t, to, at, by));
    a.state = to;
    a
}

/// A workflow exec `id` of `name` in `state`.
pub(super) fn workflow(id: &str, name: &str, state: &str) -> WorkflowExec {
    serde_json::from_value(json!({
        "workflow_exec_id": id, "workflow_name": name, "state": state,
        "start_time": [], "start_time_epoch": 1000,
    }))
    .expect("a workflow exec item")
}

/// The child node `a` starts, in `state`, linked as the engine links it.
pub(super) fn child_of(a: &ActivityExec, state: &str) -> WorkflowExec {
    let (request, exec) = derived_child(a).expect("a child node");
    let mut w = workflow(&exec, "kid", state);
    w.workflow_request_id = Some(request);
    w.parent = Some(ParentLink {
        workflow_exec_id: a.workflow_exec_id.clone(),
        workflow_name: a.workflow_name.clone(),
        activity_exec_id: a.activity_exec_id.clone(),
        depth: 1,
        root: None,
    });
    w
}

#[test]
fn a_child_is_the_one_its_node_derives_at_its_depth() {
    let n = node("RUNNING", "cancel");
    let parent = workflow("p::1", "p", "RUNNING");
    let ok = child_of(&n, "RUNNING");
    let (acts, wfs) = (vec![n.clone()], vec![parent.clone(), ok.clone()]);
    assert!(link_violations(&ok, &Read::new(&crate::check::arcs(&acts), &wfs)).is_empty());
    let mut other_id = ok.clone();
    other_id.workflow_exec_id = "kid::other".into();
    let mut deeper = ok.clone();
    deeper.parent.as_mut().expect("linked").depth = 2;
    let mut orphan = ok.clone();
    orphan.parent.as_mut().expect("linked").activity_exec_id = "p::1::x".into();
    for (w, what) in [
        (other_id, "is not the one it starts"),
        (deeper, "depth 2"),
        (orphan, "does not exist"),
    ] {
        let wfs = vec![parent.clone(), w.clone()];
        let v = link_violations(&w, &Read::new(&crate::check::arcs(&acts), &wfs));
        assert!(v.iter().any(|m| m.contains(what)), "{what}: {v:?}");
    }
}

#[test]
fn a_start_deeper_than_the_limit_fails_and_no_other_does() {
    let deep = MAX_CHILD_DEPTH + 1;
    let mut failed = workflow("kid::1", "kid", "FAILED");
    failed.error = Some(format!(
        "child workflow depth {deep} exceeds the limit of 8"
    ));
    assert!(depth_violation(&failed, deep).is_none());
    assert!(depth_violation(&failed, MAX_CHILD_DEPTH).is_some());
    let mut planned = workflow("kid::1", "kid", "RUNNING");
    planned.planned_epoch = Some(1000);
    assert!(depth_violation(&planned, deep).is_some());
    assert!(depth_violation(&planned, MAX_CHILD_DEPTH).is_none());
}

#[test]
fn a_node_ends_once_by_its_own_childs_end() {
    let own = "child-ended:p::1::c";
    let ok = ended(
        node("RUNNING", "cancel"),
        ActivityState::Completed,
        own,
        1010,
    );
    assert!(history_violations(&ok).is_empty());
    let cases = [
        (
            ended(
                node("RUNNING", "cancel"),
                ActivityState::Completed,
                "x::y",
                1010,
            ),
            "not by its child's end",
        ),
        (
            ended(
                node("RUNNING", "cancel"),
                ActivityState::Failed,
                "child-ended:p::1::d",
                1010,
            ),
            "another node's child",
        ),
        (
            ended(
                ended(
                    node("RUNNING", "cancel"),
                    ActivityState::Cancelled,
                    "cancel-request:r",
                    1005,
                ),
                ActivityState::Completed,
                own,
                1010,
            ),
            "after it was cancelled",
        ),
        (
            ended(ok.clone(), ActivityState::Completed, own, 1011),
            "2 times",
        ),
    ];
    for (a, what) in cases {
        let v = history_violations(&a);
        assert!(v.iter().any(|m| m.contains(what)), "{what}: {v:?}");
    }
}

#[test]
fn a_node_ends_only_after_its_child_and_as_it_did() {
    let own = "child-ended:p::1::c";
    let done = ended(
        node("RUNNING", "cancel"),
        ActivityState::Completed,
        own,
        1010,
    );
    let mut failed = ended(node("RUNNING", "cancel"), ActivityState::Failed, own, 1010);
    failed.outcome.error = Some("child workflow kid::1 ended CANCELLED: its parent's node".into());
    assert!(end_violation(&done, Some(&child_of(&done, "COMPLETED"))).is_none());
    assert!(end_violation(&failed, Some(&child_of(&failed, "CANCELLED"))).is_none());
    assert!(end_violation(&done, Some(&child_of(&done, "FAILED"))).is_some());
    assert!(end_violation(&failed, Some(&child_of(&failed, "COMPLETED"))).is_some());
    assert!(end_violation(&failed, Some(&child_of(&failed, "FAILED"))).is_some());
    assert!(end_violation(&done, None).is_some());
    // A result too large for a node's output fails the node.
    let mut too_large = failed.clone();
    too_large.outcome.error =
        Some("child workflow kid::1 COMPLETED, but its result is 100001 bytes".into());
    assert!(end_violation(&too_large, Some(&child_of(&failed, "COMPLETED"))).is_none());
    // Seen COMPLETED while its child still runs.
    let mut c = Checker::default();
    let tables = Tables::new("t_");
    let mem = MemoryBackend::new(&tables, false);
    let wfs = vec![workflow("p::1", "p", "RUNNING"), child_of(&done, "RUNNING")];
    let v = c.child_violations(&[Arc::new(done.clone())], &wfs, &mem, &tables);
    assert!(v.iter().any(|m| m.contains("while its child is")), "{v:?}");
}

#[test]
fn at_the_end_every_childs_end_reached_its_node() {
    let c = Checker::default();
    let plans = HashMap::new();
    let outcomes = HashMap::new();
    let lost = HashSet::new();
    let running = node("RUNNING", "cancel");
    let parent = workflow("p::1", "p", "RUNNING");
    let mut child = child_of(&running, "COMPLETED");
    child.due_epoch = Some(1100);
    child.result = Some(json!({"a0": 1}));
    let (acts, wfs) = (
        crate::check::arcs(std::slice::from_ref(&running)),
        vec![parent.clone(), child.clone()],
    );
    let end = End {
        read: Read::new(&acts, &wfs),
        plans: &plans,
        outcomes: &outcomes,
        lost: &lost,
        decided: &HashMap::new(),
    };
    let v = c.child_liveness(&end);
    for what in [
        "never reached its node",
        "still owes its parent",
        "still RUNNING",
    ] {
        assert!(v.iter().any(|m| m.contains(what)), "{what}: {v:?}");
    }
    // Its output is the child's result.
    let mut done = ended(
        running,
        ActivityState::Completed,
        "child-ended:p::1::c",
        1010,
    );
    done.outcome.output = Some(json!({"a0": 2}));
    child.due_epoch = None;
    let (acts, wfs) = (crate::check::arcs(&[done]), vec![parent.clone(), child]);
    let end = End {
        read: Read::new(&acts, &wfs),
        plans: &plans,
        outcomes: &outcomes,
        lost: &lost,
        decided: &HashMap::new(),
    };
    let v = c.child_liveness(&end);
    assert!(
        v.iter().any(|m| m.contains("not its child's result")),
        "{v:?}"
    );
    assert_eq!(v.len(), 1, "{v:?}");
    // A node whose child's request was dead-lettered is excused.
    let waiting = node("RUNNING", "cancel");
    let (request, _) = derived_child(&waiting).expect("a child node");
    let lost = HashSet::from([request]);
    let (acts, wfs) = (crate::check::arcs(&[waiting]), vec![parent]);
    let end = End {
        read: Read::new(&acts, &wfs),
        plans: &plans,
        outcomes: &outcomes,
        lost: &lost,
        decided: &HashMap::new(),
    };
    assert!(c.child_liveness(&end).is_empty());
}

#[test]
fn a_node_cancelled_with_parent_close_cancel_closes_its_child() {
    let mut c = Checker::default();
    let plans = HashMap::new();
    let lost = HashSet::new();
    let cancelled = ended(
        node("RUNNING", "cancel"),
        ActivityState::Cancelled,
        "cancel-request:r",
        1010,
    );
    let mut child = child_of(&cancelled, "COMPLETED");
    child.planned_epoch = Some(1000);
    let cancel = ids::child_cancel_request_id("kid", &child.workflow_exec_id);
    let (acts, wfs) = (vec![cancelled.clone()], vec![child.clone()]);
    let run = |c: &Checker, outcomes: &HashMap<String, Vec<Outcome>>| {
        c.child_liveness(&End {
            read: Read::new(&crate::check::arcs(&acts), &wfs),
            plans: &plans,
            outcomes,
            lost: &lost,
            decided: &HashMap::new(),
        })
    };
    let none = HashMap::new();
    let v = run(&c, &none);
    assert!(v.iter().any(|m| m.contains("no cancel request")), "{v:?}");
    c.children.cancels.insert(cancel.clone());
    assert!(run(&c, &none).is_empty());
    // Its cancel came before the child existed, and the child ran on.
    let rejected = HashMap::from([(
        cancel,
        vec![Outcome::Rejected(format!(
            "cancel of unknown workflow exec {}",
            child.workflow_exec_id
        ))],
    )]);
    let v = run(&c, &rejected);
    assert!(v.iter().any(|m| m.contains("started after all")), "{v:?}");
    // A child that never got a plan (its start failed) ran nothing.
    let mut unplanned = child.clone();
    unplanned.planned_epoch = None;
    let (acts1, wfs1) = (
        crate::check::arcs(std::slice::from_ref(&cancelled)),
        vec![unplanned],
    );
    let end = End {
        read: Read::new(&acts1, &wfs1),
        plans: &plans,
        outcomes: &rejected,
        lost: &lost,
        decided: &HashMap::new(),
    };
    assert!(lost_close(&acts1[0], &end).is_none());
    // Abandoned: nothing owed.
    let abandoned = ended(
        node("RUNNING", "abandon"),
        ActivityState::Cancelled,
        "cancel-request:r",
        1010,
    );
    let acts = crate::check::arcs(&[abandoned]);
    let end = End {
        read: Read::new(&acts, &wfs),
        plans: &plans,
        outcomes: &rejected,
        lost: &lost,
        decided: &HashMap::new(),
    };
    assert!(Checker::default()
        .close_violation(&acts[0], Some(&child), &end)
        .is_none());
    assert!(lost_close(&acts[0], &end).is_none());
}
