//! A user's cancel takes effect (docs/contract.md § 6, cancel requests).
//!
//! Once the stream has applied a cancel request for a running workflow,
//! every activity of it that had not ended was cancelled by the engine
//! (`CANCEL`: to `CANCELLED`, or to `CANCELLED_RUNNING` while it runs),
//! so nothing of the workflow runs on as if no cancel had come: an activity
//! that was `REQUESTED` is never launched, and one that was running may
//! still end as it reports (contract rows 22, 23), but only after the
//! cancel was recorded on it. A workflow redriven after the cancel runs
//! anew (design.md § 9.4); one whose redrive was under way when the cancel
//! came does not.

use std::collections::HashMap;
use std::sync::Arc;

use whimbrel_core::contract::ActivityState;
use whimbrel_core::model::ActivityExec;

/// How long after a request counts as applied (when the engine was done
/// with its record, by its clock, off by two seconds at most) the checker
/// may first see an activity ended by a write made before, seconds: the
/// steps of the world interleave invocations.
const CLOCK_SLACK_SECONDS: i64 = 5;

/// A cancel request a user inserted, and when (epoch seconds) the stream
/// first applied it, if it did: when the engine was done with its record
/// (its clock, off by two seconds at most), which may be long before its
/// batch ended.
#[derive(Debug, Clone)]
pub struct CancelRequest {
    /// The workflow exec it names.
    pub workflow_exec_id: String,
    /// When its stream record was first applied.
    pub applied_at: Option<i64>,
}

/// Violations: an activity of a workflow whose cancel request was applied
/// at `t` that ended after `t` (allowing `CLOCK_SLACK_SECONDS`) with no
/// cancel in its history. `ended_at`: when the checker first saw each
/// activity ended, world time (history times are the clock of whoever
/// applied the change, a worker's included, which may be off by minutes).
pub fn violations(
    requests: &HashMap<String, CancelRequest>,
    acts: &[Arc<ActivityExec>],
    ended_at: &HashMap<String, i64>,
    redrives: &HashMap<String, i64>,
) -> Vec<String> {
    let mut v = vec![];
    for (id, req) in requests {
        let Some(t) = req.applied_at else {
            continue;
        };
        let mine = (acts.iter()).filter(|a| a.workflow_exec_id == req.workflow_exec_id);
        for a in mine {
            if let Some(end) = uncancelled_end_after(a, (id, t), ended_at, redrives) {
                v.push(format!(
                    "activity {} ended {} at {end}, after the cancel request {id} of its workflow was applied at {t}, and was never cancelled (history {:?})",
                    a.activity_exec_id, a.state, a.trail.history
                ));
            }
        }
    }
    v
}

/// When `a` was first seen ended in its current generation (else its
/// history's time), if that was after `t` and no cancel is in that
/// generation. A generation a redrive began after `t` (`redrives`: when
/// each was applied, world time) owes the cancel nothing: its workflow
/// had ended, cancelled or not, and a user redrove it. One begun before
/// does: a cancel applied while a redrive is under way must stop what it
/// redrives, unless the request had cancelled `a` before its redrive (a
/// first delivery that died after its writes, applied again by a
/// redelivery that has nothing left to do: seed 1053).
fn uncancelled_end_after(
    a: &ActivityExec,
    (id, t): (&str, i64),
    ended_at: &HashMap<String, i64>,
    redrives: &HashMap<String, i64>,
) -> Option<i64> {
    let history = super::workflow_redrive::generation(a);
    let cancelled = |s: ActivityState| {
        matches!(
            s,
            ActivityState::Cancelled | ActivityState::CancelledRunning
        )
    };
    if history.iter().any(|h| cancelled(h.state)) {
        return None;
    }
    let all = &a.trail.history;
    if let Some(k) = all.iter().rposition(super::workflow_redrive::is_redrive) {
        let step = format!("cancel-request:{id}");
        if all[..k].iter().any(|x| x.event_id == step) {
            return None;
        }
        let h = &all[k];
        let r = h.event_id.strip_prefix("redrive:").unwrap_or_default();
        let began = redrives.get(r).copied().unwrap_or(h.at_epoch);
        if began + CLOCK_SLACK_SECONDS >= t {
            return None;
        }
    }
    let end = match ended_at.get(&a.activity_exec_id) {
        Some(at) => *at,
        None => history.iter().find(|h| h.state.is_terminal())?.at_epoch,
    };
    (end > t + CLOCK_SLACK_SECONDS).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use whimbrel_core::contract::Transition;
    use whimbrel_core::history::HistoryEntry;

    fn act(wf: &str, entries: &[(ActivityState, i64)]) -> ActivityExec {
        let mut a: ActivityExec = serde_json::from_value(serde_json::json!({
            "activity_exec_id": "x::1", "workflow_exec_id": wf, "workflow_name": "w", "lambda": "f",
            "activity_name": "x", "state": "REQUESTED", "heartbeat_enabled": false,
            "start_time_epoch": -1,
        }))
        .expect("an activity item");
        for (state, at) in entries {
            a.trail
                .history
                .push(HistoryEntry::new(Transition::Running, *state, *at, "e"));
        }
        a.state = entries.last().map_or(a.state, |e| e.0);
        a
    }

    #[test]
    fn an_activity_completed_after_an_applied_cancel_without_one_is_a_violation() {
        let reqs = HashMap::from([(
            "r".to_string(),
            CancelRequest {
                workflow_exec_id: "w::1".into(),
                applied_at: Some(100),
            },
        )]);
        let late = act(
            "w::1",
            &[
                (ActivityState::Running, 90),
                (ActivityState::Completed, 200),
            ],
        );
        let seen = HashMap::new();
        let none = HashMap::new();
        assert_eq!(
            violations(&reqs, &[Arc::new(late.clone())], &seen, &none).len(),
            1
        );
        // Seen ended by the checker before the cancel applied: no violation,
        // whatever clock the history was written with.
        let seen_early = HashMap::from([("x::1".to_string(), 99)]);
        assert!(violations(&reqs, &[Arc::new(late)], &seen_early, &none).is_empty());
        let early = act("w::1", &[(ActivityState::Completed, 101)]);
        let cancelled = act(
            "w::1",
            &[
                (ActivityState::CancelledRunning, 100),
                (ActivityState::Completed, 200),
            ],
        );
        let other = act("w::2", &[(ActivityState::Completed, 200)]);
        assert!(violations(
            &reqs,
            &[Arc::new(early), Arc::new(cancelled), Arc::new(other)],
            &seen,
            &none
        )
        .is_empty());
        let pending = HashMap::from([(
            "r".to_string(),
            CancelRequest {
                workflow_exec_id: "w::1".into(),
                applied_at: None,
            },
        )]);
        let late = act("w::1", &[(ActivityState::Completed, 200)]);
        assert!(violations(&pending, &[Arc::new(late)], &seen, &none).is_empty());
    }

    /// A redrive begun before the cancel was applied owes it (its
    /// activities must be cancelled); one begun after does not.
    #[test]
    fn a_cancel_applied_while_a_redrive_is_under_way_must_stop_what_it_redrives() {
        let reqs = HashMap::from([(
            "r".to_string(),
            CancelRequest {
                workflow_exec_id: "w::1".into(),
                applied_at: Some(100),
            },
        )]);
        let mut a = act("w::1", &[(ActivityState::Cancelled, 50)]);
        let mut redrive = HistoryEntry::new(
            Transition::Queued,
            ActivityState::Requested,
            60,
            "redrive:R",
        );
        redrive.transition = "REDRIVE".into();
        a.trail.history.push(redrive);
        a.trail.history.push(HistoryEntry::new(
            Transition::Completed,
            ActivityState::Completed,
            200,
            "e",
        ));
        a.state = ActivityState::Completed;
        let seen = HashMap::new();
        let before = HashMap::from([("R".to_string(), 60)]);
        let v = violations(&reqs, &[Arc::new(a.clone())], &seen, &before);
        assert_eq!(v.len(), 1, "{v:?}");
        let after = HashMap::from([("R".to_string(), 150)]);
        assert!(violations(&reqs, &[Arc::new(a.clone())], &seen, &after).is_empty());
        // The request's own cancel recorded at 50, before the redrive: it
        // took effect then, and its redelivery applied at 100 owes the
        // redrive nothing (seed 1053).
        a.trail.history[0].event_id = "cancel-request:r".into();
        assert!(violations(&reqs, &[Arc::new(a)], &seen, &before).is_empty());
    }
}
