//! The phases of one schedule after set-up: the disruptions drawn up
//! front, the faulty phase, the quiet phase that lets the clock run until
//! every workflow ends, and the end-of-run checks and statistics.

use std::collections::BTreeMap;

use rand::Rng;

use super::{Failure, Sim, Stats, LIVENESS_LIMIT, START};
use crate::check::Evidence;
use crate::shared::{lock, Faults};

/// What the faulty phase holds in store, drawn from the seed before it
/// starts.
pub(super) struct Disruptions {
    /// Workflows not started yet: (step to start at, workflow), by step.
    pending_starts: Vec<(usize, usize)>,
    /// The step an outage starts at (it ends 600 steps later), long enough
    /// for the mappings to give records up.
    outage: Option<usize>,
    /// A broken activity-event function: the step it breaks at, its shard
    /// and for how many seconds.
    poison: Option<(usize, usize, i64)>,
    /// An unreachable decider: the step it goes at and for how many
    /// seconds.
    decider_down: Option<(usize, i64)>,
    /// Episodic workflows not started yet: (step to start at, workflow
    /// name), by step (`episodes.rs`).
    pub(super) episodic_starts: Vec<(usize, String)>,
}

impl Sim {
    /// Draw the disruptions of the faulty phase, in this order: each
    /// workflow's start step, an outage, then a broken shard and an
    /// unreachable decider. Two workflows drawn for the same step keep the
    /// later one only (the map of starts is keyed by step).
    pub(super) fn draw_disruptions(&self) -> Disruptions {
        let starts: BTreeMap<usize, usize> = (0..self.params.workflows)
            .map(|w| {
                (
                    self.rng(|r| r.gen_range(0..self.params.fault_steps.max(1) / 3 + 1)),
                    w,
                )
            })
            .collect();
        let pending_starts: Vec<(usize, usize)> = starts.into_iter().collect();
        let outage = self.rng(|r| {
            r.gen_bool(0.2)
                .then(|| r.gen_range(0..self.params.fault_steps.max(1)))
        });
        // Breaking the activity-event function, or the decider, for long
        // enough that the mapping gives records up: nothing may wait on
        // redelivery.
        let (poison, decider_down) = self.rng(|r| {
            (
                (r.gen_bool(0.25)).then(|| {
                    (
                        r.gen_range(0..self.params.fault_steps.max(1)),
                        r.gen_range(2..4),
                        r.gen_range(1500..4000),
                    )
                }),
                (r.gen_bool(0.2)).then(|| {
                    (
                        r.gen_range(0..self.params.fault_steps.max(1)),
                        r.gen_range(1500..4000),
                    )
                }),
            )
        });
        Disruptions {
            pending_starts,
            outage,
            poison,
            decider_down,
            episodic_starts: vec![],
        }
    }

    /// Phase 1: `fault_steps` steps under faults, each starting the
    /// workflows due, perhaps a user's cancel or a hostile row, and one
    /// world action, with the safety invariants checked after it; then the
    /// workflows not started yet start.
    pub(super) fn faulty_phase(&mut self, d: &mut Disruptions) -> Result<(), Failure> {
        for step in 0..self.params.fault_steps {
            if self.params.fault_level > 0.0 {
                self.disrupt_at(step, d);
                self.break_signal_shards(step);
            }
            self.start_due_workflows(step, &mut d.pending_starts);
            self.start_due_episodes(Some(step), &mut d.episodic_starts);
            self.user_or_hostile_action();
            self.act();
            self.check_safety()?;
        }
        for (_, w) in std::mem::take(&mut d.pending_starts) {
            self.start_workflow(w);
        }
        self.start_due_episodes(None, &mut d.episodic_starts);
        Ok(())
    }

    /// Begin or end the disruptions drawn for `step`: a broken shard, an
    /// unreachable decider, an outage starting or ending.
    fn disrupt_at(&mut self, step: usize, d: &Disruptions) {
        let now = lock(&self.world).now;
        if let Some((_, shard, secs)) = d.poison.filter(|p| p.0 == step) {
            self.shards[shard].poisoned_until = now + secs;
            self.log(format!("shard {shard} broken for {secs}s"));
        }
        if let Some((_, secs)) = d.decider_down.filter(|p| p.0 == step) {
            lock(&self.world).decider_down_until = now + secs;
            self.log(format!("decider unreachable for {secs}s"));
        }
        match d.outage {
            Some(at) if step == at => {
                lock(&self.world).faults = self.fault_mix(Faults::outage());
                self.log("outage starts".into());
            }
            Some(at) if step == at + 600 => {
                lock(&self.world).faults = self.fault_mix(Faults::at(self.params.fault_level));
                self.log("outage ends".into());
            }
            _ => {}
        }
    }

    /// `faults` as this schedule's parameters allow them (clients' clocks
    /// off by minutes only when asked for).
    pub(super) fn fault_mix(&self, faults: Faults) -> Faults {
        Faults {
            client_skew: if self.params.client_clock_minutes {
                faults.client_skew
            } else {
                0.0
            },
            ..faults
        }
    }

    /// Start the workflows whose start step came, in step order.
    fn start_due_workflows(&mut self, step: usize, pending_starts: &mut Vec<(usize, usize)>) {
        pending_starts.retain(|&(at, w)| {
            if at <= step {
                self.start_workflow(w);
                false
            } else {
                true
            }
        });
    }

    /// One draw decides whether a user cancels a workflow (2 in 1000: a
    /// cancel request ends the whole workflow, so more would leave few to
    /// complete) or a hostile row arrives (5 in 1000), each when the
    /// schedule has them; then perhaps a user sends a signal, and perhaps
    /// one redrives a workflow (each drawn from its own stream:
    /// `signals.rs`, `workflow_redrive.rs`).
    fn user_or_hostile_action(&mut self) {
        let extra = self.rng(|r| r.gen_range(0..1000));
        if self.params.cancels && extra < 2 {
            self.user_cancel();
        }
        if self.params.hostile && (3..8).contains(&extra) {
            self.hostile_write();
        }
        self.user_signal();
        if self.params.redrives {
            self.user_redrive();
        }
        self.user_limit();
    }

    /// Phase 2: no more faults; time runs on (five seconds at a time when
    /// nothing is ready) until nothing is in flight and every workflow
    /// ended, or `LIVENESS_LIMIT` and three relaunch windows passed with
    /// no new launch of an attempt, with the safety invariants checked
    /// after every step. Each launch (a relaunch of an attempt whose
    /// activity died before running, which an honest activity still does
    /// once in twenty) moves that limit on, up to four of them in all: an
    /// episodic execution's rounds run one after another, and each may
    /// wait out a relaunch window (seed 1542: five 6-hour windows in turn).
    pub(super) fn quiet_phase(&mut self) -> Result<(), Failure> {
        lock(&self.world).faults = Faults::NONE;
        self.log("faults stop".into());
        // A run of missed ticks the faulty phase started stops with it.
        self.ticks_to_skip = 0;
        let now = lock(&self.world).now;
        self.checker.faults_stopped(now);
        let span = LIVENESS_LIMIT + 3 * self.cfg.relaunch_window_seconds();
        let start = lock(&self.world).now;
        let (mut limit, mut launches) = (start + span, lock(&self.world).claims.len());
        loop {
            let now = lock(&self.world).now;
            let launched = lock(&self.world).claims.len();
            if launched > launches {
                launches = launched;
                limit = (now + span).min(start + 4 * span);
            }
            if now > limit {
                break;
            }
            self.late_approval();
            if self.quiet() {
                // Every wait with no timeout is answered in the end.
                self.answer_waiting_signals();
            }
            if self.quiet() && self.checker.all_ended(&self.mem, &self.tables, &self.lost) {
                break;
            }
            self.act();
            if self.exec.ready_count() == 0 && self.quiet_enough() {
                let step = self.idle_step();
                self.advance(step);
            }
            self.check_safety()?;
        }
        Ok(())
    }

    /// How far the quiet phase's clock skips while nothing can run: 5 s,
    /// or less to the next thing due (a sleeping task's timer, a wake-up's
    /// delivery, the monitor's tick), so what is due at a second is not
    /// run up to 4 s late by the simulation's own step (issue 42 C.2).
    fn idle_step(&self) -> i64 {
        let w = lock(&self.world);
        let next = (w.timers.iter().map(|t| t.0))
            .chain(w.wake_ups.iter().map(|u| u.0))
            .chain([self.next_tick])
            .min()
            .unwrap_or(i64::MAX);
        next.saturating_sub(w.now).clamp(1, 5)
    }

    /// The end of the schedule: deliver what the streams still hold, check
    /// liveness with what the world saw, and gather the statistics.
    pub(super) fn finish(mut self) -> Result<Stats, Failure> {
        self.drain_streams();
        self.stats.sim_seconds = lock(&self.world).now - START;
        let reports = self.reports.lock().unwrap().clone();
        let seen = Evidence {
            reports: &reports,
            outcomes: &self.outcomes,
            lost: &self.lost,
            cancels: &self.cancels,
            gsi_stalls: &self.index_lag.stalls,
            overwritten: &self.overwritten,
        };
        let mut v = self
            .checker
            .liveness(&self.mem, &self.tables, &self.cfg, &seen);
        let specs = lock(&self.world).episodes.clone();
        let end = crate::check::episodes::EndOfRun {
            specs: &specs,
            cancels: &self.cancels,
        };
        v.extend(self.checker.episode_liveness(&self.mem, &self.tables, &end));
        self.record_end_stats();
        if v.is_empty() {
            Ok(self.stats)
        } else {
            Err(self.failure(v))
        }
    }

    /// What the ended schedule exercised: activities, requests the
    /// mappings gave up on before any exec, end states, features and
    /// relaunched attempts (claims of a launch after the first).
    fn record_end_stats(&mut self) {
        self.stats.activities = self.checker.activity_ids(&self.mem, &self.tables).len();
        let execs = self.checker.workflow_ids(&self.mem, &self.tables).len();
        let requests = crate::check::start_requests(&self.mem, &self.tables);
        self.stats.requests_given_up = requests.saturating_sub(execs) as u64;
        self.stats.ended = self.checker.ended_states(&self.mem, &self.tables);
        self.stats.features = self.checker.features(&self.mem, &self.tables);
        let applied = self.cancels.values().filter(|c| c.applied_at.is_some());
        self.stats
            .features
            .insert("cancel requests applied".into(), applied.count() as u64);
        for (k, n) in self.signal_counts() {
            self.stats.features.insert(k.into(), n);
        }
        for (k, n) in crate::check::episodes::episode_counts(&self.mem, &self.tables) {
            self.stats.features.insert(k.into(), n);
        }
        for (k, n) in self.redrive_counts() {
            self.stats.features.insert(k.into(), n);
        }
        let (steps, most) = self.running_over;
        let over = "steps with more instances running than a target's limit";
        self.stats.features.insert(over.into(), steps);
        let most_over = "most instances running past a target's limit";
        self.stats.features.insert(most_over.into(), most as u64);
        self.stats.faults = lock(&self.world)
            .exercised
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        self.stats.relaunches = lock(&self.world)
            .claims
            .keys()
            .filter(|(_, _, launch)| *launch > 1)
            .count() as u64;
    }
}
