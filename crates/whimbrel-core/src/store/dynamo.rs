//! The DynamoDB backend: the only place DynamoDB expression strings are
//! built, from the typed conditions and actions of [`whimbrel_rules::write`].

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeValue as SdkValue, ConsumedCapacity, KeysAndAttributes, Put, PutRequest,
    ReturnConsumedCapacity, ReturnValue, TransactWriteItem, Update, WriteRequest,
};
use aws_sdk_dynamodb::Client;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Action, Cond, KeyCond, Write};
use super::{Backend, Found, Item, Metrics, Page, StoreError, Value as AttributeValue};

/// An item as the SDK types it.
type SdkItem = HashMap<String, SdkValue>;

/// The rules' item as the SDK's (the store boundary).
fn to_sdk(item: Item) -> SdkItem {
    item.into_iter().map(|(k, v)| (k, v.into())).collect()
}

/// The SDK's item as the rules' (the store boundary).
fn from_sdk(item: SdkItem) -> Item {
    item.into_iter().map(|(k, v)| (k, v.into())).collect()
}

/// DynamoDB through the AWS SDK. Cheap to clone. Every request asks for
/// `ReturnConsumedCapacity: INDEXES`, and what DynamoDB reports is added to
/// the backend's [`Metrics`] (the bench's cost accounting).
#[derive(Debug, Clone)]
pub struct DynamoBackend {
    client: Client,
    metrics: Metrics,
    /// The tables whose transactions are priced by AWS's rules rather
    /// than by what the server reports (`store::priced`), if any.
    priced: Option<std::sync::Arc<Vec<whimbrel_rules::schema::TableDef>>>,
}

const CAPACITY: ReturnConsumedCapacity = ReturnConsumedCapacity::Indexes;

impl DynamoBackend {
    /// A backend over `client`, with counters of its own.
    pub fn new(client: Client) -> Self {
        Self::with_metrics(client, Metrics::default())
    }

    /// A backend over `client` that adds the consumed capacity to `metrics`
    /// (the store's, see [`super::Store::new`]).
    pub fn with_metrics(client: Client, metrics: Metrics) -> Self {
        DynamoBackend {
            client,
            metrics,
            priced: None,
        }
    }

    /// This backend pricing its transactions on the tables `defs` by
    /// AWS's rules (`store::priced`; the bench's local stack only).
    pub fn pricing_transactions(mut self, defs: Vec<whimbrel_rules::schema::TableDef>) -> Self {
        self.priced = Some(std::sync::Arc::new(defs));
        self
    }

    /// A Query of `table` (or its GSI `index`: eventually consistent; the
    /// table itself is read consistently) for `key`, returning only the
    /// attributes in `projection` (all when empty), its consumed capacity
    /// asked for.
    fn query_request(
        &self,
        table: String,
        index: Option<String>,
        key: &KeyCond,
        projection: &[String],
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        let mut x = Expressions::default();
        let text = x.key(key);
        let proj: Vec<String> = projection.iter().map(|p| x.name(p)).collect();
        self.client
            .query()
            .table_name(table)
            .consistent_read(index.is_none())
            .set_index_name(index)
            .key_condition_expression(text)
            .set_projection_expression((!proj.is_empty()).then(|| proj.join(", ")))
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .return_consumed_capacity(CAPACITY)
    }

    fn consumed<'a>(&self, op: &'static str, c: impl IntoIterator<Item = &'a ConsumedCapacity>) {
        for c in c {
            self.metrics.consumed(op, c);
        }
    }
}

/// Expression text with its `#n` / `:v` placeholders.
#[derive(Debug, Default)]
pub struct Expressions {
    /// `#n0` → attribute name.
    pub names: HashMap<String, String>,
    /// `:v0` → value.
    pub values: HashMap<String, AttributeValue>,
}

impl Expressions {
    fn name(&mut self, attr: &str) -> String {
        if let Some((k, _)) = self.names.iter().find(|(_, v)| v.as_str() == attr) {
            return k.clone();
        }
        let k = format!("#n{}", self.names.len());
        self.names.insert(k.clone(), attr.into());
        k
    }

    fn value(&mut self, v: &AttributeValue) -> String {
        let k = format!(":v{}", self.values.len());
        self.values.insert(k.clone(), v.clone());
        k
    }

    /// The text of a condition.
    pub fn condition(&mut self, c: &Cond) -> String {
        match c {
            Cond::Exists(a) => format!("attribute_exists({})", self.name(a)),
            Cond::NotExists(a) => format!("attribute_not_exists({})", self.name(a)),
            Cond::Compare(a, op, v) => {
                let (name, value) = (self.name(a), self.value(v));
                op.render(&name, &value)
            }
            Cond::In(a, vs) => {
                let n = self.name(a);
                let list: Vec<String> = vs.iter().map(|v| self.value(v)).collect();
                format!("{n} IN ({})", list.join(", "))
            }
            Cond::Contains(a, v) => format!("contains({}, {})", self.name(a), self.value(v)),
            Cond::SizeLt(a, limit) => {
                let (name, value) = (
                    self.name(a),
                    self.value(&AttributeValue::N(limit.to_string())),
                );
                format!("size({name}) < {value}")
            }
            Cond::Not(c) => format!("NOT ({})", self.condition(c)),
            Cond::And(cs) if cs.is_empty() => {
                "attribute_exists(#always) OR attribute_not_exists(#always)"
                    .replace("#always", &self.name("__whimbrel_always"))
            }
            Cond::Or(cs) if cs.is_empty() => {
                "attribute_exists(#never) AND attribute_not_exists(#never)"
                    .replace("#never", &self.name("__whimbrel_never"))
            }
            Cond::And(cs) => self.join(cs, " AND "),
            Cond::Or(cs) => self.join(cs, " OR "),
        }
    }

    fn join(&mut self, cs: &[Cond], sep: &str) -> String {
        cs.iter()
            .map(|c| format!("({})", self.condition(c)))
            .collect::<Vec<_>>()
            .join(sep)
    }

    /// The text of an update (`SET ... REMOVE ... ADD ... DELETE ...`).
    pub fn update(&mut self, actions: &[Action]) -> String {
        let (mut set, mut remove, mut add, mut delete) = (vec![], vec![], vec![], vec![]);
        for a in actions {
            match a {
                Action::Set(n, v) => set.push(format!("{} = {}", self.name(n), self.value(v))),
                Action::SetIfNotExists(n, v) => {
                    let n = self.name(n);
                    set.push(format!("{n} = if_not_exists({n}, {})", self.value(v)))
                }
                Action::Append(n, vs) => {
                    let n = self.name(n);
                    let empty = self.value(&AttributeValue::L(vec![]));
                    let vs = self.value(&AttributeValue::L(vs.clone()));
                    set.push(format!(
                        "{n} = list_append(if_not_exists({n}, {empty}), {vs})"
                    ))
                }
                Action::Remove(n) => remove.push(self.name(n)),
                Action::Add(n, v) => add.push(format!("{} {}", self.name(n), self.value(v))),
                Action::Delete(n, v) => delete.push(format!("{} {}", self.name(n), self.value(v))),
            }
        }
        let mut out = vec![];
        for (word, parts) in [
            ("SET", set),
            ("REMOVE", remove),
            ("ADD", add),
            ("DELETE", delete),
        ] {
            if !parts.is_empty() {
                out.push(format!("{word} {}", parts.join(", ")));
            }
        }
        out.join(" ")
    }

    /// The text of a key condition.
    pub fn key(&mut self, k: &KeyCond) -> String {
        let mut text = format!("{} = {}", self.name(&k.hash.0), self.value(&k.hash.1));
        if let Some((a, op, v)) = &k.range {
            let (name, value) = (self.name(a), self.value(v));
            text.push_str(&format!(" AND {}", op.render(&name, &value)));
        }
        text
    }

    fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    fn values(&self) -> Option<SdkItem> {
        (!self.values.is_empty()).then(|| to_sdk(self.values.clone()))
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
    let text = || aws_smithy_types::error::display::DisplayErrorContext(&e).to_string();
    match &e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            let code = err.code().unwrap_or("");
            let message = format!("{code}: {}", err.message().unwrap_or(""));
            if code == "ConditionalCheckFailedException" {
                StoreError::ConditionFailed
            } else if code == "ValidationException" {
                StoreError::Invalid { op, message }
            } else if TRANSIENT_CODES.contains(&code) || se.raw().status().is_server_error() {
                StoreError::Transient { op, message }
            } else {
                StoreError::Other { op, message }
            }
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            StoreError::Transient {
                op,
                message: text(),
            }
        }
        _ => StoreError::Other {
            op,
            message: text(),
        },
    }
}

fn build_error(op: &'static str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid {
        op,
        message: e.to_string(),
    }
}

impl DynamoBackend {
    async fn do_update(
        &self,
        table: String,
        key: Item,
        actions: Vec<Action>,
        cond: Option<Cond>,
        return_new: bool,
    ) -> Result<Option<Item>, StoreError> {
        let mut x = Expressions::default();
        let update = x.update(&actions);
        let condition = cond.map(|c| x.condition(&c));
        let out = self
            .client
            .update_item()
            .table_name(table)
            .set_key(Some(to_sdk(key)))
            .update_expression(update)
            .set_condition_expression(condition)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .return_values(if return_new {
                ReturnValue::AllNew
            } else {
                ReturnValue::None
            })
            .return_consumed_capacity(CAPACITY)
            .send()
            .await
            .map_err(|e| classify("UpdateItem", e))?;
        self.consumed("UpdateItem", out.consumed_capacity());
        Ok(out.attributes.map(from_sdk))
    }

    async fn do_transact(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        const OP: &str = "TransactWriteItems";
        let defs = self.priced.as_deref();
        let keys = defs.and_then(|d| super::priced::write_keys(&writes, d));
        let before = match &keys {
            Some(k) => super::priced::images(&self.client, k).await,
            None => None,
        };
        let items = writes
            .into_iter()
            .map(transact_item)
            .collect::<Result<Vec<_>, _>>()?;
        let r = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .return_consumed_capacity(CAPACITY)
            .send()
            .await;
        match r {
            Ok(out) => {
                let priced = match (defs, &keys, before) {
                    (Some(defs), Some(keys), Some(before)) => {
                        let after = super::priced::images(&self.client, keys).await;
                        after.map(|after| {
                            super::priced::record(&self.metrics, defs, keys, (&before, &after));
                        })
                    }
                    _ => None,
                };
                if priced.is_none() {
                    self.consumed(OP, out.consumed_capacity());
                }
                Ok(())
            }
            Err(SdkError::ServiceError(se)) if se.err().is_transaction_canceled_exception() => {
                Err(cancelled(se.err()))
            }
            Err(e) => Err(classify(OP, e)),
        }
    }
}

/// One write of a transaction as the SDK's `TransactWriteItem`.
fn transact_item(w: Write) -> Result<TransactWriteItem, StoreError> {
    const OP: &str = "TransactWriteItems";
    let mut x = Expressions::default();
    match w {
        Write::Put { table, item, cond } => {
            let condition = cond.map(|c| x.condition(&c));
            let p = Put::builder()
                .table_name(table)
                .set_item(Some(to_sdk(item)))
                .set_condition_expression(condition)
                .set_expression_attribute_names(x.names())
                .set_expression_attribute_values(x.values())
                .build()
                .map_err(|e| build_error(OP, e))?;
            Ok(TransactWriteItem::builder().put(p).build())
        }
        Write::Update {
            table,
            key,
            actions,
            cond,
        } => {
            let update = x.update(&actions);
            let condition = cond.map(|c| x.condition(&c));
            let u = Update::builder()
                .table_name(table)
                .set_key(Some(to_sdk(key)))
                .update_expression(update)
                .set_condition_expression(condition)
                .set_expression_attribute_names(x.names())
                .set_expression_attribute_values(x.values())
                .build()
                .map_err(|e| build_error(OP, e))?;
            Ok(TransactWriteItem::builder().update(u).build())
        }
    }
}

/// A cancelled transaction, by its cancellation reasons: a failed
/// condition, an invalid write, a conflict with another transaction, or
/// (anything else) a transient failure.
fn cancelled(
    err: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
) -> StoreError {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError as E;
    const OP: &str = "TransactWriteItems";
    let reasons: Vec<(String, String)> = match err {
        E::TransactionCanceledException(t) => t
            .cancellation_reasons()
            .iter()
            .map(|r| {
                (
                    r.code().unwrap_or("").to_string(),
                    r.message().unwrap_or("").to_string(),
                )
            })
            .collect(),
        _ => vec![],
    };
    let has = |c: &str| reasons.iter().any(|(code, _)| code == c);
    if has("ConditionalCheckFailed") {
        StoreError::ConditionFailed
    } else if has("ValidationError") {
        StoreError::Invalid {
            op: OP,
            message: format!("transaction cancelled: {reasons:?}"),
        }
    } else if has("TransactionConflict") {
        StoreError::Conflict
    } else {
        StoreError::Transient {
            op: OP,
            message: format!("transaction cancelled: {reasons:?}"),
        }
    }
}

impl Backend for DynamoBackend {
    fn get(
        &self,
        table: String,
        key: Item,
        projection: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        async move {
            let mut x = Expressions::default();
            let proj: Vec<String> = projection.iter().map(|p| x.name(p)).collect();
            let out = self
                .client
                .get_item()
                .table_name(table)
                .set_key(Some(to_sdk(key)))
                .consistent_read(true)
                .set_projection_expression((!proj.is_empty()).then(|| proj.join(", ")))
                .set_expression_attribute_names(x.names())
                .return_consumed_capacity(CAPACITY)
                .send()
                .await
                .map_err(|e| classify("GetItem", e))?;
            self.consumed("GetItem", out.consumed_capacity());
            Ok(out.item.map(from_sdk))
        }
        .boxed()
    }

    fn put(
        &self,
        table: String,
        item: Item,
        cond: Option<Cond>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            let mut x = Expressions::default();
            let condition = cond.map(|c| x.condition(&c));
            let out = self
                .client
                .put_item()
                .table_name(table)
                .set_item(Some(to_sdk(item)))
                .set_condition_expression(condition)
                .set_expression_attribute_names(x.names())
                .set_expression_attribute_values(x.values())
                .return_consumed_capacity(CAPACITY)
                .send()
                .await
                .map_err(|e| classify("PutItem", e))?;
            self.consumed("PutItem", out.consumed_capacity());
            Ok(())
        }
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
        self.do_update(table, key, actions, cond, return_new)
            .boxed()
    }

    fn transact(&self, writes: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.do_transact(writes).boxed()
    }

    fn batch_put(
        &self,
        table: String,
        items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        async move {
            let mut reqs = Vec::with_capacity(items.len());
            for item in items {
                let put = PutRequest::builder()
                    .set_item(Some(to_sdk(item)))
                    .build()
                    .map_err(|e| build_error("BatchWriteItem", e))?;
                reqs.push(WriteRequest::builder().put_request(put).build());
            }
            let out = self
                .client
                .batch_write_item()
                .request_items(&table, reqs)
                .return_consumed_capacity(CAPACITY)
                .send()
                .await
                .map_err(|e| classify("BatchWriteItem", e))?;
            self.consumed("BatchWriteItem", out.consumed_capacity());
            Ok(out
                .unprocessed_items
                .and_then(|mut m| m.remove(&table))
                .unwrap_or_default()
                .into_iter()
                .filter_map(|w| w.put_request.map(|p| from_sdk(p.item)))
                .collect())
        }
        .boxed()
    }

    fn batch_get(
        &self,
        table: String,
        keys: Vec<Item>,
    ) -> BoxFuture<'_, Result<Found, StoreError>> {
        async move {
            let ka = KeysAndAttributes::builder()
                .set_keys(Some(keys.into_iter().map(to_sdk).collect()))
                .consistent_read(true)
                .build()
                .map_err(|e| build_error("BatchGetItem", e))?;
            let r = self
                .client
                .batch_get_item()
                .request_items(&table, ka)
                .return_consumed_capacity(CAPACITY)
                .send()
                .await
                .map_err(|e| classify("BatchGetItem", e))?;
            self.consumed("BatchGetItem", r.consumed_capacity());
            let found = r
                .responses
                .and_then(|mut m| m.remove(&table))
                .unwrap_or_default()
                .into_iter()
                .map(from_sdk)
                .collect();
            let left = r
                .unprocessed_keys
                .and_then(|mut m| m.remove(&table))
                .map(|k| k.keys.into_iter().map(from_sdk).collect())
                .unwrap_or_default();
            Ok((found, left))
        }
        .boxed()
    }

    fn query(
        &self,
        table: String,
        index: Option<String>,
        key: KeyCond,
        start: Option<Item>,
    ) -> BoxFuture<'_, Result<Page, StoreError>> {
        self.query_projected(table, index, (key, start), vec![])
    }

    fn query_projected(
        &self,
        table: String,
        index: Option<String>,
        (key, start): (KeyCond, Option<Item>),
        projection: Vec<String>,
    ) -> BoxFuture<'_, Result<Page, StoreError>> {
        async move {
            let r = (self.query_request(table, index, &key, &projection))
                .set_exclusive_start_key(start.map(to_sdk))
                .send()
                .await
                .map_err(|e| classify("Query", e))?;
            self.consumed("Query", r.consumed_capacity());
            Ok((
                r.items
                    .unwrap_or_default()
                    .into_iter()
                    .map(from_sdk)
                    .collect(),
                r.last_evaluated_key.map(from_sdk),
            ))
        }
        .boxed()
    }

    fn query_limited(
        &self,
        table: String,
        index: Option<String>,
        key: KeyCond,
        limit: i32,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        async move {
            let r = (self.query_request(table, index, &key, &[]))
                .limit(limit)
                .send()
                .await
                .map_err(|e| classify("Query", e))?;
            self.consumed("Query", r.consumed_capacity());
            Ok(r.items
                .unwrap_or_default()
                .into_iter()
                .map(from_sdk)
                .collect())
        }
        .boxed()
    }

    fn pause(&self, millis: u64) -> BoxFuture<'_, ()> {
        tokio::time::sleep(std::time::Duration::from_millis(millis)).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{n, s, Cmp};

    #[test]
    fn conditions_and_updates_become_expressions() {
        let mut x = Expressions::default();
        let c = Cond::eq("state", s("RUNNING"))
            .and(Cond::not_exists("parked"))
            .and(Cond::Compare("version".into(), Cmp::Lt, n(3)));
        assert_eq!(
            x.condition(&c),
            "(#n0 = :v0) AND (attribute_not_exists(#n1)) AND (#n2 < :v1)"
        );
        let u = x.update(&[
            Action::Set("state".into(), s("COMPLETED")),
            Action::Remove("due_shard".into()),
            Action::Add("completed_count".into(), n(1)),
        ]);
        assert_eq!(u, "SET #n0 = :v2 REMOVE #n3 ADD #n4 :v3");
        assert_eq!(x.names["#n0"], "state");
        assert_eq!(x.values[":v3"], n(1));
    }
}
