//! Users who redrive workflows (design.md § 9.4), as `whimbrel redrive`
//! does: a row of `whimbrel_workflow_request` with
//! `redrive_workflow_exec_id`, inserted as every client row is, so that
//! its stream record goes the way of every request: delivered late or
//! twice, given up by the mapping and replayed by the stream-redrive
//! function, applied by invocations that die between writes or stall
//! (the monitor finishes a redrive left `redriving`). Now and then a
//! user, in the faulty phase:
//!
//! - redrives a workflow that ended FAILED or CANCELLED (a top-level one
//!   or a child), whether or not its activities have settled (the engine
//!   refuses it until they have);
//! - sends a request again with the same id, once its first row is gone
//!   (TTL deleted it, so the conditional put of `whimbrel redrive`
//!   succeeds again): a second INSERT of one request, at any later time,
//!   perhaps after the workflow ended again;
//! - redrives a workflow that is REQUESTED or RUNNING (refused, unless it
//!   ends FAILED or CANCELLED before the record is applied), or
//!   COMPLETED, or names one that does not exist or under another
//!   workflow's name: the engine must refuse these three with a reason
//!   ([`Sim::hostile`]).
//!
//! Everything here is drawn from the world's redrive stream
//! ([`crate::shared::Shared::redrive_rng`]): a schedule draws everything
//! else as it did until its first redrive request is written.

use rand::Rng;
use whimbrel_core::attr;
use whimbrel_core::contract::WorkflowState;
use whimbrel_core::handlers::Outcome;
use whimbrel_core::ids;
use whimbrel_core::model::{WorkflowExec, WorkflowRequest};

use super::Sim;
use crate::shared::lock;

/// Chance that a user redrives something at a step of the faulty phase
/// (about six requests in a schedule of 1,500 steps).
const SHARE: f64 = 0.004;

/// What users sent to redrive workflows.
#[derive(Debug, Default)]
pub(super) struct Redrives {
    /// Every row sent, in order, so a user may send one again.
    sent: Vec<WorkflowRequest>,
    /// Rows sent again with the same request id.
    again: u64,
    /// Rows the engine must refuse (a COMPLETED workflow, an unknown one).
    refusals: u64,
}

/// The kinds of request a user sends, by the share of a draw of 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A FAILED or CANCELLED workflow.
    Ended,
    /// A request sent before, with the same id.
    Again,
    /// A REQUESTED, RUNNING or COMPLETED workflow.
    NotEnded,
    /// A workflow exec that does not exist, or another workflow's name.
    Unknown,
}

impl Kind {
    fn of(draw: u32) -> Kind {
        match draw {
            0..=59 => Kind::Ended,
            60..=74 => Kind::Again,
            75..=91 => Kind::NotEnded,
            _ => Kind::Unknown,
        }
    }
}

impl Sim {
    /// Perhaps (see [`SHARE`]) a user sends a redrive request: see the
    /// module docs.
    pub(super) fn user_redrive(&mut self) {
        if !self.redrive_draw(|r| r.gen_bool(SHARE)) {
            return;
        }
        let (draw, pick) = self.redrive_draw(|r| (r.gen_range(0..100), r.gen::<usize>()));
        let wfs = self.workflow_execs();
        match Kind::of(draw) {
            Kind::Ended => {
                let ended = wfs.iter().filter(|w| redrivable(w.state)).collect();
                if let Some(w) = pick_of(ended, pick) {
                    self.send_redrive(&w.workflow_name, &w.workflow_exec_id, false);
                }
            }
            Kind::NotEnded => {
                let others = wfs.iter().filter(|w| !redrivable(w.state)).collect();
                if let Some(w) = pick_of(others, pick) {
                    let refused = w.state == WorkflowState::Completed;
                    self.send_redrive(&w.workflow_name, &w.workflow_exec_id, refused);
                }
            }
            Kind::Unknown => match pick_of(wfs.iter().collect(), pick) {
                Some(w) if pick % 2 == 0 => {
                    let other = if w.workflow_name == "wf0" {
                        "wf1"
                    } else {
                        "wf0"
                    };
                    self.send_redrive(other, &w.workflow_exec_id, true);
                }
                _ => {
                    let made_up = ids::workflow_exec_id("wf0", &format!("made-up-{pick}"));
                    self.send_redrive("wf0", &made_up, true);
                }
            },
            Kind::Again => self.send_redrive_again(pick),
        }
    }

    /// Draw from the world's redrive stream.
    fn redrive_draw<T>(&self, f: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.world).redrive_rng)
    }

    /// Every workflow exec item, read.
    fn workflow_execs(&self) -> Vec<WorkflowExec> {
        crate::check::workflows(&self.mem, &self.tables)
    }

    /// Insert a request of workflow `name` to redrive `exec`, with a new
    /// request id; `refused`: the engine must refuse it.
    fn send_redrive(&mut self, name: &str, exec: &str, refused: bool) {
        let n = self.redrives.sent.len();
        let row = WorkflowRequest {
            workflow_request_id: ids::derived_id(name, &format!("redrive-{n}")),
            redrive_workflow_exec_id: Some(exec.to_string()),
            source: Some("sim user".into()),
            ..self.request(name.to_string())
        };
        let id = row.workflow_request_id.clone();
        let must = if refused { " (must be refused)" } else { "" };
        self.log(format!("user requests the redrive of {exec}: {id}{must}"));
        if refused {
            self.mark_hostile(id);
            self.redrives.refusals += 1;
        }
        self.put_raw(
            &self.tables.workflow_request(),
            serde_dynamo::to_item(&row).expect("item"),
        );
        self.redrives.sent.push(row);
    }

    /// Send a request sent before again, with its request id, dated now:
    /// its first row is gone first (TTL's delete, as if it had expired:
    /// the row is marked expired at epoch 0, which no other row is, and
    /// only it is deleted), so the stream carries a second INSERT.
    fn send_redrive_again(&mut self, pick: usize) {
        let Some(first) = self
            .redrives
            .sent
            .get(pick % self.redrives.sent.len().max(1))
        else {
            return;
        };
        let first = first.clone();
        let table = self.tables.workflow_request();
        let expired = WorkflowRequest {
            expires_at_epoch: Some(0),
            ..first.clone()
        };
        self.put_raw(&table, serde_dynamo::to_item(&expired).expect("item"));
        self.mem.expire(&table, attr::EXPIRES_AT_EPOCH, 1);
        let row = WorkflowRequest {
            workflow_request_id: first.workflow_request_id.clone(),
            redrive_workflow_exec_id: first.redrive_workflow_exec_id.clone(),
            source: first.source.clone(),
            ..self.request(first.workflow_name.clone())
        };
        self.log(format!(
            "user sends redrive request {} again (of {:?})",
            row.workflow_request_id, row.redrive_workflow_exec_id
        ));
        self.put_raw(&table, serde_dynamo::to_item(&row).expect("item"));
        self.redrives.again += 1;
    }

    /// The counts of what users sent: redrive requests, those sent again
    /// with the same id, those the engine had to refuse, and those it
    /// refused (an outcome of their stream record or its replay).
    pub(super) fn redrive_counts(&self) -> [(&'static str, u64); 4] {
        let refused = self
            .redrives
            .sent
            .iter()
            .filter(|r| {
                self.outcomes
                    .get(&r.workflow_request_id)
                    .is_some_and(|o| o.iter().any(|o| matches!(o, Outcome::Rejected(_))))
            })
            .count();
        [
            ("redrive requests sent", self.redrives.sent.len() as u64),
            ("redrive requests sent again", self.redrives.again),
            ("redrive requests to refuse", self.redrives.refusals),
            ("redrive requests refused", refused as u64),
        ]
    }
}

/// The workflow of `list` that `pick` picks.
fn pick_of(list: Vec<&WorkflowExec>, pick: usize) -> Option<&WorkflowExec> {
    list.get(pick % list.len().max(1)).copied()
}

/// Whether a workflow in `state` may be redriven.
fn redrivable(state: WorkflowState) -> bool {
    matches!(state, WorkflowState::Failed | WorkflowState::Cancelled)
}
