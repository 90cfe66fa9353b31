//! Setting and removing a target's concurrency limit (design.md § 9.3,
//! `whimbrel limit`), part of the Full Logic API: the limit item's writes
//! are `decide::target_limits`'; raising a limit hands the freed slots to
//! the oldest waiters at once.

use super::{decide, ActivityKey, Engine, EngineError};
use crate::keys;
use crate::launcher::Launcher;
use crate::model::TargetLimit;
use crate::store::StoreError;
use decide::target_limits;

/// Tries of a limit change that loses its race with claims.
const MAX_TRIES: usize = 20;

impl<L: Launcher> Engine<L> {
    /// The limit of `target` (`lambda:f`, `task_list:l`, as
    /// [`target_limits::parse_target`] reads it), with its slots and
    /// waiters; `None` when it has none.
    ///
    /// Errors: [`EngineError::Rejected`] for a malformed target,
    /// [`EngineError::Retry`] when DynamoDB is unavailable.
    pub async fn target_limit(&self, target: &str) -> Result<Option<TargetLimit>, EngineError> {
        let target = parsed(target)?;
        let t = self.store.tables();
        let limit: Option<TargetLimit> =
            self.store.get(&t.limit(), keys::limit_key(&target)).await?;
        Ok(limit.filter(|l| l.max_concurrency.is_some()))
    }

    /// Set `target`'s limit to `max` (1..): at most `max` of its activities
    /// hold a slot at once, across workflows. A lowered limit takes no
    /// slot back (those held run on); a raised one hands its new slots to
    /// the oldest waiters. Every set, not only the first, then adopts the
    /// target's live attempts that hold no slot (`adopt_live`, issue 42
    /// A.7): the limit's write and the adoption are separate writes, so a
    /// setter that died between them left those uncounted, and setting
    /// the limit again (`whimbrel limit set`, repeated after its failure)
    /// finishes the adoption (C.4). Returns the limit as set.
    ///
    /// Errors: [`EngineError::Rejected`] for a malformed target or a `max`
    /// of 0, [`EngineError::Retry`] when DynamoDB is unavailable or the
    /// change kept losing its race with claims.
    pub async fn set_target_limit(
        &self,
        target: &str,
        max: u32,
    ) -> Result<TargetLimit, EngineError> {
        let target = parsed(target)?;
        if max == 0 {
            return Err(EngineError::Rejected(format!(
                "{target}: a limit must be at least 1 (remove it to lift it)"
            )));
        }
        let t = self.store.tables();
        for _ in 0..MAX_TRIES {
            let req = match self.target_limit(&target).await? {
                Some(TargetLimit {
                    max_concurrency: Some(old),
                    ..
                }) => target_limits::change_limit(t, &target, old, max),
                _ => target_limits::new_limit(t, &target, max),
            };
            match self.store.update(req).await {
                Ok(_) => {
                    self.adopt_live(&target).await?;
                    self.hand_off_target(&target).await?;
                    return self.target_limit(&target).await?.ok_or_else(|| {
                        EngineError::Retry(format!("{target}: removed while being set"))
                    });
                }
                Err(StoreError::ConditionFailed) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Retry(format!(
            "{target}: the limit kept changing"
        )))
    }

    /// Remove `target`'s limit, only while idle (no slot held, nobody
    /// waiting): its activities then claim without one. Returns false when
    /// it had none.
    ///
    /// Errors: [`EngineError::Rejected`] for a malformed target or a limit
    /// in use (the message says how much), [`EngineError::Retry`] when
    /// DynamoDB is unavailable.
    pub async fn remove_target_limit(&self, target: &str) -> Result<bool, EngineError> {
        let target = parsed(target)?;
        let Some(limit) = self.target_limit(&target).await? else {
            return Ok(false);
        };
        let max = limit.max_concurrency.unwrap_or_default();
        let req = target_limits::remove_limit(self.store.tables(), &target, max);
        match self.store.update(req).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Err(EngineError::Rejected(format!(
                "{target}: {} slots held and {} activities waiting; remove the limit when idle, or raise it",
                limit.slots_used(),
                limit.slot_waiters.len()
            ))),
            Err(e) => Err(e.into()),
        }
    }
}

impl<L: Launcher> Engine<L> {
    /// Adopt the live attempts of `target` that claimed before it had a
    /// limit ([`target_limits::adoptable`], [`target_limits::adopt_target_slot`];
    /// issue 42 A.7), found through the due index (every shard: a claimed
    /// or running attempt has a deadline) and, for a task list, its
    /// task-list index. Returns how many it adopted. An attempt that
    /// changes meanwhile is read again, a few times; one that ended, or
    /// took a slot by its own claim, is left.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn adopt_live(&self, target: &str) -> Result<u64, EngineError> {
        let mut adopted = 0;
        for key in self.live_candidates(target).await? {
            let mut exec =
                (self.load_activity(&key.activity_exec_id, &key.workflow_exec_id)).await?;
            for _ in 0..MAX_TRIES {
                let ours = target_limits::target_of(&exec).as_deref() == Some(target);
                if !ours || !target_limits::adoptable(&exec) {
                    break;
                }
                let (item, limit) =
                    target_limits::adopt_target_slot(self.store.tables(), &exec, target);
                match self
                    .store
                    .transact(vec![item.into_write(), limit.into_write()])
                    .await
                {
                    Ok(()) => {
                        adopted += 1;
                        break;
                    }
                    Err(StoreError::ConditionFailed | StoreError::Conflict) => {
                        exec = self.reload(&exec).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(adopted)
    }

    /// The keys of the activity items that may be live attempts of
    /// `target`: every item of the due index, and of the task list's
    /// shards for a task-list target.
    async fn live_candidates(&self, target: &str) -> Result<Vec<ActivityKey>, EngineError> {
        use crate::store::{n, s, KeyCond};
        let table = self.store.tables().activity_exec();
        let mut keys: Vec<(&str, KeyCond)> = (0..crate::store::INDEX_SHARDS)
            .map(|shard| {
                let hash = (crate::attr::DUE_SHARD.into(), n(shard));
                (crate::store::INDEX_DUE, KeyCond { hash, range: None })
            })
            .collect();
        if let Some(list) = target.strip_prefix("task_list:") {
            keys.extend((0..decide::TASK_LIST_SHARDS).map(|shard| {
                let hash = (
                    crate::attr::TASK_LIST_SHARD.into(),
                    s(format!("{list}#{shard}")),
                );
                (crate::store::INDEX_TASK_LIST, KeyCond { hash, range: None })
            }));
        }
        let mut found: Vec<ActivityKey> = vec![];
        for (index, key) in keys {
            found.extend(
                self.store
                    .query::<ActivityKey>(&table, Some(index), key)
                    .await?,
            );
        }
        found.sort_by(|a, b| a.activity_exec_id.cmp(&b.activity_exec_id));
        found.dedup_by(|a, b| a.activity_exec_id == b.activity_exec_id);
        Ok(found)
    }
}

fn parsed(target: &str) -> Result<String, EngineError> {
    target_limits::parse_target(target).ok_or_else(|| {
        EngineError::Rejected(format!(
            "{target:?} is not a target: write lambda:FUNCTION or task_list:NAME"
        ))
    })
}
