//! Unit tests of the signal invariants (`signals.rs`): each catches what
//! it is about, and lets the honest case pass.

use super::*;
use serde_json::json;
use whimbrel_core::contract::Transition;
use whimbrel_core::history::HistoryEntry;

/// A wait for "go" in workflow w::1, started at 1000, in `state`.
fn wait(state: &str, timeout: Option<i64>) -> ActivityExec {
    let mut a: ActivityExec = serde_json::from_value(json!({
        "activity_exec_id": "s::1", "workflow_exec_id": "w::1", "workflow_name": "w",
        "activity_name": "s", "state": state, "signal_name": "go",
        "start_time_epoch": 1000, "heartbeat_enabled": false,
    }))
    .expect("a signal wait item");
    a.timeouts.start_to_close_seconds = timeout;
    assert_eq!(a.runner.kind(), NodeKind::Signal);
    a
}

/// `a` with an entry to `to` by event `by` at `at`.
fn ended(mut a: ActivityExec, to: ActivityState, by: &str, at: i64) -> ActivityExec {
    let t: Transition = to.as_str().parse().expect("a transition");
    a.trail.history.push(HistoryEntry::new(t, to, at, by));
    a
}

/// A checker that saw signals go#s1 ({"n": 1}) and ack#s2 sent to w::1.
fn checker() -> Checker {
    let mut c = Checker::default();
    for (name, id) in [("go", "s1"), ("ack", "s2")] {
        let row = SignalRow::new("w::1", name, id, Some(json!({"n": 1})));
        c.signals
            .rows
            .insert(("w::1".into(), row.signal_key.clone()), row);
    }
    c
}

#[test]
fn a_wait_completes_only_by_a_signal_of_its_name_with_its_input() {
    let mut c = checker();
    let done = |by: &str, out: Value| {
        let mut a = ended(wait("COMPLETED", None), ActivityState::Completed, by, 1010);
        a.outcome.output = Some(out);
        a
    };
    let ok = done("signal:s::1:go#s1", json!({"n": 1}));
    assert!(c.signal_violations(&ok, None).is_empty());
    for (by, out, what) in [
        ("signal:s::1:go#s1", json!({"n": 2}), "not its input"),
        ("signal:s::1:ack#s2", json!({"n": 1}), "waits for \"go\""),
        ("signal:s::1:go#s9", json!({"n": 1}), "never sent"),
        ("timer-fired:s::1:1", json!({"n": 1}), "not by a signal"),
    ] {
        let v = c.signal_violations(&done(by, out), None);
        assert!(v.iter().any(|m| m.contains(what)), "{by}: {v:?}");
    }
    let twice = ended(ok, ActivityState::Completed, "signal:s::1:go#s1", 1011);
    let v = super::super::safety::history_violations(&twice);
    assert!(
        v.iter().any(|m| m.contains("2 terminal transitions")),
        "{v:?}"
    );
    let mut claimed = wait("RUNNING", None);
    claimed.attempt.launches = 1;
    assert!(!c.signal_violations(&claimed, None).is_empty());
}

#[test]
fn a_wait_times_out_only_by_the_monitor_at_its_timeout() {
    let mut c = checker();
    let out =
        |timeout, by: &str, at| ended(wait("TIMED_OUT", timeout), ActivityState::TimedOut, by, at);
    assert!(c
        .signal_violations(&out(Some(60), "timed-out:s::1:1", 1060), None)
        .is_empty());
    for (timeout, by, at) in [
        (Some(60), "timed-out:s::1:1", 1059),
        (Some(60), "signal:s::1:go#s1", 1060),
        (None, "timed-out:s::1:1", 1060),
    ] {
        let v = c.signal_violations(&out(timeout, by, at), None);
        assert!(!v.is_empty(), "{timeout:?} {by} {at}");
    }
    // By the world's clock: RUNNING seen at 1000, TIMED_OUT at 1050.
    let mut c = checker();
    assert!(c
        .signal_violations(&wait("RUNNING", Some(60)), Some(1000))
        .is_empty());
    c.ended_at.insert("s::1".into(), 1050);
    let v = c.signal_violations(&out(Some(60), "timed-out:s::1:1", 1060), Some(1050));
    assert!(
        v.iter().any(|m| m.contains("RUNNING at world time")),
        "{v:?}"
    );
    // A signal of its name sent (and still in the table) long before
    // the monitor's invocation: its last read must have delivered it.
    let mut c = checker();
    let key = ("w::1".to_string(), "go#s1".to_string());
    c.signals.sent_at.insert(key.clone(), 800);
    c.signals.present.insert(key);
    c.ended_at.insert("s::1".into(), 1060);
    let v = c.signal_violations(&out(Some(60), "timed-out:s::1:1", 1060), Some(1060));
    assert!(v.iter().any(|m| m.contains("though signal")), "{v:?}");
}

#[test]
fn a_wait_left_running_with_a_signal_sent_lost_it() {
    let a = wait("RUNNING", None);
    let rows = [SignalRow::new("w::1", "go", "s1", None)];
    let running = HashSet::from(["w::1"]);
    let none = HashSet::new();
    assert_eq!(
        lost_signals(&[Arc::new(a.clone())], &running, &rows, &none).len(),
        1
    );
    let dead_lettered = HashSet::from(["go#s1".to_string()]);
    assert!(lost_signals(&[Arc::new(a.clone())], &running, &rows, &dead_lettered).is_empty());
    assert!(lost_signals(&[Arc::new(a)], &HashSet::new(), &rows, &none).is_empty());
}
