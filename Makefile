# Whimbrel: every target sets up what it needs (venv, DynamoDB Local, build) on first use.
.PHONY: demo demo-failure up down test check lint bench bench-monitor torture fuzz clean-stack sam-build

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

## The inner loop (90 s after a one-line change to the rules): the rules' and the engine's tests
## against DynamoDB Local, and 100 simulation schedules.
check:
	bash scripts/check.sh

## 10,000 seeded simulation schedules under faults (WHIMBREL_SIM_SEED=n replays one).
torture:
	cargo run -q --locked -p whimbrel-sim -- --schedules $${WHIMBREL_SIM_SCHEDULES:-10000}

## Fuzz the core with cargo-fuzz, so that no input from a stream, a worker
## or a decider can panic the engine: each target in turn for FUZZ_SECONDS
## (default 600). Not run by `make test` nor CI (CI only checks that the
## targets compile): it needs the nightly toolchain and cargo-fuzz (`cargo
## install cargo-fuzz --locked`), and builds the separate fuzz/ workspace
## into fuzz/target. A crash is kept in fuzz/artifacts/<target>/ and the
## other targets still run; the exit status says whether any target crashed.
## FUZZ_TARGETS=plan_validate runs one.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= stream_record apply_event plan_validate
fuzz:
	@status=0; for t in $(FUZZ_TARGETS); do \
	  dict=; [ -f fuzz/dicts/$$t.dict ] && dict=-dict=$(CURDIR)/fuzz/dicts/$$t.dict; \
	  echo "== cargo fuzz run $$t for $(FUZZ_SECONDS)s"; \
	  cargo +nightly fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$dict || status=1; \
	done; exit $$status

## Everything CI checks before `make test` (.ci/run calls this target):
## - fmt and clippy;
## - rustdoc with warnings denied: the docs name the code they describe, so a
##   broken or private intra-doc link fails, and the docs cannot drift;
## - the fuzz targets' compile check: fuzz/ is its own workspace that nothing
##   else builds, so type-check it on stable to keep it compiling against the
##   engine (fuzzing itself needs nightly and runs as long as it is given:
##   `make fuzz`);
## - cargo-deny (deny.toml): licenses, crates.io the only source, no wildcard
##   versions. Advisories need the RustSec git database, which CI cannot
##   reach: run `cargo deny check advisories` where the network allows it.
lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked
	cargo check --manifest-path fuzz/Cargo.toml --bins --locked
	bash scripts/venv.sh
	.local/venv/bin/cargo-deny --locked check --hide-inclusion-graph bans licenses sources

## Cost and latency figures on the local stack (not part of the tests).
bench:
	bash scripts/bench.sh

## One monitor tick over 100,000 RUNNING activities, 10 stale: what it reads
## (BENCH_MONITOR_ACTIVITIES, BENCH_MONITOR_STALE; not part of the tests).
bench-monitor:
	bash scripts/bench-monitor.sh

## Build the stack for `sam deploy`, for this host's architecture (outside CI:
## needs the SAM CLI, cargo-lambda and zig on PATH, and network access).
sam-build:
	sam build --beta-features --parameter-overrides Architecture=$$(uname -m | sed 's/aarch64/arm64/')
