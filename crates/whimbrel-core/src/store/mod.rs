//! The store: table names, item (de)serialization and the few request
//! shapes the engine uses (conditional put, update, transaction, batch
//! write, get, query), over a [`Backend`]:
//!
//! * [`dynamo::DynamoBackend`]: DynamoDB (or DynamoDB Local); the only
//!   place expression strings are built, from the typed writes of
//!   [`whimbrel_rules::write`];
//! * [`memory::MemoryBackend`]: an in-memory model with DynamoDB's
//!   semantics (conditions, all-or-nothing transactions, sparse GSIs with
//!   lag, the 400 KB item limit, streams), for the simulation.
//!
//! Every request is counted per operation so the engine's cost can be
//! measured (see [`Metrics`]). No Scan anywhere: every cross-item read is a
//! Query on a table or GSI. Index names are defined here and in
//! `docs/tables.md`.

pub mod counters;
pub mod dynamo;
pub mod memory;
mod priced;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use counters::{Call, Capacity, Metrics, OpCount};
pub use whimbrel_rules::keys::*;
pub use whimbrel_rules::write::{
    as_s, as_ss, av, eval, n, s, size, Action, Cmp, Cond, Item, KeyCond, UpdateRequest, Value,
    Write,
};

/// A store request that failed. Retryable and permanent failures are
/// different variants ([`StoreError::is_transient`]).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A condition (or a transaction's condition) was false.
    #[error("conditional write failed")]
    ConditionFailed,
    /// A transaction was cancelled because another one touched the same
    /// item (`TransactionConflict`); deciding again may succeed at once.
    #[error("transaction conflict")]
    Conflict,
    /// Throttling, a 5xx or a network error: the same request may succeed
    /// later.
    #[error("{op}: transient DynamoDB error: {message}")]
    Transient {
        /// The operation, e.g. `UpdateItem`.
        op: &'static str,
        /// The error text.
        message: String,
    },
    /// The request can never succeed as it is: a `ValidationException`,
    /// for example an item over 400 KB. Retrying it is pointless.
    #[error("{op}: invalid request: {message}")]
    Invalid {
        /// The operation.
        op: &'static str,
        /// The error text.
        message: String,
    },
    /// Any other error (missing table, access denied...): a deployment
    /// problem an operator may fix, so it is retried.
    #[error("{op}: DynamoDB error: {message}")]
    Other {
        /// The operation.
        op: &'static str,
        /// The error text.
        message: String,
    },
    /// An output read back from its event row does not match the digest
    /// its activity item stored when the output was applied: the row was
    /// overwritten, and its content is not used. Retried (an operator may
    /// restore the row), counted as `OutputMismatches`.
    #[error(transparent)]
    Mismatch(#[from] whimbrel_rules::payloads::OutputMismatch),
    /// An item that does not have the expected shape.
    #[error("{table}: item does not match its type: {source}")]
    Shape {
        /// The table read.
        table: String,
        /// The conversion error.
        source: serde_dynamo::Error,
    },
}

impl From<whimbrel_rules::write::InvalidWrite> for StoreError {
    fn from(e: whimbrel_rules::write::InvalidWrite) -> Self {
        StoreError::Invalid {
            op: e.op,
            message: e.message,
        }
    }
}

impl StoreError {
    /// True when the same request may succeed later (throttling, network).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Transient { .. })
    }
    /// True when the same request can never succeed (validation, size).
    pub fn is_permanent(&self) -> bool {
        matches!(self, StoreError::Invalid { .. })
    }
}

/// A page of Query results: the items and the LastEvaluatedKey.
pub type Page = (Vec<Item>, Option<Item>);

/// A BatchGetItem answer: the items found and the unprocessed keys.
pub type Found = (Vec<Item>, Vec<Item>);

/// What a store backend does: one method per DynamoDB request shape, typed
/// (no expression strings). Object safe; every future is `Send`.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// GetItem, strongly consistent; `projection` empty = every attribute.
    fn get(
        &self,
        table: String,
        key: Item,
        projection: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>>;
    /// PutItem with an optional condition on the item replaced.
    fn put(
        &self,
        table: String,
        item: Item,
        cond: Option<Cond>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;
    /// UpdateItem (creates the item if absent and the condition allows, as
    /// DynamoDB does). With `return_new`, the item after the update.
    fn update(
        &self,
        table: String,
        key: Item,
        actions: Vec<Action>,
        cond: Option<Cond>,
        return_new: bool,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>>;
    /// TransactWriteItems: all apply or none.
    fn transact(&self, writes: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>>;
    /// BatchWriteItem puts (at most 25); returns the unprocessed items.
    fn batch_put(
        &self,
        table: String,
        items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>>;
    /// BatchGetItem (at most 100 keys, strongly consistent); returns the
    /// items found and the unprocessed keys.
    fn batch_get(&self, table: String, keys: Vec<Item>)
        -> BoxFuture<'_, Result<Found, StoreError>>;
    /// One page of a Query on a table (consistent) or an index (eventually
    /// consistent), from `start` (a LastEvaluatedKey).
    fn query(
        &self,
        table: String,
        index: Option<String>,
        key: KeyCond,
        start: Option<Item>,
    ) -> BoxFuture<'_, Result<Page, StoreError>>;
    /// One page of a Query as [`Backend::query`], each item only the
    /// attributes in `projection` (Query's `ProjectionExpression`; the
    /// page is still cut at 1 MB of whole items read, and read units count
    /// them whole). The default reads the page and keeps those attributes.
    fn query_projected(
        &self,
        table: String,
        index: Option<String>,
        (key, start): (KeyCond, Option<Item>),
        projection: Vec<String>,
    ) -> BoxFuture<'_, Result<Page, StoreError>> {
        let page = self.query(table, index, key, start);
        Box::pin(async move {
            let (items, last) = page.await?;
            let keep = |i: Item| i.into_iter().filter(|(k, _)| projection.contains(k));
            Ok((items.into_iter().map(|i| keep(i).collect()).collect(), last))
        })
    }
    /// The first page of a Query holding at most `limit` items (Query's
    /// `Limit`). The default reads a whole page and cuts it.
    fn query_limited(
        &self,
        table: String,
        index: Option<String>,
        key: KeyCond,
        limit: i32,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        let page = self.query(table, index, key, None);
        Box::pin(async move {
            let (mut items, _) = page.await?;
            items.truncate(usize::try_from(limit).unwrap_or(0));
            Ok(items)
        })
    }
    /// Wait `millis` before a retry (backoff). The simulation's backends
    /// do not really wait.
    fn pause(&self, millis: u64) -> BoxFuture<'_, ()>;
}

/// The store. Cheap to clone; clones share the backend and the counters.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    client: Option<aws_sdk_dynamodb::Client>,
    tables: Tables,
    metrics: Metrics,
}

const BATCH_WRITE_MAX: usize = 25;
const BATCH_GET_MAX: usize = 100;
const UNPROCESSED_RETRIES: u32 = 8;

/// A [`StoreError::Shape`] for an item of `table` that is not its type.
pub(crate) fn shape(table: &str) -> impl FnOnce(serde_dynamo::Error) -> StoreError + '_ {
    move |e| StoreError::Shape {
        table: table.into(),
        source: e,
    }
}

impl Store {
    /// A store over DynamoDB (`client`) for the tables of `tables`.
    pub fn new(client: aws_sdk_dynamodb::Client, tables: Tables) -> Self {
        let metrics = Metrics::default();
        let backend = dynamo::DynamoBackend::with_metrics(client.clone(), metrics.clone());
        let mut store = Store::with_backend(Arc::new(backend), tables);
        store.client = Some(client);
        store.metrics = metrics;
        store
    }

    /// This DynamoDB store with its transactions priced by AWS's rules
    /// instead of by what the server reports (`store::priced`: DynamoDB
    /// Local reports a flat 4 units per table per transaction), when
    /// `WHIMBREL_PRICE_TRANSACTIONS` is `true` or `1`: the bench's local
    /// stack (`scripts/bench.sh`). Otherwise, or for another backend,
    /// unchanged.
    pub fn priced_from_env(self) -> Self {
        let on = std::env::var("WHIMBREL_PRICE_TRANSACTIONS")
            .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        match on {
            true => self.pricing_transactions(),
            false => self,
        }
    }

    /// This DynamoDB store with its transactions priced by AWS's rules
    /// (`store::priced`); another backend unchanged.
    pub fn pricing_transactions(mut self) -> Self {
        if let Some(client) = &self.client {
            let defs = whimbrel_rules::schema::definitions(&self.tables);
            let backend = dynamo::DynamoBackend::with_metrics(client.clone(), self.metrics.clone())
                .pricing_transactions(defs);
            self.backend = Arc::new(backend);
        }
        self
    }

    /// A store over any backend (the simulation's in-memory model).
    pub fn with_backend(backend: Arc<dyn Backend>, tables: Tables) -> Self {
        Store {
            backend,
            client: None,
            tables,
            metrics: Metrics::default(),
        }
    }

    /// The SDK client of a DynamoDB store (`None` for other backends), for
    /// what only DynamoDB has: table creation, streams.
    pub fn client(&self) -> Option<&aws_sdk_dynamodb::Client> {
        self.client.as_ref()
    }

    /// The table names.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The request counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Wait `millis` (through the backend: no real wait in a simulation).
    pub async fn pause(&self, millis: u64) {
        self.backend.pause(millis).await
    }

    /// PutItem with `attribute_not_exists(hash_key)`. Returns false if an
    /// item with that key already exists.
    pub async fn put_new<T: Serialize>(
        &self,
        table: &str,
        hash_key: &str,
        value: &T,
    ) -> Result<bool, StoreError> {
        let item: Item = serde_dynamo::to_item(value).map_err(shape(table))?;
        self.metrics.record("PutItem", 1);
        self.metrics.call("dynamodb:PutItem", table, None);
        match self
            .backend
            .put(table.into(), item, Some(Cond::not_exists(hash_key)))
            .await
        {
            Ok(()) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// PutItem of `write` (a [`Write::Put`]) with its condition. Returns
    /// false when the condition was false.
    ///
    /// Errors: DynamoDB's; [`StoreError::Shape`] for a write not a put.
    pub async fn put_if(&self, write: Write) -> Result<bool, StoreError> {
        let Write::Put { table, item, cond } = write else {
            return Err(StoreError::Invalid {
                op: "PutItem",
                message: "put_if takes a put".into(),
            });
        };
        self.metrics.record("PutItem", 1);
        self.metrics.call("dynamodb:PutItem", &table, None);
        match self.backend.put(table, item, cond).await {
            Ok(()) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// PutItem without condition (registration, install status).
    pub async fn put<T: Serialize>(&self, table: &str, value: &T) -> Result<(), StoreError> {
        let item: Item = serde_dynamo::to_item(value).map_err(shape(table))?;
        self.metrics.record("PutItem", 1);
        self.metrics.call("dynamodb:PutItem", table, None);
        self.backend.put(table.into(), item, None).await
    }

    /// Strongly consistent GetItem, converted to `T`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        table: &str,
        key: Item,
    ) -> Result<Option<T>, StoreError> {
        self.get_projected(table, key, &[]).await
    }

    /// Strongly consistent GetItem of only the attributes in `projection`
    /// (all of them when empty), converted to `T`. A projection does not
    /// read cheaper (a read unit covers 4 KB of the whole item), but it
    /// returns less.
    pub async fn get_projected<T: DeserializeOwned>(
        &self,
        table: &str,
        key: Item,
        projection: &[&str],
    ) -> Result<Option<T>, StoreError> {
        self.metrics.record("GetItem", 1);
        self.metrics.call("dynamodb:GetItem", table, None);
        let projection = projection.iter().map(|p| (*p).to_string()).collect();
        let item = self.backend.get(table.into(), key, projection).await?;
        item.map(|i| serde_dynamo::from_item(i).map_err(shape(table)))
            .transpose()
    }

    /// UpdateItem. A false condition is [`StoreError::ConditionFailed`].
    pub async fn update(&self, req: UpdateRequest) -> Result<(), StoreError> {
        self.update_item(req, false).await.map(|_| ())
    }

    /// UpdateItem returning the item after the update (`ReturnValues:
    /// ALL_NEW`; `None` only where a backend gives nothing back). A false
    /// condition is [`StoreError::ConditionFailed`].
    pub async fn update_returning_new(
        &self,
        req: UpdateRequest,
    ) -> Result<Option<Item>, StoreError> {
        self.update_item(req, true).await
    }

    async fn update_item(
        &self,
        req: UpdateRequest,
        return_new: bool,
    ) -> Result<Option<Item>, StoreError> {
        self.metrics.record("UpdateItem", 1);
        self.metrics.call("dynamodb:UpdateItem", &req.table, None);
        self.backend
            .update(req.table, req.key, req.actions, req.cond, return_new)
            .await
    }

    /// TransactWriteItems: all apply or none. A false condition in any of
    /// them is [`StoreError::ConditionFailed`]; a conflict with another
    /// transaction is [`StoreError::Conflict`].
    pub async fn transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        self.metrics.record("TransactWriteItems", writes.len());
        for w in &writes {
            let action = match w {
                Write::Put { .. } => "dynamodb:PutItem",
                Write::Update { .. } => "dynamodb:UpdateItem",
            };
            self.metrics.call(action, w.table(), None);
        }
        self.backend.transact(writes).await
    }

    /// `writes`, all or none, at the lowest price: one write alone is its
    /// own PutItem or UpdateItem (DynamoDB bills a transaction's items
    /// twice), more are one TransactWriteItems. A false condition is
    /// [`StoreError::ConditionFailed`]; a conflict between transactions is
    /// [`StoreError::Conflict`].
    pub async fn write_all(&self, mut writes: Vec<Write>) -> Result<(), StoreError> {
        if writes.len() != 1 {
            return self.transact(writes).await;
        }
        match writes.remove(0) {
            put @ Write::Put { .. } => match self.put_if(put).await? {
                true => Ok(()),
                false => Err(StoreError::ConditionFailed),
            },
            Write::Update {
                table,
                key,
                actions,
                cond,
            } => {
                let req = UpdateRequest {
                    table,
                    key,
                    actions,
                    cond,
                };
                self.update(req).await.map(|_| ())
            }
        }
    }

    /// BatchWriteItem puts, 25 per request, resending unprocessed items with
    /// backoff. Unconditional: callers only use it for items whose content
    /// is deterministic (ids derived from their parents).
    pub async fn batch_put<T: Serialize>(
        &self,
        table: &str,
        values: &[T],
    ) -> Result<(), StoreError> {
        for chunk in values.chunks(BATCH_WRITE_MAX) {
            let mut pending = chunk
                .iter()
                .map(|v| serde_dynamo::to_item(v).map_err(shape(table)))
                .collect::<Result<Vec<Item>, _>>()?;
            let mut delay = 25;
            for attempt in 0.. {
                self.metrics.record("BatchWriteItem", pending.len());
                self.metrics.call("dynamodb:BatchWriteItem", table, None);
                pending = self.backend.batch_put(table.into(), pending).await?;
                if pending.is_empty() {
                    break;
                }
                if attempt >= UNPROCESSED_RETRIES {
                    return Err(StoreError::Transient {
                        op: "BatchWriteItem",
                        message: format!("{} items still unprocessed", pending.len()),
                    });
                }
                self.pause(delay).await;
                delay *= 2;
            }
        }
        Ok(())
    }

    /// BatchGetItem (strongly consistent), 100 keys per request, resending
    /// unprocessed keys. The order of the result is not the order of `keys`.
    pub async fn batch_get<T: DeserializeOwned>(
        &self,
        table: &str,
        keys: Vec<Item>,
    ) -> Result<Vec<T>, StoreError> {
        self.batch_get_each(table, keys)
            .await?
            .into_iter()
            .collect()
    }

    /// [`Store::batch_get`], converting each item on its own: an item that
    /// is not a `T` (a hostile row in a write-once table) is an `Err` in
    /// its place, not a failure of the whole read.
    ///
    /// Errors: the read's.
    pub async fn batch_get_each<T: DeserializeOwned>(
        &self,
        table: &str,
        keys: Vec<Item>,
    ) -> Result<Vec<Result<T, StoreError>>, StoreError> {
        Ok((self.batch_get_items(table, keys).await?.into_iter())
            .map(|i| serde_dynamo::from_item(i).map_err(shape(table)))
            .collect())
    }

    /// [`Store::batch_get`]'s items as stored, not converted (in no
    /// particular order; unprocessed keys retried with backoff).
    ///
    /// Errors: the read's, or keys still unprocessed after the retries.
    pub async fn batch_get_items(
        &self,
        table: &str,
        keys: Vec<Item>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_MAX) {
            let mut pending = chunk.to_vec();
            let mut delay = 25;
            for attempt in 0.. {
                self.metrics.record("BatchGetItem", pending.len());
                self.metrics.call("dynamodb:BatchGetItem", table, None);
                let (found, left) = self.backend.batch_get(table.into(), pending).await?;
                out.extend(found);
                pending = left;
                if pending.is_empty() {
                    break;
                }
                if attempt >= UNPROCESSED_RETRIES {
                    return Err(StoreError::Transient {
                        op: "BatchGetItem",
                        message: "keys still unprocessed".into(),
                    });
                }
                self.pause(delay).await;
                delay *= 2;
            }
        }
        Ok(out)
    }

    /// The first `limit` items of a Query of `table` (or `index`) for
    /// `key`, in range key order.
    pub async fn query_first<T: DeserializeOwned>(
        &self,
        table: &str,
        index: Option<&str>,
        key: KeyCond,
        limit: i32,
    ) -> Result<Vec<T>, StoreError> {
        self.metrics.record("Query", 1);
        self.metrics.call("dynamodb:Query", table, index);
        let items = self
            .backend
            .query_limited(table.into(), index.map(str::to_string), key, limit)
            .await?;
        items
            .into_iter()
            .map(|i| serde_dynamo::from_item(i).map_err(shape(table)))
            .collect()
    }

    /// Query every page of `table` (or `index`) for `key`. Reads of the
    /// table are consistent; reads of a GSI are eventually consistent.
    pub async fn query<T: DeserializeOwned>(
        &self,
        table: &str,
        index: Option<&str>,
        key: KeyCond,
    ) -> Result<Vec<T>, StoreError> {
        self.query_raw(table, index, key)
            .await?
            .into_iter()
            .map(|i| serde_dynamo::from_item(i).map_err(shape(table)))
            .collect()
    }

    /// The first `max` items of a query, in range key order, page by page
    /// (each page at most DynamoDB's 1 MB), and whether more exist: a read
    /// whose memory and time are bounded however many items the key holds.
    /// Each item holds only the attributes in `projection` (every one when
    /// empty).
    ///
    /// Errors: the query's.
    pub(crate) async fn query_at_most(
        &self,
        (table, index): (&str, Option<&str>),
        key: KeyCond,
        max: usize,
        projection: &[&str],
    ) -> Result<(Vec<Item>, bool), StoreError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            self.metrics.record("Query", 1);
            self.metrics.call("dynamodb:Query", table, index);
            let (table, index) = (table.to_string(), index.map(str::to_string));
            let (items, last) = match projection {
                [] => self.backend.query(table, index, key.clone(), start.take()),
                p => {
                    let p = p.iter().map(|a| a.to_string()).collect();
                    (self.backend).query_projected(table, index, (key.clone(), start.take()), p)
                }
            }
            .await?;
            out.extend(items);
            let more = matches!(&last, Some(k) if !k.is_empty());
            if out.len() > max {
                out.truncate(max);
                return Ok((out, true));
            }
            if !more || out.len() == max {
                return Ok((out, more));
            }
            start = last;
        }
    }

    /// Every item of a query, as DynamoDB returned them (all pages).
    ///
    /// Errors: the query's.
    pub(crate) async fn query_raw(
        &self,
        table: &str,
        index: Option<&str>,
        key: KeyCond,
    ) -> Result<Vec<Item>, StoreError> {
        Ok(self
            .query_at_most((table, index), key, usize::MAX, &[])
            .await?
            .0)
    }

    /// The items a KEYS_ONLY index finds: Query the index for the keys,
    /// then read the items from the table (strongly consistent
    /// BatchGetItem) by its key attributes `table_key` (hash, range). An
    /// item deleted in between is left out.
    ///
    /// Errors: the query's or the read's, or an item that is not a `T`.
    pub async fn query_keys_only<T: DeserializeOwned>(
        &self,
        table: &str,
        index: &str,
        key: KeyCond,
        table_key: [&str; 2],
    ) -> Result<Vec<T>, StoreError> {
        let keys: Vec<Item> = self
            .query_raw(table, Some(index), key)
            .await?
            .into_iter()
            .map(|mut i| {
                table_key
                    .iter()
                    .filter_map(|k| i.remove_entry(*k))
                    .collect()
            })
            .collect();
        if keys.is_empty() {
            return Ok(vec![]);
        }
        self.batch_get(table, keys).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(shard_of("a"), shard_of("a"));
        let mut seen = std::collections::HashSet::new();
        for i in 0..200 {
            seen.insert(shard_of(&format!("count-{i}::x")));
        }
        assert_eq!(seen.len(), INDEX_SHARDS as usize);
    }

    #[test]
    fn table_names_use_the_prefix() {
        let t = Tables::new("t1_");
        assert_eq!(t.workflow_request(), "t1_workflow_request");
        assert_eq!(t.activity_exec_dependency(), "t1_activity_exec_dependency");
    }

    #[test]
    fn write_items_sums_write_operations() {
        let m = Metrics::default();
        m.record("PutItem", 1);
        m.record("BatchWriteItem", 25);
        m.record("TransactWriteItems", 2);
        m.record("GetItem", 1);
        assert_eq!(Metrics::write_items(&m.snapshot()), 28);
        assert_eq!(m.take().len(), 4);
        assert!(m.snapshot().is_empty());
    }
}
