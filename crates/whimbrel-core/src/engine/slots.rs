//! Concurrency limits (design.md § 9.3), of a plan (`max_concurrency`)
//! and of a Lambda function or task list across workflows
//! (`whimbrel_limit`): the claim that takes the slots, the wait for one,
//! and the give-back and hand-off when an activity that held one ends. The
//! writes are `decide::slots`' and `decide::target_limits`'; this is the
//! executor's half. Every step is idempotent and conditioned, so the
//! settle that runs it may run again (its due marker) without leaking or
//! doubling a slot. An activity waits in one waiter set at a time, or
//! briefly in two: it joins the other before it leaves the one that handed
//! it a slot it could not use, so no crash loses it.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use tracing::info;

use super::{decide, Engine, EngineError};
use crate::attr;
use crate::contract::ActivityState;
use crate::ids;
use crate::keys;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, TargetLimit};
use crate::store::{StoreError, Value};
use whimbrel_rules::decide::target_limits;

/// Hand-offs one settle makes before it leaves the rest to a retry.
const MAX_HAND_OFFS: usize = 1_000;

/// The slot attributes of a workflow exec.
#[derive(Debug, Default, Deserialize)]
struct SlotState {
    /// Slots held (`slots_used`), 0 when missing.
    #[serde(default)]
    slots_used: i64,
    /// Waiters, `(plan index)#(name)`, in plan order once sorted.
    #[serde(default, with = "serde_dynamo::string_set")]
    slot_waiters: Vec<String>,
}

/// What a claim under a limit came to.
pub(crate) enum Claimed {
    /// Queued (and launched, or started), or nothing left to do.
    Done,
    /// The item changed: decide again on this read.
    Again(Box<ActivityExec>),
    /// A slot was not free (or, for a waiter, its turn was taken), under
    /// these limits.
    NoSlot(Limits),
}

/// The limits an activity's first claim is made under.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limits {
    /// Its plan's `max_concurrency`.
    pub(crate) plan: Option<u32>,
    /// Its target (`lambda:f`, `task_list:l`), when `whimbrel_limit` holds
    /// a limit for it.
    pub(crate) target: Option<String>,
}

impl Limits {
    /// True when the claim takes any slot.
    pub(crate) fn any(&self) -> bool {
        self.plan.is_some() || self.target.is_some()
    }
}

/// The waiter set that handed an activity a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Handed {
    /// Its workflow's `slot_waiters` (plan order).
    Plan,
    /// Its target's `slot_waiters`: the entry it waited under.
    Target(String),
}

impl Handed {
    fn target_entry(handed: Option<&Handed>) -> Option<&str> {
        match handed {
            Some(Handed::Target(entry)) => Some(entry),
            _ => None,
        }
    }
}

/// A waiter still to be claimed: a first claim not yet made, with nothing
/// pending.
pub(crate) fn still_waiting(exec: &ActivityExec) -> bool {
    matches!(exec.state, ActivityState::Requested | ActivityState::Ready)
        && exec.links.pending_dependency_count == 0
}

impl<L: Launcher> Engine<L> {
    /// The limits `exec`'s first claim is made under: its plan's, and its
    /// target's when one is set (a read of `whimbrel_limit`, for an
    /// activity that runs code).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn limits_of(&self, exec: &ActivityExec) -> Result<Limits, EngineError> {
        let plan = decide::slot_limit(exec);
        let Some(target) = target_limits::target_of(exec) else {
            return Ok(Limits { plan, target: None });
        };
        let t = self.store.tables();
        let limit: Option<TargetLimit> = self
            .store
            .get_projected(
                &t.limit(),
                keys::limit_key(&target),
                &[attr::TARGET, attr::MAX_CONCURRENCY],
            )
            .await?;
        let target = limit.and_then(|l| l.max_concurrency).map(|_| target);
        Ok(Limits { plan, target })
    }

    /// The ids of `roots` whose first claim takes a slot: all of them
    /// under their plan's `max_concurrency`, else those whose target has a
    /// limit (one read of `whimbrel_limit` per distinct target). They must
    /// claim one at a time, in plan order (design.md § 9.3).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn slot_taking(
        &self,
        roots: &[&ActivityExec],
    ) -> Result<HashSet<String>, EngineError> {
        let mut limited: HashMap<String, bool> = HashMap::new();
        let mut taking = HashSet::new();
        for a in roots {
            let takes = match target_limits::target_of(a) {
                _ if decide::slot_limit(a).is_some() => true,
                None => false,
                Some(target) => match limited.get(&target) {
                    Some(known) => *known,
                    None => {
                        let known = self.limits_of(a).await?.target.is_some();
                        *limited.entry(target).or_insert(known)
                    }
                },
            };
            if takes {
                taking.insert(a.activity_exec_id.clone());
            }
        }
        Ok(taking)
    }

    /// The claim `req` of `exec` (its queue write) with its slots taken in
    /// the same transaction (`handed`: as a waiter handed a slot, out of
    /// that waiter set). Returns the item queued, or why not.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn claim_with_slots(
        &self,
        exec: &ActivityExec,
        mut req: crate::store::UpdateRequest,
        limits: &Limits,
        handed: Option<&Handed>,
    ) -> Result<Result<ActivityExec, Claimed>, EngineError> {
        let t = self.store.tables();
        let mut writes = vec![];
        if let Some(limit) = limits.plan {
            req = req.set(attr::SLOT_HELD, Value::Bool(true));
            let waiter = handed == Some(&Handed::Plan);
            writes.push(decide::take_slot(t, exec, limit, waiter).into_write());
        }
        if let Some(target) = &limits.target {
            req = req
                .set(attr::TARGET_LIMIT, crate::store::s(target))
                .set(attr::TARGET_SLOT_HELD, Value::Bool(true));
            let entry = Handed::target_entry(handed);
            writes.push(target_limits::take_target_slot(t, target, entry).into_write());
        }
        writes.insert(0, req.into_write());
        match self.store.transact(writes).await {
            Ok(()) => Ok(Ok(self.reload(exec).await?)),
            Err(StoreError::ConditionFailed) => {
                let now = self.reload(exec).await?;
                Ok(Err(if now.version == exec.version {
                    Claimed::NoSlot(limits.clone())
                } else {
                    Claimed::Again(Box::new(now))
                }))
            }
            Err(StoreError::Conflict) => {
                self.store.pause(20).await;
                Ok(Err(Claimed::Again(Box::new(self.reload(exec).await?))))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Join the waiters of a limit with no slot free (the plan's first),
    /// other than the set that handed it this turn (`skip`). False when
    /// every limit has a slot free by now: claim again.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable, or the
    /// target already keeps [`target_limits::MAX_TARGET_WAITERS`] waiting
    /// (the claim is then retried later).
    pub(crate) async fn join_waiters(
        &self,
        exec: &ActivityExec,
        limits: &Limits,
        skip: Option<&Handed>,
    ) -> Result<bool, EngineError> {
        let t = self.store.tables();
        if let Some(limit) = limits.plan.filter(|_| skip != Some(&Handed::Plan)) {
            let req = decide::wait_for_slot(t, exec, limit);
            if self.joined(req, exec, "plan").await? {
                return Ok(true);
            }
        }
        let skip_target = matches!(skip, Some(Handed::Target(_)));
        let Some(target) = limits.target.as_ref().filter(|_| !skip_target) else {
            return Ok(false);
        };
        let entry = target_limits::waiter_entry(exec, self.now().epoch);
        let req = target_limits::wait_for_target_slot(t, target, &entry);
        if self.joined(req, exec, target).await? {
            return Ok(true);
        }
        let limit: Option<TargetLimit> =
            self.store.get(&t.limit(), keys::limit_key(target)).await?;
        match limit {
            Some(l) if l.slots_free <= 0 && l.max_concurrency.is_some() => {
                Err(EngineError::Retry(format!(
                    "{target}: {} activities wait for a slot already; {} retried later",
                    l.slot_waiters.len(),
                    exec.activity_exec_id
                )))
            }
            _ => Ok(false),
        }
    }

    /// One conditional join of a waiter set: false when its condition
    /// failed.
    async fn joined(
        &self,
        req: crate::store::UpdateRequest,
        exec: &ActivityExec,
        limit: &str,
    ) -> Result<bool, EngineError> {
        match self.store.update(req).await {
            Ok(_) => {
                info!(activity_exec_id = %exec.activity_exec_id, limit, "waiting for a slot");
                Ok(true)
            }
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Leave the waiter set that handed `exec` a turn it could not use
    /// (after it joined another's).
    pub(crate) async fn leave_waiters(
        &self,
        exec: &ActivityExec,
        handed: &Handed,
    ) -> Result<(), EngineError> {
        let t = self.store.tables();
        let req = match handed {
            Handed::Plan => decide::drop_waiter(t, exec),
            Handed::Target(entry) => {
                let Some(target) = target_limits::target_of(exec) else {
                    return Ok(());
                };
                target_limits::drop_target_waiter(t, &target, entry)
            }
        };
        match self.store.update(req).await {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The ended `exec`'s slots back (once each), then free slots to the
    /// waiters: the plan's in plan order, the target's oldest first. Part
    /// of its settle.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable; the
    /// settle then runs again.
    pub(crate) async fn free_slot(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let t = self.store.tables();
        if let Some(limit) = decide::slot_limit(exec) {
            if exec.links.slot_held {
                let (item, wf) = decide::give_back_slot(t, exec);
                self.give_back(item, wf).await?;
            }
            self.hand_off_slots(exec, limit).await?;
        }
        if let Some(target) = &exec.links.target_limit {
            if exec.links.target_slot_held {
                if let Some((item, limit)) = target_limits::give_back_target_slot(t, exec) {
                    self.give_back(item, limit).await?;
                }
            }
            self.hand_off_target(target).await?;
        }
        Ok(())
    }

    /// One give-back transaction: the item's marker (once) and the count.
    async fn give_back(
        &self,
        item: crate::store::UpdateRequest,
        count: crate::store::UpdateRequest,
    ) -> Result<(), EngineError> {
        match self
            .store
            .transact(vec![item.into_write(), count.into_write()])
            .await
        {
            Ok(()) => {
                crate::metrics::slot_freed();
                Ok(())
            }
            // Given back already.
            Err(StoreError::ConditionFailed) => Ok(()),
            Err(StoreError::Conflict) => Err(EngineError::Retry("slot give-back contended".into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Claim waiters of `exec`'s workflow while slots are free, in plan
    /// order; a waiter that ended meanwhile leaves the list.
    async fn hand_off_slots(&self, exec: &ActivityExec, limit: u32) -> Result<(), EngineError> {
        let t = self.store.tables();
        for _ in 0..MAX_HAND_OFFS {
            let key = decide::workflow_key(&exec.workflow_exec_id, &exec.workflow_name);
            let state: SlotState = self
                .store
                .get_projected(
                    &t.workflow_exec(),
                    key,
                    &[attr::SLOTS_USED, attr::SLOT_WAITERS],
                )
                .await?
                .unwrap_or_default();
            let Some(first) = state.slot_waiters.iter().min() else {
                return Ok(());
            };
            if state.slots_used >= i64::from(limit) {
                return Ok(());
            }
            let id = ids::activity_exec_id(&exec.workflow_exec_id, decide::waiter_name(first));
            let waiting = self.load_activity(&id, &exec.workflow_exec_id).await?;
            if !still_waiting(&waiting) {
                self.store.update(decide::drop_waiter(t, &waiting)).await?;
                continue;
            }
            self.claim_waiter(waiting, Handed::Plan).await?;
        }
        Err(too_many_hand_offs(&exec.workflow_exec_id))
    }

    /// Claim waiters of `target` while it has slots free, oldest first; a
    /// waiter that ended (or whose item is gone) leaves the list.
    pub(crate) async fn hand_off_target(&self, target: &str) -> Result<(), EngineError> {
        let t = self.store.tables();
        for _ in 0..MAX_HAND_OFFS {
            let limit: Option<TargetLimit> =
                self.store.get(&t.limit(), keys::limit_key(target)).await?;
            let Some(limit) = limit.filter(|l| l.slots_free > 0) else {
                return Ok(());
            };
            let Some(first) = limit.slot_waiters.iter().min() else {
                return Ok(());
            };
            let waiting = match target_limits::waiter_of(first) {
                Some((wf, name)) => {
                    let id = ids::activity_exec_id(wf, name);
                    self.store
                        .get::<ActivityExec>(&t.activity_exec(), keys::activity_key(&id, wf))
                        .await?
                }
                None => None,
            };
            match waiting.filter(still_waiting) {
                Some(w) => self.claim_waiter(w, Handed::Target(first.clone())).await?,
                None => {
                    let req = target_limits::drop_target_waiter(t, target, first);
                    self.store.update(req).await?;
                }
            }
        }
        Err(too_many_hand_offs(target))
    }
}

fn too_many_hand_offs(of: &str) -> EngineError {
    EngineError::Retry(format!("{of}: more than {MAX_HAND_OFFS} slot hand-offs"))
}
