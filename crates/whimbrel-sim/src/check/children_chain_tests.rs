//! Unit tests of the child-chain invariants (`children.rs`, design.md §
//! 9.5): a parent's node waits on its child's chain of continue-as-new
//! executions, takes the last one's end, and its close reaches the one it
//! waits on.

use serde_json::json;

use super::children_tests::{child_of, ended, node, workflow};
use super::*;

/// `w` continued as new: COMPLETED, `continued_as` its successor, which
/// is returned in `state`, linked to the same node, at the request id
/// derived from `w`.
fn continued(w: &mut WorkflowExec, state: &str) -> WorkflowExec {
    let request = ids::continued_request_id(&w.workflow_exec_id, &w.workflow_name);
    let next_id = ids::workflow_exec_id(&w.workflow_name, &request);
    w.state = WorkflowState::Completed;
    w.continued_as = Some(next_id.clone());
    let mut next = workflow(&next_id, &w.workflow_name, state);
    next.workflow_request_id = Some(request);
    next.continued_from = Some(w.workflow_exec_id.clone());
    next.parent = w.parent.clone();
    next
}

/// The end-of-run checks of child workflows on `acts` and `wfs`, with
/// `lost` dead-lettered and `cancels` seen.
fn at_end(
    acts: &[ActivityExec],
    wfs: &[WorkflowExec],
    lost: &[String],
    cancels: &[String],
) -> Vec<String> {
    let mut c = Checker::default();
    c.children.cancels.extend(cancels.iter().cloned());
    let lost: HashSet<String> = lost.iter().cloned().collect();
    c.child_liveness(&End {
        read: Read::new(&crate::check::arcs(acts), wfs),
        plans: &HashMap::new(),
        outcomes: &HashMap::new(),
        lost: &lost,
        decided: &HashMap::new(),
    })
}

#[test]
fn a_successor_is_linked_through_the_execution_it_continues() {
    let n = node("RUNNING", "cancel");
    let parent = workflow("p::1", "p", "RUNNING");
    let mut first = child_of(&n, "RUNNING");
    let second = continued(&mut first, "RUNNING");
    let acts = crate::check::arcs(std::slice::from_ref(&n));
    let wfs = vec![parent.clone(), first.clone(), second.clone()];
    let read = Read::new(&acts, &wfs);
    assert!(link_violations(&first, &read).is_empty());
    assert!(link_violations(&second, &read).is_empty());
    let waits_on = read.child_of(&n).map(|w| w.workflow_exec_id.clone());
    assert_eq!(waits_on, Some(second.workflow_exec_id.clone()));
    let row: WorkflowRequest = serde_json::from_value(json!({
        "workflow_request_id": second.workflow_request_id, "workflow_name": "kid",
    }))
    .expect("a request row");
    let id = row.workflow_request_id.clone();
    assert!(read.derived_request(&id, &row, &n.activity_exec_id));
    assert!(!read.derived_request("kid::forged", &row, &n.activity_exec_id));
    // A successor its predecessor did not continue as.
    let mut unnamed = first.clone();
    unnamed.continued_as = None;
    let wfs = vec![parent.clone(), unnamed, second.clone()];
    let v = link_violations(&second, &Read::new(&acts, &wfs));
    assert!(
        v.iter().any(|m| m.contains("did not continue as it")),
        "{v:?}"
    );
    // A successor at a request id not derived from its predecessor.
    let mut forged = second.clone();
    forged.workflow_request_id = Some("kid::forged".into());
    let wfs = vec![parent, first, forged.clone()];
    let v = link_violations(&forged, &Read::new(&acts, &wfs));
    assert!(v.iter().any(|m| m.contains("not the derived")), "{v:?}");
}

#[test]
fn a_node_takes_the_end_of_its_childs_chain_not_of_its_first_execution() {
    let done = ended(
        node("RUNNING", "cancel"),
        ActivityState::Completed,
        "child-ended:p::1::c",
        1010,
    );
    let parent = workflow("p::1", "p", "RUNNING");
    let mut first = child_of(&done, "RUNNING");
    let mut second = continued(&mut first, "COMPLETED");
    second.result = Some(json!({"rounds": 1, "continued": 1}));
    let mut right = done.clone();
    right.outcome.output = second.result.clone();
    let wfs = vec![parent.clone(), first.clone(), second.clone()];
    assert_eq!(at_end(&[right], &wfs, &[], &[]), Vec::<String>::new());
    // COMPLETED with the first execution's end (it has no result).
    let v = at_end(std::slice::from_ref(&done), &wfs, &[], &[]);
    assert!(
        v.iter().any(|m| m.contains("not its child's result")),
        "{v:?}"
    );
    // Seen COMPLETED while the chain's last still runs.
    let mut running = second.clone();
    running.state = WorkflowState::Running;
    let wfs = vec![parent.clone(), first.clone(), running];
    let (tables, mut c) = (Tables::new("t_"), Checker::default());
    let mem = MemoryBackend::new(&tables, false);
    let v = c.child_violations(&[Arc::new(done.clone())], &wfs, &mem, &tables);
    assert!(v.iter().any(|m| m.contains("while its child is")), "{v:?}");
    // A node still waiting: the continued one owes it nothing, the last does.
    let waiting = node("RUNNING", "cancel");
    let wfs = vec![parent, first, second];
    let v = at_end(&[waiting], &wfs, &[], &[]);
    let never: Vec<&String> = v.iter().filter(|m| m.contains("never reached")).collect();
    assert_eq!(never.len(), 1, "{v:?}");
    assert!(never[0].contains(&wfs[2].workflow_exec_id), "{v:?}");
}

#[test]
fn a_node_waiting_on_a_successor_whose_request_was_dead_lettered_is_excused() {
    let waiting = node("RUNNING", "cancel");
    let parent = workflow("p::1", "p", "RUNNING");
    let mut first = child_of(&waiting, "RUNNING");
    let second = continued(&mut first, "RUNNING");
    let request = second.workflow_request_id.clone().expect("a request id");
    let wfs = vec![parent, first];
    let acts = [waiting];
    let v = at_end(&acts, &wfs, &[], &[]);
    assert!(v.iter().any(|m| m.contains("still RUNNING")), "{v:?}");
    assert_eq!(at_end(&acts, &wfs, &[request], &[]), Vec::<String>::new());
}

#[test]
fn a_parent_close_reaches_the_execution_its_node_waits_on() {
    let cancelled = ended(
        node("RUNNING", "cancel"),
        ActivityState::Cancelled,
        "cancel-request:r",
        1010,
    );
    let parent = workflow("p::1", "p", "CANCELLED");
    let mut first = child_of(&cancelled, "RUNNING");
    let second = continued(&mut first, "CANCELLED");
    let cancel_of = |w: &WorkflowExec| ids::child_cancel_request_id("kid", &w.workflow_exec_id);
    let wfs = vec![parent.clone(), first.clone(), second.clone()];
    let acts = [cancelled.clone()];
    assert_eq!(
        at_end(&acts, &wfs, &[], &[cancel_of(&second)]),
        Vec::<String>::new()
    );
    let v = at_end(&acts, &wfs, &[], &[cancel_of(&first)]);
    assert!(v.iter().any(|m| m.contains("no cancel request")), "{v:?}");
    // Closed before it continued: CANCELLED, for a node that closed it.
    let mut closed = first.clone();
    (closed.state, closed.continued_as) = (WorkflowState::Cancelled, None);
    closed.error = Some(format!(
        "its parent's node c ended CANCELLED {CLOSED_BEFORE_CONTINUE}"
    ));
    let wfs = vec![parent, closed];
    assert_eq!(
        at_end(&acts, &wfs, &[], &[cancel_of(&first)]),
        Vec::<String>::new()
    );
    let v = at_end(&[node("RUNNING", "cancel")], &wfs, &[], &[]);
    assert!(v.iter().any(|m| m.contains("did not close it")), "{v:?}");
}
