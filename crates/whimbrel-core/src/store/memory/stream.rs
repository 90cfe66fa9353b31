//! The in-memory store's lag and streams: index changes applied late (as
//! a GSI's eventual consistency), the stream's records, and TTL's
//! deletes.

use super::*;

impl MemoryBackend {
    /// Apply up to `n` pending index changes, oldest first, in every index;
    /// returns how many remain.
    pub fn propagate(&self, n: usize) -> usize {
        let mut inner = self.lock();
        let mut left = 0;
        for idx in inner.indexes.values_mut() {
            for _ in 0..n {
                let Some((pk, item)) = idx.pending.pop_front() else {
                    break;
                };
                set_view(idx, &pk, item);
            }
            left += idx.pending.len();
        }
        left
    }

    /// Apply one pending index change in every index, not necessarily the
    /// oldest: `pick(n)` chooses among the `n` pending (any `0..n`). A GSI
    /// is updated asynchronously, so changes to different items may appear
    /// in any order; those of one item appear in order, so the change
    /// applied is the oldest pending one of the chosen change's item.
    /// Returns how many remain.
    pub fn propagate_any(&self, pick: &mut dyn FnMut(usize) -> usize) -> usize {
        let mut inner = self.lock();
        let mut left = 0;
        // In the indexes' order, so that one seed makes the same picks.
        let mut names: Vec<(String, String)> = inner.indexes.keys().cloned().collect();
        names.sort();
        for name in names {
            let Some(idx) = inner.indexes.get_mut(&name) else {
                continue;
            };
            if !idx.pending.is_empty() {
                let chosen = pick(idx.pending.len()).min(idx.pending.len() - 1);
                let pk = idx.pending[chosen].0.clone();
                let first = idx.pending.iter().position(|(k, _)| *k == pk);
                if let Some((pk, item)) = first.and_then(|i| idx.pending.remove(i)) {
                    set_view(idx, &pk, item);
                }
            }
            left += idx.pending.len();
        }
        left
    }

    /// Take the stream records written since the last call, in order.
    pub fn drain_stream(&self) -> Vec<StreamRecord> {
        std::mem::take(&mut self.lock().stream)
    }

    /// DynamoDB TTL: delete the items of `table` whose number attribute
    /// `ttl_attr` (epoch seconds) is less than `now`, as TTL's background
    /// deletes do some time after expiry (UpdateTimeToLive: "If the epoch
    /// time value stored in the attribute is less than the current time,
    /// the item is marked as expired and subsequently deleted"). Items without it, or
    /// with a non-number, are kept, as TTL keeps them. The indexes follow
    /// (with lag when the backend lags); the stream gets no record, since
    /// this model streams INSERTs only and Whimbrel's mappings filter
    /// REMOVEs out. Returns the deleted items.
    pub fn expire(&self, table: &str, ttl_attr: &str, now: i64) -> Vec<Item> {
        let mut inner = self.lock();
        let expired: Vec<(String, Item)> = inner
            .items
            .get(table)
            .into_iter()
            .flatten()
            .filter(|(_, item)| match item.get(ttl_attr) {
                Some(AttributeValue::N(n)) => n.parse::<f64>().is_ok_and(|t| t < now as f64),
                _ => false,
            })
            .map(|(pk, item)| (pk.clone(), item.clone()))
            .collect();
        for (pk, _) in &expired {
            inner.writes += 1;
            let writes = inner.writes;
            let v = inner.versions.entry(table.to_string()).or_default();
            v.table = writes;
            v.items.remove(pk);
            self.changed(&mut inner, table, pk, true, None);
            if let Some(t) = inner.items.get_mut(table) {
                t.remove(pk);
            }
        }
        expired.into_iter().map(|(_, item)| item).collect()
    }
}
