//! Unit tests of the pure rules: no server, no clock.

use super::*;
use crate::model::{HistoryEntry, ParkedEvent, WorkflowExec};
use crate::plan::Plan;
use crate::write::eval::{apply, eval};
use crate::write::Item;

pub(super) fn cfg() -> EngineConfig {
    EngineConfig::default()
}

/// A RUNNING workflow exec `w::1` of one activity.
pub(super) fn workflow() -> WorkflowExec {
    WorkflowExec {
        slots_used: None,
        redrive_count: None,
        redrives: vec![],
        redriving: None,
        decide_on: None,
        decider: None,
        continued_from: None,
        continued_as: None,
        parent: None,
        workflow_exec_id: "w::1".into(),
        workflow_name: "w".into(),
        state: crate::contract::WorkflowState::Running,
        workflow_request_id: None,
        start_time: crate::dates::Timestamp::from_epoch(0).date_list(),
        start_time_epoch: 0,
        end_time: None,
        end_time_epoch: None,
        input: None,
        planned_epoch: None,
        execution_timeout_seconds: None,
        activity_count: 1,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        error: None,
        source: None,
        due_epoch: None,
        due_shard: None,
        start_attempts: 0,
        result: None,
        result_in_activities: None,
    }
}

pub(super) fn running(hb: Option<i64>, timeout: Option<i64>) -> ActivityExec {
    let wf = workflow();
    let plan: Plan = serde_json::from_value(serde_json::json!({"activities": [
        {"name": "a", "lambda": "f", "heartbeat_timeout_seconds": hb, "timeout_seconds": timeout}
    ]}))
    .unwrap();
    let mut a = activity_items(&wf, &plan, &cfg()).0.remove(0);
    a.state = ActivityState::Running;
    a.attempt.number = 1;
    a.timing.start_time_epoch = 1000;
    a.timing.heartbeat_time_epoch = 1000;
    // A heartbeat written at the start, and seen then.
    a.timing.heartbeat_seen = Some(1000);
    a.timing.heartbeat_seen_epoch = Some(1000);
    a
}

pub(super) fn item(exec: &ActivityExec) -> Item {
    serde_dynamo::to_item(exec).unwrap()
}

#[test]
fn running_deadline_is_the_earlier_of_heartbeat_and_start_to_close() {
    let a = running(Some(30), Some(100));
    assert_eq!(running_deadline(&a, &cfg()), (1030, true));
    let mut beat = a.clone();
    beat.timing.heartbeat_time_epoch = 1090;
    assert_eq!(running_deadline(&beat, &cfg()), (1100, false));
    // Neither given: the default start-to-close still catches it.
    let quiet = running(None, None);
    assert_eq!(running_deadline(&quiet, &cfg()), (1000 + 3600, false));
}

#[test]
fn the_monitor_waits_the_report_grace_then_times_out_by_heartbeat() {
    let mut a = running(Some(30), None);
    a.timing.due_epoch = Some(1030);
    assert_eq!(monitor_verdict(&a, &cfg(), 1035), Verdict::Wait);
    match monitor_verdict(&a, &cfg(), 1040) {
        Verdict::TimeOut {
            reason,
            stale_before,
            unchanged_heartbeat,
            retryable: true,
            ..
        } => {
            assert!(reason.contains("heartbeat"), "{reason}");
            // The write requires the heartbeat the deadline counted from.
            assert_eq!((stale_before, unchanged_heartbeat), (None, Some(1000)));
        }
        v => panic!("{v:?}"),
    }
    // A raw heartbeat (only heartbeat_time_epoch changed) moves the
    // deadline: the marker is extended, nothing times out.
    a.timing.heartbeat_time_epoch = 1030;
    assert_eq!(monitor_verdict(&a, &cfg(), 1040), Verdict::Extend(1060));
}

/// A client whose clock is 100 s behind heartbeats every 20 s (timeout
/// 60 s): each heartbeat time is already past its deadline by the
/// client's clock, but the monitor counts it from when it saw it, so the
/// activity is timed out only once it stops heartbeating.
#[test]
fn a_client_minutes_behind_is_timed_out_only_once_it_stops_heartbeating() {
    let c = cfg();
    let mut a = running(Some(60), Some(3600));
    a.timing.due_epoch = Some(1060);
    // Heartbeats at 1020 and 1040 real time, written as 920 and 940.
    a.timing.heartbeat_time_epoch = 940;
    // By the client's clock its deadline is 1000, long gone; the monitor
    // sees the heartbeat at 1060 and moves the marker to 1120.
    assert_eq!(monitor_verdict(&a, &c, 1060), Verdict::Extend(1120));
    let seen = seen_at(&a, 1060);
    assert_eq!(heartbeat_deadline(&seen, 60), 1120);
    // It stopped: at 1120 (past the report grace) it times out, if its
    // heartbeat time is still 940 when the write lands.
    let mut due = seen.clone();
    due.timing.due_epoch = Some(1120);
    match monitor_verdict(&due, &c, 1120 + c.report_grace_seconds) {
        Verdict::TimeOut {
            unchanged_heartbeat,
            ..
        } => assert_eq!(unchanged_heartbeat, Some(940)),
        v => panic!("{v:?}"),
    }
    // It heartbeated again at 1100 (written 1000): moved again, no timeout.
    let mut beat = due;
    beat.timing.heartbeat_time_epoch = 1000;
    assert_eq!(
        monitor_verdict(&beat, &c, 1120 + c.report_grace_seconds),
        Verdict::Extend(1130 + 60)
    );
}

/// The RUNNING write stamps no heartbeat time: the engine's clock and the
/// client's share their values, so a client 73 s behind came to write the
/// start second again, and the monitor took that heartbeat for the stamp,
/// unchanged: torture seed 4047 at a4685b1 (timeout 48 s) timed it out 7 s
/// after it. Now the client's first heartbeat is always a change.
#[test]
fn a_heartbeat_that_repeats_the_start_second_is_a_heartbeat() {
    let t = Tables::new("t_");
    let mut a = running(Some(48), Some(3600));
    a.state = ActivityState::Preparing;
    a.timing.start_time_epoch = -1;
    // Written before the start (by another holder of the activity role:
    // seed 11 of the same run): not this attempt's heartbeat.
    a.timing.heartbeat_time_epoch = 5000;
    a.timing.heartbeat_seen = None;
    a.timing.heartbeat_seen_epoch = None;
    let change = Change {
        transition: Transition::Running,
        next: ActivityState::Running,
        event_id: "e1",
    };
    let req = transition_update(&t, &cfg(), &a, change, &Details::default(), 756);
    let written = apply(&req.key, Some(&item(&a)), &req.actions).unwrap();
    let mut got: ActivityExec = serde_dynamo::from_item(written).unwrap();
    assert_eq!(got.timing.start_time_epoch, 756);
    assert_eq!(got.timing.heartbeat_time_epoch, -1, "no heartbeat yet");
    // Until the first heartbeat, the deadline counts from the start.
    assert_eq!(heartbeat_deadline(&got, 48), 756 + 48);
    // The client, 73 s behind, wrote 704, 724, 740 unseen, then 756 at
    // world time 829; the monitor looks at 834.
    got.timing.heartbeat_time_epoch = 756;
    got.timing.due_epoch = Some(804);
    assert_eq!(
        monitor_verdict(&got, &cfg(), 834),
        Verdict::Extend(834 + 48)
    );
}

/// A heartbeat the monitor finds unseen is recorded as seen even when the
/// deadline it gives is where the marker already is; otherwise it stays
/// unseen, and the next look counts it from then, later.
#[test]
fn an_unseen_heartbeat_is_recorded_even_where_the_marker_stays() {
    let mut a = running(Some(30), Some(3600));
    a.timing.heartbeat_seen = None;
    a.timing.heartbeat_seen_epoch = None;
    a.timing.due_epoch = Some(1030);
    assert_eq!(monitor_verdict(&a, &cfg(), 1010), Verdict::Extend(1030));
}

/// A heartbeat seen from a clock behind is not raised to the start time
/// (the engine's clock) before it is armed: torture seed 6672, a client
/// 232 s behind timed out 78 s after its last heartbeat (timeout 120 s).
#[test]
fn a_seen_heartbeat_from_a_clock_behind_counts_from_when_it_was_seen() {
    let mut a = running(Some(120), Some(3600));
    a.timing.heartbeat_time_epoch = 850;
    a.timing.heartbeat_seen = Some(850);
    a.timing.heartbeat_seen_epoch = Some(1095);
    assert_eq!(heartbeat_deadline(&a, 120), 1095 + 120);
    a.timing.due_epoch = Some(1120);
    assert_eq!(monitor_verdict(&a, &cfg(), 1130), Verdict::Extend(1215));
}

/// A clock ahead (or a heartbeat time written far in the future) holds the
/// deadline off no longer than the timeout after the engine saw it; an
/// accurate clock keeps its exact deadline.
#[test]
fn a_heartbeat_time_ahead_counts_from_when_it_was_seen() {
    assert_eq!(arm(1040, 1050, 60), 1100, "accurate: the client's time");
    assert_eq!(arm(9_000, 1050, 60), 1110, "ahead: at most t after seen");
    assert_eq!(arm(900, 1050, 60), 1110, "behind: t after seen");
    assert_eq!(arm(i64::MAX, 1050, 60), 1110);
    let mut a = running(Some(60), Some(86_400));
    a.timing.heartbeat_time_epoch = i64::MAX - 10;
    assert_eq!(monitor_verdict(&a, &cfg(), 1050), Verdict::Extend(1110));
    let mut seen = seen_at(&a, 1050);
    seen.timing.due_epoch = Some(1110);
    assert!(matches!(
        monitor_verdict(&seen, &cfg(), 1120),
        Verdict::TimeOut {
            kind: Deadline::Heartbeat,
            ..
        }
    ));
}

/// A launch whose async invoke may still wait in Lambda's queue (a
/// throttled target keeps it up to its event age) is not launched again
/// before that age: a second launch would only race the first.
#[test]
fn a_launch_is_not_relaunched_while_lambda_may_still_hold_its_invoke() {
    let c = EngineConfig {
        launch_event_age_seconds: Some(900),
        ..cfg()
    };
    let mut q = running(None, None);
    q.state = ActivityState::Queued;
    q.attempt.token_hash = Some("h".into());
    q.timing.queued_time_epoch = Some(0);
    let grace = c.report_grace_seconds;
    // Before the window ends the monitor only waits, or moves an early
    // marker to the window's end.
    for early in [c.relaunch_after_seconds + grace, 900 + grace - 1] {
        let v = monitor_verdict(&q, &c, early);
        assert!(
            matches!(v, Verdict::Wait | Verdict::Extend(900)),
            "{early}: {v:?}"
        );
    }
    assert_eq!(monitor_verdict(&q, &c, 900 + grace), Verdict::Relaunch);
    q.attempt.launches = c.max_launch_attempts;
    match monitor_verdict(&q, &c, 900 + grace) {
        Verdict::FailNotStarted(why) => assert!(why.contains("900s each"), "{why}"),
        v => panic!("{v:?}"),
    }
}

#[test]
fn queued_relaunches_then_fails_preparing_and_cancelled_running_time_out() {
    let c = cfg();
    let mut q = running(None, None);
    q.state = ActivityState::Queued;
    q.attempt.token_hash = Some("h".into());
    q.timing.queued_time_epoch = Some(0);
    assert_eq!(
        monitor_verdict(&q, &c, c.relaunch_after_seconds),
        Verdict::Wait
    );
    assert_eq!(
        monitor_verdict(&q, &c, c.relaunch_after_seconds + c.report_grace_seconds),
        Verdict::Relaunch
    );
    q.attempt.token_hash = Some("h".into());
    q.attempt.launches = c.max_launch_attempts;
    assert!(matches!(
        monitor_verdict(&q, &c, 10_000),
        Verdict::FailNotStarted(_)
    ));
    let entered =
        |state: ActivityState, at: i64| HistoryEntry::new(Transition::Running, state, at, "e");
    // PREPARING since 500: start-to-close from then, whatever the marker
    // (an owed parked event may have lowered it).
    let mut p = running(None, None);
    p.state = ActivityState::Preparing;
    p.trail.history.push(entered(ActivityState::Preparing, 500));
    p.timing.due_epoch = Some(560);
    assert_eq!(monitor_verdict(&p, &c, 570), Verdict::Extend(500 + 3600));
    assert!(matches!(
        monitor_verdict(&p, &c, 500 + 3600 + c.report_grace_seconds),
        Verdict::TimeOut { .. }
    ));
    // CANCELLED_RUNNING since 2000: the cancel grace alone.
    let mut cr = running(Some(30), None);
    cr.state = ActivityState::CancelledRunning;
    cr.trail
        .history
        .push(entered(ActivityState::CancelledRunning, 2000));
    let d = 2000 + c.cancel_grace_seconds;
    cr.timing.due_epoch = Some(d);
    assert_eq!(monitor_verdict(&cr, &c, d + 5), Verdict::Wait);
    assert!(matches!(
        monitor_verdict(&cr, &c, d + c.report_grace_seconds),
        Verdict::TimeOut { .. }
    ));
    let mut done = running(None, None);
    done.state = ActivityState::Completed;
    assert_eq!(monitor_verdict(&done, &c, 0), Verdict::Settle);
    // A settle in hand (its marker ahead) is left to its holder.
    done.timing.due_epoch = Some(100);
    assert_eq!(monitor_verdict(&done, &c, 99), Verdict::Wait);
    assert_eq!(monitor_verdict(&done, &c, 100), Verdict::Settle);
}

#[test]
fn tokens_fence_reports() {
    let mut a = running(None, None);
    a.attempt.number = 2;
    a.attempt.token_hash = Some(ids::token_hash("live"));
    assert_eq!(report_actor(&a, Some(2), Some("live")), Ok(Actor::Attempt));
    assert!(report_actor(&a, Some(2), Some("stale")).is_err());
    assert!(report_actor(&a, Some(1), None).is_err(), "an older attempt");
    assert_eq!(report_actor(&a, None, None), Ok(Actor::Client));
    a.attempt.require_tokens = true;
    assert!(report_actor(&a, None, None).is_err());
}

fn parked(id: &str, transition: &str) -> ParkedEvent {
    ParkedEvent {
        activity_event_id: id.into(),
        transition: transition.into(),
        output: None,
        output_in_row: false,
        output_sha256: None,
        error: None,
        attempt: None,
        attempt_token_hash: None,
        attempt_token: None,
    }
}

/// Applying one of two parked events takes it off `parked` in the same
/// write and keeps the other (a mutant that kept the list passed 300
/// simulated schedules: two parked events with one applied are rare there).
#[test]
fn applying_a_parked_event_unparks_it_and_keeps_the_rest() {
    let t = Tables::new("t_");
    let mut a = running(Some(30), None);
    a.state = ActivityState::Preparing;
    a.trail.parked = vec![parked("e1", "RUNNING"), parked("e2", "COMPLETED")];
    let change = Change {
        transition: Transition::Running,
        next: ActivityState::Running,
        event_id: "e1",
    };
    let req = transition_update(&t, &cfg(), &a, change, &Details::default(), 2000);
    let after = apply(&req.key, Some(&item(&a)), &req.actions).unwrap();
    let got: ActivityExec = serde_dynamo::from_item(after).unwrap();
    assert_eq!(got.state, ActivityState::Running);
    let left: Vec<&str> = got
        .trail
        .parked
        .iter()
        .map(|p| p.activity_event_id.as_str())
        .collect();
    assert_eq!(left, ["e2"]);
}

#[test]
fn a_terminal_write_leaves_its_obligation_and_drops_parked_events() {
    let t = Tables::new("t_");
    let mut a = running(Some(30), None);
    a.trail.parked.push(parked("e1", "COMPLETED"));
    let change = Change {
        transition: Transition::Failed,
        next: ActivityState::Failed,
        event_id: "e2",
    };
    let details = Details {
        error: Some("x".repeat(10_000)),
        ..Details::default()
    };
    let req = transition_update(&t, &cfg(), &a, change, &details, 2000);
    let before = item(&a);
    assert!(eval(req.cond.as_ref().unwrap(), Some(&before)));
    let after = apply(&req.key, Some(&before), &req.actions).unwrap();
    let got: ActivityExec = serde_dynamo::from_item(after.clone()).unwrap();
    assert_eq!(got.state, ActivityState::Failed);
    assert_eq!(got.version, a.version + 1);
    assert_eq!(
        got.timing.due_epoch,
        Some(2000 + cfg().settle_grace_seconds),
        "side effects owed"
    );
    assert!(got.trail.parked.is_empty());
    assert!(got.outcome.error.unwrap().len() <= MAX_ERROR_BYTES);
    // The same write again (a stale copy) fails its version condition.
    assert!(!eval(req.cond.as_ref().unwrap(), Some(&after)));
}

/// The monitor's heartbeat timeout of attempt 1.
fn heartbeat_timed_out() -> Change<'static> {
    Change {
        transition: Transition::TimedOut,
        next: ActivityState::TimedOut,
        event_id: "timed-out:a:1",
    }
}

#[test]
fn a_timeout_write_loses_to_a_heartbeat_that_lands_first() {
    let t = Tables::new("t_");
    let a = running(Some(30), None);
    let change = heartbeat_timed_out();
    let details = Details {
        stale_before: Some(1010),
        ..Details::default()
    };
    let req = transition_update(&t, &cfg(), &a, change, &details, 1040);
    let mut beat = item(&a);
    assert!(eval(req.cond.as_ref().unwrap(), Some(&beat)));
    beat.insert("heartbeat_time_epoch".into(), n(1035));
    assert!(!eval(req.cond.as_ref().unwrap(), Some(&beat)));
}

/// The same guard on a heartbeat timeout that retries (the attempt goes
/// back to QUEUED): a heartbeat landing between the monitor's read and its
/// write wins, and the attempt is not retried.
#[test]
fn a_retried_timeout_loses_to_a_heartbeat_that_lands_first() {
    let t = Tables::new("t_");
    let (a, _) = failing_with_retries();
    let change = heartbeat_timed_out();
    let details = Details {
        stale_before: Some(1010),
        ..failed("no heartbeat")
    };
    let req = retry_update(&t, &cfg(), &a, &change, &details, 1050, 1040);
    let mut beat = item(&a);
    beat.insert("heartbeat_time_epoch".into(), n(1000));
    assert!(eval(req.cond.as_ref().unwrap(), Some(&beat)));
    beat.insert("heartbeat_time_epoch".into(), n(1035));
    assert!(!eval(req.cond.as_ref().unwrap(), Some(&beat)));
}

#[test]
fn claims_are_exclusive_and_count_attempts() {
    let t = Tables::new("t_");
    let mut a = running(None, None);
    a.state = ActivityState::Requested;
    a.attempt.number = 0;
    let req = queue_update(&t, &cfg(), &a, Some("h1"), 50);
    let before = item(&a);
    let after = apply(&req.key, Some(&before), &req.actions).unwrap();
    let q: ActivityExec = serde_dynamo::from_item(after.clone()).unwrap();
    assert_eq!((q.state, q.attempt.number), (ActivityState::Queued, 1));
    assert_eq!(q.timing.due_epoch, Some(50 + cfg().relaunch_after_seconds));
    // A second claimer read the same version: its claim fails.
    assert!(!eval(req.cond.as_ref().unwrap(), Some(&after)));
    let re = relaunch_update(&t, &cfg(), &q, "h2", 500);
    let again: ActivityExec =
        serde_dynamo::from_item(apply(&re.key, Some(&after), &re.actions).unwrap()).unwrap();
    // A relaunch is the same attempt with a new token (the lost
    // invocation's reports are refused from now on).
    assert_eq!((again.attempt.number, again.attempt.launches), (1, 2));
    assert_eq!(again.attempt.token_hash.as_deref(), Some("h2"));
}

fn with_retry(mut a: ActivityExec, json: serde_json::Value) -> ActivityExec {
    a.attempt.retry = Some(serde_json::from_value(json).unwrap());
    a
}

/// A RUNNING attempt 1 of 3 (5 s interval, backoff 2, `Bad` not retried)
/// and its FAILED change.
fn failing_with_retries() -> (ActivityExec, Change<'static>) {
    let mut a = with_retry(
        running(None, None),
        serde_json::json!({"max_attempts": 3, "interval_seconds": 5, "backoff_rate": 2.0, "no_retry_on": ["Bad"]}),
    );
    a.attempt.token_hash = Some("h".into());
    a.timing.first_queued_epoch = Some(900);
    let change = Change {
        transition: Transition::Failed,
        next: ActivityState::Failed,
        event_id: "ev1",
    };
    (a, change)
}

fn failed(e: &str) -> Details {
    Details {
        error: Some(e.into()),
        ..Details::default()
    }
}

#[test]
fn a_failed_attempt_with_attempts_left_is_retried_after_the_backoff() {
    let (a, change) = failing_with_retries();
    assert_eq!(
        retry_after(&a, &change, &failed("Busy: later"), true, 1000),
        Some(1005)
    );
    // A name in no_retry_on, a non-retryable failure, the last attempt, or
    // a CANCELLED_RUNNING activity: the failure is final.
    assert_eq!(
        retry_after(&a, &change, &failed("Bad: input"), true, 1000),
        None
    );
    assert_eq!(retry_after(&a, &change, &failed("Busy"), false, 1000), None);
    let mut last = a.clone();
    last.attempt.number = 3;
    assert_eq!(
        retry_after(&last, &change, &failed("Busy"), true, 1000),
        None
    );
    let mut cancelled = a.clone();
    cancelled.state = ActivityState::CancelledRunning;
    assert_eq!(
        retry_after(&cancelled, &change, &failed("Busy"), true, 1000),
        None
    );
    // Schedule-to-close would pass before the next attempt: final.
    let mut closing = a.clone();
    closing.timeouts.schedule_to_close_seconds = Some(104);
    assert_eq!(
        retry_after(&closing, &change, &failed("Busy"), true, 1000),
        None
    );
    // Attempt 2 fails: twice the interval.
    let mut second = a.clone();
    second.attempt.number = 2;
    assert_eq!(
        retry_after(&second, &change, &failed("Busy"), true, 1000),
        Some(1010)
    );
}

#[test]
fn a_retried_attempt_goes_back_to_queued_and_launches_when_its_delay_ends() {
    let t = Tables::new("t_");
    let c = cfg();
    let (a, change) = failing_with_retries();
    let req = retry_update(&t, &c, &a, &change, &failed("Busy: later"), 1005, 1000);
    let after: ActivityExec =
        serde_dynamo::from_item(apply(&req.key, Some(&item(&a)), &req.actions).unwrap()).unwrap();
    assert_eq!(
        (after.state, after.attempt.number),
        (ActivityState::Queued, 2)
    );
    assert_eq!(after.attempt.token_hash, None);
    assert_eq!(after.timing.next_attempt_epoch, Some(1005));
    assert_eq!(after.timing.due_epoch, Some(1005));
    let h = after.trail.history.last().unwrap();
    assert_eq!((h.attempt, h.next_attempt_epoch), (Some(1), Some(1005)));
    assert_eq!(h.transition, "FAILED");
    // The monitor launches it when the delay ends (no report grace).
    assert_eq!(monitor_verdict(&after, &c, 1004), Verdict::Wait);
    assert_eq!(monitor_verdict(&after, &c, 1005), Verdict::Launch);
    let l = launch_update(&t, &c, &after, "h2", 1006);
    let launched: ActivityExec =
        serde_dynamo::from_item(apply(&l.key, Some(&item(&after)), &l.actions).unwrap()).unwrap();
    assert_eq!((launched.attempt.number, launched.attempt.launches), (2, 1));
    assert_eq!(
        launched.timing.due_epoch,
        Some(1006 + c.relaunch_after_seconds)
    );
    // A second launcher read the same version: its claim fails.
    assert!(!eval(l.cond.as_ref().unwrap(), Some(&item(&launched))));
}

#[test]
fn schedule_to_start_and_schedule_to_close_fire_and_only_the_first_retries() {
    let c = cfg();
    let mut q = running(None, None);
    q.state = ActivityState::Queued;
    q.runner.runs = crate::model::Runs::TaskList { list: "tl".into() };
    q.timeouts.schedule_to_start_seconds = Some(50);
    q.timing.scheduled_epoch = Some(1000);
    q.timing.first_queued_epoch = Some(1000);
    assert_eq!(
        next_deadline(&q, &c),
        Some((1050, Deadline::ScheduleToStart))
    );
    match monitor_verdict(&q, &c, 1050 + c.report_grace_seconds) {
        Verdict::TimeOut {
            reason,
            retryable: true,
            ..
        } => {
            assert!(reason.contains("schedule-to-start"), "{reason}")
        }
        v => panic!("{v:?}"),
    }
    q.timeouts.schedule_to_close_seconds = Some(20);
    match monitor_verdict(&q, &c, 1020 + c.report_grace_seconds) {
        Verdict::TimeOut {
            reason,
            retryable: false,
            ..
        } => {
            assert!(reason.contains("schedule-to-close"), "{reason}")
        }
        v => panic!("{v:?}"),
    }
    // A task waiting for a worker without schedule timeouts is not watched.
    let mut idle = q.clone();
    idle.timeouts.schedule_to_start_seconds = None;
    idle.timeouts.schedule_to_close_seconds = None;
    assert_eq!(next_deadline(&idle, &c), None);
}

#[test]
fn a_worker_claim_is_exclusive_and_sets_the_running_deadline() {
    let t = Tables::new("t_");
    let c = cfg();
    let mut a = running(Some(30), Some(600));
    a.state = ActivityState::Requested;
    a.attempt.number = 0;
    a.runner.runs = crate::model::Runs::TaskList { list: "tl".into() };
    let q = queue_update(&t, &c, &a, None, 50);
    let queued: ActivityExec =
        serde_dynamo::from_item(apply(&q.key, Some(&item(&a)), &q.actions).unwrap()).unwrap();
    assert_eq!(
        (queued.state, queued.attempt.number),
        (ActivityState::Queued, 1)
    );
    assert_eq!(queued.attempt.token_hash, None);
    assert_eq!(
        queued.runner.task_list_shard,
        Some(task_list_shard("tl", &a.activity_exec_id))
    );
    assert_eq!(queued.runner.task_queued_epoch, Some(50));
    let claim = claim_task_update(&t, &c, &queued, "tok", "w1", 60);
    let before = item(&queued);
    assert!(eval(claim.cond.as_ref().unwrap(), Some(&before)));
    let running: ActivityExec =
        serde_dynamo::from_item(apply(&claim.key, Some(&before), &claim.actions).unwrap()).unwrap();
    assert_eq!(running.state, ActivityState::Running);
    assert_eq!(running.runner.worker.as_deref(), Some("w1"));
    assert_eq!(running.runner.task_list_shard, None);
    assert_eq!(running.timing.due_epoch, Some(60 + 30));
    // The second worker's claim, on the version it read, fails.
    assert!(!eval(claim.cond.as_ref().unwrap(), Some(&item(&running))));
}

#[test]
fn errors_are_capped_on_a_character_boundary() {
    let long = "é".repeat(5000);
    let c = cap_error(&long);
    assert!(c.len() <= MAX_ERROR_BYTES);
    assert!(c.ends_with("bytes cut]"));
    assert_eq!(cap_error("short"), "short");
}

/// The heartbeat timeout's guard holds for an older heartbeat, and for a
/// heartbeat time that is missing or not a number (the activity role may
/// write it); a newer heartbeat fails it.
/// A heartbeat timeout's write holds only while the heartbeat time is the
/// one read: any other value is a heartbeat written since, on whatever
/// clock (an older one too: two writers, clocks apart).
#[test]
fn an_unchanged_heartbeat_is_the_one_read_or_none_at_all() {
    let a = running(Some(100), Some(1000));
    let cond = super::unchanged_heartbeat(1050);
    let mut stored = item(&a);
    for (value, holds) in [
        (n(1050), true),
        (n(1049), false),
        (n(1060), false),
        (crate::write::s("soon"), true),
    ] {
        stored.insert("heartbeat_time_epoch".into(), value.clone());
        assert_eq!(eval(&cond, Some(&stored)), holds, "{value:?}");
    }
    stored.remove("heartbeat_time_epoch");
    assert!(eval(&cond, Some(&stored)), "missing");
}

#[test]
fn a_stale_heartbeat_is_an_older_one_or_none_at_all() {
    let a = running(Some(100), Some(1000));
    let cond = super::stale_heartbeat(1050);
    let mut stored = item(&a);
    for (value, holds) in [
        (n(1049), true),
        (n(1050), false),
        (n(1060), false),
        (crate::write::s("soon"), true),
        (AttributeValue::Bool(true), true),
    ] {
        stored.insert("heartbeat_time_epoch".into(), value.clone());
        assert_eq!(eval(&cond, Some(&stored)), holds, "{value:?}");
    }
    stored.remove("heartbeat_time_epoch");
    assert!(eval(&cond, Some(&stored)), "missing");
}

#[test]
fn a_redrive_entry_keeps_the_failure_cut_as_every_history_error() {
    let mut a = running(None, Some(60));
    a.state = ActivityState::Failed;
    // 2,000 bytes of two-byte characters: no cut point is on a boundary
    // by luck.
    let error = "é".repeat(1000);
    a.outcome.error = Some(error.clone());
    let item = redrive::redriven_item(&a, "w::r1", 1, 2000);
    let entry = item.trail.history.last().expect("the REDRIVE entry");
    assert_eq!(entry.transition, redrive::REDRIVE_TRANSITION);
    let kept = entry.error.as_deref().expect("the failure it redrove");
    assert_eq!(kept.len(), crate::history::HISTORY_ERROR_BYTES);
    assert!(error.starts_with(kept));
    assert_eq!(item.state, ActivityState::Requested);
    assert_eq!(item.outcome.error, None);
}

#[test]
fn an_episodic_execution_is_never_redriven() {
    let wf = WorkflowExec {
        state: crate::contract::WorkflowState::Failed,
        planned_epoch: Some(1),
        decide_on: Some(vec![crate::decider::EventKind::ActivityEnded]),
        ..workflow()
    };
    let why = super::redrive::workflow_refusal(&wf).expect("refused");
    assert!(why.contains("episodic"), "{why}");
    let plain = WorkflowExec {
        decide_on: None,
        ..wf
    };
    assert_eq!(super::redrive::workflow_refusal(&plain), None);
}

/// DynamoDB's reason for refusing a report is kept cut to 300 bytes, on a
/// character boundary: a multi-byte character across byte 300 once made
/// `String::truncate` panic.
#[test]
fn an_unstorable_reason_is_cut_on_a_character_boundary() {
    let reason = format!("{}é and more", "x".repeat(299));
    let (t, d) = unstorable(Transition::Completed, &reason);
    assert_eq!(t, Transition::Failed);
    let error = d.error.unwrap();
    assert!(error.ends_with(&"x".repeat(299)), "{error}");
}

/// Issue 42 A.3 (torture seed 305792): a finish decided on the end
/// counters it read is written only while they are still those. A redrive
/// sets them back to 0 with the state back to RUNNING, so the finish read
/// before it does not end the next generation; the counters as read (one
/// never written reads as 0) still let it through.
#[test]
fn a_finish_requires_the_counts_it_read() {
    use crate::contract::EndCounts;
    use crate::write::{n, s};
    let read = EndCounts {
        completed: 0,
        failed: 0,
        cancelled: 5,
    };
    let req = finish_as_counted(
        crate::write::UpdateRequest::new("wf".into(), Item::new()),
        &read,
    );
    let cond = req.cond.expect("conditioned");
    let item = |completed: Option<u64>, cancelled: u64| {
        let mut i = Item::from([
            (crate::attr::STATE.to_string(), s("RUNNING")),
            (crate::attr::CANCELLED_COUNT.to_string(), n(cancelled)),
        ]);
        if let Some(c) = completed {
            i.insert(crate::attr::COMPLETED_COUNT.to_string(), n(c));
        }
        i
    };
    assert!(eval(&cond, Some(&item(None, 5))), "as read, never written");
    assert!(eval(&cond, Some(&item(Some(0), 5))), "as read, written 0");
    assert!(
        !eval(&cond, Some(&item(Some(0), 0))),
        "redriven: its counters set back to 0"
    );
    assert!(!eval(&cond, Some(&item(None, 4))), "another count");
}
