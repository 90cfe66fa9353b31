//! Episodic workflows in a schedule (design.md § 10): up to two workflow
//! names registered behind the episodic decider ([`crate::episodes`]),
//! each started once in the faulty phase, some more than once (two
//! executions of one name at the same time). Everything here draws from
//! the world's episode stream ([`crate::shared::Shared::episode_rng`]), so
//! a schedule with none draws everything else as it did.

use rand::Rng;
use whimbrel_core::model::WorkflowLambda;

use super::Sim;
use crate::episodes::EpisodeSpec;
use crate::shared::lock;

/// The episodic decider's function name.
pub(super) const EPISODIC_DECIDER: &str = "sim-episodes";

impl Sim {
    fn episode_draw<T>(&self, f: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.world).episode_rng)
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
            let spec = self.episode_draw(EpisodeSpec::draw);
            self.log(format!("episodic workflow {name}: {spec:?}"));
            lock(&self.world).episodes.insert(name.clone(), spec);
            self.require_tokens.insert(name.clone(), false);
            let reg = WorkflowLambda {
                workflow_name: name.clone(),
                lambda: Some(EPISODIC_DECIDER.into()),
                definition: None,
            };
            self.put_raw(
                &self.tables.workflow_lambda(),
                serde_dynamo::to_item(&reg).expect("item"),
            );
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
            self.put_start_request(name, seed);
        }
    }
}
