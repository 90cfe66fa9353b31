//! Whimbrel's rules, with no I/O: what the engine decides, as data.
//!
//! The engine's executor (`whimbrel-core`) reads items, hands them with
//! one input and the time to a rule here, and performs what comes back:
//! typed conditional writes ([`write::UpdateRequest`], [`write::Write`])
//! and verdicts. Nothing here talks to AWS, spawns a task or reads a clock
//! on a decision's path, so every rule is tested as a plain function.
//!
//! * [`attr`]: the stored attribute names, defined once
//! * [`contract`]: the states × transitions table (contract: Transitions)
//! * [`kind`]: what runs a plan node (a Lambda, a task list, a timer)
//! * [`ids`], [`keys`], [`dates`]: id, key, table and date formats
//! * [`plan`], [`model`], [`history`]: JSON shapes and stored items
//! * [`retry`]: retry policies and backoff
//! * [`payloads`]: which payloads stay on the activity item
//! * [`schema`]: the tables, their keys, GSIs and streams
//! * [`config`]: the engine's settings
//! * [`mod@write`]: typed conditions and updates, with DynamoDB's semantics
//!   ([`write::eval`]) and item sizes ([`write::size`])
//! * [`decider`]: an episodic decider's answer, and when it is refused
//! * [`decide`]: the pure decisions: transitions, claims, launches,
//!   retries, deadlines and monitor verdicts, and the items of a plan

#![warn(missing_docs)]

pub mod attr;
pub mod config;
pub mod contract;
pub mod dates;
pub mod decide;
pub mod decider;
pub mod history;
pub mod ids;
pub mod keys;
pub mod kind;
pub mod model;
pub mod payloads;
pub mod plan;
pub mod retry;
pub mod schema;
pub mod targets;
pub mod write;
