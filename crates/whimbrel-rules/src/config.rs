//! The engine's settings: durations (seconds), limits and switches, read
//! from `WHIMBREL_*` variables.

/// Engine settings, read from the environment by [`EngineConfig::from_env`].
/// Every duration is in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Table name prefix (`WHIMBREL_TABLE_PREFIX`, default `whimbrel_`).
    pub table_prefix: String,
    /// Heartbeat timeout for activities that enable heartbeats without
    /// giving one (`WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS`, default 300).
    pub default_heartbeat_timeout_seconds: i64,
    /// Relaunch window: a launched attempt still QUEUED this long after
    /// its launch is launched again (same attempt, new launch and token)
    /// (`WHIMBREL_QUEUED_REDRIVE_SECONDS`, the stack's `QueuedRedriveSeconds`:
    /// the deployed names stay; default 120).
    pub relaunch_after_seconds: i64,
    /// The longest time Lambda may keep a launch's async invoke in its
    /// event queue before it runs or discards it: the launch targets'
    /// `MaximumEventAgeInSeconds` (`WHIMBREL_LAUNCH_EVENT_AGE_SECONDS`, the
    /// stack's `LaunchEventAgeSeconds`). A deployment that is told nothing
    /// assumes AWS's default, [`AWS_DEFAULT_EVENT_AGE_SECONDS`]; 0 = none
    /// (in-process use and tests: [`EngineConfig::default`]). A relaunch
    /// before it could only duplicate an invoke still queued (a throttled
    /// function): see [`EngineConfig::relaunch_window_seconds`].
    pub launch_event_age_seconds: Option<i64>,
    /// Launches of one attempt that never starts before the attempt fails
    /// with `NOT_STARTED` (then retried per the policy)
    /// (`WHIMBREL_MAX_LAUNCH_ATTEMPTS`, default 3, at most
    /// [`MAX_LAUNCH_ATTEMPTS`]).
    pub max_launch_attempts: u32,
    /// Start-to-close for activities whose plan gives none, and the
    /// PREPARING deadline (`WHIMBREL_START_TO_CLOSE_SECONDS`, default 3600:
    /// longer than Lambda's 15-minute limit, so a killed function is
    /// caught).
    pub default_start_to_close_seconds: i64,
    /// How long CANCELLED_RUNNING waits for the activity's acknowledgement
    /// before the monitor times it out (`WHIMBREL_CANCEL_GRACE_SECONDS`,
    /// default 300).
    pub cancel_grace_seconds: i64,
    /// How long past a deadline the monitor waits before it judges, so a
    /// report written before the deadline is visible in the event index
    /// (`WHIMBREL_REPORT_GRACE_SECONDS`, default 10; GSIs lag by well under
    /// a second).
    pub report_grace_seconds: i64,
    /// How far past its time a monitor tick reads the due index, seconds
    /// (`WHIMBREL_MONITOR_LOOKAHEAD_SECONDS`, default 0): the activities
    /// due within it are each judged at their own second, the tick
    /// sleeping to each in turn (design.md § 9), so a timer or a retry's
    /// delay ends on time, not at the next tick. Set it to the schedule's
    /// interval (60 s on AWS, where the function's `Timeout` leaves room
    /// for it; 5 s in `whimbrel local`). 0: a tick judges only what is due.
    pub monitor_lookahead_seconds: i64,
    /// How long after a terminal write its side effects may take before the
    /// monitor resumes them (default 60).
    pub settle_grace_seconds: i64,
    /// How long a workflow may stay REQUESTED (or RUNNING with roots not
    /// launched) before the monitor starts it again
    /// (`WHIMBREL_START_RETRY_SECONDS`, default 60).
    pub start_retry_seconds: i64,
    /// Starts of a workflow by the monitor before it is FAILED
    /// (`WHIMBREL_MAX_START_ATTEMPTS`, default 5).
    pub max_start_attempts: u32,
    /// Schedule-to-start for activities whose plan gives none
    /// (`WHIMBREL_SCHEDULE_TO_START_SECONDS`, default none; 0 = none).
    pub default_schedule_to_start_seconds: Option<i64>,
    /// Schedule-to-close for activities whose plan gives none
    /// (`WHIMBREL_SCHEDULE_TO_CLOSE_SECONDS`, default none; 0 = none).
    pub default_schedule_to_close_seconds: Option<i64>,
    /// Refuse reports without the live attempt's token for every workflow,
    /// whatever its plan says (`WHIMBREL_REQUIRE_TOKENS`). A deployment
    /// ([`EngineConfig::from_env`]) requires them unless told
    /// `WHIMBREL_REQUIRE_TOKENS=false`, so that no holder of the activity
    /// role can report as another activity; [`EngineConfig::default`], for
    /// in-process use and tests of tokenless clients, does not.
    pub require_tokens: bool,
    /// How many activities to release, launch or cancel at once, and how
    /// many items of one stream batch the handlers process at once (each
    /// item's records in stream order; default 16; `whimbrel bench-batch`
    /// measures the speed-up).
    pub concurrency: usize,
    /// Seconds the write-once rows our writers insert (request rows of
    /// `whimbrel start`, event rows of the activity helper, the worker and
    /// the CLI) are kept before DynamoDB TTL may delete them. A deployment
    /// sets it in days (`WHIMBREL_ROW_RETENTION_DAYS`, the stack's
    /// `RowRetentionDays`; default none = kept forever; 0 = none); the
    /// simulation in seconds, to let TTL delete rows within a schedule.
    /// See [`Self::row_expiry`].
    pub row_retention_seconds: Option<i64>,
    /// Write `launched_time` on the activity exec once Lambda accepted a
    /// launch's async Invoke (`WHIMBREL_RECORD_LAUNCHES`, default false).
    /// For operators only (no rule reads it), and it costs one more write
    /// of the activity item per launch, so it is off by default;
    /// `queued_time` (the claim, just before the Invoke) is always written.
    pub record_launches: bool,
    /// Prerequisites per join group. An activity with more
    /// prerequisites than this is a wide join: each prerequisite's
    /// COMPLETED updates a small join group item (at most this many names)
    /// and only a complete group updates the join, so no write grows with
    /// the number of prerequisites and no item is written by all of them
    /// (`model::JoinGroup`). Read when a plan is stored; a stored
    /// workflow keeps its groups. Default and largest:
    /// [`crate::plan::JOIN_GROUP_SIZE`] (larger values count as it).
    pub join_group_size: usize,
    /// Most dependents listed on an activity item. An activity
    /// with more is a wide fan-out: its item keeps their number
    /// (`dependents_in_plan`), and they are derived from the stored plan
    /// when it ends, so no item grows with the fan-out. Read when a plan
    /// is stored. Default and largest: [`crate::plan::FAN_OUT_LIST_MAX`]
    /// (larger values count as it).
    pub fan_out_list_max: usize,
    /// What plans may invoke ([`crate::targets::LaunchTargets`]): from
    /// `WHIMBREL_LAUNCH_TARGETS` and the variables it names; by default,
    /// any function.
    pub launch_targets: crate::targets::LaunchTargets,
    /// When a plan is stored in parts, and how large each is
    /// ([`PlanParting`]). Not read from the environment: the default is
    /// what DynamoDB allows; the simulation lowers it so that its small
    /// plans are stored in parts too.
    pub plan_parting: PlanParting,
    /// The episodic decisions' bounds (design.md § 10.3).
    pub decisions: DecisionSettings,
    /// Executions one workflow tree may start below its root, at most:
    /// children at every depth, and each run of a child's
    /// `continue_as_new` chain (`WHIMBREL_MAX_TREE_EXECUTIONS`, default
    /// 100,000, at most [`MAX_TREE_EXECUTIONS`]); the next child fails at
    /// its start with the reason (issue 42 B.6, design.md § 9.5).
    pub max_tree_executions: u64,
}

/// How long an episodic execution's decisions may take, and how many
/// refused answers it takes in a row (design.md § 10.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionSettings {
    /// How long one attempt of a decision has to commit, seconds: the
    /// deciders' function timeout plus the margin
    /// ([`crate::decide::episodes::ATTEMPT_MARGIN_SECONDS`]), at most
    /// [`crate::decide::episodes::DECISION_ATTEMPT_SECONDS`]
    /// (`WHIMBREL_DECISION_ATTEMPT_SECONDS`, default 120: a decider's
    /// timeout of 60 s).
    pub attempt_seconds: i64,
    /// How long a decision is tried, from its first attempt, before the
    /// workflow fails, seconds (`WHIMBREL_DECISION_TIMEOUT_SECONDS`,
    /// default 300).
    pub timeout_seconds: i64,
    /// Refused answers in a row after which the workflow fails
    /// (`WHIMBREL_DECISION_MAX_REFUSALS`, default
    /// [`crate::decider::DEFAULT_MAX_REFUSALS`]).
    pub max_refusals: u32,
}

impl DecisionSettings {
    /// Settings from `WHIMBREL_DECISION_*` variables as `var` answers them,
    /// defaults otherwise.
    ///
    /// Errors: a variable that is set but not a positive integer.
    pub fn from_vars(var: &impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let d = DecisionSettings::default();
        let refusals = positive_var(var, "WHIMBREL_DECISION_MAX_REFUSALS", d.max_refusals.into())?;
        Ok(DecisionSettings {
            attempt_seconds: positive_var(
                var,
                "WHIMBREL_DECISION_ATTEMPT_SECONDS",
                d.attempt_seconds,
            )?,
            timeout_seconds: positive_var(
                var,
                "WHIMBREL_DECISION_TIMEOUT_SECONDS",
                d.timeout_seconds,
            )?,
            max_refusals: refusals.try_into().unwrap_or(u32::MAX),
        })
    }
}

/// Variable `k` as `var` answers it: a positive integer, or `dflt` when
/// unset.
///
/// Errors: a value that is not a positive integer.
fn positive_var(var: &impl Fn(&str) -> Option<String>, k: &str, dflt: i64) -> Result<i64, String> {
    bounded_var(var, k, dflt, i64::MAX)
}

/// [`positive_var`] at most `max`: a default of a plan's field is bounded
/// as the field is (issue 42 D), so a deployment cannot give what no plan
/// may.
///
/// Errors: not a positive integer, or past `max`.
fn bounded_var(
    var: &impl Fn(&str) -> Option<String>,
    k: &str,
    dflt: i64,
    max: i64,
) -> Result<i64, String> {
    let v = match var(k) {
        Some(v) => (v.trim().parse::<i64>().ok().filter(|x| *x > 0))
            .ok_or_else(|| format!("{k}={v:?} is not a positive integer"))?,
        None => dflt,
    };
    match v <= max {
        true => Ok(v),
        false => Err(format!("{k}={v} is past its limit: at most {max}")),
    }
}

/// Variable `k` as `var` answers it, when it may be absent: unset, empty
/// or 0 is `None`, else as [`bounded_var`].
fn optional_var(
    var: &impl Fn(&str) -> Option<String>,
    k: &str,
    max: i64,
) -> Result<Option<i64>, String> {
    match var(k) {
        Some(v) if matches!(v.trim(), "" | "0") => Ok(None),
        Some(_) => bounded_var(var, k, 0, max).map(Some),
        None => Ok(None),
    }
}

/// Variable `k` as `var` answers it: `true`/`1`, `false`/`0`/empty, or
/// `dflt` when unset.
///
/// Errors: any other value.
fn flag_var(var: &impl Fn(&str) -> Option<String>, k: &str, dflt: bool) -> Result<bool, String> {
    match var(k) {
        Some(v) => match v.trim() {
            "true" | "1" => Ok(true),
            "false" | "0" | "" => Ok(false),
            _ => Err(format!("{k}={v:?} is not true or false")),
        },
        None => Ok(dflt),
    }
}

impl Default for DecisionSettings {
    fn default() -> Self {
        DecisionSettings {
            attempt_seconds: 120,
            timeout_seconds: 300,
            max_refusals: crate::decider::DEFAULT_MAX_REFUSALS,
        }
    }
}

/// When a stored plan is split into parts, bytes (docs/design.md § 2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanParting {
    /// Largest plan item stored whole, bytes as DynamoDB sizes an item
    /// (default [`crate::write::size::MAX_ITEM_BYTES`], DynamoDB's limit).
    pub whole_max: usize,
    /// Largest serialized activity list of one part, bytes (default
    /// [`crate::plan::PLAN_PART_BYTES`]). It is part of the parts' digest,
    /// so a start resumed with another budget never writes over parts
    /// sliced differently.
    pub part_max: usize,
}

impl Default for PlanParting {
    fn default() -> Self {
        PlanParting {
            whole_max: crate::write::size::MAX_ITEM_BYTES,
            part_max: crate::plan::PLAN_PART_BYTES,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            table_prefix: crate::keys::DEFAULT_TABLE_PREFIX.into(),
            default_heartbeat_timeout_seconds: 300,
            relaunch_after_seconds: 120,
            launch_event_age_seconds: None,
            max_launch_attempts: 3,
            default_start_to_close_seconds: 3600,
            cancel_grace_seconds: 300,
            report_grace_seconds: 10,
            monitor_lookahead_seconds: 0,
            settle_grace_seconds: 60,
            start_retry_seconds: 60,
            max_start_attempts: 5,
            default_schedule_to_start_seconds: None,
            default_schedule_to_close_seconds: None,
            require_tokens: false,
            concurrency: 16,
            row_retention_seconds: None,
            record_launches: false,
            join_group_size: crate::plan::JOIN_GROUP_SIZE,
            fan_out_list_max: crate::plan::FAN_OUT_LIST_MAX,
            launch_targets: crate::targets::LaunchTargets::default(),
            plan_parting: PlanParting::default(),
            decisions: DecisionSettings::default(),
            max_tree_executions: 100_000,
        }
    }
}

/// Lambda's default `MaximumEventAgeInSeconds` for async invokes, and its
/// largest: 6 hours ("Configuring error handling settings for Lambda
/// asynchronous invocations", AWS Lambda developer guide).
pub const AWS_DEFAULT_EVENT_AGE_SECONDS: i64 = 21_600;

/// The most a deployment may let one workflow tree start below its root
/// (`WHIMBREL_MAX_TREE_EXECUTIONS`): a bound on what one start may cost,
/// whatever its plans and deciders do (children × depth, and child
/// chains continued as new).
pub const MAX_TREE_EXECUTIONS: u64 = 1_000_000;

/// Launches of one attempt, at most (`WHIMBREL_MAX_LAUNCH_ATTEMPTS`):
/// each adds an entry to the activity's history, whose room per attempt
/// is kept at the start ([`crate::history::ATTEMPT_HISTORY_BYTES`]).
pub const MAX_LAUNCH_ATTEMPTS: u32 = 5;

impl EngineConfig {
    /// How long a launched attempt may stay QUEUED (no PREPARING or RUNNING
    /// report) before it is launched again, seconds: the relaunch window,
    /// never shorter than the launch targets' event age. Lambda keeps an
    /// async invoke of a throttled function queued that long and may still
    /// run it; relaunching sooner gave a wide fan-out at its concurrency
    /// limit three launches per attempt and `NOT_STARTED` failures, though
    /// every launch would have run.
    pub fn relaunch_window_seconds(&self) -> i64 {
        self.relaunch_after_seconds
            .max(self.launch_event_age_seconds.unwrap_or(0))
    }

    /// Settings from `WHIMBREL_*` environment variables, defaults otherwise.
    ///
    /// Errors: a variable that is set but not a positive integer (or, for
    /// `WHIMBREL_REQUIRE_TOKENS`, not `true` / `false`).
    pub fn from_env() -> Result<Self, String> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// Settings from `WHIMBREL_*` variables as `var` answers them (`None`:
    /// unset), defaults otherwise: [`Self::from_env`] without the
    /// environment.
    ///
    /// Errors: as [`Self::from_env`].
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let d = EngineConfig::default();
        let num = |k: &str, dflt: i64| positive_var(&var, k, dflt);
        let optional = |k: &str| optional_var(&var, k, i64::MAX);
        let count =
            |k: &str, dflt: u32| num(k, i64::from(dflt)).map(|v| v.try_into().unwrap_or(u32::MAX));
        let hb = crate::plan::MAX_HEARTBEAT_TIMEOUT_SECONDS;
        let bounded = |k: &str, dflt: i64, max: i64| bounded_var(&var, k, dflt, max);
        let optional_within = |k: &str, max: i64| optional_var(&var, k, max);
        let flag = |k: &str, dflt: bool| flag_var(&var, k, dflt);
        // Required unless the operator says otherwise (docs/contract.md § 2).
        let require_tokens = flag("WHIMBREL_REQUIRE_TOKENS", true)?;
        Ok(EngineConfig {
            table_prefix: var("WHIMBREL_TABLE_PREFIX").unwrap_or(d.table_prefix),
            default_heartbeat_timeout_seconds: bounded(
                "WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS",
                d.default_heartbeat_timeout_seconds,
                hb,
            )?,
            relaunch_after_seconds: num(
                "WHIMBREL_QUEUED_REDRIVE_SECONDS",
                d.relaunch_after_seconds,
            )?,
            launch_event_age_seconds: match var("WHIMBREL_LAUNCH_EVENT_AGE_SECONDS") {
                None => Some(AWS_DEFAULT_EVENT_AGE_SECONDS),
                Some(_) => optional("WHIMBREL_LAUNCH_EVENT_AGE_SECONDS")?,
            },
            max_launch_attempts: bounded(
                "WHIMBREL_MAX_LAUNCH_ATTEMPTS",
                i64::from(d.max_launch_attempts),
                i64::from(MAX_LAUNCH_ATTEMPTS),
            )? as u32,
            default_start_to_close_seconds: bounded(
                "WHIMBREL_START_TO_CLOSE_SECONDS",
                d.default_start_to_close_seconds,
                hb,
            )?,
            cancel_grace_seconds: num("WHIMBREL_CANCEL_GRACE_SECONDS", d.cancel_grace_seconds)?,
            report_grace_seconds: num("WHIMBREL_REPORT_GRACE_SECONDS", d.report_grace_seconds)?,
            monitor_lookahead_seconds: num(
                "WHIMBREL_MONITOR_LOOKAHEAD_SECONDS",
                d.monitor_lookahead_seconds,
            )?,
            settle_grace_seconds: d.settle_grace_seconds,
            start_retry_seconds: num("WHIMBREL_START_RETRY_SECONDS", d.start_retry_seconds)?,
            max_start_attempts: count("WHIMBREL_MAX_START_ATTEMPTS", d.max_start_attempts)?,
            default_schedule_to_start_seconds: optional_within(
                "WHIMBREL_SCHEDULE_TO_START_SECONDS",
                crate::plan::MAX_TIMEOUT_SECONDS,
            )?,
            default_schedule_to_close_seconds: optional_within(
                "WHIMBREL_SCHEDULE_TO_CLOSE_SECONDS",
                crate::plan::MAX_TIMEOUT_SECONDS,
            )?,
            require_tokens,
            concurrency: d.concurrency,
            row_retention_seconds: optional("WHIMBREL_ROW_RETENTION_DAYS")?
                .map(|days| days.saturating_mul(86_400)),
            record_launches: flag("WHIMBREL_RECORD_LAUNCHES", d.record_launches)?,
            join_group_size: d.join_group_size,
            fan_out_list_max: d.fan_out_list_max,
            launch_targets: crate::targets::LaunchTargets::from_vars(&var),
            plan_parting: d.plan_parting,
            decisions: DecisionSettings::from_vars(&var)?,
            max_tree_executions: bounded(
                "WHIMBREL_MAX_TREE_EXECUTIONS",
                d.max_tree_executions as i64,
                MAX_TREE_EXECUTIONS as i64,
            )? as u64,
        })
    }

    /// The `expires_at_epoch` (epoch seconds) of a write-once row written
    /// at `now_epoch`: `now + row_retention_seconds`, or `None` (no
    /// attribute: the row is kept) when retention is off. DynamoDB TTL on
    /// that attribute deletes the row some time after (docs/tables.md).
    pub fn row_expiry(&self, now_epoch: i64) -> Option<i64> {
        self.row_retention_seconds
            .map(|s| now_epoch.saturating_add(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_requires_tokens_unless_told_otherwise() {
        let none = EngineConfig::from_vars(|_| None).unwrap();
        assert!(none.require_tokens);
        let off = |k: &str| (k == "WHIMBREL_REQUIRE_TOKENS").then(|| "false".to_string());
        assert!(!EngineConfig::from_vars(off).unwrap().require_tokens);
        let bad = |k: &str| (k == "WHIMBREL_REQUIRE_TOKENS").then(|| "maybe".to_string());
        assert!(EngineConfig::from_vars(bad).is_err());
    }

    /// Issue 42 D (docs/limits.md, Open 12): a deployment's defaults are
    /// bounded as a plan's fields are, and launches per attempt as the
    /// history's room assumes; each accepted at its bound and refused
    /// just past it, with the reason.
    #[test]
    fn a_deployments_timeouts_and_launches_are_bounded_as_plans_are() {
        use crate::plan::{MAX_HEARTBEAT_TIMEOUT_SECONDS as HB, MAX_TIMEOUT_SECONDS as TO};
        let cases = [
            ("WHIMBREL_HEARTBEAT_TIMEOUT_SECONDS", HB),
            ("WHIMBREL_START_TO_CLOSE_SECONDS", HB),
            ("WHIMBREL_SCHEDULE_TO_START_SECONDS", TO),
            ("WHIMBREL_SCHEDULE_TO_CLOSE_SECONDS", TO),
            (
                "WHIMBREL_MAX_LAUNCH_ATTEMPTS",
                i64::from(MAX_LAUNCH_ATTEMPTS),
            ),
            ("WHIMBREL_MAX_TREE_EXECUTIONS", MAX_TREE_EXECUTIONS as i64),
        ];
        for (var, max) in cases {
            let at = move |k: &str| (k == var).then(|| max.to_string());
            assert!(EngineConfig::from_vars(at).is_ok(), "{var}={max}");
            let past = move |k: &str| (k == var).then(|| (max + 1).to_string());
            let why = EngineConfig::from_vars(past).unwrap_err();
            assert!(
                why.contains(var) && why.contains(&format!("at most {max}")),
                "{why}"
            );
        }
    }

    #[test]
    fn a_deployment_waits_the_targets_event_age_before_a_relaunch() {
        let none = EngineConfig::from_vars(|_| None).unwrap();
        assert_eq!(
            none.relaunch_window_seconds(),
            AWS_DEFAULT_EVENT_AGE_SECONDS,
            "told nothing, a deployment assumes Lambda's default queue age"
        );
        let age = |v: &'static str| {
            move |k: &str| (k == "WHIMBREL_LAUNCH_EVENT_AGE_SECONDS").then(|| v.to_string())
        };
        let short = EngineConfig::from_vars(age("60")).unwrap();
        assert_eq!(short.launch_event_age_seconds, Some(60));
        assert_eq!(
            short.relaunch_window_seconds(),
            120,
            "never below the window"
        );
        let long = EngineConfig::from_vars(age("900")).unwrap();
        assert_eq!(long.relaunch_window_seconds(), 900);
        let off = EngineConfig::from_vars(age("0")).unwrap();
        assert_eq!(off.relaunch_window_seconds(), off.relaunch_after_seconds);
        assert!(EngineConfig::from_vars(age("soon")).is_err());
    }
}
