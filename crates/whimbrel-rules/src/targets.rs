//! What a plan may invoke (docs/design.md § 3.10): a plan's `lambda`, and a
//! registration's decider, are checked against the deployment's launch
//! targets before anything is invoked. IAM allows the same set
//! (template.yaml `LaunchDecidersAndActivities`); the check here gives a
//! refusal its reason, and keeps the engine's own functions out even where
//! an operator's patterns are broad. Pure.

use serde::{Deserialize, Serialize};

use crate::kind::NodeKind;
use crate::plan::{Plan, PlannedActivity};

/// The deployment's launch targets, from the environment
/// ([`crate::config::EngineConfig::from_vars`]). The default allows any
/// function: in-process use, tests and the local stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchTargets {
    /// Function name or ARN patterns a target must match, `*` matching any
    /// run of characters (`WHIMBREL_LAUNCH_TARGETS`, comma-separated, or
    /// `WHIMBREL_LAUNCH_TARGET_PREFIX` followed by `*`). Empty: any.
    pub allowed: Vec<String>,
    /// Name patterns of the engine's own functions, never a target
    /// (`WHIMBREL_ENGINE_FUNCTIONS`, and the function's own name,
    /// `AWS_LAMBDA_FUNCTION_NAME`).
    pub engine_functions: Vec<String>,
    /// The deployment's region (`AWS_REGION`), when known.
    pub region: Option<String>,
    /// The deployment's account id (`WHIMBREL_ACCOUNT_ID`), when known.
    pub account: Option<String>,
}

/// A Lambda function reference as the Invoke API takes it: a name
/// (`my-fn`, `my-fn:alias`), a partial ARN (`123456789012:function:my-fn`)
/// or a full ARN (`arn:aws:lambda:us-east-1:123456789012:function:my-fn`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FunctionRef<'a> {
    name: &'a str,
    region: Option<&'a str>,
    account: Option<&'a str>,
}

fn parse(reference: &str) -> FunctionRef<'_> {
    let parts: Vec<&str> = reference.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "lambda", region, account, "function", name, ..] => FunctionRef {
            name,
            region: Some(region),
            account: Some(account),
        },
        [account, "function", name, ..] => FunctionRef {
            name,
            region: None,
            account: Some(account),
        },
        [name, ..] => FunctionRef {
            name,
            region: None,
            account: None,
        },
        [] => FunctionRef {
            name: reference,
            region: None,
            account: None,
        },
    }
}

/// The function name of a Lambda reference (a name, `name:qualifier`, a
/// partial or full ARN), without its qualifier: `resize` for
/// `arn:aws:lambda:us-east-1:123456789012:function:resize:live`.
pub fn function_name(reference: &str) -> &str {
    parse(reference).name
}

/// True when `text` matches `pattern`, whose `*` matches any run of
/// characters (none included) and every other character itself.
pub fn matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// Whether function pattern `pattern` (a name, or an ARN whose parts may
/// hold `*`) allows function `f`: its name, and its region and account
/// where both say one (`ours`: the deployment's region and account, for a
/// reference by name).
fn function_allowed(pattern: &str, f: &FunctionRef, ours: (Option<&str>, Option<&str>)) -> bool {
    let p = parse(pattern);
    let part = |pat: Option<&str>, theirs: Option<&str>, ours: Option<&str>| match (
        pat,
        theirs.or(ours),
    ) {
        (Some(pat), Some(value)) => matches(pat, value),
        _ => true,
    };
    matches(p.name, f.name)
        && part(p.region, f.region, ours.0)
        && part(p.account, f.account, ours.1)
}

impl LaunchTargets {
    /// Whether the pattern `pattern` (a name, or an ARN as IAM takes it)
    /// covers `f`. A part neither side gives (region or account of a bare
    /// name, where the deployment's are unknown) is left to IAM.
    fn allows(&self, pattern: &str, f: &FunctionRef) -> bool {
        function_allowed(
            pattern,
            f,
            (self.region.as_deref(), self.account.as_deref()),
        )
    }

    /// The launch targets as `var` answers the environment (`None`:
    /// unset): `WHIMBREL_LAUNCH_TARGETS` (comma-separated patterns; when it
    /// is empty, `WHIMBREL_LAUNCH_TARGET_PREFIX` followed by `*`; when both
    /// are, any), `WHIMBREL_ENGINE_FUNCTIONS` (comma-separated name
    /// patterns) and the function's own `AWS_LAMBDA_FUNCTION_NAME`,
    /// `AWS_REGION` and `WHIMBREL_ACCOUNT_ID`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let list = |k: &str| -> Vec<String> {
            var(k)
                .unwrap_or_default()
                .split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect()
        };
        let mut allowed = list("WHIMBREL_LAUNCH_TARGETS");
        if allowed.is_empty() {
            allowed = list("WHIMBREL_LAUNCH_TARGET_PREFIX")
                .into_iter()
                .map(|prefix| format!("{prefix}*"))
                .collect();
        }
        let mut engine_functions = list("WHIMBREL_ENGINE_FUNCTIONS");
        engine_functions.extend(list("AWS_LAMBDA_FUNCTION_NAME"));
        let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
        LaunchTargets {
            allowed,
            engine_functions,
            region: set("AWS_REGION"),
            account: set("WHIMBREL_ACCOUNT_ID"),
        }
    }

    /// Why `lambda` may not be invoked, or `None` when it may: another
    /// region or account than the deployment's, one of the engine's own
    /// functions, or none of the allowed patterns.
    pub fn refusal(&self, lambda: &str) -> Option<String> {
        let f = parse(lambda);
        if let (Some(theirs), Some(ours)) = (f.region, self.region.as_deref()) {
            if theirs != ours {
                return Some(format!(
                    "lambda {lambda:?} is in region {theirs}, not the deployment's ({ours})"
                ));
            }
        }
        if let (Some(theirs), Some(ours)) = (f.account, self.account.as_deref()) {
            if theirs != ours {
                return Some(format!(
                    "lambda {lambda:?} is in account {theirs}, not the deployment's"
                ));
            }
        }
        if self.engine_functions.iter().any(|p| matches(p, f.name)) {
            return Some(format!(
                "lambda {lambda:?} is one of the engine's own functions"
            ));
        }
        let allowed = self.allowed.is_empty() || self.allowed.iter().any(|p| self.allows(p, &f));
        (!allowed).then(|| {
            format!(
                "lambda {lambda:?} is not among the deployment's launch targets ({})",
                self.allowed.join(", ")
            )
        })
    }
}

/// Why `plan` may not run: the first activity whose `lambda` the
/// deployment's `targets` refuse ([`LaunchTargets::refusal`]), named.
/// `None`: every Lambda activity may be launched (task-list activities
/// and timers invoke nothing: [`crate::kind::NodeKind::is_invoked`]).
pub fn plan_refusal(
    plan: &Plan,
    targets: &LaunchTargets,
    allow: Option<&Allowed>,
) -> Option<String> {
    plan.activities.iter().find_map(|a| {
        let why = (a.kind().is_invoked())
            .then(|| targets.refusal(&a.lambda))
            .flatten()
            .or_else(|| allow.and_then(|allow| allow.refusal(a)))?;
        Some(format!("activity {:?}: {why}", a.name))
    })
}

/// What one registration's plans and decisions may name (issue 42 B.5),
/// kept on its `whimbrel_workflow_lambda` item as `allow`: patterns (`*`
/// matches any run of characters, as the deployment's launch targets do)
/// for the child workflows its nodes start, the task lists they queue on,
/// and the Lambda functions they invoke. A list that is absent allows any
/// (within the deployment's launch targets, for Lambdas); an empty one
/// allows none. So a decider, or whoever may change a definition, reaches
/// only what the operator registered it for, not every workflow, task
/// list and target of the deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowed {
    /// Child workflow names (`workflow` nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflows: Option<Vec<String>>,
    /// Task lists (`task_list` nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_lists: Option<Vec<String>>,
    /// Lambda function names or ARNs (`lambda` nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambdas: Option<Vec<String>>,
}

impl Allowed {
    /// Why node `a` names what this registration may not, or `None`.
    /// Timers and signal waits name nothing.
    pub fn refusal(&self, a: &PlannedActivity) -> Option<String> {
        let (field, list, value) = match a.kind() {
            NodeKind::Lambda => ("lambda", &self.lambdas, a.lambda.as_str()),
            NodeKind::TaskList => ("task_list", &self.task_lists, a.task_list.as_deref()?),
            NodeKind::Child => ("workflow", &self.workflows, a.workflow.as_deref()?),
            NodeKind::Timer | NodeKind::Signal => return None,
        };
        let patterns = list.as_ref()?;
        // A Lambda by name or ARN, as the deployment's targets match it.
        let allows = |p: &String| match a.kind() {
            NodeKind::Lambda => function_allowed(p, &parse(value), (None, None)),
            _ => matches(p, value),
        };
        if patterns.iter().any(allows) {
            return None;
        }
        Some(format!(
            "{field} {value:?} is not among the registration's allowed {field}s ({})",
            patterns.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> LaunchTargets {
        LaunchTargets {
            allowed: vec!["whimbrel-task-*".into()],
            engine_functions: vec![
                "stack-WorkflowRequestFunction-*".into(),
                "whimbrel-task-engine".into(),
            ],
            region: Some("us-east-1".into()),
            account: Some("123456789012".into()),
        }
    }

    #[test]
    fn patterns_match_runs_of_characters() {
        assert!(matches("whimbrel-task-*", "whimbrel-task-noop"));
        assert!(matches("whimbrel-task-*", "whimbrel-task-"));
        assert!(matches("*-count*", "whimbrel-task-wordcount-count"));
        assert!(matches("a*b*c", "aXbYbc"));
        assert!(!matches("whimbrel-task-*", "whimbrel-noop"));
        assert!(!matches("a*b", "a-b-c"));
        assert!(matches("exact", "exact") && !matches("exact", "exactly"));
    }

    #[test]
    fn a_target_is_refused_with_its_reason() {
        let d = deployment();
        assert_eq!(d.refusal("whimbrel-task-noop"), None);
        assert_eq!(d.refusal("whimbrel-task-noop:live"), None);
        let arn = "arn:aws:lambda:us-east-1:123456789012:function:whimbrel-task-noop";
        assert_eq!(d.refusal(arn), None);
        let why = |l: &str| d.refusal(l).unwrap_or_default();
        assert!(
            why("arn:aws:lambda:eu-west-1:123456789012:function:whimbrel-task-noop")
                .contains("region eu-west-1")
        );
        assert!(why("999999999999:function:whimbrel-task-noop").contains("account 999999999999"));
        assert!(why("stack-WorkflowRequestFunction-AbC12").contains("engine's own"));
        assert!(why("whimbrel-task-engine").contains("engine's own"));
        assert!(
            why("payroll").contains("not among the deployment's launch targets (whimbrel-task-*)")
        );
        // ARN patterns, as the LaunchTargets parameter gives them.
        let arns = LaunchTargets {
            allowed: vec!["arn:aws:lambda:us-east-1:123456789012:function:pay-*".into()],
            ..deployment()
        };
        assert_eq!(arns.refusal("pay-run"), None);
        assert_eq!(
            arns.refusal("arn:aws:lambda:us-east-1:123456789012:function:pay-run"),
            None
        );
        assert!(arns.refusal("whimbrel-task-noop").is_some());
        // From the environment, as template.yaml sets it.
        let env = |k: &str| match k {
            "WHIMBREL_LAUNCH_TARGETS" => Some(String::new()),
            "WHIMBREL_LAUNCH_TARGET_PREFIX" => Some("whimbrel-task-".into()),
            "WHIMBREL_ENGINE_FUNCTIONS" => {
                Some("s-WorkflowRequestFunction-*, s-ActivityEventFunction-*".into())
            }
            "AWS_LAMBDA_FUNCTION_NAME" => Some("s-HeartbeatMonitorFunction-x".into()),
            "AWS_REGION" => Some("us-east-1".into()),
            _ => None,
        };
        let t = LaunchTargets::from_vars(env);
        assert_eq!(t.allowed, vec!["whimbrel-task-*".to_string()]);
        assert_eq!(t.engine_functions.len(), 3);
        assert_eq!(
            (t.region.as_deref(), t.account.as_deref()),
            (Some("us-east-1"), None)
        );
        // By default (in-process, local), anything but the engine's own.
        let open = LaunchTargets::default();
        assert_eq!(open.refusal("payroll"), None);
        assert_eq!(open.refusal(arn), None);
    }

    #[test]
    fn a_plan_is_refused_for_its_first_refused_lambda() {
        let plan: Plan = serde_json::from_value(serde_json::json!({"activities": [
            {"name": "ok", "lambda": "whimbrel-task-noop"},
            {"name": "worker", "task_list": "gpu"},
            {"name": "pause", "wait": {"seconds": 5}},
            {"name": "out", "lambda": "payroll", "depends_on": ["ok"]},
        ]}))
        .unwrap();
        let why = plan_refusal(&plan, &deployment(), None).unwrap();
        assert!(
            why.starts_with("activity \"out\": lambda \"payroll\" is not among"),
            "{why}"
        );
        assert_eq!(plan_refusal(&plan, &LaunchTargets::default(), None), None);
    }

    /// Issue 42 B.5: a registration reaches only the child workflows, task
    /// lists and Lambdas it is allowed; a list left out allows any.
    #[test]
    fn a_registration_names_only_what_it_is_allowed() {
        let plan: Plan = serde_json::from_value(serde_json::json!({"activities": [
            {"name": "resize", "lambda": "whimbrel-task-resize"},
            {"name": "gpu", "task_list": "orders-gpu"},
            {"name": "pause", "wait": {"seconds": 5}},
            {"name": "approve", "signal": "ok"},
            {"name": "bill", "workflow": "orders-billing"},
        ]}))
        .unwrap();
        let open = LaunchTargets::default();
        let allow = |w: &[&str], t: &[&str], l: &[&str]| Allowed {
            workflows: Some(w.iter().map(|s| s.to_string()).collect()),
            task_lists: Some(t.iter().map(|s| s.to_string()).collect()),
            lambdas: Some(l.iter().map(|s| s.to_string()).collect()),
        };
        let orders = allow(&["orders-*"], &["orders-*"], &["whimbrel-task-*"]);
        assert_eq!(plan_refusal(&plan, &open, Some(&orders)), None);
        assert_eq!(plan_refusal(&plan, &open, Some(&Allowed::default())), None);
        let why = |a: Allowed| plan_refusal(&plan, &open, Some(&a)).unwrap();
        assert_eq!(
            why(allow(&["payroll"], &["orders-*"], &["whimbrel-task-*"])),
            "activity \"bill\": workflow \"orders-billing\" is not among the registration's allowed workflows (payroll)"
        );
        assert_eq!(
            why(allow(&["orders-*"], &[], &["whimbrel-task-*"])),
            "activity \"gpu\": task_list \"orders-gpu\" is not among the registration's allowed task_lists ()"
        );
        assert!(why(allow(&["*"], &["*"], &["whimbrel-task-thumb*"]))
            .starts_with("activity \"resize\": lambda \"whimbrel-task-resize\" is not among"));
        // A Lambda named by ARN matches a pattern by name, as the
        // deployment's targets match it.
        let by_arn: Plan = serde_json::from_value(serde_json::json!({"activities": [
            {"name": "r", "lambda": "arn:aws:lambda:us-east-1:123456789012:function:whimbrel-task-resize"},
        ]}))
        .unwrap();
        let names = allow(&["*"], &["*"], &["whimbrel-task-*"]);
        assert_eq!(plan_refusal(&by_arn, &open, Some(&names)), None);
        // An allow-list of `*` widens nothing: the deployment's launch
        // targets still refuse what they refuse.
        let all = allow(&["*"], &["*"], &["*"]);
        assert_eq!(plan_refusal(&plan, &deployment(), Some(&all)), None);
        let payroll: Plan = serde_json::from_value(serde_json::json!({"activities": [
            {"name": "pay", "lambda": "payroll"},
        ]}))
        .unwrap();
        let why = plan_refusal(&payroll, &deployment(), Some(&all)).unwrap();
        assert!(
            why.starts_with("activity \"pay\": lambda \"payroll\" is not among the deployment's"),
            "{why}"
        );
    }
}
