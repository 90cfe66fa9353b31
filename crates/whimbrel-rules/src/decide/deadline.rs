//! Every timeout of an activity as one pure rule: which deadline of its
//! state comes first ([`next_deadline`]), and what the heartbeat monitor
//! does when it passed ([`monitor_verdict`]). The due marker written with
//! each state change is this deadline, so the monitor looks at an item
//! exactly when something may be owed.
//!
//! | State | Deadlines (the earliest fires) |
//! |---|---|
//! | QUEUED, claimed by the launcher | relaunch (`WHIMBREL_QUEUED_REDRIVE_SECONDS` after the launch), schedule-to-start, schedule-to-close |
//! | QUEUED, retry delay (Lambda) | the next attempt's time: launch it |
//! | QUEUED, waiting for a worker | schedule-to-start, schedule-to-close |
//! | PREPARING | start-to-close (from PREPARING), schedule-to-close |
//! | RUNNING | heartbeat, start-to-close, schedule-to-close |
//! | CANCELLED_RUNNING | the cancel grace |
//! | RUNNING timer (design.md § 9.1) | its fire time: complete it |
//! | RUNNING signal wait (design.md § 9.2) | start-to-close, when it has a `timeout_seconds` |

use crate::config::EngineConfig;
use crate::contract::ActivityState;
use crate::kind::NodeKind;
use crate::model::ActivityExec;

/// Which deadline of an activity fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// A launched attempt still QUEUED: the invocation was lost or never
    /// started; relaunch it (or fail it after the last launch).
    Relaunch,
    /// A Lambda activity's retry delay ended: claim and launch the attempt.
    NextAttempt,
    /// QUEUED too long since the attempt became due.
    ScheduleToStart,
    /// PREPARING or RUNNING too long.
    StartToClose,
    /// RUNNING without a heartbeat for the heartbeat timeout.
    Heartbeat,
    /// Too long since first queued, across all attempts (never retried).
    ScheduleToClose,
    /// CANCELLED_RUNNING not acknowledged.
    CancelGrace,
    /// A timer's fire time came: complete it.
    Timer,
}

impl Deadline {
    /// The name used in metrics (`Timeouts`, dimension `Kind`).
    pub fn name(self) -> &'static str {
        match self {
            Deadline::Relaunch => "Relaunch",
            Deadline::NextAttempt => "NextAttempt",
            Deadline::ScheduleToStart => "ScheduleToStart",
            Deadline::StartToClose => "StartToClose",
            Deadline::Heartbeat => "Heartbeat",
            Deadline::ScheduleToClose => "ScheduleToClose",
            Deadline::CancelGrace => "CancelGrace",
            Deadline::Timer => "Timer",
        }
    }
    /// How long past this deadline the monitor waits before it acts,
    /// seconds: the report grace (design.md § 8.4), so a report written
    /// before the deadline is seen first; none for a retry's delay or a
    /// timer, which no report can beat (only a CANCEL, which `acts`
    /// applies first when the index shows it): they fire on time.
    pub fn grace(self, cfg: &EngineConfig) -> i64 {
        match self {
            Deadline::NextAttempt | Deadline::Timer => 0,
            _ => cfg.report_grace_seconds,
        }
    }
}

/// The heartbeat timeout of an activity, seconds; `None` when heartbeats
/// are disabled.
pub fn heartbeat_timeout(exec: &ActivityExec, cfg: &EngineConfig) -> Option<i64> {
    exec.timeouts.heartbeat_enabled.then(|| {
        exec.timeouts
            .heartbeat_timeout_seconds
            .unwrap_or(cfg.default_heartbeat_timeout_seconds)
    })
}

/// The start-to-close timeout of an activity, seconds: its own
/// (`timeout_seconds`) or the configured default. Also the PREPARING limit.
pub fn start_to_close(exec: &ActivityExec, cfg: &EngineConfig) -> i64 {
    exec.timeouts
        .start_to_close_seconds
        .unwrap_or(cfg.default_start_to_close_seconds)
}

/// When a RUNNING activity times out, epoch seconds, judged from what its
/// item holds, and whether the heartbeat is what fires: the heartbeat
/// deadline ([`heartbeat_deadline`]) or start-to-close, the earlier.
pub fn running_deadline(exec: &ActivityExec, cfg: &EngineConfig) -> (i64, bool) {
    // Saturating: epochs on the item may be anything a client wrote
    // (a raw heartbeat near i64::MAX, fuzz crash 1); start-to-close still
    // bounds the attempt.
    let close = exec
        .timing
        .start_time_epoch
        .max(0)
        .saturating_add(start_to_close(exec, cfg));
    match heartbeat_timeout(exec, cfg).map(|t| heartbeat_deadline(exec, t)) {
        Some(at) if at < close => (at, true),
        _ => (close, false),
    }
}

/// The heartbeat deadline of a RUNNING activity whose heartbeat timeout is
/// `t` seconds, epoch seconds (docs/design.md § 3.10).
///
/// A heartbeat time is written by the client, on the client's clock. Once
/// the engine has seen it (`heartbeat_seen`, at `heartbeat_seen_epoch` by
/// its own clock), the deadline is [`arm`]ed from both, so a client's
/// clock cannot make it earlier than the engine saw the heartbeat, nor
/// more than `t` after. A heartbeat written since (the monitor arms it
/// when it looks: [`monitor_verdict`]) can only move the deadline later;
/// until it is seen it counts by the client's clock, as the architecture
/// says (`heartbeat_time_epoch` + `t`).
pub fn heartbeat_deadline(exec: &ActivityExec, t: i64) -> i64 {
    let timing = &exec.timing;
    let beat = timing.heartbeat_time_epoch.max(timing.start_time_epoch);
    let by_clock = beat.saturating_add(t);
    let armed = match (timing.heartbeat_seen, timing.heartbeat_seen_epoch) {
        // The value seen as written: raised to the start (engine time), a
        // heartbeat from a clock behind would look newer than it is.
        (Some(seen), Some(at)) => arm(seen, at, t),
        _ => return by_clock,
    };
    if timing.heartbeat_seen == Some(timing.heartbeat_time_epoch) {
        armed
    } else {
        armed.max(by_clock)
    }
}

/// The heartbeat deadline, epoch seconds, of a heartbeat written at `beat`
/// by the client's clock and seen by the engine at `seen_at` by its own:
/// `beat + t` (the client's clock) when that is still ahead of `seen_at`,
/// but never more than `seen_at + t`; and `seen_at + t` when the client's
/// time was already past it when seen (its clock is behind: the heartbeat
/// came after the engine's last look, so no later than `seen_at`).
pub fn arm(beat: i64, seen_at: i64, t: i64) -> i64 {
    let by_sight = seen_at.saturating_add(t);
    match beat.saturating_add(t) {
        by_clock if by_clock > seen_at => by_clock.min(by_sight),
        _ => by_sight,
    }
}

/// Whether `exec` is RUNNING with a heartbeat time the engine has not
/// seen yet (a client wrote it since the engine last armed the deadline):
/// the monitor arms it before it judges ([`monitor_verdict`]). A
/// heartbeat time that is missing or not a number (read as negative) is
/// no heartbeat, and is never seen.
pub fn unseen_heartbeat(exec: &ActivityExec) -> bool {
    let beat = exec.timing.heartbeat_time_epoch;
    exec.state == ActivityState::Running
        && exec.timeouts.heartbeat_enabled
        && beat >= 0
        && exec.timing.heartbeat_seen != Some(beat)
}

/// `exec` with its heartbeat seen at `now` (epoch seconds, the engine's
/// clock).
pub fn seen_at(exec: &ActivityExec, now: i64) -> ActivityExec {
    let mut seen = exec.clone();
    seen.timing.heartbeat_seen = Some(exec.timing.heartbeat_time_epoch);
    seen.timing.heartbeat_seen_epoch = Some(now);
    seen
}

/// A timer node's fire time, epoch seconds (design.md § 9.1): its `until`,
/// else its start (the release) plus its wait. `None` for an activity, or
/// a timer not started.
pub fn timer_fire_epoch(exec: &ActivityExec) -> Option<i64> {
    let (seconds, until_epoch) = exec.runner.runs.timer()?;
    let start = exec.timing.start_time_epoch;
    until_epoch.or_else(|| {
        seconds
            .filter(|_| start >= 0)
            .map(|w| start.saturating_add(w))
    })
}

/// When the activity entered its current state (its last history entry),
/// epoch seconds. The deadlines of PREPARING and CANCELLED_RUNNING count
/// from it; the due marker only says when to look.
fn entered_at(exec: &ActivityExec) -> Option<i64> {
    exec.trail
        .history
        .iter()
        .rev()
        .find(|h| h.state == exec.state)
        .map(|h| h.at_epoch)
}

/// The earliest deadline of the activity's state, epoch seconds, and which
/// it is; `None` when nothing is watched (not queued yet, terminal, or a
/// task waiting for a worker without schedule timeouts).
pub fn next_deadline(exec: &ActivityExec, cfg: &EngineConfig) -> Option<(i64, Deadline)> {
    let mut all: Vec<(i64, Deadline)> = Vec::new();
    let close = exec
        .timeouts
        .schedule_to_close_seconds
        .zip(exec.timing.first_queued_epoch)
        .map(|(t, from)| (from.saturating_add(t), Deadline::ScheduleToClose));
    match exec.state {
        ActivityState::Queued => {
            let claimed = exec.attempt.token_hash.is_some();
            if exec.runner.runs.task_list().is_none() {
                all.push(if claimed {
                    let at = exec
                        .timing
                        .queued_time_epoch
                        .unwrap_or(0)
                        .saturating_add(cfg.relaunch_window_seconds());
                    (at, Deadline::Relaunch)
                } else {
                    let at = exec
                        .timing
                        .next_attempt_epoch
                        .or(exec.timing.scheduled_epoch);
                    (at.unwrap_or(0), Deadline::NextAttempt)
                });
            }
            if let (Some(t), Some(from)) = (
                exec.timeouts.schedule_to_start_seconds,
                exec.timing.scheduled_epoch,
            ) {
                all.push((from.saturating_add(t), Deadline::ScheduleToStart));
            }
            all.extend(close);
        }
        ActivityState::Preparing => {
            let from = entered_at(exec).unwrap_or(0);
            all.push((
                from.saturating_add(start_to_close(exec, cfg)),
                Deadline::StartToClose,
            ));
            all.extend(close);
        }
        ActivityState::Running if exec.runner.kind() == NodeKind::Timer => {
            all.extend(timer_fire_epoch(exec).map(|at| (at, Deadline::Timer)));
        }
        ActivityState::Running if exec.runner.kind() == NodeKind::Signal => {
            // Only its own timeout: no default, no heartbeat.
            let start = exec.timing.start_time_epoch.max(0);
            all.extend(
                exec.timeouts
                    .start_to_close_seconds
                    .map(|t| (start.saturating_add(t), Deadline::StartToClose)),
            );
        }
        ActivityState::Running => {
            let (at, by_heartbeat) = running_deadline(exec, cfg);
            let kind = if by_heartbeat {
                Deadline::Heartbeat
            } else {
                Deadline::StartToClose
            };
            all.push((at, kind));
            all.extend(close);
        }
        ActivityState::CancelledRunning => {
            let from = entered_at(exec).unwrap_or(0);
            all.push((
                from.saturating_add(cfg.cancel_grace_seconds),
                Deadline::CancelGrace,
            ));
        }
        _ => {}
    }
    all.into_iter().min_by_key(|(at, _)| *at)
}

/// A deadline not passed yet: wait if the marker already says it, else
/// move the marker there.
fn look_again(exec: &ActivityExec, deadline: i64) -> Verdict {
    if exec.timing.due_epoch == Some(deadline) {
        Verdict::Wait
    } else {
        Verdict::Extend(deadline)
    }
}

/// What the monitor does with an activity whose due time came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Terminal: run its side effects, then clear the marker.
    Settle,
    /// Not due after all (a heartbeat moved its deadline): move the marker.
    Extend(i64),
    /// Due, within the report grace: look again next tick.
    Wait,
    /// No marker should be there (nothing watched): clear it.
    Clear,
    /// The deadline passed: TIMED_OUT with this reason.
    TimeOut {
        /// Which timeout fired, for the `error`.
        reason: String,
        /// Heartbeat cut-off the write must be conditioned on
        /// (`heartbeat_time_epoch < stale_before`).
        stale_before: Option<i64>,
        /// When the heartbeat timeout fired: the heartbeat time read, which
        /// the write requires unchanged, so a heartbeat written meanwhile
        /// wins whatever the clock it was written on.
        unchanged_heartbeat: Option<i64>,
        /// False for schedule-to-close: the activity ends for good.
        retryable: bool,
        /// Which deadline fired.
        kind: Deadline,
    },
    /// A launched attempt that never started, with launches left: launch it
    /// again (same attempt, new token).
    Relaunch,
    /// A retry's delay ended: claim and launch the next attempt.
    Launch,
    /// A launched attempt that never started after its last launch: FAILED
    /// with this reason (retried per the policy).
    FailNotStarted(String),
    /// A timer's fire time came: COMPLETED by the monitor.
    Fire,
}

impl Verdict {
    /// Whether the verdict acts on the activity (times it out, fails it,
    /// launches it again): then reports written before the deadline are
    /// applied first, and the verdict asked again.
    pub fn acts(&self) -> bool {
        matches!(
            self,
            Verdict::TimeOut { .. }
                | Verdict::Relaunch
                | Verdict::FailNotStarted(_)
                | Verdict::Fire
        )
    }
}

/// The monitor's verdict on `exec` at `now` (the item read consistently).
/// A deadline that a report may beat is acted on only
/// `report_grace_seconds` after it passed, so reports written before it
/// are visible in the event index first.
pub fn monitor_verdict(exec: &ActivityExec, cfg: &EngineConfig, now: i64) -> Verdict {
    if exec.state.is_terminal() {
        // A marker ahead is a settle in hand (`move_settle_due`), or the
        // settle grace not yet over: its holder is at work.
        if exec.timing.due_epoch.is_some_and(|due| due > now) {
            return Verdict::Wait;
        }
        return Verdict::Settle;
    }
    // A heartbeat written since the engine last looked counts from now at
    // the latest, whatever the client's clock says (`extend_due` records
    // it): the deadline it gives is after `now`, so this looks again.
    let armed;
    let unseen = unseen_heartbeat(exec);
    let exec = if unseen {
        armed = seen_at(exec, now);
        &armed
    } else {
        exec
    };
    let Some((deadline, kind)) = next_deadline(exec, cfg) else {
        return Verdict::Clear;
    };
    let grace = kind.grace(cfg);
    if now < deadline.saturating_add(grace) {
        return if unseen {
            // Recorded (`extend_due`) even where the marker stays, or the
            // heartbeat would be armed again, later, at the next look.
            Verdict::Extend(deadline)
        } else if now < deadline {
            look_again(exec, deadline)
        } else {
            Verdict::Wait
        };
    }
    fired(exec, cfg, kind)
}

/// What the monitor does when deadline `kind` of `exec` passed, with the
/// report grace.
fn fired(exec: &ActivityExec, cfg: &EngineConfig, kind: Deadline) -> Verdict {
    let time_out = |reason: String| Verdict::TimeOut {
        reason,
        stale_before: None,
        unchanged_heartbeat: None,
        retryable: true,
        kind,
    };
    match kind {
        Deadline::NextAttempt => Verdict::Launch,
        Deadline::Timer => Verdict::Fire,
        Deadline::Relaunch if exec.attempt.launches.max(1) >= cfg.max_launch_attempts => {
            Verdict::FailNotStarted(format!(
                "NOT_STARTED: attempt {} not started after {} launches ({}s each)",
                exec.attempt.number,
                exec.attempt.launches.max(1),
                cfg.relaunch_window_seconds()
            ))
        }
        Deadline::Relaunch => Verdict::Relaunch,
        Deadline::ScheduleToStart => time_out(format!(
            "not started within {}s of being scheduled (schedule-to-start)",
            exec.timeouts.schedule_to_start_seconds.unwrap_or(0)
        )),
        Deadline::StartToClose if exec.state == ActivityState::Preparing => time_out(format!(
            "PREPARING for more than {}s (start-to-close)",
            start_to_close(exec, cfg)
        )),
        Deadline::StartToClose if exec.runner.kind() == NodeKind::Signal => time_out(format!(
            "no signal {:?} within {}s (timeout_seconds)",
            exec.runner.runs.signal_name().unwrap_or_default(),
            start_to_close(exec, cfg)
        )),
        Deadline::StartToClose => time_out(format!(
            "not finished within {}s of starting (start-to-close)",
            start_to_close(exec, cfg)
        )),
        Deadline::Heartbeat => {
            let t = heartbeat_timeout(exec, cfg).unwrap_or(0);
            // No heartbeat since the one seen: the write requires that
            // none landed meanwhile.
            Verdict::TimeOut {
                reason: format!("no heartbeat for {t}s (heartbeat timeout)"),
                stale_before: None,
                unchanged_heartbeat: Some(exec.timing.heartbeat_time_epoch),
                retryable: true,
                kind,
            }
        }
        Deadline::ScheduleToClose => Verdict::TimeOut {
            reason: format!(
                "not completed within {}s of first being scheduled (schedule-to-close)",
                exec.timeouts.schedule_to_close_seconds.unwrap_or(0)
            ),
            stale_before: None,
            unchanged_heartbeat: None,
            retryable: false,
            kind,
        },
        Deadline::CancelGrace => time_out(format!(
            "cancel not acknowledged within {}s",
            cfg.cancel_grace_seconds
        )),
    }
}
