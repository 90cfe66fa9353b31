//! The thin DynamoDB store: table names, item (de)serialization, and the
//! few request shapes the engine uses (conditional put, update, transaction,
//! batch write, get, query). Every request is counted per operation so the
//! engine's cost can be measured (see [`Metrics`]).
//!
//! No Scan anywhere: every cross-item read is a Query on a table or GSI
//! (DESIGN 2.2). Index names are defined here and in `docs/tables.md`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, PutRequest, ReturnValue, TransactWriteItem, Update,
    WriteRequest,
};
use aws_sdk_dynamodb::Client;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A DynamoDB item as the SDK sees it.
pub type Item = HashMap<String, AttributeValue>;

/// Default table name prefix (whimbrel-architecture.md).
pub const DEFAULT_TABLE_PREFIX: &str = "whimbrel_";

/// GSI of `activity_exec`: a workflow's activities (`workflow_exec_id` HASH,
/// `activity_name` RANGE). Used by `whimbrel status`.
pub const INDEX_ACTIVITIES_BY_WORKFLOW: &str = "workflow_exec_id-activity_name-index";
/// Sparse GSI of `activity_exec`: activities the heartbeat monitor watches
/// (`heartbeat_shard` HASH, `heartbeat_deadline_epoch` RANGE).
pub const INDEX_HEARTBEAT: &str = "heartbeat_shard-heartbeat_deadline_epoch-index";
/// Sparse GSI of `activity_exec`: QUEUED activities whose launch is not yet
/// recorded (`launch_shard` HASH, `queued_time_epoch` RANGE).
pub const INDEX_LAUNCH: &str = "launch_shard-queued_time_epoch-index";
/// GSI of `workflow_exec`: workflows by state and start time.
pub const INDEX_WORKFLOWS_BY_STATE: &str = "state-start_time_epoch-index";
/// GSI of `activity_exec_dependency`: the edges whose prerequisite is a
/// given activity (who waits for it).
pub const INDEX_WAITERS: &str = "dependent_activity_exec_id-index";
/// GSI of `activity_exec_dependency`: a workflow's edges.
pub const INDEX_EDGES_BY_WORKFLOW: &str = "workflow_exec_id-index";

/// Number of shards of the sparse heartbeat and launch GSIs, so one hot
/// partition key value cannot cap writes at 1,000/s (DESIGN 2.2).
pub const INDEX_SHARDS: u32 = 8;

/// The shard (0..[`INDEX_SHARDS`]) of an activity exec in the sparse GSIs.
pub fn shard_of(activity_exec_id: &str) -> u32 {
    // FNV-1a: stable across processes and releases, unlike `DefaultHasher`.
    let mut h: u32 = 0x811c_9dc5;
    for b in activity_exec_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % INDEX_SHARDS
}

/// The seven table names for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    /// The prefix, default `whimbrel_`.
    pub prefix: String,
}

impl Tables {
    /// Tables named `{prefix}{suffix}`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Tables {
            prefix: prefix.into(),
        }
    }
    fn name(&self, suffix: &str) -> String {
        format!("{}{}", self.prefix, suffix)
    }
    /// `whimbrel_install_status`.
    pub fn install_status(&self) -> String {
        self.name("install_status")
    }
    /// `whimbrel_workflow_request` (stream).
    pub fn workflow_request(&self) -> String {
        self.name("workflow_request")
    }
    /// `whimbrel_activity_event` (stream).
    pub fn activity_event(&self) -> String {
        self.name("activity_event")
    }
    /// `whimbrel_workflow_exec`.
    pub fn workflow_exec(&self) -> String {
        self.name("workflow_exec")
    }
    /// `whimbrel_activity_exec`.
    pub fn activity_exec(&self) -> String {
        self.name("activity_exec")
    }
    /// `whimbrel_activity_exec_dependency`.
    pub fn activity_exec_dependency(&self) -> String {
        self.name("activity_exec_dependency")
    }
    /// `whimbrel_workflow_lambda`.
    pub fn workflow_lambda(&self) -> String {
        self.name("workflow_lambda")
    }
}

/// A store request that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A condition expression (or a transaction's condition) was false.
    #[error("conditional write failed")]
    ConditionFailed,
    /// A transaction was cancelled because another one touched the same
    /// item (`TransactionConflict`); deciding again may succeed at once.
    #[error("transaction conflict")]
    Conflict,
    /// Throttling, a transaction conflict, a 5xx or a network error: the
    /// same request may succeed later.
    #[error("{op}: transient DynamoDB error: {message}")]
    Transient {
        /// The operation, e.g. `UpdateItem`.
        op: &'static str,
        /// The error text.
        message: String,
    },
    /// Any other error (validation, missing table, access denied...).
    #[error("{op}: DynamoDB error: {message}")]
    Other {
        /// The operation.
        op: &'static str,
        /// The error text.
        message: String,
    },
    /// An item that does not have the expected shape.
    #[error("{table}: item does not match its type: {source}")]
    Shape {
        /// The table read.
        table: String,
        /// The conversion error.
        source: serde_dynamo::Error,
    },
}

impl StoreError {
    /// True when the same request may succeed later.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Transient { .. })
    }
}

const TRANSIENT_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionConflictException",
    "TransactionInProgressException",
];

fn classify<E>(
    op: &'static str,
    e: SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match &e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            let code = err.code().unwrap_or("");
            let message = format!("{code}: {}", err.message().unwrap_or(""));
            if code == "ConditionalCheckFailedException" {
                StoreError::ConditionFailed
            } else if TRANSIENT_CODES.contains(&code) || se.raw().status().is_server_error() {
                StoreError::Transient { op, message }
            } else {
                StoreError::Other { op, message }
            }
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            StoreError::Transient {
                op,
                message: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
            }
        }
        _ => StoreError::Other {
            op,
            message: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
        },
    }
}

/// Requests and items per DynamoDB operation, counted by the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpCount {
    /// API calls.
    pub requests: u64,
    /// Items written or read by those calls (a BatchWriteItem of 25 items
    /// counts 25; a TransactWriteItems of 2 items counts 2).
    pub items: u64,
}

/// Per-operation request counters, shared by clones of a [`Store`].
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<BTreeMap<&'static str, OpCount>>>,
}

impl Metrics {
    fn record(&self, op: &'static str, items: usize) {
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
}

/// An UpdateItem request, built by the engine, run alone or in a
/// transaction by the store.
#[derive(Debug, Clone, Default)]
pub struct UpdateRequest {
    /// Table name.
    pub table: String,
    /// Full primary key.
    pub key: Item,
    /// `SET ... REMOVE ... ADD ...`.
    pub update: String,
    /// Condition expression, if any.
    pub condition: Option<String>,
    /// `#name` placeholders.
    pub names: HashMap<String, String>,
    /// `:value` placeholders.
    pub values: Item,
}

impl UpdateRequest {
    /// A new request on `table` for `key`.
    pub fn new(table: String, key: Item) -> Self {
        UpdateRequest {
            table,
            key,
            ..Default::default()
        }
    }
    /// Bind `#alias` to attribute `name`.
    pub fn name(mut self, alias: &str, name: &str) -> Self {
        self.names.insert(alias.into(), name.into());
        self
    }
    /// Bind `:alias` to `value`.
    pub fn value(mut self, alias: &str, value: AttributeValue) -> Self {
        self.values.insert(alias.into(), value);
        self
    }

    /// Drop placeholders the expressions do not use (DynamoDB rejects
    /// unused ones), so builders may bind values unconditionally.
    fn prune(mut self) -> Self {
        let text = format!(
            "{} {}",
            self.update,
            self.condition.as_deref().unwrap_or("")
        );
        let used = |alias: &str| {
            text.match_indices(alias).any(|(i, _)| {
                !text[i + alias.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        };
        self.values.retain(|k, _| used(k));
        self.names.retain(|k, _| used(k));
        self
    }
}

/// Convert a value to an attribute value; panics only on types serde_dynamo
/// cannot represent, which the engine never passes.
pub fn av<T: Serialize>(v: &T) -> AttributeValue {
    serde_dynamo::to_attribute_value(v).expect("value representable as a DynamoDB attribute")
}

/// A string attribute value.
pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute value.
pub fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The thin DynamoDB store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    client: Client,
    tables: Tables,
    metrics: Metrics,
}

const BATCH_WRITE_MAX: usize = 25;
const BATCH_GET_MAX: usize = 100;

impl Store {
    /// A store over `client` for the tables of `tables`.
    pub fn new(client: Client, tables: Tables) -> Self {
        Store {
            client,
            tables,
            metrics: Metrics::default(),
        }
    }

    /// The table names.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The request counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// PutItem with `attribute_not_exists(hash_key)`. Returns false if an
    /// item with that key already exists.
    pub async fn put_new<T: Serialize>(
        &self,
        table: &str,
        hash_key: &str,
        value: &T,
    ) -> Result<bool, StoreError> {
        let item: Item = serde_dynamo::to_item(value).map_err(|e| StoreError::Shape {
            table: table.into(),
            source: e,
        })?;
        self.metrics.record("PutItem", 1);
        let r = self
            .client
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", hash_key)
            .send()
            .await;
        match r.map_err(|e| classify("PutItem", e)) {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// PutItem without condition (registration, install status).
    pub async fn put<T: Serialize>(&self, table: &str, value: &T) -> Result<(), StoreError> {
        let item: Item = serde_dynamo::to_item(value).map_err(|e| StoreError::Shape {
            table: table.into(),
            source: e,
        })?;
        self.metrics.record("PutItem", 1);
        self.client
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| classify("PutItem", e))?;
        Ok(())
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
    /// (all of them when empty; each is read through a `#name` placeholder
    /// so reserved words are fine), converted to `T`. Reading less costs
    /// less: a read request unit covers 4 KB.
    pub async fn get_projected<T: DeserializeOwned>(
        &self,
        table: &str,
        key: Item,
        projection: &[&str],
    ) -> Result<Option<T>, StoreError> {
        self.metrics.record("GetItem", 1);
        let names: HashMap<String, String> = projection
            .iter()
            .enumerate()
            .map(|(i, attr)| (format!("#p{i}"), (*attr).to_string()))
            .collect();
        let expression = (0..projection.len())
            .map(|i| format!("#p{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .set_projection_expression((!projection.is_empty()).then_some(expression))
            .set_expression_attribute_names((!names.is_empty()).then_some(names))
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        out.item.map(|i| self.decode(table, i)).transpose()
    }

    fn decode<T: DeserializeOwned>(&self, table: &str, item: Item) -> Result<T, StoreError> {
        serde_dynamo::from_item(item).map_err(|e| StoreError::Shape {
            table: table.into(),
            source: e,
        })
    }

    /// UpdateItem. With `return_new`, returns the item after the update.
    /// A false condition is [`StoreError::ConditionFailed`].
    pub async fn update(
        &self,
        req: UpdateRequest,
        return_new: bool,
    ) -> Result<Option<Item>, StoreError> {
        let req = req.prune();
        self.metrics.record("UpdateItem", 1);
        let out = self
            .client
            .update_item()
            .table_name(req.table)
            .set_key(Some(req.key))
            .update_expression(req.update)
            .set_condition_expression(req.condition)
            .set_expression_attribute_names((!req.names.is_empty()).then_some(req.names))
            .set_expression_attribute_values((!req.values.is_empty()).then_some(req.values))
            .return_values(if return_new {
                ReturnValue::AllNew
            } else {
                ReturnValue::None
            })
            .send()
            .await
            .map_err(|e| classify("UpdateItem", e))?;
        Ok(out.attributes)
    }

    /// TransactWriteItems of updates: all apply or none. A false condition
    /// in any of them is [`StoreError::ConditionFailed`].
    pub async fn transact_update(&self, reqs: Vec<UpdateRequest>) -> Result<(), StoreError> {
        let n = reqs.len();
        let mut items = Vec::with_capacity(n);
        for req in reqs {
            let req = req.prune();
            let u = Update::builder()
                .table_name(req.table)
                .set_key(Some(req.key))
                .update_expression(req.update)
                .set_condition_expression(req.condition)
                .set_expression_attribute_names((!req.names.is_empty()).then_some(req.names))
                .set_expression_attribute_values((!req.values.is_empty()).then_some(req.values))
                .build()
                .map_err(|e| StoreError::Other {
                    op: "TransactWriteItems",
                    message: e.to_string(),
                })?;
            items.push(TransactWriteItem::builder().update(u).build());
        }
        self.metrics.record("TransactWriteItems", n);
        let r = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(se)) if se.err().is_transaction_canceled_exception() => {
                let reasons: Vec<String> = match se.err() {
                    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(t) => t
                        .cancellation_reasons()
                        .iter()
                        .filter_map(|r| r.code().map(str::to_string))
                        .collect(),
                    _ => vec![],
                };
                if reasons.iter().any(|c| c == "ConditionalCheckFailed") {
                    Err(StoreError::ConditionFailed)
                } else if reasons.iter().any(|c| c == "TransactionConflict") {
                    Err(StoreError::Conflict)
                } else {
                    Err(StoreError::Transient {
                        op: "TransactWriteItems",
                        message: format!("transaction cancelled: {reasons:?}"),
                    })
                }
            }
            Err(e) => Err(classify("TransactWriteItems", e)),
        }
    }

    /// BatchWriteItem puts, 25 per request, resending unprocessed items with
    /// backoff. Unconditional: callers only use it for items whose content
    /// is deterministic (DESIGN 3.7).
    pub async fn batch_put<T: Serialize>(
        &self,
        table: &str,
        values: &[T],
    ) -> Result<(), StoreError> {
        for chunk in values.chunks(BATCH_WRITE_MAX) {
            let mut pending: Vec<WriteRequest> = Vec::with_capacity(chunk.len());
            for v in chunk {
                let item: Item = serde_dynamo::to_item(v).map_err(|e| StoreError::Shape {
                    table: table.into(),
                    source: e,
                })?;
                let put = PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map_err(|e| StoreError::Other {
                        op: "BatchWriteItem",
                        message: e.to_string(),
                    })?;
                pending.push(WriteRequest::builder().put_request(put).build());
            }
            let mut delay = Duration::from_millis(25);
            for attempt in 0.. {
                self.metrics.record("BatchWriteItem", pending.len());
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(table, std::mem::take(&mut pending))
                    .send()
                    .await
                    .map_err(|e| classify("BatchWriteItem", e))?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(table))
                    .unwrap_or_default();
                if pending.is_empty() {
                    break;
                }
                if attempt >= 8 {
                    return Err(StoreError::Transient {
                        op: "BatchWriteItem",
                        message: format!("{} items still unprocessed", pending.len()),
                    });
                }
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
        Ok(())
    }

    /// BatchGetItem (strongly consistent), 100 keys per request, resending
    /// unprocessed keys. Order of the result is not the order of `keys`.
    pub async fn batch_get<T: DeserializeOwned>(
        &self,
        table: &str,
        keys: Vec<Item>,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_MAX) {
            let mut pending = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(chunk.to_vec()))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| StoreError::Other {
                        op: "BatchGetItem",
                        message: e.to_string(),
                    })?,
            );
            let mut delay = Duration::from_millis(25);
            let mut attempt = 0;
            while let Some(ka) = pending.take() {
                self.metrics.record("BatchGetItem", ka.keys().len());
                let r = self
                    .client
                    .batch_get_item()
                    .request_items(table, ka)
                    .send()
                    .await
                    .map_err(|e| classify("BatchGetItem", e))?;
                for i in r
                    .responses
                    .and_then(|mut m| m.remove(table))
                    .unwrap_or_default()
                {
                    out.push(self.decode(table, i)?);
                }
                pending = r
                    .unprocessed_keys
                    .and_then(|mut m| m.remove(table))
                    .filter(|k| !k.keys().is_empty());
                if pending.is_some() {
                    attempt += 1;
                    if attempt > 8 {
                        return Err(StoreError::Transient {
                            op: "BatchGetItem",
                            message: "keys still unprocessed".into(),
                        });
                    }
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        Ok(out)
    }

    /// Query every page of `table` (or `index`) for `key_condition`.
    /// Consistent reads only apply to the table itself.
    pub async fn query<T: DeserializeOwned>(
        &self,
        table: &str,
        index: Option<&str>,
        key_condition: &str,
        names: HashMap<String, String>,
        values: Item,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            self.metrics.record("Query", 1);
            let r = self
                .client
                .query()
                .table_name(table)
                .set_index_name(index.map(str::to_string))
                .key_condition_expression(key_condition)
                .set_expression_attribute_names((!names.is_empty()).then(|| names.clone()))
                .set_expression_attribute_values(Some(values.clone()))
                .consistent_read(index.is_none())
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| classify("Query", e))?;
            for i in r.items.unwrap_or_default() {
                out.push(self.decode(table, i)?);
            }
            match r.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
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
