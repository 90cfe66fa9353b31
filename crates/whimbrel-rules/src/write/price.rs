//! What one write of a `TransactWriteItems` costs on on-demand DynamoDB,
//! by AWS's rules, from the item as it was before and after it: the
//! bench's pricing of transactions (`whimbrel bench`), because DynamoDB
//! Local reports a flat 4 units per table per transaction whatever its
//! items (design.md § 10.9; `tests/price_dynamodb.rs` shows it).
//!
//! Rules (DynamoDB Developer Guide: "Capacity management for
//! transactions", "Item sizes and formats", "Provisioned throughput
//! considerations for global secondary indexes"):
//! - a transactional write costs twice a standard write: 2 write request
//!   units per 1 KB of the larger of the item's old and new size, rounded
//!   up per item;
//! - an index write: putting an item into an index (its key attributes
//!   now all present) or deleting it from one costs one write, changing
//!   its index key two (a delete and a put), a KEYS_ONLY index whose keys
//!   are unchanged nothing; an ALL index with its keys unchanged but the
//!   item changed, one write of the new item. Index writes of a
//!   transaction are counted twice too (an upper bound: AWS does not
//!   say whether their propagation is billed as transactional).

use super::size::item_size;
use super::{Item, Value};
use crate::schema::Gsi;

/// One write request unit per this many bytes.
const WRITE_UNIT_BYTES: usize = 1024;

/// Write request units of `bytes` written once: 1 per KB, rounded up, at
/// least 1.
fn units(bytes: usize) -> f64 {
    bytes.div_ceil(WRITE_UNIT_BYTES).max(1) as f64
}

/// The index key of `item` in `gsi`, when it has every key attribute.
fn index_key<'a>(item: Option<&'a Item>, gsi: &Gsi) -> Option<(&'a Value, Option<&'a Value>)> {
    let item = item?;
    let hash = item.get(gsi.hash.0)?;
    match gsi.range {
        Some((r, _)) => Some((hash, Some(item.get(r)?))),
        None => Some((hash, None)),
    }
}

/// Index writes of one change of an item from `before` to `after` in
/// `gsi` (standard, not doubled).
fn index_writes(before: Option<&Item>, after: Option<&Item>, gsi: &Gsi) -> f64 {
    match (index_key(before, gsi), index_key(after, gsi)) {
        (None, None) => 0.0,
        (None, Some(_)) | (Some(_), None) => 1.0,
        (Some(a), Some(b)) if a != b => 2.0,
        _ if gsi.keys_only || before == after => 0.0,
        _ => units(after.map_or(0, item_size)),
    }
}

/// The write request units one write of a transaction consumed, changing
/// an item from `before` to `after` (`None`: absent), on its table and
/// each of `gsis` the change touched: `(table units, [(index, units)])`.
pub fn transactional_write(
    before: Option<&Item>,
    after: Option<&Item>,
    gsis: &[Gsi],
) -> (f64, Vec<(&'static str, f64)>) {
    let size = before.map_or(0, item_size).max(after.map_or(0, item_size));
    let indexes = gsis
        .iter()
        .map(|g| (g.name, 2.0 * index_writes(before, after, g)))
        .filter(|(_, u)| *u > 0.0)
        .collect();
    (2.0 * units(size), indexes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ScalarType;
    use crate::write::{n, s};

    fn due() -> Gsi {
        Gsi {
            name: "due",
            hash: ("due_shard", ScalarType::N),
            range: Some(("due_epoch", ScalarType::N)),
            keys_only: true,
        }
    }

    fn item(pairs: &[(&str, Value)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn a_transactional_write_costs_twice_its_kilobytes_rounded_up_per_item() {
        let small = item(&[("k", s("a"))]);
        assert_eq!(transactional_write(None, Some(&small), &[]).0, 2.0);
        let big = item(&[("k", s("a")), ("x", s("y".repeat(1500)))]);
        // The larger of before and after: 1.5 KB is 2 units, twice.
        assert_eq!(transactional_write(Some(&big), Some(&small), &[]).0, 4.0);
    }

    #[test]
    fn index_writes_follow_the_index_key() {
        let g = [due()];
        let plain = item(&[("k", s("a"))]);
        let at = |t: u64| item(&[("k", s("a")), ("due_shard", n(1)), ("due_epoch", n(t))]);
        let cost = |b: &Item, a: &Item| transactional_write(Some(b), Some(a), &g).1;
        assert_eq!(
            cost(&plain, &at(5)),
            vec![("due", 2.0)],
            "put into the index"
        );
        assert_eq!(
            cost(&at(5), &at(6)),
            vec![("due", 4.0)],
            "a move: delete and put"
        );
        assert_eq!(cost(&at(5), &plain), vec![("due", 2.0)], "deleted from it");
        assert!(cost(&at(5), &at(5)).is_empty(), "keys only, same key: none");
        assert!(cost(&plain, &plain).is_empty());
    }
}
