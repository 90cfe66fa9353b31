//! Table definitions and `whimbrel install`: create every table with its
//! keys, GSIs and streams (idempotent), and record what was installed in
//! `whimbrel_install_status`. The same definitions are in `template.yaml`
//! and `docs/tables.md`.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction,
    DeleteGlobalSecondaryIndexAction, GlobalSecondaryIndex, GlobalSecondaryIndexUpdate,
    IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType, ScalarAttributeType,
    StreamSpecification, StreamViewType, TableStatus,
};
use aws_sdk_dynamodb::Client;
use tracing::info;

use crate::model::InstallStatus;
use crate::store::{Store, StoreError, Tables};

/// Version of the table layout this crate writes and reads, recorded in
/// `whimbrel_install_status`; `install` brings tables of any earlier
/// layout to it. Layout 6: the due indexes the monitor sweeps, the
/// `activity_exec_id` index on `activity_event` and the task-list index on
/// `activity_exec`; KEYS_ONLY listing indexes
/// (`state-start_time_epoch-index`, `workflow_exec_id-activity_name-index`),
/// so an update of a workflow or activity writes no copy of the item to
/// them (their readers fetch the items by key); the plan and input on the
/// write-once `workflow_plan` table, so the item every finishing activity
/// updates stays small; and no GSI on `activity_exec_dependency`: the
/// engine finds who waits for whom on the activity items and the plan, and
/// an index there would cost a write unit per edge.
pub const SCHEMA_VERSION: u32 = 6;

/// Indexes of earlier layouts that `install` deletes from existing tables.
pub const OBSOLETE_INDEXES: [&str; 4] = [
    "heartbeat_shard-heartbeat_deadline_epoch-index",
    "launch_shard-queued_time_epoch-index",
    // activity_exec_dependency's: nothing reads them, and each costs a
    // write unit per edge.
    "dependent_activity_exec_id-index",
    "workflow_exec_id-index",
];

pub use whimbrel_rules::schema::{definitions, Gsi, ScalarType, TableDef};

/// The SDK's type of a key attribute.
fn sdk_type(t: ScalarType) -> ScalarAttributeType {
    match t {
        ScalarType::S => ScalarAttributeType::S,
        ScalarType::N => ScalarAttributeType::N,
    }
}

fn key(name: &str, kt: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kt)
        .build()
        .expect("name and type set")
}

fn other(e: impl std::fmt::Display) -> StoreError {
    StoreError::Other {
        op: "CreateTable",
        message: e.to_string(),
    }
}

/// Create every missing table (with its GSIs and streams), bring the GSIs
/// of existing tables to this layout (create missing ones, delete the
/// [`OBSOLETE_INDEXES`]), wait until all are ACTIVE, and record them in
/// `install_status`. Returns the names of the tables created.
///
/// Errors: any DynamoDB error other than "table already exists".
pub async fn install(store: &Store) -> Result<Vec<String>, StoreError> {
    let client = store.client().ok_or_else(|| StoreError::Invalid {
        op: "CreateTable",
        message: "install needs a DynamoDB store".into(),
    })?;
    let mut created = Vec::new();
    let defs = definitions(store.tables());
    for d in &defs {
        match create_table(client, d).await? {
            true => {
                info!(table = %d.name, "table created");
                created.push(d.name.clone());
            }
            // It exists: bring its indexes to this layout.
            false => upgrade_indexes(client, d).await?,
        }
    }
    for d in &defs {
        wait_for_table(client, &d.name).await?;
        let status = InstallStatus {
            object_id: d.name.clone(),
            object_type: "table".into(),
            version: SCHEMA_VERSION,
            description: d.description.into(),
        };
        store.put(&store.tables().install_status(), &status).await?;
    }
    Ok(created)
}

/// The attribute definitions of a table's keys and its GSIs' keys, each
/// attribute once.
fn key_attributes(d: &TableDef) -> Result<Vec<AttributeDefinition>, StoreError> {
    let mut attrs: Vec<(&str, ScalarType)> = vec![d.hash];
    attrs.extend(d.range);
    for g in &d.gsis {
        attrs.push(g.hash);
        attrs.extend(g.range);
    }
    attrs.sort_by(|a, b| a.0.cmp(b.0));
    attrs.dedup_by(|a, b| a.0 == b.0);
    attrs
        .into_iter()
        .map(|(name, ty)| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(sdk_type(ty))
                .build()
                .map_err(other)
        })
        .collect()
}

/// CreateTable for `d`. Returns false when the table already exists.
async fn create_table(client: &Client, d: &TableDef) -> Result<bool, StoreError> {
    let mut req = client
        .create_table()
        .table_name(&d.name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(d.hash.0, KeyType::Hash))
        .set_attribute_definitions(Some(key_attributes(d)?));
    if let Some(r) = &d.range {
        req = req.key_schema(key(r.0, KeyType::Range));
    }
    for g in &d.gsis {
        req = req.global_secondary_indexes(gsi(g)?);
    }
    if d.stream {
        req = req.stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .map_err(other)?,
        );
    }
    match req.send().await {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(StoreError::Other {
            op: "CreateTable",
            message: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
        }),
    }
}

/// Wait (up to a minute) until the table is ACTIVE.
async fn wait_for_table(client: &Client, name: &str) -> Result<(), StoreError> {
    for _ in 0..120 {
        let out = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| StoreError::Other {
                op: "DescribeTable",
                message: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
            })?;
        if out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

fn dynamo_error(op: &'static str, e: impl std::error::Error) -> StoreError {
    StoreError::Other {
        op,
        message: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
    }
}

/// The CreateTable shape of one GSI (on-demand, so no throughput).
fn gsi(g: &Gsi) -> Result<GlobalSecondaryIndex, StoreError> {
    let mut b = GlobalSecondaryIndex::builder()
        .index_name(g.name)
        .key_schema(key(g.hash.0, KeyType::Hash))
        .projection(projection(g));
    if let Some(r) = &g.range {
        b = b.key_schema(key(r.0, KeyType::Range));
    }
    b.build().map_err(other)
}

fn projection(g: &Gsi) -> Projection {
    Projection::builder()
        .projection_type(if g.keys_only {
            ProjectionType::KeysOnly
        } else {
            ProjectionType::All
        })
        .build()
}

/// Bring an existing table's GSIs to `d`: create each missing index and
/// delete the [`OBSOLETE_INDEXES`], one change at a time (DynamoDB allows
/// one index creation or deletion per UpdateTable), waiting for each.
/// Indexes neither defined nor obsolete (an operator's own) are left.
///
/// Errors: DynamoDB errors, or an index not ACTIVE within a minute.
async fn upgrade_indexes(
    client: &aws_sdk_dynamodb::Client,
    d: &TableDef,
) -> Result<(), StoreError> {
    // An index change already in progress (an earlier install, a deploy)
    // must end first: DynamoDB allows one at a time.
    wait_for_indexes(client, &d.name).await?;
    // An index whose projection differs from its definition (a listing
    // index an older install created with ALL) is deleted, then created
    // again below: DynamoDB cannot change a projection in place.
    for (name, _, projection) in describe_indexes(client, &d.name).await? {
        let defined = d.gsis.iter().any(|g| g.name == name);
        if defined && projection != Some(projection_type(d, &name)) {
            delete_index(client, &d.name, &name).await?;
            info!(table = %d.name, index = %name, "index deleted: its projection changed");
        }
    }
    let existing = table_indexes(client, &d.name).await?;
    for g in d
        .gsis
        .iter()
        .filter(|g| !existing.iter().any(|(n, _)| n == g.name))
    {
        let mut create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(g.name)
            .key_schema(key(g.hash.0, KeyType::Hash))
            .projection(projection(g));
        if let Some(r) = &g.range {
            create = create.key_schema(key(r.0, KeyType::Range));
        }
        let mut req = client
            .update_table()
            .table_name(&d.name)
            .global_secondary_index_updates(
                GlobalSecondaryIndexUpdate::builder()
                    .create(create.build().map_err(other)?)
                    .build(),
            );
        for (name, ty) in std::iter::once(&g.hash).chain(g.range.iter()) {
            req = req.attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*name)
                    .attribute_type(sdk_type(*ty))
                    .build()
                    .map_err(other)?,
            );
        }
        req.send()
            .await
            .map_err(|e| dynamo_error("UpdateTable", e))?;
        info!(table = %d.name, index = g.name, "index created");
        wait_for_indexes(client, &d.name).await?;
    }
    for (name, _) in existing
        .iter()
        .filter(|(n, _)| OBSOLETE_INDEXES.contains(&n.as_str()))
    {
        delete_index(client, &d.name, name).await?;
        info!(table = %d.name, index = %name, "obsolete index deleted");
    }
    Ok(())
}

/// Delete one GSI of `table` and wait until it is gone.
async fn delete_index(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    name: &str,
) -> Result<(), StoreError> {
    client
        .update_table()
        .table_name(table)
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder()
                .delete(
                    DeleteGlobalSecondaryIndexAction::builder()
                        .index_name(name)
                        .build()
                        .map_err(other)?,
                )
                .build(),
        )
        .send()
        .await
        .map_err(|e| dynamo_error("UpdateTable", e))?;
    wait_for_indexes(client, table).await
}

/// The projection `d` defines for its index `name`.
fn projection_type(d: &TableDef, name: &str) -> ProjectionType {
    match d.gsis.iter().find(|g| g.name == name) {
        Some(g) if g.keys_only => ProjectionType::KeysOnly,
        _ => ProjectionType::All,
    }
}

/// The GSIs of a table: name and status.
async fn table_indexes(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<(String, Option<IndexStatus>)>, StoreError> {
    Ok(describe_indexes(client, table)
        .await?
        .into_iter()
        .map(|(name, status, _)| (name, status))
        .collect())
}

/// The GSIs of a table: name, status and projection.
async fn describe_indexes(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<(String, Option<IndexStatus>, Option<ProjectionType>)>, StoreError> {
    let out = client
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| dynamo_error("DescribeTable", e))?;
    Ok(out
        .table()
        .map(|t| t.global_secondary_indexes())
        .unwrap_or_default()
        .iter()
        .map(|g| {
            (
                g.index_name().unwrap_or("").to_string(),
                g.index_status().cloned(),
                g.projection().and_then(|p| p.projection_type().cloned()),
            )
        })
        .collect())
}

/// Wait until every GSI of `table` is ACTIVE (or gone).
async fn wait_for_indexes(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), StoreError> {
    for _ in 0..120 {
        let indexes = table_indexes(client, table).await?;
        if indexes
            .iter()
            .all(|(_, s)| matches!(s, None | Some(IndexStatus::Active)))
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(StoreError::Transient {
        op: "UpdateTable",
        message: format!("indexes of {table} not ACTIVE after a minute"),
    })
}

/// Names of every table of this prefix.
pub fn table_names(t: &Tables) -> Vec<String> {
    definitions(t).into_iter().map(|d| d.name).collect()
}
