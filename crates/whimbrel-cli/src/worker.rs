//! `whimbrel worker`: claim task-list activities and run a command for
//! each (the core [`whimbrel_core::worker::Worker`] does the protocol).
//!
//! The command runs through `sh -c` with the activity's `input` (JSON) on
//! stdin, or the whole launch payload with `--stdin payload`; its stdout
//! is the output (JSON, or `{"stdout": text}` when it is not JSON). A
//! non-zero exit fails the attempt with the error `EXIT_<code>: <last
//! stderr line>` (retried per the activity's policy: `EXIT_<code>` is the
//! error name). A cancel kills the command.

use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use whimbrel_core::engine::{Engine, EngineConfig};
use whimbrel_core::plan::LaunchPayload;
use whimbrel_core::worker::{Claimer, Worker, WorkerOptions};

use crate::{store_for, CliError, Global};

/// What the command reads on stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Stdin {
    /// The activity's `input` from the plan (`null` when absent).
    Input,
    /// The whole launch payload (ids, attempt, input, prerequisites' outputs).
    Payload,
}

/// `whimbrel worker` options.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// A task list to claim activities from (repeatable: the oldest
    /// claimable task of all of them is taken first).
    #[arg(long, required = true)]
    pub task_list: Vec<String>,
    /// The command to run per activity (through `sh -c`).
    #[arg(long)]
    pub exec: String,
    /// What the command reads on stdin.
    #[arg(long, value_enum, default_value = "input")]
    pub stdin: Stdin,
    /// This worker's name on the items it claims (default host:pid).
    #[arg(long)]
    pub name: Option<String>,
    /// Stop after this many activities.
    #[arg(long)]
    pub max_tasks: Option<u64>,
    /// Stop after this many seconds without an activity.
    #[arg(long)]
    pub idle_exit: Option<u64>,
    /// A variable of the worker's environment to pass on to the command
    /// (repeatable). Otherwise it gets only PATH, HOME, USER, LOGNAME,
    /// SHELL, the locale, TZ, TMPDIR and TERM: never the worker's AWS
    /// credentials or settings.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// The engine's claim function, invoked for each claim (the stack's
    /// output `TaskClaimFunctionName`; locally its binary's name). The
    /// worker's role then needs no write to `activity_exec` beyond its
    /// heartbeat (template.yaml `TaskListWorkerPolicy`).
    #[arg(long, env = "WHIMBREL_CLAIM_FUNCTION", default_value = whimbrel_core::worker::DEFAULT_CLAIM_FUNCTION)]
    pub claim_function: String,
    /// Claim in this process instead, with the engine's own grant on
    /// `activity_exec` (the Full Logic API; no claim function needed).
    #[arg(long)]
    pub claim_in_process: bool,
}

/// The variables of the worker's environment every command gets: what a
/// shell and common tools need, and nothing that grants access. The
/// command is the activity's code, not the worker's: it must not act with
/// the worker's AWS credentials (which may claim and report any task of
/// the list) unless the operator passes them on (`--pass-env`).
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "TERM",
];

/// The environment of a command: of `vars` (the worker's), those in
/// [`INHERITED_ENV`] or named in `pass`.
pub fn command_env(
    vars: impl Iterator<Item = (String, String)>,
    pass: &[String],
) -> Vec<(String, String)> {
    vars.filter(|(k, _)| INHERITED_ENV.contains(&k.as_str()) || pass.contains(k))
        .collect()
}

/// Run the command for one claimed activity.
async fn run_command(args: &WorkerArgs, payload: LaunchPayload) -> Result<Value, String> {
    let stdin = match args.stdin {
        Stdin::Input => payload.input.to_string(),
        Stdin::Payload => serde_json::to_string(&payload).map_err(|e| e.to_string())?,
    };
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&args.exec)
        .env_clear()
        .envs(command_env(std::env::vars(), &args.pass_env))
        .env("WHIMBREL_ACTIVITY_EXEC_ID", &payload.activity_exec_id)
        .env("WHIMBREL_ACTIVITY_NAME", &payload.activity_name)
        .env("WHIMBREL_ATTEMPT", payload.attempt.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("EXEC: cannot run {:?}: {e}", args.exec))?;
    if let Some(mut pipe) = child.stdin.take() {
        // A command that does not read its stdin closes it early: fine.
        let _ = pipe.write_all(stdin.as_bytes()).await;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("EXEC: {e}"))?;
    if !out.status.success() {
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!("EXIT_{code}: {}", last.unwrap_or("no stderr")));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(serde_json::from_str(text.trim()).unwrap_or_else(|_| json!({"stdout": text})))
}

/// `whimbrel worker`: poll, claim, run, report, until `--max-tasks` or
/// `--idle-exit`; prints the worker's counts as one JSON line at the end.
pub async fn run(g: &Global, args: WorkerArgs) -> Result<(), CliError> {
    let store = store_for(g).await;
    let config = EngineConfig {
        table_prefix: g.table_prefix.clone(),
        ..EngineConfig::from_env().map_err(CliError)?
    };
    let name = args.name.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
        format!("{}:{}", host.trim(), std::process::id())
    });
    let options = WorkerOptions {
        max_tasks: args.max_tasks,
        idle_exit_seconds: args.idle_exit,
        ..WorkerOptions::default()
    };
    let mut lists = args.task_list.iter();
    let first = lists.next().cloned().unwrap_or_default();
    let worker = lists.fold(
        Worker::new(Engine::new(store, (), config), first, name, options),
        |w, list| w.also_on(list.clone()),
    );
    let worker = if args.claim_in_process {
        worker
    } else {
        worker.claiming_with(Claimer::function(args.claim_function.clone()).await)
    };
    let stats = worker.run(|p| run_command(&args, p)).await?;
    println!("{}", serde_json::to_string(&stats).expect("serializable"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_gets_no_credentials_unless_passed_on() {
        let worker = [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("AWS_ACCESS_KEY_ID", "AKIA"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "token"),
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
            ("WHIMBREL_TABLE_PREFIX", "whimbrel_"),
            ("MY_SETTING", "1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let names =
            |env: Vec<(String, String)>| env.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(
            names(command_env(worker.clone().into_iter(), &[])),
            ["PATH", "HOME"]
        );
        let pass = ["MY_SETTING".to_string()];
        assert_eq!(
            names(command_env(worker.into_iter(), &pass)),
            ["PATH", "HOME", "MY_SETTING"]
        );
    }
}
