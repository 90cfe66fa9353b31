//! Shard order: Lambda reads a parent shard to its end before any of its
//! children, so the records of one item stay in order across a shard split.

use std::collections::HashSet;

/// A shard as DescribeStream lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// `ShardId`.
    pub id: String,
    /// `ParentShardId`, if any.
    pub parent: Option<String>,
}

/// The shards of `shards` (one complete DescribeStream listing) to start
/// polling now, in listing order: not `started` yet, not `finished`, and
/// whose parent is finished or no longer listed (trimmed: nothing of it is
/// left to read).
pub fn ready_to_start(
    shards: &[ShardInfo],
    started: &HashSet<String>,
    finished: &HashSet<String>,
) -> Vec<String> {
    let listed: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
    shards
        .iter()
        .filter(|s| !started.contains(&s.id) && !finished.contains(&s.id))
        .filter(|s| match &s.parent {
            None => true,
            Some(p) => finished.contains(p) || !listed.contains(p.as_str()),
        })
        .map(|s| s.id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parent: Option<&str>) -> ShardInfo {
        ShardInfo {
            id: id.into(),
            parent: parent.map(Into::into),
        }
    }

    fn set(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parent_before_children() {
        // a → (b, c); c → d. Listed children first, as DescribeStream may.
        let shards = [
            shard("d", Some("c")),
            shard("b", Some("a")),
            shard("c", Some("a")),
            shard("a", None),
        ];
        let none = set(&[]);
        assert_eq!(ready_to_start(&shards, &none, &none), ["a"]);
        // a is being read: nothing new until it ends.
        assert!(ready_to_start(&shards, &set(&["a"]), &none).is_empty());
        // a ended: both children, not the grandchild.
        assert_eq!(
            ready_to_start(&shards, &set(&["a"]), &set(&["a"])),
            ["b", "c"]
        );
        // c ended: d.
        assert_eq!(
            ready_to_start(&shards, &set(&["a", "b", "c"]), &set(&["a", "c"])),
            ["d"]
        );
    }

    #[test]
    fn trimmed_parent_and_resumed_runner() {
        // The parent is no longer listed (trimmed): the child starts.
        let shards = [shard("b", Some("gone")), shard("c", Some("b"))];
        assert_eq!(ready_to_start(&shards, &set(&[]), &set(&[])), ["b"]);
        // A restarted runner knows from its checkpoints that b ended: c
        // starts at once, b is not polled again.
        assert_eq!(ready_to_start(&shards, &set(&[]), &set(&["b"])), ["c"]);
    }
}
