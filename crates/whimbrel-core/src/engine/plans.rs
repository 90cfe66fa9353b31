//! The write-once plan on `whimbrel_workflow_plan` (design.md § 3.7): one
//! item when the plan and input fit, else a head item and parts (a
//! 10,000-activity plan is about 650 KB; DynamoDB's item limit is 400 KB).
//!
//! Parts hold the activity list in slices of at most
//! [`PlanParting::part_max`] serialized (by default [`PLAN_PART_BYTES`]),
//! keyed by the digest of the whole list
//! and that budget ([`ids::plan_part_key`]). They are put first, each conditionally (a
//! part that exists has the same content: same digest, same slice); the
//! head, which names the digest and the part count, is put last and is the
//! commit point: the first head put wins, as the single item did. Parts
//! of a losing plan (a nondeterministic decider, two concurrent starts)
//! are never named by a head, so never read. Readers get the plan through
//! [`load`] ([`Engine::load_plan`]), which puts the parts together again.
//! A release older than the parts reads a parted head as a plan without
//! activities; only plans too large for it before are parted. An input
//! too large for the activity item is kept once, on its input row, and
//! the stored plan names it (`PlannedActivity::input_ref`); a release
//! older than that cannot read such a plan (it retries), which is why
//! template.yaml updates the workflow-request function last.

use crate::attr;
use crate::store::Value as AttributeValue;
use futures::stream::{self, StreamExt, TryStreamExt};

use super::decide;
use super::PlanParting;
use super::{Engine, EngineError};
use crate::ids;
use crate::launcher::Launcher;
use crate::model::{ActivityExec, PlanParts, WorkflowExec, WorkflowPlan, WorkflowPlanPart};
#[cfg(doc)]
use crate::plan::PLAN_PART_BYTES;
use crate::plan::{Plan, PlannedActivity};
use crate::store::size::{item_size, value_size, MAX_ITEM_BYTES};
use crate::store::{s, Item, Store, StoreError};

/// `activities` in consecutive slices of at most `max` bytes each, an
/// activity counted at the larger of its JSON size and its size in a
/// DynamoDB item (a list of small numbers takes more there: 3 bytes per
/// `0` against 2 in JSON); a single larger activity gets a slice of its
/// own (`Plan::validate` refuses one over [`PLAN_PART_BYTES`]). Pure.
pub fn slices(activities: &[PlannedActivity], max: usize) -> Vec<&[PlannedActivity]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, a) in activities.iter().enumerate() {
        let json = serde_json::to_string(a).map_or(0, |s| s.len());
        let item = serde_dynamo::to_attribute_value::<_, AttributeValue>(a)
            .map_or(usize::MAX / 4, |v| value_size(&v));
        let n = json.max(item) + 1;
        if i > start && size + n > max {
            out.push(&activities[start..i]);
            (start, size) = (i, 0);
        }
        size += n;
    }
    if start < activities.len() {
        out.push(&activities[start..]);
    }
    out
}

/// The items that store `item`: itself when it fits one item of at most
/// `parting.whole_max` bytes (and DynamoDB's limit), else a head
/// (activities moved out, [`WorkflowPlan::parts`] set) and its parts of
/// at most `parting.part_max` bytes of activities each. Pure.
///
/// Errors: a head or part DynamoDB cannot store, with the reason.
pub fn split(
    item: &WorkflowPlan,
    parting: PlanParting,
) -> Result<(WorkflowPlan, Vec<WorkflowPlanPart>), String> {
    if size_of(item) <= parting.whole_max.min(MAX_ITEM_BYTES) {
        return Ok((item.clone(), vec![]));
    }
    // The slicing budget is part of the digest: a start resumed by a
    // release with another budget writes its parts under other keys, never
    // over a half-written set sliced differently.
    let mut all = format!("{}:", parting.part_max).into_bytes();
    serde_json::to_writer(&mut all, &item.plan.activities).map_err(|e| e.to_string())?;
    let digest = ids::plan_digest(&all);
    let parts: Vec<WorkflowPlanPart> = slices(&item.plan.activities, parting.part_max)
        .into_iter()
        .enumerate()
        .map(|(k, acts)| WorkflowPlanPart {
            workflow_exec_id: ids::plan_part_key(&item.workflow_exec_id, &digest, k as u32),
            workflow_name: item.workflow_name.clone(),
            part: k as u32,
            activities: acts.to_vec(),
        })
        .collect();
    let head = WorkflowPlan {
        plan: Plan {
            activities: vec![],
            ..item.plan.clone()
        },
        episodic: item.episodic.clone(),
        parts: Some(PlanParts {
            digest,
            count: parts.len() as u32,
        }),
        ..item.clone()
    };
    for size in std::iter::once(size_of(&head)).chain(parts.iter().map(size_of)) {
        if size > MAX_ITEM_BYTES {
            return Err(format!(
                "the plan and input make a {size}-byte item; DynamoDB stores at most {MAX_ITEM_BYTES}"
            ));
        }
    }
    Ok((head, parts))
}

fn size_of<T: serde::Serialize>(v: &T) -> usize {
    serde_dynamo::to_item::<_, Item>(v)
        .map(|i| item_size(&i))
        .unwrap_or(usize::MAX)
}

/// The plan and input recorded for workflow exec `id` (workflow `name`),
/// whole; `None` before its plan is recorded. One GetItem on
/// `whimbrel_workflow_plan`, and one more per part for a plan stored in
/// parts (at most `concurrency` at once). Used by the engine and the CLI.
///
/// Errors: the store's; a part the head names that cannot be read is
/// [`StoreError::Transient`] (it is put before the head, so it appears).
pub async fn load(
    store: &Store,
    id: &str,
    name: &str,
    concurrency: usize,
) -> Result<Option<WorkflowPlan>, StoreError> {
    let table = store.tables().workflow_plan();
    let head: Option<WorkflowPlan> = store.get(&table, decide::workflow_key(id, name)).await?;
    let Some(mut head) = head else {
        return Ok(None);
    };
    let Some(parts) = head.parts.clone() else {
        return Ok(Some(head));
    };
    let table = &table;
    let mut read: Vec<WorkflowPlanPart> = stream::iter(0..parts.count)
        .map(|k| {
            let key = ids::plan_part_key(id, &parts.digest, k);
            async move {
                let mut item = Item::new();
                item.insert(attr::WORKFLOW_EXEC_ID.into(), s(key.as_str()));
                item.insert(attr::WORKFLOW_NAME.into(), s(name));
                let part: Option<WorkflowPlanPart> = store.get(table, item).await?;
                part.filter(|p| p.part == k)
                    .ok_or_else(|| StoreError::Transient {
                        op: "GetItem",
                        message: format!("{id}: plan part {key} missing"),
                    })
            }
        })
        .buffered(concurrency.max(1))
        .try_collect()
        .await?;
    read.sort_by_key(|p| p.part);
    head.plan.activities = read.into_iter().flat_map(|p| p.activities).collect();
    Ok(Some(head))
}

impl<L: Launcher> Engine<L> {
    /// The plan and input recorded for a workflow exec, whole; `None`
    /// before its plan is recorded ([`load`]).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable or a
    /// part the head names cannot be read.
    pub async fn load_plan(
        &self,
        id: &str,
        name: &str,
    ) -> Result<Option<WorkflowPlan>, EngineError> {
        Ok(load(&self.store, id, name, self.config.concurrency).await?)
    }

    /// The stored plan of `exec`'s workflow, whole: for what an activity
    /// item keeps in the plan (a wide join's prerequisites, a wide
    /// fan-out's dependents).
    ///
    /// Errors: [`EngineError::Retry`] when it cannot be read, or is
    /// missing (it is stored before any activity item exists).
    pub(crate) async fn plan_of(&self, exec: &ActivityExec) -> Result<WorkflowPlan, EngineError> {
        self.load_plan(&exec.workflow_exec_id, &exec.workflow_name)
            .await?
            .ok_or_else(|| EngineError::Retry(format!("{}: no stored plan", exec.workflow_exec_id)))
    }

    /// Store the plan (once): the input rows of its large inputs first
    /// (the plan keeps only their keys, [`super::payloads::by_reference`]),
    /// then its parts if it needs them, then the head, conditionally, with
    /// the request's input (see the module). The first head put wins:
    /// returns the plan as stored, whole, and whether this call stored it;
    /// `Err(reason)` when DynamoDB cannot store it (the workflow fails).
    ///
    /// Errors: [`EngineError::Retry`] when DynamoDB is unavailable.
    pub(crate) async fn store_plan(
        &self,
        exec: &WorkflowExec,
        plan: Plan,
        input: Option<serde_json::Value>,
        episodic: Option<crate::model::EpisodicStart>,
    ) -> Result<Result<(WorkflowPlan, bool), String>, EngineError> {
        let table = self.store.tables().workflow_plan();
        // Rows before the plan that names them (write-once and
        // content-addressed: a repeated put writes the same content).
        match self
            .store
            .batch_put(&table, &super::payloads::input_rows(exec, &plan))
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_permanent() => {
                return Ok(Err(format!("an input row cannot be stored: {e}")))
            }
            Err(e) => return Err(e.into()),
        }
        let item = WorkflowPlan {
            workflow_exec_id: exec.workflow_exec_id.clone(),
            workflow_name: exec.workflow_name.clone(),
            plan: super::payloads::by_reference(&exec.workflow_exec_id, plan),
            input,
            recorded_epoch: self.now().epoch,
            parts: None,
            episodic,
        };
        let (head, parts) = match split(&item, self.config.plan_parting) {
            Ok(split) => split,
            Err(reason) => return Ok(Err(reason)),
        };
        let puts: Vec<Result<bool, crate::store::StoreError>> = stream::iter(&parts)
            .map(|p| self.store.put_new(&table, attr::WORKFLOW_EXEC_ID, p))
            .buffer_unordered(self.config.concurrency.max(1))
            .collect()
            .await;
        for r in puts {
            match r {
                Ok(_) => {}
                Err(e) if e.is_permanent() => {
                    return Ok(Err(format!("the plan cannot be stored: {e}")))
                }
                Err(e) => return Err(e.into()),
            }
        }
        match self
            .store
            .put_new(&table, attr::WORKFLOW_EXEC_ID, &head)
            .await
        {
            Ok(true) => Ok(Ok((
                WorkflowPlan {
                    parts: head.parts,
                    ..item
                },
                true,
            ))),
            Ok(false) => {
                let won = self
                    .load_plan(&exec.workflow_exec_id, &exec.workflow_name)
                    .await?
                    .ok_or_else(|| EngineError::Retry("plan item not readable yet".into()))?;
                Ok(Ok((won, false)))
            }
            Err(e) if e.is_permanent() => Ok(Err(format!("the plan cannot be stored: {e}"))),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wide(n: usize) -> WorkflowPlan {
        let mut acts = vec![PlannedActivity {
            name: "start".into(),
            lambda: "fn".into(),
            ..Default::default()
        }];
        for i in 0..n {
            acts.push(PlannedActivity {
                name: format!("work-{i}"),
                lambda: "fn".into(),
                depends_on: vec!["start".into()],
                input: Some(serde_json::json!({"i": i, "pad": "x".repeat(40)})),
                ..Default::default()
            });
        }
        WorkflowPlan {
            workflow_exec_id: "w::1".into(),
            workflow_name: "w".into(),
            plan: Plan::of(acts),
            input: None,
            recorded_epoch: 1,
            parts: None,
            episodic: None,
        }
    }

    #[test]
    fn a_small_plan_is_one_item() {
        let item = wide(10);
        let (head, parts) = split(&item, PlanParting::default()).unwrap();
        assert!(parts.is_empty());
        assert_eq!(head, item);
    }

    #[test]
    fn a_large_plan_is_a_head_and_parts_that_give_it_back() {
        let item = wide(10_000);
        let (head, parts) = split(&item, PlanParting::default()).unwrap();
        assert!(head.plan.activities.is_empty());
        let named = head.parts.clone().unwrap();
        assert_eq!(named.count as usize, parts.len());
        assert!(parts.len() >= 3, "{} parts", parts.len());
        for (k, p) in parts.iter().enumerate() {
            assert_eq!(p.part as usize, k);
            assert_eq!(
                p.workflow_exec_id,
                ids::plan_part_key("w::1", &named.digest, k as u32)
            );
            assert!(size_of(p) <= MAX_ITEM_BYTES);
        }
        let again: Vec<PlannedActivity> = parts.into_iter().flat_map(|p| p.activities).collect();
        assert_eq!(again, item.plan.activities);
        // Another plan for the same exec: other digest, other part keys.
        let mut other = item.clone();
        other.plan.activities[3].input = None;
        assert_ne!(
            split(&other, PlanParting::default())
                .unwrap()
                .0
                .parts
                .unwrap()
                .digest,
            named.digest
        );
    }

    #[test]
    fn parts_are_sized_as_dynamodb_stores_them() {
        // Inputs of small numbers: 2 bytes each in JSON, 3 in an item.
        // Sliced by JSON size, two of them would make a 420 KB part.
        let mut item = wide(0);
        for i in 0..3 {
            item.plan.activities.push(PlannedActivity {
                name: format!("zeros-{i}"),
                lambda: "fn".into(),
                input: Some(serde_json::Value::Array(vec![0.into(); 70_000])),
                ..Default::default()
            });
        }
        let (_, parts) = split(&item, PlanParting::default()).expect("storable");
        assert_eq!(parts.len(), 3);
        for p in &parts {
            assert!(size_of(p) <= MAX_ITEM_BYTES, "{}", size_of(p));
        }
    }

    #[test]
    fn slices_stay_within_the_budget() {
        let item = wide(500);
        let acts = &item.plan.activities;
        let parts = slices(acts, 4_000);
        assert!(parts.len() > 1);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), acts.len());
        for p in &parts {
            assert!(serde_json::to_string(p).unwrap().len() <= 4_000 + p.len());
        }
        assert_eq!(slices(&acts[..1], 1).len(), 1);
        assert!(slices(&[], 10).is_empty());
    }
}
