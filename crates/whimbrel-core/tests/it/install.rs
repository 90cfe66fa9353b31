//! `whimbrel install` on tables of an earlier layout (DynamoDB Local): the
//! missing indexes are created and the obsolete ones deleted.

use crate::common;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, CreateGlobalSecondaryIndexAction, DeleteGlobalSecondaryIndexAction,
    GlobalSecondaryIndexUpdate, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType,
};
use whimbrel_core::store::INDEX_DUE;

async fn indexes(client: &aws_sdk_dynamodb::Client, table: &str) -> Vec<String> {
    let out = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap();
    let mut names: Vec<String> = out
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .filter_map(|g| g.index_name().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn install_upgrades_the_indexes_of_an_earlier_layout() {
    let h = common::Harness::new().await;
    let client = h.store.client().expect("a DynamoDB store").clone();
    let table = h.store.tables().activity_exec();
    let want = indexes(&client, &table).await;
    assert!(want.contains(&INDEX_DUE.to_string()));
    // Make it look like schema version 1: no due index, the old launch one.
    client
        .update_table()
        .table_name(&table)
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder()
                .delete(
                    DeleteGlobalSecondaryIndexAction::builder()
                        .index_name(INDEX_DUE)
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    // DynamoDB allows one index change at a time per table.
    wait_gone(&client, &table, INDEX_DUE).await;
    add_index(
        &client,
        &table,
        "launch_shard-queued_time_epoch-index",
        &[
            ("launch_shard", ScalarAttributeType::N),
            ("queued_time_epoch", ScalarAttributeType::N),
        ],
        ProjectionType::KeysOnly,
    )
    .await;
    let old = indexes(&client, &table).await;
    assert!(!old.contains(&INDEX_DUE.to_string()), "{old:?}");
    // And an edge index of an older layout, which nothing reads and which
    // costs a write unit per edge.
    let edges = h.store.tables().activity_exec_dependency();
    assert!(indexes(&client, &edges).await.is_empty());
    add_index(
        &client,
        &edges,
        "workflow_exec_id-index",
        &[("workflow_exec_id", ScalarAttributeType::S)],
        ProjectionType::All,
    )
    .await;
    assert_eq!(indexes(&client, &edges).await, ["workflow_exec_id-index"]);
    let created = whimbrel_core::install::install(&h.store).await.unwrap();
    assert!(created.is_empty(), "no table created: {created:?}");
    assert_eq!(indexes(&client, &table).await, want);
    assert!(indexes(&client, &edges).await.is_empty());
}

/// Create GSI `name` on `table`, keyed by `keys` (hash, then range if
/// given), as an earlier layout had it.
async fn add_index(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    name: &str,
    keys: &[(&str, ScalarAttributeType)],
    projection: ProjectionType,
) {
    let mut index = CreateGlobalSecondaryIndexAction::builder()
        .index_name(name)
        .projection(Projection::builder().projection_type(projection).build());
    let mut update = client.update_table().table_name(table);
    for (i, (attr, ty)) in keys.iter().enumerate() {
        let kind = if i == 0 {
            KeyType::Hash
        } else {
            KeyType::Range
        };
        index = index.key_schema(
            KeySchemaElement::builder()
                .attribute_name(*attr)
                .key_type(kind)
                .build()
                .unwrap(),
        );
        update = update.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(*attr)
                .attribute_type(ty.clone())
                .build()
                .unwrap(),
        );
    }
    update
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder()
                .create(index.build().unwrap())
                .build(),
        )
        .send()
        .await
        .unwrap();
}

/// Wait until `index` of `table` is deleted (at most 20 s).
async fn wait_gone(client: &aws_sdk_dynamodb::Client, table: &str, index: &str) {
    for _ in 0..200 {
        if projection_of(client, table, index).await.is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{index} of {table} still there after 20 s");
}

/// The projection of `index` of `table` (`None`: no such index).
async fn projection_of(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    index: &str,
) -> Option<ProjectionType> {
    let out = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap();
    out.table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .find(|g| g.index_name() == Some(index))
        .and_then(|g| g.projection())
        .and_then(|p| p.projection_type().cloned())
}

/// Schema 4: a listing index of an earlier layout (ALL projection, which
/// every update of the item rewrote) is rebuilt KEYS_ONLY, and a workflow's
/// activities are still listed through it.
#[tokio::test]
async fn install_rebuilds_an_all_projection_listing_index_keys_only() {
    use whimbrel_core::store::INDEX_ACTIVITIES_BY_WORKFLOW as INDEX;
    let h = common::Harness::new().await;
    let client = h.store.client().expect("a DynamoDB store").clone();
    let table = h.store.tables().activity_exec();
    assert_eq!(
        projection_of(&client, &table, INDEX).await,
        Some(ProjectionType::KeysOnly)
    );
    // Make it look like schema version 3: the index projects ALL.
    let update = |u: GlobalSecondaryIndexUpdate| {
        client
            .update_table()
            .table_name(&table)
            .global_secondary_index_updates(u)
            .send()
    };
    update(
        GlobalSecondaryIndexUpdate::builder()
            .delete(
                DeleteGlobalSecondaryIndexAction::builder()
                    .index_name(INDEX)
                    .build()
                    .unwrap(),
            )
            .build(),
    )
    .await
    .unwrap();
    wait_gone(&client, &table, INDEX).await;
    let key = |n: &str, t| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .unwrap()
    };
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    client
        .update_table()
        .table_name(&table)
        .attribute_definitions(attr("workflow_exec_id"))
        .attribute_definitions(attr("activity_name"))
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder()
                .create(
                    CreateGlobalSecondaryIndexAction::builder()
                        .index_name(INDEX)
                        .key_schema(key("workflow_exec_id", KeyType::Hash))
                        .key_schema(key("activity_name", KeyType::Range))
                        .projection(
                            Projection::builder()
                                .projection_type(ProjectionType::All)
                                .build(),
                        )
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        projection_of(&client, &table, INDEX).await,
        Some(ProjectionType::All)
    );
    whimbrel_core::install::install(&h.store).await.unwrap();
    assert_eq!(
        projection_of(&client, &table, INDEX).await,
        Some(ProjectionType::KeysOnly)
    );
    // Listed through the keys-only index, read by key.
    h.register(
        "two",
        serde_json::json!({"activities": [
            {"name": "a", "lambda": "f"}, {"name": "b", "lambda": "f"}
        ]}),
    )
    .await;
    let wf = h.start("two").await;
    let acts: Vec<whimbrel_core::model::ActivityExec> = h
        .store
        .query_keys_only(
            &table,
            INDEX,
            whimbrel_core::store::KeyCond {
                hash: ("workflow_exec_id".into(), whimbrel_core::store::s(&wf)),
                range: None,
            },
            ["activity_exec_id", "workflow_exec_id"],
        )
        .await
        .unwrap();
    let mut names: Vec<_> = acts.iter().map(|a| a.activity_name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
}
