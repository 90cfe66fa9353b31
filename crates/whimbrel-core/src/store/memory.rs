//! The in-memory backend: a model of DynamoDB's semantics for the
//! simulation, kept honest against DynamoDB Local by a differential test.
//!
//! What it models: conditional writes evaluated atomically; UpdateItem
//! creating an absent item; all-or-nothing transactions (and
//! `TransactionConflict` injected through the fault hook); sparse GSIs with
//! KEYS_ONLY or ALL projection that lag behind the table until
//! [`MemoryBackend::propagate`] runs (eventual consistency; out of order
//! across items with [`MemoryBackend::propagate_any`]), or at once when
//! built with no lag; TTL deletes ([`MemoryBackend::expire`]); the 400 KB item limit computed as DynamoDB
//! computes item size; INSERT stream records of stream-enabled tables;
//! throttling or any other error on demand through the fault hook.
//!
//! For readers that look at every item again and again (the simulation's
//! invariants, after every step), [`MemoryBackend::decoded`] keeps each
//! item decoded until it is written again.
//!
//! This file holds the tables, their keys and the writes; the reads
//! (GetItem, Query pages) are in `memory/reads.rs`, the lag, streams and
//! TTL in `memory/stream.rs`.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;

pub use super::eval::{apply, av_eq, eval};
use super::eval::{av_cmp, compare, num, validate};
use super::size::{item_size, MAX_ITEM_BYTES};
use super::{Action, Cond, KeyCond, Write};

/// A request DynamoDB refuses as invalid.
fn invalid(op: &'static str, message: impl Into<String>) -> StoreError {
    whimbrel_rules::write::invalid(op, message).into()
}
use super::{Backend, Found, Item, Page, StoreError, Tables, Value as AttributeValue};

use whimbrel_rules::schema::{self, ScalarType, TableDef};

mod reads;
mod stream;

/// Decides, before an operation runs, whether it fails instead:
/// `(operation, table) -> Some(error)`. Used for throttling, conflicts.
pub type FaultHook = Arc<dyn Fn(&'static str, &str) -> Option<StoreError> + Send + Sync>;

/// An INSERT on a stream-enabled table, as its stream carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRecord {
    /// The table written.
    pub table: String,
    /// Global, increasing sequence number.
    pub sequence: u64,
    /// The item's key attributes.
    pub keys: Item,
    /// The item as written.
    pub new_image: Item,
}

#[derive(Debug, Default)]
struct IndexState {
    view: BTreeMap<String, Item>,
    pending: VecDeque<(String, Option<Item>)>,
}

#[derive(Debug, Default)]
struct Inner {
    items: HashMap<String, BTreeMap<String, Item>>,
    /// Per table: the write number (`writes` after it) of the last write
    /// to the table, and of the last write to each of its items.
    versions: HashMap<String, Versions>,
    indexes: HashMap<(String, String), IndexState>,
    stream: Vec<StreamRecord>,
    sequence: u64,
    writes: u64,
}

#[derive(Debug, Default)]
struct Versions {
    table: u64,
    items: HashMap<String, u64>,
}

/// One reader's decoded items of one table ([`MemoryBackend::decoded`]):
/// the table's version they were refreshed at, and per item key the
/// item's version and what `decode` made of it.
struct Memo<T> {
    seen: u64,
    rows: BTreeMap<String, (u64, T)>,
}

/// The memos of [`MemoryBackend::decoded`], by (the type of the decode
/// function, table).
type Memos = HashMap<(TypeId, String), Box<dyn Any + Send>>;

/// The in-memory DynamoDB model. Cheap to share behind an `Arc`.
pub struct MemoryBackend {
    defs: HashMap<String, TableDef>,
    lag: bool,
    inner: Mutex<Inner>,
    fault: Mutex<Option<FaultHook>>,
    memos: Mutex<Memos>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("lag", &self.lag)
            .finish()
    }
}

impl MemoryBackend {
    /// A model of every Whimbrel table of `tables`. With `lag`, GSIs are
    /// only updated by [`MemoryBackend::propagate`]; without, at once.
    pub fn new(tables: &Tables, lag: bool) -> Self {
        let defs = schema::definitions(tables)
            .into_iter()
            .map(|d| (d.name.clone(), d))
            .collect();
        MemoryBackend {
            defs,
            lag,
            inner: Mutex::new(Inner::default()),
            fault: Mutex::new(None),
            memos: Mutex::new(HashMap::new()),
        }
    }

    /// Install (or clear) the fault hook.
    pub fn set_fault_hook(&self, hook: Option<FaultHook>) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    fn fault(&self, op: &'static str, table: &str) -> Result<(), StoreError> {
        let hook = self.fault.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match hook.and_then(|h| h(op, table)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn def(&self, op: &'static str, table: &str) -> Result<&TableDef, StoreError> {
        self.defs
            .get(table)
            .ok_or_else(|| invalid(op, format!("ResourceNotFoundException: {table}")))
    }

    /// The canonical primary key text of `item` in `table`, checking that
    /// the key attributes are present with their declared types.
    fn pk(&self, op: &'static str, table: &str, item: &Item) -> Result<String, StoreError> {
        let d = self.def(op, table)?;
        let mut parts = vec![];
        for (name, ty) in std::iter::once(&d.hash).chain(d.range.iter()) {
            match (item.get(*name), ty) {
                (Some(AttributeValue::S(v)), ScalarType::S) if !v.is_empty() => {
                    parts.push(v.clone())
                }
                (Some(AttributeValue::N(v)), ScalarType::N) => parts.push(num(v).to_string()),
                _ => {
                    return Err(invalid(
                        op,
                        format!("missing or mistyped key attribute {name} for {table}"),
                    ))
                }
            }
        }
        Ok(parts.join("\u{1f}"))
    }

    fn key_of(&self, table: &str, item: &Item) -> Item {
        let d = &self.defs[table];
        std::iter::once(d.hash.0)
            .chain(d.range.as_ref().map(|r| r.0))
            .filter_map(|k| item.get(k).map(|v| (k.to_string(), v.clone())))
            .collect()
    }

    /// Record a change of one item: index maintenance and stream records.
    fn changed(&self, inner: &mut Inner, table: &str, pk: &str, old: bool, new: Option<&Item>) {
        let d = &self.defs[table];
        for g in &d.gsis {
            let projected = new.and_then(|item| {
                let has_keys = item.contains_key(g.hash.0)
                    && g.range.as_ref().is_none_or(|r| item.contains_key(r.0));
                has_keys.then(|| {
                    if g.keys_only {
                        let mut p = self.key_of(table, item);
                        for k in std::iter::once(g.hash.0).chain(g.range.as_ref().map(|r| r.0)) {
                            p.insert(k.to_string(), item[k].clone());
                        }
                        p
                    } else {
                        item.clone()
                    }
                })
            });
            let idx = inner
                .indexes
                .entry((table.to_string(), g.name.to_string()))
                .or_default();
            if self.lag {
                idx.pending.push_back((pk.to_string(), projected));
            } else {
                set_view(idx, pk, projected);
            }
        }
        if d.stream && !old {
            if let Some(item) = new {
                inner.sequence += 1;
                let rec = StreamRecord {
                    table: table.to_string(),
                    sequence: inner.sequence,
                    keys: self.key_of(table, item),
                    new_image: item.clone(),
                };
                inner.stream.push(rec);
            }
        }
    }

    /// A copy of one table's items, ordered by key (for invariants).
    pub fn items(&self, table: &str) -> Vec<Item> {
        self.lock()
            .items
            .get(table)
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every item of `table`, ordered by key, as `decode(key, item)` makes
    /// it (the same order and values as mapping `decode` over
    /// [`MemoryBackend::items`]), where `key` is the item's primary key
    /// text. `decode` runs again only on the items written (or deleted)
    /// since the last call with the same function: its results are kept
    /// per item version, keyed by the type of `decode` (every closure and
    /// fn item has its own) and the table. So `decode` must be a pure
    /// function of its arguments, and must not call this backend.
    pub fn decoded<T, F>(&self, table: &str, decode: F) -> Vec<T>
    where
        T: Clone + Send + 'static,
        F: Fn(&str, &Item) -> T + 'static,
    {
        let inner = self.lock();
        let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        let memo = memos
            .entry((TypeId::of::<F>(), table.to_string()))
            .or_insert_with(|| {
                Box::new(Memo::<T> {
                    seen: 0,
                    rows: BTreeMap::new(),
                })
            })
            .downcast_mut::<Memo<T>>()
            .expect("a decode function's type fixes what it returns");
        let versions = inner.versions.get(table);
        let version = versions.map_or(0, |v| v.table);
        if memo.seen != version {
            let mut old = std::mem::take(&mut memo.rows);
            for (pk, item) in inner.items.get(table).into_iter().flatten() {
                let v = versions.and_then(|v| v.items.get(pk)).copied().unwrap_or(0);
                let row = match old.remove(pk) {
                    Some(kept) if kept.0 == v => kept,
                    _ => (v, decode(pk, item)),
                };
                memo.rows.insert(pk.clone(), row);
            }
            memo.seen = version;
        }
        memo.rows.values().map(|(_, t)| t.clone()).collect()
    }

    fn check_size(op: &'static str, item: &Item) -> Result<(), StoreError> {
        let size = item_size(item);
        if size > MAX_ITEM_BYTES {
            return Err(invalid(
                op,
                format!("ValidationException: Item size has exceeded the maximum allowed size ({size} bytes)"),
            ));
        }
        Ok(())
    }

    /// One write against `inner`, checked; returns the new item.
    fn stage(
        &self,
        inner: &Inner,
        op: &'static str,
        w: &Write,
    ) -> Result<(String, Option<Item>, Item), StoreError> {
        match w {
            Write::Put { table, item, cond } => {
                let pk = self.pk(op, table, item)?;
                let old = inner.items.get(table).and_then(|t| t.get(&pk)).cloned();
                if let Some(c) = cond {
                    validate(c)?;
                    if !eval(c, old.as_ref()) {
                        return Err(StoreError::ConditionFailed);
                    }
                }
                Self::check_size(op, item)?;
                Ok((pk, old, item.clone()))
            }
            Write::Update {
                table,
                key,
                actions,
                cond,
            } => {
                let pk = self.pk(op, table, key)?;
                let old = inner.items.get(table).and_then(|t| t.get(&pk)).cloned();
                if let Some(c) = cond {
                    validate(c)?;
                    if !eval(c, old.as_ref()) {
                        return Err(StoreError::ConditionFailed);
                    }
                }
                let new = apply(key, old.as_ref(), actions)?;
                Self::check_size(op, &new)?;
                Ok((pk, old, new))
            }
        }
    }

    /// Writes applied so far (a checker re-reads only after a change).
    pub fn writes(&self) -> u64 {
        self.lock().writes
    }

    fn commit(&self, inner: &mut Inner, table: &str, pk: String, old: bool, new: Item) {
        inner.writes += 1;
        let v = inner.versions.entry(table.to_string()).or_default();
        v.table = inner.writes;
        v.items.insert(pk.clone(), inner.writes);
        self.changed(inner, table, &pk, old, Some(&new));
        inner
            .items
            .entry(table.to_string())
            .or_default()
            .insert(pk, new);
    }

    fn write_now(&self, op: &'static str, w: Write) -> Result<Item, StoreError> {
        self.fault(op, w.table())?;
        let mut inner = self.lock();
        let (pk, old, new) = self.stage(&inner, op, &w)?;
        self.commit(&mut inner, w.table(), pk, old.is_some(), new.clone());
        Ok(new)
    }

    fn transact_now(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        const OP: &str = "TransactWriteItems";
        for w in &writes {
            self.fault(OP, w.table())?;
        }
        if writes.is_empty() || writes.len() > 100 {
            return Err(invalid(OP, "a transaction holds 1 to 100 writes"));
        }
        let mut inner = self.lock();
        let mut staged = Vec::with_capacity(writes.len());
        let mut seen = std::collections::HashSet::new();
        let mut failed = None;
        for w in &writes {
            match self.stage(&inner, OP, w) {
                Ok((pk, old, new)) => {
                    if !seen.insert((w.table().to_string(), pk.clone())) {
                        return Err(invalid(OP, "two operations on one item in a transaction"));
                    }
                    staged.push((w.table().to_string(), pk, old.is_some(), new));
                }
                // DynamoDB reports validation before condition failures.
                Err(e @ StoreError::Invalid { .. }) => return Err(e),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        for (table, pk, old, new) in staged {
            self.commit(&mut inner, &table, pk, old, new);
        }
        Ok(())
    }
}

fn set_view(idx: &mut IndexState, pk: &str, item: Option<Item>) {
    match item {
        Some(i) => {
            idx.view.insert(pk.to_string(), i);
        }
        None => {
            idx.view.remove(pk);
        }
    }
}

impl Backend for MemoryBackend {
    fn get(
        &self,
        table: String,
        key: Item,
        projection: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        futures::future::ready(self.get_now(&table, &key, &projection)).boxed()
    }

    fn put(
        &self,
        table: String,
        item: Item,
        cond: Option<Cond>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        futures::future::ready(
            self.write_now("PutItem", Write::Put { table, item, cond })
                .map(|_| ()),
        )
        .boxed()
    }

    fn update(
        &self,
        table: String,
        key: Item,
        actions: Vec<Action>,
        cond: Option<Cond>,
        return_new: bool,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        let w = Write::Update {
            table,
            key,
            actions,
            cond,
        };
        let r = self
            .write_now("UpdateItem", w)
            .map(|i| return_new.then_some(i));
        futures::future::ready(r).boxed()
    }

    fn transact(&self, writes: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        futures::future::ready(self.transact_now(writes)).boxed()
    }

    fn batch_put(
        &self,
        table: String,
        items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        let r = (|| {
            self.fault("BatchWriteItem", &table)?;
            for item in items {
                self.write_now(
                    "BatchWriteItem",
                    Write::Put {
                        table: table.clone(),
                        item,
                        cond: None,
                    },
                )?;
            }
            Ok(vec![])
        })();
        futures::future::ready(r).boxed()
    }

    fn batch_get(
        &self,
        table: String,
        keys: Vec<Item>,
    ) -> BoxFuture<'_, Result<Found, StoreError>> {
        let r = (|| {
            self.fault("BatchGetItem", &table)?;
            let mut found = vec![];
            for k in keys {
                if let Some(i) = self.get_now(&table, &k, &[])? {
                    found.push(i);
                }
            }
            Ok((found, vec![]))
        })();
        futures::future::ready(r).boxed()
    }

    fn query(
        &self,
        table: String,
        index: Option<String>,
        key: KeyCond,
        start: Option<Item>,
    ) -> BoxFuture<'_, Result<Page, StoreError>> {
        let page = self.query_page(&table, index.as_deref(), &key, start.as_ref(), None);
        futures::future::ready(page).boxed()
    }

    fn pause(&self, _millis: u64) -> BoxFuture<'_, ()> {
        futures::future::ready(()).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn row(name: &str, n: i64) -> Item {
        Item::from([
            (
                whimbrel_rules::attr::WORKFLOW_NAME.to_string(),
                AttributeValue::S(name.into()),
            ),
            ("n".to_string(), AttributeValue::N(n.to_string())),
            ("ttl".to_string(), AttributeValue::N(n.to_string())),
        ])
    }

    fn put(mem: &MemoryBackend, table: &str, item: Item) {
        mem.put(table.to_string(), item, None)
            .now_or_never()
            .expect("the model answers at once")
            .expect("put");
    }

    static DECODES: AtomicUsize = AtomicUsize::new(0);

    fn read_n(key: &str, item: &Item) -> (String, String) {
        DECODES.fetch_add(1, Ordering::SeqCst);
        match item.get("n") {
            Some(AttributeValue::N(n)) => (key.to_string(), n.clone()),
            _ => (key.to_string(), String::new()),
        }
    }

    /// `decoded` answers what decoding `items` answers, after puts,
    /// overwrites and TTL deletes, and decodes only the items written
    /// since its last call.
    #[test]
    fn decoded_is_items_decoded_and_decodes_only_what_was_written() {
        let tables = Tables::new("t_");
        let mem = MemoryBackend::new(&tables, false);
        let table = tables.workflow_lambda();
        let fresh = |mem: &MemoryBackend| -> Vec<(String, String)> {
            let items = mem.items(&table);
            let d = mem.decoded(&table, read_n);
            let plain: Vec<_> = items.iter().map(|i| read_n("", i).1).collect();
            assert_eq!(d.iter().map(|r| r.1.clone()).collect::<Vec<_>>(), plain);
            d
        };
        for (name, n) in [("b", 2), ("a", 1), ("c", 3)] {
            put(&mem, &table, row(name, n));
        }
        assert_eq!(fresh(&mem).len(), 3);
        let before = DECODES.load(Ordering::SeqCst);
        assert_eq!(mem.decoded(&table, read_n).len(), 3);
        assert_eq!(
            DECODES.load(Ordering::SeqCst),
            before,
            "nothing written, nothing decoded"
        );
        put(&mem, &table, row("b", 20));
        let before = DECODES.load(Ordering::SeqCst);
        let d = mem.decoded(&table, read_n);
        assert_eq!(
            DECODES.load(Ordering::SeqCst),
            before + 1,
            "only b decoded again"
        );
        assert_eq!(
            d.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(),
            ["1", "20", "3"]
        );
        assert_eq!(mem.expire(&table, "ttl", 3).len(), 1);
        let d = fresh(&mem);
        assert_eq!(
            d.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(),
            ["20", "3"]
        );
    }
}
