//! The engine's claim of a task-list activity for a worker (issue 42 B.1,
//! docs/workers.md § 2.2): the claim function (`whimbrel-task-claim`)
//! runs it for workers, which hold no write to `activity_exec` beyond their
//! heartbeat; a Full Logic API process runs it in-process.
//!
//! One poll reads the oldest claimable tasks of each list's shards of the
//! sparse GSI `task_list_shard-task_queued_epoch-index`, re-reads each
//! candidate, claims the first still claimable with one conditional write
//! (QUEUED → RUNNING with a fresh attempt token:
//! [`decide::claim_task_update`]) and answers its launch payload, which
//! carries the token.

use serde::Deserialize;
use tracing::info;

use super::{decide, Engine, EngineError};
use crate::attr;
use crate::contract::ActivityState;
use crate::ids;
use crate::launcher::Launcher;
use crate::model::claim::{ClaimRequest, ClaimResponse, ClaimScope};
use crate::model::ActivityExec;
use crate::store::{self, n, s, Cmp, KeyCond, StoreError};

/// Candidates read per shard and poll (the oldest first).
pub const CLAIM_CANDIDATES: i32 = 5;

#[derive(Debug, Deserialize)]
struct TaskKey {
    activity_exec_id: String,
    workflow_exec_id: String,
    task_queued_epoch: i64,
}

impl<L: Launcher> Engine<L> {
    /// Claim the oldest claimable task (`task_queued_epoch` ≤ now) of
    /// `req.task_lists` for `req.worker`, trying the next candidate when
    /// another worker wins one. `task: None` when there is nothing to
    /// claim.
    ///
    /// Errors: [`EngineError::Rejected`] with the reason for a request
    /// [`ClaimRequest::check`] refuses under `scope`;
    /// [`EngineError::Retry`] when DynamoDB is unavailable.
    pub async fn claim_task(
        &self,
        req: &ClaimRequest,
        scope: &ClaimScope,
    ) -> Result<ClaimResponse, EngineError> {
        req.check(scope).map_err(EngineError::Rejected)?;
        let mut lost_claims = 0;
        for k in self.claim_candidates(&req.task_lists).await? {
            let store = self.store();
            let key = decide::activity_key(&k.activity_exec_id, &k.workflow_exec_id);
            let table = store.tables().activity_exec();
            let Some(exec) = store.get::<ActivityExec>(&table, key).await? else {
                continue;
            };
            if exec.state != ActivityState::Queued
                || exec.runner.task_list_shard.is_none()
                || exec.attempt.token_hash.is_some()
            {
                continue; // the index lags: claimed or cancelled already
            }
            let token = self.new_token();
            let update = decide::claim_task_update(
                store.tables(),
                self.config(),
                &exec,
                &ids::token_hash(&token),
                &req.worker,
                self.now().epoch,
            );
            match store.update_returning_new(update).await {
                Ok(Some(item)) => {
                    let claimed: ActivityExec = serde_dynamo::from_item(item)
                        .map_err(|e| EngineError::Retry(format!("{}: {e}", k.activity_exec_id)))?;
                    info!(activity_exec_id = %claimed.activity_exec_id, attempt = claimed.attempt.number, worker = %req.worker, "task claimed");
                    let payload = self.launch_payload(&claimed, &token).await?;
                    return Ok(ClaimResponse {
                        task: Some(payload),
                        lost_claims,
                    });
                }
                Ok(None) => {}
                Err(StoreError::ConditionFailed) => lost_claims += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(ClaimResponse {
            task: None,
            lost_claims,
        })
    }

    /// The oldest claimable tasks of every shard of `lists`, oldest first.
    async fn claim_candidates(&self, lists: &[String]) -> Result<Vec<TaskKey>, EngineError> {
        let store = self.store();
        let table = store.tables().activity_exec();
        let now = self.now().epoch;
        let mut found: Vec<TaskKey> = Vec::new();
        let shards =
            (lists.iter()).flat_map(|l| (0..decide::TASK_LIST_SHARDS).map(move |k| (l, k)));
        for (list, shard) in shards {
            let key = KeyCond {
                hash: (attr::TASK_LIST_SHARD.into(), s(format!("{list}#{shard}"))),
                range: Some((attr::TASK_QUEUED_EPOCH.into(), Cmp::Le, n(now))),
            };
            found.extend(
                store
                    .query_first::<TaskKey>(
                        &table,
                        Some(store::INDEX_TASK_LIST),
                        key,
                        CLAIM_CANDIDATES,
                    )
                    .await?,
            );
        }
        found.sort_by_key(|k| k.task_queued_epoch);
        Ok(found)
    }
}
