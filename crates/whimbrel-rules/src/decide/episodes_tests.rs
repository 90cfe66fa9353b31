//! Unit tests of an episodic execution's writes (design.md § 10.2,
//! § 10.3), run as transactions against items held here and judged by
//! DynamoDB's semantics ([`crate::write::eval`]): every promise of
//! exactly-once is tried with the step run twice, late or out of turn.

use crate::keys::WorkflowRef;
use std::collections::HashMap;

use serde_json::json;

use super::episodes::*;
use crate::decider::EventKind;
use crate::keys::Tables;
use crate::schema::definitions;
use crate::write::eval::{apply, eval};
use crate::write::{s, Item, Write};

const WF: WorkflowRef<'static> = WorkflowRef {
    exec_id: "w::1",
    name: "w",
};

/// Items by table and key, written only by whole transactions.
struct Db {
    t: Tables,
    items: HashMap<(String, String), Item>,
}

impl Db {
    /// A RUNNING workflow exec `w::1`.
    /// A RUNNING execution whose first answer is committed (decision 1,
    /// its effects written), as every episodic execution is once started.
    fn new() -> Db {
        let mut db = Db::unstarted();
        let key = (WF.exec_id, WF.name);
        let wf_key = db.key_of(
            &db.t.workflow_exec(),
            &crate::keys::workflow_key(key.0, key.1),
        );
        let wf = db.items.get_mut(&wf_key).expect("the workflow");
        wf.insert("decision_count".into(), crate::write::n(1));
        wf.insert("decisions_applied".into(), crate::write::n(1));
        db
    }

    /// A RUNNING execution whose first answer is not committed yet.
    fn unstarted() -> Db {
        let mut db = Db {
            t: Tables::new("whimbrel_"),
            items: HashMap::new(),
        };
        let wf: Item = [
            ("workflow_exec_id", s(WF.exec_id)),
            ("workflow_name", s(WF.name)),
            ("state", s("RUNNING")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let key = db.key_of(&db.t.workflow_exec(), &wf);
        db.items.insert(key, wf);
        db
    }

    fn key_of(&self, table: &str, item: &Item) -> (String, String) {
        let def = definitions(&self.t)
            .into_iter()
            .find(|d| d.name == table)
            .expect("a Whimbrel table");
        let part = |a: &str| format!("{:?}", item.get(a));
        let range = def.range.map(|(a, _)| part(a)).unwrap_or_default();
        (table.to_string(), format!("{}|{range}", part(def.hash.0)))
    }

    /// All of `writes` or none, as TransactWriteItems: true when applied.
    fn transact(&mut self, writes: &[Write]) -> bool {
        let target = |w: &Write| match w {
            Write::Put {
                table, item, cond, ..
            } => (self.key_of(table, item), cond.clone()),
            Write::Update {
                table, key, cond, ..
            } => (self.key_of(table, key), cond.clone()),
        };
        let mut keys: Vec<(String, String)> = writes.iter().map(|w| target(w).0).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            writes.len(),
            "DynamoDB refuses two writes of one item"
        );
        let holds = writes.iter().all(|w| {
            let (key, cond) = target(w);
            cond.is_none_or(|c| eval(&c, self.items.get(&key)))
        });
        if !holds {
            return false;
        }
        let changed: Vec<((String, String), Item)> = writes
            .iter()
            .map(|w| {
                let (key, _) = target(w);
                let next = match w {
                    Write::Put { item, .. } => item.clone(),
                    Write::Update {
                        key: k, actions, ..
                    } => apply(k, self.items.get(&key), actions).expect("a valid update"),
                };
                (key, next)
            })
            .collect();
        for (_, item) in &changed {
            let size = crate::write::size::item_size(item);
            assert!(size <= crate::write::size::MAX_ITEM_BYTES, "{size} bytes");
        }
        self.items.extend(changed);
        true
    }

    fn state(&self) -> EpisodeState {
        let key = self.key_of(
            &self.t.workflow_exec(),
            &crate::keys::workflow_key(WF.exec_id, WF.name),
        );
        serde_dynamo::from_item(self.items[&key].clone()).expect("episode attributes")
    }

    fn append(&mut self, source: &str, at: i64) -> bool {
        let st = self.state();
        let event = new_event(EventKind::ActivityEnded, source, at);
        let appended = append_event(&self.t, WF, &st, event, None);
        self.transact(&appended.writes)
    }

    fn log(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .items
            .values()
            .filter_map(|i| match i.get("log_key") {
                Some(crate::write::Value::S(k)) if k.starts_with("event#") => {
                    Some(format!("{k} {:?}", i.get("source")))
                }
                _ => None,
            })
            .collect();
        keys.sort();
        keys
    }

    fn start(&mut self, now: i64) -> Option<String> {
        let st = self.state();
        let (id, req) = start_decision(&self.t, WF, &st, now, 120)?;
        self.transact(&[req.into_write()]).then_some(id)
    }
}

fn new_event(kind: EventKind, source: &str, at_epoch: i64) -> NewEvent<'_> {
    NewEvent {
        kind,
        source,
        at_epoch,
        details: json!({}),
    }
}

fn record(id: &str, to_seq: u64, refused: Option<&str>) -> DecisionRecord {
    DecisionRecord {
        decision_id: id.into(),
        from_seq: 1,
        to_seq,
        decided_epoch: 100,
        decisions: json!([]),
        refused: refused.map(Into::into),
        decide_on: None,
        ended: vec![],
        known_seq: None,
    }
}

#[test]
fn an_event_appended_twice_is_in_the_log_once() {
    let mut db = Db::new();
    assert!(db.append("ended:w::1::a:g0", 10));
    // The settle runs again after a crash: its marker refuses the second.
    assert!(!db.append("ended:w::1::a:g0", 11));
    assert_eq!(db.state().event_seq, 1);
    assert_eq!(db.log().len(), 1, "{:?}", db.log());
}

#[test]
fn two_appends_from_one_read_take_two_places_or_retry() {
    let mut db = Db::new();
    let read = db.state();
    let first = new_event(EventKind::Signal, "signal:s1", 5);
    let first = append_event(&db.t, WF, &read, first, None).writes;
    let second = new_event(EventKind::Signal, "signal:s2", 5);
    let second = append_event(&db.t, WF, &read, second, None).writes;
    assert!(db.transact(&first));
    assert!(!db.transact(&second), "the place was taken");
    assert!(db.append("signal:s2", 6), "read again, it appends");
    let log = db.log();
    assert!(log[0].starts_with("event#0000000001") && log[0].contains("s1"));
    assert!(log[1].starts_with("event#0000000002") && log[1].contains("s2"));
}

#[test]
fn one_decision_is_in_flight_at_a_time_and_only_for_new_events() {
    let mut db = Db::new();
    assert_eq!(db.start(1), None, "nothing to decide");
    db.append("signal:s1", 1);
    let read = db.state();
    let id = db.start(2).expect("started");
    assert_eq!(id, "w::1::d2::a1");
    // A second starter that read before the first started loses.
    let (_, late) = start_decision(&db.t, WF, &read, 2, 120).expect("looked startable");
    assert!(!db.transact(&[late.into_write()]));
    assert_eq!(db.start(3), None, "one in flight");
}

#[test]
fn events_that_arrive_during_a_decision_go_to_the_next() {
    let mut db = Db::new();
    db.append("ended:a", 1);
    let id = db.start(2).expect("started");
    let to_seq = db.state().event_seq;
    db.append("ended:b", 3);
    let st = db.state();
    assert!(db.transact(&commit_decision(
        &db.t,
        WF,
        &st,
        &record(&id, to_seq, None),
        false
    )));
    let after = db.state();
    assert_eq!((after.decided_seq, after.event_seq), (1, 2));
    assert_eq!(after.decision_id, None);
    assert_eq!(decision_verdict(&after, 4, 300), DecisionVerdict::Start);
    // Not before decision 2's effects are written: decision 3 must see them.
    assert!(after.effects_owed());
    assert_eq!(db.start(4), None);
    let applied = super::decided::effects_applied(&db.t, WF, 2);
    assert!(db.transact(&[applied.into_write()]));
    assert_eq!(db.start(4).as_deref(), Some("w::1::d3::a1"));
}

#[test]
fn a_decision_commits_at_most_once_and_a_stale_attempt_not_at_all() {
    let mut db = Db::new();
    db.append("ended:a", 1);
    let first = db.start(2).expect("started");
    // The first attempt is lost; the monitor starts the second.
    let st = db.state();
    let (second, req) = retry_decision(&db.t, WF, &st, 970, 120).expect("in flight");
    assert!(db.transact(&[req.into_write()]));
    let st = db.state();
    let stale = commit_decision(&db.t, WF, &st, &record(&first, 1, None), false);
    assert!(!db.transact(&stale), "the lost attempt's answer came late");
    let commit = commit_decision(&db.t, WF, &st, &record(&second, 1, None), false);
    assert!(db.transact(&commit));
    assert!(!db.transact(&commit), "a redelivered answer");
    assert_eq!(db.state().decision_count, 2);
}

#[test]
fn a_refused_answer_leaves_its_events_to_the_next_decision_with_the_reason() {
    let mut db = Db::new();
    db.append("ended:a", 1);
    for round in 1..=2u32 {
        let id = db.start(2).expect("started");
        let st = db.state();
        let to = st.event_seq;
        let writes = commit_decision(&db.t, WF, &st, &record(&id, to, Some("bad")), true);
        assert!(db.transact(&writes), "round {round}");
        let after = db.state();
        assert_eq!(after.decision_refusals, round);
        assert_eq!(after.event_seq, to + 1, "the refusal is an event");
        assert_eq!(after.decided_seq, 0, "what it saw is still undecided");
        assert!(refusals_exhausted(&after, round + 1));
        assert!(!refusals_exhausted(&after, round + 2));
    }
    assert!(
        db.log()[2].contains("refused:w::1::d3::a1"),
        "{:?}",
        db.log()
    );
    let id = db.start(3).expect("decided on again");
    let st = db.state();
    let to = st.event_seq;
    assert!(db.transact(&commit_decision(
        &db.t,
        WF,
        &st,
        &record(&id, to, None),
        false
    )));
    let after = db.state();
    assert_eq!((after.decision_refusals, after.decided_seq), (0, 3));
}

#[test]
fn a_late_answer_does_not_commit_on_an_ended_execution() {
    let mut db = Db::new();
    db.append("ended:a", 1);
    let id = db.start(2).expect("started");
    let st = db.state();
    end(&mut db);
    assert!(!db.transact(&commit_decision(
        &db.t,
        WF,
        &st,
        &record(&id, 1, None),
        false
    )));
    let (_, retry) = retry_decision(&db.t, WF, &st, 5, 120).expect("in flight");
    assert!(!db.transact(&[retry.into_write()]));
}

#[test]
fn every_episode_write_makes_the_workflow_due_for_what_it_owes() {
    let mut db = Db::new();
    db.append("ended:a", 7);
    assert_eq!(due_epoch(&db).as_deref(), Some("7"), "a decision is owed");
    let id = db.start(8).expect("started");
    assert_eq!(due_epoch(&db).as_deref(), Some("128"), "the attempt's end");
    let st = db.state();
    let commit = commit_decision(&db.t, WF, &st, &record(&id, 1, None), false);
    assert!(db.transact(&commit));
    assert_eq!(
        due_epoch(&db).as_deref(),
        Some("128"),
        "its effects are owed: found when the attempt would have ended"
    );
}

#[test]
fn the_workflow_is_closed_only_on_every_event_and_then_takes_none() {
    let mut db = Db::new();
    db.append("ended:a", 1);
    let id = db.start(2).expect("started");
    db.append("signal:s", 3);
    let st = db.state();
    let close = commit_decision(&db.t, WF, &st, &record(&id, 1, None), true);
    assert!(!db.transact(&close), "a signal came after what it saw");
    let close = commit_decision(&db.t, WF, &st, &record(&id, 2, None), true);
    assert!(db.transact(&close));
    assert!(!db.append("ended:b", 4), "closed: nothing is appended");
}

/// End the workflow as any end does (a cancel, a timeout).
fn end(db: &mut Db) {
    let key = db.key_of(
        &db.t.workflow_exec(),
        &crate::keys::workflow_key(WF.exec_id, WF.name),
    );
    db.items
        .get_mut(&key)
        .expect("workflow")
        .insert("state".into(), s("CANCELLED"));
}

#[test]
fn an_ended_execution_takes_no_event() {
    let mut db = Db::new();
    end(&mut db);
    assert!(!db.append("ended:a", 1));
}

#[test]
fn the_monitor_waits_retries_and_gives_up_on_a_decision() {
    let mut st = EpisodeState {
        event_seq: 3,
        decided_seq: 3,
        ..EpisodeState::default()
    };
    assert_eq!(decision_verdict(&st, 10, 300), DecisionVerdict::Idle);
    st.event_seq = 4;
    assert_eq!(decision_verdict(&st, 10, 300), DecisionVerdict::Start);
    st.decision_id = Some("w::1::d1::a1".into());
    st.decision_attempt = 1;
    st.decision_first_epoch = Some(10);
    st.decision_due_epoch = Some(12);
    assert_eq!(decision_verdict(&st, 11, 300), DecisionVerdict::Wait(12));
    assert_eq!(decision_verdict(&st, 12, 300), DecisionVerdict::Retry);
    // An attempt still in flight is waited for, even past the timeout.
    st.decision_due_epoch = Some(400);
    assert_eq!(decision_verdict(&st, 310, 300), DecisionVerdict::Wait(400));
    assert!(matches!(
        decision_verdict(&st, 400, 300),
        DecisionVerdict::GiveUp(r) if r.contains("300 s")
    ));
    let backoffs: Vec<i64> = (1..=8).map(decision_backoff).collect();
    assert_eq!(backoffs, [1, 2, 4, 8, 16, 32, 60, 60]);
    assert_eq!(decision_backoff(u32::MAX), MAX_DECISION_BACKOFF_SECONDS);
}

#[test]
fn a_failed_attempt_is_deferred_by_its_backoff() {
    let mut db = Db::new();
    db.append("ended:a", 1);
    db.start(2).expect("started");
    let st = db.state();
    let req = defer_decision(&db.t, WF, &st, 20).expect("in flight");
    assert!(db.transact(&[req.into_write()]));
    let st = db.state();
    assert_eq!(st.decision_due_epoch, Some(21));
    assert_eq!(decision_verdict(&st, 20, 300), DecisionVerdict::Wait(21));
    assert_eq!(decision_verdict(&st, 21, 300), DecisionVerdict::Retry);
}

#[test]
fn no_event_is_taken_nor_decision_started_before_the_first_answer_commits() {
    let mut db = Db::unstarted();
    assert!(!db.append("signal:early", 1), "no event before decision 1");
    let mut read = db.state();
    read.event_seq = 1; // as if an event had come anyway
    assert!(start_decision(&db.t, WF, &read, 2, 120).is_none());
    let answer: crate::decider::DecisionsAnswer =
        serde_json::from_value(json!({"decisions": []})).unwrap();
    assert!(db.transact(&super::decided::commit_first(&db.t, WF, &answer, 3)));
    assert!(
        !db.transact(&super::decided::commit_first(&db.t, WF, &answer, 4)),
        "once"
    );
    let applied = super::decided::effects_applied(&db.t, WF, 1);
    assert!(db.transact(&[applied.into_write()]));
    assert!(
        db.append("signal:late", 5),
        "taken once decision 1 is committed"
    );
    assert_eq!(db.start(6).as_deref(), Some("w::1::d2::a1"));
}

fn due_epoch(db: &Db) -> Option<String> {
    let key = db.key_of(
        &db.t.workflow_exec(),
        &crate::keys::workflow_key(WF.exec_id, WF.name),
    );
    match db.items[&key].get("due_epoch") {
        Some(crate::write::Value::N(n)) => Some(n.clone()),
        _ => None,
    }
}

#[test]
fn an_append_starts_the_next_decision_when_none_is_in_flight_and_only_then() {
    let mut db = Db::new();
    let at = StartAt {
        now: 50,
        attempt_seconds: 120,
    };
    let st = db.state();
    let first = append_event(
        &db.t,
        WF,
        &st,
        new_event(EventKind::Signal, "signal:a", 40),
        Some(at),
    );
    assert_eq!(first.started.as_deref(), Some("w::1::d2::a1"));
    assert!(db.transact(&first.writes));
    let st = db.state();
    assert_eq!(st.decision_id.as_deref(), Some("w::1::d2::a1"));
    assert_eq!(
        (st.decision_first_epoch, st.decision_due_epoch),
        (Some(50), Some(170))
    );
    assert_eq!(
        due_epoch(&db).as_deref(),
        Some("170"),
        "due when the attempt is over"
    );
    // A second event while it is in flight: appended, nothing started, and
    // the marker stays where the attempt put it.
    let later = StartAt { now: 60, ..at };
    let second = append_event(
        &db.t,
        WF,
        &st,
        new_event(EventKind::Signal, "signal:b", 55),
        Some(later),
    );
    assert_eq!(second.started, None);
    assert!(db.transact(&second.writes));
    assert_eq!(due_epoch(&db).as_deref(), Some("170"));
    assert_eq!(db.state().event_seq, 2);
    // An append read before the start cannot start a second decision.
    let stale = append_event(
        &db.t,
        WF,
        &st,
        new_event(EventKind::Signal, "signal:c", 56),
        Some(later),
    );
    assert!(
        !db.transact(&stale.writes),
        "the place and the start were taken"
    );
}

#[test]
fn a_node_end_is_appended_once_by_its_open_node_without_a_marker() {
    let mut db = Db::new();
    let created = opened(&db.t, &["a"]);
    assert!(db.transact(&created));
    let st = db.state();
    assert_eq!(st.open_nodes, vec!["a".to_string()]);
    let end = append_node_end(&db.t, WF, &st, "a", (7, json!({})), None);
    assert_eq!(
        end.writes.len(),
        1,
        "the workflow item alone: no event item, no source marker"
    );
    assert!(db.transact(&end.writes));
    assert!(db.state().open_nodes.is_empty());
    assert_eq!(db.state().ended_events, vec![ended_entry(1, "a")]);
    assert!(db.log().is_empty(), "no event# item");
    // Appended again from a state read before (a settle run twice): the
    // node is no longer open, so the second append fails whole.
    let again = append_node_end(&db.t, WF, &db.state(), "a", (7, json!({})), None);
    assert!(!db.transact(&again.writes));
    assert_eq!(db.state().event_seq, 1);
    assert_eq!(ended_node(&end.event.source), Some("a"));
    assert_eq!(ended_node("signal:x"), None);
}

#[test]
fn an_accepted_commit_leaves_the_due_marker_where_the_attempt_put_it() {
    let mut db = Db::new();
    db.append("signal:a", 1);
    let id = db.start(2).expect("started");
    assert_eq!(due_epoch(&db).as_deref(), Some("122"));
    let st = db.state();
    assert!(db.transact(&commit_decision(
        &db.t,
        WF,
        &st,
        &record(&id, 1, None),
        false
    )));
    assert_eq!(due_epoch(&db).as_deref(), Some("122"));
    assert!(db.state().effects_owed());
}

/// Nodes `names` opened by a commit ([`super::decided::open_scheduled`],
/// here alone) and put by the effects ([`super::decided::node_put`]).
fn opened(t: &Tables, names: &[&str]) -> Vec<Write> {
    use super::decided::{node_put, open_scheduled};
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let update = crate::write::UpdateRequest::new(
        t.workflow_exec(),
        crate::keys::workflow_key(WF.exec_id, WF.name),
    );
    let update = open_scheduled(update, &names);
    let puts = names.iter().map(|n| node_put(t, node_item(n)));
    std::iter::once(update.into_write()).chain(puts).collect()
}

fn node_item(name: &str) -> Item {
    [
        (
            "activity_exec_id",
            s(crate::ids::activity_exec_id(WF.exec_id, name)),
        ),
        ("workflow_exec_id", s(WF.exec_id)),
        ("activity_name", s(name)),
        // Every node has a state; an item without one is a stub
        // (`decided::node_put`).
        ("state", s("REQUESTED")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Review of the append's start: an append read while a decision was in
/// flight starts nothing; if that decision commits, its effects are
/// written and the rest removes the due marker before the append lands,
/// the event would wait with no decision and no marker. It must fail and
/// read again instead.
#[test]
fn an_append_that_starts_nothing_fails_once_what_it_counted_on_is_gone() {
    let mut db = Db::new();
    db.append("signal:a", 1);
    let id = db.start(2).expect("started");
    let at = StartAt {
        now: 3,
        attempt_seconds: 120,
    };
    let read = db.state();
    let late = new_event(EventKind::Signal, "signal:b", 3);
    let late = append_event(&db.t, WF, &read, late, Some(at));
    assert_eq!(late.started, None, "a decision was in flight as read");
    let st = db.state();
    assert!(db.transact(&commit_decision(
        &db.t,
        WF,
        &st,
        &record(&id, 1, None),
        false
    )));
    let rest = super::decided::applied_at_rest(&db.t, WF, 2, &db.state()).expect("nothing owed");
    assert!(db.transact(&[rest.into_write()]));
    assert_eq!(due_epoch(&db), None, "rested: no marker");
    assert!(
        !db.transact(&late.writes),
        "the decision it counted on is gone: read again and start one"
    );
    let again = new_event(EventKind::Signal, "signal:b", 3);
    let again = append_event(&db.t, WF, &db.state(), again, Some(at));
    assert!(again.started.is_some());
    assert!(db.transact(&again.writes));
}

/// Review of the append's start: an append read before a decision was
/// started and committed must not start that decision number again.
#[test]
fn a_stale_append_does_not_start_a_decision_that_committed_since() {
    let mut db = Db::new();
    db.append("signal:a", 1);
    let read = db.state();
    let at = StartAt {
        now: 2,
        attempt_seconds: 120,
    };
    let stale = append_event(
        &db.t,
        WF,
        &read,
        new_event(EventKind::Signal, "signal:b", 2),
        Some(at),
    );
    assert!(stale.started.is_some());
    let id = db.start(2).expect("started");
    let st = db.state();
    assert!(db.transact(&commit_decision(
        &db.t,
        WF,
        &st,
        &record(&id, 1, None),
        false
    )));
    assert!(
        !db.transact(&stale.writes),
        "decision 2 committed: its number is not started again"
    );
}

/// An execution whose decision 2 (on one signal, its attempt started at
/// 2, so due at 122) is committed, its effects not yet marked written.
fn one_committed() -> Db {
    let mut db = Db::new();
    db.append("signal:a", 1);
    let id = db.start(2).expect("started");
    let st = db.state();
    let commit = commit_decision(&db.t, WF, &st, &record(&id, 1, None), false);
    assert!(db.transact(&commit));
    db
}

/// design.md § 10.9: a decision's effects are marked written in the same
/// write that rests the due marker, only while nothing came since the
/// read; otherwise the mark alone is written and the marker stays for
/// what is owed. A rest that would change nothing is not written.
#[test]
fn effects_written_rest_the_marker_in_one_write_only_while_nothing_came_since() {
    use super::decided::{applied_at_rest, effects_applied, idle_due};
    let mut db = one_committed();
    assert_eq!(due_epoch(&db).as_deref(), Some("122"), "the attempt's end");
    let read = db.state();
    let later = applied_at_rest(&db.t, WF, 3, &read);
    assert_eq!(later, None, "not the last committed");
    let rest = applied_at_rest(&db.t, WF, 2, &read).expect("nothing owed");
    db.append("signal:b", 5);
    let rest_write = [rest.clone().into_write()];
    assert!(!db.transact(&rest_write), "an event came since");
    assert!(db.transact(&[effects_applied(&db.t, WF, 2).into_write()]));
    let after = db.state();
    assert!(!after.effects_owed());
    assert_eq!(due_epoch(&db).as_deref(), Some("122"), "kept for the event");
    let again = applied_at_rest(&db.t, WF, 2, &after);
    assert_eq!(again, None, "applied already");

    let mut quiet = one_committed();
    let rest = applied_at_rest(&quiet.t, WF, 2, &quiet.state()).expect("nothing owed");
    assert!(quiet.transact(&[rest.clone().into_write()]));
    let after = quiet.state();
    assert_eq!((after.decisions_applied, after.due_epoch), (2, None));
    assert!(!quiet.transact(&[rest.into_write()]), "written once");
    let idle = idle_due(&quiet.t, WF, &after);
    assert!(idle.is_none(), "at rest: nothing to write");
}

/// design.md § 10.9: node ends logged on the workflow item stay there
/// until an accepted decision sees them, which lists them in its record;
/// a refused one leaves them for the next; ends after what it saw stay.
#[test]
fn an_accepted_decision_takes_the_node_ends_it_saw_into_its_record() {
    let mut db = Db::new();
    let created = opened(&db.t, &["a", "b"]);
    assert!(db.transact(&created));
    let end = |db: &mut Db, node: &str, at: i64| {
        let st = db.state();
        let end = append_node_end(&db.t, WF, &st, node, (at, json!({})), None);
        assert!(db.transact(&end.writes));
    };
    end(&mut db, "a", 1);
    db.append("signal:x", 2);
    let id = db.start(3).expect("started");
    end(&mut db, "b", 4);
    let st = db.state();
    assert_eq!(st.ended_between(1, 2), vec![(1, "a")]);
    let refused = commit_decision(&db.t, WF, &st, &record(&id, 2, Some("no")), false);
    assert!(db.transact(&refused));
    assert_eq!(db.state().ended_events.len(), 2, "a refusal takes nothing");
    let id = db.start(5).expect("started again");
    let st = db.state();
    // It saw 1..=2 (a, x); b (3) and the refusal (4) came after.
    let commit = commit_decision(&db.t, WF, &st, &record(&id, 2, None), false);
    assert!(db.transact(&commit));
    assert_committed_state(&st, &record(&id, 2, None), &db);
    assert_eq!(db.state().ended_events, vec![ended_entry(3, "b")]);
    let recorded = db
        .items
        .values()
        .find(|i| i.get("log_key") == Some(&s(decision_log_key(3))))
        .expect("decision 3's record");
    assert_eq!(
        recorded.get("ended"),
        Some(&crate::write::Value::L(vec![s(ended_entry(1, "a"))]))
    );
    assert_eq!(
        parse_ended_entry(&ended_entry(12, "x:y")),
        Some((12, "x:y"))
    );
    assert_eq!(parse_ended_entry("signal"), None);
}

/// design.md § 10.9: the accepted commit opens and counts the nodes its
/// decisions schedule, once (the effects then put their items without a
/// transaction); a refused answer opens none; so does the first answer.
#[test]
fn an_accepted_commit_opens_and_counts_the_nodes_it_schedules() {
    let schedule = json!([
        {"type": "schedule", "activities": [{"name": "a", "lambda": "f"}, {"name": "b", "lambda": "f"}]},
        {"type": "record_marker", "name": "m", "details": {}},
        {"type": "schedule", "activities": [{"name": "c", "lambda": "f", "depends_on": ["a"]}]}
    ]);
    assert_eq!(
        super::decided::scheduled_names(&schedule),
        ["a", "b", "c"],
        "every schedule's nodes, in order"
    );
    let mut db = Db::new();
    db.append("signal:x", 1);
    let id = db.start(2).expect("started");
    let st = db.state();
    let mut refused = record(&id, 1, Some("no"));
    refused.decisions = schedule.clone();
    assert!(db.transact(&commit_decision(&db.t, WF, &st, &refused, false)));
    let (open, count) = (db.state().open_nodes, db.state().activity_count);
    assert!(open.is_empty() && count == 0, "a refusal opens nothing");
    let id = db.start(3).expect("started again");
    let st = db.state();
    let mut accepted = record(&id, 2, None);
    accepted.decisions = schedule;
    let commit = commit_decision(&db.t, WF, &st, &accepted, false);
    assert!(db.transact(&commit));
    assert_committed_state(&st, &accepted, &db);
    assert!(!db.transact(&commit), "counted once");
    let mut open = db.state().open_nodes;
    open.sort();
    assert_eq!(
        (open, db.state().activity_count),
        (vec!["a".into(), "b".into(), "c".into()], 3)
    );
    // The effects' put and the close's: one item.
    let put = super::decided::node_put(&db.t, node_item("a"));
    assert!(db.transact(std::slice::from_ref(&put)));
    assert!(!db.transact(&[put]), "created once");
    // A stub the activity role's heartbeat left under `b`'s id (keys and
    // a heartbeat time, no state) is no node: the put replaces it.
    let mut stub = node_item("b");
    stub.remove("state");
    stub.remove("activity_name");
    stub.insert("heartbeat_time".into(), s("2026-12-06T00:00:00Z"));
    let table = db.t.activity_exec();
    let cond = None;
    assert!(db.transact(&[crate::write::Write::Put {
        table,
        item: stub,
        cond
    }]));
    assert!(db.transact(&[super::decided::node_put(&db.t, node_item("b"))]));

    let mut first = Db::unstarted();
    let answer: crate::decider::DecisionsAnswer = serde_json::from_value(json!({"decisions": [
        {"type": "schedule", "activities": [{"name": "a", "lambda": "f"}]}
    ]}))
    .unwrap();
    assert!(first.transact(&super::decided::commit_first(&first.t, WF, &answer, 3)));
    assert_eq!(first.state().open_nodes, ["a"]);
    assert_eq!(first.state().activity_count, 1);
}

/// The state `decided::committed_state` predicts from `st` and `record`
/// is the one the commit left in `db` (sets compared as sets).
fn assert_committed_state(st: &EpisodeState, record: &DecisionRecord, db: &Db) {
    let sorted = |mut e: EpisodeState| {
        e.open_nodes.sort();
        e.ended_events.sort();
        e
    };
    assert_eq!(
        sorted(super::decided::committed_state(st, record)),
        sorted(db.state())
    );
}

/// Issue 42 A.10, "an execution timeout up to one decision attempt late":
/// the monitor finds a workflow by its due marker, so a decision put in
/// flight (its attempt over in up to 960 s), retried or deferred must
/// not move the marker past the execution's deadline: the monitor then
/// fails the execution on its second, whatever the decision does. The
/// attempt's own time (`decision_due_epoch`) is unchanged.
#[test]
fn a_decision_in_flight_keeps_the_workflow_due_by_its_execution_deadline() {
    let mut db = Db::new();
    let key = db.key_of(
        &db.t.workflow_exec(),
        &crate::keys::workflow_key(WF.exec_id, WF.name),
    );
    let wf = db.items.get_mut(&key).expect("the workflow");
    wf.insert("start_time_epoch".into(), crate::write::n(0));
    wf.insert("execution_timeout_seconds".into(), crate::write::n(100));
    db.append("ended:a", 50);
    let (_, req) = start_decision(&db.t, WF, &db.state(), 50, 900).expect("started");
    assert!(db.transact(&[req.into_write()]));
    let st = db.state();
    assert_eq!(
        (st.decision_due_epoch, st.due_epoch),
        (Some(950), Some(100))
    );
    let (_, req) = retry_decision(&db.t, WF, &st, 60, 900).expect("in flight");
    assert!(db.transact(&[req.into_write()]));
    assert_eq!(db.state().due_epoch, Some(100));
    let req = defer_decision(&db.t, WF, &db.state(), 90).expect("in flight");
    assert!(db.transact(&[req.into_write()]));
    let st = db.state();
    assert_eq!((st.decision_due_epoch, st.due_epoch), (Some(92), Some(92)));
    let req = defer_decision(&db.t, WF, &st, 99).expect("in flight");
    assert!(db.transact(&[req.into_write()]));
    assert_eq!(db.state().due_epoch, Some(100));
}
