//! The monitor's judgment of one due activity (design.md § 3.6, § 8.3):
//! its reports still in flight first (parked, then the event rows the
//! stream has not delivered, read through the event table's
//! `activity_exec_id` GSI), then what [`decide::monitor_verdict`] says:
//! settle, move the deadline, time out, fire a timer, relaunch.

use crate::attr;
use serde::Deserialize;
use tracing::{info, warn};

use super::super::apply::Source;
use super::super::decide::{self, Details, Verdict};
use super::super::{decoded, ActivityKey, Applied, Engine, EngineError};
use super::{MonitorReport, IN_FLIGHT_PER_SWEEP};
use crate::contract::{ActivityState, Transition};
use crate::ids;
use crate::keys;
use crate::launcher::Launcher;
use crate::model::{ActivityEvent, ActivityExec};
use crate::store::{self, s, KeyCond, StoreError};

#[derive(Debug, Deserialize)]
struct EventKey {
    activity_event_id: String,
    activity_exec_id: String,
}

impl<L: Launcher> Engine<L> {
    #[tracing::instrument(skip_all, fields(activity_exec_id = %k.activity_exec_id, workflow_exec_id = %k.workflow_exec_id))]
    pub(super) async fn sweep_activity(
        &self,
        k: &ActivityKey,
        now: i64,
        report: &mut MonitorReport,
    ) -> Result<(), EngineError> {
        let Some(mut exec) = self
            .store
            .get::<ActivityExec>(
                &self.store.tables().activity_exec(),
                self.activity_key(&k.activity_exec_id, &k.workflow_exec_id),
            )
            .await?
        else {
            return Ok(());
        };
        // Judged at the time of the read, not the tick's start: a tick
        // that stalled would arm a heartbeat written meanwhile from before
        // it was written (seed 5574).
        let mut now = self.read_time(now);
        if !exec.state.is_terminal()
            && !exec.trail.parked.is_empty()
            && self.apply_parked(exec.clone()).await?
        {
            report.reports_applied += 1;
            exec = self
                .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                .await?;
        }
        let mut verdict = decide::monitor_verdict(&exec, &self.config, now);
        if verdict.acts() {
            // Reports already parked on the item, then those still in the
            // event table, decide before any deadline does.
            let parked =
                u64::from(!exec.trail.parked.is_empty() && self.apply_parked(exec.clone()).await?);
            let (in_flight, left) = self.apply_in_flight(&exec).await?;
            // A signal sent before its deadline, which no stream handler
            // or release delivered yet (design.md § 9.2).
            let signalled = u64::from(self.deliver_kept_signal(&exec).await?);
            let applied = parked + in_flight + signalled;
            report.reports_applied += applied;
            if left {
                // A row not judged yet may beat the deadline: next sweep.
                return Ok(());
            }
            if applied > 0 {
                exec = self
                    .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                    .await?;
                now = self.read_time(now);
                verdict = decide::monitor_verdict(&exec, &self.config, now);
            }
        }
        self.perform_verdict(exec, verdict, now, report).await
    }

    /// The time to judge an item read just now by, epoch seconds: the
    /// engine's clock after the read, never before `floor` (the tick's
    /// time). A heartbeat the read saw was written before it, so it is
    /// seen no earlier than it was written (design.md § 3.10), however
    /// long the tick has run.
    fn read_time(&self, floor: i64) -> i64 {
        floor.max(self.now().epoch)
    }

    /// Do what the monitor's verdict on `exec` says.
    pub(super) async fn perform_verdict(
        &self,
        exec: ActivityExec,
        verdict: Verdict,
        now: i64,
        report: &mut MonitorReport,
    ) -> Result<(), EngineError> {
        let tables = self.store.tables();
        match verdict {
            Verdict::Settle => {
                if !self.take_settle_in_hand(&exec).await? {
                    return Ok(()); // another tick holds it
                }
                self.settle(&exec).await?;
                report.settled += 1;
            }
            Verdict::Wait => {}
            Verdict::Clear => {
                ignore_condition(self.store.update(decide::clear_due(tables, &exec)).await)?
            }
            Verdict::Extend(at) => ignore_condition(
                self.store
                    .update(decide::extend_due(tables, &exec, at, now))
                    .await,
            )?,
            Verdict::Launch => {
                if self.launch_attempt(exec).await? {
                    report.retries_launched += 1;
                }
            }
            Verdict::TimeOut {
                reason,
                stale_before,
                unchanged_heartbeat,
                retryable,
                kind,
            } => {
                crate::metrics::timeout(kind.name());
                warn!(activity_exec_id = %exec.activity_exec_id, state = %exec.state, %reason, "timing out the activity");
                let details = Details {
                    error: Some(reason),
                    at: Some(now),
                    stale_before,
                    unchanged_heartbeat,
                    no_retry: !retryable,
                    ..Details::default()
                };
                match self.time_out(exec, details).await? {
                    Some(ActivityState::TimedOut) => report.timed_out += 1,
                    Some(ActivityState::Queued) => report.retried += 1,
                    _ => {}
                }
            }
            Verdict::FailNotStarted(reason) => {
                warn!(activity_exec_id = %exec.activity_exec_id, %reason, "failing the activity");
                match self.fail_not_started(exec, reason, now).await? {
                    Some(ActivityState::Failed) => report.not_started += 1,
                    Some(ActivityState::Queued) => report.retried += 1,
                    _ => {}
                }
            }
            Verdict::Relaunch => self.relaunch(&exec, now, report).await?,
            Verdict::Fire => {
                if self.fire_timer(exec, now).await? == Some(ActivityState::Completed) {
                    report.timers_fired += 1;
                }
            }
        }
        Ok(())
    }

    /// TIMED_OUT by the monitor, as [`decide::monitor_verdict`] said;
    /// returns the state reached (QUEUED when retried).
    pub(super) async fn time_out(
        &self,
        exec: ActivityExec,
        details: Details,
    ) -> Result<Option<ActivityState>, EngineError> {
        let event_id =
            ids::EngineStep::TimedOut(&exec.activity_exec_id, exec.attempt.number).event_id();
        self.decree(
            exec,
            Transition::TimedOut,
            Source::Monitor,
            &event_id,
            details,
        )
        .await
    }

    /// COMPLETED by the monitor: the timer's fire time came (design.md
    /// § 9.1), output `{"fired_at": now}` (epoch seconds). Returns the
    /// state reached (`None` when it had been cancelled meanwhile).
    pub(super) async fn fire_timer(
        &self,
        exec: ActivityExec,
        now: i64,
    ) -> Result<Option<ActivityState>, EngineError> {
        let due = decide::timer_fire_epoch(&exec).unwrap_or(now);
        let details = Details {
            output: Some(serde_json::json!({ "fired_at": now })),
            at: Some(now),
            ..Details::default()
        };
        let event_id = ids::EngineStep::TimerFired(&exec.activity_exec_id).event_id();
        let id = exec.activity_exec_id.clone();
        let reached = self
            .decree(
                exec,
                Transition::Completed,
                Source::Monitor,
                &event_id,
                details,
            )
            .await?;
        if reached == Some(ActivityState::Completed) {
            info!(activity_exec_id = %id, due_epoch = due, late_seconds = now - due, "timer fired");
            crate::metrics::timer_fired(now - due);
        }
        Ok(reached)
    }

    /// FAILED by the engine: the attempt never started (`reason`); returns
    /// the state reached (QUEUED when retried).
    pub(super) async fn fail_not_started(
        &self,
        exec: ActivityExec,
        reason: String,
        now: i64,
    ) -> Result<Option<ActivityState>, EngineError> {
        let details = Details {
            error: Some(reason),
            at: Some(now),
            ..Details::default()
        };
        let event_id =
            ids::EngineStep::NotStarted(&exec.activity_exec_id, exec.attempt.number).event_id();
        self.decree(exec, Transition::Failed, Source::Engine, &event_id, details)
            .await
    }

    /// Launch the same attempt again, with a new launch and token: its last
    /// launch never started (design.md: relaunch).
    pub(super) async fn relaunch(
        &self,
        exec: &ActivityExec,
        now: i64,
        report: &mut MonitorReport,
    ) -> Result<(), EngineError> {
        let token = self.env.new_token();
        let hash = ids::token_hash(&token);
        let req = decide::relaunch_update(self.store.tables(), &self.config, exec, &hash, now);
        match self.store.update_returning_new(req).await {
            Ok(Some(item)) => {
                let next = decoded(&exec.activity_exec_id, item)?;
                warn!(activity_exec_id = %next.activity_exec_id, attempt = next.attempt.number, launch = next.attempt.launches, "attempt did not start; launching it again");
                self.launch(&next, &token).await?;
                crate::metrics::relaunch();
                report.relaunched += 1;
                Ok(())
            }
            Ok(None) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Apply the activity's event rows that are written but not applied yet
    /// (the stream is late, or gave up), oldest first, at most
    /// [`IN_FLIGHT_PER_SWEEP`] of them. Rows judged already (applied,
    /// parked, or rejected and marked so) are not judged again. Returns
    /// how many were applied or parked, and whether rows were left for a
    /// later sweep (then no deadline may act yet: one of them may beat it).
    pub(super) async fn apply_in_flight(
        &self,
        exec: &ActivityExec,
    ) -> Result<(u64, bool), EngineError> {
        let mut events = self.rows_in_flight(exec).await?;
        let left = events.len() > IN_FLIGHT_PER_SWEEP;
        events.truncate(IN_FLIGHT_PER_SWEEP);
        let mut applied = 0;
        for ev in events {
            match self.apply_event(&ev).await {
                Ok(Applied::State(_) | Applied::Parked(_)) => {
                    info!(activity_exec_id = %ev.activity_exec_id, event_id = %ev.activity_event_id, transition = %ev.transition, "monitor applied a report still in flight");
                    applied += 1;
                }
                Ok(_) | Err(EngineError::Rejected(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if left {
            warn!(activity_exec_id = %exec.activity_exec_id, "more event rows in flight than one sweep judges; the rest wait for the next");
        }
        Ok((applied, left))
    }

    /// The activity's event rows not judged yet, oldest first (by the time
    /// they name, PREPARING before RUNNING before the rest).
    pub(super) async fn rows_in_flight(
        &self,
        exec: &ActivityExec,
    ) -> Result<Vec<ActivityEvent>, EngineError> {
        let t = self.store.tables();
        let key = KeyCond {
            hash: (attr::ACTIVITY_EXEC_ID.into(), s(&exec.activity_exec_id)),
            range: None,
        };
        let keys: Vec<EventKey> = self
            .store
            .query(
                &t.activity_event(),
                Some(store::INDEX_EVENTS_BY_ACTIVITY),
                key,
            )
            .await?;
        let wanted: Vec<_> = keys
            .into_iter()
            .filter(|k| !exec.has_judged(&k.activity_event_id))
            .map(|k| keys::event_key(&k.activity_event_id, &k.activity_exec_id))
            .collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let mut events: Vec<ActivityEvent> = Vec::new();
        for row in self
            .store
            .batch_get_each::<ActivityEvent>(&t.activity_event(), wanted)
            .await?
        {
            // A row that is not an event (hostile: a binary attribute, a
            // wrong type) is the stream's to reject; it must not blind the
            // monitor to the activity's other rows.
            match row {
                Ok(ev) if ev.rejected_epoch.is_none() => events.push(ev),
                Ok(_) => {}
                Err(e) => {
                    info!(activity_exec_id = %exec.activity_exec_id, error = %e, "event row skipped: not an event")
                }
            }
        }
        let rank = |ev: &ActivityEvent| match ev.transition.as_str() {
            "PREPARING" => 0,
            "RUNNING" => 1,
            _ => 2,
        };
        events.sort_by(|a, b| {
            (a.when_epoch.unwrap_or(0.0), rank(a))
                .partial_cmp(&(b.when_epoch.unwrap_or(0.0), rank(b)))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        Ok(events)
    }
}

fn ignore_condition<T>(r: Result<T, StoreError>) -> Result<(), EngineError> {
    match r {
        Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
