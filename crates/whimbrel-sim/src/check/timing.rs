//! Timing invariants, judged in world time (the simulation's true clock),
//! which no function reads: clocks of clients may be off by minutes, so
//! what a heartbeat's stored time says is not when it was written.
//!
//! No false heartbeat timeout: the monitor times an activity out for lack
//! of heartbeat only when nothing wrote its heartbeat time for the
//! heartbeat timeout, in world time (less [`HEARTBEAT_TOLERANCE`], and less
//! the lag of the last heartbeat's clock when it was behind: the engine
//! counts a heartbeat by the client's clock while that is ahead of when it
//! saw it, docs/design.md § 3.10).

use std::collections::HashMap;
use std::sync::Arc;

use whimbrel_core::engine::{deadline, EngineConfig};
use whimbrel_core::model::ActivityExec;

use super::Checker;

/// Seconds a heartbeat timeout may come early in world time: the skews of
/// the engine's clock and of an honest client's (two seconds each), and
/// one second of rounding.
pub const HEARTBEAT_TOLERANCE: i64 = 5;

/// Seconds the engine's clock may be behind the world's.
const ENGINE_SKEW: i64 = 2;

/// What the timing checks remember between steps.
#[derive(Debug, Default)]
pub struct Timing {
    /// Per activity: its stored heartbeat time, and the world time it was
    /// first seen with that value (when it was written: the checker looks
    /// after every step, and a step makes one store call).
    beats: HashMap<String, (i64, i64)>,
    /// Timed-out history entries already judged (full event ids).
    judged: std::collections::HashSet<String>,
}

impl Checker {
    /// The timing invariants at world time `now`, over the activities as
    /// they are now; then remember their heartbeat times.
    pub fn timing(
        &mut self,
        acts: &[Arc<ActivityExec>],
        cfg: &EngineConfig,
        now: i64,
    ) -> Vec<String> {
        let mut v = vec![];
        for a in acts {
            v.extend(self.false_heartbeat_timeouts(a, cfg, now));
        }
        for a in acts {
            let value = a.timing.heartbeat_time_epoch;
            let seen = self.timing.beats.get(&a.activity_exec_id).map(|b| b.0);
            if seen != Some(value) {
                self.timing
                    .beats
                    .insert(a.activity_exec_id.clone(), (value, now));
            }
        }
        v
    }

    /// Heartbeat timeouts of `a` first seen at `now` while its heartbeat
    /// time was written less than the heartbeat timeout ago (world time).
    fn false_heartbeat_timeouts(
        &mut self,
        a: &ActivityExec,
        cfg: &EngineConfig,
        now: i64,
    ) -> Vec<String> {
        let id = &a.activity_exec_id;
        let mut v = vec![];
        let last = a.trail.history.len().saturating_sub(1);
        for (k, h) in a.trail.history.iter().enumerate() {
            if h.transition != "TIMED_OUT" || !self.timing.judged.insert(h.full_event_id(id)) {
                continue;
            }
            // A retried timeout keeps its error on the entry; the last one
            // on the item.
            let error = h.error.as_deref().or(if k == last {
                a.outcome.error.as_deref()
            } else {
                None
            });
            if !error.is_some_and(|e| e.contains("(heartbeat timeout)")) {
                continue;
            }
            let (Some(timeout), Some(&(beat, written))) = (
                deadline::heartbeat_timeout(a, cfg),
                self.timing.beats.get(id),
            ) else {
                continue;
            };
            // A clock behind by `lag` loses `lag` seconds of its last
            // heartbeat's timeout: the engine trusts a heartbeat time while
            // it is ahead of when the engine saw it (docs/design.md § 3.10).
            // One behind by the timeout or more loses nothing, unless the
            // engine's clock was behind too when it saw the heartbeat (by
            // up to ENGINE_SKEW: seed 993, a heartbeat 97 s behind with a
            // timeout of 96 s, seen by a clock 2 s behind, was trusted).
            let lag = Some(written - beat).filter(|l| (0..timeout + ENGINE_SKEW).contains(l));
            let lag = lag.unwrap_or(0);
            if beat < 0 {
                v.extend(before_first_heartbeat(a, &h.event_id, timeout, now));
                continue;
            }
            if now - written < timeout - HEARTBEAT_TOLERANCE - lag {
                v.push(format!(
                    "{id}: timed out for lack of heartbeat at world time {now}, but its heartbeat \
                     time was written at world time {written}, {}s before (timeout {timeout}s; \
                     the heartbeat says {beat}, {}s off the world's clock)",
                    now - written,
                    beat - written
                ));
            }
        }
        v
    }
}

/// A heartbeat timeout (history entry `event_id`) of `a` at world time
/// `now` when no heartbeat of the attempt was written: its deadline counts
/// from the start, which a report's RUNNING stamps on the engine's clock.
/// A start a worker's claim stamped is on the worker's clock, and is not
/// judged.
fn before_first_heartbeat(
    a: &ActivityExec,
    event_id: &str,
    timeout: i64,
    now: i64,
) -> Option<String> {
    let start = a.timing.start_time_epoch;
    let claimed = a
        .trail
        .history
        .iter()
        .rev()
        .find(|h| h.state == whimbrel_core::contract::ActivityState::Running)
        .is_some_and(|h| h.event_id.starts_with("claim:"));
    (start >= 0 && !claimed && now - start < timeout - HEARTBEAT_TOLERANCE).then(|| {
        format!(
            "{}: timed out for lack of heartbeat ({event_id}) at world time {now}, {}s after \
             its start at {start}, before any heartbeat (timeout {timeout}s)",
            a.activity_exec_id,
            now - start
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An activity RUNNING with a 60 s heartbeat timeout, its heartbeat
    /// time `beat` (by the client's clock), and its history.
    fn running(beat: i64, timed_out: bool) -> ActivityExec {
        let mut a: ActivityExec = serde_json::from_value(serde_json::json!({
            "activity_exec_id": "a::1", "workflow_exec_id": "w::1", "workflow_name": "w", "lambda": "f",
            "activity_name": "a", "state": if timed_out { "TIMED_OUT" } else { "RUNNING" },
            "heartbeat_enabled": true, "heartbeat_timeout_seconds": 60,
            "start_time_epoch": 900, "heartbeat_time_epoch": beat,
            "error": "no heartbeat for 60s (heartbeat timeout)",
        }))
        .expect("an activity item");
        if timed_out {
            a.trail
                .history
                .push(whimbrel_core::history::HistoryEntry::new(
                    whimbrel_core::contract::Transition::TimedOut,
                    whimbrel_core::contract::ActivityState::TimedOut,
                    1020,
                    "timeout:1",
                ));
        }
        a
    }

    /// Before any heartbeat (the RUNNING write clears it to -1), a
    /// heartbeat timeout sooner than the timeout after the start is caught;
    /// one a timeout after it is not.
    #[test]
    fn a_heartbeat_timeout_before_the_first_heartbeat_is_judged_from_the_start() {
        let cfg = EngineConfig::default();
        for (at, caught) in [(1020, true), (1060, false)] {
            let mut c = Checker::default();
            let mut a = running(-1, false);
            a.timing.start_time_epoch = 1000;
            assert!(c.timing(&[Arc::new(a.clone())], &cfg, 1000).is_empty());
            let mut out = running(-1, true);
            out.timing.start_time_epoch = 1000;
            let v = c.timing(&[Arc::new(out)], &cfg, at);
            assert_eq!(!v.is_empty(), caught, "at {at}: {v:?}");
        }
    }

    /// The check is not vacuous: a client 100 s behind (more than the
    /// 60 s timeout) heartbeats at world time 1000 (its heartbeat says
    /// 900), and a heartbeat timeout seen at 1020 is false; one seen 60 s
    /// after the heartbeat is not. One 10 s behind may lose those 10 s.
    #[test]
    fn a_heartbeat_timeout_within_the_timeout_of_a_written_heartbeat_is_caught() {
        let cfg = EngineConfig::default();
        let mut c = Checker::default();
        assert!(c
            .timing(&[Arc::new(running(900, false))], &cfg, 1000)
            .is_empty());
        let v = c.timing(&[Arc::new(running(900, true))], &cfg, 1020);
        assert!(
            v.iter()
                .any(|m| m.contains("timed out for lack of heartbeat")),
            "{v:?}"
        );
        let mut c = Checker::default();
        assert!(c
            .timing(&[Arc::new(running(990, false))], &cfg, 1000)
            .is_empty());
        assert!(c
            .timing(&[Arc::new(running(990, true))], &cfg, 1046)
            .is_empty());
        let mut c = Checker::default();
        assert!(c
            .timing(&[Arc::new(running(990, false))], &cfg, 1000)
            .is_empty());
        assert!(!c
            .timing(&[Arc::new(running(990, true))], &cfg, 1040)
            .is_empty());
        let mut c = Checker::default();
        assert!(c
            .timing(&[Arc::new(running(900, false))], &cfg, 1000)
            .is_empty());
        assert!(c
            .timing(&[Arc::new(running(900, true))], &cfg, 1060)
            .is_empty());
    }
}
