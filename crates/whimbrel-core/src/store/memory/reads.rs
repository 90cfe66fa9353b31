//! The in-memory store's reads, as DynamoDB answers them: GetItem with a
//! projection, and Query pages in the index's order with DynamoDB's
//! LastEvaluatedKey and its refusals.

use super::*;

impl MemoryBackend {
    pub(super) fn get_now(
        &self,
        table: &str,
        key: &Item,
        projection: &[String],
    ) -> Result<Option<Item>, StoreError> {
        self.fault("GetItem", table)?;
        let pk = self.pk("GetItem", table, key)?;
        let inner = self.lock();
        let item = inner.items.get(table).and_then(|t| t.get(&pk)).cloned();
        Ok(item.map(|i| {
            if projection.is_empty() {
                i
            } else {
                i.into_iter()
                    .filter(|(k, _)| projection.contains(k))
                    .collect()
            }
        }))
    }

    /// One page of a Query, as DynamoDB answers it: the items after
    /// `start` (an exclusive start key, a LastEvaluatedKey of an earlier
    /// page), in the index's range key order (ties in table key order), at
    /// most `max` of them (`None`: all), and the LastEvaluatedKey when the
    /// page was cut: the last item's table and index key attributes.
    ///
    /// Errors: an unknown table or index, or an injected fault.
    pub fn query_page(
        &self,
        table: &str,
        index: Option<&str>,
        key: &KeyCond,
        start: Option<&Item>,
        max: Option<usize>,
    ) -> Result<Page, StoreError> {
        self.fault("Query", table)?;
        let d = self.def("Query", table)?;
        // As DynamoDB: "The AttributeValue for a key attribute cannot
        // contain an empty string value" (a `begins_with` of "" too).
        let values = std::iter::once((&key.hash.0, &key.hash.1))
            .chain(key.range.as_ref().map(|(a, _, v)| (a, v)));
        for (attr, v) in values {
            if matches!(v, AttributeValue::S(s) if s.is_empty()) {
                return Err(invalid("Query", format!("The AttributeValue for a key attribute cannot contain an empty string value. Key: {attr}")));
            }
        }
        let gsi = match index {
            None => None,
            Some(ix) => Some(
                d.gsis
                    .iter()
                    .find(|g| g.name == ix)
                    .ok_or_else(|| invalid("Query", format!("no index {ix} on {table}")))?,
            ),
        };
        let range_attr = match gsi {
            None => d.range.as_ref().map(|r| r.0),
            Some(g) => g.range.as_ref().map(|r| r.0),
        };
        // The attributes a LastEvaluatedKey holds, in the order items sort.
        let mut order: Vec<&str> = range_attr.into_iter().collect();
        order.push(d.hash.0);
        order.extend(d.range.as_ref().map(|r| r.0));
        let mut out = self.matching(table, index, key);
        let cmp = |a: &Item, b: &Item| {
            order
                .iter()
                .map(|k| match (a.get(*k), b.get(*k)) {
                    (Some(x), Some(y)) => av_cmp(x, y).unwrap_or(std::cmp::Ordering::Equal),
                    _ => std::cmp::Ordering::Equal,
                })
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        };
        out.sort_by(cmp);
        if let Some(start) = start {
            out.retain(|i| cmp(i, start).is_gt());
        }
        let cut = max.is_some_and(|m| out.len() > m);
        out.truncate(max.unwrap_or(usize::MAX));
        let last = out.last().filter(|_| cut).map(|i| {
            let mut keys: Vec<&str> = order.clone();
            keys.extend(gsi.map(|g| g.hash.0));
            keys.iter()
                .filter_map(|k| Some((k.to_string(), i.get(*k)?.clone())))
                .collect::<Item>()
        });
        Ok((out, last))
    }

    /// The items of `table` (or its index) whose keys match `key`.
    fn matching(&self, table: &str, index: Option<&str>, key: &KeyCond) -> Vec<Item> {
        let inner = self.lock();
        let source: Vec<&Item> = match index {
            None => inner
                .items
                .get(table)
                .map(|t| t.values().collect())
                .unwrap_or_default(),
            Some(ix) => inner
                .indexes
                .get(&(table.to_string(), ix.to_string()))
                .map(|i| i.view.values().collect())
                .unwrap_or_default(),
        };
        source
            .into_iter()
            .filter(|i| i.get(&key.hash.0).is_some_and(|v| av_eq(v, &key.hash.1)))
            .filter(|i| {
                key.range
                    .as_ref()
                    .is_none_or(|(a, op, v)| i.get(a).is_some_and(|x| compare(x, *op, v)))
            })
            .cloned()
            .collect()
    }
}
