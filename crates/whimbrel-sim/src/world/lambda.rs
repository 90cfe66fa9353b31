//! The Lambda service as the world drives it: async invokes of activity
//! functions delivered late, twice or never, workers polling the task
//! list, and the EventBridge schedule that runs the heartbeat monitor.

use rand::Rng;
use std::sync::Arc;
use whimbrel_core::attr;
use whimbrel_core::model::ActivityExec;
use whimbrel_core::plan::LaunchPayload;

use super::{scenario, Clock, Sim};
use crate::actors;
use crate::shared::{lock, SimLauncher};

impl Sim {
    pub(super) fn deliver_invoke(&mut self) {
        let now = lock(&self.world).now;
        let ready: Vec<usize> = {
            let w = lock(&self.world);
            w.invokes
                .iter()
                .enumerate()
                .filter(|(_, i)| i.not_before <= now)
                .map(|(k, _)| k)
                .collect()
        };
        if ready.is_empty() {
            return;
        }
        let k = ready[self.rng(|r| r.gen_range(0..ready.len()))];
        let invoke = lock(&self.world).invokes.remove(k);
        let Ok(payload) = serde_json::from_value::<LaunchPayload>(invoke.payload) else {
            lock(&self.world)
                .violations
                .push("a launch payload does not parse".into());
            return;
        };
        let name = payload.workflow_name.clone();
        let require = self.require_tokens.get(&name).copied().unwrap_or(false);
        self.log(format!(
            "activity {} attempt {} starts",
            payload.activity_exec_id, payload.attempt
        ));
        let (inv, store, env) = self.invocation(true, Clock::Client, None);
        let world = self.world.clone();
        let reports = self.reports.clone();
        let launcher = SimLauncher {
            world: self.world.clone(),
            faulty: true,
        };
        let cfg = self.cfg.clone();
        self.exec.spawn(
            inv,
            actors::activity(
                actors::ActorCtx {
                    world,
                    store,
                    config: cfg,
                    env,
                    reports,
                    launcher,
                },
                payload,
                require,
                false,
            ),
        );
    }

    /// A worker process polls the task list once: claims the oldest task
    /// (a conditional write, racing other workers) and runs it like an
    /// activity (already RUNNING), on an invocation that may crash.
    pub(super) fn worker_poll(&mut self) {
        let n = self.rng(|r| r.gen_range(0..3));
        self.log(format!("worker w{n} polls"));
        let (inv, store, env) = self.invocation(true, Clock::Client, None);
        let world = self.world.clone();
        let reports = self.reports.clone();
        let cfg = self.cfg.clone();
        let require_tokens = self.require_tokens.clone();
        let launcher = SimLauncher {
            world: self.world.clone(),
            faulty: true,
        };
        let engine = whimbrel_core::engine::Engine::with_environment(
            store.clone(),
            (),
            cfg.clone(),
            env.clone(),
        );
        let worker = whimbrel_core::worker::Worker::new(
            engine,
            scenario::TASK_LIST,
            format!("w{n}"),
            whimbrel_core::worker::WorkerOptions::default(),
        );
        self.exec.spawn(inv, async move {
            let Ok(Some(task)) = worker.claim().await else {
                return;
            };
            let p = task.payload.clone();
            {
                let mut w = lock(&world);
                let token = p.attempt_token.clone().unwrap_or_default();
                w.record_claim(&p.activity_exec_id, p.attempt, p.launch, &token);
                let line = format!(
                    "worker w{n} claimed {} attempt {}",
                    p.activity_exec_id, p.attempt
                );
                w.trace.push(line);
            }
            let require = require_tokens
                .get(&p.workflow_name)
                .copied()
                .unwrap_or(false);
            let ctx = actors::ActorCtx {
                world,
                store,
                config: cfg,
                env,
                reports,
                launcher,
            };
            actors::activity(ctx, p, require, true).await;
        });
    }

    /// The EventBridge schedule (`rate(1 minute)`): each minute a tick
    /// runs the monitor, sometimes twice (EventBridge delivers at least
    /// once), unless the tick is missed ([`Sim::tick_missed`]).
    pub(super) fn scheduled_ticks(&mut self) {
        let now = lock(&self.world).now;
        if now < self.next_tick {
            return;
        }
        self.next_tick += 60;
        if self.tick_missed() {
            return;
        }
        self.monitor_tick();
        if self.rng(|r| r.gen_bool(0.05)) {
            self.monitor_tick();
        }
    }

    /// Whether this minute's tick never runs the monitor
    /// ([`crate::shared::Faults::missed_tick`]). The schedule invokes the
    /// monitor asynchronously; a throttled invoke waits in Lambda's queue
    /// and is dropped once older than the monitor's
    /// `MaximumEventAgeInSeconds` (60 s in `template.yaml`; "Configuring
    /// error handling for asynchronous invocation",
    /// <https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>).
    /// One missed tick in five starts a run of 1 to 9 more.
    fn tick_missed(&mut self) -> bool {
        let mut w = lock(&self.world);
        let missed = if self.ticks_to_skip > 0 {
            self.ticks_to_skip -= 1;
            true
        } else {
            let p = w.faults.missed_tick;
            let missed = w.chance(p);
            if missed && w.rng.gen_bool(0.2) {
                self.ticks_to_skip = w.rng.gen_range(1..10);
            }
            missed
        };
        if missed {
            w.exercise("monitor ticks missed");
            w.log("monitor tick missed".into());
        }
        missed
    }

    /// The timer queue's mapping: each wake-up SQS delivers now runs the
    /// monitor on its item ([`whimbrel_core::engine::Engine::wake`]), a
    /// monitor invocation of its own (design.md § 9).
    pub(super) fn deliver_wake_ups(&mut self) {
        let due: Vec<_> = {
            let mut w = lock(&self.world);
            let now = w.now;
            let (due, later) = std::mem::take(&mut w.wake_ups)
                .into_iter()
                .partition(|(at, _)| *at <= now);
            w.wake_ups = later;
            due
        };
        for (_, wake) in due {
            let (inv, engine) =
                self.engine(true, Clock::Engine, Some("whimbrel-heartbeat-monitor"));
            self.log(format!(
                "wake-up {} due {}",
                wake.activity_exec_id, wake.due_epoch
            ));
            self.exec.spawn(inv, async move {
                let _ = engine.wake(&wake).await;
            });
        }
    }

    /// One run of the monitor, at its own clock's time (as the handler
    /// reads the clock, not the event's time).
    pub(super) fn monitor_tick(&mut self) {
        let (inv, engine) = self.engine(true, Clock::Engine, Some("whimbrel-heartbeat-monitor"));
        self.log("monitor tick".into());
        let world = self.world.clone();
        self.exec.spawn(inv, async move {
            let now = engine.now().epoch;
            let done = engine.monitor_tick(now).await;
            lock(&world).log(format!("monitor tick at {now} ended: {done:?}"));
        });
    }

    /// Attempts failed NOT_STARTED since the last look while a launch of
    /// theirs was still in Lambda's async queue, to be delivered: the
    /// engine gave up on a launch that was only late (design.md § 3.9).
    pub(super) fn not_started_while_queued(&mut self, acts: &[Arc<ActivityExec>]) -> Vec<String> {
        let mut v = vec![];
        let w = lock(&self.world);
        for a in acts {
            for h in &a.trail.history {
                let id = h.full_event_id(&a.activity_exec_id);
                if !id.starts_with("not-started:") || !self.not_started.insert(id.clone()) {
                    continue;
                }
                let attempt = id.rsplit(':').next().and_then(|n| n.parse::<u64>().ok());
                let queued: Vec<i64> = w
                    .invokes
                    .iter()
                    .filter(|i| {
                        i.payload[attr::ACTIVITY_EXEC_ID] == a.activity_exec_id.as_str()
                            && i.payload[attr::ATTEMPT].as_u64() == attempt
                    })
                    .map(|i| i.not_before - w.now)
                    .collect();
                if !queued.is_empty() {
                    v.push(format!(
                        "{}: failed NOT_STARTED ({id}) with a launch still in Lambda's queue, \
                         delivered in {queued:?} s (maximum event age {} s)",
                        a.activity_exec_id, w.max_event_age
                    ));
                }
            }
        }
        v
    }
}
