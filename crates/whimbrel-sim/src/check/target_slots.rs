//! The invariants of the concurrency limits per Lambda function or task
//! list (design.md § 9.3), read after every step. For each target with a
//! limit in `whimbrel_limit`:
//!
//! - its slots in use (`max_concurrency - slots_free`) are exactly the
//!   activities that hold one (`target_slot_held`, naming the target): the
//!   take, the give-back and a limit change are each one write;
//! - no more are held by claims than the limit, or, after the limit was
//!   lowered below the slots held, than were held then, falling as they
//!   end (a lower limit takes no slot back); a new limit's adopted
//!   holders (attempts live when it was set, issue 42 A.7) are counted in
//!   its slots in use but may put it over until they end;
//! - an activity claimed under the limit (`target_limit`) and in flight
//!   holds a slot;
//! - once every activity of the target ended and settled, no slot is held
//!   and none waits (no slot and no waiter leaked).

use std::collections::HashMap;
use std::sync::Arc;

use whimbrel_core::contract::ActivityState;
use whimbrel_core::engine::decide::target_limits::target_of;
use whimbrel_core::model::{ActivityExec, TargetLimit};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

/// What the checker remembers of each target between steps.
#[derive(Debug, Default)]
pub struct Seen {
    /// By target: the most slots it may hold (its limit, or more while a
    /// lowered limit is still exceeded) and the slots held, as last read.
    last: HashMap<String, (i64, i64)>,
    /// The waiter entries seen, of every target.
    pub waiters: std::collections::HashSet<String>,
}

/// The limits set in `whimbrel_limit` (a removed one keeps its key and no
/// `max_concurrency`: skipped).
pub fn limits(mem: &MemoryBackend, t: &Tables) -> Vec<TargetLimit> {
    (super::parsed::<TargetLimit>(mem, &t.limit()).into_iter())
        .filter(|l| l.max_concurrency.is_some())
        .collect()
}

/// Every violation of the target slot invariants among `acts` (all
/// activity items) and the limits of `mem`; notes what it read in `seen`.
pub fn violations(
    acts: &[Arc<ActivityExec>],
    mem: &MemoryBackend,
    t: &Tables,
    seen: &mut Seen,
) -> Vec<String> {
    let mut v: Vec<String> = acts
        .iter()
        .filter_map(|a| in_flight_without_slot(a))
        .collect();
    for l in limits(mem, t) {
        let max = i64::from(l.max_concurrency.unwrap_or(0));
        let target = l.target.as_str();
        let holders: Vec<&Arc<ActivityExec>> = (acts.iter())
            .filter(|a| a.links.target_slot_held && a.links.target_limit.as_deref() == Some(target))
            .collect();
        let held = holders.len() as i64;
        let claimed = holders
            .iter()
            .filter(|a| !a.links.target_slot_adopted)
            .count() as i64;
        if l.slots_used() != held {
            v.push(format!(
                "target {target}: {} slots in use (limit {max}, {} free), {held} activities hold one",
                l.slots_used(),
                l.slots_free
            ));
        }
        let (ceiling, before) = seen.last.get(target).copied().unwrap_or((i64::MAX, 0));
        let ceiling = max.max(ceiling.min(before));
        if claimed > ceiling {
            v.push(format!(
                "target {target}: {claimed} slots held by claims, above its limit {max} (at most {ceiling})"
            ));
        }
        seen.last.insert(target.to_string(), (ceiling, claimed));
        seen.waiters.extend(l.slot_waiters.iter().cloned());
        v.extend(leaked(acts, &l, held));
    }
    v
}

/// An activity claimed under its target's limit, in flight, without the
/// slot.
fn in_flight_without_slot(a: &ActivityExec) -> Option<String> {
    let target = a.links.target_limit.as_deref()?;
    let claimed = !matches!(a.state, ActivityState::Requested | ActivityState::Ready);
    (claimed && !a.state.is_terminal() && !a.links.target_slot_held).then(|| {
        format!(
            "{}: {} under the limit of {target} without a slot",
            a.activity_exec_id, a.state
        )
    })
}

/// Slots held or waiters left once every activity of `l`'s target ended
/// and settled.
fn leaked(acts: &[Arc<ActivityExec>], l: &TargetLimit, held: i64) -> Option<String> {
    let mut of_target = acts
        .iter()
        .filter(|a| target_of(a).as_deref() == Some(l.target.as_str()))
        .peekable();
    of_target.peek()?;
    let settled = of_target.all(|a| a.state.is_terminal() && a.timing.due_epoch.is_none());
    (settled && (held > 0 || !l.slot_waiters.is_empty())).then(|| {
        format!(
            "target {}: {held} slots held and waiters {:?} left, every activity of it ended and settled",
            l.target, l.slot_waiters
        )
    })
}
