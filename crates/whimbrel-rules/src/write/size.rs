//! Item sizes as DynamoDB computes them, so a write that can never succeed
//! (an item over 400 KB) is known before it is sent, and the in-memory
//! backend refuses what DynamoDB refuses.
//!
//! Rules (DynamoDB Developer Guide, "Item sizes and formats"): an item's
//! size is the sum of its attribute names' UTF-8 lengths and its values'
//! sizes. String: UTF-8 bytes. Number: 1 byte per two significant digits,
//! plus 1. Binary: its bytes. Null and Boolean: 1. List and Map: 3 bytes,
//! plus 1 byte per element, plus the elements (a map's keys count as
//! names). Sets: the sum of their elements.

use super::{Item, Value as AttributeValue};

/// DynamoDB's item size limit, bytes (400 KB).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// The size of a number attribute value given as DynamoDB's decimal text.
fn number_size(text: &str) -> usize {
    let digits: String = text
        .trim_start_matches(['-', '+'])
        .split(['e', 'E'])
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let significant = digits
        .trim_start_matches('0')
        .trim_end_matches('0')
        .len()
        .max(1);
    significant.div_ceil(2) + 1
}

/// The size of one attribute value, bytes.
pub fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(xs) => xs.iter().map(String::len).sum(),
        AttributeValue::Ns(xs) => xs.iter().map(|x| number_size(x)).sum(),
        AttributeValue::Bs(xs) => xs.iter().map(Vec::len).sum(),
        AttributeValue::L(xs) => 3 + xs.iter().map(|x| 1 + value_size(x)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, x)| 1 + k.len() + value_size(x))
                .sum::<usize>()
        }
    }
}

/// The size of an item, bytes, as DynamoDB bills and limits it.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{n, s};

    #[test]
    fn sizes_follow_dynamodb_rules() {
        assert_eq!(number_size("0"), 2);
        assert_eq!(number_size("12345"), 4);
        assert_eq!(number_size("-1000"), 2);
        assert_eq!(number_size("1795306411"), 6);
        let item = Item::from([("state".to_string(), s("RUNNING")), ("n".to_string(), n(7))]);
        assert_eq!(item_size(&item), 5 + 7 + 1 + 2);
        let list = AttributeValue::L(vec![s("ab"), n(1)]);
        assert_eq!(value_size(&list), 3 + (1 + 2) + (1 + 2));
    }
}
