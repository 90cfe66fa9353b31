//! What a transaction costs, against DynamoDB Local: the server reports a
//! flat 4 write units per table per `TransactWriteItems` whatever its
//! items, so the bench prices transactions itself by AWS's rules
//! (`store::priced`, `whimbrel_rules::write::price`). If this test's first
//! half fails, DynamoDB Local reports transactions faithfully now and the
//! pricing can go.

use crate::common::Harness;
use whimbrel_core::store::{n, s, Cond, Item, Store, UpdateRequest, Write};

/// `count` new `whimbrel_decision` items of `wf`, each small (under 1 KB).
fn puts(store: &Store, wf: &str, count: usize) -> Vec<Write> {
    (0..count)
        .map(|i| Write::Put {
            table: store.tables().decision(),
            item: Item::from([
                ("workflow_exec_id".to_string(), s(wf)),
                ("log_key".to_string(), s(format!("event#{i:010}"))),
            ]),
            cond: Some(Cond::not_exists("log_key")),
        })
        .collect()
}

/// The write units recorded under `key` since the last take.
fn written(store: &Store, key: &str) -> f64 {
    store
        .metrics()
        .take_capacity()
        .get(key)
        .map_or(0.0, |c| c.write)
}

#[tokio::test]
async fn transactions_are_priced_per_item_not_as_dynamodb_local_reports_them() {
    let h = Harness::new().await;
    let table = h.store.tables().decision();
    let key = format!("TransactWriteItems {table}");
    h.store.metrics().take_capacity();
    h.store.transact(puts(&h.store, "w1", 8)).await.unwrap();
    assert_eq!(
        written(&h.store, &key),
        4.0,
        "DynamoDB Local's own report of 8 puts"
    );
    let priced = h.store.clone().pricing_transactions();
    priced.transact(puts(&priced, "w2", 8)).await.unwrap();
    assert_eq!(
        written(&priced, &key),
        16.0,
        "8 items under 1 KB, twice each"
    );
}

#[tokio::test]
async fn a_priced_transaction_counts_the_index_writes_its_change_makes() {
    let h = Harness::new().await;
    let store = h.store.clone().pricing_transactions();
    let t = store.tables();
    let wf = Item::from([
        ("workflow_exec_id".to_string(), s("w::1")),
        ("workflow_name".to_string(), s("w")),
    ]);
    let put = Write::Put {
        table: t.workflow_exec(),
        item: wf.clone(),
        cond: None,
    };
    h.store.transact(vec![put]).await.unwrap();
    let due = |at: i64| {
        UpdateRequest::new(t.workflow_exec(), wf.clone())
            .set("due_epoch", n(at))
            .set("due_shard", n(1))
            .into_write()
    };
    let table = format!("TransactWriteItems {}", t.workflow_exec());
    let index = format!("{table}/{}", whimbrel_core::store::INDEX_DUE);
    store.metrics().take_capacity();
    store.transact(vec![due(100)]).await.unwrap();
    let c = store.metrics().take_capacity();
    assert_eq!(c[&table].write, 2.0);
    assert_eq!(c[&index].write, 2.0, "put into the due index");
    store.transact(vec![due(200)]).await.unwrap();
    let c = store.metrics().take_capacity();
    assert_eq!(c[&index].write, 4.0, "moved: a delete and a put");
    store.transact(vec![due(200)]).await.unwrap();
    let c = store.metrics().take_capacity();
    assert!(!c.contains_key(&index), "the same key: no index write");
}
