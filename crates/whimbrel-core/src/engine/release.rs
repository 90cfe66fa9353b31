//! Releasing dependents (COMPLETED's side effect, design.md § 3.2):
//! lower each waiting activity's pending count exactly once per edge, and
//! claim and launch the first attempt of those that reach zero. A wide
//! join counts join groups: each prerequisite's COMPLETED goes
//! into a small group item, and only a complete group releases the join,
//! so no write grows with the prerequisites and no item is hot.

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt};
use tracing::info;

use super::slots::{Claimed, Handed};
use super::{decide, items};
use super::{decoded, Engine, EngineError};
use crate::contract::{ActivityState, NodeKind};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, GroupSlot, JoinGroup};
use crate::store::StoreError;

/// Dependents released between two records of the release's progress
/// (`released_through`): one write per chunk, and a resumed release
/// re-reads at most one chunk.
pub const RELEASE_CHUNK: usize = 256;

impl<L: Launcher> Engine<L> {
    /// Lower each dependent's pending count exactly once for this edge, and
    /// claim and launch those that reach zero. A wide join is released
    /// through its join group: the join itself only when the group is
    /// complete. Returns whether every dependent was released.
    ///
    /// Dependents go in chunks of [`RELEASE_CHUNK`], from the first not yet
    /// recorded as released (`released_through`); each chunk done is
    /// recorded. Once the invocation's budget is spent
    /// ([`super::budget::spent`]) no chunk is started, and the settle
    /// stays owed: the monitor resumes it where it stopped (a 10,000-wide
    /// fan-out's release ran past the function's timeout, was retried
    /// whole and blocked its stream shard: issue 42 A.9). Each edge is
    /// released once, whoever resumes it.
    pub(crate) async fn release_dependents(
        &self,
        exec: &ActivityExec,
    ) -> Result<bool, EngineError> {
        let (dependents, slots) = self.dependents_of(exec).await?;
        let from = exec.links.released_through.unwrap_or(0) as usize;
        for (i, chunk) in dependents.chunks(RELEASE_CHUNK).enumerate() {
            let end = (i * RELEASE_CHUNK + chunk.len()) as u64;
            if (end as usize) <= from {
                continue;
            }
            if super::budget::spent() {
                info!(activity_exec_id = %exec.activity_exec_id, released = i * RELEASE_CHUNK, of = dependents.len(), "budget spent: the rest of the release is owed to the monitor");
                self.hand_back_settle(exec).await?;
                return Ok(false);
            }
            self.release_chunk(exec, chunk, &slots).await?;
            if dependents.len() > RELEASE_CHUNK {
                let req = decide::released_through_update(self.store.tables(), exec, end);
                match self.store.update(req).await {
                    Ok(_) | Err(StoreError::ConditionFailed) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(true)
    }

    /// Whether settling `exec` releases more than one chunk of dependents
    /// (a wide fan-out's root): then a monitor takes it in hand first.
    pub(crate) fn releases_in_chunks(exec: &ActivityExec) -> bool {
        exec.state == ActivityState::Completed
            && (exec.links.dependents_in_plan.is_some()
                || exec.links.dependents.len() > RELEASE_CHUNK)
    }

    /// Take the owed settle of `exec` in hand before a monitor works on it,
    /// if it [`Self::releases_in_chunks`] (issue 42 A.9): its due marker
    /// moves to when this invocation has surely ended
    /// ([`super::budget::held_for`]), conditioned on the marker read, so
    /// the ticks that overlap this one leave it; if this invocation dies,
    /// the marker comes due again then. Returns false when another tick
    /// took it first. A short settle is not taken (a write more than
    /// doing it twice costs).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn take_settle_in_hand(
        &self,
        exec: &ActivityExec,
    ) -> Result<bool, EngineError> {
        if !Self::releases_in_chunks(exec) {
            return Ok(true);
        }
        let until = self.now().epoch + super::budget::held_for().as_secs() as i64;
        let req = decide::move_settle_due(self.store.tables(), exec, exec.timing.due_epoch, until);
        match self.store.update(req).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Hand the rest of a release cut by its budget back to the monitor:
    /// its due marker to now, so the next tick resumes it (the settle
    /// grace would otherwise hold every dependent not yet released).
    async fn hand_back_settle(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let now = self.now().epoch;
        let req = decide::move_settle_due(self.store.tables(), exec, None, now);
        match self.store.update(req).await {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Release `exec`'s edge to each of `dependents`, at most
    /// `EngineConfig::concurrency` at once.
    async fn release_chunk(
        &self,
        exec: &ActivityExec,
        dependents: &[String],
        slots: &BTreeMap<String, GroupSlot>,
    ) -> Result<(), EngineError> {
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
    ) -> Result<(Vec<String>, BTreeMap<String, GroupSlot>), EngineError> {
        if exec.links.dependents_in_plan.is_none() {
            return Ok((exec.links.dependents.clone(), exec.links.join_slots.clone()));
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
    /// if that was the last. Read first: the last release and the claim are
    /// one write ([`Engine::claim_first`]).
    pub(crate) async fn release_edge(
        &self,
        dep: &str,
        workflow_exec_id: &str,
        marker: &str,
    ) -> Result<(), EngineError> {
        let waiting = self.load_activity(dep, workflow_exec_id).await?;
        self.claim_first(waiting, Some(marker)).await
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
        slot: GroupSlot,
    ) -> Result<Option<String>, EngineError> {
        let t = self.store.tables();
        let req = decide::join_release_update(t, join_id, slot.group, &exec.activity_name);
        let group: JoinGroup = match self.store.update_returning_new(req).await {
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
    pub(crate) async fn queue_and_launch(&self, exec: ActivityExec) -> Result<(), EngineError> {
        self.claim_first(exec, None).await
    }

    /// Release `release` on `exec` (read) if it is not yet, then claim and
    /// launch its first attempt if nothing is pending. The last release and
    /// the claim are one conditional write
    /// ([`decide::release_and_queue_update`]); a release that is not the
    /// last (or of an activity that cannot be claimed, e.g. cancelled) is
    /// the blind per-edge update ([`decide::release_update`]). Either way an
    /// edge lowers the count once: both are conditioned on its marker.
    async fn claim_first(
        &self,
        mut exec: ActivityExec,
        mut release: Option<&str>,
    ) -> Result<(), EngineError> {
        loop {
            // Released already: resume from the item.
            release = release.filter(|m| !decide::release_counted(&exec, m));
            let claimable = matches!(exec.state, ActivityState::Requested | ActivityState::Ready);
            let pending = exec.links.pending_dependency_count - u64::from(release.is_some());
            if let Some(marker) = release.filter(|_| pending > 0 || !claimable) {
                exec = self.release_only(&exec, marker).await?;
                release = None;
                continue;
            }
            // Released already, by a call that may have died between its
            // RUNNING write and what a wait owes then (its read of the kept
            // signals, its child's request): the owed settle that brings us
            // here again does it.
            if pending == 0 && exec.state == ActivityState::Running {
                return self.begin_waiting(&exec, false).await;
            }
            // Only a first claim: REQUESTED or READY with nothing pending.
            // Anything further along (QUEUED, PREPARING...) is someone
            // else's attempt.
            if !claimable || pending > 0 {
                return Ok(());
            }
            match self.queue_first(&exec, release, None).await? {
                Claimed::Done => return Ok(()),
                Claimed::Again(read) => exec = *read,
                // No slot (design.md § 9.3): the edge is released on its
                // own, then the activity waits for a slot, unless one was
                // freed meanwhile (claim again).
                Claimed::NoSlot(limits) => match release.take() {
                    Some(marker) => exec = self.release_only(&exec, marker).await?,
                    None => {
                        if self.join_waiters(&exec, &limits, None).await? {
                            return Ok(());
                        }
                    }
                },
            }
        }
    }

    /// Claim a waiter its turn came for (design.md § 9.3), with the slot
    /// it is handed. A turn it cannot use (another limit of it has no slot
    /// free) moves it to that limit's waiters: joined there first, then
    /// out of `handed`'s, so no crash between loses it.
    pub(crate) async fn claim_waiter(
        &self,
        waiting: ActivityExec,
        handed: Handed,
    ) -> Result<(), EngineError> {
        if let Claimed::NoSlot(limits) = self.queue_first(&waiting, None, Some(&handed)).await? {
            if self.join_waiters(&waiting, &limits, Some(&handed)).await? {
                self.leave_waiters(&waiting, &handed).await?;
            }
        }
        Ok(())
    }

    /// The blind per-edge release of `marker` on `exec`; returns the item
    /// as it is after it.
    async fn release_only(
        &self,
        exec: &ActivityExec,
        marker: &str,
    ) -> Result<ActivityExec, EngineError> {
        let req = decide::release_update(
            self.store.tables(),
            &exec.activity_exec_id,
            &exec.workflow_exec_id,
            marker,
        );
        match self.store.update_returning_new(req).await {
            Ok(Some(item)) => decoded(&exec.activity_exec_id, item),
            Ok(None) => Err(no_item(exec)),
            Err(StoreError::ConditionFailed) => self.reload(exec).await,
            Err(e) => Err(e.into()),
        }
    }

    /// The first claim of `exec` (releasing `release` in the same write),
    /// under its concurrency limits if it has any (`handed`: handed a slot
    /// as a waiter), then its launch, or what a node that runs no code
    /// owes at its start.
    async fn queue_first(
        &self,
        exec: &ActivityExec,
        release: Option<&str>,
        handed: Option<&Handed>,
    ) -> Result<Claimed, EngineError> {
        // Only a Lambda's attempt is claimed here and invoked: a task-list
        // activity is queued unclaimed (a worker claims it), a timer starts
        // RUNNING (the monitor fires it), and so does a signal wait (a
        // signal completes it).
        let token = exec
            .runner
            .kind()
            .is_invoked()
            .then(|| self.env.new_token());
        let hash = token.as_deref().map(ids::token_hash);
        let now = self.now().epoch;
        let t = self.store.tables();
        let req = match release {
            Some(marker) => decide::release_and_queue_update(
                t,
                &self.config,
                exec,
                marker,
                hash.as_deref(),
                now,
            ),
            None => decide::queue_update(t, &self.config, exec, hash.as_deref(), now),
        };
        let limits = self.limits_of(exec).await?;
        let queued = match limits.any() {
            true => match self.claim_with_slots(exec, req, &limits, handed).await? {
                Ok(queued) => queued,
                Err(other) => return Ok(other),
            },
            false => match self.store.update_returning_new(req).await {
                Ok(Some(item)) => decoded(&exec.activity_exec_id, item)?,
                Ok(None) => return Err(no_item(exec)),
                // Someone else changed it (released it, claimed it,
                // cancelled it): look again.
                Err(StoreError::ConditionFailed) => {
                    return Ok(Claimed::Again(Box::new(self.reload(exec).await?)))
                }
                Err(e) => return Err(e.into()),
            },
        };
        match token {
            // A claim under a limit reads its item again after the
            // transaction; if a relaunch (or a later claim) replaced its
            // token meanwhile, that one launched: invoking now would give
            // the new launch's number to a second holder (seed 6202). One
            // cancelled or failed meanwhile keeps its token hash but owes
            // no launch either.
            Some(_)
                if queued.attempt.token_hash != hash || queued.state != ActivityState::Queued =>
            {
                info!(activity_exec_id = %queued.activity_exec_id, "claim replaced before its launch; not invoked")
            }
            Some(token) => self.launch(&queued, &token).await?,
            None => {
                info!(activity_exec_id = %queued.activity_exec_id, kind = ?queued.runner.kind(), state = %queued.state, due_epoch = ?queued.timing.due_epoch, "released: nothing to invoke");
                self.begin_waiting(&queued, true).await?;
            }
        }
        Ok(Claimed::Done)
    }

    /// What a node that runs no code owes once RUNNING, after the write
    /// that released it (or by the owed settle that finds it released): a
    /// signal wait reads the signals sent before it waited (design.md
    /// § 9.2), a child node requests its child (§ 9.5); with `wake`, a
    /// timer or a signal wait still waiting sends its wake-up (§ 9).
    async fn begin_waiting(&self, exec: &ActivityExec, wake: bool) -> Result<(), EngineError> {
        match exec.runner.kind() {
            NodeKind::Child => return self.start_child(exec).await,
            NodeKind::Signal if self.deliver_kept_signal(exec).await? => return Ok(()),
            _ => {}
        }
        if wake {
            self.send_wake_up(exec).await;
        }
        Ok(())
    }

    pub(crate) async fn reload(&self, exec: &ActivityExec) -> Result<ActivityExec, EngineError> {
        self.load_activity(&exec.activity_exec_id, &exec.workflow_exec_id)
            .await
    }
}

fn no_item(exec: &ActivityExec) -> EngineError {
    EngineError::Retry(format!("{}: no item returned", exec.activity_exec_id))
}
