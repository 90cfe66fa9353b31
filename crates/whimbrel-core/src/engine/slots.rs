//! Concurrency limits of a plan (design.md § 9.3): the claim that takes a
//! slot, the wait for one, and the give-back and hand-off when an
//! activity that held one ends. The writes are `decide::slots`'; this is
//! the executor's half. Every step is idempotent and conditioned, so the
//! settle that runs it may run again (its due marker) without leaking or
//! doubling a slot.

use serde::Deserialize;
use tracing::info;

use super::{decide, Engine, EngineError};
use crate::attr;
use crate::contract::ActivityState;
use crate::ids;
use crate::launcher::Launcher;
use crate::model::ActivityExec;
use crate::store::StoreError;

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
    /// No slot was free (or, for a waiter, its turn was taken).
    NoSlot,
}

impl<L: Launcher> Engine<L> {
    /// The claim `req` of `exec` (its queue write) with the workflow's
    /// slot taken in the same transaction (`waiter`: as a waiter handed a
    /// slot, out of `slot_waiters`). Returns the item queued, or why not.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn claim_with_slot(
        &self,
        exec: &ActivityExec,
        req: crate::store::UpdateRequest,
        limit: u32,
        waiter: bool,
    ) -> Result<Result<ActivityExec, Claimed>, EngineError> {
        let t = self.store.tables();
        let req = req.set(attr::SLOT_HELD, crate::store::Value::Bool(true));
        let take = decide::take_slot(t, exec, limit, waiter);
        match self
            .store
            .transact(vec![req.into_write(), take.into_write()])
            .await
        {
            Ok(()) => Ok(Ok(self.reload(exec).await?)),
            Err(StoreError::ConditionFailed) => {
                let now = self.reload(exec).await?;
                Ok(Err(if now.version == exec.version {
                    Claimed::NoSlot
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

    /// Join the workflow's waiters, unless a slot is free by now (then
    /// false: claim again).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn wait_for_slot(
        &self,
        exec: &ActivityExec,
        limit: u32,
    ) -> Result<bool, EngineError> {
        let req = decide::wait_for_slot(self.store.tables(), exec, limit);
        match self.store.update(req, false).await {
            Ok(_) => {
                info!(activity_exec_id = %exec.activity_exec_id, limit, "waiting for a slot");
                Ok(true)
            }
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The ended `exec`'s slot back (once), then free slots to the
    /// waiters in plan order: part of its settle.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable; the
    /// settle then runs again.
    pub(crate) async fn free_slot(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let Some(limit) = decide::slot_limit(exec) else {
            return Ok(());
        };
        if exec.links.slot_held {
            let (item, wf) = decide::give_back_slot(self.store.tables(), exec);
            match self
                .store
                .transact(vec![item.into_write(), wf.into_write()])
                .await
            {
                Ok(()) => crate::metrics::slot_freed(),
                // Given back already.
                Err(StoreError::ConditionFailed) => {}
                Err(StoreError::Conflict) => {
                    return Err(EngineError::Retry("slot give-back contended".into()))
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.hand_off_slots(exec, limit).await
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
            let ready = matches!(
                waiting.state,
                ActivityState::Requested | ActivityState::Ready
            ) && waiting.links.pending_dependency_count == 0;
            if !ready {
                self.store
                    .update(decide::drop_waiter(t, &waiting), false)
                    .await?;
                continue;
            }
            self.claim_waiter(waiting).await?;
        }
        Err(EngineError::Retry(format!(
            "{}: more than {MAX_HAND_OFFS} slot hand-offs",
            exec.workflow_exec_id
        )))
    }
}
