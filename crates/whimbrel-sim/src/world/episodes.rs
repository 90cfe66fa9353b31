//! Episodic workflows in a schedule (design.md § 10): up to two workflow
//! names registered behind the episodic decider ([`crate::episodes`]),
//! each started once in the faulty phase, some more than once (two
//! executions of one name at the same time). Everything here draws from
//! the world's episode stream ([`crate::shared::Shared::episode_rng`]), so
//! a schedule with none draws everything else as it did.
//!
//! One schedule with episodes in two also registers an episodic child
//! workflow ([`EPISODIC_CHILD`]), which continues as new once or twice:
//! some child nodes of the plans start it, and the episodic deciders may
//! schedule it, so a parent's node waits on a chain (design.md § 9.5).
//! One episodic workflow in six sets an execution timeout of 2 to 30
//! minutes in its first answer. One start in three is signalled at once
//! ([`NUDGE`]), as a client that inserts a request and signals the new
//! execution does: the signal's record may come before the start's. Those draws come from the extra episode
//! stream ([`crate::shared::Shared::episode_extra_rng`]).

use rand::Rng;
use serde_json::json;
use whimbrel_core::ids;
use whimbrel_core::model::{SignalRow, WorkflowLambda};

use super::children::CHILD_WORKFLOWS;
use super::Sim;
use crate::episodes::EpisodeSpec;
use crate::shared::lock;

/// The episodic decider's function name.
pub(super) const EPISODIC_DECIDER: &str = "sim-episodes";

/// The episodic child workflow: a chain of two or three executions.
pub const EPISODIC_CHILD: &str = "epkid";

/// Share of the schedules with episodes that register [`EPISODIC_CHILD`].
const EPISODIC_CHILD_SHARE: f64 = 0.5;

/// Share of the top-level episodic deciders that schedule child nodes.
const DECIDERS_WITH_CHILDREN: f64 = 0.5;

/// The signal users send an episodic execution as they start it: no
/// decider waits for it, so it can only reach the decider as an event
/// (design.md § 10.2, "Signals before the first decision").
pub const NUDGE: &str = "nudge";

/// Share of the episodic starts signalled at once.
const NUDGED_SHARE: f64 = 1.0 / 3.0;

/// Share of the episodic workflows whose first answer sets an execution
/// timeout.
const TIMED_SHARE: f64 = 1.0 / 6.0;

/// The share of top-level episodic workflows that open a wide first
/// round ([`EpisodeSpec::wide`]).
const WIDE_SHARE: f64 = 1.0 / 40.0;

/// An execution timeout drawn from `r`: one workflow in six, 2 to 30
/// minutes.
fn execution_timeout(r: &mut rand_chacha::ChaCha8Rng) -> Option<i64> {
    r.gen_bool(TIMED_SHARE).then(|| r.gen_range(120..=1800))
}

impl Sim {
    fn episode_draw<T>(&self, f: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.world).episode_rng)
    }

    fn extra_draw<T>(&self, f: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.world).episode_extra_rng)
    }

    /// Whether a top-level episodic workflow opens a wide first round,
    /// and how wide (issue 42 C.1): one in forty; of those, one in three
    /// at 500 (a decided node's most dependents and prerequisites), the
    /// others 33 to 100 (wider than a static plan keeps on an item,
    /// `FAN_OUT_LIST_MAX`).
    fn wide_draw(&self) -> Option<usize> {
        let r = &mut lock(&self.world).wide_rng;
        let narrowest = whimbrel_core::plan::FAN_OUT_LIST_MAX + 1;
        r.gen_bool(WIDE_SHARE).then(|| match r.gen_bool(1.0 / 3.0) {
            true => whimbrel_core::decider::MAX_DECIDED_LINKS,
            false => r.gen_range(narrowest..=100),
        })
    }

    /// Register [`EPISODIC_CHILD`] in one schedule with episodes in two,
    /// its decider drawn from the extra episode stream: one or two rounds of one
    /// or two nodes, continuing as new once or twice, and perhaps starting
    /// the first of [`CHILD_WORKFLOWS`] as a child of its own. Before the
    /// plans are drawn, so their child nodes may start it.
    pub(super) fn set_up_episodic_child(&mut self) {
        if !self.params.episodes || !self.extra_draw(|r| r.gen_bool(EPISODIC_CHILD_SHARE)) {
            return;
        }
        let spec = self.extra_draw(|r| EpisodeSpec {
            rounds: r.gen_range(1..=2),
            width: r.gen_range(1..=2),
            continues: r.gen_range(1..=2),
            on_cancel: r.gen_bool(0.7),
            children: vec![CHILD_WORKFLOWS[0].to_string()],
            execution_timeout: execution_timeout(r),
            wide: None,
        });
        self.register_episodic(EPISODIC_CHILD, spec);
    }

    /// The child workflows a top-level episodic decider may start: none
    /// one time in two, else every registered one.
    fn decider_children(&self) -> Vec<String> {
        if !self.extra_draw(|r| r.gen_bool(DECIDERS_WITH_CHILDREN)) {
            return vec![];
        }
        let episodic = lock(&self.world).episodes.contains_key(EPISODIC_CHILD);
        let names = CHILD_WORKFLOWS.iter().copied();
        (names.chain(episodic.then_some(EPISODIC_CHILD)))
            .map(str::to_string)
            .collect()
    }

    /// Register workflow `name` behind the episodic decider, as `spec`.
    fn register_episodic(&mut self, name: &str, spec: EpisodeSpec) {
        self.log(format!("episodic workflow {name}: {spec:?}"));
        lock(&self.world).episodes.insert(name.to_string(), spec);
        self.require_tokens.insert(name.to_string(), false);
        let reg = WorkflowLambda {
            workflow_name: name.to_string(),
            lambda: Some(EPISODIC_DECIDER.into()),
            definition: None,
            allow: None,
        };
        self.put_raw(
            &self.tables.workflow_lambda(),
            serde_dynamo::to_item(&reg).expect("item"),
        );
    }

    /// Register this schedule's episodic workflows (none, one or two,
    /// `ep0` and `ep1`) and draw the steps they start at: each once in the
    /// first third of the faulty phase, one in three twice. Returns the
    /// starts, by step.
    pub(super) fn set_up_episodes(&mut self) -> Vec<(usize, String)> {
        if !self.params.episodes {
            return vec![];
        }
        let count = self.episode_draw(|r| r.gen_range(0..=2));
        let mut starts = vec![];
        for k in 0..count {
            let name = format!("ep{k}");
            let spec = EpisodeSpec {
                children: self.decider_children(),
                execution_timeout: self.extra_draw(execution_timeout),
                wide: self.wide_draw(),
                ..self.episode_draw(EpisodeSpec::draw)
            };
            self.register_episodic(&name, spec);
            let third = self.params.fault_steps.max(1) / 3 + 1;
            let times = self.episode_draw(|r| if r.gen_bool(0.3) { 2 } else { 1 });
            for _ in 0..times {
                starts.push((self.episode_draw(|r| r.gen_range(0..third)), name.clone()));
            }
        }
        starts.sort();
        starts
    }

    /// Start the episodic workflows whose step came (all of them when
    /// `step` is `None`).
    pub(super) fn start_due_episodes(
        &mut self,
        step: Option<usize>,
        starts: &mut Vec<(usize, String)>,
    ) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(starts)
            .into_iter()
            .partition(|(at, _)| step.is_none_or(|s| *at <= s));
        *starts = later;
        for (_, name) in due {
            let seed = self.episode_draw(|r| r.gen::<u64>());
            let request = self.put_start_request(name.clone(), seed);
            if self.extra_draw(|r| r.gen_bool(NUDGED_SHARE)) {
                let exec = ids::workflow_exec_id(&name, &request);
                let id = self.signals.new_id();
                let row = SignalRow::new(&exec, NUDGE, &id, Some(json!({"nudge": id})));
                self.send_signal_row(row, step.is_some());
            }
        }
    }
}
