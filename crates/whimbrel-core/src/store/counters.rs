//! What the store counts: requests and items per operation, the capacity
//! units DynamoDB reports as consumed (`ReturnConsumedCapacity: INDEXES`)
//! per operation and per table or index, and the distinct calls made (for
//! the least-privilege test). Shared by clones of a [`super::Store`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::ConsumedCapacity;

/// Requests and items per DynamoDB operation, counted by the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpCount {
    /// API calls.
    pub requests: u64,
    /// Items written or read by those calls (a BatchWriteItem of 25 items
    /// counts 25; a TransactWriteItems of 2 items counts 2).
    pub items: u64,
}

/// Per-operation request counters, shared by clones of a
/// [`Store`](super::Store), and the set of distinct calls made (IAM
/// action, table, index), which the least-privilege test compares with
/// `crate::grants`.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<BTreeMap<&'static str, OpCount>>>,
    calls: Arc<Mutex<std::collections::BTreeSet<Call>>>,
    capacity: Arc<Mutex<BTreeMap<String, Capacity>>>,
}

/// Capacity units DynamoDB reported as consumed, for one operation on one
/// table or index. On-demand bills one read request unit per 4 KB read
/// strongly consistently (half for eventually consistent, twice in a
/// transaction) and one write request unit per 1 KB written (the larger of
/// the item's old and new size; twice in a transaction), and each GSI the
/// write changes is billed as its own write.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Capacity {
    /// Read capacity (request) units.
    pub read: f64,
    /// Write capacity (request) units.
    pub write: f64,
}

/// One kind of DynamoDB call, as IAM sees it: the action
/// (`dynamodb:UpdateItem`; a transaction's writes count as their own
/// actions), the table, and the index for a Query of a GSI.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Call {
    /// IAM action, e.g. `dynamodb:Query`.
    pub action: &'static str,
    /// Table name, prefix included.
    pub table: String,
    /// GSI name, for a Query of an index.
    pub index: Option<String>,
}

impl Metrics {
    pub(crate) fn call(&self, action: &'static str, table: &str, index: Option<&str>) {
        let mut c = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        c.insert(Call {
            action,
            table: table.to_string(),
            index: index.map(str::to_string),
        });
    }

    /// The distinct calls made so far, and forget them.
    pub fn take_calls(&self) -> std::collections::BTreeSet<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The distinct calls made so far.
    pub fn calls(&self) -> std::collections::BTreeSet<Call> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn record(&self, op: &'static str, items: usize) {
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let c = m.entry(op).or_default();
        c.requests += 1;
        c.items += items as u64;
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> BTreeMap<String, OpCount> {
        let m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        m.iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect()
    }

    /// The counters, reset to zero.
    pub fn take(&self) -> BTreeMap<String, OpCount> {
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let out = m
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        m.clear();
        out
    }

    /// Write operations counted: PutItem, UpdateItem, BatchWriteItem and
    /// TransactWriteItems items.
    pub fn write_items(snapshot: &BTreeMap<String, OpCount>) -> u64 {
        [
            "PutItem",
            "UpdateItem",
            "BatchWriteItem",
            "TransactWriteItems",
        ]
        .iter()
        .filter_map(|op| snapshot.get(*op))
        .map(|c| c.items)
        .sum()
    }

    /// Add the capacity DynamoDB reported for one `op` request (asked for
    /// with `ReturnConsumedCapacity: INDEXES`): the table's part under
    /// `"{op} {table}"`, each GSI's under `"{op} {table}/{index}"`. Reads
    /// are GetItem, BatchGetItem and Query; everything else writes.
    pub(crate) fn consumed(&self, op: &'static str, c: &ConsumedCapacity) {
        let reads = matches!(op, "GetItem" | "BatchGetItem" | "Query");
        let table = c.table_name().unwrap_or("?");
        let units = |cap: Option<&aws_sdk_dynamodb::types::Capacity>| {
            cap.and_then(|x| {
                x.capacity_units()
                    .or(x.write_capacity_units().or(x.read_capacity_units()))
            })
        };
        let mut parts: Vec<(String, f64)> = Vec::new();
        // DynamoDB Local and DynamoDB both give the table's part under
        // `Table` with INDEXES; the total is the fallback.
        let own = units(c.table()).or(c.capacity_units()).unwrap_or(0.0);
        parts.push((format!("{op} {table}"), own));
        for (index, cap) in c.global_secondary_indexes().into_iter().flatten() {
            parts.push((
                format!("{op} {table}/{index}"),
                units(Some(cap)).unwrap_or(0.0),
            ));
        }
        let mut m = self.capacity.lock().unwrap_or_else(|p| p.into_inner());
        for (key, u) in parts {
            let e = m.entry(key).or_default();
            if reads {
                e.read += u;
            } else {
                e.write += u;
            }
        }
    }

    /// Add `units` write request units under `key` (`"{op} {table}"` or
    /// `"{op} {table}/{index}"`): a write priced by the store itself
    /// (`store::priced`).
    pub(crate) fn add_write(&self, key: String, units: f64) {
        let mut m = self.capacity.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(key).or_default().write += units;
    }

    /// The capacity consumed since the last take, by `"{op} {table}"` and
    /// `"{op} {table}/{index}"`, reset to zero.
    pub fn take_capacity(&self) -> BTreeMap<String, Capacity> {
        std::mem::take(&mut *self.capacity.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
