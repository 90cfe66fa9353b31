# Whimbrel: every target sets up what it needs (venv, DynamoDB Local, build) on first use.
.PHONY: demo demo-failure up down test lint bench torture clean-stack sam-build

## The main job: a real wordcount workflow end to end on the local stack.
demo:
	bash scripts/demo.sh

## One `count` fails: merge CANCELLED, workflow FAILED.
demo-failure:
	bash scripts/demo.sh --failure

## Start the local stack in the background (DynamoDB Local, cargo lambda watch, whimbrel local).
up:
	bash scripts/stack.sh up

## Stop exactly the processes `make up` started.
down:
	bash scripts/stack.sh down

## Every test: unit, against DynamoDB Local, template lint, end to end.
test:
	bash scripts/test.sh

## 10,000 seeded simulation schedules under faults (WHIMBREL_SIM_SEED=n replays one).
torture:
	cargo run -q -p whimbrel-sim -- --schedules $${WHIMBREL_SIM_SCHEDULES:-10000}

## fmt + clippy, as CI runs them.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## Cost and latency figures on the local stack (not part of the tests).
bench:
	bash scripts/bench.sh

## Build the stack for `sam deploy`, for this host's architecture (outside CI:
## needs the SAM CLI, cargo-lambda and zig on PATH, and network access).
sam-build:
	sam build --beta-features --parameter-overrides Architecture=$$(uname -m | sed 's/aarch64/arm64/')
