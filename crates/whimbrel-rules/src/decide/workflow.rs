//! The pure rules of a workflow exec's start: what a request row must
//! hold, the exec it creates, and the write that ends the start.

use crate::attr;
use crate::config::EngineConfig;
use crate::contract::WorkflowState;
use crate::dates::Timestamp;
use crate::ids;
use crate::keys::{self, Tables};
use crate::model::{WorkflowExec, WorkflowRequest};
use crate::plan::{MAX_CHILD_DEPTH, MAX_NAME_LEN, MAX_WORKFLOW_INPUT_BYTES};
use crate::write::{av, n, s, Cond, UpdateRequest};

/// Bytes of a request's `source` (free text) an execution keeps, at most:
/// a longer one is cut and marked as reasons are ([`super::cap_text`]),
/// and its workflow still starts (docs/limits.md § 2).
pub const MAX_SOURCE_BYTES: usize = 1_024;

/// Whether a request row can start a workflow at all: a workflow name of
/// 1 to [`MAX_NAME_LEN`] bytes, and
/// a request id of the contract's form (contract: Full Logic API,
/// "Initiate a New Workflow"). `Ok(false)`: accepted, but the id is not
/// the recommended `(workflow_name)::(uuid)`.
///
/// A request id that has the form `(prefix)::(rest)` must have the row's
/// own workflow name as its prefix: a client's grant is scoped by the key's
/// prefix (`dynamodb:LeadingKeys` `orders::*`), so a row whose id says
/// `orders` may start, cancel or redrive only `orders` (issue 42 B.5). An
/// id with no `::` (an existing client's own form) is still accepted.
///
/// Errors: the reason the row is rejected.
pub fn check_request(req: &WorkflowRequest) -> Result<bool, String> {
    if req.workflow_name.trim().is_empty() {
        return Err("workflow_name is empty".into());
    }
    // docs/limits.md § 2: its execution id is a DynamoDB key (at most
    // 1,024 bytes as a sort key), so the name is bounded as node names are.
    let len = req.workflow_name.len();
    if len > MAX_NAME_LEN {
        return Err(format!(
            "workflow_name is {len} bytes; at most {MAX_NAME_LEN} are allowed"
        ));
    }
    let id = &req.workflow_request_id;
    let own = (id.strip_prefix(req.workflow_name.as_str()))
        .is_some_and(|rest| rest.starts_with(ids::SEPARATOR));
    if id.contains(ids::SEPARATOR) && !own {
        let name = &req.workflow_name;
        let sep = ids::SEPARATOR;
        return Err(format!(
            "workflow_request_id is not scoped to workflow_name {name:?}: {id:?} does not start with \"{name}{sep}\""
        ));
    }
    ids::check_id(
        attr::WORKFLOW_REQUEST_ID,
        attr::WORKFLOW_NAME,
        &req.workflow_request_id,
        &req.workflow_name,
    )
    .map_err(|e| e.to_string())
}

/// The workflow exec a request creates at `now` (REQUESTED, with a due
/// marker `start_retry_seconds` ahead so the monitor resumes a start that
/// dies), and the reason it must fail: its input is over
/// [`MAX_WORKFLOW_INPUT_BYTES`] (then the exec keeps no input), or it is a
/// child deeper than [`MAX_CHILD_DEPTH`] (design.md § 9.5).
pub fn requested_exec(
    req: &WorkflowRequest,
    now: Timestamp,
    cfg: &EngineConfig,
) -> (WorkflowExec, Option<String>) {
    let id = ids::workflow_exec_id(&req.workflow_name, &req.workflow_request_id);
    let input_size = req.input.as_ref().map_or(0, |v| v.to_string().len());
    let oversized = (input_size > MAX_WORKFLOW_INPUT_BYTES)
        .then(|| {
            format!("workflow input is {input_size} bytes; at most {MAX_WORKFLOW_INPUT_BYTES} bytes are allowed")
        })
        .or_else(|| (req.input.as_ref()).and_then(|v| crate::payloads::too_deep("workflow input", v)));
    let too_deep = req.parent.as_ref().filter(|p| p.depth > MAX_CHILD_DEPTH).map(|p| {
        format!(
            "child workflow depth {} exceeds the limit of {MAX_CHILD_DEPTH} (a workflow that starts itself?)",
            p.depth
        )
    });
    let exec = WorkflowExec {
        slots_used: None,
        redrive_count: None,
        redrives: vec![],
        redriving: None,
        decide_on: None,
        decider: None,
        continued_from: crate::decide::decided::continued_from(req.source.as_deref()),
        continued_as: None,
        due_shard: Some(keys::shard_of(&id)),
        workflow_exec_id: id,
        workflow_name: req.workflow_name.clone(),
        state: WorkflowState::Requested,
        workflow_request_id: Some(req.workflow_request_id.clone()),
        start_time: now.date_list(),
        start_time_epoch: now.epoch,
        end_time: None,
        end_time_epoch: None,
        input: req.input.clone().filter(|_| oversized.is_none()),
        planned_epoch: None,
        execution_timeout_seconds: None,
        activity_count: 0,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        error: None,
        source: (req.source.as_deref()).map(|t| super::cap_text(t, MAX_SOURCE_BYTES)),
        due_epoch: Some(now.epoch + cfg.start_retry_seconds),
        start_attempts: 0,
        result: None,
        result_in_activities: None,
        parent: req.parent.clone(),
    };
    (exec, oversized.or(too_deep))
}

/// `fresh` (REQUESTED, not yet put) carrying `why` in its `error`: an
/// execution created only to fail its start with that reason (a child
/// past its tree's budget, a parent link the engine did not write). The
/// reason is on the item from its creation, so a start that dies before
/// it fails the execution leaves the reason to the next
/// ([`start_refusal`]; issue 42 B.6).
pub fn failing_exec(fresh: &WorkflowExec, why: String) -> WorkflowExec {
    WorkflowExec {
        error: Some(why),
        ..fresh.clone()
    }
}

/// Why the start of `exec` must fail, as written on its creation
/// ([`failing_exec`]): the `error` of an exec still REQUESTED with no
/// plan stored. `None` otherwise.
pub fn start_refusal(exec: &WorkflowExec) -> Option<String> {
    let unplanned = exec.state == WorkflowState::Requested && exec.planned_epoch.is_none();
    exec.error.clone().filter(|_| unplanned)
}

/// When a workflow's execution timeout passes, epoch seconds (from the
/// time it was requested, plus the plan's `execution_timeout_seconds` as
/// copied onto the exec when the plan was recorded); `None` without one.
pub fn execution_deadline(wf: &WorkflowExec) -> Option<i64> {
    deadline_after(wf.start_time_epoch, wf.execution_timeout_seconds)
}

/// The execution deadline of a workflow requested at `start_epoch` with
/// an execution timeout of `timeout_seconds`, epoch seconds; `None`
/// without a timeout. The one rule [`execution_deadline`] and an
/// episode's due marker (`EpisodeState::deadline`) share.
pub fn deadline_after(start_epoch: i64, timeout_seconds: Option<i64>) -> Option<i64> {
    Some(start_epoch.saturating_add(timeout_seconds?))
}

/// The write that ends a start once the roots are claimed (every later
/// step has its own marker): the due marker becomes the execution
/// timeout's, or goes. Conditioned on RUNNING and the marker being there,
/// so it never touches an ended workflow.
pub fn started_update(tables: &Tables, wf: &WorkflowExec) -> UpdateRequest {
    let key = keys::workflow_key(&wf.workflow_exec_id, &wf.workflow_name);
    let done = UpdateRequest::new(tables.workflow_exec(), key)
        .when(Cond::exists(attr::DUE_EPOCH))
        .when(Cond::eq(attr::STATE, s(WorkflowState::Running.as_str())));
    match execution_deadline(wf) {
        Some(at) => done.set(attr::DUE_EPOCH, n(at)),
        None => done.remove(attr::DUE_EPOCH).remove(attr::DUE_SHARD),
    }
}

/// One move of a workflow exec's state (design.md § 3.1). Every write that
/// moves a workflow, its end included, is built by [`workflow_move`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowMove<'a> {
    /// The state the write requires (its condition).
    pub from: WorkflowState,
    /// The state it writes.
    pub to: WorkflowState,
    /// The reason kept in `error` (capped), if any.
    pub error: Option<&'a str>,
    /// When, for the end time of a terminal state.
    pub now: Timestamp,
    /// Also require that no plan is stored: a start storing its plan
    /// meanwhile wins (a cancel or give-up of a REQUESTED workflow).
    pub unplanned: bool,
    /// Keep (or set) the due marker, due at this epoch second, for work the
    /// end still owes (cancelling what did not end, a child's report to
    /// its parent); else an end clears it.
    pub owes_until: Option<i64>,
    /// The write is the effect of the decision that closed the execution
    /// ([`attr::CLOSED_BY_DECISION`]). Every other end of a RUNNING
    /// execution (its timeout, a cancel request, a failed decision) is
    /// conditioned on no decision having closed it: a closed execution has
    /// one end, that of the first write (issue 42 A.8, sim seed 4543).
    pub closing_decision: bool,
}

/// `req`, a workflow's finish decided on the end counters `counts` as
/// read (design.md § 3.3), only while they are still those: a redrive
/// sets them back to 0 with the state back to RUNNING, so a finish
/// decided on an earlier generation's counts cannot end the next one
/// (issue 42 A.3, torture seed 305792: a finish that read 5 CANCELLED
/// before a redrive ended the redriven execution CANCELLED, which then
/// counted a FAILED). A counter never written reads as 0.
pub fn finish_as_counted(req: UpdateRequest, counts: &crate::contract::EndCounts) -> UpdateRequest {
    let read = [
        (attr::COMPLETED_COUNT, counts.completed),
        (attr::FAILED_COUNT, counts.failed),
        (attr::CANCELLED_COUNT, counts.cancelled),
    ];
    read.into_iter().fold(req, |req, (a, v)| match v {
        0 => req.when(Cond::Or(vec![Cond::not_exists(a), Cond::eq(a, n(0))])),
        v => req.when(Cond::eq(a, n(v))),
    })
}

/// The conditional UpdateItem of `mv` on workflow exec (`id`, `name`):
/// conditioned on `state = from` (and no plan, when `unplanned`; and, for
/// an end of a RUNNING execution that is not its closing decision's
/// effect, no closing decision: [`WorkflowMove::closing_decision`]), so the
/// contract's check holds in the write itself, in every build.
///
/// Errors: the contract never allows `from → to` (design.md § 3.1).
pub fn workflow_move(
    tables: &Tables,
    id: &str,
    name: &str,
    mv: &WorkflowMove<'_>,
) -> Result<UpdateRequest, String> {
    if !mv.from.may_move_to(mv.to) {
        return Err(format!("a workflow never moves {} -> {}", mv.from, mv.to));
    }
    let mut req = UpdateRequest::new(tables.workflow_exec(), keys::workflow_key(id, name))
        .when(Cond::eq(attr::STATE, s(mv.from.as_str())))
        .set(attr::STATE, s(mv.to.as_str()));
    if mv.unplanned {
        req = req.when(Cond::not_exists(attr::PLANNED_EPOCH));
    }
    if mv.from == WorkflowState::Running && mv.to.is_terminal() && !mv.closing_decision {
        req = req.when(Cond::not_exists(attr::CLOSED_BY_DECISION));
    }
    if let Some(e) = mv.error {
        req = req.set(attr::ERROR, s(super::cap_error(e)));
    }
    if !mv.to.is_terminal() {
        return Ok(req);
    }
    req = req
        .set(attr::END_TIME, av(&mv.now.date_list()))
        .set(attr::END_TIME_EPOCH, n(mv.now.epoch));
    Ok(match mv.owes_until {
        Some(at) => req
            .set(attr::DUE_EPOCH, n(at))
            .set(attr::DUE_SHARD, n(keys::shard_of(id))),
        None => req.remove(attr::DUE_EPOCH).remove(attr::DUE_SHARD),
    })
}

impl<'a> WorkflowMove<'a> {
    /// `from → to` at `now`, with an optional reason; nothing else required
    /// or kept.
    pub fn new(
        from: WorkflowState,
        to: WorkflowState,
        now: Timestamp,
        error: Option<&'a str>,
    ) -> Self {
        WorkflowMove {
            from,
            to,
            error,
            now,
            unplanned: false,
            owes_until: None,
            closing_decision: false,
        }
    }
}
