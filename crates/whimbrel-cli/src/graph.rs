//! `whimbrel graph`: a plan's DAG as Mermaid, Graphviz DOT or PNG (DOT
//! through Graphviz's `dot`), for a registered workflow's static plan, a
//! workflow exec's stored plan (each node coloured by its activity's
//! state), or a plan file.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use whimbrel_core::attr;

use clap::Args;
use whimbrel_core::contract::{ActivityState, ALL_STATES};
use whimbrel_core::model::{WorkflowLambda, WorkflowPlan};
use whimbrel_core::plan::{NodeKind, Plan, PlannedActivity};
use whimbrel_core::store::s;

use crate::{status, store_for, CliError, Global};

/// What `whimbrel graph` draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    /// A Mermaid flowchart (GitHub renders it in Markdown).
    Mermaid,
    /// Graphviz DOT.
    Dot,
    /// A PNG image: the DOT rendered by Graphviz's `dot -Tpng`.
    Png,
}

/// Arguments of `whimbrel graph`.
#[derive(Args, Debug)]
pub struct GraphArgs {
    /// A registered workflow's name (its static plan), a workflow exec id
    /// `(name)::(uuid)` (its stored plan, coloured by state) or a plan file
    /// ending `.json`.
    pub target: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "mermaid")]
    pub format: GraphFormat,
    /// Write to this file instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The fill and border colours of a state.
fn colours(state: ActivityState) -> (&'static str, &'static str) {
    use ActivityState as S;
    match state {
        S::Completed => ("#b7e4c7", "#2d6a4f"),
        S::Failed | S::TimedOut => ("#f5b7b1", "#c0392b"),
        S::Cancelled => ("#d5d8dc", "#707b7c"),
        S::Running | S::CancelledRunning => ("#aed6f1", "#1f618d"),
        S::Queued | S::Preparing => ("#f9e79f", "#b7950b"),
        S::Requested | S::Ready => ("#ffffff", "#566573"),
    }
}

/// What runs the activity: `lambda: f` (a function ARN shortened to its
/// name) or `task list: l`.
fn runner(a: &PlannedActivity) -> String {
    match a.kind() {
        NodeKind::TaskList => format!("task list: {}", a.task_list.as_deref().unwrap_or("")),
        NodeKind::Timer => match a.wait.as_ref().map(|w| (&w.until, w.seconds)) {
            Some((Some(until), _)) => format!("wait until {until}"),
            other => format!("wait {}s", other.and_then(|(_, s)| s).unwrap_or(0)),
        },
        NodeKind::Child => format!("workflow {:?}", a.workflow.as_deref().unwrap_or("")),
        NodeKind::Signal => match a.start_to_close_seconds {
            Some(t) => format!("signal {:?} ({t}s)", a.signal.as_deref().unwrap_or("")),
            None => format!("signal {:?}", a.signal.as_deref().unwrap_or("")),
        },
        NodeKind::Lambda => {
            let f = a
                .lambda
                .split_once(":function:")
                .filter(|_| a.lambda.starts_with("arn:"))
                .map_or(a.lambda.as_str(), |(_, name)| name);
            format!("lambda: {f}")
        }
    }
}

/// The lines of a node's label: name, runner, and the state if known.
fn label(a: &PlannedActivity, state: Option<ActivityState>) -> Vec<String> {
    let mut lines = vec![a.name.clone(), runner(a)];
    if let Some(s) = state {
        lines.push(s.as_str().into());
    }
    lines
}

/// States of the activities by name (a workflow exec's), or none (a plan).
pub type States = HashMap<String, ActivityState>;

/// The plan as a Mermaid flowchart: nodes `n0`, `n1`... in plan order,
/// labelled with name and runner (and state), an edge from each
/// prerequisite to the activity that waits for it, and with states one
/// `classDef` per state present.
pub fn mermaid(plan: &Plan, states: Option<&States>) -> String {
    let index: HashMap<&str, usize> = plan
        .activities
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name.as_str(), i))
        .collect();
    let state_of = |a: &PlannedActivity| states.and_then(|m| m.get(&a.name).copied());
    let mut out = String::from("flowchart TD\n");
    for (i, a) in plan.activities.iter().enumerate() {
        let text = label(a, state_of(a))
            .iter()
            .map(|l| l.replace('"', "#quot;"))
            .collect::<Vec<_>>()
            .join("<br/>");
        out.push_str(&format!("    n{i}[\"{text}\"]\n"));
    }
    for (i, a) in plan.activities.iter().enumerate() {
        for p in &a.depends_on {
            if let Some(j) = index.get(p.as_str()) {
                out.push_str(&format!("    n{j} --> n{i}\n"));
            }
        }
    }
    for state in ALL_STATES {
        let nodes: Vec<String> = plan
            .activities
            .iter()
            .enumerate()
            .filter(|(_, a)| state_of(a) == Some(state))
            .map(|(i, _)| format!("n{i}"))
            .collect();
        if nodes.is_empty() {
            continue;
        }
        let class = state.as_str().to_lowercase();
        let (fill, stroke) = colours(state);
        out.push_str(&format!(
            "    classDef {class} fill:{fill},stroke:{stroke},color:#000\n"
        ));
        out.push_str(&format!("    class {} {class}\n", nodes.join(",")));
    }
    out
}

/// A DOT string literal.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The plan as a Graphviz digraph: one node per activity (its name, quoted,
/// as the id), an edge from each prerequisite to the activity that waits
/// for it; with states each node filled with its state's colour.
pub fn dot(plan: &Plan, states: Option<&States>) -> String {
    let mut out = String::from(
        "digraph plan {\n    rankdir=TB;\n    node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", fontname=\"Helvetica\"];\n",
    );
    for a in &plan.activities {
        let state = states.and_then(|m| m.get(&a.name).copied());
        let text = label(a, state)
            .iter()
            .map(|l| l.replace('\\', "\\\\").replace('"', "\\\""))
            .collect::<Vec<_>>()
            .join("\\n");
        let mut attrs = format!("label=\"{text}\"");
        if let Some(s) = state {
            let (fill, stroke) = colours(s);
            attrs.push_str(&format!(", fillcolor=\"{fill}\", color=\"{stroke}\""));
        }
        out.push_str(&format!("    {} [{attrs}];\n", quoted(&a.name)));
    }
    for a in &plan.activities {
        for p in &a.depends_on {
            out.push_str(&format!("    {} -> {};\n", quoted(p), quoted(&a.name)));
        }
    }
    out.push_str("}\n");
    out
}

/// Read and validate a plan file (`whimbrel graph`, `whimbrel register
/// --definition`).
pub(crate) fn plan_file(path: &Path) -> Result<Plan, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
    let plan: Plan = serde_json::from_str(&text)
        .map_err(|e| CliError(format!("{} is not a plan: {e}", path.display())))?;
    plan.validate()
        .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    Ok(plan)
}

/// The plan `target` names and, for a workflow exec, its activities'
/// states.
///
/// Errors: an unreadable or invalid plan file, an unknown workflow or exec,
/// a decider-backed workflow (no static plan), an exec without a plan yet.
async fn resolve(g: &Global, target: &str) -> Result<(Plan, Option<States>), CliError> {
    if target.ends_with(".json") {
        return Ok((plan_file(Path::new(target))?, None));
    }
    let store = store_for(g).await;
    if target.contains("::") {
        let snap = status::snapshot(&store, target).await?;
        let stored: Option<WorkflowPlan> = whimbrel_core::engine::plans::load(
            &store,
            target,
            &snap.workflow.workflow_name,
            whimbrel_core::engine::EngineConfig::default().concurrency,
        )
        .await?;
        let plan = stored.map(|p| p.plan).ok_or_else(|| {
            CliError(format!(
                "workflow {target} has no plan stored yet ({}{})",
                snap.workflow.state,
                snap.workflow
                    .error
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ))
        })?;
        let states = snap
            .activities
            .into_iter()
            .map(|a| (a.activity_name, a.state))
            .collect();
        return Ok((plan, Some(states)));
    }
    let key = HashMap::from([(attr::WORKFLOW_NAME.to_string(), s(target))]);
    let item: WorkflowLambda = store
        .get(&store.tables().workflow_lambda(), key)
        .await?
        .ok_or_else(|| {
            CliError(format!(
                "no workflow {target:?} is registered (whimbrel register); a plan file must end in .json"
            ))
        })?;
    match (item.definition, item.lambda) {
        (Some(plan), _) => Ok((plan, None)),
        (None, Some(lambda)) => Err(CliError(format!(
            "workflow {target} has no static plan: its decider Lambda {lambda} plans each run; pass a workflow exec id to see the plan of one run (whimbrel graph {target}::<uuid>; whimbrel list finds them)"
        ))),
        (None, None) => Err(CliError(format!(
            "workflow {target} is registered with neither a decider nor a definition"
        ))),
    }
}

/// Render DOT to PNG with Graphviz: to `out`, else to stdout when it is
/// not a terminal.
fn png(dot_text: &str, out: Option<&Path>) -> Result<(), CliError> {
    if out.is_none() && std::io::stdout().is_terminal() {
        return Err(CliError(
            "a PNG is binary: pass --out FILE (or redirect stdout)".into(),
        ));
    }
    let mut cmd = Command::new("dot");
    cmd.arg("-Tpng");
    if let Some(path) = out {
        cmd.arg("-o").arg(path);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CliError(
                "--format png needs Graphviz's `dot` on PATH and it is not there: install Graphviz (apt-get install graphviz, dnf install graphviz or brew install graphviz), or use --format dot or mermaid".into(),
            ),
            _ => CliError(format!("cannot run dot: {e}")),
        })?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(dot_text.as_bytes())
        .map_err(|e| CliError(format!("cannot write to dot: {e}")))?;
    let done = child
        .wait_with_output()
        .map_err(|e| CliError(format!("dot failed: {e}")))?;
    if !done.status.success() {
        let err = String::from_utf8_lossy(&done.stderr);
        return Err(CliError(format!(
            "dot failed ({}): {}",
            done.status,
            err.lines().next().unwrap_or("")
        )));
    }
    Ok(())
}

/// `whimbrel graph`.
pub async fn run(g: &Global, args: GraphArgs) -> Result<(), CliError> {
    let (plan, states) = resolve(g, &args.target).await?;
    let text = match args.format {
        GraphFormat::Mermaid => mermaid(&plan, states.as_ref()),
        GraphFormat::Dot => dot(&plan, states.as_ref()),
        GraphFormat::Png => return png(&dot(&plan, states.as_ref()), args.out.as_deref()),
    };
    match &args.out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| CliError(format!("cannot write {}: {e}", path.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        serde_json::from_value(serde_json::json!({"activities": [
            {"name": "fetch", "lambda": "arn:aws:lambda:us-east-1:1:function:fetcher"},
            {"name": "resize", "task_list": "images", "depends_on": ["fetch"]},
            {"name": "publish", "lambda": "pub", "depends_on": ["fetch", "resize"]}
        ]}))
        .unwrap()
    }

    #[test]
    fn mermaid_with_states() {
        let states = States::from([
            ("fetch".into(), ActivityState::Completed),
            ("resize".into(), ActivityState::Running),
            ("publish".into(), ActivityState::Requested),
        ]);
        assert_eq!(
            mermaid(&plan(), Some(&states)),
            "flowchart TD
    n0[\"fetch<br/>lambda: fetcher<br/>COMPLETED\"]
    n1[\"resize<br/>task list: images<br/>RUNNING\"]
    n2[\"publish<br/>lambda: pub<br/>REQUESTED\"]
    n0 --> n1
    n0 --> n2
    n1 --> n2
    classDef requested fill:#ffffff,stroke:#566573,color:#000
    class n2 requested
    classDef running fill:#aed6f1,stroke:#1f618d,color:#000
    class n1 running
    classDef completed fill:#b7e4c7,stroke:#2d6a4f,color:#000
    class n0 completed
"
        );
    }

    #[test]
    fn dot_with_a_failed_node() {
        let states = States::from([("fetch".into(), ActivityState::Failed)]);
        let text = dot(&plan(), Some(&states));
        assert!(text.contains(
            "    \"fetch\" [label=\"fetch\\nlambda: fetcher\\nFAILED\", fillcolor=\"#f5b7b1\", color=\"#c0392b\"];\n"
        ), "{text}");
        assert!(text.contains("    \"resize\" [label=\"resize\\ntask list: images\"];\n"));
        assert!(
            text.ends_with("    \"fetch\" -> \"publish\";\n    \"resize\" -> \"publish\";\n}\n")
        );
    }
}
