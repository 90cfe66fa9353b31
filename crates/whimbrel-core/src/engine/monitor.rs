//! The heartbeat monitor's sweep (heartbeats themselves are
//! `engine/heartbeat.rs`).
//!
//! One tick queries, per shard, the sparse due GSIs of `workflow_exec` and
//! `activity_exec` for items whose due time passed (never a Scan), reads
//! each again consistently, and acts on [`decide::monitor_verdict`]:
//! settle what a terminal write left owed, move a deadline a heartbeat
//! pushed, and before any timeout or relaunch apply the activity's reports
//! still in flight (read through the event table's `activity_exec_id`
//! GSI): a report written before the deadline wins, however late the
//! stream delivers it.

use crate::attr;
use futures::channel::mpsc;
use futures::stream::{self, StreamExt};
use serde::Deserialize;
use tracing::warn;

use super::decide::{self};
use super::{ActivityKey, Engine, EngineError};
use crate::launcher::Launcher;
use crate::model::WorkflowExec;
use crate::store::{self, n, Cmp, KeyCond};

mod due;

/// The wall-clock time a tick may spend before it starts no more shards:
/// two thirds of the heartbeat monitor's 60 s function timeout
/// (template.yaml), so the shard in hand can finish.
pub const MONITOR_TICK_BUDGET: std::time::Duration = std::time::Duration::from_secs(40);

/// The most event rows of one activity a sweep judges (applies, parks or
/// rejects). Each judged row is recorded (history, parked, or its
/// rejection on the row), so a flood of junk rows for one activity costs
/// each sweep this many judgements, and the rows behind it are reached in
/// later sweeps (issue: one item's work is bounded).
pub const IN_FLIGHT_PER_SWEEP: usize = 64;

/// The shard a tick at `now` (epoch seconds) sweeps first: it turns each
/// minute, so over [`store::INDEX_SHARDS`] one-minute ticks each shard is
/// swept first once.
pub fn first_shard(now: i64) -> u32 {
    (now.div_euclid(60)
        .rem_euclid(i64::from(store::INDEX_SHARDS))) as u32
}

/// Longest sleep of a wake-up to its item's due time, seconds: SQS
/// delivers a delayed message about on time, so more is a message the
/// engine did not send (`Engine::wake`).
pub const MAX_WAKE_SLEEP_SECONDS: i64 = 60;

/// What one heartbeat monitor tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MonitorReport {
    /// Activities moved to TIMED_OUT.
    pub timed_out: u64,
    /// QUEUED attempts launched again (their invocation never started).
    pub relaunched: u64,
    /// Failed attempts sent back to QUEUED for a retry.
    pub retried: u64,
    /// Retried attempts launched once their delay ended.
    pub retries_launched: u64,
    /// QUEUED activities FAILED after their last attempt never started.
    pub not_started: u64,
    /// Terminal activities whose side effects the tick finished.
    pub settled: u64,
    /// Reports found in flight (written, not yet applied) and applied.
    pub reports_applied: u64,
    /// Workflows started again (REQUESTED, or roots not launched).
    pub restarted: u64,
    /// Redrives whose writer died before its claims were done, finished
    /// by the tick (design.md § 9.4).
    pub redrives_finished: u64,
    /// Workflows FAILED by their execution timeout (or whose cancels the
    /// tick resumed).
    pub workflows_timed_out: u64,
    /// Items the tick could not handle (logged); the next tick tries again.
    pub errors: u64,
    /// Items that cannot be read as their type (written by something other
    /// than the engine): logged, counted as `ItemsQuarantined`, skipped.
    /// The rest of the tick goes on; an operator repairs or deletes them.
    pub quarantined: u64,
    /// Shards the tick did not start because its budget was spent
    /// ([`Engine::monitor_tick_within`]); the next ticks start elsewhere.
    pub shards_left: u64,
    /// Timers completed at their fire time (design.md § 9.1).
    pub timers_fired: u64,
    /// Items the due indexes returned (workflow and activity execs whose
    /// marker came due), each then read consistently: what a tick costs
    /// grows with this, never with the live items.
    pub swept: u64,
}

impl MonitorReport {
    /// Add `other`'s counts to these.
    pub fn absorb(&mut self, other: &MonitorReport) {
        self.timed_out += other.timed_out;
        self.relaunched += other.relaunched;
        self.retried += other.retried;
        self.retries_launched += other.retries_launched;
        self.not_started += other.not_started;
        self.settled += other.settled;
        self.reports_applied += other.reports_applied;
        self.restarted += other.restarted;
        self.redrives_finished += other.redrives_finished;
        self.workflows_timed_out += other.workflows_timed_out;
        self.errors += other.errors;
        self.quarantined += other.quarantined;
        self.shards_left += other.shards_left;
        self.swept += other.swept;
        self.timers_fired += other.timers_fired;
    }
}

/// Where a tick's shard sweeps send what they find for the sweeps that
/// run beside them ([`Engine::monitor_tick_within`]).
struct Found {
    /// Due activities, with the place of their shard in the tick's order.
    activities: mpsc::UnboundedSender<(u32, ActivityKey)>,
    /// Due workflows, likewise.
    workflows: mpsc::UnboundedSender<(u32, WorkflowKey)>,
    /// Activities due within the look-ahead, not yet.
    ahead: mpsc::UnboundedSender<ActivityKey>,
}

#[derive(Debug, Deserialize)]
struct WorkflowKey {
    workflow_exec_id: String,
    workflow_name: String,
    #[serde(default)]
    due_epoch: Option<i64>,
}

impl<L: Launcher> Engine<L> {
    /// One heartbeat monitor tick at `now` (epoch seconds), within
    /// [`MONITOR_TICK_BUDGET`] ([`Engine::monitor_tick_within`]).
    ///
    /// Errors: [`EngineError::Retry`] when an index cannot be queried.
    pub async fn monitor_tick(&self, now: i64) -> Result<MonitorReport, EngineError> {
        self.monitor_tick_within(now, MONITOR_TICK_BUDGET).await
    }

    /// One heartbeat monitor tick at `now` (epoch seconds) that starts no
    /// shard once `budget` (wall-clock time) is spent: the shards are
    /// read from [`first_shard`], which turns each minute, and their due
    /// items swept in that order, so a shard whose due items take a whole
    /// tick (a restart creating thousands of activities) delays the others
    /// by one tick at most, never for ever. The first shard is always
    /// swept. Each item found is swept beside the others (due activities
    /// and due workflows `concurrency` at once each, items due within the
    /// look-ahead at their second), never after another item's sweep: a
    /// settle or a workflow that asks a slow decider holds back no timer
    /// (issue 42 A.4 and C.2, simulation seeds 243, 265, 308 and 1220).
    /// Errors on one item are logged and counted, and the tick goes on
    /// with the others.
    ///
    /// Errors: [`EngineError::Retry`] when an index cannot be queried.
    #[tracing::instrument(skip(self))]
    pub async fn monitor_tick_within(
        &self,
        now: i64,
        budget: std::time::Duration,
    ) -> Result<MonitorReport, EngineError> {
        let started = std::time::Instant::now();
        let mut report = MonitorReport::default();
        let (ahead, later) = mpsc::unbounded();
        let (workflows, due_workflows) = mpsc::unbounded();
        let (activities, due_activities) = mpsc::unbounded();
        let found = Found {
            activities,
            workflows,
            ahead,
        };
        let (mut swept, mut oldest) = (0u64, 0i64);
        let mut count = |due: Option<i64>| {
            swept += 1;
            oldest = oldest.max(now - due.unwrap_or(now));
        };
        let first = first_shard(now);
        let shards = async {
            for i in 0..store::INDEX_SHARDS {
                if i > 0 && (started.elapsed() >= budget || super::budget::spent()) {
                    warn!(
                        shards_left = store::INDEX_SHARDS - i,
                        "heartbeat monitor: tick budget spent; the next tick starts elsewhere"
                    );
                    report.shards_left = u64::from(store::INDEX_SHARDS - i);
                    break;
                }
                let shard = (first + i) % store::INDEX_SHARDS;
                self.read_shard((i, shard), now, &mut count, &found).await?;
            }
            // What the shards found ends with their sweep.
            drop(found);
            Ok::<_, EngineError>(())
        };
        let mut of_due = MonitorReport::default();
        let (shards, (), of_workflows, of_ahead) = futures::join!(
            shards,
            self.sweep_activities(in_budget(due_activities, started, budget), now, &mut of_due),
            self.sweep_workflows(in_budget(due_workflows, started, budget), now),
            self.sweep_ahead(later)
        );
        shards?;
        for r in [of_due, of_workflows, of_ahead] {
            report.absorb(&r);
        }
        crate::metrics::swept(swept, oldest);
        report.swept = swept;
        Ok(report)
    }

    /// The activities a tick read as due within its look-ahead
    /// (`EngineConfig::monitor_lookahead_seconds`), each judged at its own
    /// second (design.md § 9): each sleeps to its due second
    /// ([`super::Environment::sleep_until`]) from when its shard is read,
    /// beside the shards' sweeps and the other items, and then sweeps it
    /// (at most `EngineConfig::concurrency` sweeps at once), so nothing
    /// slow elsewhere in the tick (a settle or a due workflow that asks a
    /// decider) holds a timer past its second (issue 42 C.2, simulation
    /// seeds 243 and 265). Each sweep reads its item again, so a marker
    /// moved or cleared meanwhile (a timer cancelled, a heartbeat) is
    /// judged as it now is. One that would sleep past the invocation's
    /// deadline is left due: the next tick, or its wake-up, judges it.
    async fn sweep_ahead(&self, later: mpsc::UnboundedReceiver<ActivityKey>) -> MonitorReport {
        let sweeping = tokio::sync::Semaphore::new(self.config.concurrency.max(1));
        let sweeping = &sweeping;
        let each: Vec<MonitorReport> = later
            .filter(|k| std::future::ready(!self.past_the_deadline_at(k.due_epoch.unwrap_or(0))))
            .map(|k| async move {
                let mut r = MonitorReport::default();
                self.env.sleep_until(k.due_epoch.unwrap_or(0)).await;
                let Ok(_turn) = sweeping.acquire().await else {
                    return r;
                };
                let now = self.now().epoch;
                self.sweep_activities(stream::iter([k]), now, &mut r).await;
                r
            })
            .buffer_unordered(usize::MAX)
            .collect()
            .await;
        let mut report = MonitorReport::default();
        each.iter().for_each(|r| report.absorb(r));
        report
    }

    /// Whether sleeping to `at` (epoch seconds, the engine's clock) would
    /// pass the invocation's deadline ([`super::budget`]).
    fn past_the_deadline_at(&self, at: i64) -> bool {
        if super::budget::spent() {
            return true;
        }
        super::budget::deadline().is_some_and(|d| {
            let wait = (at - self.now().epoch).max(0) as u64;
            std::time::Instant::now() + std::time::Duration::from_secs(wait) > d
        })
    }

    /// Judge the item a wake-up names at its second (design.md § 9): the
    /// timer queue's message came due (`DelaySeconds`); sleep out what is
    /// left of its due time ([`super::Environment::sleep_until`]), then
    /// sweep the item as a tick does. A due time more than
    /// [`MAX_WAKE_SLEEP_SECONDS`] ahead is left to the ticks (a wake-up
    /// the engine did not send).
    ///
    /// Errors: [`EngineError::Retry`] when the item cannot be read or
    /// written; the message is then a batch item failure, and comes back.
    pub async fn wake(&self, wake: &decide::WakeUp) -> Result<MonitorReport, EngineError> {
        let mut report = MonitorReport::default();
        let left = wake.due_epoch - self.now().epoch;
        if left > MAX_WAKE_SLEEP_SECONDS {
            warn!(activity_exec_id = %wake.activity_exec_id, due_epoch = wake.due_epoch, "wake-up too far ahead; left to the monitor's ticks");
            return Ok(report);
        }
        if left > 0 {
            self.env.sleep_until(wake.due_epoch).await;
        }
        let key = ActivityKey {
            activity_exec_id: wake.activity_exec_id.clone(),
            workflow_exec_id: wake.workflow_exec_id.clone(),
            due_epoch: Some(wake.due_epoch),
        };
        let now = self.now().epoch;
        match Box::pin(self.sweep_activity(&key, now, &mut report)).await {
            Err(e) if super::is_quarantined(&e) => report.quarantined += 1,
            r => r?,
        }
        Ok(report)
    }

    /// The due workflows and activities of one shard (the `i`th read this
    /// tick) and its activities due after `now` within the look-ahead, sent
    /// to `found` to be swept beside each other.
    async fn read_shard(
        &self,
        (i, shard): (u32, u32),
        now: i64,
        count: &mut impl FnMut(Option<i64>),
        found: &Found,
    ) -> Result<(), EngineError> {
        let t = self.store.tables().clone();
        let due = |until: i64| KeyCond {
            hash: (attr::DUE_SHARD.into(), n(shard)),
            range: Some((attr::DUE_EPOCH.into(), Cmp::Le, n(until))),
        };
        let workflows: Vec<WorkflowKey> = self
            .store
            .query(&t.workflow_exec(), Some(store::INDEX_DUE), due(now))
            .await?;
        workflows.iter().for_each(|k| count(k.due_epoch));
        let horizon = now.saturating_add(self.config.monitor_lookahead_seconds.max(0));
        let (later, activities): (Vec<ActivityKey>, Vec<ActivityKey>) = self
            .store
            .query(&t.activity_exec(), Some(store::INDEX_DUE), due(horizon))
            .await?
            .into_iter()
            .partition(|k: &ActivityKey| k.due_epoch.is_some_and(|d| d > now));
        activities.iter().for_each(|k| count(k.due_epoch));
        // The receivers live as long as the tick.
        (workflows.into_iter()).for_each(|k| drop(found.workflows.unbounded_send((i, k))));
        later
            .into_iter()
            .for_each(|k| drop(found.ahead.unbounded_send(k)));
        (activities.into_iter()).for_each(|k| drop(found.activities.unbounded_send((i, k))));
        Ok(())
    }

    /// The due workflows the shards find, `concurrency` at once, each its
    /// own sweep ([`Self::sweep_workflow`]) beside the shards' sweeps and
    /// each other, so an episodic execution's decider call holds back no
    /// other item (issue 42 A.4); those not started once the budget is
    /// spent are left due for the next tick.
    async fn sweep_workflows(
        &self,
        workflows: impl futures::Stream<Item = WorkflowKey>,
        now: i64,
    ) -> MonitorReport {
        let each: Vec<MonitorReport> = workflows
            .take_while(|_| std::future::ready(!super::budget::spent()))
            .map(|k| async move {
                let mut r = MonitorReport::default();
                self.sweep_workflow(&k, now, &mut r).await;
                r
            })
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        let mut report = MonitorReport::default();
        each.iter().for_each(|r| report.absorb(r));
        report
    }

    /// A due workflow: failed by its execution timeout, its end told to its
    /// parent, or started again.
    /// An error is logged and counted; the next tick tries again.
    async fn sweep_workflow(&self, k: &WorkflowKey, now: i64, report: &mut MonitorReport) {
        let r = async {
            let key = decide::workflow_key(&k.workflow_exec_id, &k.workflow_name);
            let wf: Option<WorkflowExec> = self
                .store
                .get(&self.store.tables().workflow_exec(), key)
                .await?;
            match wf {
                // A redrive that died before its claims were done
                // (design.md § 9.4).
                Some(wf) if wf.redriving.is_some() => {
                    let r = wf.redriving.clone().unwrap_or_default();
                    Box::pin(self.finish_redrive(wf, &r)).await?;
                    report.redrives_finished += 1;
                    Ok(false)
                }
                Some(wf) if self.expire_workflow(&wf, now).await? => {
                    report.workflows_timed_out += 1;
                    Ok(false)
                }
                // An episodic execution (design.md § 10.3): what its
                // decisions owe, or its close.
                Some(wf)
                    if wf.is_episodic() && wf.state == crate::contract::WorkflowState::Running =>
                {
                    Box::pin(self.resume_episodic(wf, now)).await
                }
                Some(wf) if wf.is_episodic() && wf.state.is_terminal() => {
                    Box::pin(self.finish_close(&wf)).await?;
                    Ok(false)
                }
                // Ended, and still owes its parent its end (design.md
                // § 9.5): a writer died before it told it.
                Some(wf) if wf.state.is_terminal() => {
                    self.tell_parent(&wf.workflow_exec_id, &wf.workflow_name)
                        .await?;
                    Ok(false)
                }
                Some(wf) => Box::pin(self.restart_workflow(wf, now)).await,
                None => Ok(false),
            }
        }
        .await;
        match r {
            Ok(true) => report.restarted += 1,
            Ok(false) => {}
            Err(e) => {
                warn!(workflow_exec_id = %k.workflow_exec_id, error = %e, "heartbeat monitor: will try again next tick");
                report.errors += 1;
            }
        }
    }

    /// Due activities (a stream: those a tick finds, in its shards' order). They are independent items, each
    /// handled with conditional writes: `concurrency` at once, as the
    /// handlers take a batch's items (a tick with thousands due, e.g. a
    /// wide fan-out's relaunches, would otherwise pass the timeout).
    async fn sweep_activities(
        &self,
        activities: impl futures::Stream<Item = ActivityKey>,
        now: i64,
        report: &mut MonitorReport,
    ) {
        let swept_each: Vec<(ActivityKey, MonitorReport, Result<(), EngineError>)> = activities
            // Left due for the next tick once the budget is spent.
            .take_while(|_| std::future::ready(!super::budget::spent()))
            .map(|k| async move {
                let mut r = MonitorReport::default();
                let res = Box::pin(self.sweep_activity(&k, now, &mut r)).await;
                (k, r, res)
            })
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        for (k, r, res) in swept_each {
            report.absorb(&r);
            if let Err(e) = res {
                if super::is_quarantined(&e) {
                    warn!(activity_exec_id = %k.activity_exec_id, error = %e, "heartbeat monitor: item quarantined, skipped");
                    crate::metrics::item_quarantined();
                    report.quarantined += 1;
                    continue;
                }
                warn!(activity_exec_id = %k.activity_exec_id, error = %e, "heartbeat monitor: will try again next tick");
                report.errors += 1;
            }
        }
    }
}

/// The items of `found` (each with the place of its shard in the tick's
/// order) that a tick started at `started` sweeps within `budget`: the
/// first shard's always, the others' while the budget lasts; the rest stay
/// due for the next tick, which starts at another shard.
fn in_budget<K>(
    found: mpsc::UnboundedReceiver<(u32, K)>,
    started: std::time::Instant,
    budget: std::time::Duration,
) -> impl futures::Stream<Item = K> {
    found
        .take_while(move |(i, _)| std::future::ready(*i == 0 || started.elapsed() < budget))
        .map(|(_, k)| k)
}
