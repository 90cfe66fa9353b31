//! The in-memory store pages a Query as DynamoDB does (the simulation cuts
//! pages short to try the engine's paging): pages of any size, each
//! resumed from the previous page's LastEvaluatedKey, add up to the whole
//! answer in range key order, ties included, with no item twice.

use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{n, s, Backend, Cmp, Item, KeyCond, Tables};

/// Activity items on due shard 3, several with the same `due_epoch` (ties
/// in the index's range key).
async fn backend() -> (MemoryBackend, String) {
    let tables = Tables::new("p_");
    let mem = MemoryBackend::new(&tables, false);
    let table = tables.activity_exec();
    for i in 0..9 {
        let item: Item = [
            ("workflow_exec_id".to_string(), s("w")),
            ("activity_exec_id".to_string(), s(format!("w#a{i}"))),
            ("due_shard".to_string(), n(3)),
            ("due_epoch".to_string(), n(100 + i / 3)),
        ]
        .into_iter()
        .collect();
        mem.put(table.clone(), item, None).await.unwrap();
    }
    (mem, table)
}

fn due_before(epoch: i64) -> KeyCond {
    KeyCond {
        hash: ("due_shard".into(), n(3)),
        range: Some(("due_epoch".into(), Cmp::Le, n(epoch))),
    }
}

fn ids(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|i| {
            whimbrel_core::store::as_s(&i["activity_exec_id"])
                .unwrap()
                .clone()
        })
        .collect()
}

#[tokio::test]
async fn pages_of_any_size_add_up_to_the_whole_answer() {
    let (mem, table) = backend().await;
    let index = Some("due_shard-due_epoch-index");
    let (whole, last) = mem
        .query_page(&table, index, &due_before(101), None, None)
        .unwrap();
    assert_eq!(whole.len(), 6);
    assert!(last.is_none(), "an uncut page has no LastEvaluatedKey");
    for size in 1..=7 {
        let (mut seen, mut start, mut pages) = (vec![], None, 0);
        loop {
            let (items, last) = mem
                .query_page(&table, index, &due_before(101), start.as_ref(), Some(size))
                .unwrap();
            assert!(items.len() <= size);
            seen.extend(items);
            pages += 1;
            match last {
                Some(k) => {
                    assert!(k.contains_key("due_epoch") && k.contains_key("activity_exec_id"));
                    start = Some(k);
                }
                None => break,
            }
        }
        assert_eq!(ids(&seen), ids(&whole), "pages of {size}");
        assert_eq!(pages, whole.len().div_ceil(size).max(1), "pages of {size}");
    }
}
