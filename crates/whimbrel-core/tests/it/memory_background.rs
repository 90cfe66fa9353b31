//! What the in-memory store does in DynamoDB's background, for the
//! simulation: TTL deletes only items whose TTL attribute is a number less
//! than the time it runs at (UpdateTimeToLive's documentation; an attribute
//! of another type is not a TTL), with the GSIs following; and a lagging GSI shows
//! changes of different items out of order, but each item's in order.

use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{n, s, Backend, Cmp, Item, KeyCond, Tables};

const INDEX: &str = "due_shard-due_epoch-index";

fn activity(id: &str, due: i64) -> Item {
    [
        ("workflow_exec_id".to_string(), s("w")),
        ("activity_exec_id".to_string(), s(id)),
        ("due_shard".to_string(), n(3)),
        ("due_epoch".to_string(), n(due)),
    ]
    .into_iter()
    .collect()
}

/// The ids the index shows on due shard 3, in its order.
fn shown(mem: &MemoryBackend, table: &str) -> Vec<(String, String)> {
    let key = KeyCond {
        hash: ("due_shard".into(), n(3)),
        range: Some(("due_epoch".into(), Cmp::Le, n(i64::MAX))),
    };
    let (items, _) = mem
        .query_page(table, Some(INDEX), &key, None, None)
        .unwrap();
    items
        .iter()
        .map(|i| {
            let text = |k: &str| match &i[k] {
                whimbrel_core::store::Value::S(v) => v.clone(),
                whimbrel_core::store::Value::N(v) => v.clone(),
                _ => String::new(),
            };
            (text("activity_exec_id"), text("due_epoch"))
        })
        .collect()
}

#[tokio::test]
async fn ttl_deletes_only_numbers_before_its_time_and_the_index_follows() {
    let tables = Tables::new("b_");
    let mem = MemoryBackend::new(&tables, false);
    let table = tables.activity_exec();
    let with = |id: &str, ttl: Option<whimbrel_core::store::Value>| {
        let mut item = activity(id, 100);
        if let Some(v) = ttl {
            item.insert("expires_at_epoch".into(), v);
        }
        item
    };
    for item in [
        with("past", Some(n(50))),
        with("just", Some(n(59))),
        with("now", Some(n(60))),
        with("text", Some(s("50"))),
        with("none", None),
    ] {
        mem.put(table.clone(), item, None).await.unwrap();
    }
    let gone = mem.expire(&table, "expires_at_epoch", 60);
    let mut gone: Vec<String> = gone
        .iter()
        .map(|i| {
            whimbrel_core::store::as_s(&i["activity_exec_id"])
                .unwrap()
                .clone()
        })
        .collect();
    gone.sort();
    assert_eq!(gone, ["just", "past"]);
    let mut left: Vec<String> = shown(&mem, &table).into_iter().map(|x| x.0).collect();
    left.sort();
    assert_eq!(left, ["none", "now", "text"], "the index follows");
    assert!(mem.expire(&table, "expires_at_epoch", 60).is_empty());
}

#[tokio::test]
async fn a_lagging_index_shows_items_out_of_order_but_each_item_in_order() {
    let tables = Tables::new("b_");
    let mem = MemoryBackend::new(&tables, true);
    let table = tables.activity_exec();
    // a: due 1 then due 2; b: due 5.
    for item in [activity("a", 1), activity("a", 2), activity("b", 5)] {
        mem.put(table.clone(), item, None).await.unwrap();
    }
    assert!(shown(&mem, &table).is_empty(), "nothing shown yet");
    // Pick the last pending change (b's) first: it appears before a's.
    // (Every index of the table has its own pending changes: the count
    // returned is over all of them.)
    mem.propagate_any(&mut |len| len - 1);
    assert_eq!(shown(&mem, &table), [("b".into(), "5".into())]);
    // Pick a's second change: a's first appears, never its second before.
    mem.propagate_any(&mut |len| len - 1);
    let a_first: Vec<_> = shown(&mem, &table);
    assert!(a_first.contains(&("a".into(), "1".into())), "{a_first:?}");
    assert_eq!(mem.propagate_any(&mut |_| 0), 0, "all shown");
    let all = shown(&mem, &table);
    assert!(all.contains(&("a".into(), "2".into())), "{all:?}");
    assert!(!all.contains(&("a".into(), "1".into())), "{all:?}");
}
