//! The counting invariant (design.md § 3.3), checked after every step:
//! every name in a count group is a terminal activity of that workflow
//! placed in that group (its `count_slot`), the group's counters tally
//! those activities' end states, and it never holds more than its size;
//! a workflow's counters are the sums of the groups its `counted_groups`
//! names, each of them complete. So each end is counted once, and only
//! once a group is whole does the workflow see it. Groups are numbered per
//! generation (a redrive starts the next: design.md § 9.4); only the
//! workflow's current generation's are judged. At the end of a schedule
//! `check.rs` adds that the counters equal the activities' ends.

use std::collections::HashMap;
use std::sync::Arc;
use whimbrel_core::attr;

use whimbrel_core::engine::decide::redrive::GROUPS_PER_GENERATION;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, CountGroup, WorkflowExec};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{Item, Tables};

type Tally = (u64, u64, u64);

fn tally(states: impl Iterator<Item = whimbrel_core::contract::ActivityState>) -> Tally {
    let mut t = (0, 0, 0);
    for s in states {
        match s {
            whimbrel_core::contract::ActivityState::Completed => t.0 += 1,
            s if s.is_failure() => t.1 += 1,
            whimbrel_core::contract::ActivityState::Cancelled => t.2 += 1,
            _ => {}
        }
    }
    t
}

/// A count group item and its size (as the slots of the activities it
/// names give it), by (workflow exec id, group number).
type Groups = HashMap<(String, u32), (CountGroup, Option<u32>)>;

/// A count group item as [`violations`] reads it: its key, workflow exec
/// id and group number, and the group with its names' activity exec ids
/// (or why it does not parse).
type ReadGroup = (
    String,
    String,
    u32,
    Result<(CountGroup, Vec<String>), String>,
);

fn read_group(_: &str, item: &Item) -> Option<ReadGroup> {
    let (key, wf, g) = count_group_key(item)?;
    let group = serde_dynamo::from_item::<_, CountGroup>(item.clone())
        .map(|group| {
            let ids = (group.ended.iter())
                .map(|name| ids::activity_exec_id(&wf, name))
                .collect();
            (group, ids)
        })
        .map_err(|e| format!("{key}: count group does not parse: {e}"));
    Some((key.to_string(), wf, g, group))
}

/// A workflow exec item and the groups its `counted_groups` names.
fn read_counted(_: &str, item: &Item) -> Option<Arc<(WorkflowExec, Vec<String>)>> {
    let w = serde_dynamo::from_item::<_, WorkflowExec>(item.clone()).ok()?;
    let counted: Vec<String> = item
        .get(attr::COUNTED_GROUPS)
        .and_then(whimbrel_core::store::as_ss)
        .cloned()
        .unwrap_or_default();
    Some(Arc::new((w, counted)))
}

/// Violations of the counting invariant among `acts` and the tables.
pub fn violations(acts: &[Arc<ActivityExec>], mem: &MemoryBackend, t: &Tables) -> Vec<String> {
    let mut v = vec![];
    let by_id: HashMap<&str, &ActivityExec> = acts
        .iter()
        .map(|a| (a.activity_exec_id.as_str(), &**a))
        .collect();
    let wfs: Vec<_> = (mem.decoded(&t.workflow_exec(), read_counted).into_iter())
        .flatten()
        .collect();
    let generation: HashMap<&str, u32> = (wfs.iter())
        .map(|wc| {
            (
                wc.0.workflow_exec_id.as_str(),
                wc.0.redrive_count.unwrap_or(0),
            )
        })
        .collect();
    let mut groups: Groups = HashMap::new();
    for (key, wf, g, read) in mem
        .decoded(&t.activity_exec_dependency(), read_group)
        .into_iter()
        .flatten()
    {
        // An earlier generation's groups name activities a redrive took
        // back; they count for nothing now.
        let current = generation.get(wf.as_str()).copied().unwrap_or(0);
        match (g / GROUPS_PER_GENERATION).cmp(&current) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Greater => {
                v.push(format!(
                    "{key}: a group of generation {}, its workflow's is {current}",
                    g / GROUPS_PER_GENERATION
                ));
                continue;
            }
            std::cmp::Ordering::Equal => {}
        }
        let (group, ids) = match read {
            Ok(read) => read,
            Err(e) => {
                v.push(e);
                continue;
            }
        };
        let (size, found) = count_group_violations(&key, g, &group, &ids, &by_id);
        v.extend(found);
        groups.insert((wf, g), (group, size));
    }
    for wc in &wfs {
        v.extend(counted_groups_violations(&wc.0, &wc.1, &groups));
    }
    v
}

/// The key of a count group item of the dependency table, with the
/// workflow exec id and group number it names (`<workflow>#count-<n>`);
/// `None` for any other item.
fn count_group_key(item: &Item) -> Option<(&str, String, u32)> {
    let key = item
        .get(attr::ACTIVITY_EXEC_DEPENDENCY)
        .and_then(whimbrel_core::store::as_s)?;
    let (wf, g) = key
        .rsplit_once("#count-")
        .and_then(|(wf, g)| g.parse::<u32>().ok().map(|g| (wf.to_string(), g)))?;
    Some((key, wf, g))
}

/// The size of count group `g` (item `key`; `ids`: its names' activity
/// exec ids, in order), as its names' slots give it, and its violations: a name that is not a
/// terminal activity placed in that group, counters that do not tally
/// the names' end states, more names than the size.
fn count_group_violations(
    key: &str,
    g: u32,
    group: &CountGroup,
    ids: &[String],
    by_id: &HashMap<&str, &ActivityExec>,
) -> (Option<u32>, Vec<String>) {
    let mut v = vec![];
    let mut size = None;
    let mut states = vec![];
    for (name, id) in group.ended.iter().zip(ids) {
        match by_id.get(id.as_str()) {
            None => v.push(format!("{key}: counts unknown activity {name}")),
            Some(a) if !a.state.is_terminal() => {
                v.push(format!("{key}: counts {name}, which is {}", a.state))
            }
            Some(a) => {
                // A COMPLETED activity keeps the slot of the generation
                // it ended in; the redrive counts it into the same group
                // of the next.
                let same = |s: u32| s % GROUPS_PER_GENERATION == g % GROUPS_PER_GENERATION;
                match a.links.count_slot {
                    Some(slot) if same(slot.group) => size = Some(slot.size),
                    other => v.push(format!("{key}: counts {name}, whose slot is {other:?}")),
                }
                states.push(a.state);
            }
        }
    }
    let counters = (
        group.completed_count,
        group.failed_count,
        group.cancelled_count,
    );
    if tally(states.into_iter()) != counters {
        v.push(format!(
            "{key}: counters {counters:?} but its names {:?}",
            group.ended
        ));
    }
    if size.is_some_and(|s| group.ended.len() > s as usize) {
        v.push(format!("{key}: {} names of {size:?}", group.ended.len()));
    }
    (size, v)
}

/// Violations of workflow `w`'s counters against the groups it marks
/// counted (`counted`, its `counted_groups` markers): each marker names a
/// group that exists and is complete, and the counters are their sums.
fn counted_groups_violations(w: &WorkflowExec, counted: &[String], groups: &Groups) -> Vec<String> {
    let mut v = vec![];
    let mut sum = (0, 0, 0);
    for marker in counted {
        let Some(g) = marker
            .strip_prefix("#count-")
            .and_then(|g| g.parse::<u32>().ok())
        else {
            v.push(format!(
                "{}: bad counted marker {marker}",
                w.workflow_exec_id
            ));
            continue;
        };
        match groups.get(&(w.workflow_exec_id.clone(), g)) {
            None => v.push(format!(
                "{}: counted group {g} does not exist",
                w.workflow_exec_id
            )),
            Some((group, size)) => {
                if size.is_none_or(|s| group.ended.len() != s as usize) {
                    v.push(format!(
                        "{}: counted group {g} is not complete ({} of {size:?})",
                        w.workflow_exec_id,
                        group.ended.len()
                    ));
                }
                sum.0 += group.completed_count;
                sum.1 += group.failed_count;
                sum.2 += group.cancelled_count;
            }
        }
    }
    let counters = (w.completed_count, w.failed_count, w.cancelled_count);
    if sum != counters {
        v.push(format!(
            "workflow {}: counters {counters:?} but its counted groups sum to {sum:?}",
            w.workflow_exec_id
        ));
    }
    v
}

/// At the end of a schedule: a planned workflow's counters equal its
/// activities' end states (every group complete and counted).
pub fn final_violations(acts: &[Arc<ActivityExec>], w: &WorkflowExec) -> Option<String> {
    let ends = tally(
        acts.iter()
            .filter(|a| a.workflow_exec_id == w.workflow_exec_id)
            .map(|a| a.state),
    );
    let counters = (w.completed_count, w.failed_count, w.cancelled_count);
    (ends != counters).then(|| {
        format!(
            "workflow {}: counters {counters:?} but activities {ends:?}",
            w.workflow_exec_id
        )
    })
}
