//! `whimbrel limit`: concurrency limits per Lambda function or task list,
//! across workflows (design.md § 9.3), through the Full Logic API
//! (`Engine::set_target_limit` and its siblings). Raising a limit hands
//! its new slots to the oldest waiters at once, launching them, so the
//! engine here launches through Lambda as the functions do.

use clap::Subcommand;
use whimbrel_core::engine::{Engine, EngineConfig};
use whimbrel_core::launcher::LambdaLauncher;
use whimbrel_core::model::TargetLimit;

use crate::{CliError, Global};

/// What `whimbrel limit` does. TARGET is `lambda:FUNCTION` (a name or
/// ARN) or `task_list:NAME`.
#[derive(Subcommand, Debug)]
pub enum LimitAction {
    /// Set TARGET's limit: at most MAX of its activities launched or
    /// running at once, across all workflows; the rest wait QUEUED-to-be
    /// (READY) and start oldest first as slots free. Prints the limit.
    Set {
        /// `lambda:FUNCTION` or `task_list:NAME`.
        target: String,
        /// At most this many at once (1..).
        max_concurrency: u32,
    },
    /// Print TARGET's limit, the slots held and the activities waiting.
    Show {
        /// `lambda:FUNCTION` or `task_list:NAME`.
        target: String,
    },
    /// Remove TARGET's limit; refused while a slot is held or an activity
    /// waits (raise it instead).
    Remove {
        /// `lambda:FUNCTION` or `task_list:NAME`.
        target: String,
    },
}

/// The engine of `g`'s tables that launches through Lambda, as the
/// functions do (`whimbrel limit`, `whimbrel replay`).
pub async fn lambda_engine(g: &Global) -> Result<Engine<LambdaLauncher>, CliError> {
    let sdk = whimbrel_core::aws_config(g.endpoint_url.as_deref()).await;
    let config = EngineConfig {
        table_prefix: g.table_prefix.clone(),
        ..EngineConfig::from_env().map_err(CliError)?
    };
    Ok(Engine::new(
        crate::store_for(g).await,
        LambdaLauncher::new(aws_sdk_lambda::Client::new(&sdk)),
        config,
    ))
}

/// Run `whimbrel limit ACTION`.
pub async fn limit(g: &Global, action: LimitAction) -> Result<(), CliError> {
    let engine = lambda_engine(g).await?;
    match action {
        LimitAction::Set {
            target,
            max_concurrency,
        } => print(&engine.set_target_limit(&target, max_concurrency).await?),
        LimitAction::Show { target } => match engine.target_limit(&target).await? {
            Some(limit) => print(&limit),
            None => println!("{target}\tno limit"),
        },
        LimitAction::Remove { target } => {
            let removed = engine.remove_target_limit(&target).await?;
            println!("{target}\t{}", if removed { "removed" } else { "no limit" });
        }
    }
    Ok(())
}

fn print(limit: &TargetLimit) {
    println!("target\t{}", limit.target);
    println!(
        "max_concurrency\t{}",
        limit.max_concurrency.unwrap_or_default()
    );
    println!("slots_used\t{}", limit.slots_used());
    println!("waiting\t{}", limit.slot_waiters.len());
}
