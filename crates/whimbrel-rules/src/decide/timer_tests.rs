//! Unit tests of the timer node (design.md § 9.1): its release, its
//! deadline, its firing and its cancel, as pure writes.

use super::tests::{cfg, item, workflow};
use super::*;
use crate::keys::Tables;
use crate::plan::Plan;
use crate::write::eval::{apply, eval};

/// A REQUESTED root timer of `wait` (the plan's `wait` object).
fn timer(wait: serde_json::Value) -> ActivityExec {
    let plan: Plan = serde_json::from_value(serde_json::json!({
        "activities": [{"name": "t", "wait": wait}],
        "retry": {"max_attempts": 3},
        "require_tokens": true,
    }))
    .unwrap();
    activity_items(&workflow(), &plan, &cfg()).0.remove(0)
}

/// `exec` after `update`, decoded.
fn after(exec: &ActivityExec, update: &crate::write::UpdateRequest) -> ActivityExec {
    let before = item(exec);
    assert!(
        eval(update.cond.as_ref().unwrap(), Some(&before)),
        "{:?}",
        update.cond
    );
    let got = apply(&update.key, Some(&before), &update.actions).unwrap();
    serde_dynamo::from_item(got).unwrap()
}

#[test]
fn a_released_timer_runs_with_its_due_marker_at_its_fire_time() {
    let t = timer(serde_json::json!({"seconds": 90}));
    assert_eq!(t.runner.kind(), crate::kind::NodeKind::Timer);
    assert_eq!(
        t.attempt.retry, None,
        "the plan's retry policy is not a timer's"
    );
    // Its plan requires tokens, and none is minted for a timer: no
    // tokenless CANCEL row ends it (issue 42 B.2).
    assert!(t.attempt.require_tokens);
    let refused = report_actor(&t, None, None).unwrap_err();
    assert!(refused.contains("requires the attempt token"), "{refused}");
    let tables = Tables::new("t_");
    let running = after(&t, &queue_update(&tables, &cfg(), &t, None, 1000));
    assert_eq!(running.state, ActivityState::Running);
    assert_eq!(running.timing.start_time_epoch, 1000);
    assert_eq!(running.timing.due_epoch, Some(1090));
    assert_eq!(running.attempt.token_hash, None);
    assert_eq!(
        next_deadline(&running, &cfg()),
        Some((1090, Deadline::Timer))
    );
    // No grace: it fires at its second, not before.
    assert_eq!(monitor_verdict(&running, &cfg(), 1089), Verdict::Wait);
    assert_eq!(monitor_verdict(&running, &cfg(), 1090), Verdict::Fire);
    assert!(
        Verdict::Fire.acts(),
        "a CANCEL written before it is applied first"
    );
}

#[test]
fn an_until_timer_fires_at_its_time_wherever_it_was_released() {
    let t = timer(serde_json::json!({"until": "1970-01-01T00:20:00Z"}));
    let tables = Tables::new("t_");
    let running = after(&t, &queue_update(&tables, &cfg(), &t, None, 1000));
    assert_eq!(running.timing.due_epoch, Some(1200));
    let late = after(&t, &queue_update(&tables, &cfg(), &t, None, 5000));
    assert_eq!(
        monitor_verdict(&late, &cfg(), 5000),
        Verdict::Fire,
        "already past"
    );
}

#[test]
fn only_the_monitor_completes_a_timer_and_a_cancel_ends_it_at_once() {
    let t = timer(serde_json::json!({"seconds": 90}));
    let tables = Tables::new("t_");
    let running = after(&t, &queue_update(&tables, &cfg(), &t, None, 1000));
    let ask = |tr, source: &Source, event: &str| {
        transition_step(
            &tables,
            &cfg(),
            &running,
            (tr, source, event),
            &Details::default(),
            1090,
        )
    };
    let client = Source::Report {
        attempt: Some(1),
        token_hash: None,
    };
    assert!(matches!(
        ask(Transition::Completed, &client, "e1"),
        TransitionStep::Reject(_)
    ));
    assert!(matches!(
        ask(Transition::Completed, &Source::Engine, "e2"),
        TransitionStep::Reject(_)
    ));
    let TransitionStep::Apply { next, update, .. } =
        ask(Transition::Completed, &Source::Monitor, "timer-fired:t:1")
    else {
        panic!("the monitor's firing was not applied");
    };
    assert_eq!(next, ActivityState::Completed);
    assert_eq!(after(&running, &update).state, ActivityState::Completed);
    // Its plan requires tokens: a client's tokenless CANCEL ends nothing
    // (issue 42 B.2); the engine's (a cancel request, a decision) does.
    assert!(matches!(
        ask(Transition::Cancel, &client, "e3"),
        TransitionStep::Reject(_)
    ));
    let TransitionStep::Apply { next, update, .. } = ask(Transition::Cancel, &Source::Engine, "e4")
    else {
        panic!("the engine's CANCEL was not applied");
    };
    assert_eq!(
        next,
        ActivityState::Cancelled,
        "no CANCELLED_RUNNING: nothing runs"
    );
    assert_eq!(after(&running, &update).state, ActivityState::Cancelled);
    // Where tokens are not required, an existing client's CANCEL still
    // ends it.
    let mut open = running.clone();
    open.attempt.require_tokens = false;
    let step = transition_step(
        &tables,
        &cfg(),
        &open,
        (Transition::Cancel, &client, "e5"),
        &Details::default(),
        1090,
    );
    assert!(matches!(
        step,
        TransitionStep::Apply {
            next: ActivityState::Cancelled,
            ..
        }
    ));
}
