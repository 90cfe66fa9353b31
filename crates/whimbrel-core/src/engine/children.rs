//! Child workflows (design.md § 9.5): a `workflow` node starts a workflow
//! and ends as it ends.
//!
//! * **Start.** Released to RUNNING, the node puts the child's request
//!   row (`Engine::start_child`): its id is derived from the node's
//!   activity exec id ([`ids::child_request_id`]), so a release run again
//!   finds the row and starts nothing more. The row carries the parent
//!   link (`parent`, with the child's depth); the workflow-request
//!   function starts it like any other, and copies the link onto the
//!   child's exec.
//! * **End.** Every write that ends a child keeps its due marker
//!   ([`whimbrel_rules::decide::WorkflowMove::owes_until`]) until the end reached the
//!   parent (`Engine::tell_parent`): the node COMPLETES with the child's
//!   result or FAILS with its reason, a decree with event id
//!   `child-ended:(node)`, so a repeated report changes nothing. The
//!   writer tells it at once; the monitor tells what a writer that died
//!   left owed.
//! * **Parent close.** A child node that is cancelled (the parent's
//!   cancel or execution timeout, or another activity's failure, which
//!   cancels the running child nodes at once: `Engine::cancel_children`)
//!   cancels its child with a cancel request row, unless its
//!   `parent_close` is `abandon` (`Engine::close_child`): then the
//!   child runs on.
//! * **Continue as new.** An episodic child that continues as new goes on
//!   as its chain: the continue's transaction moves the node to the next
//!   execution (`child_run`) and gives that one the parent link
//!   (`Engine::chain_link`); the continued execution reports nothing, and
//!   the chain's last end reaches the node. A node cancelled meanwhile
//!   (closing its child) ends the execution CANCELLED instead; one that
//!   no longer waits otherwise lets the chain go on unlinked.

use serde_json::Value;
use tracing::{info, warn};

use super::{Engine, EngineError};
use crate::attr;
use crate::contract::{ActivityState, NodeKind, Transition, WorkflowState};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, ParentLink, WorkflowExec, WorkflowRequest};
use crate::plan::{ParentClose, MAX_OUTPUT_BYTES};
use crate::store::{s, Cond, StoreError, UpdateRequest};
use whimbrel_rules::decide::{Details, Source};

impl<L: Launcher> Engine<L> {
    /// Start the child of the RUNNING `workflow` node `exec`: put its
    /// request row unless it is there, then take the child's end if it
    /// ended already. A row at the child's id that the engine did not
    /// write (another input or parent) fails the node. Called by the
    /// release after its RUNNING write, and by the owed settle or restart
    /// that finds the node released.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn start_child(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let Some(child) = exec.runner.runs.child() else {
            return Ok(());
        };
        if exec.state != ActivityState::Running {
            return Ok(());
        }
        let row = self.child_request(exec, child).await?;
        let t = self.store.tables();
        let created = self
            .store
            .put_new(&t.workflow_request(), attr::WORKFLOW_REQUEST_ID, &row)
            .await?;
        if created {
            info!(activity_exec_id = %exec.activity_exec_id, child = %row.workflow_request_id, "child workflow requested");
            crate::metrics::child_started();
        } else if let Some(why) = self.foreign_request(&row).await? {
            let event_id = ids::EngineStep::ChildEnded(&exec.activity_exec_id).event_id();
            let details = Details {
                error: Some(why),
                ..Details::default()
            };
            let (t, src) = (Transition::Failed, Source::Engine);
            self.decree(exec.clone(), t, src, &event_id, details)
                .await?;
            return Ok(());
        }
        // Its end may have come before the node waited (a row put by a
        // release that died, the child run meanwhile).
        let child_id = exec.current_child().unwrap_or_default();
        let ended: Option<WorkflowExec> = self
            .store
            .get(
                &t.workflow_exec(),
                self.workflow_key(&child_id, &row.workflow_name),
            )
            .await?;
        match ended {
            Some(wf) if wf.state.is_terminal() => self.report_to_parent(&wf).await,
            _ => Ok(()),
        }
    }

    /// The request row that starts the child of node `exec`.
    async fn child_request(
        &self,
        exec: &ActivityExec,
        child: &crate::model::ChildRunner,
    ) -> Result<WorkflowRequest, EngineError> {
        let now = self.now();
        let input = self.input_of(exec).await?;
        Ok(WorkflowRequest {
            redrive_workflow_exec_id: None,
            workflow_request_id: ids::child_request_id(
                &child.workflow_name,
                &exec.activity_exec_id,
                exec.generation(),
            ),
            workflow_name: child.workflow_name.clone(),
            when: Some(now.date_list()),
            when_epoch: Some(now.epoch as f64),
            source: Some(format!("child of {}", exec.workflow_exec_id)),
            manual: None,
            input: (input != Value::Null).then_some(input),
            expires_at_epoch: self.config.row_expiry(now.epoch),
            cancel_workflow_exec_id: None,
            reason: None,
            parent: Some(link_of(exec, child)),
        })
    }

    /// Why the parent link of `fresh` (a workflow exec about to be
    /// created) is not the engine's: it names no node that starts this
    /// execution ([`Self::node_of`]), or not as that node's release wrote
    /// it ([`link_of`]: the depth and the tree's root). `None` for a
    /// top-level workflow or a link that holds. A request row's parent
    /// link is the engine's to write; a client may write one on any row
    /// (issue 42 B.6), and only a link that holds counts on a tree.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn forged_link(
        &self,
        fresh: &WorkflowExec,
    ) -> Result<Option<String>, EngineError> {
        let Some(link) = &fresh.parent else {
            return Ok(None);
        };
        let node = self.node_of(fresh).await?;
        let holds = node
            .as_ref()
            .and_then(|n| Some(link_of(n, n.runner.runs.child()?)));
        if holds.as_ref() == Some(link) {
            return Ok(None);
        }
        Ok(Some(format!(
            "its parent link (node {} of {}, root {}) names no node that starts it as written; a parent link is the engine's to write",
            link.activity_exec_id,
            link.workflow_exec_id,
            link.tree_root()
        )))
    }

    /// Why the request row already at `row`'s key is not the engine's
    /// (its workflow input or parent differ), or `None` when it is.
    async fn foreign_request(&self, row: &WorkflowRequest) -> Result<Option<String>, EngineError> {
        let key = crate::keys::request_key(&row.workflow_request_id, &row.workflow_name);
        let there: Option<WorkflowRequest> = self
            .store
            .get(&self.store.tables().workflow_request(), key)
            .await?;
        Ok(match there {
            Some(r) if r.parent == row.parent && r.input == row.input => None,
            _ => Some(format!(
                "child request {} is taken by a row the engine did not write",
                row.workflow_request_id
            )),
        })
    }

    /// Report the ended `child` to its node: COMPLETED with the child's
    /// result, FAILED with its state and reason. Nothing when the node is
    /// gone, not this child's (a forged parent link, or an execution of
    /// its chain it no longer waits on), or ended already, nor for an
    /// execution that continued as new (its chain's last end is reported).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn report_to_parent(&self, child: &WorkflowExec) -> Result<(), EngineError> {
        let Some(p) = &child.parent else {
            return Ok(());
        };
        if child.continued_as.is_some() {
            // The chain goes on: its last execution's end is the child's.
            return Ok(());
        }
        let Some(node) = self.node_of(child).await? else {
            warn!(workflow_exec_id = %child.workflow_exec_id, parent = %p.activity_exec_id, "no node of the parent started this workflow; its end reaches no one");
            return Ok(());
        };
        if node.state != ActivityState::Running {
            return Ok(());
        }
        let event_id = ids::EngineStep::ChildEnded(&node.activity_exec_id).event_id();
        let (id, name) = (&child.workflow_exec_id, &child.workflow_name);
        // On the item in hand when it fits there; else gathered.
        let result = match (child.state, &child.result) {
            (WorkflowState::Completed, Some(r)) => Some(r.clone()),
            (WorkflowState::Completed, None) => self.workflow_result(id, name).await?,
            _ => None,
        };
        let (transition, mut details) = child_end(child, result);
        details.at = Some(self.now().epoch);
        whimbrel_rules::payloads::output_by_row(&mut details, &event_id);
        let reached = self
            .decree(node, transition, Source::Engine, &event_id, details)
            .await?;
        if reached.is_some() {
            info!(workflow_exec_id = %id, state = %child.state, parent = %p.activity_exec_id, "child workflow's end reached its node");
            crate::metrics::child_ended();
        }
        Ok(())
    }

    /// The node of its parent that waits on `child`: `None` for a
    /// top-level workflow, a node gone, or one that does not wait on this
    /// execution (a forged parent link, or an execution of its child's
    /// chain it waits on no more: [`ActivityExec::current_child`]).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    async fn node_of(&self, child: &WorkflowExec) -> Result<Option<ActivityExec>, EngineError> {
        let Some(p) = &child.parent else {
            return Ok(None);
        };
        let node: Option<ActivityExec> = self
            .store
            .get(
                &self.store.tables().activity_exec(),
                self.activity_key(&p.activity_exec_id, &p.workflow_exec_id),
            )
            .await?;
        Ok(node.filter(|n| started_by(n, &child.workflow_exec_id)))
    }

    /// Why the child `exec` (REQUESTED, not planned) must not start: its
    /// node ended before it did (cancelled with `parent_close: cancel`, so
    /// the node's cancel request may have come before the child existed,
    /// and been refused as for an unknown workflow). `None` for a
    /// top-level workflow, an abandoned child, or a node still waiting.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn orphaned(
        &self,
        exec: &WorkflowExec,
    ) -> Result<Option<String>, EngineError> {
        let node = self.node_of(exec).await?;
        Ok(node.filter(closed_child).map(|n| {
            format!(
                "its parent's node {} ended {} before it started",
                n.activity_name, n.state
            )
        }))
    }

    /// What the child execution `exec` continuing as new as `next` (a
    /// workflow exec id) does to its parent's node (design.md § 9.5).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn chain_link(
        &self,
        exec: &WorkflowExec,
        next: &str,
    ) -> Result<ChainLink, EngineError> {
        let Some(node) = self.node_of(exec).await? else {
            return Ok(ChainLink::Unlinked);
        };
        if node.state == ActivityState::Running {
            let t = self.store.tables();
            let moved = whimbrel_rules::decide::decided::child_run_move(t, &node, next);
            return Ok(ChainLink::Moves(moved));
        }
        if !closed_child(&node) {
            return Ok(ChainLink::Unlinked);
        }
        Ok(ChainLink::Closed(format!(
            "its parent's node {} ended {} before it continued as new",
            node.activity_name, node.state
        )))
    }

    /// What an ended workflow owes while its due marker stays: a child's
    /// report to its parent ([`Engine::report_to_parent`]); then the
    /// marker goes. Nothing for a workflow not ended or without a marker.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable (the
    /// marker stays: the monitor tells it later).
    pub(crate) async fn tell_parent(&self, id: &str, name: &str) -> Result<(), EngineError> {
        let wf = self.load_workflow(id, name).await?;
        if !wf.state.is_terminal() || wf.due_epoch.is_none() {
            return Ok(());
        }
        self.report_to_parent(&wf).await?;
        let done = UpdateRequest::new(
            self.store.tables().workflow_exec(),
            self.workflow_key(id, name),
        )
        .when(Cond::eq(attr::STATE, s(wf.state.as_str())))
        .remove(attr::DUE_EPOCH)
        .remove(attr::DUE_SHARD);
        match self.store.update(done).await {
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A cancelled child node's parent-close duty: a cancel request row
    /// for its child (`parent_close: cancel`, the default), put once (its
    /// id is derived from the child's). The workflow-request function
    /// cancels the child, or rejects the row when it ended or never
    /// started.
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn close_child(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        let Some(child) = exec.runner.runs.child() else {
            return Ok(());
        };
        if exec.state != ActivityState::Cancelled || child.parent_close == ParentClose::Abandon {
            return Ok(());
        }
        let child_id = exec.current_child().unwrap_or_default();
        let now = self.now();
        let row = WorkflowRequest {
            redrive_workflow_exec_id: None,
            workflow_request_id: ids::child_cancel_request_id(&child.workflow_name, &child_id),
            workflow_name: child.workflow_name.clone(),
            when: Some(now.date_list()),
            when_epoch: Some(now.epoch as f64),
            source: Some(format!("parent close of {}", exec.activity_exec_id)),
            manual: None,
            input: None,
            expires_at_epoch: self.config.row_expiry(now.epoch),
            cancel_workflow_exec_id: Some(child_id),
            reason: Some(format!(
                "its parent's node {} was cancelled",
                exec.activity_name
            )),
            parent: None,
        };
        let t = self.store.tables();
        if self
            .store
            .put_new(&t.workflow_request(), attr::WORKFLOW_REQUEST_ID, &row)
            .await?
        {
            info!(activity_exec_id = %exec.activity_exec_id, child = ?row.cancel_workflow_exec_id, "child workflow cancel requested");
        }
        Ok(())
    }

    /// An activity of `exec`'s workflow failed: the workflow closes its
    /// children at once, so it does not wait for children whose results
    /// no longer matter. Each child node not ended is cancelled, which
    /// cancels its child unless its `parent_close` is `abandon` (then the
    /// child runs on, its end reaching no one; [`Engine::close_child`]).
    /// Nothing for a plan without child nodes (its items do not say
    /// `closes_children`).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn cancel_children(&self, exec: &ActivityExec) -> Result<(), EngineError> {
        if !exec.state.is_failure() || !exec.links.closes_children {
            return Ok(());
        }
        let plan = self.plan_of(exec).await?;
        let wf = &exec.workflow_exec_id;
        let child = |a: &&crate::plan::PlannedActivity| a.kind() == NodeKind::Child;
        for a in plan.plan.activities.iter().filter(child) {
            let id = ids::activity_exec_id(wf, &a.name);
            let node = self.load_activity(&id, wf).await?;
            if node.state.is_terminal() {
                continue;
            }
            let event_id = ids::EngineStep::ParentFailing(&id).event_id();
            let details = Details {
                error: Some(format!("activity {} {}", exec.activity_name, exec.state)),
                ..Details::default()
            };
            self.decree(node, Transition::Cancel, Source::Engine, &event_id, details)
                .await?;
        }
        Ok(())
    }
}

/// The node's end for the ended `child` (with its result when
/// COMPLETED): COMPLETED with the result as its output, or FAILED with the
/// child's state and reason; FAILED too when the result is larger than a
/// node's output may be ([`MAX_OUTPUT_BYTES`]: it would be refused for
/// good, and the node would wait forever).
fn child_end(child: &WorkflowExec, result: Option<Value>) -> (Transition, Details) {
    let id = &child.workflow_exec_id;
    let size = result.as_ref().map_or(0, |r| r.to_string().len());
    let error = if size > MAX_OUTPUT_BYTES {
        format!("child workflow {id} COMPLETED, but its result is {size} bytes; a node's output holds at most {MAX_OUTPUT_BYTES}")
    } else if child.state == WorkflowState::Completed {
        let output = Some(result.unwrap_or(Value::Null));
        return (
            Transition::Completed,
            Details {
                output,
                ..Details::default()
            },
        );
    } else {
        let why = child.error.as_deref().unwrap_or("no reason given");
        format!("child workflow {id} ended {}: {why}", child.state)
    };
    let details = Details {
        error: Some(error),
        ..Details::default()
    };
    (Transition::Failed, details)
}

/// Whether `node` is a child node that waits on the workflow exec
/// `child_exec_id`: its child (its id derived from the node's), or the
/// execution its child's chain continued as ([`ActivityExec::current_child`]).
/// The parent link the child of node `exec` carries on its request row
/// and exec (design.md § 9.5): the node's ids, the child's depth and its
/// tree's root, as the node's release wrote them.
fn link_of(exec: &ActivityExec, child: &crate::model::ChildRunner) -> ParentLink {
    ParentLink {
        workflow_exec_id: exec.workflow_exec_id.clone(),
        workflow_name: exec.workflow_name.clone(),
        activity_exec_id: exec.activity_exec_id.clone(),
        depth: child.depth,
        root: child.root.clone(),
    }
}

fn started_by(node: &ActivityExec, child_exec_id: &str) -> bool {
    node.current_child().is_some_and(|id| id == child_exec_id)
}

/// Whether the child node `node` ended and closes its child
/// (`parent_close: cancel`): its child must not start, nor go on as new.
fn closed_child(node: &ActivityExec) -> bool {
    let closes = node.runner.runs.child();
    node.state.is_terminal() && closes.is_some_and(|c| c.parent_close == ParentClose::Cancel)
}

/// What a child execution continuing as new does to its parent's node
/// (design.md § 9.5; [`Engine::chain_link`]).
pub(crate) enum ChainLink {
    /// A top-level execution, or one whose node no longer waits on it
    /// (ended with `parent_close: abandon`, redriven, gone): the next
    /// execution goes without a parent link, its end reaching no one.
    Unlinked,
    /// Its node waits on it: this write, in the continue's transaction,
    /// makes it wait on the next execution, which keeps the parent link.
    Moves(UpdateRequest),
    /// Its node ended and closes its child (`parent_close: cancel`): the
    /// execution ends CANCELLED with this reason and starts no next one
    /// (a cancelled node's cancel request names this execution; a node
    /// that ended otherwise waits on no chain).
    Closed(String),
}
