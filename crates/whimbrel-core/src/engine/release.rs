//! Releasing dependents (COMPLETED's side effect, design.md § 3.2):
//! lower each waiting activity's pending count exactly once per edge, and
//! claim and launch the first attempt of those that reach zero. A wide
//! join counts join groups (issue 7): each prerequisite's COMPLETED goes
//! into a small group item, and only a complete group releases the join,
//! so no write grows with the prerequisites and no item is hot.

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt};
use tracing::info;

use super::{decide, items};
use super::{decoded, Engine, EngineError};
use crate::contract::ActivityState;
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, JoinGroup, JoinSlot};
use crate::store::StoreError;

impl<L: Launcher> Engine<L> {
    /// Lower each dependent's pending count exactly once for this edge, and
    /// claim and launch those that reach zero. A wide join is released
    /// through its join group: the join itself only when the group is
    /// complete.
    pub(crate) async fn release_dependents(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let (dependents, slots) = self.dependents_of(exec).await?;
        let slots = &slots;
        let results: Vec<Result<(), EngineError>> = stream::iter(dependents.iter())
            .map(|dep| async move {
                let marker = match slots.get(dep) {
                    None => exec.activity_exec_id.clone(),
                    Some(slot) => match self.release_into_group(exec, dep, *slot).await? {
                        Some(marker) => marker,
                        None => return Ok(()),
                    },
                };
                self.release_edge(dep, &exec.workflow_exec_id, &marker)
                    .await
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// `exec`'s dependents (activity exec ids) and the join slots of the
    /// wide joins among them: its item's, or for a wide fan-out
    /// (`dependents_in_plan`) derived from the stored plan.
    ///
    /// Errors: [`EngineError::Retry`] if the plan cannot be read.
    pub(crate) async fn dependents_of(
        &self,
        exec: &ActivityExec,
    ) -> Result<(Vec<String>, BTreeMap<String, JoinSlot>), EngineError> {
        if exec.dependents_in_plan.is_none() {
            return Ok((exec.dependents.clone(), exec.join_slots.clone()));
        }
        let stored = self.plan_of(exec).await?;
        Ok(items::planned_dependents(
            &exec.workflow_exec_id,
            &stored.plan,
            &exec.activity_name,
            &self.config,
        ))
    }

    /// Release `marker` (a prerequisite's id, or a complete join group's
    /// marker) on the waiting activity `dep` once, and claim and launch it
    /// if that was the last.
    async fn release_edge(
        &self,
        dep: &str,
        workflow_exec_id: &str,
        marker: &str,
    ) -> Result<(), EngineError> {
        let req = decide::release_update(self.store.tables(), dep, workflow_exec_id, marker);
        let waiting: ActivityExec = match self.store.update(req, true).await {
            Ok(Some(item)) => decoded(dep, item)?,
            Ok(None) => return Err(EngineError::Retry(format!("{dep}: no item returned"))),
            // Released by this edge already (a redelivery, or a crash after
            // the release): resume from the item.
            Err(StoreError::ConditionFailed) => self.load_activity(dep, workflow_exec_id).await?,
            Err(e) => return Err(e.into()),
        };
        self.queue_and_launch(waiting).await
    }

    /// Release `exec`'s edge into its group of the wide join `join_id`
    /// (once: the group's set holds its name). Returns the group's marker
    /// once the group is complete, whoever completed it, so a caller that
    /// died after completing it finishes the join's release when it runs
    /// again; `None` while members are missing.
    async fn release_into_group(
        &self,
        exec: &ActivityExec,
        join_id: &str,
        slot: JoinSlot,
    ) -> Result<Option<String>, EngineError> {
        let t = self.store.tables();
        let req = decide::join_release_update(t, join_id, slot.group, &exec.activity_name);
        let group: JoinGroup = match self.store.update(req, true).await {
            Ok(Some(item)) => serde_dynamo::from_item(item)
                .map_err(|e| EngineError::Retry(format!("{join_id} group {}: {e}", slot.group)))?,
            Ok(None) => return Err(EngineError::Retry(format!("{join_id}: no group returned"))),
            Err(StoreError::ConditionFailed) => self
                .store
                .get(
                    &t.activity_exec_dependency(),
                    decide::join_group_key(join_id, slot.group),
                )
                .await?
                .ok_or_else(|| {
                    EngineError::Retry(format!("{join_id}: group {} vanished", slot.group))
                })?,
            Err(e) => return Err(e.into()),
        };
        Ok((group.released.len() >= slot.size as usize).then(|| ids::join_marker(slot.group)))
    }

    /// Claim the first attempt of an activity whose prerequisites all
    /// completed, and launch it if this call won the claim. An activity not
    /// ready, or claimed by someone else, is left alone.
    pub(crate) async fn queue_and_launch(&self, mut exec: ActivityExec) -> Result<(), EngineError> {
        loop {
            // Only a first claim: REQUESTED or READY with nothing pending.
            // Anything further along (QUEUED, PREPARING...) is someone
            // else's attempt.
            if !matches!(exec.state, ActivityState::Requested | ActivityState::Ready)
                || exec.pending_dependency_count > 0
            {
                return Ok(());
            }
            // A task-list activity is queued unclaimed: a worker claims it.
            let token = exec.task_list.is_none().then(|| self.env.new_token());
            let hash = token.as_deref().map(ids::token_hash);
            let now = self.now().epoch;
            let req = decide::queue_update(
                self.store.tables(),
                &self.config,
                &exec,
                hash.as_deref(),
                now,
            );
            match self.store.update(req, true).await {
                Ok(Some(item)) => {
                    let queued = decoded(&exec.activity_exec_id, item)?;
                    return match token {
                        Some(token) => self.launch(&queued, &token).await,
                        None => {
                            info!(activity_exec_id = %queued.activity_exec_id, task_list = ?queued.task_list, "activity queued for a worker");
                            Ok(())
                        }
                    };
                }
                Ok(None) => {
                    return Err(EngineError::Retry(format!(
                        "{}: no item returned",
                        exec.activity_exec_id
                    )))
                }
                // Someone else changed it (claimed it, cancelled it): look again.
                Err(StoreError::ConditionFailed) => {
                    exec = self
                        .load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
                        .await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}
