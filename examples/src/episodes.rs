//! The episodic examples (design.md § 10, issue 24): deciders consulted as
//! the workflow runs, written with `whimbrel_core::deciding`, and the one
//! activity their Lambda nodes run (`episode-step`). One decider function
//! (`episodes-decider`) serves the four workflows, by workflow name:
//!
//! * `images`: the Flow framework's image processing. Each image's
//!   `download-i` runs on the shared task list `images` and returns the
//!   task list of the host that holds the file; its `thumbnail-i` is
//!   scheduled on that list, so it runs on the same host.
//! * `polling`: check a status; if it is not ready, wait 2 s and check
//!   again (the status is ready on the fifth check).
//! * `orders`: price an order; over 100 it waits for an `approve` signal,
//!   under it ships at once.
//! * `marathon`: one step per episode, continuing as new every 50
//!   episodes, until `total` episodes (input `{"total": 500}`).

use serde_json::{json, Value};
use whimbrel_core::decider::{Decision, DecisionRequest, DecisionsAnswer};
use whimbrel_core::deciding::{
    decisions, ended, lambda_node, schedule, signal_node, task_node, timer_node, Decider,
};
use whimbrel_core::plan::DeciderRequest;

/// The activity Lambda of the examples' Lambda nodes.
pub const STEP_LAMBDA: &str = "episode-step";

/// Episodes per execution of `marathon` before it continues as new.
pub const EPISODES_PER_EXECUTION: u64 = 50;

/// The decider of workflow `name`, or `None` for a name it does not know.
pub fn decider_for(name: &str, step_lambda: &str) -> Option<Box<dyn Decider>> {
    let step = step_lambda.to_string();
    match name {
        "images" => Some(Box::new(Images)),
        "polling" => Some(Box::new(Polling { step })),
        "orders" => Some(Box::new(Orders { step })),
        "marathon" => Some(Box::new(Marathon { step })),
        _ => None,
    }
}

/// A failed node fails the workflow with its reason.
fn failure(request: &DecisionRequest) -> Option<DecisionsAnswer> {
    let failed = ended(request).find(|e| e.state.is_some_and(|s| s.as_str() != "COMPLETED"))?;
    let reason = format!(
        "{} ended {}: {}",
        failed.node.as_deref().unwrap_or("?"),
        failed.state.map_or("?", |s| s.as_str()),
        failed.reason.as_deref().unwrap_or("")
    );
    Some(decisions(vec![Decision::FailWorkflow { reason }]))
}

/// Image processing: `download-i` on the shared list, `thumbnail-i` on
/// the list the download returned; complete when no node is open.
struct Images;

impl Decider for Images {
    fn start(&self, request: &DeciderRequest) -> DecisionsAnswer {
        let n = request.input["images"].as_u64().unwrap_or(1);
        let downloads = (0..n)
            .map(|i| task_node(&format!("download-{i}"), "images", json!({"image": i})))
            .collect();
        decisions(vec![Decision::Schedule {
            activities: downloads,
        }])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        if let Some(failed) = failure(request) {
            return failed;
        }
        let mut out = vec![];
        for e in ended(request) {
            let node = e.node.as_deref().unwrap_or_default();
            let Some(i) = node.strip_prefix("download-") else {
                continue;
            };
            let output = e.output.clone().unwrap_or(Value::Null);
            let host_list = output["task_list"].as_str().unwrap_or("images");
            let input = json!({"image": i, "downloaded_by": output["host"]});
            out.push(schedule(task_node(
                &format!("thumbnail-{i}"),
                host_list,
                input,
            )));
        }
        if out.is_empty() && request.open.is_empty() {
            out.push(Decision::CompleteWorkflow {
                result: json!({"thumbnails": "done"}),
            });
        }
        decisions(out)
    }
}

/// Check, wait 2 s, check again, until the status is ready.
struct Polling {
    step: String,
}

impl Decider for Polling {
    fn start(&self, _: &DeciderRequest) -> DecisionsAnswer {
        let check = lambda_node("check-1", &self.step, json!({"check": 1}));
        decisions(vec![schedule(check)])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        if let Some(failed) = failure(request) {
            return failed;
        }
        let mut out = vec![];
        for e in ended(request) {
            let node = e.node.as_deref().unwrap_or_default();
            if let Some(k) = node.strip_prefix("check-") {
                let ready = e.output.as_ref().and_then(|o| o["ready"].as_bool());
                if ready == Some(true) {
                    let result = json!({"checks": k.parse::<u64>().unwrap_or(0)});
                    return decisions(vec![Decision::CompleteWorkflow { result }]);
                }
                out.push(schedule(timer_node(&format!("wait-{k}"), 2)));
            } else if let Some(k) = node.strip_prefix("wait-") {
                let next = k.parse::<u64>().unwrap_or(0) + 1;
                let input = json!({"check": next});
                out.push(schedule(lambda_node(
                    &format!("check-{next}"),
                    &self.step,
                    input,
                )));
            }
        }
        decisions(out)
    }
}

/// Price, then an approval over 100, then ship.
struct Orders {
    step: String,
}

impl Decider for Orders {
    fn start(&self, request: &DeciderRequest) -> DecisionsAnswer {
        let price = lambda_node("price", &self.step, request.input.clone());
        decisions(vec![schedule(price)])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        if let Some(failed) = failure(request) {
            return failed;
        }
        let mut out = vec![];
        for e in ended(request) {
            let total = e.output.as_ref().and_then(|o| o["total"].as_f64());
            match e.node.as_deref() {
                Some("price") if total.unwrap_or(0.0) > 100.0 => {
                    out.push(schedule(signal_node("approval", "approve")));
                }
                Some("price") | Some("approval") => {
                    let ship = lambda_node("ship", &self.step, json!({"ship": true}));
                    out.push(schedule(ship));
                }
                Some("ship") => out.push(Decision::CompleteWorkflow {
                    result: json!({"shipped": true, "approved": request.markers.get("approved")}),
                }),
                _ => {}
            }
            if e.node.as_deref() == Some("approval") {
                let by = e.output.clone().unwrap_or(Value::Null);
                out.push(Decision::RecordMarker {
                    name: "approved".into(),
                    details: by,
                });
            }
        }
        decisions(out)
    }
}

/// One step per episode; continue as new every
/// [`EPISODES_PER_EXECUTION`]; complete at `total`.
struct Marathon {
    step: String,
}

impl Marathon {
    fn step_node(&self, episode: u64) -> Decision {
        let input = json!({"episode": episode});
        schedule(lambda_node(&format!("step-{episode}"), &self.step, input))
    }
}

impl Decider for Marathon {
    fn start(&self, request: &DeciderRequest) -> DecisionsAnswer {
        let first = request.input["episode"].as_u64().unwrap_or(0);
        decisions(vec![self.step_node(first)])
    }

    fn decide(&self, request: &DecisionRequest) -> DecisionsAnswer {
        if let Some(failed) = failure(request) {
            return failed;
        }
        let total = request.input["total"].as_u64().unwrap_or(500);
        let Some(done) = ended(request)
            .filter_map(|e| {
                e.node
                    .as_deref()?
                    .strip_prefix("step-")?
                    .parse::<u64>()
                    .ok()
            })
            .max()
        else {
            return decisions(vec![]);
        };
        let next = done + 1;
        let last = if next >= total {
            Decision::CompleteWorkflow {
                result: json!({"episodes": next}),
            }
        } else if next % EPISODES_PER_EXECUTION == 0 {
            Decision::ContinueAsNew {
                input: json!({"episode": next, "total": total}),
            }
        } else {
            return decisions(vec![self.step_node(next)]);
        };
        decisions(vec![last])
    }
}

/// What `episode-step` answers for node `name` with `input`: a status
/// ready on the fifth check, an order's total, or an echo.
pub fn step_output(name: &str, input: &Value) -> Value {
    if name.starts_with("check-") {
        let check = input["check"].as_u64().unwrap_or(0);
        return json!({"check": check, "ready": check >= 5});
    }
    if name == "price" {
        let items = input["items"].as_f64().unwrap_or(1.0);
        return json!({"total": items * 25.0});
    }
    json!({"done": name, "input": input})
}

#[cfg(test)]
mod tests {
    use super::*;
    use whimbrel_core::decider::{EventKind, EventView};

    fn ended_event(seq: u64, node: &str, output: Value) -> EventView {
        let mut e = EventView::new(seq, EventKind::ActivityEnded, 0);
        e.node = Some(node.into());
        e.state = Some(whimbrel_core::contract::ActivityState::Completed);
        e.output = Some(output);
        e
    }

    fn request(input: Value, events: Vec<EventView>) -> DecisionRequest {
        let mut r = DecisionRequest::new("w::1", "w", "w::1::d1::a1", input);
        r.events = events;
        r
    }

    #[test]
    fn a_thumbnail_runs_on_the_list_its_download_returned() {
        let out = json!({"host": "a", "task_list": "host-a"});
        let answer = Images.decide(&request(
            Value::Null,
            vec![ended_event(1, "download-3", out)],
        ));
        let Decision::Schedule { activities } = &answer.decisions[0] else {
            panic!("{answer:?}");
        };
        assert_eq!(activities[0].name, "thumbnail-3");
        assert_eq!(activities[0].task_list.as_deref(), Some("host-a"));
    }

    #[test]
    fn the_marathon_continues_as_new_every_fifty_and_ends_at_its_total() {
        let m = Marathon { step: "s".into() };
        let input = json!({"total": 500});
        let at = |k: u64| {
            m.decide(&request(
                input.clone(),
                vec![ended_event(1, &format!("step-{k}"), json!({}))],
            ))
        };
        assert!(matches!(at(48).decisions[0], Decision::Schedule { .. }));
        assert!(matches!(
            at(49).decisions[0],
            Decision::ContinueAsNew { .. }
        ));
        assert!(matches!(
            at(499).decisions[0],
            Decision::CompleteWorkflow { .. }
        ));
    }
}
