//! `whimbrel install` on tables of an earlier layout (DynamoDB Local): the
//! missing indexes are created and the obsolete ones deleted.

mod common;

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
            .attribute_type(ScalarAttributeType::N)
            .build()
            .unwrap()
    };
    client
        .update_table()
        .table_name(&table)
        .attribute_definitions(attr("launch_shard"))
        .attribute_definitions(attr("queued_time_epoch"))
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder()
                .create(
                    CreateGlobalSecondaryIndexAction::builder()
                        .index_name("launch_shard-queued_time_epoch-index")
                        .key_schema(key("launch_shard", KeyType::Hash))
                        .key_schema(key("queued_time_epoch", KeyType::Range))
                        .projection(
                            Projection::builder()
                                .projection_type(ProjectionType::KeysOnly)
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
    let old = indexes(&client, &table).await;
    assert!(!old.contains(&INDEX_DUE.to_string()), "{old:?}");
    let created = whimbrel_core::install::install(&h.store).await.unwrap();
    assert!(created.is_empty(), "no table created: {created:?}");
    assert_eq!(indexes(&client, &table).await, want);
}
