//! The edge invariant, checked after every step: each edge is released
//! once, and only by a prerequisite that COMPLETED.
//!
//! * An inline join: `pending_dependency_count` + released = prerequisites,
//!   the released set holds distinct prerequisites, never negative; once
//!   claimed (attempt ≥ 1) the count is 0 and the set may be gone.
//! * A wide join (`join_groups`): the same over its groups; every group
//!   marker it holds is of a complete group; every name in a join group
//!   item is a distinct COMPLETED prerequisite placed in that group (its
//!   `join_slots`), and a group never holds more than its size.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use whimbrel_core::contract::ActivityState;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, JoinGroup};

/// Violations of the edge invariant among `acts` and the join group items
/// `groups` (every item of the dependency table that parses as one and
/// whose key is a join group's).
pub fn violations(acts: &[Arc<ActivityExec>], groups: &[JoinGroup]) -> Vec<String> {
    let mut v = vec![];
    let by_id: HashMap<&str, &ActivityExec> = acts
        .iter()
        .map(|a| (a.activity_exec_id.as_str(), &**a))
        .collect();
    // (join id, group) -> the group item's released names.
    let mut group_of: HashMap<(String, u32), HashSet<&str>> = HashMap::new();
    for g in groups {
        let Some(n) = join_group_number(g) else {
            continue;
        };
        let (names, found) = join_group_violations(g, n, &by_id);
        v.extend(found);
        group_of.insert((g.activity_exec_id.clone(), n), names);
    }
    for a in acts {
        v.extend(pending_count_violations(a));
        v.extend(release_violations(a, acts, &by_id, &group_of));
    }
    v
}

/// The number of the join group item `g` (its key is the join's id, then
/// `#join-` and the number); `None` for a key of another shape.
fn join_group_number(g: &JoinGroup) -> Option<u32> {
    g.activity_exec_dependency
        .strip_prefix(g.activity_exec_id.as_str())
        .and_then(|rest| rest.strip_prefix("#join-"))
        .and_then(|n| n.parse::<u32>().ok())
}

/// The distinct names join group `n` of `g` released, and the violations
/// among them: a name held twice, a name that is not a COMPLETED
/// prerequisite placed in that group (its `join_slots`), more names than
/// the group's size.
fn join_group_violations<'a>(
    g: &'a JoinGroup,
    n: u32,
    by_id: &HashMap<&str, &ActivityExec>,
) -> (HashSet<&'a str>, Vec<String>) {
    let mut v = vec![];
    let join = &g.activity_exec_id;
    let names: HashSet<&str> = g.released.iter().map(String::as_str).collect();
    if names.len() != g.released.len() {
        v.push(format!(
            "{join}: group {n} holds a name twice: {:?}",
            g.released
        ));
    }
    let mut size = None;
    for name in &names {
        let p = by_id.get(ids::activity_exec_id(&workflow_of(by_id, join), name).as_str());
        match p {
            Some(p) if p.state != ActivityState::Completed => v.push(format!(
                "{join}: group {n} released by {name}, which is {:?}",
                p.state
            )),
            Some(p) => match p.links.join_slots.get(join.as_str()) {
                Some(slot) if slot.group == n => size = Some(slot.size),
                other => v.push(format!(
                    "{join}: group {n} released by {name}, whose slot is {other:?}"
                )),
            },
            None => v.push(format!("{join}: group {n} released by unknown {name}")),
        }
    }
    if size.is_some_and(|s| names.len() > s as usize) {
        v.push(format!(
            "{join}: group {n} holds {} names of {size:?}",
            names.len()
        ));
    }
    (names, v)
}

/// Violations of `a`'s own edge bookkeeping: its released set holds
/// distinct known prerequisites (or group markers) and, with the pending
/// count, adds up to its prerequisites (or groups) unless the first claim
/// dropped the markers; a QUEUED activity has nothing pending.
fn pending_count_violations(a: &ActivityExec) -> Vec<String> {
    let mut v = vec![];
    let id = &a.activity_exec_id;
    let released: HashSet<&String> = a.links.released_prerequisites.iter().collect();
    let expected = a
        .links
        .join_groups
        .map_or(a.links.prerequisites.len(), |g| g as usize);
    let known = |r: &String| match a.links.join_groups {
        None => a.links.prerequisites.contains(r),
        Some(g) => (0..g).any(|k| *r == ids::join_marker(k)),
    };
    // The first claim removes the markers with the count at 0
    // (`queue_after`): a claimed activity may hold none.
    let dropped_at_claim =
        a.attempt.number >= 1 && a.links.pending_dependency_count == 0 && released.is_empty();
    if released.len() != a.links.released_prerequisites.len()
        || !released.iter().all(|r| known(r))
        || (a.links.pending_dependency_count as usize + released.len() != expected
            && !dropped_at_claim)
    {
        v.push(format!(
            "{id}: edges released wrongly: pending {} released {:?} of {:?} (groups {:?})",
            a.links.pending_dependency_count,
            a.links.released_prerequisites,
            a.links.prerequisites,
            a.links.join_groups
        ));
    }
    if a.state == ActivityState::Queued && a.links.pending_dependency_count > 0 {
        v.push(format!(
            "{id}: queued with {} prerequisites pending",
            a.links.pending_dependency_count
        ));
    }
    v
}

/// Violations among what released `a`: a group marker of a wide join
/// whose group (`group_of`, by join id and group) is not complete, or an
/// inline prerequisite that did not COMPLETE.
fn release_violations(
    a: &ActivityExec,
    acts: &[Arc<ActivityExec>],
    by_id: &HashMap<&str, &ActivityExec>,
    group_of: &HashMap<(String, u32), HashSet<&str>>,
) -> Vec<String> {
    let mut v = vec![];
    let id = &a.activity_exec_id;
    for r in &a.links.released_prerequisites {
        if a.links.join_groups.is_some() {
            // A group marker: its group is complete.
            let n = r
                .trim_start_matches("#join-")
                .parse::<u32>()
                .unwrap_or(u32::MAX);
            let names = group_of.get(&(id.clone(), n)).map_or(0, HashSet::len);
            let members = acts
                .iter()
                .filter(|p| {
                    p.links
                        .join_slots
                        .get(id.as_str())
                        .is_some_and(|s| s.group == n)
                })
                .count();
            if names == 0 || names != members {
                v.push(format!(
                    "{id}: released by {r}, a group of {members} with {names} released"
                ));
            }
        } else if by_id.get(r.as_str()).map(|p| p.state) != Some(ActivityState::Completed) {
            v.push(format!(
                "{id}: released by {r}, which is {:?}",
                by_id.get(r.as_str()).map(|p| p.state)
            ));
        }
    }
    v
}

/// The workflow exec id of the join `join` (its item's range key).
fn workflow_of(by_id: &HashMap<&str, &ActivityExec>, join: &str) -> String {
    by_id
        .get(join)
        .map(|j| j.workflow_exec_id.clone())
        .unwrap_or_default()
}
