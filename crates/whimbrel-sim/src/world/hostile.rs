//! Hostile writes: what any holder of the activity role may write, aimed
//! at other activities. Rows of `activity_event` that are malformed,
//! forged or for no activity (each must be rejected with a reason), and
//! heartbeat writes to other activities' `activity_exec` items, as far as
//! the role's grant allows (the heartbeat attributes only, on any key:
//! template.yaml `HeartbeatWrite`). A heartbeat write must neither time
//! an activity out early nor hold it off for good (docs/design.md § 3.10).
//! And what any holder of the client role may write on
//! `whimbrel_workflow_request`: a start row with a parent link the engine
//! did not write, naming another tree's node and root (issue 42 B.6). It
//! starts an execution that fails at once with the reason, and counts on
//! no tree's budget (`check/children.rs`).

use std::collections::HashMap;

use futures::FutureExt;
use rand::Rng;
use whimbrel_core::attr;
use whimbrel_core::ids;
use whimbrel_core::model::{ParentLink, WorkflowRequest};
use whimbrel_core::store::{Action, Backend, Item, Value as AttributeValue};

use super::Sim;
use crate::shared::lock;

impl Sim {
    /// A hostile write: a new row on `activity_event` (3 in 7), an
    /// existing row overwritten, a heartbeat write on another activity's
    /// item (2 in 7), or a start row with a forged parent link.
    pub(super) fn hostile_write(&mut self) {
        match self.rng(|r| r.gen_range(0..7)) {
            0..=2 => self.hostile_row(),
            3 => self.hostile_overwrite(),
            4 => self.forged_parent_link(),
            _ => self.hostile_heartbeat(),
        }
    }

    /// A start row whose parent link names some node (of a child node,
    /// its child's workflow; else the node's own), at depth 1 or 2, and
    /// the tree root of some workflow, under a request id of its own: no
    /// node starts it, so its execution fails with the reason and counts
    /// on no tree (issue 42 B.6).
    fn forged_parent_link(&mut self) {
        let acts = crate::check::activities(&self.mem, &self.tables).0;
        let (pick, other, depth, seed) = self.rng(|r| {
            (
                r.gen::<usize>(),
                r.gen::<usize>(),
                r.gen_range(1..=2),
                r.gen::<u64>(),
            )
        });
        let (Some(node), Some(root)) = (
            acts.get(pick % acts.len().max(1)),
            acts.get(other % acts.len().max(1)),
        ) else {
            return;
        };
        let name = node
            .runner
            .runs
            .child()
            .map_or(&node.workflow_name, |c| &c.workflow_name);
        let row = WorkflowRequest {
            workflow_request_id: ids::derived_id(name, &format!("forged-parent-{seed}")),
            source: Some("sim hostile client".into()),
            parent: Some(ParentLink {
                workflow_exec_id: node.workflow_exec_id.clone(),
                workflow_name: node.workflow_name.clone(),
                activity_exec_id: node.activity_exec_id.clone(),
                depth,
                root: Some(root.workflow_exec_id.clone()),
            }),
            ..self.request(name.clone())
        };
        self.log(format!(
            "hostile client: start row {} with a forged parent link to {}",
            row.workflow_request_id, node.activity_exec_id
        ));
        lock(&self.world).exercise("start rows with forged parent links");
        let item = serde_dynamo::to_item(&row).expect("item");
        self.put_raw(&self.tables.workflow_request(), item);
    }

    /// A malformed, forged or ghost event row for some activity.
    fn hostile_row(&mut self) {
        let activities = self.checker.activity_ids(&self.mem, &self.tables);
        let (kind, seed, pick) =
            self.rng(|r| (r.gen_range(0..7), r.gen::<u64>(), r.gen::<usize>()));
        let target = activities
            .get(pick % activities.len().max(1))
            .cloned()
            .unwrap_or_else(|| "ghost::x".into());
        let id = ids::derived_id(&target, &format!("hostile{seed}"));
        let mut item: Item = HashMap::from([
            (
                attr::ACTIVITY_EVENT_ID.to_string(),
                AttributeValue::S(id.clone()),
            ),
            (
                attr::ACTIVITY_EXEC_ID.to_string(),
                AttributeValue::S(target.clone()),
            ),
            (
                attr::TRANSITION.to_string(),
                AttributeValue::S("COMPLETED".into()),
            ),
        ]);
        match kind {
            0 => drop(item.insert(attr::TRANSITION.into(), AttributeValue::S("DONE".into()))),
            1 => drop(item.insert(
                attr::TRANSITION.into(),
                AttributeValue::S("completed".into()),
            )),
            2 => drop(item.insert(attr::TRANSITION.into(), AttributeValue::N("3".into()))),
            3 => drop(item.remove(attr::TRANSITION)),
            4 => {
                let ghost = ids::derived_id("ghost", &seed.to_string());
                item.insert(attr::ACTIVITY_EXEC_ID.into(), AttributeValue::S(ghost));
            }
            5 => drop(item.insert(
                attr::ATTEMPT_TOKEN.into(),
                AttributeValue::S(format!("forged{seed}")),
            )),
            // Huge: a forged report with an output near DynamoDB's item
            // limit.
            _ => {
                item.insert(
                    attr::ATTEMPT_TOKEN.into(),
                    AttributeValue::S(format!("forged{seed}")),
                );
                let pad = "x".repeat(380 * 1024);
                item.insert(attr::OUTPUT.into(), AttributeValue::S(pad));
            }
        }
        self.log(format!("hostile row {id} kind {kind}"));
        self.mark_hostile(id);
        self.put_raw(&self.tables.activity_event(), item);
    }

    /// An existing event row overwritten (a PutItem on its id, as any
    /// holder of the activity role may make): its output changed and its
    /// token gone (the role may not read rows, so it cannot copy one).
    /// Only rows of workflows that require tokens: where they are not
    /// required, a tokenless row is a report, by the operator's choice.
    /// The stream carried the row as first written; a changed copy must
    /// never be applied, nor its output reach a dependent or the result.
    /// The report itself may be lost (when the stream did not apply it,
    /// the monitor and the redrive function read the row as it is now):
    /// the activity times out and retries, as if it had not reported. A
    /// real writer cannot aim at a report, whose id is random and which
    /// the activity role may not read (docs/design.md § 3.10).
    fn hostile_overwrite(&mut self) {
        let names: HashMap<String, String> = crate::check::activities(&self.mem, &self.tables)
            .0
            .into_iter()
            .map(|a| (a.activity_exec_id.clone(), a.workflow_name.clone()))
            .collect();
        let rows: Vec<Item> = self
            .mem
            .items(&self.tables.activity_event())
            .into_iter()
            .filter(|row| {
                let owner = match row.get(attr::ACTIVITY_EXEC_ID) {
                    Some(AttributeValue::S(id)) => names.get(id),
                    _ => None,
                };
                owner.is_some_and(|wf| self.require_tokens.get(wf) == Some(&true))
            })
            .collect();
        let (pick, seed) = self.rng(|r| (r.gen::<usize>(), r.gen::<u64>()));
        let Some(mut row) = rows.get(pick % rows.len().max(1)).cloned() else {
            return;
        };
        row.remove(attr::ATTEMPT_TOKEN);
        row.insert(
            attr::OUTPUT.into(),
            AttributeValue::S(format!("tampered {seed}")),
        );
        let Some(AttributeValue::S(id)) = row.get(attr::ACTIVITY_EVENT_ID).cloned() else {
            return;
        };
        self.log(format!("hostile overwrite of event row {id}"));
        let now = lock(&self.world).now;
        self.overwritten.entry(id).or_insert(now);
        lock(&self.world).exercise("event rows overwritten");
        let table = self.tables.activity_event();
        let _ = self.mem.put(table, row, None).now_or_never();
    }

    /// An UpdateItem of the heartbeat attributes of some activity, without
    /// the `heartbeat_enabled` condition an honest client sets: a time far
    /// behind or ahead, a value of the wrong type, a removal, or a stray
    /// item under the activity's hash key (another range key: UpdateItem
    /// creates it).
    fn hostile_heartbeat(&mut self) {
        let items = self.mem.items(&self.tables.activity_exec());
        let now = lock(&self.world).now;
        let (kind, pick, offset) = self.rng(|r| {
            (
                r.gen_range(0..5),
                r.gen::<usize>(),
                r.gen_range(-600..=600i64),
            )
        });
        let Some(target) = items.get(pick % items.len().max(1)) else {
            return;
        };
        let mut key: Item = [attr::ACTIVITY_EXEC_ID, attr::WORKFLOW_EXEC_ID]
            .into_iter()
            .filter_map(|k| target.get(k).map(|v| (k.to_string(), v.clone())))
            .collect::<HashMap<_, _>>();
        let epoch = attr::HEARTBEAT_TIME_EPOCH.to_string();
        let action = match kind {
            0 => Action::Set(epoch, AttributeValue::N((now + offset).to_string())),
            1 => Action::Set(epoch, AttributeValue::S("soon".into())),
            2 => Action::Remove(epoch),
            3 => Action::Set(
                attr::HEARTBEAT_TIME.into(),
                AttributeValue::S("not a date".into()),
            ),
            _ => {
                let stray = ids::derived_id("stray", &pick.to_string());
                key.insert(attr::WORKFLOW_EXEC_ID.into(), AttributeValue::S(stray));
                Action::Set(epoch, AttributeValue::N(now.to_string()))
            }
        };
        let id = key.get(attr::ACTIVITY_EXEC_ID).cloned();
        self.log(format!("hostile heartbeat write kind {kind} on {id:?}"));
        lock(&self.world).exercise("hostile heartbeat writes");
        let table = self.tables.activity_exec();
        let r = self.mem.update(table, key, vec![action], None, false);
        // The model answers at once; a refusal (an item too large) is fine.
        let _ = r.now_or_never();
    }
}
