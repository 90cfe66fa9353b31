//! The episode invariants catch what they promise to (each test breaks
//! one promise on a log that otherwise holds them all).

use serde_json::json;
use whimbrel_core::decider::EventKind;

use super::*;

const EXEC: &str = "ep0::x";

fn exec() -> WorkflowExec {
    serde_json::from_value(json!({
        "workflow_exec_id": EXEC,
        "workflow_name": "ep0",
        "state": "COMPLETED",
        "start_time": [],
        "start_time_epoch": 0,
        "activity_count": 1,
        "decide_on": ["activity_ended"],
        "result": {"rounds": 1, "continued": 0},
    }))
    .expect("a workflow exec")
}

fn node(name: &str, by: u64) -> ActivityExec {
    serde_json::from_value(json!({
        "activity_exec_id": whimbrel_core::ids::activity_exec_id(EXEC, name),
        "workflow_exec_id": EXEC,
        "workflow_name": "ep0",
        "activity_name": name,
        "state": "COMPLETED",
        "lambda": "sim-activity",
        "heartbeat_enabled": false,
        "heartbeat_time_epoch": -1,
        "start_time_epoch": -1,
        "scheduled_by": by,
    }))
    .expect("an activity exec")
}

fn record(k: u64, seen: (u64, u64), decisions: Value) -> DecisionRecord {
    DecisionRecord {
        decision_id: format!("{EXEC}::d{k}::a1"),
        from_seq: seen.0,
        to_seq: seen.1,
        decided_epoch: 10 * k as i64,
        decisions,
        refused: None,
        decide_on: None,
        ended: vec![],
        known_seq: None,
    }
}

fn first() -> Value {
    json!([{"type": "schedule", "activities": [{"name": "r1n0", "lambda": "sim-activity"}]}])
}

fn last() -> Value {
    json!([{"type": "complete_workflow", "result": {"rounds": 1, "continued": 0}}])
}

/// Decision 1 schedules r1n0, its end is event 1, decision 2 sees it and
/// completes.
fn good() -> Log {
    let source = whimbrel_core::engine::decide::episodes::ended_source(EXEC, "r1n0");
    let event = EpisodeEvent {
        workflow_exec_id: EXEC.into(),
        log_key: "event#0000000001".into(),
        seq: 1,
        kind: EventKind::ActivityEnded,
        at_epoch: 5,
        source: source.clone(),
        details: json!({"node": "r1n0"}),
    };
    Log {
        exec: exec(),
        state: EpisodeState {
            event_seq: 1,
            decided_seq: 1,
            decision_count: 2,
            decisions_applied: 2,
            closed_by_decision: Some(2),
            ..EpisodeState::default()
        },
        events: BTreeMap::from([(1, Arc::new(event))]),
        // A node's end has no source marker (its open node makes it one).
        sources: HashMap::new(),
        records: BTreeMap::from([
            (1, Arc::new(record(1, (0, 0), first()))),
            (2, Arc::new(seen_end(record(2, (1, 1), last()), 1))),
        ]),
        decided: BTreeMap::new(),
        markers: HashMap::new(),
    }
}

/// `r`, which saw node r1n0's end at place `seq`.
fn seen_end(mut r: DecisionRecord, seq: u64) -> DecisionRecord {
    r.ended = vec![whimbrel_core::engine::decide::episodes::ended_entry(
        seq, "r1n0",
    )];
    r
}

fn given(log: &Log) -> Vec<Given> {
    (log.records.values())
        .map(|r| Given {
            workflow_exec_id: EXEC.into(),
            decision_id: r.decision_id.clone(),
            decisions: r.decisions.clone(),
            invalid: false,
            seqs: shown_events(r),
            at: 0,
        })
        .collect()
}

fn all(log: &Log, given: &[Given], acts: &[&ActivityExec]) -> Vec<String> {
    let mut v = event_violations(log);
    v.extend(record_violations(log));
    let normals: Vec<Value> = given.iter().map(|g| normal(&g.decisions)).collect();
    v.extend(answer_violations(log, &answers_by_id(given, &normals)));
    v.extend(node_violations(log, acts));
    v.extend(lost_events(log, acts));
    v
}

#[test]
fn a_log_that_keeps_every_promise_holds() {
    let log = good();
    let n = node("r1n0", 1);
    assert_eq!(all(&log, &given(&log), &[&n]), Vec::<String>::new());
}

#[test]
fn an_event_missing_from_the_log_is_caught() {
    let mut log = good();
    log.state.event_seq = 2;
    let n = node("r1n0", 1);
    let v = all(&log, &given(&log), &[&n]);
    assert!(
        v.iter().any(|m| m.contains("event_seq 2 but events [1]")),
        "{v:?}"
    );
}

#[test]
fn an_event_seen_by_two_accepted_decisions_is_caught() {
    let mut log = good();
    log.records
        .insert(3, Arc::new(record(3, (1, 1), json!([]))));
    log.state.decision_count = 3;
    let n = node("r1n0", 1);
    let v = all(&log, &given(&log), &[&n]);
    assert!(
        v.iter()
            .any(|m| m.contains("decision 3 saw events 1..=1 but 1 were decided")),
        "{v:?}"
    );
}

#[test]
fn an_answer_the_attempt_did_not_give_or_meant_to_be_refused_is_caught() {
    let log = good();
    let n = node("r1n0", 1);
    let mut other = given(&log);
    other[1].decisions = json!([{"type": "fail_workflow", "reason": "x"}]);
    let v = all(&log, &other, &[&n]);
    assert!(
        v.iter()
            .any(|m| m.contains("which no valid answer to it gave")),
        "{v:?}"
    );
    let mut refused = given(&log);
    refused[1].invalid = true;
    let v = all(&log, &refused, &[&n]);
    assert!(
        v.iter()
            .any(|m| m.contains("which no valid answer to it gave")),
        "{v:?}"
    );
    let v = all(&log, &given(&log)[..1], &[&n]);
    assert!(
        v.iter()
            .any(|m| m.contains("which the decider never answered")),
        "{v:?}"
    );
}

#[test]
fn a_node_no_accepted_decision_scheduled_is_caught() {
    let log = good();
    let stray = node("r1n0", 2);
    let v = all(&log, &given(&log), &[&stray]);
    assert!(v.iter().any(|m| m.contains("claims decision 2")), "{v:?}");
    let mut linked = node("r1n0", 1);
    linked.links.prerequisites = vec!["x::1".into()];
    let v = all(&log, &given(&log), &[&linked]);
    assert!(v.iter().any(|m| m.contains("node r1n0 is")), "{v:?}");
}

#[test]
fn a_record_of_events_its_request_did_not_show_is_caught() {
    let log = good();
    let n = node("r1n0", 1);
    let mut shown = given(&log);
    shown[1].seqs = vec![];
    let v = all(&log, &shown, &[&n]);
    assert!(
        v.iter()
            .any(|m| m.contains("which its request did not show")),
        "{v:?}"
    );
}

#[test]
fn a_node_end_no_decision_saw_is_caught() {
    let mut log = good();
    log.events.clear();
    let n = node("r1n0", 1);
    let v = all(&log, &given(&log), &[&n]);
    assert!(
        v.iter().any(|m| m.contains("no decision saw its end")),
        "{v:?}"
    );
}

#[test]
fn an_ask_after_its_decision_committed_or_before_the_last_did_is_caught() {
    let log = good();
    let mut seen = Seen::default();
    assert!(seen
        .ask_violations(std::slice::from_ref(&log), &[])
        .is_empty());
    let asks = vec![format!("{EXEC}::d2::a2"), format!("{EXEC}::d4::a1")];
    let v = seen.ask_violations(std::slice::from_ref(&log), &asks);
    assert!(
        v.iter()
            .any(|m| m.contains("after attempt 1 committed decision 2")),
        "{v:?}"
    );
    assert!(
        v.iter().any(|m| m.contains("before decision 3 committed")),
        "{v:?}"
    );
    assert_eq!(v.len(), 2, "{v:?}");
    // An older attempt's ask, late (its invocation stalled past it): no
    // violation once a newer attempt committed.
    let mut later = log;
    Arc::make_mut(later.records.get_mut(&2).unwrap()).decision_id = format!("{EXEC}::d2::a3");
    let mut seen = Seen::default();
    assert!(seen
        .ask_violations(std::slice::from_ref(&later), &[])
        .is_empty());
    let stale = vec![format!("{EXEC}::d2::a2")];
    assert!(seen.ask_violations(&[later], &stale).is_empty());
}

#[test]
fn a_node_end_taken_by_a_decision_that_did_not_see_it_is_caught() {
    let mut log = good();
    let taken = seen_end((*log.records[&2]).clone(), 2);
    log.records.insert(2, Arc::new(taken));
    let n = node("r1n0", 1);
    let v = all(&log, &given(&log), &[&n]);
    assert!(
        v.iter()
            .any(|m| m.contains("decision 2 took node r1n0's end (2), which it did not see")),
        "{v:?}"
    );
}

#[test]
fn a_node_end_left_waiting_after_a_decision_saw_it_is_caught() {
    let mut log = good();
    let entry = whimbrel_core::engine::decide::episodes::ended_entry(1, "r1n0");
    log.state.ended_events = vec![entry];
    let n = node("r1n0", 1);
    let v = all(&log, &given(&log), &[&n]);
    assert!(
        v.iter()
            .any(|m| m.contains("node r1n0's end (1) still waits, though decisions saw up to 1")),
        "{v:?}"
    );
}
