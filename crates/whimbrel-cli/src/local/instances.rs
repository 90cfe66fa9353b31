//! `whimbrel instances`: the functions' execution environments for the
//! local stack.
//!
//! `whimbrel lambda-apis` serves the Lambda Runtime API and the Invoke
//! API and queues each invocation until an instance of its function asks
//! for it; it starts no process itself. This command starts
//! them, as Lambda starts execution environments: `--count` processes of
//! every function of the template, each the built binary
//! (`--function-dir/<Metadata.BuildProperties.Binary>`), told its function
//! by the variables the Lambda runtime reads (`AWS_LAMBDA_RUNTIME_API` =
//! `<upstream>/.rt/<binary>`, `AWS_LAMBDA_FUNCTION_NAME`, `..._VERSION`,
//! `..._MEMORY_SIZE` from the template's `MemorySize`), and everything else
//! from this process's environment. An instance that exits is started
//! again a second later. Their output goes to this process's.
//!
//! It runs apart from `whimbrel local`, as Lambda's instances run apart
//! from its stream pollers: a killed runner (tests/e2e-chaos.sh) leaves
//! the instances and their invocations alone.
//!
//! Why processes of built binaries: `cargo lambda watch` starts each
//! function on its first invocation with `cargo run` (about 2 s each, one
//! at a time on cargo's build lock), so the first workflow would wait
//! about 16 s.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use clap::Args;
use tracing::{info, warn};

use super::template::FunctionConfig;
use crate::{CliError, Global};

/// Options of `whimbrel instances`.
#[derive(Args, Debug, Clone)]
pub struct InstancesArgs {
    /// Instances (processes) of each function.
    #[arg(long, default_value_t = 16)]
    count: usize,
    /// The Lambda Runtime API's server (`whimbrel lambda-apis`).
    #[arg(
        long,
        env = "WHIMBREL_LAMBDA_UPSTREAM",
        default_value = "http://127.0.0.1:9000"
    )]
    lambda_upstream: String,
    /// The SAM template whose functions are started.
    #[arg(long, env = "WHIMBREL_TEMPLATE", default_value = "template.yaml")]
    template: PathBuf,
    /// Where the functions' binaries are (default: beside this program,
    /// e.g. target/debug).
    #[arg(long)]
    function_dir: Option<PathBuf>,
    /// More directories searched first for a function's binary, `:`
    /// separated: a project made by `whimbrel new` gives its own build's
    /// (its functions are not beside this program; the Whimbrel stack's
    /// it nests are).
    #[arg(long, env = "WHIMBREL_FUNCTION_DIRS", value_delimiter = ':')]
    function_dirs: Vec<PathBuf>,
}

/// The Lambda Runtime API base an instance of `binary` polls, under
/// `whimbrel lambda-apis` at `upstream` (its per-function path `/.rt/<name>`).
pub(crate) fn runtime_api(upstream: &str, binary: &str) -> String {
    format!("{}/.rt/{binary}", upstream.trim_end_matches('/'))
}

/// The environment Lambda gives an instance of `f` (beside the inherited one).
fn lambda_env(upstream: &str, f: &FunctionConfig) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_LAMBDA_RUNTIME_API", runtime_api(upstream, &f.binary)),
        ("AWS_LAMBDA_FUNCTION_NAME", f.binary.clone()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", f.memory_mb.to_string()),
        // The function's timeout, for a Runtime API whose deadline header
        // is not a time (cargo lambda watch's was a constant): the
        // engine's budget counts from this then.
        (
            "WHIMBREL_FUNCTION_TIMEOUT_SECONDS",
            f.timeout.as_secs().to_string(),
        ),
    ]
}

/// Run one instance from `program` for as long as this process runs:
/// started again a second after it exits.
async fn supervise(program: PathBuf, env: Vec<(&'static str, String)>) {
    loop {
        let child = tokio::process::Command::new(&program)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        match child {
            Ok(mut child) => match child.wait().await {
                Ok(status) => {
                    warn!(program = %program.display(), %status, "instance exited; starting another")
                }
                Err(e) => {
                    warn!(program = %program.display(), error = %e, "instance lost; starting another")
                }
            },
            Err(e) => warn!(program = %program.display(), error = %e, "cannot start an instance"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Start `--count` instances of every function of the template and keep
/// them running until interrupted.
///
/// Errors: the template cannot be read, or a function's binary is in no
/// function directory (build first).
pub async fn run(g: &Global, args: InstancesArgs) -> Result<(), CliError> {
    let template = super::read_template(&args.template, &g.table_prefix, &[])?;
    let dir = match args.function_dir.clone() {
        Some(d) => d,
        None => std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(PathBuf::from))
            .ok_or_else(|| {
                CliError("cannot tell where this program is: give --function-dir".into())
            })?,
    };
    let dirs: Vec<&PathBuf> = args.function_dirs.iter().chain([&dir]).collect();
    for f in template.functions.values() {
        let Some(program) = dirs.iter().map(|d| d.join(&f.binary)).find(|p| p.is_file()) else {
            return Err(CliError(format!(
                "{} not found in {dirs:?}: build the functions first (cargo build --bins) or give --function-dir",
                f.binary
            )));
        };
        let env = lambda_env(&args.lambda_upstream, f);
        for _ in 0..args.count {
            tokio::spawn(supervise(program.clone(), env.clone()));
        }
    }
    info!(
        functions = template.functions.len(),
        instances_per_function = args.count,
        upstream = %args.lambda_upstream,
        "instances started"
    );
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::template::Template;
    use super::*;

    #[test]
    fn instances_poll_their_function_under_the_upstream() {
        assert_eq!(
            runtime_api("http://127.0.0.1:9000/", "wordcount-count"),
            "http://127.0.0.1:9000/.rt/wordcount-count"
        );
        let t = Template::parse(include_str!("../../../../template.yaml"), "whimbrel_").unwrap();
        let f = t.function("whimbrel-activity-event").unwrap();
        let env = lambda_env("http://127.0.0.1:9000", f);
        assert_eq!(env[1], ("AWS_LAMBDA_FUNCTION_NAME", f.binary.clone()));
        assert_eq!(env[3], ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".into()));
    }
}
