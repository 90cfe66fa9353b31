//! How a workflow ends: finished when its last activity ended (counted,
//! not scanned), with its result; or FAILED when its execution timeout
//! passes, with every activity not ended cancelled.

use crate::attr;
use futures::stream::{self, StreamExt};
use serde_json::{Map, Value};
use tracing::{info, warn};
use whimbrel_rules::keys::WorkflowRef;

use super::apply::Source;
use super::decide::{self, Details, WorkflowMove};
use super::{Engine, EngineError, WorkflowCounts};
use crate::contract::{self, ActivityState, Transition, WorkflowState};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, WorkflowExec};
use crate::plan::{Plan, MAX_RESULT_BYTES};
use crate::store::{av, s, Cond, StoreError, UpdateRequest};

/// Most sink activities whose outputs are gathered onto the workflow exec
/// as its result; with more, the result stays on the activities.
pub const MAX_RESULT_SINKS: usize = 100;

pub use super::decide::execution_deadline;

/// The names and exec ids of a plan's sink activities (those nothing
/// depends on): their outputs are the workflow's result.
pub fn sinks(workflow_exec_id: &str, plan: &Plan) -> Vec<(String, String)> {
    let dependents = plan.dependents();
    plan.activities
        .iter()
        .filter(|a| !dependents.contains_key(a.name.as_str()))
        .map(|a| {
            (
                a.name.clone(),
                ids::activity_exec_id(workflow_exec_id, &a.name),
            )
        })
        .collect()
}

impl<L: Launcher> Engine<L> {
    /// Finish the workflow if its last activity ended: counted, not scanned
    /// (design.md § 3.3). A COMPLETED workflow gets its result
    /// ([`Engine::workflow_result`]) in the same conditional write, on the
    /// item when it fits [`MAX_RESULT_BYTES`]. The write is conditional on
    /// RUNNING, so concurrent finishers agree and a redelivery changes
    /// nothing.
    #[tracing::instrument(skip(self))]
    pub(crate) async fn finish_workflow(&self, id: &str, name: &str) -> Result<(), EngineError> {
        let wf: WorkflowCounts = self
            .store
            .get_projected(
                &self.store.tables().workflow_exec(),
                self.workflow_key(id, name),
                &WorkflowCounts::ATTRIBUTES,
            )
            .await?
            .ok_or_else(|| EngineError::Retry(format!("workflow exec {id} not found")))?;
        if wf.state != WorkflowState::Running || wf.decide_on.is_some() {
            return Ok(());
        }
        let child = wf.parent.is_some();
        let counts = contract::EndCounts {
            completed: wf.completed_count,
            failed: wf.failed_count,
            cancelled: wf.cancelled_count,
        };
        let Some(outcome) = contract::workflow_outcome(wf.activity_count, counts) else {
            return Ok(());
        };
        // A child's end owes its parent a report (design.md § 9.5).
        let mv = WorkflowMove {
            owes_until: child.then_some(self.now().epoch),
            ..WorkflowMove::new(WorkflowState::Running, outcome, self.now(), None)
        };
        let plain = decide::workflow_move(self.store.tables(), id, name, &mv)
            .map_err(EngineError::Rejected)?;
        let plain = decide::finish_as_counted(plain, &counts);
        let mut req = plain.clone();
        if outcome == WorkflowState::Completed {
            let plan = self.load_plan(id, name).await?.map(|p| p.plan);
            let many = plan
                .as_ref()
                .is_some_and(|p| sinks(id, p).len() > MAX_RESULT_SINKS);
            // A wide fan-out's result is not read at all: it stays on the
            // activities (reading thousands of outputs to find it too big
            // would cost more than the workflow).
            let result = if many {
                Value::Null
            } else {
                self.sink_outputs(id, plan.as_ref()).await?
            };
            req = if !many && result.to_string().len() <= MAX_RESULT_BYTES {
                req.set(attr::RESULT, av(&result))
            } else {
                req.set(attr::RESULT_IN_ACTIVITIES, crate::store::Value::Bool(true))
            };
        }
        let moved = match self.store.update(req).await {
            Ok(_) => true,
            Err(StoreError::ConditionFailed) => false,
            // A result DynamoDB refuses for good (nested deeper than it
            // allows one level down on the item): it stays on the
            // activities, and the workflow still finishes.
            Err(e) if e.is_permanent() && outcome == WorkflowState::Completed => {
                warn!(workflow_exec_id = id, error = %e, "result not storable on the workflow; it stays on the activities");
                let req = plain.set(attr::RESULT_IN_ACTIVITIES, crate::store::Value::Bool(true));
                self.write_move(req).await?
            }
            Err(e) => return Err(e.into()),
        };
        if moved {
            crate::metrics::workflow_duration(self.now().epoch - wf.start_time_epoch);
            info!(workflow_exec_id = id, state = %outcome, "workflow finished");
        }
        if child {
            self.tell_parent(id, name).await?;
        }
        Ok(())
    }

    /// The outputs of the workflow's sink activities, by activity name.
    async fn sink_outputs(&self, id: &str, plan: Option<&Plan>) -> Result<Value, EngineError> {
        let Some(plan) = plan else {
            return Ok(Value::Object(Map::new()));
        };
        let keys = sinks(id, plan)
            .into_iter()
            .map(|(_, a)| self.activity_key(&a, id))
            .collect();
        let items: Vec<ActivityExec> = self
            .store
            .batch_get(&self.store.tables().activity_exec(), keys)
            .await?;
        Ok(Value::Object(
            self.outputs_of(items).await?.into_iter().collect(),
        ))
    }

    /// A COMPLETED workflow's result: the outputs of its sink activities
    /// (those nothing depends on) as `{"activity name": output}`, from the
    /// workflow exec, or from the activities when it was too large to
    /// store there. `Ok(None)` while it is not COMPLETED.
    ///
    /// Errors: [`EngineError::Retry`] for an unknown workflow exec.
    pub async fn workflow_result(
        &self,
        id: &str,
        name: &str,
    ) -> Result<Option<Value>, EngineError> {
        let wf = self.load_workflow(id, name).await?;
        if wf.state != WorkflowState::Completed {
            return Ok(None);
        }
        match wf.result.clone() {
            Some(r) => Ok(Some(r)),
            None => {
                let plan = self.load_plan(id, name).await?.map(|p| p.plan);
                self.sink_outputs(id, plan.as_ref()).await.map(Some)
            }
        }
    }

    /// The monitor's step for a workflow whose execution deadline passed:
    /// RUNNING → FAILED with the reason (keeping its due marker), then
    /// cancel every activity not ended, then clear the marker. A FAILED
    /// workflow still marked resumes the cancels. Returns whether it acted.
    #[tracing::instrument(skip_all, fields(workflow_exec_id = %wf.workflow_exec_id))]
    pub(crate) async fn expire_workflow(
        &self,
        wf: &WorkflowExec,
        now: i64,
    ) -> Result<bool, EngineError> {
        let Some(deadline) = execution_deadline(wf) else {
            return Ok(false);
        };
        if wf.state == WorkflowState::Running {
            if now < deadline {
                return Ok(false);
            }
            let reason = format!(
                "execution timeout: not finished within {}s (execution_timeout_seconds)",
                deadline - wf.start_time_epoch
            );
            warn!(workflow_exec_id = %wf.workflow_exec_id, %reason, "workflow timed out");
            let mv = WorkflowMove {
                owes_until: Some(now + self.config.settle_grace_seconds),
                ..WorkflowMove::new(
                    WorkflowState::Running,
                    WorkflowState::Failed,
                    crate::dates::Timestamp::from_epoch(now),
                    Some(&reason),
                )
            };
            let (id, name) = (&wf.workflow_exec_id, &wf.workflow_name);
            let req = decide::workflow_move(self.store.tables(), id, name, &mv)
                .map_err(EngineError::Rejected)?;
            if !self.write_move(req).await? {
                return Ok(false);
            }
        } else if wf.state != WorkflowState::Failed {
            return Ok(false);
        }
        let event_id = ids::EngineStep::ExecutionTimeout(&wf.workflow_exec_id).event_id();
        if wf.is_episodic() {
            // What its decisions opened but their effects did not put yet
            // (design.md § 10.9), so it is cancelled below.
            self.write_owed_nodes(wf).await?;
        }
        self.cancel_all(wf, &event_id, "workflow execution timeout")
            .await?;
        self.tell_parent(&wf.workflow_exec_id, &wf.workflow_name)
            .await?;
        let done = UpdateRequest::new(
            self.store.tables().workflow_exec(),
            self.workflow_key(&wf.workflow_exec_id, &wf.workflow_name),
        )
        .when(Cond::eq(attr::STATE, s(WorkflowState::Failed.as_str())))
        .remove(attr::DUE_EPOCH)
        .remove(attr::DUE_SHARD);
        self.write_move(done).await?;
        Ok(true)
    }

    /// Cancel every activity of the workflow that has not ended, as the
    /// engine (event id `event_id`, error `reason`): first those not
    /// claimed yet, then the others ([`Self::cancel_each`]).
    pub(crate) async fn cancel_all(
        &self,
        wf: &WorkflowExec,
        event_id: &str,
        reason: &str,
    ) -> Result<(), EngineError> {
        let names = self.node_names(wf).await?;
        let claimed = self
            .cancel_each(wf, &names, (event_id, reason), true)
            .await?;
        if wf.slots_used.is_some() {
            let key = WorkflowRef::new(&wf.workflow_exec_id, &wf.workflow_name);
            let drop = decide::drop_all_waiters(self.store.tables(), key);
            match self.store.update(drop).await {
                Ok(_) | Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.cancel_each(wf, &claimed, (event_id, reason), false)
            .await?;
        Ok(())
    }

    /// Cancel each node of `wf` in `names` that has not ended, as the
    /// engine (`step`: event id and error). With `unclaimed_only`, only
    /// those not claimed yet (REQUESTED or READY), and the names of the
    /// others are returned, to be cancelled after them: a node holding a
    /// slot, cancelled first, gives it back, and its hand-off would claim
    /// and launch a waiter the cancel had not reached yet (issue 42 D: a
    /// cancel of a plan under `max_concurrency` launched 575 of its 1,870
    /// waiting nodes, each then cancelled).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn cancel_each(
        &self,
        wf: &WorkflowExec,
        names: &[String],
        (event_id, reason): (&str, &str),
        unclaimed_only: bool,
    ) -> Result<Vec<String>, EngineError> {
        // Read 100 to a call: a cancel cut by its function's timeout and
        // run again pays little for the nodes it ended (issue 42 C.1).
        let nodes = self.nodes_named(&wf.workflow_exec_id, names.iter()).await?;
        let open = nodes.into_values().filter(|e| !e.state.is_terminal());
        let results: Vec<Result<Option<String>, EngineError>> = stream::iter(open)
            .map(|exec| async move {
                let claimed =
                    !matches!(exec.state, ActivityState::Requested | ActivityState::Ready);
                if unclaimed_only && claimed {
                    return Ok(Some(exec.activity_name.clone()));
                }
                let details = Details {
                    error: Some(reason.to_string()),
                    ..Details::default()
                };
                self.decree(exec, Transition::Cancel, Source::Engine, event_id, details)
                    .await
                    .map(|_| None)
            })
            .buffer_unordered(self.config.concurrency)
            .collect()
            .await;
        results.into_iter().filter_map(Result::transpose).collect()
    }

    /// The names of the nodes of `wf` that may not have ended: its plan's,
    /// or an episodic execution's open nodes (design.md § 10.4).
    async fn node_names(&self, wf: &WorkflowExec) -> Result<Vec<String>, EngineError> {
        let (id, name) = (&wf.workflow_exec_id, &wf.workflow_name);
        if wf.is_episodic() {
            return Ok(self
                .episode_state(WorkflowRef::new(id, name))
                .await?
                .open_nodes);
        }
        let plan = self.load_plan(id, name).await?.map(|p| p.plan);
        Ok(plan.map_or(vec![], |p| {
            p.activities.into_iter().map(|a| a.name).collect()
        }))
    }

    /// Move a workflow exec from `from` to `to` with a conditional write
    /// ([`WorkflowState::may_move_to`]), recording `error` and, for an end,
    /// the end time; an end also clears its due marker. Returns false if it
    /// was not in `from`.
    pub(crate) async fn move_workflow(
        &self,
        id: &str,
        name: &str,
        from: WorkflowState,
        to: WorkflowState,
        error: Option<&str>,
    ) -> Result<bool, EngineError> {
        self.write_move(self.move_request(id, name, from, to, error)?)
            .await
    }

    fn move_request(
        &self,
        id: &str,
        name: &str,
        from: WorkflowState,
        to: WorkflowState,
        error: Option<&str>,
    ) -> Result<UpdateRequest, EngineError> {
        let mv = WorkflowMove::new(from, to, self.now(), error);
        decide::workflow_move(self.store.tables(), id, name, &mv).map_err(EngineError::Rejected)
    }

    /// A conditional workflow write: false when its condition failed.
    pub(crate) async fn write_move(&self, req: UpdateRequest) -> Result<bool, EngineError> {
        match self.store.update(req).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
