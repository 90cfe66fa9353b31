//! Transactions priced by AWS's rules instead of DynamoDB Local's report,
//! which is a flat 4 write units per table per `TransactWriteItems`
//! whatever its items (`tests/price_dynamodb.rs` shows it): each written
//! item is read (strongly consistent, not counted) before and after the
//! transaction, and [`whimbrel_rules::write::price::transactional_write`]
//! prices the change. Only for the bench's local stack
//! (`WHIMBREL_PRICE_TRANSACTIONS`): the reads cost what they cost, and a
//! write that lands between a read and the transaction is priced as if
//! it had not (a benchmark's approximation, not a bill).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue as SdkValue;
use aws_sdk_dynamodb::Client;
use whimbrel_rules::schema::TableDef;
use whimbrel_rules::write::price::transactional_write;

use super::{Item, Metrics, Write};

/// The table and key of each of `writes` (a put's key taken from its item
/// by its table's definition), or `None` for a table `defs` does not have.
pub(super) fn write_keys(writes: &[Write], defs: &[TableDef]) -> Option<Vec<(String, Item)>> {
    writes
        .iter()
        .map(|w| match w {
            Write::Update { table, key, .. } => Some((table.clone(), key.clone())),
            Write::Put { table, item, .. } => {
                let def = defs.iter().find(|d| &d.name == table)?;
                let attrs = std::iter::once(def.hash.0).chain(def.range.map(|r| r.0));
                let key = attrs
                    .map(|a| Some((a.to_string(), item.get(a)?.clone())))
                    .collect::<Option<Item>>()?;
                Some((table.clone(), key))
            }
        })
        .collect()
}

/// The items at `keys` as they are now (`None`: absent), read strongly
/// consistently and not counted; `None` if a read failed.
pub(super) async fn images(client: &Client, keys: &[(String, Item)]) -> Option<Vec<Option<Item>>> {
    let mut out = Vec::with_capacity(keys.len());
    for (table, key) in keys {
        let sdk: HashMap<String, SdkValue> = key
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        let got = client
            .get_item()
            .table_name(table)
            .set_key(Some(sdk))
            .consistent_read(true)
            .send()
            .await
            .ok()?;
        out.push(
            got.item
                .map(|i| i.into_iter().map(|(k, v)| (k, v.into())).collect()),
        );
    }
    Some(out)
}

/// Add to `metrics` what a transaction that changed the items at `keys`
/// from `before` to `after` consumed, under `"TransactWriteItems {table}"`
/// and `"TransactWriteItems {table}/{index}"`.
pub(super) fn record(
    metrics: &Metrics,
    defs: &[TableDef],
    keys: &[(String, Item)],
    (before, after): (&[Option<Item>], &[Option<Item>]),
) {
    const OP: &str = "TransactWriteItems";
    for (i, (table, _)) in keys.iter().enumerate() {
        let gsis = defs
            .iter()
            .find(|d| &d.name == table)
            .map_or(&[][..], |d| &d.gsis[..]);
        let (own, indexes) = transactional_write(before[i].as_ref(), after[i].as_ref(), gsis);
        metrics.add_write(format!("{OP} {table}"), own);
        for (index, units) in indexes {
            metrics.add_write(format!("{OP} {table}/{index}"), units);
        }
    }
}
